"""The kernel lifecycle: the approval gate, the deployment registry, rollback and revalidation.

A search winner is a proposal, not a deployment. `check_promotion` is the gate: a pure function over
stored records that either returns the complete evidence or raises `PromotionRefused` listing every
missing item, so a reviewer sees the whole gap at once and no flag can skip it. The registry is never
stored as a mutable row: `fold_history` replays the append-only `PromotionEvent` log, which is what
makes rollback instant (one appended row) and the past auditable (nothing is updated or deleted).
"""

from __future__ import annotations

import ast
import json
import math
import uuid
from typing import Any, Optional, Sequence

from pydantic import BaseModel, ConfigDict

from evaluation.errors import KscoutError
from evaluation.records import EvalResult, Fingerprint, ProblemInfo
from store.records import CandidateRecord, PromotionEvent, PromotionState, RunRecord, utc_now

BASELINE = "eager"
# Environment fields whose change can alter a kernel's numerics or speed.
ENV_FIELDS = ("driver_version", "cuda_version", "hip_version", "triton_version", "torch_version")
CORRECTNESS_KINDS = ("search", "remeasure")  # a revalidation is not evidence for a promotion


class LifecycleError(KscoutError):
    """A lifecycle request that cannot be carried out (unknown op, nothing to roll back, no approver)."""


class PromotionRefused(LifecycleError):
    """The gate refused: `missing` holds one line per missing piece of evidence."""

    def __init__(self, candidate_id: str, op: str, arch: str, missing: Sequence[str]):
        self.candidate_id, self.op, self.arch, self.missing = candidate_id, op, arch, tuple(missing)
        lines = "\n".join(f"  - {m}" for m in self.missing)
        super().__init__(
            f"candidate {candidate_id[:12]} cannot be promoted for {op} on {arch}; missing evidence:\n{lines}"
        )


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


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


class RollbackNote(Record):
    reason: str
    rolled_back_from: str
    restored: Optional[str]  # None = the reference


class FlagNote(Record):
    verdict: str  # "failed" | "regressed"
    reason: str
    eval_id: Optional[str]


def op_key(problem: ProblemInfo | RunRecord) -> str:
    """The registry's op name: the family, or the problem's own name when the family is unknown."""
    family = problem.op_family
    name = problem.name if isinstance(problem, ProblemInfo) else problem.problem_name
    return name if family in ("", "unknown") else family


# -- the gate -------------------------------------------------------------------------------------


def aggregate_speedup(result: EvalResult, baseline: str = BASELINE) -> Optional[CaseSpeedup]:
    """Geometric means of ratio and interval ends over timed cases (None if any case lacks one)."""
    per_case = case_speedups(result, baseline)
    if not per_case or len(per_case) != len(result.timing):
        return None

    def gm(values: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in values) / len(values))

    return CaseSpeedup(
        case_id="geomean",
        ratio=gm([c.ratio for c in per_case]),
        ratio_low=gm([c.ratio_low for c in per_case]),
        ratio_high=gm([c.ratio_high for c in per_case]),
    )


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


def _env_gaps(fp: Fingerprint, what: str) -> list[str]:
    gaps = []
    if not fp.driver_version:
        gaps.append(f"environment: the {what} evaluation recorded no driver version ({fp.device_name})")
    if not (fp.cuda_version or fp.hip_version):
        gaps.append(f"environment: the {what} evaluation recorded no CUDA/ROCm version ({fp.device_name})")
    if not fp.triton_version:
        gaps.append(f"environment: the {what} evaluation recorded no Triton version")
    if not fp.torch_version:
        gaps.append(f"environment: the {what} evaluation recorded no torch version")
    return gaps


def _pick_correctness(
    problem: ProblemInfo, arch: str, evaluations: Sequence[tuple[str, EvalResult]]
) -> Optional[tuple[str, EvalResult]]:
    """The passing evaluation on `arch` covering the most declared cases (the latest among equals)."""
    best: Optional[tuple[str, EvalResult]] = None
    best_cover = -1
    for eval_id, r in evaluations:
        if not r.passed or r.fingerprint.arch != arch or r.problem_id != problem.problem_id:
            continue
        cover = sum(1 for s in r.shape_results if s.passed)
        if cover and cover >= best_cover:  # a re-measure that only timed proves no correctness
            best, best_cover = (eval_id, r), cover
    return best


