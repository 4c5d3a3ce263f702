"""Rows without vectors: runs, candidates, evaluations, problems, LLM calls and promotions."""

from __future__ import annotations

import math

import pytest
from test_store_factories import candidate, failed_result, fingerprint, passed_result, problem, run

from evaluation.records import EvalResult
from store import Store, StoreError
from store.records import LLMCall, PromotionEvent, PromotionState, RunStatus, utc_now


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "home") as s:
        yield s


def _same(a: EvalResult, b: EvalResult) -> bool:
    """Equality that treats NaN as equal to NaN (a NaN error must come back as NaN)."""
    from store.rows import dumps

    return dumps(a) == dumps(b)


def test_run_round_trips_and_finishing_records_status_reason_and_best(store):
    r = run()
    store.create_run(r)
    assert store.get_run(r.run_id) == r
    c = candidate(r.run_id)
    store.add_candidate(c)
    store.finish_run(
        r.run_id, status=RunStatus.finished, stop_reason="stall limit 40", best_candidate_id=c.candidate_id
    )
    done = store.get_run(r.run_id)
    assert (done.status, done.stop_reason, done.best_candidate_id) == (
        RunStatus.finished,
        "stall limit 40",
        c.candidate_id,
    )
    assert done.finished_at is not None and done.finished_at >= r.started_at
    assert done.stop_rule == r.stop_rule


def test_finishing_an_unknown_run_a_foreign_best_candidate_or_a_bad_status_is_refused(store):
    r = run()
    store.create_run(r)
    with pytest.raises(StoreError, match="unknown run"):
        store.finish_run("nope", status=RunStatus.failed, stop_reason="x", best_candidate_id=None)
    with pytest.raises(StoreError, match="not part of run"):
        store.finish_run(r.run_id, status=RunStatus.finished, stop_reason="x", best_candidate_id="f" * 64)
    with pytest.raises(StoreError, match="unknown run status 'done'"):
        store.finish_run(r.run_id, status="done", stop_reason="x", best_candidate_id=None)
    assert store.get_run(r.run_id).status is RunStatus.running


def test_creating_the_same_run_twice_is_refused(store):
    r = run()
    store.create_run(r)
    with pytest.raises(StoreError, match="already exists"):
        store.create_run(r)
    assert len(store.list_runs()) == 1


def test_run_ids_resolve_from_a_unique_prefix_and_refuse_ambiguous_or_unknown_ones(store):
    for run_id in ("3fa2aaaa", "3fa2bbbb", "3fb00000", "3f"):
        store.create_run(run(run_id))
    assert store.get_run("3fb").run_id == "3fb00000"
    assert store.get_run("3fa2b").run_id == "3fa2bbbb"
    assert store.get_run("3f").run_id == "3f"  # an exact id wins over the ids it is a prefix of
    with pytest.raises(StoreError, match="ambiguous.*3fa2aaaa.*3fa2bbbb"):
        store.get_run("3fa2")
    with pytest.raises(StoreError, match="no run matches 'zz'"):
        store.get_run("zz")
    with pytest.raises(StoreError, match="empty run id"):
        store.get_run("  ")


def test_list_runs_is_newest_first_and_limited(store):
    runs = [run(f"run{i}").model_copy(update={"started_at": f"2026-01-0{i}T00:00:00+00:00"}) for i in range(1, 5)]
    for r in runs:
        store.create_run(r)
    assert [r.run_id for r in store.list_runs(limit=3)] == ["run4", "run3", "run2"]


def test_adding_the_same_candidate_twice_to_a_run_adds_nothing(store):
    r = run()
    store.create_run(r)
    c = candidate(r.run_id)
    assert store.add_candidate(c) is True
    assert store.add_candidate(c) is False
    assert store.candidates(r.run_id) == [c]
    assert store.db.query("SELECT count(*) AS n FROM candidates")[0]["n"] == 1


def test_a_source_proposed_by_two_runs_is_stored_once_with_two_lineage_rows(store):
    first, second = run("run-a"), run("run-b")
    store.create_run(first)
    store.create_run(second)
    a = candidate(first.run_id, 3)
    b = a.model_copy(update={"run_id": second.run_id, "generation": 0, "policy_action": "seed"})
    store.add_candidate(a)
    store.add_candidate(b)
    assert store.db.query("SELECT count(*) AS n FROM candidate_sources")[0]["n"] == 1
    assert store.get_candidate(a.candidate_id[:8]) == a  # without a run: the first run's row
    assert store.get_candidate(a.candidate_id[:8], run_id="run-b") == b
    with pytest.raises(StoreError, match="ambiguous"):
        store.get_candidate(a.candidate_id, run_id="run-")


