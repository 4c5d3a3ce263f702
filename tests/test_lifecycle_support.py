"""Builders shared by the lifecycle, export and report tests (this file holds no tests).

GPU evidence cannot be produced on a CPU machine, so GPU evaluations are written as the evaluator's
own records with the values a GPU run would carry; everything else (problems, the store, the CPU
evaluator, the Triton interpreter) is real. `write_deployment` bypasses the gate on purpose: it is how
a test gets a CPU kernel deployed, which the gate refuses by design.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Optional

from agent.lifecycle.evidence import Assumptions, PromotionEvidence, op_key, proven_ranges
from evaluation.records import (
    Baseline,
    EvalResult,
    Fingerprint,
    ProblemInfo,
    ShapeResult,
    Speedup,
    Status,
    TimedCase,
    TimingStats,
    source_sha256,
)
from store.records import CandidateRecord, PromotionEvent, PromotionState, RunRecord, StopRule, utc_now

SEED = (Path(__file__).resolve().parents[1] / "evaluation" / "seeds" / "layernorm.py").read_text()
KNOBS = '{"BLOCK_N": "next_pow2(N)", "num_warps": 4, "rows_per_program": 1}'


def gpu_fp(**changes) -> Fingerprint:
    base = dict(
        device_kind="cuda",
        device_name="NVIDIA H200",
        arch="sm_90",
        driver_version="575.57.08",
        cuda_version="12.9",
        triton_version="3.4.0",
        torch_version="2.8.0+cu129",
        python_version="3.12.3",
        kernelscout_version="0.1.0",
    )
    base.update(changes)
    return Fingerprint(**base)


def cpu_fp() -> Fingerprint:
    return Fingerprint(
        device_kind="cpu",
        device_name="cpu (triton interpreter)",
        arch="cpu",
        triton_version="3.9.0",
        torch_version="2.13.0",
        python_version="3.11.2",
        kernelscout_version="0.1.0",
        triton_interpret=True,
    )


def variant(n: int) -> str:
    """A distinct candidate source (a distinct content hash) that computes the same layernorm."""
    return SEED + f"\n# variant {n}\n"


# Both of the seed's paths (one block, and the loop over blocks past max_block_n) add 0.5.
BROKEN = SEED.replace("(diff * rstd * w + b)", "(diff * rstd * w + b + 0.5)").replace(
    "((x - mean) * rstd * w + b)", "((x - mean) * rstd * w + b + 0.5)"
)
assert BROKEN.count("+ 0.5") == 2


def shape_results(
    problem: ProblemInfo,
    *,
    drop: tuple[str, ...] = (),
    drop_dtype: Optional[str] = None,
    fail: tuple[str, ...] = (),
) -> tuple[ShapeResult, ...]:
    out = []
    for case in problem.shape_cases:
        if case.case_id in drop or case.dtype == drop_dtype:
            continue
        tol = problem.tolerances[case.dtype]
        ok = case.case_id not in fail
        out.append(
            ShapeResult(
                case_id=case.case_id,
                params=case.params,
                dtype=case.dtype,
                passed=ok,
                trials=3,
                seeds=(1, 2, 3),
                atol=tol.atol,
                rtol=tol.rtol,
                max_abs_error=1e-6 if ok else 0.5,
                max_rel_error=1e-6 if ok else 0.3,
                numel=case.params.get("M", 1) * case.params.get("N", 1),
                message=None if ok else "max abs error 0.5",
            )
        )
    return tuple(out)


def _stats(p50: float) -> TimingStats:
    return TimingStats(
        latency_ms_p20=p50 * 0.98,
        latency_ms_p50=p50,
        latency_ms_p80=p50 * 1.02,
        latency_ms_min=p50 * 0.95,
        latency_ms_mean=p50,
        n_samples=100,
        n_warmup=10,
        l2_flushed=True,
        method="cuda_graph",
    )


def timing(problem: ProblemInfo, ratio: float, low: float, high: float) -> tuple[TimedCase, ...]:
    cases = [c for c in problem.shape_cases if "timed" in c.tags] or list(problem.shape_cases[:1])
    return tuple(
        TimedCase(
            case_id=c.case_id,
            params=c.params,
            dtype=c.dtype,
            candidate=_stats(0.1),
            baselines=(Baseline(name="eager", timing=_stats(0.1 * ratio)),),
            speedups=(
                Speedup(
                    baseline="eager",
                    ratio=ratio,
                    ratio_low=low,
                    ratio_high=high,
                    significant=low > 1.0 or high < 1.0,
                ),
            ),
        )
        for c in cases
    )


def result(
    problem: ProblemInfo,
    source: str,
    fp: Fingerprint,
    *,
    status: Status = Status.passed,
    shapes=None,
    timed=(),
    note: Optional[str] = None,
    error_class: Optional[str] = None,
    isolation: Optional[str] = "bwrap",
) -> EvalResult:
    return EvalResult(
        status=status,
        candidate_sha256=source_sha256(source),
        problem_id=problem.problem_id,
        problem_name=problem.name,
        device="cpu" if fp.device_kind == "cpu" else "cuda",
        shape_results=shape_results(problem) if shapes is None else shapes,
        timing=tuple(timed),
        timing_note=note,
        error_class=error_class,
        message=None if status is Status.passed else "it failed",
        triton_launches=4,
        fingerprint=fp,
        started_at=utc_now(),
        duration_s=1.5,
        isolation=isolation,
    )


def make_run(store, problem: ProblemInfo, fp: Fingerprint) -> RunRecord:
    store.record_problem(problem)
    run = RunRecord(
        run_id=uuid.uuid4().hex,
        problem_id=problem.problem_id,
        problem_name=problem.name,
        op_family=problem.op_family,
        device="cpu" if fp.device_kind == "cpu" else "cuda",
        arch=fp.arch,
        env_id=store.record_environment(fp),
        proposer="template",
        seed=0,
        stop_rule=StopRule(max_evaluations=10),
        started_at=utc_now(),
    )
    store.create_run(run)
    return run


def add_candidate(
    store,
    run: RunRecord,
    source: str,
    *,
    parent: Optional[str] = None,
    generation: int = 0,
    knobs: str = KNOBS,
    action: str = "seed",
) -> CandidateRecord:
    c = CandidateRecord(
        candidate_id=source_sha256(source),
        run_id=run.run_id,
        parent_id=parent,
        generation=generation,
        proposer="template",
        knobs_json=knobs,
        policy_action=action,
        rationale=f"gen {generation}",
        transformation_tags=("rows_per_program=1",),
        source=source,
        created_at=utc_now(),
    )
    store.add_candidate(c)
    return c


def gpu_candidate(
    store,
    problem: ProblemInfo,
    source: str,
    *,
    run: Optional[RunRecord] = None,
    correctness=None,
    remeasure="default",
    knobs: str = KNOBS,
) -> CandidateRecord:
    """A candidate with a full GPU history unless told otherwise: passed search + significant re-measure."""
    fp = gpu_fp()
    with store.session():
        run = run or make_run(store, problem, fp)
        c = add_candidate(store, run, source, knobs=knobs)
        store.add_evaluation(run.run_id, c.candidate_id, correctness or result(problem, source, fp), kind="search")
        if remeasure == "default":
            remeasure = result(problem, source, fp, shapes=(), timed=timing(problem, 1.4, 1.3, 1.5))
        if remeasure is not None:
            store.add_evaluation(run.run_id, c.candidate_id, remeasure, kind="remeasure")
    return c


def write_deployment(
    store,
    problem: ProblemInfo,
    candidate: CandidateRecord,
    fp: Fingerprint,
    *,
    approved_by: str = "alice",
    previous: Optional[str] = None,
    speedup: Optional[tuple[float, float, float]] = None,
) -> PromotionEvidence:
    """Test-only: append approved+deployed events with hand-built evidence, bypassing the gate."""
    res = result(problem, candidate.source, fp)
    eval_id = store.add_evaluation(candidate.run_id, candidate.candidate_id, res, kind="search")
    evidence = PromotionEvidence(
        candidate_id=candidate.candidate_id,
        run_id=candidate.run_id,
        op=op_key(problem),
        arch=fp.arch,
        device_name=fp.device_name,
        problem_id=problem.problem_id,
        problem_name=problem.name,
        problem_source_path=problem.source_path,
        problem_source_sha256=problem.source_sha256,
        correctness_eval_id=eval_id,
        shape_cases_passed=tuple(c.case_id for c in problem.shape_cases),
        remeasure_eval_id=None,
        speedup=speedup[0] if speedup else None,
        speedup_low=speedup[1] if speedup else None,
        speedup_high=speedup[2] if speedup else None,
        assumptions=Assumptions(
            knobs={"BLOCK_N": "next_pow2(N)"},
            knobs_source="knobs_json",
            shape_range=proven_ranges(res),
            dtypes=tuple(sorted(problem.dtypes)),
        ),
        env=fp,
    )
    for state in (PromotionState.approved, PromotionState.deployed):
        store.add_promotion_event(
            PromotionEvent(
                event_id=uuid.uuid4().hex,
                op_family=evidence.op,
                problem_id=problem.problem_id,
                arch=fp.arch,
                candidate_id=candidate.candidate_id,
                state=state,
                actor=approved_by,
                evidence_json=evidence.model_dump_json(),
                previous_candidate_id=previous,
                created_at=utc_now(),
            )
        )
    return evidence
