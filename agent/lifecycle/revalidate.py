"""Revalidation: whether a deployed kernel's evidence still speaks for the machine it runs on.

Evidence is frozen at promotion time, but drivers, toolkits, Triton and torch move underneath it.
`freshness` never calls stale evidence current; `revalidate` re-evaluates what this machine can run
and, on a failure or a regression, appends a `flagged` event (and, if asked, a rollback) to the
registry rather than changing anything in place.
"""

from __future__ import annotations

from typing import Optional, Sequence

from agent.lifecycle.evidence import BASELINE, PromotionEvidence, Record, aggregate_speedup, problem_device
from agent.lifecycle.gate import current_problem
from agent.lifecycle.registry import DeployedEntry, FlagNote, deployed_entries, flag, rollback
from agent.search.executors import Executor, make_executor
from evaluation.records import BASELINES, EvalResult, Fingerprint, ProblemInfo

REVALIDATE_TIMEOUT_S = 120.0  # per candidate process, as `kscout eval`
REVALIDATE_TRIALS = 3

# Environment fields whose change can alter a kernel's numerics or speed.
ENV_FIELDS = ("driver_version", "cuda_version", "hip_version", "triton_version", "torch_version")


def env_differences(recorded: Fingerprint, current: Fingerprint) -> list[str]:
    return [
        f"{name.replace('_version', '')} {getattr(recorded, name)} -> {getattr(current, name)}"
        for name in ENV_FIELDS
        if getattr(recorded, name) != getattr(current, name)
    ]


def freshness(entry: DeployedEntry, current: Fingerprint, revalidations: Sequence[EvalResult] = ()) -> str:
    """How far the entry's evidence speaks for this machine; stale evidence is never called current."""
    if entry.evidence is None:
        return "reference" if entry.candidate_id is None else "no evidence recorded"
    if entry.arch != current.arch:
        return f"not verifiable here (this machine is {current.arch})"
    diffs = env_differences(entry.evidence.env, current)
    if not diffs:
        return "current"
    for r in reversed(revalidations):
        if r.fingerprint.key() == current.key() and judge_revalidation(entry.evidence, r)[0] == "passed":
            return f"revalidated on this environment at {r.started_at}"
    return "stale evidence: " + ", ".join(diffs)


class Revalidation(Record):
    op: str
    arch: str
    candidate_id: Optional[str]
    verdict: str  # "passed" | "failed" | "regressed" | "skipped"
    reason: str
    eval_id: Optional[str] = None
    flagged_event_id: Optional[str] = None
    rolled_back_to: Optional[str] = None
    rolled_back: bool = False


def judge_revalidation(
    evidence: PromotionEvidence, result: EvalResult, problem: Optional[ProblemInfo] = None
) -> tuple[str, str]:
    """("passed" | "failed" | "regressed", why). Regressed = the new interval lies below the recorded one."""
    if not result.passed:
        return "failed", f"{result.status.value}: {result.message or result.error_class or 'no message'}"
    passed = {s.case_id for s in result.shape_results if s.passed}
    expected = [c.case_id for c in problem.shape_cases] if problem else list(evidence.shape_cases_passed)
    lost = [c for c in expected if c not in passed]
    if lost:
        return "failed", f"shape cases not passed now: {', '.join(lost)}"
    if evidence.speedup_low is None:
        return "passed", "correct on every declared case (no recorded timing to compare)"
    now = aggregate_speedup(result)
    if now is None:
        return (
            "failed",
            f"timing not measured on the current environment ({result.timing_note or 'no timing'})",
        )
    if now.ratio_high < evidence.speedup_low:
        return "regressed", (
            f"speedup over {BASELINE} {now.ratio:.3f}x [{now.ratio_low:.3f}, {now.ratio_high:.3f}] is below "
            f"the recorded {evidence.speedup:.3f}x [{evidence.speedup_low:.3f}, {evidence.speedup_high:.3f}]"
        )
    return "passed", f"correct on every declared case; speedup {now.ratio:.3f}x within the recorded noise"


def revalidate(
    store,
    *,
    arch: Optional[str] = None,
    rollback_on_fail: bool = False,
    by: str = "kscout revalidate",
    current: Optional[Fingerprint] = None,
    timeout_s: Optional[float] = None,
    executor: Optional[Executor] = None,
) -> list[Revalidation]:
    """Re-evaluate every deployed kernel that this machine can run; flag (and roll back) failures.

    Candidates run through `executor` (default: a local one on this machine's device, made only when
    something needs running), whose environment is "this machine" unless `current` says otherwise."""
    made: list[Executor] = []

    def runner() -> Executor:
        if executor is not None:
            return executor
        if not made:
            made.append(
                make_executor(
                    "local", device="auto", timeout_s=timeout_s or REVALIDATE_TIMEOUT_S, trials=REVALIDATE_TRIALS
                )
            )
        return made[0]

    try:
        return _revalidate(store, arch, rollback_on_fail, by, current or runner().environment(), runner)
    finally:
        for ex in made:
            ex.close()


def _revalidate(store, arch, rollback_on_fail, by, current: Fingerprint, runner) -> list[Revalidation]:
    outcomes = []
    for entry in deployed_entries(store, arch):
        if entry.candidate_id is None:
            continue
        base = dict(op=entry.op, arch=entry.arch, candidate_id=entry.candidate_id)
        if entry.arch != current.arch or entry.evidence is None:
            why = f"deployed for {entry.arch}; this machine is {current.arch}" if entry.evidence else "no evidence"
            outcomes.append(Revalidation(**base, verdict="skipped", reason=why))
            continue
        ev = entry.evidence
        candidate = store.get_candidate(ev.candidate_id, run_id=ev.run_id)
        problem = current_problem(store, ev.problem_id, ev.problem_name, problem_device(ev))
        ((_, result),) = runner().evaluate_batch([candidate.source], problem, baselines=BASELINES)
        eval_id = store.add_evaluation(ev.run_id, ev.candidate_id, result, kind="revalidate")
        verdict, reason = judge_revalidation(ev, result, problem)
        if verdict == "passed":
            outcomes.append(Revalidation(**base, verdict=verdict, reason=reason, eval_id=eval_id))
            continue
        flagged = flag(store, entry, FlagNote(verdict=verdict, reason=reason, eval_id=eval_id), by=by)
        rolled = None
        if rollback_on_fail:
            rolled = rollback(store, entry.op, entry.arch, by=by, reason=f"revalidation {verdict}: {reason}")
        outcomes.append(
            Revalidation(
                **base,
                verdict=verdict,
                reason=reason,
                eval_id=eval_id,
                flagged_event_id=flagged.event_id,
                rolled_back=rolled is not None,
                rolled_back_to=rolled.candidate_id if rolled else None,
            )
        )
    return outcomes
