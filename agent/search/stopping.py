"""When a search stops, and why.

The rule (`store.records.StopRule`) is fixed before the search starts and written with the run; this
module only reads it against the search's progress. Only measured, significant speedups count toward
the target: a run on a machine that times nothing can never claim it, and a ratio whose interval
straddles 1.0 is noise.
"""

from __future__ import annotations

import enum
from typing import Optional

from agent import Frozen
from evaluation.records import EvalResult, MeasuredSpeedup
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


def measured_speedup(result: EvalResult, baseline: str = "eager") -> Optional[MeasuredSpeedup]:
    """None unless the candidate passed and every timed case was timed against `baseline`
    (`EvalResult.measured_speedup` is the one definition)."""
    return result.measured_speedup(baseline)


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