def _correctness_gaps(problem: ProblemInfo, arch: str, chosen, evaluations) -> list[str]:
    """(1) passed on the full declared shape set and every declared dtype, on this arch."""
    if chosen is None:
        tried = [r for _, r in evaluations if r.fingerprint.arch == arch and r.shape_results]
        why = f" (latest: {tried[-1].status.value})" if tried else ""
        return [f"correctness: no passing evaluation of this candidate on {arch}{why}"]
    passed = [s for s in chosen[1].shape_results if s.passed]
    cases = {s.case_id for s in passed}
    dtypes = {s.dtype for s in passed}
    return [
        f"correctness: declared shape case {c.case_id} not passed on {arch}"
        for c in problem.shape_cases
        if c.case_id not in cases
    ] + [
        f"correctness: declared dtype {d} never verified on {arch}" for d in problem.dtypes if d not in dtypes
    ]


def _timing_gaps(
    run: RunRecord, remeasures
) -> tuple[Optional[tuple[str, EvalResult]], Optional[CaseSpeedup], list[str]]:
    """(2) timed on this arch against eager, outside the noise, by the interleaved re-measure."""
    arch = run.arch
    if arch == "cpu" or run.device == "cpu":
        return (
            None,
            None,
            [
                "timing: a CPU-only result can never be promoted: the Triton interpreter measures no "
                "speed, so there is no speedup to approve"
            ],
        )
    on_arch = [(i, r) for i, r in remeasures if r.fingerprint.arch == arch]
    if not on_arch:
        return None, None, [f"timing: no interleaved re-measure (kind 'remeasure') on {arch}"]
    timed = on_arch[-1]
    result, total = timed[1], aggregate_speedup(timed[1])
    if not result.passed:
        gaps = [f"timing: the latest re-measure on {arch} ended {result.status.value}"]
    elif not result.timing:
        gaps = [
            f"timing: the latest re-measure on {arch} has no timing ({result.timing_note or 'no timed cases'})"
        ]
    elif total is None:
        gaps = [f"timing: the latest re-measure lacks a recorded {BASELINE} baseline"]
    elif not total.ratio_low > 1.0:
        gaps = [
            f"timing: speedup over {BASELINE} {total.ratio:.3f}x "
            f"[{total.ratio_low:.3f}, {total.ratio_high:.3f}] is within the noise"
        ]
    else:  # a win on average must not hide a timed case where the kernel loses
        gaps = [
            f"timing: case {c.case_id} is slower than {BASELINE} outside the noise "
            f"({c.ratio:.3f}x [{c.ratio_low:.3f}, {c.ratio_high:.3f}])"
            for c in case_speedups(result)
            if c.ratio_high < 1.0
        ]
    return timed, total, gaps


def _environment_gaps(chosen, timed) -> list[str]:
    """(4) driver, CUDA/ROCm, Triton and torch recorded, and one environment for both halves."""
    if chosen is None:
        return _env_gaps(timed[1].fingerprint, "timing") if timed else []
    gaps = _env_gaps(chosen[1].fingerprint, "correctness")
    if timed is not None and timed[1].fingerprint.key() != chosen[1].fingerprint.key():
        gaps.append("environment: correctness and timing ran on different environments")
    return gaps