def test_candidates_come_back_in_insertion_order_with_their_lineage(store):
    r = run()
    store.create_run(r)
    made = []
    parent = None
    for i in range(5):
        c = candidate(r.run_id, i, parent_id=parent)
        store.add_candidate(c)
        made.append(c)
        parent = c.candidate_id
    got = store.candidates(r.run_id)
    assert got == made
    assert [c.parent_id for c in got][1:] == [c.candidate_id for c in made][:-1]
    assert got[2].transformation_tags == ("block_size", "num_warps")


def test_candidate_prefix_lookup_refuses_ambiguous_and_unknown_prefixes(store):
    r = run()
    store.create_run(r)
    ids = []
    with store.session():  # one connection for the 40 writes
        for i in range(40):  # 40 hashes surely share a first hex digit
            c = candidate(r.run_id, i)
            store.add_candidate(c)
            ids.append(c.candidate_id)
    shared = next(p for p in "0123456789abcdef" if sum(i.startswith(p) for i in ids) > 1)
    with pytest.raises(StoreError, match="candidate id .* is ambiguous"):
        store.get_candidate(shared)
    assert store.get_candidate(ids[7][:12]).candidate_id == ids[7]
    with pytest.raises(StoreError, match="no candidate matches"):
        store.get_candidate("not-a-hash")


def test_rejects_a_candidate_whose_id_is_not_the_sha256_of_its_source(store):
    r = run()
    store.create_run(r)
    c = candidate(r.run_id).model_copy(update={"source": "class ModelNew: pass\n"})
    with pytest.raises(StoreError, match="not the sha256 of its source"):
        store.add_candidate(c)
    assert store.candidates(r.run_id) == []


def test_rejects_a_candidate_of_an_unknown_run(store):
    with pytest.raises(StoreError, match="unknown run 'ghost'"):
        store.add_candidate(candidate("ghost"))


def test_evaluation_keeps_every_float_exactly_and_its_summary_columns_match(store):
    r = run()
    store.create_run(r)
    c = candidate(r.run_id)
    store.add_candidate(c)
    result = passed_result(c.candidate_id, p50=0.012345678901234567)
    eval_id = store.add_evaluation(r.run_id, c.candidate_id, result)

    [(got_id, got_run, got_cand, got)] = store.evaluations(run_id=r.run_id)
    assert (got_id, got_run, got_cand) == (eval_id, r.run_id, c.candidate_id)
    assert got == result
    assert store.get_evaluation(eval_id) == result
    row = store.db.query("SELECT * FROM evaluations WHERE eval_id = ?", [eval_id])[0]
    assert row["status"] == "passed" and row["kind"] == "search"
    assert row["env_id"] == result.fingerprint.key()
    assert row["speedup_vs_eager"] == pytest.approx(result.speedup("eager"), rel=1e-12)
    assert row["speedup_vs_compile"] == pytest.approx(result.speedup("torch_compile"), rel=1e-12)
    assert row["speedup_vs_eager_low"] < row["speedup_vs_eager"] < row["speedup_vs_eager_high"]
    timings = store.db.query("SELECT * FROM evaluation_timings WHERE eval_id = ? ORDER BY ordinal", [eval_id])
    assert [t["case_id"] for t in timings] == [t.case_id for t in result.timing]
    assert timings[0]["latency_ms_p50"] == 0.012345678901234567  # not rounded on the way
    assert timings[0]["eager_latency_ms_p50"] == 0.031
    assert timings[1]["speedup_vs_compile"] == result.timing[1].speedups[1].ratio
    assert store.get_environment(row["env_id"]) == result.fingerprint


def test_evaluation_of_a_candidate_that_produced_nan_keeps_the_nan(store):
    r = run()
    store.create_run(r)
    c = candidate(r.run_id)
    store.add_candidate(c)
    result = failed_result(c.candidate_id)
    eval_id = store.add_evaluation(r.run_id, c.candidate_id, result)
    got = store.get_evaluation(eval_id)
    assert _same(got, result)
    assert math.isnan(got.shape_results[0].first_mismatch.actual)
    assert got.shape_results[0].max_rel_error == math.inf
    row = store.db.query("SELECT * FROM evaluations WHERE eval_id = ?", [eval_id])[0]
    assert (row["status"], row["failed_stage"], row["error_class"]) == ("incorrect", "correctness", "Mismatch")
    assert math.isnan(row["max_abs_error"]) and row["n_shapes_failed"] == 1
    assert row["speedup_vs_eager"] is None  # not measured is absent, never a sentinel
    shape = store.db.query("SELECT * FROM evaluation_shapes WHERE eval_id = ?", [eval_id])[0]
    assert (shape["passed"], shape["mismatch_count"], shape["message"]) == (
        False,
        12,
        "NaN where the reference has none",
    )


