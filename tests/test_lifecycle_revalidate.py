"""Revalidation re-runs deployed kernels through the real evaluator; failures are flagged and rolled back.

A real CPU evaluation costs ~10 s, so only three run here; the timing rules (regression beyond the
recorded noise) are checked on the evaluator's own records as a GPU would produce them.
"""

from __future__ import annotations

import json

import pytest
from test_lifecycle_support import (
    BROKEN,
    SEED,
    add_candidate,
    gpu_fp,
    make_run,
    result,
    shape_results,
    timing,
    write_deployment,
)

import evaluation
from agent.cli import main
from agent.lifecycle.registry import FlagNote, deployed_entries
from agent.lifecycle.revalidate import judge_revalidation, revalidate
from evaluation.records import Status
from store import Store
from store.records import PromotionState


@pytest.fixture(scope="module")
def cpu_problem():
    return evaluation.load_problem("layernorm", device="cpu")


@pytest.fixture
def cpu_history(tmp_path, cpu_problem):
    """On the CPU arch: the seed deployed, then a broken kernel deployed over it (live)."""
    home = tmp_path / "store"
    fp = evaluation.fingerprint("cpu")
    with Store.open(home) as store:
        run = make_run(store, cpu_problem, fp)
        good, bad = add_candidate(store, run, SEED), add_candidate(store, run, BROKEN, generation=1)
        write_deployment(store, cpu_problem, good, fp)
        write_deployment(store, cpu_problem, bad, fp, previous=good.candidate_id)
    return home, good.candidate_id, bad.candidate_id


def test_revalidate_flags_a_failing_kernel_and_rolls_back_to_the_previous_known_good(cpu_history, cpu_problem):
    home, good, bad = cpu_history
    n = len(cpu_problem.shape_cases)  # the broken kernel adds 0.5 to every output: every case fails
    with Store.open(home) as store:
        (outcome,) = revalidate(store, rollback_on_fail=True, by="nightly")
        events = store.promotion_history(op_family="layernorm", arch="cpu")
        stored = store.evaluations(candidate_id=bad, kind="revalidate")
        (entry,) = deployed_entries(store)
    assert outcome.verdict == "failed" and outcome.reason.startswith(f"incorrect: {n} of {n} cases failed")
    assert outcome.rolled_back and outcome.rolled_back_to == good
    assert [e.state for e in events[-2:]] == [PromotionState.flagged, PromotionState.rolled_back]
    assert events[-2].candidate_id == bad and events[-2].actor == "nightly"
    assert FlagNote.model_validate_json(events[-2].evidence_json).eval_id == outcome.eval_id
    assert (events[-1].candidate_id, events[-1].previous_candidate_id) == (good, bad)
    assert [eid for eid, *_ in stored] == [outcome.eval_id] and stored[0][3].status is Status.incorrect
    assert entry.candidate_id == good and not entry.flagged


def test_revalidate_passes_a_correct_kernel_and_appends_no_event(tmp_path, cpu_problem):
    fp = evaluation.fingerprint("cpu")
    with Store.open(tmp_path / "store") as store:
        run = make_run(store, cpu_problem, fp)
        seed = add_candidate(store, run, SEED)
        write_deployment(store, cpu_problem, seed, fp)
        before = store.promotion_history()
        (outcome,) = revalidate(store, rollback_on_fail=True)
        assert store.promotion_history() == before
        ((eval_id, run_id, cid, res),) = store.evaluations(kind="revalidate")
    assert outcome.verdict == "passed" and outcome.eval_id == eval_id and not outcome.rolled_back
    assert (run_id, cid) == (run.run_id, seed.candidate_id)
    assert res.passed and len(res.shape_results) == len(cpu_problem.shape_cases)


def test_revalidate_cli_without_rollback_flags_keeps_the_kernel_live_and_exits_1(cpu_history, capsys):
    home, good, bad = cpu_history
    with pytest.raises(SystemExit) as info:
        main(["revalidate", "--store", str(home), "--json"])
    assert info.value.code == 1
    out = json.loads(capsys.readouterr().out)
    assert out["flagged"] == 1 and out["revalidations"][0]["verdict"] == "failed"
    assert out["revalidations"][0]["rolled_back"] is False
    with Store.open(home) as store:
        (entry,) = deployed_entries(store)
    assert entry.candidate_id == bad and entry.flagged and entry.rollback_target == good


def test_revalidate_skips_kernels_deployed_for_another_arch(tmp_path):
    problem = evaluation.load_problem("layernorm", device="cuda")
    with Store.open(tmp_path / "store") as store:
        run = make_run(store, problem, gpu_fp())
        c = add_candidate(store, run, SEED)
        write_deployment(store, problem, c, gpu_fp(), speedup=(1.4, 1.3, 1.5))
        (outcome,) = revalidate(store, current=evaluation.fingerprint("cpu"))
        assert store.evaluations(kind="revalidate") == []
    assert outcome.verdict == "skipped" and outcome.reason == "deployed for sm_90; this machine is cpu"


def test_revalidate_device_filter_ignores_other_archs(tmp_path):
    problem = evaluation.load_problem("layernorm", device="cuda")
    with Store.open(tmp_path / "store") as store:
        run = make_run(store, problem, gpu_fp())
        write_deployment(store, problem, add_candidate(store, run, SEED), gpu_fp(), speedup=(1.4, 1.3, 1.5))
        assert revalidate(store, arch="gfx942") == []


# -- the judgement, on records a GPU would produce --------------------------------------------------


@pytest.fixture(scope="module")
def gpu_problem():
    return evaluation.load_problem("layernorm", device="cuda")


@pytest.fixture
def recorded(tmp_path, gpu_problem):
    with Store.open(tmp_path / "store") as store:
        run = make_run(store, gpu_problem, gpu_fp())
        return write_deployment(store, gpu_problem, add_candidate(store, run, SEED), gpu_fp(), speedup=(1.4, 1.3, 1.5))


def test_judge_flags_a_speedup_whose_interval_falls_below_the_recorded_one(recorded, gpu_problem):
    now = result(gpu_problem, SEED, gpu_fp(driver_version="580.1"), timed=timing(gpu_problem, 1.1, 1.05, 1.2))
    verdict, why = judge_revalidation(recorded, now, gpu_problem)
    assert verdict == "regressed"
    assert why == "speedup over eager 1.100x [1.050, 1.200] is below the recorded 1.400x [1.300, 1.500]"


def test_judge_accepts_a_speedup_that_overlaps_the_recorded_noise(recorded, gpu_problem):
    now = result(gpu_problem, SEED, gpu_fp(), timed=timing(gpu_problem, 1.25, 1.2, 1.32))
    assert judge_revalidation(recorded, now, gpu_problem)[0] == "passed"


def test_judge_fails_a_kernel_that_can_no_longer_be_timed(recorded, gpu_problem):
    now = result(gpu_problem, SEED, gpu_fp(), note="timing not requested")
    assert judge_revalidation(recorded, now, gpu_problem) == (
        "failed",
        "timing not measured on the current environment (timing not requested)",
    )


def test_judge_fails_a_kernel_that_lost_a_declared_case(recorded, gpu_problem):
    gone = gpu_problem.shape_cases[-1].case_id
    now = result(
        gpu_problem,
        SEED,
        gpu_fp(),
        shapes=shape_results(gpu_problem, drop=(gone,)),
        timed=timing(gpu_problem, 1.4, 1.3, 1.5),
    )
    assert judge_revalidation(recorded, now, gpu_problem) == ("failed", f"shape cases not passed now: {gone}")