def check_promotion(
    candidate: CandidateRecord,
    run: RunRecord,
    problem: ProblemInfo,
    evaluations: Sequence[tuple[str, EvalResult]],
    remeasures: Sequence[tuple[str, EvalResult]],
) -> PromotionEvidence:
    """The approval gate. `evaluations` may be of any kind; `remeasures` are the interleaved re-measures.

    Both lists are oldest first. Raises `PromotionRefused` with every missing item.
    """
    arch, op = run.arch, op_key(run)
    missing: list[str] = []
    if problem.problem_id != run.problem_id:
        missing.append(
            f"problem: run {run.run_id[:12]} searched problem id {run.problem_id}, but {problem.name} as "
            f"declared now is {problem.problem_id} (a changed file or --set overrides)"
        )
    chosen = _pick_correctness(problem, arch, evaluations)
    missing += _correctness_gaps(problem, arch, chosen, evaluations)
    timed, total, timing_gaps = _timing_gaps(run, remeasures)
    missing += timing_gaps
    # (3) hardware assumptions: the configuration and the shape range it was proven on
    knobs, knobs_source = stated_knobs(candidate)
    if not knobs:
        missing.append("assumptions: no knobs or block sizes stated (empty knobs_json, none at the launch)")
    ranges = proven_ranges(chosen[1]) if chosen else {}
    if not ranges:
        missing.append("assumptions: no proven shape range (no passed shape case with size constants)")
    missing += _environment_gaps(chosen, timed)

    if missing or chosen is None:
        raise PromotionRefused(candidate.candidate_id, op, arch, missing)
    eval_id, result = chosen
    return PromotionEvidence(
        candidate_id=candidate.candidate_id,
        run_id=candidate.run_id,
        op=op,
        arch=arch,
        device_name=result.fingerprint.device_name,
        problem_id=problem.problem_id,
        problem_name=problem.name,
        problem_source_path=problem.source_path,
        problem_source_sha256=problem.source_sha256,
        correctness_eval_id=eval_id,
        shape_cases_passed=tuple(s.case_id for s in result.shape_results if s.passed),
        remeasure_eval_id=timed[0] if timed else None,
        speedup=total.ratio if total else None,
        speedup_low=total.ratio_low if total else None,
        speedup_high=total.ratio_high if total else None,
        case_speedups=case_speedups(timed[1]) if timed else (),
        assumptions=Assumptions(
            knobs=knobs,
            knobs_source=knobs_source,
            shape_range=ranges,
            dtypes=tuple(sorted({s.dtype for s in result.shape_results if s.passed})),
        ),
        env=result.fingerprint,
    )


# -- the registry: a fold over the append-only log -------------------------------------------------


class DeployedEntry(Record):
    """What is live for one (op, arch) after replaying its history."""

    op: str
    arch: str
    candidate_id: Optional[str]  # None = the reference
    since: str
    approved_by: Optional[str]
    changed_by: str
    evidence: Optional[PromotionEvidence]
    flagged: bool  # the live kernel was flagged by a revalidation after it was deployed
    rollback_target: Optional[str]  # the previous known-good kernel (None = the reference)
    known_good: tuple[str, ...]  # deployed kernels not rolled back, oldest first


def fold_history(events: Sequence[PromotionEvent]) -> dict[tuple[str, str], DeployedEntry]:
    """Replay events (oldest first) into what is live per (op, arch)."""
    by_key: dict[tuple[str, str], list[PromotionEvent]] = {}
    for e in events:
        by_key.setdefault((e.op_family, e.arch), []).append(e)
    return {key: _fold_one(key, evs) for key, evs in by_key.items()}


def _fold_one(key: tuple[str, str], events: list[PromotionEvent]) -> DeployedEntry:
    stack: list[str] = []  # deployments still standing, oldest first
    flagged: set[str] = set()
    deployed: dict[str, PromotionEvent] = {}
    live: Optional[str] = None
    since, changed_by = events[0].created_at, events[0].actor
    for e in events:
        cid = e.candidate_id
        if e.state is PromotionState.deployed and cid is not None:
            stack = [c for c in stack if c != cid] + [cid]
            flagged.discard(cid)
            deployed[cid] = e
            live, since, changed_by = cid, e.created_at, e.actor
        elif e.state is PromotionState.rolled_back:
            stack = stack[: stack.index(cid) + 1] if cid in stack else []
            live, since, changed_by = cid, e.created_at, e.actor
        elif e.state is PromotionState.flagged and cid is not None:
            flagged.add(cid)
    below = [c for c in stack if c != live and c not in flagged]
    evidence = None
    if live is not None and live in deployed:
        evidence = PromotionEvidence.model_validate_json(deployed[live].evidence_json)
    return DeployedEntry(
        op=key[0],
        arch=key[1],
        candidate_id=live,
        since=since,
        approved_by=deployed[live].actor if live in deployed else None,
        changed_by=changed_by,
        evidence=evidence,
        flagged=live in flagged,
        rollback_target=below[-1] if below else None,
        known_good=tuple(c for c in stack if c not in flagged),
    )


