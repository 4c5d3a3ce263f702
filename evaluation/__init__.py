"""The immutable evaluation harness.

Public API (everything else is internal):

    load_problem(spec, device="cpu", overrides=None, timed=None, dtypes=None, tolerance="strict") -> ProblemInfo
        spec: a built-in name ("layernorm") or a path to a KernelBench-style file; timed: case ids
        ("M=4096,N=4096|bfloat16") that become the only cases tagged "timed" (ProblemError if unknown);
        tolerance: "strict" or "kernelbench" (atol = rtol = 1e-2).
    list_problems(device="cpu") -> list[ProblemInfo]       the built-in problems
    evaluate(source, problem, *, device="auto", timeout_s=120.0, trials=3, time_it=True,
             overrides=None, seed=None, baselines=("eager", "torch_compile"), sandbox=None) -> EvalResult
        static_check -> compile -> correctness -> timing; candidate code runs in sandboxed worker
        processes (sandbox: "auto" | "required" | "off"; None reads $KSCOUT_SANDBOX, else auto).
    time_many([(source, checked_result), ...], problem, *, device="auto", timeout_s=120.0,
              baselines=..., seed=None, sandbox=None, trials=None) -> list[EvalResult]
        the timing stage for candidates that passed evaluate(..., time_it=False), in one process
        against one measurement of each baseline per case (siblings compared on equal terms); the
        baselines run in a process of their own, and every timed output is judged.
    remeasure(sources, problem, *, device="auto", rounds=5, timeout_s=600, baselines=("eager",),
              sandbox=None) -> RemeasureResult
    evaluate, time_many and remeasure take `context=` an evaluation.context.SearchContext: one search's
        secret seed, references, kept reference outputs, baselines and compiled kernels, shared by all
        its candidates (the local executor keeps one per problem). Warm workers: evaluation.pool
        ($KSCOUT_WARM_WORKERS); judged outputs as files: $KSCOUT_OUTPUT_TRANSPORT=file (protocol.py).
    fingerprint(device="auto") -> Fingerprint
    resolve_device("auto" | "cpu" | "cuda") -> "cpu" | "cuda"

This package imports nothing else of kernelscout and never writes to the store. `evaluate` and
`remeasure` are loaded on first use, so importing `evaluation` (for its records and errors) stays cheap.
"""

from evaluation.fingerprint import fingerprint, resolve_device  # noqa: F401
from evaluation.problem import list_problems, load_problem  # noqa: F401
from evaluation.records import (  # noqa: F401
    Baseline,
    EvalResult,
    Fingerprint,
    KernelInfo,
    Mismatch,
    ProblemInfo,
    RemeasuredCandidate,
    RemeasuredCase,
    RemeasureResult,
    ShapeCase,
    ShapeResult,
    Speedup,
    Stage,
    Status,
    TimedCase,
    TimingStats,
    Tolerance,
    source_sha256,
)

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("evaluate", "remeasure", "time_many"):
        from evaluation import harness

        return getattr(harness, name)
    raise AttributeError(f"module 'evaluation' has no attribute {name!r}")
