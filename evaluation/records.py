"""Typed results of the evaluator.

Everything the evaluator says crosses a process boundary (worker -> harness) and a package boundary
(evaluation -> agent -> store), so each record is a frozen pydantic model that refuses unknown fields.
Units live in field names (`latency_ms_p50`, `bytes_moved`); nothing is rounded here.
"""

from __future__ import annotations

import enum
from typing import Optional

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    # NaN/Inf errors (a candidate that writes NaN) serialize as "NaN"/"Infinity" strings: the JSON stays
    # valid for jq and still validates back into floats.
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")


class Status(str, enum.Enum):
    """Verdict of one evaluation. Only `passed` means the candidate computes the reference."""

    passed = "passed"
    compile_error = "compile_error"
    incorrect = "incorrect"
    rejected = "rejected"  # a cheat: no Triton launch, PyTorch compute, mutated inputs, patched harness
    crashed = "crashed"  # the candidate's process died or raised outside compilation
    timed_out = "timed_out"
    # The Triton interpreter (CPU) ran out of the evaluation's time while every trial it judged had
    # passed: says nothing about the kernel, so it is neither a pass nor a failure pattern.
    not_judged = "not_judged"


class Stage(str, enum.Enum):
    static_check = "static_check"
    compile = "compile"
    correctness = "correctness"
    timing = "timing"


class Fingerprint(Record):
    """The environment an evaluation ran on. Every evaluation row points at one."""

    device_kind: str  # "cpu" | "cuda" | "rocm"
    device_name: str  # "NVIDIA H200", "cpu (triton interpreter)"
    arch: str  # "sm_90", "gfx942", "cpu"
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    hip_version: Optional[str] = None
    triton_version: str
    torch_version: str
    python_version: str
    kernelscout_version: str
    triton_interpret: bool = False

    def key(self) -> str:
        """Stable id of this environment (sha256 of the canonical JSON, first 16 hex digits)."""
        import hashlib

        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


class ShapeCase(Record):
    """One declared point of a problem's shape/dtype set."""

    case_id: str  # e.g. "M=4096,N=4099|bfloat16"
    params: dict[str, int]  # the module-level constants bound for this case
    dtype: str  # torch dtype name for floating inputs: "float32", "bfloat16", "float16"
    tags: tuple[str, ...] = ()  # "representative", "edge", "largest", "timed", "shipped", "big", "launch_only"


class Mismatch(Record):
    index: tuple[int, ...]
    expected: float
    actual: float
    output_index: int = 0  # which output of a tuple-returning model the index refers to


class ShapeResult(Record):
    """Correctness of one shape case across all trials (the worst trial is what is reported)."""

    case_id: str
    params: dict[str, int]
    dtype: str
    passed: bool
    trials: int
    seeds: tuple[int, ...]
    atol: float
    rtol: float
    max_abs_error: Optional[float] = None
    max_rel_error: Optional[float] = None
    mismatch_count: int = 0
    numel: int = 0
    first_mismatch: Optional[Mismatch] = None
    output_shape: Optional[tuple[int, ...]] = None
    output_dtype: Optional[str] = None
    message: Optional[str] = None  # why it failed, in one line


class TimingStats(Record):
    latency_ms_p20: float
    latency_ms_p50: float
    latency_ms_p80: float
    latency_ms_min: float
    latency_ms_mean: float
    n_samples: int
    n_warmup: int
    l2_flushed: bool
    method: str  # "cuda_graph" | "cuda_events"


class Baseline(Record):
    name: str  # "eager" | "torch_compile"
    timing: Optional[TimingStats] = None
    error: Optional[str] = None  # why this baseline has no timing (e.g. torch.compile failed)


class Speedup(Record):
    """Baseline p50 over candidate p50, with a conservative interval from the p20/p80 spreads."""

    baseline: str
    ratio: float
    ratio_low: float  # baseline p20 / candidate p80
    ratio_high: float  # baseline p80 / candidate p20
    significant: bool  # the interval excludes 1.0