def _event(
    entry_op: str,
    problem_id: str,
    arch: str,
    candidate_id: Optional[str],
    state: PromotionState,
    actor: str,
    note: str,
    evidence_json: str,
    previous: Optional[str],
) -> PromotionEvent:
    return PromotionEvent(
        event_id=uuid.uuid4().hex,
        op_family=entry_op,
        problem_id=problem_id,
        arch=arch,
        candidate_id=candidate_id,
        state=state,
        actor=actor,
        note=note,
        evidence_json=evidence_json,
        previous_candidate_id=previous,
        created_at=utc_now(),
    )


def _require_name(name: str, flag: str) -> str:
    if not name or not name.strip():
        raise LifecycleError(f"{flag} must name a person")
    return name.strip()


# -- operations on a store ------------------------------------------------------------------------


def current_problem(store, problem_id: str, name: str, device: str) -> ProblemInfo:
    """The problem as declared now (the gate and revalidation compare its id with the recorded one)."""
    import evaluation

    try:
        stored = store.get_problem(problem_id)
        spec = stored.name if stored.builtin else stored.source_path
    except KscoutError:  # never recorded: a built-in, found by name
        spec = name
    return evaluation.load_problem(spec, device=device)


def _candidate_run(store, candidate_ref: str, arch: Optional[str]) -> tuple[CandidateRecord, RunRecord]:
    """The run whose arch the promotion is for: one source (the seed, say) can be in CPU and GPU runs."""
    first = store.get_candidate(candidate_ref)
    run_ids = list(
        dict.fromkeys(run_id for _e, run_id, _c, _r in store.evaluations(candidate_id=first.candidate_id))
    )
    runs = [store.get_run(r) for r in run_ids] or [store.get_run(first.run_id)]
    if arch is not None:
        runs = [r for r in runs if r.arch == arch]
        if not runs:
            raise LifecycleError(f"candidate {first.candidate_id[:12]} was never evaluated on {arch}")
    else:
        archs = sorted({r.arch for r in runs if r.arch != "cpu"})
        if len(archs) > 1:
            raise LifecycleError(
                f"candidate {first.candidate_id[:12]} was evaluated on {', '.join(archs)}: pass --device ARCH"
            )
        runs = [r for r in runs if r.arch in archs] or runs
    run = runs[-1]
    return store.get_candidate(first.candidate_id, run_id=run.run_id), run


def evidence_for(store, candidate_ref: str, arch: Optional[str] = None) -> PromotionEvidence:
    """Run the gate for a stored candidate without writing anything."""
    candidate, run = _candidate_run(store, candidate_ref, arch)
    problem = current_problem(store, run.problem_id, run.problem_name, run.device)
    cid = candidate.candidate_id
    remeasure_ids = {e for e, *_x in store.evaluations(candidate_id=cid, kind="remeasure")}
    counted = {e for kind in CORRECTNESS_KINDS for e, *_x in store.evaluations(candidate_id=cid, kind=kind)}
    rows = [(e, r) for e, _run, _c, r in store.evaluations(candidate_id=cid) if e in counted]  # oldest first
    remeasures = [(e, r) for e, r in rows if e in remeasure_ids]
    return check_promotion(candidate, run, problem, rows, remeasures)


