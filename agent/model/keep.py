"""The assembled model in the store: one run, one candidate, its end-to-end evaluations and an outcome.

The assembled ModelNew is one artifact: its source holds every region's winning kernel and the dispatch
to the reference ops, so the approval gate promotes it as one candidate of the model's op
(`flow.model_family`: "model:minigptblock"), a rollback restores the previous model (or the reference)
in one event, and `kscout revalidate` judges it end to end again against the model's problem file, which
carries its own shapes and tolerances.

What the gate reads is what any search leaves: the end-to-end judge as a `search` evaluation and, on a
GPU, an interleaved re-measure against eager and torch.compile of the whole model as a `remeasure`
evaluation. The run's config holds the regions' run ids and the model report, so `kscout report RUN
--html` draws the model view. The outcome names the model and each region's schedule, so the knowledge
store answers "what worked for MiniGPT blocks on H200"; each region's search is an ordinary run with its
own outcomes.
"""

from __future__ import annotations

import json
import uuid
from typing import Optional

from agent.model.records import ModelReport
from evaluation.records import BASELINES, EvalResult, ProblemInfo, source_sha256
from store.records import CandidateRecord, RunRecord, RunStatus, StopRule, utc_now

PROPOSER = "optimize-model"
REMEASURE_ROUNDS = 5
AUTOTUNE = "torch_compile_max_autotune"  # optimize-model --max-autotune: minutes of autotuning for a big model


def region_knobs(store, report: ModelReport) -> dict[str, dict]:
    """Each region with a kernel: its candidate, schedule and the knobs its own run recorded."""
    out: dict[str, dict] = {}
    for r in report.regions:
        if r.kernel is None or r.run_id is None:
            continue
        knobs = json.loads(store.get_candidate(r.kernel, run_id=r.run_id).knobs_json or "{}")
        out[r.name] = {"candidate": r.kernel, "run": r.run_id, "schedule": r.schedule, "knobs": knobs}
    return out


def record(
    store,
    report: ModelReport,
    source: str,
    problem: ProblemInfo,
    result: EvalResult,
    *,
    executor=None,
    autotune: bool = False,
) -> ModelReport:
    """Write the model's run, its candidate and its judge (and, on a GPU that passed it, an interleaved
    re-measure through `executor`, with max-autotune of the whole model in the rotation when `autotune`);
    returns the report with the run, the candidate and the re-measured speedups, which the run's config
    keeps."""
    from agent.search import writeback

    fp = result.fingerprint
    kernels = region_knobs(store, report)
    run_id, cid = uuid.uuid4().hex, source_sha256(source)
    timed: Optional[EvalResult] = None
    update: dict = {}
    if executor is not None and result.passed and result.device == "cuda":
        timed, update = _remeasure(cid, source, problem, result, executor, autotune=autotune)
    final = report.model_copy(update={**update, "run_id": run_id, "candidate_id": cid})
    config = {
        "model": report.model,
        "regions": {r.name: r.run_id for r in report.regions if r.run_id},
        "model_report": final.model_dump(mode="json"),
    }
    with store.session():
        store.record_problem(problem)
        run = RunRecord(
            run_id=run_id,
            problem_id=problem.problem_id,
            problem_name=problem.name,
            op_family=problem.op_family,
            device=result.device,
            arch=fp.arch,
            env_id=store.record_environment(fp),
            proposer=PROPOSER,
            seed=0,
            stop_rule=StopRule(max_evaluations=1),
            started_at=utc_now(),
            config_json=json.dumps(config),
        )
        store.create_run(run)
        candidate = CandidateRecord(
            candidate_id=cid,
            run_id=run_id,
            generation=0,
            proposer=PROPOSER,
            rationale=f"{report.model} assembled from regions {', '.join(kernels) or '(none: reference ops only)'}",
            transformation_tags=tuple(f"{name}:{k['schedule'] or 'kernel'}" for name, k in kernels.items())
            or ("reference",),
            # the regions' own knobs: what the gate states as the artifact's assumptions
            knobs_json=json.dumps({"regions": kernels}, sort_keys=True),
            source=source,
            created_at=utc_now(),
        )
        store.add_candidate(candidate)
        eval_id = store.add_evaluation(run_id, cid, result, kind="search")
        if timed is not None:  # the outcome cites the interleaved numbers it reports
            eval_id = store.add_evaluation(run_id, cid, timed, kind="remeasure")
        if not result.passed:
            writeback.record_failure(store, cid, result, problem, fp)
        for o in writeback.outcomes_for(candidate, timed or result, eval_id, problem, fp):
            store.add_outcome(o.model_copy(update={"summary": f"model {report.model}: {o.summary}"}))
        store.finish_run(
            run_id,
            status=RunStatus.finished,
            stop_reason="judged end to end" if result.passed else f"end-to-end judge: {result.status.value}",
            best_candidate_id=cid if result.passed else None,
        )
    return final


def _remeasure(
    cid: str, source: str, problem, result, executor, *, autotune: bool = False
) -> tuple[Optional[EvalResult], dict]:
    """The assembled model and the whole model's baselines, timed round by round in one process."""
    from agent.search import writeback

    baselines = BASELINES + (AUTOTUNE,) if autotune else BASELINES
    rm = executor.remeasure({cid: source}, problem, rounds=REMEASURE_ROUNDS, baselines=baselines)
    for rc in rm.candidates:
        if rc.name != cid or not rc.cases:
            continue
        timed = writeback.remeasure_as_eval(rc, rm, result)
        eager, comp = timed.measured_speedup("eager"), timed.measured_speedup("torch_compile")
        tuned = timed.measured_speedup(AUTOTUNE)
        if eager is None:
            return timed, {}
        return timed, {
            "speedup": eager.ratio,
            "speedup_low": eager.ratio_low,
            "speedup_high": eager.ratio_high,
            "compile_speedup": comp.ratio if comp else None,
            "autotune_speedup": tuned.ratio if tuned else None,
            "speedup_source": "remeasure",
        }
    return None, {"timing_note": f"the re-measure gave no numbers ({rm.note or 'not timed'})"}


def stored_report(run) -> Optional[ModelReport]:
    """The model report a run of `kscout optimize-model` carries; None for any other run."""
    if run.proposer != PROPOSER:
        return None
    data = json.loads(run.config_json or "{}").get("model_report")
    return ModelReport.model_validate(data) if data else None
