"""The Ray executor on a real one-node Ray cluster on 127.0.0.1 (started once for the module, ~10 s).

The node declares 4 CPUs, the custom resource `device:cpu` and one *logical* GPU (no GPU exists here):
a search on the CPU runs the real evaluator through Ray tasks; the GPU placement rules (checks share
the device, the timing and the re-measure take it whole) are checked with a stand-in evaluator
(tests/ray_stand_in.py) that runs no kernel and reports where and when each task ran.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

# Before Ray is imported (it reads this once): "127.0.0.1:PORT" stays loopback instead of becoming the
# machine's own address, so every Ray process of the tests talks over 127.0.0.1 only.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray")

import evaluation  # noqa: E402
from agent.search.executors import Cancelled, ExecutorError  # noqa: E402
from agent.search.executors.ray import OFFLINE_ENV, RayExecutor, _own_signal_handlers  # noqa: E402
from agent.search.session import SessionConfig, start  # noqa: E402
from agent.search.summary import summarize  # noqa: E402
from evaluation.records import Status  # noqa: E402
from store import Store  # noqa: E402
from store.records import RunStatus  # noqa: E402

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def ray_process_env() -> dict[str, str]:
    """What every Ray process started by a test inherits: no traffic off loopback, and tests/ importable
    (the stand-in evaluator) beside the repository."""
    path = os.pathsep.join(p for p in (str(ROOT), str(TESTS), os.environ.get("PYTHONPATH")) if p)
    # Ray turns "127.0.0.1:PORT" into the machine's own address before connecting unless told this is
    # a one-machine cluster (the variable's name says Windows/OSX; on Linux it means just that).
    return {**OFFLINE_ENV, "PYTHONPATH": path, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


@pytest.fixture(scope="module")
def local_ray():
    saved = dict(os.environ)
    os.environ.update(ray_process_env())
    try:
        with _own_signal_handlers():  # ray.init sets its SIGTERM handler: the tests after keep theirs
            ray.init(
                num_cpus=4,
                num_gpus=1,
                resources={"device:cpu": 1},
                include_dashboard=False,
                log_to_driver=False,
                _node_ip_address="127.0.0.1",
                namespace="kscout-tests",
            )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def problem():
    return evaluation.load_problem("softmax", device="cpu")


def where(result) -> dict:
    return json.loads(result.message)


def test_a_search_runs_end_to_end_through_ray_tasks(local_ray, problem, kscout_home, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")  # the knowledge base without embedding it (not under test)
    config = SessionConfig(problem="softmax", device="cpu", budget=3, batch=2, workers=2, trials=1, executor="ray")
    ex = RayExecutor("cpu", 2, trials=1)
    try:
        with Store.open(kscout_home) as st:
            run_id = start(config, st, executor=ex)
            run = st.get_run(run_id)
            evals = [r for *_, r in st.evaluations(run_id=run_id, kind="search")]
            summary = summarize(st, run_id)
    finally:
        ex.close()
    assert (run.status, run.stop_reason) == (RunStatus.finished, "evaluation_budget")
    assert [r.status for r in evals] == [Status.passed] * 3 and summary.best.candidate_id is not None
    assert SessionConfig.model_validate_json(run.config_json).executor == "ray"
    assert len(evals[0].shape_results) == len(problem.shape_cases)  # the whole declared set, checked remotely
    kinds = [p.kind for p in ex.placements]
    assert kinds.count("environment") == 1 and kinds.count("check") == 3
    assert {p.device_share for p in ex.placements if p.kind == "check"} == {0.5}
    assert len({p.node_id for p in ex.placements}) == 1


def test_a_gpu_batch_shares_the_device_for_checks_and_takes_it_whole_to_time(local_ray, problem):
    ex = RayExecutor("cuda", 2, evaluator="ray_stand_in")
    try:
        assert ex.environment().device_name == "NVIDIA H200 (stand-in)"
        landed = dict(ex.evaluate_batch(["a", "bad1", "c", "d"], problem, baselines=("eager",)))
    finally:
        ex.close()
    assert sorted(landed) == [0, 1, 2, 3] and landed[1].status is Status.incorrect
    timed = [where(landed[i]) for i in (0, 2, 3)]
    assert {t["kind"] for t in timed} == {"time"} and len({t["pid"] for t in timed}) == 1  # one task
    assert timed[0]["batch"] == ["a", "c", "d"] and timed[0]["gpus"] == "0"
    assert [landed[i].measured_speedup().ratio for i in (0, 2, 3)] == [1.5, 1.5, 1.5]
    shares = {(p.kind, p.device_share) for p in ex.placements}
    assert shares == {("environment", 0.5), ("check", 0.5), ("time", 1.0)}


def test_searches_sharing_a_ray_executor_never_time_beside_a_check(local_ray, problem):
    """Two batches at once on one (logical) GPU: Ray's resources keep every timing alone on it."""
    ex = RayExecutor("cuda", 2, evaluator="ray_stand_in")
    landed: dict[str, dict] = {}

    def search(tag):
        landed[tag] = dict(ex.evaluate_batch([f"{tag}{i}" for i in range(4)], problem))

    try:
        threads = [threading.Thread(target=search, args=(t,)) for t in "xy"]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        ex.close()
    assert sorted(landed) == ["x", "y"] and all(r.passed for b in landed.values() for r in b.values())
    spans = [where(r) for b in landed.values() for r in b.values()]
    timings: dict[tuple, float] = {}  # (start, pid) of one timing task -> when it ended
    for s in spans:
        timings[(s["start"], s["pid"])] = max(s["end"], timings.get((s["start"], s["pid"]), 0.0))
    checks = [(s["check"]["start"], s["check"]["end"]) for s in spans]
    assert len(timings) == 2  # one timing task per batch
    for (t0, _), t1 in timings.items():
        assert all(end <= t0 or start >= t1 for start, end in checks)  # no check ran during a timing
    ((a0, _), a1), ((b0, _), b1) = sorted(timings.items())
    assert a1 <= b0  # and the two timings did not overlap each other