BASELINES = ("eager", "torch_compile")  # what a timing measures a candidate against by default; eager always
# Every baseline a caller may ask for. max-autotune (without CUDA graphs) compiles for minutes on large
# shapes: it is timed only where it compiles within a cap, and a timeout is recorded as its error.
ALL_BASELINES = ("eager", "torch_compile", "torch_compile_max_autotune")


class TimedCase(Record):
    case_id: str
    params: dict[str, int]
    dtype: str
    candidate: TimingStats
    baselines: tuple[Baseline, ...]
    speedups: tuple[Speedup, ...]
    bytes_moved: Optional[int] = None
    flops: Optional[int] = None
    achieved_gbps: Optional[float] = None
    achieved_tflops: Optional[float] = None
    pct_of_ceiling: Optional[float] = None  # achieved GB/s over the measured copy bandwidth, in %


class KernelInfo(Record):
    """What Triton reports about one compiled kernel (None where the backend gives nothing)."""

    name: str
    n_regs: Optional[int] = None
    n_spills: Optional[int] = None
    shared_bytes: Optional[int] = None
    num_warps: Optional[int] = None
    num_stages: Optional[int] = None


class WeightMatch(Record):
    """One candidate tensor and the reference tensor loaded into it."""

    candidate: str  # the candidate's parameter, buffer or tensor attribute name
    reference: str
    how: str  # "name", "suffix" (same last name part), "shape" (the only one of its shape), "order"
    # (same shape, matched in declaration order), "transposed" (the only one of the transposed shape)
    shape: tuple[int, ...]


class WeightBinding(Record):
    """How the reference's weights were mapped onto the candidate (evaluation/binding.py)."""

    loaded: bool  # every reference parameter reached the candidate, and every candidate parameter got one
    method: str  # "exact" (same names and shapes), "matched", "partial", "none" (no weights on either side)
    matches: tuple[WeightMatch, ...] = ()
    unmatched_reference: tuple[str, ...] = ()  # reference tensors the candidate has no place for
    unmatched_candidate: tuple[str, ...] = ()  # candidate tensors left at their own initialisation
    message: str  # one line for humans and prompts