def promote(
    store, candidate_ref: str, *, approved_by: str, note: str = "", arch: Optional[str] = None
) -> tuple[PromotionEvent, PromotionEvent]:
    """Record `approved` then `deployed` for a candidate whose evidence is complete.

    The store lock is held throughout, so a concurrent promotion or rollback cannot slip between
    reading what is live (the previous known-good) and appending the two events.
    """
    approver = _require_name(approved_by, "--approved-by")
    with store.session():
        evidence = evidence_for(store, candidate_ref, arch)
        key = (evidence.op, evidence.arch)
        entry = fold_history(store.promotion_history(op_family=key[0], arch=key[1])).get(key)
        good = [c for c in entry.known_good if c != evidence.candidate_id] if entry else []
        payload = evidence.model_dump_json()
        approved, deployed = (
            _event(
                evidence.op,
                evidence.problem_id,
                evidence.arch,
                evidence.candidate_id,
                state,
                approver,
                note,
                payload,
                good[-1] if good else None,
            )
            for state in (PromotionState.approved, PromotionState.deployed)
        )
        store.add_promotion_event(approved)
        store.add_promotion_event(deployed)
    return approved, deployed


def deployed_entries(store, arch: Optional[str] = None) -> list[DeployedEntry]:
    entries = fold_history(store.promotion_history(arch=arch))
    return [entries[k] for k in sorted(entries)]


def history(store, op: str, arch: str) -> list[PromotionEvent]:
    events = store.promotion_history(op_family=op, arch=arch)
    if not events:
        raise LifecycleError(f"no promotion history for {op} on {arch}")
    return events


def rollback(store, op: str, arch: str, *, by: str, reason: str = "") -> PromotionEvent:
    """Return at once to the previous known-good kernel, or to the reference when there is none."""
    actor = _require_name(by, "--by")
    with store.session():
        entry = fold_history(history(store, op, arch))[(op, arch)]
        if entry.candidate_id is None:
            raise LifecycleError(f"nothing to roll back for {op} on {arch}: the reference is already live")
        note = RollbackNote(
            reason=reason, rolled_back_from=entry.candidate_id, restored=entry.rollback_target
        )
        problem_id = entry.evidence.problem_id if entry.evidence else ""
        event = _event(
            op,
            problem_id,
            arch,
            entry.rollback_target,
            PromotionState.rolled_back,
            actor,
            reason,
            note.model_dump_json(),
            entry.candidate_id,
        )
        store.add_promotion_event(event)
    return event


def flag(store, entry: DeployedEntry, note: FlagNote, *, by: str) -> PromotionEvent:
    assert entry.candidate_id is not None
    problem_id = entry.evidence.problem_id if entry.evidence else ""
    event = _event(
        entry.op,
        problem_id,
        entry.arch,
        entry.candidate_id,
        PromotionState.flagged,
        by,
        note.reason,
        note.model_dump_json(),
        entry.rollback_target,
    )
    store.add_promotion_event(event)
    return event


# -- freshness of evidence ------------------------------------------------------------------------


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


# -- revalidation ---------------------------------------------------------------------------------


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
) -> list[Revalidation]:
    """Re-evaluate every deployed kernel that this machine can run; flag (and roll back) failures."""
    import evaluation

    current = current or evaluation.fingerprint()
    outcomes = []
    for entry in deployed_entries(store, arch):
        if entry.candidate_id is None:
            continue
        base = dict(op=entry.op, arch=entry.arch, candidate_id=entry.candidate_id)
        if entry.arch != current.arch or entry.evidence is None:
            why = (
                f"deployed for {entry.arch}; this machine is {current.arch}"
                if entry.evidence
                else "no evidence"
            )
            outcomes.append(Revalidation(**base, verdict="skipped", reason=why))
            continue
        ev = entry.evidence
        candidate = store.get_candidate(ev.candidate_id, run_id=ev.run_id)
        problem = current_problem(store, ev.problem_id, ev.problem_name, problem_device(ev))
        kwargs = {"timeout_s": timeout_s} if timeout_s else {}
        result = evaluation.evaluate(candidate.source, problem, device=problem_device(ev), **kwargs)
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


def problem_device(evidence: PromotionEvidence) -> str:
    return "cpu" if evidence.env.device_kind == "cpu" else "cuda"
