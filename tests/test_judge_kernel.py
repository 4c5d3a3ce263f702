"""The one-pass comparison kernel (evaluation/judge_kernel.py) gives the verdict the PyTorch passes of
compare._stream give, statistic for statistic, on outputs with the awkward values a judge meets: NaN and
infinities on either side, zeros under a zero atol, half-precision outputs, a partial last block.
Run under Triton's interpreter on the CPU (tests/conftest.py); on a GPU the same kernel is compiled."""

from __future__ import annotations

import math

import pytest
import torch

from evaluation import compare, judge_kernel
from evaluation.records import Tolerance

N = 2 * judge_kernel.BLOCK + 777  # three blocks, the last one partial (under FUSED_MIN_ELEMENTS)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # .ci/gpu runs these compiled, on the device


def _both(act, exp, tol):
    act, exp = act.to(DEVICE), exp.to(DEVICE)
    assert act.numel() < compare.FUSED_MIN_ELEMENTS  # so _stream takes the PyTorch passes on a GPU too
    torch_path = compare._stream(act, exp, tol, 0, "", {}, exact=False)
    stats = judge_kernel.stats(act, exp, tol.atol, tol.rtol)
    one_pass = compare._verdict(stats, act.reshape(-1), exp.reshape(-1), exp, tol, 0, "", {}, False)
    return torch_path, one_pass


def _same(x: float | None, y: float | None) -> bool:
    return (x is None and y is None) or (math.isnan(x) and math.isnan(y)) or x == y  # type: ignore[arg-type]


def _assert_same_verdict(torch_path, one_pass):
    assert (one_pass.passed, one_pass.kind) == (torch_path.passed, torch_path.kind)
    assert one_pass.mismatch_count == torch_path.mismatch_count
    a, b = one_pass.first_mismatch, torch_path.first_mismatch
    assert (a is None) == (b is None)
    if a is not None:
        assert (a.index, a.expected, a.output_index) == (b.index, b.expected, b.output_index)
        assert _same(a.actual, b.actual)
    assert _same(one_pass.max_abs_error, torch_path.max_abs_error), (one_pass.max_abs_error, torch_path.max_abs_error)
    assert _same(one_pass.max_rel_error, torch_path.max_rel_error), (one_pass.max_rel_error, torch_path.max_rel_error)


def _reference(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, generator=g, dtype=torch.float64) * 3


TOL = Tolerance(atol=1e-5, rtol=1e-5)


def test_a_close_float32_output_passes_with_the_same_largest_errors():
    exp = _reference()
    torch_path, one_pass = _both(exp.to(torch.float32), exp, TOL)
    assert torch_path.passed and torch_path.max_abs_error > 0
    _assert_same_verdict(torch_path, one_pass)


def test_elements_off_by_more_than_the_tolerance_fail_at_the_same_first_index_and_count():
    exp = _reference(1)
    act = exp.to(torch.float32)
    act[[4800, 17, 4096]] += 0.5
    torch_path, one_pass = _both(act, exp, TOL)
    assert torch_path.kind == "ValueMismatch" and torch_path.mismatch_count == 3
    assert torch_path.first_mismatch.index == (17,)
    _assert_same_verdict(torch_path, one_pass)


def test_nan_and_infinity_where_the_reference_is_finite_are_non_finite_failures():
    exp = _reference(2)
    act = exp.to(torch.float32)
    act[100], act[3000], act[4500] = float("nan"), float("inf"), -float("inf")
    torch_path, one_pass = _both(act, exp, TOL)
    assert torch_path.kind == "NonFinite" and torch_path.mismatch_count == 3
    assert torch_path.max_abs_error == math.inf  # NaN counts as +inf in the PyTorch path's maximum
    _assert_same_verdict(torch_path, one_pass)
    act[100] = exp[100]  # infinities alone: the largest finite double, as nan_to_num makes them
    torch_path, one_pass = _both(act, exp, TOL)
    assert torch_path.max_abs_error == torch.finfo(torch.float64).max
    _assert_same_verdict(torch_path, one_pass)


def test_a_reference_with_nan_and_infinities_matched_by_the_output_passes():
    exp = _reference(3)
    exp[[7, 2048]] = float("nan")
    exp[9], exp[4100] = float("inf"), -float("inf")
    act = exp.to(torch.float32)
    torch_path, one_pass = _both(act, exp, TOL)
    assert torch_path.passed
    _assert_same_verdict(torch_path, one_pass)
    act[4100] = 1.0  # a finite output where the reference is -inf
    torch_path, one_pass = _both(act, exp, TOL)
    _assert_same_verdict(torch_path, one_pass)


def test_a_zero_atol_over_zeros_gives_a_nan_relative_error_in_both():
    exp = _reference(4)
    exp[:64] = 0.0
    act = exp.to(torch.float32)
    torch_path, one_pass = _both(act, exp, Tolerance(atol=0.0, rtol=1e-3))
    assert math.isnan(torch_path.max_rel_error)
    _assert_same_verdict(torch_path, one_pass)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_outputs_judged_alike(dtype):
    exp = _reference(5).to(dtype).to(torch.float64) + 1e-4
    tol = Tolerance(atol=1e-2, rtol=1e-2)
    act = exp.to(dtype)
    act[1234] += 1.0
    torch_path, one_pass = _both(act, exp, tol)
    assert torch_path.kind == "ValueMismatch"
    _assert_same_verdict(torch_path, one_pass)


def test_the_norm_test_sees_the_same_sums_of_squares():
    exp = _reference(6)
    act = (exp * (1 + 2e-3)).to(torch.float32)  # every element within atol + rtol*|e|, the norm not
    tol = Tolerance(atol=1.0, rtol=1e-3)
    torch_path, one_pass = _both(act, exp, tol)
    assert torch_path.kind == "NormError"
    _assert_same_verdict(torch_path, one_pass)


def test_only_float_outputs_beside_a_float64_reference_on_one_gpu_take_the_kernel():
    exp = torch.zeros(8, dtype=torch.float64)
    assert not judge_kernel.applies(exp.to(torch.float32), exp)  # on the host: the PyTorch passes
    assert not judge_kernel.applies(torch.zeros(8, dtype=torch.int32), exp)
    assert not judge_kernel.applies(exp.to(torch.float32), exp.to(torch.float32))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_small_host_output_is_judged_on_the_host_with_the_verdict_of_the_device_path():
    """An output the shared slot copied to the host meets its small reference there (one copy back), and
    the verdict, errors and first mismatch are those of the comparison on the GPU."""
    exp = torch.randn(7, 1000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    act = (exp + 1e-7).to(torch.float32)
    act.view(-1)[1234] += 0.5
    compare.PATHS.clear()
    on_host = compare._stream(act, exp.cuda(), TOL, 0, "", {}, exact=False)
    assert compare.PATHS == {"host finite (reference moved)": 1}  # every value finite: the short host passes
    on_device = compare._stream(act.cuda(), exp.cuda(), TOL, 0, "", {}, exact=False)
    _assert_same_verdict(on_device, on_host)
    assert on_host.first_mismatch.index == tuple(int(i) for i in divmod(1234, exp.shape[1]))
    big = torch.zeros(compare.HOST_COMPARE_ELEMENTS + 1, dtype=torch.float64)
    compare.PATHS.clear()
    assert compare._stream(big.float(), big.cuda(), TOL, 0, "", {}, exact=False).passed
    assert compare.PATHS == {"torch cuda from cpu": 1}  # a large reference stays where it is
