"""Compute accounting: the parent's classification of profiled kernels (GPU data, synthetic here), and
on the CPU the compute watch's labels: the small epilogue, and PyTorch compute that makes a hybrid
(issue 25). The work rule's refusals (PyTorch doing the work beside a token launch, summing a copy of
the input) are cheats in tests/adversarial; the hybrids it accepts are in tests/test_hybrid_policy.py."""

from __future__ import annotations

from pathlib import Path

from evaluation import evaluate, load_problem
from evaluation.accounting import classify, triton_functions
from evaluation.protocol import ProfiledKernel
from evaluation.records import Status

FIXTURES = Path(__file__).parent / "eval_fixtures"
ROOT = Path(__file__).resolve().parents[1]


def K(name, ops=(), replay=False, duration_us=0.0):
    return ProfiledKernel(name=name, ops=list(ops), replay=replay, duration_us=duration_us)


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


def test_pytorch_kernels_the_watch_saw_make_a_hybrid_with_its_share_of_device_time():
    kernels = [
        K("_k", duration_us=30.0),
        K("Memcpy DtoD (Device -> Device)", duration_us=10.0),
        K("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n", ["mm", "matmul"], duration_us=60.0),
    ]
    got = classify(kernels, ["_k"], [], [], {"mm"})
    assert got.foreign == [] and got.hybrid_ops == {"mm"}
    assert got.torch_fraction == 0.6
    # the same GEMM, where the watch never saw an mm: PyTorch work behind the watch's back
    unseen = classify(kernels, ["_k"], [], [], {"sub"})
    assert unseen.foreign == ["sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n (aten::mm)"]
    assert classify([K("_k")], ["_k"], [], []).torch_fraction is None  # nothing timed


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
    # the same square root over the input itself is PyTorch compute beside the kernel: a hybrid
    beside = kernel.replace("norm = torch.sqrt(total)", "torch.sqrt(x)\n        norm = torch.sqrt(total)")
    hybrid = evaluate(beside, info, device="cpu", trials=1)
    assert hybrid.status is Status.passed, hybrid.message
    assert (hybrid.hybrid_ops, hybrid.torch_epilogue) == (("sqrt",), ("sqrt",))


def test_a_problem_may_leave_the_convolution_to_pytorch_and_the_kernel_is_a_hybrid():
    info = load_problem(str(FIXTURES / "conv_relu.py"), "cpu")
    result = evaluate((FIXTURES / "conv_relu_hybrid.py").read_text(), info, device="cpu", trials=1)
    assert result.status is Status.passed, result.message
    assert result.hybrid and result.hybrid_ops == ("convolution",)


def test_the_same_convolution_is_a_labelled_hybrid_where_the_problem_does_not_list_it(tmp_path):
    # issue 25: one hybrid policy; ALLOWED_TORCH_OPS no longer decides whether PyTorch may compute
    unlisted = tmp_path / "conv_relu_unlisted.py"
    unlisted.write_text(
        (FIXTURES / "conv_relu.py").read_text().replace('ALLOWED_TORCH_OPS = ("aten.convolution",)\n', "")
    )
    result = evaluate(
        (FIXTURES / "conv_relu_hybrid.py").read_text(), load_problem(str(unlisted), "cpu"), device="cpu", trials=1
    )
    assert result.status is Status.passed, result.message
    assert result.hybrid_ops == ("convolution",) and result.hybrid_device_fraction is None  # no profiler on a CPU


LAYERNORM = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()


def test_a_product_of_sizes_computed_in_pytorch_is_not_compute():
    # the normalized size as a product of the trailing dims, in a tensor (issue 25: aten.prod refused)
    sized = LAYERNORM.replace("        n = x.shape[-1]\n", "        n = int(torch.tensor(x.shape[-1:]).prod())\n", 1)
    assert sized != LAYERNORM
    result = evaluate(sized, "layernorm", device="cpu", trials=1, overrides={"M": 2})
    assert result.status is Status.passed, result.message
    assert result.hybrid_ops == () and result.torch_epilogue == ()


def test_the_same_product_over_the_input_itself_is_compute_and_labels_a_hybrid():
    over_input = LAYERNORM.replace("        n = x.shape[-1]\n", "        n = x.shape[-1]\n        x.prod()\n", 1)
    hybrid = evaluate(over_input, "layernorm", device="cpu", trials=1, overrides={"M": 2})
    assert hybrid.status is Status.passed, hybrid.message
    assert hybrid.hybrid_ops == ("prod",)
