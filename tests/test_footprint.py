"""A check's device memory, estimated on meta tensors (evaluation/footprint.py), and lanes weighed by it
(agent/search/executors: SharedExclusiveLock's capacity, the local executor's lane capacity)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from agent.search.executors.base import SharedExclusiveLock
from agent.search.executors.local import LANE_MEMORY_FRACTION, _device_lane_capacity, lane_capacity
from evaluation import footprint, load_problem
from evaluation.records import ShapeCase

GEMM = """
import torch
from torch import nn

M = 64
K = 32
N = 16

SHAPES = {
    "cpu": [{"M": 64, "K": 32, "N": 16}, {"M": 256, "K": 32, "N": 128}],
    "cuda": [{"M": 64, "K": 32, "N": 16}],
}


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
"""

LINEAR = """
import torch
from torch import nn

B = 8
IN = 32
OUT = 24


class Model(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.fc = nn.Linear(i, o)
        self.register_buffer("scale", torch.ones(o))

    def forward(self, x, targets):
        return torch.relu(self.fc(x)) * self.scale


def get_inputs():
    return [torch.randn(B, IN), torch.randint(0, 4, (B,))]


def get_init_inputs():
    return [IN, OUT]
"""

DATA_DEPENDENT = """
import torch
from torch import nn

N = 100


class Model(nn.Module):
    def forward(self, x, y):
        k = int(x.sum().item())  # needs the data: the meta device cannot follow it
        return x[:k] + y[:k]


def get_inputs():
    return [torch.randn(N, 8), torch.randn(N // 2, 8)]


def get_init_inputs():
    return []
"""


def _case(params: dict, dtype: str = "float32") -> ShapeCase:
    return ShapeCase(case_id="c", params=params, dtype=dtype)


def test_a_gemm_case_counts_its_operands_and_output_in_the_case_dtype():
    fp = footprint.case_footprint(GEMM, "gemm.py", _case({"M": 64, "K": 32, "N": 16}))
    assert (fp.params, fp.inputs, fp.outputs, fp.inconclusive) == (0, (64 * 32 + 32 * 16) * 4, 64 * 16 * 4, "")
    half = footprint.case_footprint(GEMM, "gemm.py", _case({"M": 64, "K": 32, "N": 16}, "bfloat16"))
    assert (half.inputs, half.outputs) == (fp.inputs // 2, fp.outputs // 2)
    assert fp.check_bytes == (
        footprint.INPUT_SETS * fp.inputs + footprint.OUTPUT_COPIES * fp.outputs + footprint.CONTEXT_BYTES
    )


def test_parameters_and_buffers_count_and_integer_inputs_keep_their_dtype():
    fp = footprint.case_footprint(LINEAR, "linear.py", _case({}))
    assert fp.params == (32 * 24 + 24 + 24) * 4  # weight, bias, buffer, in float32
    assert fp.inputs == 8 * 32 * 4 + 8 * 8  # the int64 targets stay int64
    assert fp.outputs == 8 * 24 * 4


def test_a_forward_that_needs_data_counts_its_largest_input_as_its_output():
    fp = footprint.case_footprint(DATA_DEPENDENT, "dd.py", _case({}))
    assert fp.outputs is None and fp.largest_input == 100 * 8 * 4
    assert fp.inconclusive.split(":")[0].endswith("Error")  # the exception named, one line
    assert fp.check_bytes == (
        footprint.INPUT_SETS * (100 + 50) * 8 * 4 + footprint.OUTPUT_COPIES * 100 * 8 * 4 + footprint.CONTEXT_BYTES
    )


def test_a_problem_weighs_its_largest_case_and_is_estimated_once(tmp_path: Path, monkeypatch):
    path = tmp_path / "gemm.py"
    path.write_text(GEMM)
    info = load_problem(str(path), "cpu", dtypes=["float32"])
    assert {c.params["M"] for c in info.shape_cases} >= {64, 256}
    largest = footprint.case_footprint(GEMM, str(path), _case({"M": 256, "K": 32, "N": 128}))
    assert footprint.check_bytes(info) == largest.check_bytes
    calls = []
    monkeypatch.setattr(footprint, "case_footprint", lambda *a: calls.append(a))
    assert footprint.check_bytes(info) == largest.check_bytes and calls == []  # cached


def test_a_problem_whose_inputs_cannot_be_made_on_meta_has_no_estimate(tmp_path: Path):
    path = tmp_path / "host.py"
    path.write_text(GEMM.replace("return [torch.randn(M, K), torch.randn(K, N)]", "return [torch.randn(M, K).numpy()]"))
    info = load_problem(str(path), "cpu", dtypes=["float32"])
    assert footprint.check_bytes(info) is None


def _hold(lock: SharedExclusiveLock, weight: int, held: list, release: threading.Event) -> threading.Thread:
    def run():
        assert lock.acquire_shared(None, weight)
        held.append(weight)
        release.wait(5)
        lock.release_shared(weight)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_shared_holders_wait_for_weight_beyond_the_capacity_and_enter_when_it_is_given_back():
    lock = SharedExclusiveLock(max_shared=3, capacity=10)
    first_release, second_release = threading.Event(), threading.Event()
    held: list[int] = []
    a = _hold(lock, 6, held, first_release)
    time.sleep(0.1)
    b = _hold(lock, 6, held, second_release)
    time.sleep(0.3)
    assert held == [6] and lock.weight_held == 6 and lock.waited_for_weight == 1
    first_release.set()
    a.join(2)
    time.sleep(0.2)
    assert held == [6, 6] and lock.weight_held == 6
    second_release.set()
    b.join(2)
    assert lock.weight_held == 0


def test_a_holder_heavier_than_the_capacity_enters_alone_and_light_ones_share_up_to_the_lane_count():
    lock = SharedExclusiveLock(max_shared=2, capacity=10)
    assert lock.acquire_shared(None, 50)  # alone: let in however heavy
    abandon = threading.Event()
    threading.Timer(0.2, abandon.set).start()
    assert not lock.acquire_shared(abandon, 1)  # 51 > 10 beside it
    lock.release_shared(50)
    assert lock.acquire_shared(None, 1) and lock.acquire_shared(None, 1)
    abandon = threading.Event()
    threading.Timer(0.2, abandon.set).start()
    assert not lock.acquire_shared(abandon, 0)  # the lane count still bounds them
    assert lock.waited_for_weight == 1  # the count-bound wait is not a wait for weight
    lock.release_shared(1)
    lock.release_shared(1)
    assert lock.weight_held == 0


def test_the_capacity_is_asked_once_and_a_device_that_cannot_answer_leaves_lanes_counted_only():
    asked = []

    def capacity():
        asked.append(1)
        return 10

    lock = SharedExclusiveLock(max_shared=4, capacity=capacity)
    assert lock.acquire_shared(None, 8) and lock.capacity == 10 and lock.capacity == 10 and asked == [1]
    lock.release_shared(8)

    def broken():
        raise RuntimeError("no CUDA device")

    lock = SharedExclusiveLock(max_shared=4, capacity=broken)
    assert lock.acquire_shared(None, 8) and lock.acquire_shared(None, 8) and lock.capacity is None


def test_lane_capacity_reads_the_environment_and_refuses_nonsense(monkeypatch):
    monkeypatch.setenv("KSCOUT_LANE_MEMORY_GB", "12.5")
    assert lane_capacity() == 12_500_000_000
    monkeypatch.delenv("KSCOUT_LANE_MEMORY_GB")
    assert lane_capacity() is _device_lane_capacity and 0 < LANE_MEMORY_FRACTION < 1
    for bad in ("lots", "0", "-3", "nan"):
        monkeypatch.setenv("KSCOUT_LANE_MEMORY_GB", bad)
        with pytest.raises(ValueError, match="KSCOUT_LANE_MEMORY_GB"):
            lane_capacity()
