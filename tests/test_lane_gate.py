"""A gated check compiles its kernels first and takes a GPU lane only then (isolation.lane_gate,
Worker.compile_pass, executors/local.py `_Lane`): the lane is held for the battery alone, given back
once, and never taken by a check that ended before its barrier."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from evaluation import evaluate, load_problem, phases
from evaluation.isolation import Gate, lane_gate
from evaluation.records import Status

ROOT = Path(__file__).parent.parent
SEED = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()


class SlowLane:
    """A lane that keeps a check waiting `wait_s` before it is granted, and records what happened."""

    def __init__(self, wait_s: float = 0.0) -> None:
        self.wait_s = wait_s
        self.acquired: list[float] = []
        self.released: list[float] = []

    def acquire(self, abandon: threading.Event) -> bool:
        if abandon.wait(self.wait_s):
            return False
        self.acquired.append(time.monotonic())
        return True

    def release(self) -> None:
        self.released.append(time.monotonic())


def test_lane_gate_opens_only_after_the_worker_is_ready_and_releases_once():
    lane = SlowLane()
    with lane_gate(lane) as gate:
        time.sleep(0.2)
        assert not gate.is_open and lane.acquired == []  # still compiling: no lane asked for
        gate.ready.set()  # at the barrier
        deadline = time.monotonic() + 5
        while not gate.is_open and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gate.is_open and len(lane.acquired) == 1 and lane.released == []
    assert len(lane.released) == 1 and lane.released[0] >= lane.acquired[0]


def test_lane_gate_takes_no_lane_for_a_worker_that_ended_before_its_barrier():
    lane = SlowLane()
    with lane_gate(lane) as gate:
        gate.ended = True  # as run_worker's finally marks it
        gate.ready.set()
        time.sleep(0.2)
    assert lane.acquired == [] and lane.released == [] and gate.is_open  # open: no longer pending


def test_lane_gate_left_while_waiting_for_a_busy_lane_abandons_the_wait():
    lane = SlowLane(wait_s=30.0)
    t0 = time.monotonic()
    with lane_gate(lane) as gate:
        gate.ready.set()
        time.sleep(0.1)
    assert time.monotonic() - t0 < 5 and lane.acquired == [] and lane.released == []
    assert not Gate._pending or gate not in Gate._pending


def _small_layernorm():
    return load_problem("layernorm", "cpu", overrides={"M": 2})


def test_a_gated_check_runs_its_battery_only_inside_its_lane_and_the_wait_is_not_its_time():
    lane = SlowLane(wait_s=1.0)
    info = _small_layernorm()
    with phases.recording() as rows:
        result = evaluate(SEED, info, device="cpu", trials=2, time_it=False, lane=lane, timeout_s=120)
    assert result.status is Status.passed, result.message
    assert len(lane.acquired) == 1 and len(lane.released) == 1
    (row,) = [r for r in rows if r["role"] == "correctness"]
    assert row["gate_s"] >= 0.9  # it waited at its barrier for the lane
    stamps = row["worker"]["stamps"]
    assert stamps["proceed"] - stamps["armed"] >= 0.9  # the battery began only after the lane was granted
    assert len(result.shape_results) == len(info.shape_cases) and all(r.passed for r in result.shape_results)


def test_a_candidate_that_fails_before_its_barrier_never_takes_a_lane():
    lane = SlowLane()
    broken = SEED.replace("class ModelNew", "raise RuntimeError('boom at import')\n\n\nclass ModelNew", 1)
    result = evaluate(broken, _small_layernorm(), device="cpu", trials=2, time_it=False, lane=lane, timeout_s=120)
    assert result.status is Status.compile_error and "boom at import" in (result.message or "")
    assert lane.acquired == [] and lane.released == []
