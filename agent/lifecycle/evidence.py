"""What a promotion's evidence is, and how it is read off a stored evaluation.

These frozen records are written into the `approved` and `deployed` events, so they are the contract
between the gate that builds them, the registry that replays them and the export and report that read
them back. The helpers beside them derive the evidence's numbers (speedups, proven size ranges, the
stated knobs) from one `EvalResult` or candidate, with no store in reach.
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any, Optional

from agent import Frozen
from evaluation.records import EvalResult, Fingerprint, ProblemInfo
from store.records import CandidateRecord, RunRecord

BASELINE = "eager"
# the op family of a whole model's artifact (agent.model.flow.model_family): "model:minigptblock"
MODEL_FAMILY_PREFIX = "model:"


Record = Frozen


class SizeRange(Record):
    """The proven range of one size constant: the dispatcher uses the kernel only inside it."""

    min: int
    max: int
    multiple_of: int  # largest power of two (<= 1024) dividing every proven value: the alignment seen


class Assumptions(Record):
    knobs: dict[str, Any]  # block sizes, warps, stages...: what the kernel was configured with
    knobs_source: str  # "knobs_json" | "launch arguments in the source"
    shape_range: dict[str, SizeRange]
    dtypes: tuple[str, ...]
    contiguous_inputs: bool = True  # the evaluator only ever passed contiguous inputs


class CaseSpeedup(Record):
    case_id: str
    ratio: float
    ratio_low: float
    ratio_high: float


class PromotionEvidence(Record):
    """Everything a reviewer approved, frozen into the `approved` and `deployed` events."""

    schema_version: int = 1
    candidate_id: str
    run_id: str
    op: str
    arch: str
    device_name: str
    problem_id: str
    problem_name: str
    problem_source_path: str
    problem_source_sha256: str
    correctness_eval_id: str
    shape_cases_passed: tuple[str, ...]
    remeasure_eval_id: Optional[str]  # None only in hand-written CPU histories: the gate needs one
    baseline: str = BASELINE
    speedup: Optional[float]
    speedup_low: Optional[float]
    speedup_high: Optional[float]
    case_speedups: tuple[CaseSpeedup, ...] = ()
    assumptions: Assumptions
    env: Fingerprint
    # a hybrid (issue 25): the PyTorch compute ops of its forward, as the correctness evaluation saw them
    hybrid_ops: tuple[str, ...] = ()
    hybrid_device_fraction: Optional[float] = None  # their share of device time, where profiled


def op_key(problem: ProblemInfo | RunRecord) -> str:
    """The registry's op name: the family, or the problem's own name when the family is unknown."""
    family = problem.op_family
    name = problem.name if isinstance(problem, ProblemInfo) else problem.problem_name
    return name if family in ("", "unknown") else family


def aggregate_speedup(result: EvalResult, baseline: str = BASELINE) -> Optional[CaseSpeedup]:
    """`EvalResult.measured_speedup` (the one definition) in the evidence's record shape."""
    m = result.measured_speedup(baseline)
    if m is None:
        return None
    return CaseSpeedup(case_id="geomean", ratio=m.ratio, ratio_low=m.ratio_low, ratio_high=m.ratio_high)


def case_speedups(result: EvalResult, baseline: str = BASELINE) -> tuple[CaseSpeedup, ...]:
    return tuple(
        CaseSpeedup(case_id=t.case_id, ratio=s.ratio, ratio_low=s.ratio_low, ratio_high=s.ratio_high)
        for t in result.timing
        for s in t.speedups
        if s.baseline == baseline and s.ratio > 0 and s.ratio_low > 0 and s.ratio_high > 0
    )


def stated_knobs(candidate: CandidateRecord) -> tuple[dict[str, Any], str]:
    """The candidate's configuration: the proposer's knobs, else the keywords of its kernel launches.

    A launch is `kernel[grid](..., BLOCK_N=..., num_warps=...)`: its keywords are the constexprs and
    launch options, written as the source spells them.
    """
    try:
        knobs = json.loads(candidate.knobs_json or "{}")
    except json.JSONDecodeError:
        knobs = {}
    if isinstance(knobs, dict) and knobs:
        return knobs, "knobs_json"
    try:
        tree = ast.parse(candidate.source)
    except SyntaxError:
        return {}, "launch arguments in the source"
    found = {
        kw.arg: ast.unparse(kw.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
        for kw in node.keywords
        if kw.arg
    }
    return found, "launch arguments in the source"


def proven_ranges(result: EvalResult) -> dict[str, SizeRange]:
    values: dict[str, list[int]] = {}
    for s in result.shape_results:
        if s.passed:
            for name, v in s.params.items():
                values.setdefault(name, []).append(int(v))
    return {
        name: SizeRange(min=min(vs), max=max(vs), multiple_of=_pow2_alignment(vs))
        for name, vs in sorted(values.items())
    }


def _pow2_alignment(values: list[int]) -> int:
    g = 0
    for v in values:
        g = math.gcd(g, abs(v))
    align = 1
    while g and g % (align * 2) == 0 and align < 1024:
        align *= 2
    return align


def problem_device(evidence: PromotionEvidence) -> str:
    return "cpu" if evidence.env.device_kind == "cpu" else "cuda"
