"""Timed samples are taken only once the parent has judged every output sent before them: the parent's
float64 comparisons share the device (on a CPU, the cores) with the worker, and would be timed with the
candidate (protocol.Quiet / protocol.Proceed; evaluation/worker.py, evaluation/harness.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from evaluation import evaluate, harness, load_problem, protocol, time_many
from evaluation.correctness import Judge
from evaluation.isolation import WorkerProcess
from evaluation.records import Status

ROOT = Path(__file__).parent.parent
SEED = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()


def test_drain_returns_only_after_every_message_put_before_it_is_judged():
    judged: list[int] = []

    def slow(message, blob):
        time.sleep(0.2)
        judged.append(message.index)
        return False

    judge = harness._Pipelined(slow, {"parent_s": 0.0})
    try:
        for i in range(3):
            judge.put(protocol.Outputs(index=i, phase="trial"), b"")
        judge.drain()
        assert judged == [0, 1, 2]
    finally:
        judge.close()


def test_drain_returns_at_once_when_the_judging_thread_has_ended():
    judge = harness._Pipelined(lambda m, b: False, {"parent_s": 0.0})
    judge.close()
    done = threading.Event()
    threading.Thread(target=lambda: (judge.drain(), done.set()), daemon=True).start()
    assert done.wait(5.0)


@pytest.mark.slow  # a real check and a real timing process: about 10 s on the 2-core machine
def test_every_proceed_follows_the_judgement_of_every_output_received_before_it(monkeypatch):
    """A slowed judge (0.1 s per output): each Proceed the parent sends finds every output it received so
    far judged, and one Proceed goes out per candidate and timed case."""
    monkeypatch.setattr(harness, "HOST_TIMING", True)  # the timing stage on the CPU clock
    received, judged, proceeds = [0], [0], []
    lock = threading.Lock()
    real_judge, real_send, real_receive = Judge.judge, WorkerProcess.send, WorkerProcess.receive

    def judge(self, *args, **kwargs):
        time.sleep(0.1)
        verdict = real_judge(self, *args, **kwargs)
        with lock:
            judged[0] += 1
        return verdict

    def receive(self, wait_s=0.05):
        got = real_receive(self, wait_s)
        if got is not None and isinstance(got[0], protocol.Outputs):
            with lock:
                received[0] += 1
        return got

    def send(self, command):
        if isinstance(command, protocol.Proceed):
            with lock:
                proceeds.append((received[0], judged[0]))
        return real_send(self, command)

    monkeypatch.setattr(Judge, "judge", judge)
    monkeypatch.setattr(WorkerProcess, "receive", receive)
    monkeypatch.setattr(WorkerProcess, "send", send)
    small = load_problem("layernorm", "cpu", overrides={"M": 2})
    info = load_problem("layernorm", "cpu", overrides={"M": 2}, timed=[small.shape_cases[0].case_id])
    checked = evaluate(SEED, info, device="cpu", trials=2, time_it=False)
    assert checked.status is Status.passed, checked.message
    received[0] = judged[0] = 0
    proceeds.clear()
    timed = time_many([(SEED, checked)], info, device="cpu", baselines=("eager",), trials=2)
    assert timed[0].status is Status.passed, timed[0].message
    assert len(proceeds) == 1  # one candidate, one timed case
    got, done = proceeds[0]
    assert got >= 2 and done == got  # the timed case's correctness calls, every one judged before the samples
