"""When a search stops, and why.

The rule (`store.records.StopRule`) is fixed before the search starts and written with the run; this
module only reads it against the search's progress. Only measured, significant speedups count toward
the target: a run on a machine that times nothing can never claim it, and a ratio whose interval
straddles 1.0 is noise.
"""

from __future__ import annotations

import enum
import math
from typing import Optional

from agent import Frozen

from evaluation.records import EvalResult
from store.records import StopRule


class StopReason(str, enum.Enum):
    target_reached = "target_reached"
    evaluation_budget = "evaluation_budget"
    time_budget = "time_budget"
    stalled = "stalled"
    cost_ceiling = "cost_ceiling"
    proposer_exhausted = "proposer_exhausted"
    proposer_failing = "proposer_failing"  # several steps in a row produced no candidate
    interrupted = "interrupted"


_Frozen = Frozen


class MeasuredSpeedup(_Frozen):
    """Geometric means over timed cases of the candidate's speedup vs eager and its interval."""

    ratio: float
    ratio_low: float
    ratio_high: float

    @property
    def significant(self) -> bool:
        """The conservative interval (baseline p20 / candidate p80 ...) excludes 1.0."""
        return self.ratio_low > 1.0 or self.ratio_high < 1.0


def measured_speedup(result: EvalResult, baseline: str = "eager") -> Optional[MeasuredSpeedup]:
    """None unless the candidate passed and was timed against `baseline`."""
    if not result.passed:
        return None
    triples = [(s.ratio, s.ratio_low, s.ratio_high) for t in result.timing for s in t.speedups if s.baseline == baseline]
    if not triples:
        return None

    def geomean(values):
        return math.exp(sum(math.log(v) for v in values) / len(values))

    return MeasuredSpeedup(
        ratio=geomean([t[0] for t in triples]),
        ratio_low=geomean([t[1] for t in triples]),
        ratio_high=geomean([t[2] for t in triples]),
    )


class Progress(_Frozen):
    """What the session knows when it asks whether to go on."""

    evaluations: int  # search evaluations this run has paid for (reused ones do not count)
    elapsed_minutes: float
    best_significant_speedup: Optional[float] = None  # best measured significant ratio vs eager
    evaluations_since_improvement: int = 0
    cost_usd: float = 0.0
    proposer_exhausted: bool = False
    empty_steps_in_a_row: int = 0


MAX_EMPTY_STEPS = 3


def should_stop(rule: StopRule, progress: Progress) -> Optional[StopReason]:
    """The first rule that fires, in a fixed order: success first, then the limits, then stagnation."""
    if (
        rule.target_speedup is not None
        and progress.best_significant_speedup is not None
        and progress.best_significant_speedup >= rule.target_speedup
    ):
        return StopReason.target_reached
    if rule.max_cost_usd is not None and progress.cost_usd >= rule.max_cost_usd:
        return StopReason.cost_ceiling
    if progress.evaluations >= rule.max_evaluations:
        return StopReason.evaluation_budget
    if rule.max_minutes is not None and progress.elapsed_minutes >= rule.max_minutes:
        return StopReason.time_budget
    if rule.stall_limit is not None and progress.evaluations_since_improvement >= rule.stall_limit:
        return StopReason.stalled
    if progress.proposer_exhausted:
        return StopReason.proposer_exhausted
    if progress.empty_steps_in_a_row >= MAX_EMPTY_STEPS:
        return StopReason.proposer_failing
    return None
