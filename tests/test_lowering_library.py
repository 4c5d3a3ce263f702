"""The hybrid contraction (agent/proposers/lowering/library.py): a matmul group with `engine="library"`
computes its product with `torch.matmul` on strided views of its operands and runs its epilogue as one
Triton kernel; where that cannot be (a bare GEMM, a computed operand), it renders the Triton GEMM and
the configuration is the same point as "triton"."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from lowering_cases import assert_close, problem_info, ref, run_lowered

from agent.proposers.base import Action, ProposeRequest
from agent.proposers.lowering import lower_source, space
from agent.proposers.lowering.propose import LoweringSearch, _normal
from evaluation import evaluate, load_problem
from evaluation.records import source_sha256


def _gemm(forward: str, inputs: str, consts: str = "M = 33\nK = 20\nN = 17\n") -> str:
    return ref(f"def forward(self, a, b):\n    return {forward}\n", inputs, consts=consts)


def _library(source: str, path: str = "/tmp/case.py") -> tuple:
    low = lower_source(source, path)
    config = low.default_config()
    for g in config["groups"]:
        if g["kind"] == "matmul":
            g["engine"] = "library"
    return low, _normal(low, config)


def test_a_library_contraction_is_one_torch_matmul_on_strided_views_and_a_triton_epilogue():
    source = _gemm("torch.relu(torch.matmul(a, b.t())) + 1.0", "[torch.randn(M, K), torch.randn(N, K)]")
    low, config = _library(source)
    assert config["groups"][0]["engine"] == "library"
    cand, out, expected, flagged = run_lowered(source, config)
    forward = cand[cand.index("def forward") :]
    # B^T is read through its strides (1, K): no copy of the operand, and no Triton GEMM
    assert "torch.matmul(torch.as_strided(in_0, (s26, s49, ), (s49, 1, ), in_0.storage_offset() + 0)" in forward
    assert "torch.as_strided(in_1, (s49, s93, ), (1, s49, ), in_1.storage_offset() + 0)" in forward
    assert cand.count("@triton.jit") == 1 and "tl.dot" not in cand
    assert flagged == {"aten.mm.out": 1}  # the hybrid's PyTorch compute, which the judge labels
    assert_close(out, expected)


def test_a_batched_contraction_keeps_its_batch_dims_and_a_bfloat16_case_computes_in_float32():
    source = ref(
        "def forward(self, a, b):\n    return torch.bmm(a, b) * 0.5 - 2.0\n",
        "[torch.randn(B, M, K), torch.randn(B, K, N)]",
        consts="B = 3\nM = 9\nK = 12\nN = 7\n",
    )
    low, config = _library(source)
    cand, out, expected, _ = run_lowered(source, config)
    assert "torch.matmul(torch.as_strided(in_0, (s" in cand and cand.count("@triton.jit") == 1
    assert_close(out, expected)
    module = {}
    exec(compile(cand, "cand.py", "exec"), module)
    a, b = torch.randn(3, 9, 12).bfloat16(), torch.randn(3, 12, 7).bfloat16()
    got = module["ModelNew"]()(a, b)
    want = torch.bmm(a.float(), b.float()) * 0.5 - 2.0
    assert got.dtype == torch.bfloat16 and torch.allclose(got.float(), want, atol=0.05, rtol=0.02)


def test_a_bare_gemm_and_a_computed_operand_keep_the_triton_gemm_as_one_point_with_triton():
    for forward in ("torch.matmul(a, b)", "torch.relu(torch.matmul(a * 2.0 + 1.0, b)) + 1.0"):
        source = _gemm(forward, "[torch.randn(M, K), torch.randn(K, N)]")
        low, config = _library(source)
        triton = _normal(low, low.default_config())
        if config["groups"][0]["engine"] == "triton":  # normalised: the library call does not apply
            assert config == triton and low.render(config) == low.render(triton)
            assert "torch.matmul(" not in low.render(config).split("def forward")[1]
        else:  # the lowering materialised the computed operand first: the library reads that buffer
            cand, out, expected, _ = run_lowered(source, config)
            assert_close(out, expected)
    # the bare GEMM is always the first case: cuBLAS would do all the work, which no candidate may
    low, config = _library(_gemm("torch.matmul(a, b)", "[torch.randn(M, K), torch.randn(K, N)]"))
    assert config["groups"][0]["engine"] == "triton"


def test_tile_knobs_do_not_split_library_configurations_and_the_move_is_offered():
    source = _gemm("torch.relu(torch.matmul(a, b))", "[torch.randn(M, K), torch.randn(K, N)]")
    low = lower_source(source, "/tmp/case.py")
    base = low.default_config()
    moves = [m for m in space.knob_moves(base) if m.name == "engine"]
    assert [(m.old, m.new) for m in moves] == [("triton", "library")]
    one = moves[0].apply(base)
    other = json.loads(json.dumps(one))
    other["groups"][0].update(block_m=128, split_k=4, precision="tf32x3")
    assert _normal(low, one) == _normal(low, other)
    assert low.render(_normal(low, one)) == low.render(_normal(low, other))


def _gpu_seed(tmp_path, n: int, hybrids: bool = True):
    """The GPU seed of relu(a @ b) + 1 at 1024 x 2048 x 768 (a GEMM with an epilogue: the hybrid applies)."""
    source = _gemm(
        "torch.relu(torch.matmul(a, b)) + 1.0",
        "[torch.randn(M, K), torch.randn(K, N)]",
        "M = 1024\nK = 2048\nN = 768\n",
    )
    problem = problem_info(tmp_path, "gemm_relu", source)
    request = ProposeRequest(
        problem=problem,
        device="cuda",
        arch="sm_90",
        device_name="NVIDIA H100 80GB HBM3",
        action=Action.seed,
        n=n,
        hybrids=hybrids,
    )
    return LoweringSearch(lower_source(source, problem.source_path)).propose(request)


def test_the_gpu_seed_measures_the_hybrid_in_its_first_batch(tmp_path):
    result = _gpu_seed(tmp_path, 8)
    engines = [g["engine"] for p in result.proposals for g in p.knobs["groups"] if g["kind"] == "matmul"]
    assert engines.count("library") == 1 and engines.index("library") <= 3
    hybrid = result.proposals[engines.index("library")]
    assert "portfolio" in hybrid.transformation_tags and "hybrid" in hybrid.rationale
    assert len({source_sha256(p.source) for p in result.proposals}) == 8


def test_the_evaluator_passes_the_hybrid_and_labels_its_library_op(tmp_path: Path):
    source = _gemm(
        "torch.relu(torch.matmul(a, b)) + 1.0", "[torch.randn(M, K), torch.randn(K, N)]", "M = 24\nK = 16\nN = 40\n"
    )
    path = tmp_path / "gemm_relu.py"
    path.write_text(source)
    low, config = _library(source, str(path))
    candidate = low.render(config)
    info = load_problem(str(path), "cpu", dtypes=["float32"])
    result = evaluate(candidate, info, device="cpu", timeout_s=300, trials=1, sandbox="off")
    assert result.status.value == "passed", result.message
    assert result.hybrid and any("mm" in op for op in result.hybrid_ops), (result.hybrid, result.hybrid_ops)


CONV = """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.conv = nn.{conv}(cin, cout, k, stride=2, padding=1, groups=2)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 0.5


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return [4, 6, 3]
"""


def test_a_library_convolution_is_cudnns_with_the_modules_arguments_and_its_bias_in_the_epilogue():
    for conv, shape, fn in (
        ("Conv2d", "2, 4, 9, 11", "torch.nn.functional.conv2d(in_"),
        ("ConvTranspose1d", "2, 4, 7", "torch.nn.functional.conv_transpose1d(in_"),
    ):
        source = CONV.format(conv=conv, shape=shape)
        low, config = _library(source, f"/tmp/{conv}.py")
        assert [g.get("engine") for g in config["groups"] if g["kind"] == "matmul"] == ["library"]
        cand, out, expected, flagged = run_lowered(source, config)
        forward = cand[cand.index("def forward") :]
        assert fn in forward and "None, " in forward.split(fn)[1].split("\n")[0]  # no bias in the library call
        assert "groups=" in forward and "tl.dot" not in cand and cand.count("@triton.jit") == 1
        assert flagged == {"aten.convolution.default": 1}
        assert_close(out, expected)
        assert out.shape == expected.shape


def test_under_no_hybrid_the_seed_proposes_no_library_contraction(tmp_path):
    result = _gpu_seed(tmp_path, 40, hybrids=False)
    assert len(result.proposals) >= 20
    assert all(
        g.get("engine") == "triton" for p in result.proposals for g in p.knobs["groups"] if g["kind"] == "matmul"
    )
    assert all("torch.matmul(" not in p.source.split("def forward")[1] for p in result.proposals)


def test_the_coverage_csv_names_a_hybrids_library_contraction():
    from agent.search.coverage import schedule_label

    knobs = {
        "schedule": "lowering",
        "fuse": {},
        "groups": [{"kind": "matmul", "engine": "library"}, {"kind": "row"}, {"kind": "matmul", "engine": "triton"}],
    }
    assert schedule_label(knobs, "lowering/matmul+row+matmul.j2") == "matmul[library]+row+matmul"
    assert schedule_label({"block_m": 64}, "matmul.j2") == "family:matmul"


def test_a_hybrids_kernel_file_declares_the_library_precision_beside_any_dot():
    from agent.search.precision import LIBRARY, dot_precisions

    source = _gemm("torch.relu(torch.matmul(a, b)) + 1.0", "[torch.randn(M, K), torch.randn(K, N)]")
    low, config = _library(source)
    assert dot_precisions(low.render(config)) == (LIBRARY,)
    assert dot_precisions(low.render(_normal(low, low.default_config()))) == ("ieee",)


def test_an_operand_that_is_a_view_into_a_larger_storage_is_read_from_its_own_offset():
    source = _gemm("torch.relu(torch.matmul(a, b)) + 1.0", "[torch.randn(M, K), torch.randn(K, N)]")
    low, config = _library(source)
    module: dict = {}
    exec(compile(low.render(config), "cand.py", "exec"), module)
    big = torch.randn(40, 20)
    a = big[5:38]  # contiguous, storage offset 100
    b = torch.randn(20, 17)
    assert a.is_contiguous() and a.storage_offset() == 100
    got = module["ModelNew"]()(a, b)
    assert torch.allclose(got, torch.relu(a @ b) + 1.0, atol=1e-5, rtol=1e-5)