class EvalResult(Record):
    """One candidate on one environment: the evaluator's whole verdict."""

    schema_version: int = 1
    status: Status
    failed_stage: Optional[Stage] = None
    error_class: Optional[str] = None  # exception class name or a cheat code, e.g. "NoTritonLaunch"
    message: Optional[str] = None  # one line for humans and prompts
    stderr_tail: str = ""  # last few KB of the candidate process's stderr
    candidate_sha256: str
    problem_id: str
    problem_name: str
    device: str  # "cpu" | "cuda"
    shape_results: tuple[ShapeResult, ...] = ()
    timing: tuple[TimedCase, ...] = ()
    timing_note: Optional[str] = None  # e.g. "not measured on this device (cpu, Triton interpreter)"
    ceiling_gbps: Optional[float] = None
    kernels: tuple[KernelInfo, ...] = ()
    triton_launches: int = 0
    seeds: tuple[int, ...] = ()
    fingerprint: Fingerprint
    started_at: str  # ISO-8601 UTC
    duration_s: float
    # How the candidate's process was isolated: "bwrap" (the OS sandbox) or "none"; None on a record
    # made before isolation was recorded. The approval gate refuses evidence that was not sandboxed.
    isolation: Optional[str] = None
    # PyTorch ops the candidate ran in forward: the small epilogue (issue 17: a reduction of its own
    # Triton outputs, e.g. "sum"), and any other PyTorch compute (issue 25: allowed where the Triton
    # kernels do the problem's work; the kernel is then a hybrid, labelled, and a ranking or a promotion
    # can leave it out). `hybrid_device_fraction`: PyTorch compute's share of the profiled device time
    # (0..1), where a GPU profiled it; None on a CPU, or for a kernel that is not a hybrid.
    torch_epilogue: tuple[str, ...] = ()
    hybrid_ops: tuple[str, ...] = ()
    hybrid_device_fraction: Optional[float] = None
    accounting_note: Optional[str] = None  # e.g. the profiler could not run, so kernels went unlisted

    @property
    def hybrid(self) -> bool:
        return bool(self.hybrid_ops)

    # A CPU run that emulated a GPU for the candidate (evaluation/emulation.py): the target, e.g.
    # "NVIDIA H200 (sm_90)"; None when the candidate ran on the real device or saw a plain CPU.
    emulated_device: Optional[str] = None
    tolerance_policy: str = "strict"  # the policy that judged this result (ProblemInfo.tolerance_policy)
    # Known approximations the candidate uses where the reference is exact (e.g. "tanh-GELU for exact
    # GELU"), with the deviation they account for; see evaluation/approximations.py.
    approximations: tuple[str, ...] = ()
    weight_binding: Optional[WeightBinding] = None  # how the reference's weights reached the candidate

    @property
    def passed(self) -> bool:
        return self.status is Status.passed

    def measured_speedup(self, baseline: str = "eager") -> Optional["MeasuredSpeedup"]:
        """The one definition of an evaluation's speedup over `baseline` (search, store, gate, report).

        Geometric means over the timed cases of the ratio and of each interval end. None -- not measured,
        never a number -- when the candidate did not pass, nothing was timed (the CPU), any timed case
        lacks this baseline (a mean over a subset would rank candidates on different cases), or a ratio
        is not a positive finite number.
        """
        import math

        per_case = []
        for t in self.timing:
            s = next((s for s in t.speedups if s.baseline == baseline), None)
            if s is None:
                return None
            per_case.append((s.ratio, s.ratio_low, s.ratio_high))
        if not self.passed or not per_case:
            return None
        if any(not (math.isfinite(v) and v > 0) for triple in per_case for v in triple):
            return None

        def geomean(values: list[float]) -> float:
            return math.exp(sum(math.log(v) for v in values) / len(values))

        return MeasuredSpeedup(
            baseline=baseline,
            ratio=geomean([c[0] for c in per_case]),
            ratio_low=geomean([c[1] for c in per_case]),
            ratio_high=geomean([c[2] for c in per_case]),
            n_cases=len(per_case),
        )

    def speedup(self, baseline: str = "eager") -> Optional[float]:
        """The ratio of `measured_speedup` alone."""
        m = self.measured_speedup(baseline)
        return m.ratio if m else None


class MeasuredSpeedup(Record):
    """An evaluation's speedup over one baseline: geometric means over its timed cases."""

    baseline: str
    ratio: float
    ratio_low: float  # geometric mean of the per-case (baseline p20 / candidate p80)
    ratio_high: float  # geometric mean of the per-case (baseline p80 / candidate p20)
    n_cases: int

    @property
    def significant(self) -> bool:
        """The interval excludes 1.0: a win (low > 1) or a loss (high < 1), not noise."""
        return self.ratio_low > 1.0 or self.ratio_high < 1.0


class RemeasuredCase(Record):
    """One timed case of one candidate, measured in rounds interleaved with the eager baseline."""

    case_id: str
    params: dict[str, int]
    dtype: str
    candidate_p50s_ms: tuple[float, ...]  # one p50 per round
    baseline_p50s_ms: tuple[float, ...]  # the eager reference, same rounds, same process
    speedup: float  # median over rounds of baseline p50 / candidate p50
    speedup_min: float  # the spread of the per-round ratios
    speedup_max: float
    significant: bool  # speedup_min > 1: every round was a win, not only the median
    method: str  # "cuda_graph" | "cuda_events"
    compile_p50s_ms: tuple[float, ...] = ()  # the torch.compile baseline, same rounds, where it was asked for
    speedup_vs_compile: Optional[float] = None  # median over rounds of compile p50 / candidate p50
    speedup_vs_compile_min: Optional[float] = None
    speedup_vs_compile_max: Optional[float] = None
    autotune_p50s_ms: tuple[float, ...] = ()  # torch.compile max-autotune, same rounds, where it was asked for
    speedup_vs_autotune: Optional[float] = None  # median over rounds of max-autotune p50 / candidate p50
    speedup_vs_autotune_min: Optional[float] = None
    speedup_vs_autotune_max: Optional[float] = None


