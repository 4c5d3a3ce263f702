"""A matmul-family problem with a float32 case, proposed for a GPU, goes through the lowering (float32-aware
tiles, an explicit dot precision) instead of the matmul family template, whose 16-bit tiles overflow shared
memory in float32 and whose dot is TF32. On the CPU, and for 16-bit-only problems, the family template stays.
Proposing renders source only: no GPU is needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.proposers.base import Action, ParentInfo, ProposeRequest
from agent.proposers.template import TemplateProposer
from evaluation.problem import load_problem
from evaluation.records import source_sha256

DEV = Path(
    os.environ.get("KSCOUT_KERNELBENCH_DEV", Path(__file__).resolve().parents[1] / ".." / "shared" / "kernelbench-dev")
)
GEMM_ADD_RELU = DEV / "level2" / "76_Gemm_Add_ReLU.py"
NOTE = "the matmul family template is tuned for 16-bit operands"


def _linear_relu(dtypes: tuple[str, ...] | None) -> str:
    """A KernelBench-format nn.Linear + ReLU reference; `dtypes` None leaves DTYPES undeclared (float32)."""
    declared = f"DTYPES = {dtypes!r}\n\n" if dtypes is not None else ""
    return (
        "import torch\nimport torch.nn as nn\n\n" + declared + "\nclass Model(nn.Module):\n"
        "    def __init__(self, in_features, out_features):\n"
        "        super().__init__()\n"
        "        self.linear = nn.Linear(in_features, out_features)\n\n"
        "    def forward(self, x):\n"
        "        return torch.relu(self.linear(x))\n\n\n"
        "batch_size = 256\nin_features = 512\nout_features = 384\n\n\n"
        "def get_inputs():\n    return [torch.randn(batch_size, in_features)]\n\n\n"
        "def get_init_inputs():\n    return [in_features, out_features]\n"
    )


def _problem(tmp_path: Path, name: str, dtypes: tuple[str, ...] | None, device: str):
    path = tmp_path / f"{name}.py"
    path.write_text(_linear_relu(dtypes))
    return load_problem(str(path), device=device)


def _request(problem, device: str, n: int = 8, action: Action = Action.seed, parent=None, seen=frozenset()):
    return ProposeRequest(
        problem=problem,
        device=device,
        arch="sm_90" if device == "cuda" else "cpu",
        device_name="NVIDIA H100 80GB HBM3" if device == "cuda" else "cpu",
        action=action,
        parent=parent,
        n=n,
        seen_sha256=seen,
    )


def _matmul_groups(proposal) -> list[dict]:
    return [g for g in proposal.knobs["groups"] if g["kind"] == "matmul"]


def _assert_lowered_seed(result, n: int) -> None:
    assert result.errors == () and len(result.proposals) == n
    for p in result.proposals:
        assert p.template_name is not None and p.template_name.startswith("lowering/"), p.template_name
        assert p.knobs["schedule"] == "lowering"
        assert NOTE in p.rationale and p.rationale.endswith("lowered instead"), p.rationale
        assert "matmul" in p.template_name
    # the first batch reaches the float32 portfolio: tensor-core tiles with a tf32x3 dot
    tf32x3 = [p for p in result.proposals if any(g["precision"] == "tf32x3" for g in _matmul_groups(p))]
    assert len(tf32x3) >= 4, [_matmul_groups(p) for p in result.proposals]
    assert all("portfolio" in p.transformation_tags for p in tf32x3)
    assert "matmul.j2" not in {p.template_name for p in result.proposals}


@pytest.mark.parametrize("dtypes", [None, ("float32",), ("bfloat16", "float32")])
def test_a_float32_gemm_epilogue_on_cuda_is_lowered(tmp_path, dtypes):
    problem = _problem(tmp_path, "linear_relu", dtypes, "cuda")
    assert "float32" in problem.dtypes
    result = TemplateProposer().propose(_request(problem, "cuda"))
    _assert_lowered_seed(result, 8)


def test_the_same_problem_on_cpu_keeps_the_family_template(tmp_path):
    problem = _problem(tmp_path, "linear_relu", None, "cpu")
    assert problem.dtypes == ("float32",)
    result = TemplateProposer().propose(_request(problem, "cpu", n=3))
    assert result.errors == () and len(result.proposals) == 3
    for p in result.proposals:
        assert p.template_name == "matmul.j2"
        assert "schedule" not in p.knobs or p.knobs["schedule"] != "lowering"
        assert NOTE not in p.rationale
    assert result.proposals[0].rationale.startswith("seed: the matmul template's default configuration")


def test_a_bfloat16_only_gemm_on_cuda_keeps_the_family_template(tmp_path):
    problem = _problem(tmp_path, "linear_relu_bf16", ("bfloat16",), "cuda")
    assert problem.dtypes == ("bfloat16",)
    result = TemplateProposer().propose(_request(problem, "cuda", n=3))
    assert result.errors == () and len(result.proposals) == 3
    assert {p.template_name for p in result.proposals} == {"matmul.j2"}
    assert all(NOTE not in p.rationale for p in result.proposals)


def test_a_float32_gemm_that_allows_tf32_on_cuda_keeps_the_family_template(tmp_path):
    path = tmp_path / "linear_relu_tf32.py"
    path.write_text('FLOAT32_MATMUL_PRECISION = "high"\n' + _linear_relu(None))
    problem = load_problem(str(path), device="cuda")
    assert problem.float32_matmul_precision == "high" and "float32" in problem.dtypes
    result = TemplateProposer().propose(_request(problem, "cuda", n=3))
    assert {p.template_name for p in result.proposals} == {"matmul.j2"}
    assert all(NOTE not in p.rationale for p in result.proposals)


def test_a_repair_of_a_family_candidate_on_cuda_is_lowered_too(tmp_path):
    """A failed matmul.j2 candidate (the shared-memory overflow) is replaced from the lowering, not a neighbour."""
    problem = _problem(tmp_path, "linear_relu", None, "cuda")
    cpu = _problem(tmp_path, "linear_relu", None, "cpu")
    family = TemplateProposer().propose(_request(cpu, "cpu", n=1)).proposals[0]
    assert family.template_name == "matmul.j2"
    parent = ParentInfo(
        candidate_id=source_sha256(family.source),
        source=family.source,
        knobs=family.knobs,
        transformation_tags=family.transformation_tags,
    )
    result = TemplateProposer().propose(
        _request(problem, "cuda", n=2, action=Action.repair, parent=parent, seen=frozenset({parent.candidate_id}))
    )
    assert len(result.proposals) == 2, result.errors
    for p in result.proposals:
        assert p.template_name is not None and p.template_name.startswith("lowering/")
        assert p.knobs["schedule"] == "lowering" and NOTE in p.rationale


@pytest.mark.skipif(not GEMM_ADD_RELU.is_file(), reason=f"KernelBench dev set not found at {DEV}")
def test_kernelbench_76_gemm_add_relu_on_cuda_is_lowered():
    problem = load_problem(str(GEMM_ADD_RELU), device="cuda")
    assert problem.dtypes == ("float32",)
    result = TemplateProposer().propose(_request(problem, "cuda"))
    _assert_lowered_seed(result, 8)


@pytest.mark.skipif(not GEMM_ADD_RELU.is_file(), reason=f"KernelBench dev set not found at {DEV}")
def test_kernelbench_76_gemm_add_relu_on_cpu_keeps_the_family_template():
    problem = load_problem(str(GEMM_ADD_RELU), device="cpu")
    result = TemplateProposer().propose(_request(problem, "cpu", n=2))
    assert result.errors == () and {p.template_name for p in result.proposals} == {"matmul.j2"}
