"""Compute accounting: the parent's classification of profiled kernels (GPU data, synthetic here), and
on the CPU the compute watch's two exceptions, the small epilogue and a problem's ALLOWED_TORCH_OPS.
The epilogue's closed doors (PyTorch summing a copy of the input) are cheats in tests/adversarial."""

from __future__ import annotations

from pathlib import Path

from evaluation import evaluate, load_problem
from evaluation.accounting import classify, triton_functions
from evaluation.protocol import ProfiledKernel
from evaluation.records import Stage, Status

FIXTURES = Path(__file__).parent / "eval_fixtures"
ROOT = Path(__file__).resolve().parents[1]


def K(name, ops=(), replay=False):
    return ProfiledKernel(name=name, ops=list(ops), replay=replay)


def test_the_candidates_own_triton_kernels_and_memory_traffic_are_accounted_for():
    got = classify(
        [
            K("_layernorm_fwd"),
            K("_layernorm_fwd_0d1d2d"),
            K("Memset (Device)"),
            K("Memcpy DtoD (Device -> Device)"),
            K("_layernorm_fwd", replay=True),
        ],
        ["_layernorm_fwd"],
        [],
        [],
    )
    assert got.foreign == [] and got.hybrid_ops == set()


def test_aten_kernels_are_pytorch_compute_unless_plumbing_epilogue_or_allowed():
    fill = K("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", ["fill_", "zeros"])
    gemm = K("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n", ["mm", "matmul"])
    reduce_ = K("void at::native::reduce_kernel<512, 1>", ["sum"])
    conv = K("cudnn::implicit_convolve_sgemm", ["cudnn_convolution", "_convolution", "convolution", "conv2d"])
    got = classify([fill, gemm, reduce_, conv], ["_k"], [], [])
    assert [f.split(" (")[0] for f in got.foreign] == [gemm.name, reduce_.name, conv.name]
    assert got.foreign[0].endswith("(aten::mm)")
    hybrid = classify([fill, reduce_, conv], ["_k"], ["aten.convolution"], ["sum"])
    assert hybrid.foreign == [] and hybrid.hybrid_ops == {"convolution"}


def test_in_a_graph_replay_a_kernel_is_judged_by_its_name():
    replayed = [
        K("_relu", replay=True),
        K("void at::native::direct_copy_kernel_cuda", replay=True),
        K("cudnn::implicit_convolve_sgemm", replay=True),
    ]
    assert classify(replayed, ["_relu"], [], []).foreign == ["cudnn::implicit_convolve_sgemm"]
    assert classify(replayed, ["_relu"], ["convolution"], []).foreign == []  # a hybrid's own PyTorch op
    inductor = classify([K("triton_poi_fused_relu_0", replay=True)], ["_relu"], [], [])
    assert inductor.foreign == ["triton_poi_fused_relu_0"]  # Triton, but not the candidate's


def test_triton_functions_are_read_from_the_source():
    source = (FIXTURES / "conv_relu_hybrid.py").read_text()
    assert triton_functions(source) == ["_relu"]
    assert triton_functions(
        "import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef _a(X):\n"
        "    pass\ndef helper():\n    pass\n"
    ) == ["_a"]


def test_a_mean_of_the_candidates_own_triton_losses_passes_and_is_labelled():
    info = load_problem(str(FIXTURES / "ce_mean.py"), "cpu")
    result = evaluate((FIXTURES / "ce_mean_epilogue.py").read_text(), info, device="cpu", trials=1)
    assert result.status is Status.passed, result.message
    assert result.torch_epilogue == ("mean",) and result.hybrid_ops == ()


def test_the_square_root_of_a_one_element_triton_total_is_a_labelled_epilogue():
    kernel = (ROOT / "tests" / "data" / "llm_kernels" / "kernels" / "frobenius_torch_sqrt_epilogue.py").read_text()
    info = load_problem(str(FIXTURES / "frobenius.py"), "cpu")
    result = evaluate(kernel, info, device="cpu", trials=1)
    assert result.status is Status.passed, result.message
    assert result.torch_epilogue == ("sqrt",)
    # the same square root over the input itself is PyTorch doing the work
    cheat = kernel.replace("norm = torch.sqrt(total)", "torch.sqrt(x)\n        norm = torch.sqrt(total)")
    refused = evaluate(cheat, info, device="cpu", trials=1)
    assert (refused.status, refused.error_class) == (Status.rejected, "TorchCompute")
    assert refused.message.endswith("aten.sqrt.default x1")


def test_a_problem_may_leave_the_convolution_to_pytorch_and_the_kernel_is_a_hybrid():
    info = load_problem(str(FIXTURES / "conv_relu.py"), "cpu")
    result = evaluate((FIXTURES / "conv_relu_hybrid.py").read_text(), info, device="cpu", trials=1)
    assert result.status is Status.passed, result.message
    assert result.hybrid and result.hybrid_ops == ("convolution",)


def test_the_same_convolution_is_pytorch_compute_where_the_problem_does_not_allow_it(tmp_path):
    strict = tmp_path / "conv_relu_strict.py"
    strict.write_text(
        (FIXTURES / "conv_relu.py").read_text().replace('ALLOWED_TORCH_OPS = ("aten.convolution",)\n', "")
    )
    result = evaluate(
        (FIXTURES / "conv_relu_hybrid.py").read_text(), load_problem(str(strict), "cpu"), device="cpu", trials=1
    )
    assert (result.status, result.failed_stage, result.error_class) == (
        Status.rejected,
        Stage.correctness,
        "TorchCompute",
    )
    assert "aten.convolution" in result.message


LAYERNORM = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()


def test_a_product_of_sizes_computed_in_pytorch_is_not_compute():
    # the normalized size as a product of the trailing dims, in a tensor (issue 25: aten.prod refused)
    sized = LAYERNORM.replace("        n = x.shape[-1]\n", "        n = int(torch.tensor(x.shape[-1:]).prod())\n", 1)
    assert sized != LAYERNORM
    result = evaluate(sized, "layernorm", device="cpu", trials=1, overrides={"M": 2})
    assert result.status is Status.passed, result.message
    assert result.hybrid_ops == () and result.torch_epilogue == ()


def test_the_same_product_over_the_input_itself_is_still_compute():
    over_input = LAYERNORM.replace("        n = x.shape[-1]\n", "        n = x.shape[-1]\n        x.prod()\n", 1)
    refused = evaluate(over_input, "layernorm", device="cpu", trials=1, overrides={"M": 2})
    assert (refused.status, refused.error_class) == (Status.rejected, "TorchCompute")
    assert "aten.prod" in refused.message
