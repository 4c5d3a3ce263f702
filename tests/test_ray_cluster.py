"""The Ray executor on a three-node cluster on 127.0.0.1 (ray.cluster_utils.Cluster): placement by
resource, and a worker node killed mid-batch. Slow: three raylets start on a 2-core machine.

The head declares no device resource (the driver's node runs no candidate); node A and node C offer
`device:cpu`, node B offers only `device:alt`. The stand-in evaluator (tests/ray_stand_in.py) runs no
kernel: it reports the node each check ran on and drops a marker when one starts.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

# Before Ray is imported (it reads this once): "127.0.0.1:PORT" stays loopback instead of becoming the
# machine's own address, so every Ray process of the tests talks over 127.0.0.1 only.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402
from test_ray_executor import ray_process_env  # noqa: E402

import evaluation  # noqa: E402
from agent.search.executors.ray import RayExecutor, _own_signal_handlers  # noqa: E402
from evaluation.records import Status  # noqa: E402

pytestmark = pytest.mark.slow
LOOPBACK = dict(node_ip_address="127.0.0.1")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    marks = tmp_path_factory.mktemp("started")
    saved = dict(os.environ)
    os.environ.update(ray_process_env(), KSCOUT_STAND_IN_DIR=str(marks))
    c = None
    try:
        c = Cluster(
            initialize_head=True,
            head_node_args=dict(
                num_cpus=1,
                include_dashboard=False,
                **LOOPBACK,
                # notice a dead node within seconds, not the default ~30 s
                _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 4},
            ),
        )
        nodes = {
            "A": c.add_node(num_cpus=2, resources={"device:cpu": 1}, **LOOPBACK),
            "B": c.add_node(num_cpus=2, resources={"device:alt": 1}, **LOOPBACK),
            "C": c.add_node(num_cpus=2, resources={"device:cpu": 1}, **LOOPBACK),
        }
        c.wait_for_nodes()
        with _own_signal_handlers():  # ray.init sets its SIGTERM handler: the tests after keep theirs
            ray.init(address=c.address, log_to_driver=False, namespace="kscout-tests")
    except BaseException:
        if c is not None:
            c.shutdown()
        raise
    finally:
        os.environ.clear()
        os.environ.update(saved)
    yield c, nodes, marks
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def problem():
    return evaluation.load_problem("softmax", device="cpu")


def ran_on(result) -> str:
    return json.loads(result.message)["node"]


def test_tasks_go_only_to_nodes_that_offer_the_requested_resource(cluster, problem):
    _, nodes, _ = cluster
    ids = {name: n.node_id for name, n in nodes.items()}
    by_resource = {}
    for resource in (None, "device:alt"):
        ex = RayExecutor("cpu", 2, resource=resource, evaluator="ray_stand_in")
        try:
            landed = dict(ex.evaluate_batch([f"r{i}" for i in range(6)], problem))
        finally:
            ex.close()
        assert sorted(landed) == list(range(6)) and all(r.passed for r in landed.values())
        by_resource[resource] = {ran_on(r) for r in landed.values()} | {p.node_id for p in ex.placements}
    assert by_resource[None] <= {ids["A"], ids["C"]}  # device:cpu, never the head or B
    assert by_resource["device:alt"] == {ids["B"]}


def test_killing_a_worker_node_mid_batch_loses_nothing_and_blames_no_candidate(cluster, problem):
    c, nodes, marks = cluster
    victim, survivor = nodes["A"], nodes["C"]
    for f in marks.iterdir():
        f.unlink()
    sources = [f"sleep4:k{i}" for i in range(4)]  # two per node: 0.5 of each node's device:cpu
    ex = RayExecutor("cpu", 2, evaluator="ray_stand_in")
    landed: dict[int, object] = {}
    errors: list[BaseException] = []

    def consume():
        try:
            landed.update(ex.evaluate_batch(sources, problem))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = [json.loads(f.read_text()) for f in marks.glob("*.json")]  # whole marks only
            on_victim = [m["source"] for m in started if m["node"] == victim.node_id]
            if on_victim:
                break
            time.sleep(0.1)
        assert on_victim, "no check ever started on node A"
        c.remove_node(victim, allow_graceful=False)  # kill -9 of its raylet and workers, mid-task
        consumer.join(timeout=180)
    finally:
        ex.close()
    assert not consumer.is_alive() and errors == []
    assert sorted(landed) == [0, 1, 2, 3]
    assert [landed[i].status for i in range(4)] == [Status.passed] * 4  # nothing lost, nobody blamed
    by_source = {sources[i]: ran_on(landed[i]) for i in range(4)}
    assert all(by_source[s] == survivor.node_id for s in on_victim)  # retried on the node that lived
    restarts = [json.loads(f.read_text())["source"] for f in marks.glob("*.json")]
    assert all(restarts.count(s) >= 2 for s in on_victim)