def test_the_remeasure_is_one_task_with_the_whole_device(local_ray, problem):
    ex = RayExecutor("cuda", 4, evaluator="ray_stand_in")
    try:
        rm = ex.remeasure({"seed": "s", "best": "b"}, problem, rounds=3)
    finally:
        ex.close()
    note = json.loads(rm.note)
    assert (note["kind"], note["names"], note["gpus"], rm.rounds) == ("remeasure", ["best", "seed"], "0", 3)
    assert [(p.kind, p.device_share) for p in ex.placements] == [("remeasure", 1.0)]


def test_cancelling_drops_the_outstanding_tasks(local_ray, problem):
    ex = RayExecutor("cpu", 1, evaluator="ray_stand_in")
    try:
        batch = ex.evaluate_batch([f"c{i}" for i in range(8)], problem)
        next(batch)
        ex.cancel()
        with pytest.raises(Cancelled):
            list(batch)
        with pytest.raises(Cancelled):
            ex.remeasure({"x": "c0"}, problem, rounds=1)
    finally:
        ex.close()
    assert 1 <= sum(p.kind == "check" for p in ex.placements) < 8


def test_a_resource_no_node_offers_is_refused_at_once(local_ray):
    with pytest.raises(
        ExecutorError,
        match="no node of the Ray cluster at this machine offers a whole 'device:MI300X' for a cpu search",
    ):
        RayExecutor("cpu", resource="device:MI300X")
    with pytest.raises(ExecutorError, match="unknown device 'tpu'"):
        RayExecutor("tpu")


@pytest.mark.slow
def test_optimize_many_runs_its_searches_at_once_on_one_ray_executor(local_ray, kscout_home, monkeypatch):
    from agent.search.many import plan, run_many

    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    configs = plan(["softmax", "layernorm"], dict(device="cpu", budget=1, trials=1, executor="ray"))
    with Store.open(kscout_home) as st:
        result = run_many(configs, st)
        runs = [st.get_run(o.run_id) for o in result.outcomes]
    assert [o.state for o in result.outcomes] == ["finished", "finished"]
    assert [(r.problem_name, r.stop_reason) for r in runs] == [
        ("softmax", "evaluation_budget"),
        ("layernorm", "evaluation_budget"),
    ]
    assert ray.is_initialized()  # the module's connection was borrowed, not closed
