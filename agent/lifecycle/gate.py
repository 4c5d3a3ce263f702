"""The approval gate: a search winner is a proposal, not a deployment.

`check_promotion` is a pure function over stored records that either returns the complete
`PromotionEvidence` or raises `PromotionRefused` listing every missing item, so a reviewer sees the
whole gap at once and no flag can skip it. `evidence_for` only gathers those records from a store; it
writes nothing, so the registry can run the gate inside its own lock.
"""

from __future__ import annotations

from typing import Optional, Sequence

from agent.lifecycle.evidence import (
    BASELINE,
    MODEL_FAMILY_PREFIX,
    Assumptions,
    CaseSpeedup,
    PromotionEvidence,
    aggregate_speedup,
    case_speedups,
    op_key,
    proven_ranges,
    stated_knobs,
)
from evaluation.errors import KscoutError
from evaluation.records import EvalResult, Fingerprint, ProblemInfo
from store.records import CandidateRecord, RunRecord

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
    ] + [f"correctness: declared dtype {d} never verified on {arch}" for d in problem.dtypes if d not in dtypes]


def _timing_gaps(
    run: RunRecord, remeasures
) -> tuple[Optional[tuple[str, EvalResult]], Optional[CaseSpeedup], list[str]]:
    """(2) timed on this arch against eager, outside the noise, by the interleaved re-measure; a whole
    model's artifact also no slower than torch.compile of the whole model outside the noise (issue 26:
    below the user's own choice is a loss, whatever it gains over eager)."""
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
        gaps = [f"timing: the latest re-measure on {arch} has no timing ({result.timing_note or 'no timed cases'})"]
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
    compiled = aggregate_speedup(result, "torch_compile") if run.op_family.startswith(MODEL_FAMILY_PREFIX) else None
    if compiled is not None and compiled.ratio_high < 1.0:  # a model's user already has torch.compile
        gaps.append(
            f"timing: the assembled model is slower than torch.compile of the whole model outside the noise "
            f"({compiled.ratio:.3f}x [{compiled.ratio_low:.3f}, {compiled.ratio_high:.3f}]): compiling the "
            "model is the faster choice"
        )
    return timed, total, gaps


def _environment_gaps(chosen, timed) -> list[str]:
    """(4) driver, CUDA/ROCm, Triton and torch recorded, and one environment for both halves."""
    if chosen is None:
        return _env_gaps(timed[1].fingerprint, "timing") if timed else []
    gaps = _env_gaps(chosen[1].fingerprint, "correctness")
    if timed is not None and timed[1].fingerprint.key() != chosen[1].fingerprint.key():
        gaps.append("environment: correctness and timing ran on different environments")
    return gaps


def _isolation_gaps(chosen, timed) -> list[str]:
    """(5) candidate code ran in the evaluator's OS sandbox for both halves of the evidence."""
    gaps = []
    for what, picked in (("correctness", chosen), ("re-measure", timed)):
        if picked is not None and picked[1].isolation != "bwrap":
            gaps.append(
                f"isolation: the {what} evaluation {picked[0][:12]} ran without an OS sandbox "
                f"(isolation: {picked[1].isolation or 'not recorded'}); re-run it sandboxed, or promote with "
                "--allow-unsandboxed to accept it explicitly"
            )
    return gaps


def check_promotion(
    candidate: CandidateRecord,
    run: RunRecord,
    problem: ProblemInfo,
    evaluations: Sequence[tuple[str, EvalResult]],
    remeasures: Sequence[tuple[str, EvalResult]],
    *,
    allow_unsandboxed: bool = False,
    no_hybrid: bool = False,
) -> PromotionEvidence:
    """The approval gate. `evaluations` may be of any kind; `remeasures` are the interleaved re-measures.

    Both lists are oldest first. Raises `PromotionRefused` with every missing item. Evidence gathered
    without the OS sandbox is refused unless the approver accepts it (`allow_unsandboxed`). A hybrid
    (PyTorch compute in forward, issue 25) is promoted with its ops on the evidence, unless the approver
    excludes hybrids (`no_hybrid`).
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
    if not allow_unsandboxed:
        missing += _isolation_gaps(chosen, timed)
    if no_hybrid and chosen is not None and chosen[1].hybrid:
        missing.append(
            f"hybrid: the correctness evaluation {chosen[0][:12]} saw PyTorch compute "
            f"{', '.join(chosen[1].hybrid_ops)} in forward, and --no-hybrid excludes hybrids"
        )

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
        hybrid_ops=result.hybrid_ops,
        hybrid_device_fraction=result.hybrid_device_fraction,
    )


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
    run_ids = list(dict.fromkeys(run_id for _e, run_id, _c, _r in store.evaluations(candidate_id=first.candidate_id)))
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


def evidence_for(
    store,
    candidate_ref: str,
    arch: Optional[str] = None,
    *,
    allow_unsandboxed: bool = False,
    no_hybrid: bool = False,
) -> PromotionEvidence:
    """Run the gate for a stored candidate without writing anything."""
    candidate, run = _candidate_run(store, candidate_ref, arch)
    problem = current_problem(store, run.problem_id, run.problem_name, run.device)
    cid = candidate.candidate_id
    remeasure_ids = {e for e, *_x in store.evaluations(candidate_id=cid, kind="remeasure")}
    counted = {e for kind in CORRECTNESS_KINDS for e, *_x in store.evaluations(candidate_id=cid, kind=kind)}
    rows = [(e, r) for e, _run, _c, r in store.evaluations(candidate_id=cid) if e in counted]  # oldest first
    remeasures = [(e, r) for e, r in rows if e in remeasure_ids]
    return check_promotion(
        candidate, run, problem, rows, remeasures, allow_unsandboxed=allow_unsandboxed, no_hybrid=no_hybrid
    )
