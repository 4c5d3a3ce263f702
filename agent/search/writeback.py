"""What one evaluation leaves in the store: the evaluation row, failure patterns and outcomes (and
the record a re-measure is stored as).

The evaluation row goes first: it is what makes a candidate "done" on resume. Failure patterns and
outcomes are derived from it, so a session killed between the two writes leaves an evaluation
without an outcome, which `backfill` redoes on resume (outcome ids are deterministic, so nothing is
written twice; only a kill between the failure upsert and the outcome can count a failure twice).
"""

from __future__ import annotations

import hashlib
import math
from typing import Optional

from evaluation.records import EvalResult, Fingerprint, ProblemInfo, Status
from store.records import CandidateRecord, OutcomeRecord, utc_now

CORRECTNESS_ONLY = "correctness_only"  # outcome status of a pass that was not timed (CPU)


def shape_bucket(params: dict[str, int]) -> str:
    """Sizes by power-of-two range, so outcomes on 4096 and 4099 columns land in one bucket."""
    parts = []
    for name in sorted(params):
        v = int(params[name])
        if v <= 1:
            parts.append(f"{name}={v}")
            continue
        lo = 2 ** int(math.floor(math.log2(v)))
        parts.append(f"{name}={lo}..{2 * lo - 1}")
    return ",".join(parts)


def transformation(candidate: CandidateRecord) -> str:
    if candidate.transformation_tags:
        return "+".join(candidate.transformation_tags)
    return candidate.policy_action or "seed"


def _schedule_kind(candidate: CandidateRecord) -> Optional[str]:
    import json

    from agent.proposers.lowering.propose import schedule_kind

    try:
        knobs = json.loads(candidate.knobs_json or "{}")
    except ValueError:
        knobs = {}
    return schedule_kind(knobs, candidate.prompt_template)


def _outcome_id(eval_id: str, bucket: str, dtype: str) -> str:
    return hashlib.sha256(f"{eval_id}|{bucket}|{dtype}".encode()).hexdigest()[:16]


def outcomes_for(
    candidate: CandidateRecord,
    result: EvalResult,
    eval_id: str,
    problem: ProblemInfo,
    fingerprint: Fingerprint,
    parent_eval_id: Optional[str] = None,
) -> list[OutcomeRecord]:
    """One outcome per timed shape bucket, or one for the whole declared set where nothing was timed."""
    common = dict(
        schedule_kind=_schedule_kind(candidate),
        op_family=problem.op_family,
        problem_id=problem.problem_id,
        device_name=fingerprint.device_name,
        arch=fingerprint.arch,
        transformation=transformation(candidate),
        candidate_id=candidate.candidate_id,
        parent_id=candidate.parent_id,
        baseline="eager",
        triton_version=fingerprint.triton_version,
        torch_version=fingerprint.torch_version,
        driver_version=fingerprint.driver_version,
        evidence_eval_ids=tuple(e for e in (eval_id, parent_eval_id) if e),
        created_at=utc_now(),
    )
    what = f"{common['transformation']} on {problem.op_family} ({fingerprint.device_name})"
    out = []
    for t in result.timing:
        eager = next((s for s in t.speedups if s.baseline == "eager"), None)
        bucket = shape_bucket(t.params)
        verdict = (
            f"{eager.ratio:.3g}x vs eager [{eager.ratio_low:.3g}, {eager.ratio_high:.3g}]"
            if eager
            else "no eager baseline"
        )
        out.append(
            OutcomeRecord(
                outcome_id=_outcome_id(eval_id, bucket, t.dtype),
                shape_bucket=bucket,
                dtype=t.dtype,
                speedup=eager.ratio if eager else None,
                speedup_low=eager.ratio_low if eager else None,
                speedup_high=eager.ratio_high if eager else None,
                latency_ms_p50=t.candidate.latency_ms_p50,
                status=result.status.value,
                summary=f"{what} at {bucket} {t.dtype}: passed, {verdict}.",
                **common,
            )
        )
    if out:
        return out
    dtypes = sorted({s.dtype for s in result.shape_results}) or list(problem.dtypes)
    dtype = ",".join(dtypes)
    bucket = "declared shape set" if problem.shape_cases else "unknown"
    if result.passed:
        status, verdict = CORRECTNESS_ONLY, "correct on every declared shape; speed not measured on this device"
    else:
        status = result.status.value
        verdict = f"{status} at {result.failed_stage.value if result.failed_stage else 'unknown stage'}"
        if result.error_class:
            verdict += f" ({result.error_class})"
    return [
        OutcomeRecord(
            outcome_id=_outcome_id(eval_id, bucket, dtype),
            shape_bucket=bucket,
            dtype=dtype,
            status=status,
            summary=f"{what}, {dtype}: {verdict}.",
            **common,
        )
    ]


def record(
    store,
    run_id: str,
    candidate: CandidateRecord,
    result: EvalResult,
    problem: ProblemInfo,
    fingerprint: Fingerprint,
    *,
    parent_eval_id: Optional[str] = None,
) -> str:
    """Write one search evaluation and everything derived from it; returns the eval id."""
    eval_id = store.add_evaluation(run_id, candidate.candidate_id, result, kind="search")
    derive(store, eval_id, candidate, result, problem, fingerprint, parent_eval_id=parent_eval_id)
    return eval_id


def record_failure(store, candidate_id: str, result: EvalResult, problem: ProblemInfo, fingerprint) -> None:
    """Count a failed evaluation in the store's failure patterns (by family, arch, stage and class)."""
    store.record_failure(
        problem.op_family,
        fingerprint.arch,
        result.failed_stage.value if result.failed_stage else "unknown",
        result.error_class or result.status.value,
        result.message or result.status.value,
        candidate_id,
    )