class RemeasuredCandidate(Record):
    name: str
    candidate_sha256: str
    cases: tuple[RemeasuredCase, ...] = ()
    error: Optional[str] = None  # why this candidate has no numbers (it raised, the worker died, ...)

    def speedup(self) -> Optional[float]:
        """Geometric mean over cases of the per-case speedup, or None if unmeasured."""
        import math

        if not self.cases:
            return None
        return math.exp(sum(math.log(c.speedup) for c in self.cases) / len(self.cases))


class RemeasureResult(Record):
    """The interleaved re-measure a search runs before it declares a winner."""

    problem_id: str
    problem_name: str
    device: str
    rounds: int
    candidates: tuple[RemeasuredCandidate, ...]
    note: Optional[str] = None  # e.g. "not measured on this device (cpu, Triton interpreter)"
    stderr_tail: str = ""
    fingerprint: Fingerprint
    started_at: str
    duration_s: float
    isolation: Optional[str] = None  # of the candidates' process, as on EvalResult


class Tolerance(Record):
    atol: float
    rtol: float


DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(atol=1e-8, rtol=1e-7),
    "float32": Tolerance(atol=1e-4, rtol=1e-4),
    "float16": Tolerance(atol=2e-3, rtol=2e-3),
    "bfloat16": Tolerance(atol=1.6e-2, rtol=1.6e-2),
}


class DroppedCase(Record):
    """A derived shape the reference itself rejects (a broadcast that only holds at the shipped sizes)."""

    params: dict[str, int]
    reason: str  # one line: what the reference raised


class ProblemInfo(Record):
    """A problem as the rest of kernelscout sees it (the loaded module stays inside evaluation)."""

    problem_id: str  # sha256 of the normalized reference source + the shape set, first 16 hex
    name: str
    op_family: str  # "layernorm", "rmsnorm", "softmax", ..., or "unknown"
    source_path: str
    source_sha256: str
    builtin: bool
    description: str = ""
    shape_cases: tuple[ShapeCase, ...]
    dtypes: tuple[str, ...]
    tolerances: dict[str, Tolerance]
    has_byte_model: bool = False
    has_flop_model: bool = False
    float32_matmul_precision: str = "highest"  # "high": fp32 baselines are timed with TF32 matmuls (see problems/)
    seed_path: Optional[str] = None  # built-in problems ship a simple correct Triton seed
    # The problem travels by value: a worker or a remote node runs this text (checked against
    # source_sha256), never the path, which only the machine that loaded the problem has.
    source: str = ""
    seed_source: Optional[str] = None
    # Which tolerance policy `tolerances` follows: "strict" (the default) or "kernelbench" (1e-2).
    tolerance_policy: str = "strict"
    # GPU-sized cases whose launches a CPU worker follows on meta tensors, without running a kernel
    # (evaluation/emulation.check_launches_at_scale): launch limits that only bite at full size.
    launch_cases: tuple[ShapeCase, ...] = ()
    dropped_cases: tuple[DroppedCase, ...] = ()  # derived shapes left out, each with its reason
    shape_notes: tuple[str, ...] = ()  # what the derivation could not do (no big case fits, ...)


def source_sha256(source: str) -> str:
    """Identity of a candidate: the sha256 of its exact source text."""
    import hashlib

    return hashlib.sha256(source.encode()).hexdigest()
