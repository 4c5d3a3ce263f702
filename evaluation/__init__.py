"""The immutable evaluation harness.

Public API (everything else is internal):

    load_problem(spec, device="cpu", overrides=None) -> ProblemInfo
        spec: a built-in name ("layernorm") or a path to a KernelBench-style file.
    list_problems() -> list[ProblemInfo]                 the built-in problems
    evaluate(source, problem, device="auto", timeout_s=..., trials=3, time_it=True) -> EvalResult
        runs static_check -> compile -> correctness -> timing in separate processes.
    fingerprint(device="auto") -> Fingerprint

This package imports nothing else of kernelscout and never writes to the store.
"""

from evaluation.records import (  # noqa: F401
    Baseline,
    EvalResult,
    Fingerprint,
    KernelInfo,
    Mismatch,
    ProblemInfo,
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
