"""One hybrid policy (issue 25, item 2): PyTorch compute in forward is allowed and labelled, and a
candidate is refused only when its Triton kernels do not do the problem's work (the work rule,
evaluation/guards.ComputeWatch). The cheats the rule refuses are in tests/adversarial
(cheat_triton_output_unused, cheat_triton_copies_torch_result, cheat_touches_torch_result)."""

from __future__ import annotations

from pathlib import Path

from evaluation import evaluate, load_problem
from evaluation.records import Stage, Status

FIXTURES = Path(__file__).parent / "eval_fixtures"


def _judge(problem: str, kernel: str, overrides=None, source: str | None = None):
    info = load_problem(str(FIXTURES / f"{problem}.py"), "cpu", overrides)
    return evaluate(source or (FIXTURES / f"{kernel}.py").read_text(), info, device="cpu", trials=1)


def test_a_full_size_sub_and_mul_in_pytorch_before_a_triton_kernel_pass_as_a_labelled_hybrid():
    result = _judge("sub_mul_sigmoid", "sub_mul_sigmoid_hybrid")
    assert result.status is Status.passed, result.message
    assert result.hybrid and result.hybrid_ops == ("mul", "sub")
    assert result.torch_epilogue == () and result.hybrid_device_fraction is None  # no profiler on a CPU


def test_a_pytorch_row_sum_after_a_triton_gemm_passes_as_a_labelled_hybrid():
    result = _judge("gemm_row_sum", "gemm_row_sum_hybrid")
    assert result.status is Status.passed, result.message
    assert result.hybrid_ops == ("sum",) and result.torch_epilogue == ()


def test_a_triton_kernel_writing_in_place_over_a_pytorch_result_does_the_work():
    source = (FIXTURES / "cumsum_scaled_hybrid.py").read_text().replace("out = torch.empty_like(z)\n", "out = z\n")
    result = _judge("cumsum_scaled", "", source=source)
    assert result.status is Status.passed, result.message
    assert result.hybrid_ops == ("mul", "sub")


def test_a_scan_that_is_a_copy_on_a_one_element_row_is_judged_on_the_largest_case():
    # rows of one element make the Triton scan a copy of what PyTorch computed; the largest case
    # (4 x 24) shows the scan's work, so the hybrid passes
    passed = _judge("cumsum_scaled", "cumsum_scaled_hybrid")
    assert passed.status is Status.passed, passed.message
    assert passed.hybrid_ops == ("mul", "sub")
    # judged on the one-element rows alone, the same kernel did no work of its own
    alone = _judge("cumsum_scaled", "cumsum_scaled_hybrid", {"rows": 3, "cols": 1})
    assert (alone.status, alone.failed_stage, alone.error_class) == (Status.rejected, Stage.correctness, "TorchCompute")
    assert "a Triton launch only copied aten.sub.Tensor" in alone.message


def test_pytorch_computing_the_output_beside_a_real_triton_kernel_is_refused_with_its_ops():
    source = (
        (FIXTURES / "sub_mul_sigmoid_hybrid.py")
        .read_text()
        .replace("        return out\n", "        return torch.sigmoid((x - y) * 1.7)\n")
    )
    result = _judge("sub_mul_sigmoid", "", source=source)
    assert (result.status, result.error_class) == (Status.rejected, "TorchCompute")
    assert result.message.startswith(
        "the Triton kernels did not do the problem's work: the output holds no work of the Triton kernels: "
        "PyTorch computed it (aten.sub.Tensor, aten.mul.Tensor, aten.sigmoid.default)"
    ), result.message