def test_evaluations_filter_by_candidate_and_kind_oldest_first(store):
    r = run()
    store.create_run(r)
    a, b = candidate(r.run_id, 0), candidate(r.run_id, 1)
    store.add_candidate(a)
    store.add_candidate(b)
    e1 = store.add_evaluation(r.run_id, a.candidate_id, passed_result(a.candidate_id))
    e2 = store.add_evaluation(r.run_id, b.candidate_id, failed_result(b.candidate_id))
    e3 = store.add_evaluation(r.run_id, a.candidate_id, passed_result(a.candidate_id), kind="remeasure")
    assert [e[0] for e in store.evaluations()] == [e1, e2, e3]
    assert [e[0] for e in store.evaluations(candidate_id=a.candidate_id)] == [e1, e3]
    assert [e[0] for e in store.evaluations(run_id=r.run_id, kind="remeasure")] == [e3]
    assert store.evaluations(run_id="other") == []


def test_evaluation_is_refused_for_a_wrong_kind_a_foreign_candidate_or_a_mismatched_result(store):
    r = run()
    store.create_run(r)
    c = candidate(r.run_id)
    store.add_candidate(c)
    with pytest.raises(StoreError, match="unknown evaluation kind 'final'"):
        store.add_evaluation(r.run_id, c.candidate_id, passed_result(c.candidate_id), kind="final")
    with pytest.raises(StoreError, match="not part of run"):
        store.add_evaluation("other-run", c.candidate_id, passed_result(c.candidate_id))
    with pytest.raises(StoreError, match="evaluation is of candidate"):
        store.add_evaluation(r.run_id, c.candidate_id, passed_result("f" * 64))
    with pytest.raises(StoreError, match="unknown evaluation"):
        store.get_evaluation("nope")
    assert store.evaluations() == []


def test_recording_the_same_environment_or_problem_twice_keeps_one_row(store):
    fp = fingerprint()
    assert store.record_environment(fp) == fp.key()
    assert store.record_environment(fp) == fp.key()
    assert store.get_environment(fp.key()) == fp
    info = problem()
    assert store.record_problem(info) == info.problem_id
    assert store.record_problem(info) == info.problem_id
    assert store.get_problem(info.problem_id) == info
    counts = store.db.query(
        "SELECT (SELECT count(*) FROM environments) AS envs, (SELECT count(*) FROM problems) AS problems"
    )
    assert counts == [{"envs": 1, "problems": 1}]
    with pytest.raises(StoreError, match="unknown problem"):
        store.get_problem("0" * 16)


def _call(call_id: str, run_id: str | None, **kw) -> LLMCall:
    base = dict(
        call_id=call_id,
        run_id=run_id,
        model="openai/gpt-x",
        template_name="propose.j2",
        template_sha256="b" * 64,
        rendered_prompt="write a kernel",
        response_text="```python```",
        prompt_tokens=1200,
        completion_tokens=300,
        cost_usd=0.0123456789,
        duration_ms=812.25,
        created_at=utc_now(),
    )
    base.update(kw)
    return LLMCall(**base)


def test_llm_calls_round_trip_per_run_and_a_repeated_id_is_refused(store):
    calls = [
        _call("c1", "run-1"),
        _call("c2", "run-1", error="RateLimitError: slow down", attempt=2, response_text=None, cost_usd=None),
        _call("c3", "run-2"),
    ]
    for c in calls:
        store.record_llm_call(c)
    assert store.llm_calls("run-1") == calls[:2]
    assert store.llm_calls() == calls
    with pytest.raises(StoreError, match="already recorded"):
        store.record_llm_call(calls[0])


def _event(event_id: str, state: PromotionState, candidate_id: str | None, arch: str = "sm_90") -> PromotionEvent:
    return PromotionEvent(
        event_id=event_id,
        op_family="layernorm",
        problem_id="p" * 16,
        arch=arch,
        candidate_id=candidate_id,
        state=state,
        actor="alice",
        created_at=utc_now(),
        evidence_json='{"speedup": 1.41}',
    )


def test_promotion_history_is_append_only_and_oldest_first(store):
    events = [
        _event("e1", PromotionState.proposed, "a" * 64),
        _event("e2", PromotionState.approved, "a" * 64),
        _event("e3", PromotionState.deployed, "a" * 64),
        _event("e4", PromotionState.rolled_back, None),
        _event("e5", PromotionState.deployed, "b" * 64, arch="gfx942"),
    ]
    for e in events:
        store.add_promotion_event(e)
    assert store.promotion_history(op_family="layernorm", arch="sm_90") == events[:4]
    assert store.promotion_history(arch="gfx942") == events[4:]
    with pytest.raises(StoreError, match="append-only"):
        store.add_promotion_event(events[1].model_copy(update={"state": PromotionState.flagged}))
    assert store.promotion_history()[1].state is PromotionState.approved
    assert not hasattr(store, "delete_promotion_event")