def derive(store, eval_id, candidate, result, problem, fingerprint, *, parent_eval_id=None) -> None:
    if result.status is Status.not_judged:  # the interpreter ran out of time: no knowledge about the kernel
        return
    if not result.passed:
        record_failure(store, candidate.candidate_id, result, problem, fingerprint)
    for outcome in outcomes_for(candidate, result, eval_id, problem, fingerprint, parent_eval_id):
        store.add_outcome(outcome)


def backfill(
    store,
    run_id: str,
    candidates: dict[str, CandidateRecord],
    evaluations,
    problem,
    fingerprint,
    parent_eval: dict[str, str],
) -> int:
    """Redo the derived rows of evaluations a killed session wrote without them; returns how many."""
    have = {
        o.evidence_eval_ids[0]
        for o in store.outcomes(op_family=problem.op_family, arch=fingerprint.arch, limit=100_000)
        if o.evidence_eval_ids
    }
    done = 0
    for eval_id, cid, result in evaluations:
        if eval_id in have or cid not in candidates:
            continue
        c = candidates[cid]
        derive(store, eval_id, c, result, problem, fingerprint, parent_eval_id=parent_eval.get(c.parent_id or ""))
        done += 1
    return done


def remeasure_as_eval(rc, rm, searched: EvalResult) -> EvalResult:
    """A re-measure in the evaluation record's shape, so the store and the approval gate read one type.

    Per-round p50s become the timing distribution (n_samples = rounds); the interval is the spread of
    the per-round ratios. Warm-up and L2 flushing are those of the search evaluation's timing method.
    """
    import statistics

    from evaluation.records import Baseline, Speedup, Status, TimedCase, TimingStats

    searched_by_case = {t.case_id: t for t in searched.timing}

    def stats(p50s, case_id, method):
        ordered = sorted(p50s)
        q = statistics.quantiles(ordered, n=5, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 4
        prior = searched_by_case.get(case_id)
        return TimingStats(
            latency_ms_p20=q[0],
            latency_ms_p50=statistics.median(ordered),
            latency_ms_p80=q[3],
            latency_ms_min=ordered[0],
            latency_ms_mean=statistics.fmean(ordered),
            n_samples=len(ordered),
            n_warmup=prior.candidate.n_warmup if prior else 0,
            l2_flushed=prior.candidate.l2_flushed if prior else False,
            method=method,
        )

    def case(c) -> TimedCase:
        baselines = [Baseline(name="eager", timing=stats(c.baseline_p50s_ms, c.case_id, c.method))]
        speedups = [
            Speedup(
                baseline="eager",
                ratio=c.speedup,
                ratio_low=c.speedup_min,
                ratio_high=c.speedup_max,
                significant=c.significant,
            )
        ]
        if c.compile_p50s_ms and c.speedup_vs_compile is not None:
            baselines.append(Baseline(name="torch_compile", timing=stats(c.compile_p50s_ms, c.case_id, c.method)))
            speedups.append(
                Speedup(
                    baseline="torch_compile",
                    ratio=c.speedup_vs_compile,
                    ratio_low=c.speedup_vs_compile_min,
                    ratio_high=c.speedup_vs_compile_max,
                    significant=c.speedup_vs_compile_min > 1.0 or c.speedup_vs_compile_max < 1.0,
                )
            )
        if c.autotune_p50s_ms and c.speedup_vs_autotune is not None:
            name = "torch_compile_max_autotune"
            baselines.append(Baseline(name=name, timing=stats(c.autotune_p50s_ms, c.case_id, c.method)))
            speedups.append(
                Speedup(
                    baseline=name,
                    ratio=c.speedup_vs_autotune,
                    ratio_low=c.speedup_vs_autotune_min,
                    ratio_high=c.speedup_vs_autotune_max,
                    significant=c.speedup_vs_autotune_min > 1.0 or c.speedup_vs_autotune_max < 1.0,
                )
            )
        prior = searched_by_case.get(c.case_id)
        cand = stats(c.candidate_p50s_ms, c.case_id, c.method)
        gbps = prior.bytes_moved / (cand.latency_ms_p50 * 1e-3) / 1e9 if prior and prior.bytes_moved else None
        return TimedCase(
            case_id=c.case_id,
            params=c.params,
            dtype=c.dtype,
            candidate=cand,
            baselines=tuple(baselines),
            speedups=tuple(speedups),
            bytes_moved=prior.bytes_moved if prior else None,
            flops=prior.flops if prior else None,
            achieved_gbps=gbps,
            pct_of_ceiling=100.0 * gbps / searched.ceiling_gbps if gbps and searched.ceiling_gbps else None,
        )

    timing = tuple(case(c) for c in rc.cases)
    named = ["eager"] + ["torch.compile"] * any(c.compile_p50s_ms for c in rc.cases)
    named += ["max-autotune"] * any(c.autotune_p50s_ms for c in rc.cases)
    against = f"{', '.join(named[:-1])} and {named[-1]}" if len(named) > 1 else "eager"
    return EvalResult(
        status=Status.passed,
        candidate_sha256=rc.candidate_sha256,
        problem_id=rm.problem_id,
        problem_name=rm.problem_name,
        device=rm.device,
        timing=timing,
        ceiling_gbps=searched.ceiling_gbps,
        timing_note=f"re-measured in {rm.rounds} rounds interleaved with {against}",
        fingerprint=rm.fingerprint,
        started_at=rm.started_at,
        duration_s=rm.duration_s,
        stderr_tail=rm.stderr_tail[-2000:],
        isolation=rm.isolation,
    )
