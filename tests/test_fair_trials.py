"""A rescaled trial never asks a kernel for more than PyTorch gives in the case dtype (issue 25: a judge
fair to correct kernels): where PyTorch itself misses the float64 reference on those very inputs, a
kernel that misses it only there, and does there what PyTorch does, passes; the first trial, on the
inputs as drawn, is never excused, and a kernel that misses elsewhere is refused."""

from __future__ import annotations

import pytest

import evaluation

PROBLEM = """
import torch
import torch.nn as nn

batch_size = 4
n = 256


class Model(nn.Module):
    def forward(self, x):
        return torch.cumprod(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, n)]


def get_init_inputs():
    return []


SHAPES = {"cpu": [{"batch_size": 4, "n": 256}], "cuda": [{"batch_size": 4, "n": 256}]}
"""

# One program per row, the running product in float64 and each output rounded to float32: PyTorch's own
# float32 cumprod on a CPU. On the x*4+1.5 trial products of 256 factors pass float32's largest value
# (3.4e38) while the float64 reference stays finite: both round them to infinity.
CANDIDATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _cumprod(x_ptr, y_ptr, N):
    row = tl.program_id(0)
    acc = tl.full((), 1.0, tl.float64)
    for j in range(N):
        acc = acc * tl.load(x_ptr + row * N + j).to(tl.float64)
        tl.store(y_ptr + row * N + j, EPILOGUE)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _cumprod[(x.shape[0],)](x, y, x.shape[1])
        return y
"""

HONEST = CANDIDATE.replace("EPILOGUE", "acc.to(tl.float32)")
# Saturates early: infinity from 1e30 on, where PyTorch and the reference are still finite.
EARLY = CANDIDATE.replace("EPILOGUE", "tl.where(tl.abs(acc) > 1e30, acc * 1e300, acc).to(tl.float32)")


@pytest.fixture
def problem(tmp_path):
    path = tmp_path / "cumprod_rows.py"
    path.write_text(PROBLEM)
    return evaluation.load_problem(str(path), "cpu")


def test_a_kernel_that_overflows_only_where_pytorch_does_passes_the_rescaled_trial(problem):
    import torch

    from evaluation.inputs import transform

    # the premise: on x*4+1.5, PyTorch's float32 cumprod overflows where the float64 one does not
    scale, shift = transform(1)
    torch.manual_seed(0)
    x = torch.randn(4, 256) * scale + shift
    assert torch.isinf(torch.cumprod(x, 1)).any() and torch.isfinite(torch.cumprod(x.double(), 1)).all()
    result = evaluation.evaluate(HONEST, problem, device="cpu", trials=2, time_it=False, sandbox="off")
    assert result.passed, result.message
    assert [s.trials for s in result.shape_results] == [2]


def test_a_kernel_that_overflows_where_pytorch_does_not_is_refused(problem):
    result = evaluation.evaluate(EARLY, problem, device="cpu", trials=2, time_it=False, sandbox="off")
    assert result.status.value == "incorrect"
    assert result.error_class == "NonFinite" and "trial 1" in result.message
