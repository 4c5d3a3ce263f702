"""`kscout resume` after a kill -9 of a driver that ran its search on a Ray cluster: nothing finished is
evaluated again. Slow: a cluster, a `kscout` process and real CPU evaluations.

The cluster (one node on 127.0.0.1 offering `device:cpu`) is started by the test and outlives the
driver, as a real cluster would; the resume connects to it from this process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # see test_ray_executor.py
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402
from test_ray_executor import ray_process_env  # noqa: E402
from test_session_loop import _read_until  # noqa: E402

from agent.search.session import resume  # noqa: E402
from store import Store  # noqa: E402
from store.records import RunStatus  # noqa: E402

pytestmark = pytest.mark.slow
KSCOUT = str(Path(sys.executable).parent / "kscout")


@pytest.fixture
def cluster():
    saved = dict(os.environ)
    os.environ.update(ray_process_env())
    try:
        c = Cluster(
            initialize_head=True,
            head_node_args=dict(
                num_cpus=2, resources={"device:cpu": 1}, include_dashboard=False, node_ip_address="127.0.0.1"
            ),
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


def test_resume_after_kill9_of_a_ray_driver_evaluates_nothing_finished_again(cluster, tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, **ray_process_env(), "TRITON_INTERPRET": "1", "KSCOUT_VECTORS": "off"}
    proc = subprocess.Popen(
        [
            KSCOUT,
            "optimize",
            "softmax",
            "--device",
            "cpu",
            "--budget",
            "3",
            "--batch",
            "2",
            "--workers",
            "2",
            "--trials",
            "1",
            "--executor",
            "ray",
            "--ray-address",
            cluster.address,
            "--store",
            str(home),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lines = _read_until(proc, "[evaluated 2/3]", timeout_s=300)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    run_id = next(line for line in lines if line.startswith("[started")).split("run ", 1)[1].split(":")[0]

    with Store.open(home) as st:
        assert st.get_run(run_id).status is RunStatus.running  # kill -9: nothing could write anything
        cands = [c.candidate_id for c in st.candidates(run_id)]
        done = [cid for *_, cid, _ in st.evaluations(run_id=run_id, kind="search")]
        assert len(cands) == 3 and 2 <= len(done) <= 3
        again = []
        resume(
            run_id,
            st,
            ray_address=cluster.address,
            on_event=lambda e: e.kind == "evaluated" and again.append(e.candidate_id),
        )
        run = st.get_run(run_id)
        evals = [cid for *_, cid, _ in st.evaluations(run_id=run_id, kind="search")]
    assert sorted(again) == sorted(set(cands) - set(done))  # only what had not landed
    assert sorted(evals) == sorted(cands) and len(evals) == len(set(evals)) == 3
    assert (run.status, run.stop_reason) == (RunStatus.finished, "evaluation_budget")
    assert not ray.is_initialized()  # the resume's executor connected for itself and let go
