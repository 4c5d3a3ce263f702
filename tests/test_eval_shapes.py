"""Shape sets derived from any size constant: expressions and tuples, tied sizes, the reference's own
consistency, edges past 1024, every size a non-power-of-two, the big case, stated budgets, the loader."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from evaluation import load_problem
from evaluation.cli import parse_sets
from evaluation.errors import ProblemError
from evaluation.problem_file import exec_problem, size_slots
from evaluation.shapes import CPU_BIG_ROWS_MAX_NUMEL, CPU_EDGE_MAX_NUMEL, CPU_MAX_NUMEL, footprint

ROOT = Path(__file__).resolve().parents[1]
KB_DEV = Path(os.environ.get("KSCOUT_KERNELBENCH_DEV", ROOT.parent / "shared" / "kernelbench-dev"))

HINGE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


batch_size = 8192 * 4
input_shape = (32768,)
dim = 1


def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, 2, (batch_size,)).float() * 2 - 1]


def get_init_inputs():
    return []
"""

INSTANCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(num_features=num_features)

    def forward(self, x):
        return self.inorm(x)


batch_size = 112
features = 64
dim1 = 512
dim2 = 512


def get_inputs():
    return [torch.rand(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features]
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def _is_pow2(n):
    return n > 0 and n & (n - 1) == 0


def test_integer_expressions_and_tuple_items_are_size_slots_but_derived_names_are_not():
    tree = ast.parse("A = 16384 * 4\nB = 1 << 20\nshape = (32768, 7)\nC = 4 * A\nD = 2 / 1\nE = -1\nF = A\n")
    assert size_slots(tree) == {"A": 65536, "B": 1 << 20, "shape[0]": 32768, "shape[1]": 7}


def test_a_tuple_item_is_rebound_in_place_and_derived_values_follow(tmp_path):
    path = _write(tmp_path, "t.py", HINGE)
    module = exec_problem(path, {"batch_size": 5, "input_shape[0]": 5})
    assert module.input_shape == (5,) and module.batch_size == 5
    predictions, targets = module.get_inputs()
    assert predictions.shape == (5, 5) and targets.shape == (5,)


def test_the_hinge_loss_file_loads_and_keeps_the_sizes_its_reference_ties_together(tmp_path):
    info = load_problem(str(_write(tmp_path, "hinge.py", HINGE)), "cpu")
    rep = info.shape_cases[0]
    assert rep.params["batch_size"] == rep.params["input_shape[0]"] and rep.params["batch_size"] <= 64
    assert footprint(Path(info.source_path), rep.params).max_numel <= CPU_MAX_NUMEL
    # untied by one, the reference's broadcast fails: the two sizes only ever move together (an untied
    # batch of 1 would broadcast, and change what the reference computes)
    assert all(c.params["batch_size"] == c.params["input_shape[0]"] for c in info.shape_cases)
    assert any(
        "batch_size and input_shape[0] always move together" in n and "must match the size" in n
        for n in info.shape_notes
    )
    big = [c for c in info.shape_cases if "big" in c.tags]
    assert len(big) == 1 and big[0].params["batch_size"] == 1031  # past 1024 and past 2^20 elements
    assert info.launch_cases[0].params == {"batch_size": 32768, "input_shape[0]": 32768, "dim": 1}


@pytest.mark.skipif(not (KB_DEV / "level1" / "100_HingeLoss.py").is_file(), reason="KernelBench dev set absent")
def test_kernelbench_100_hinge_loss_loads_and_produces_cases():
    info = load_problem(str(KB_DEV / "level1" / "100_HingeLoss.py"), "cpu")
    assert len(info.shape_cases) >= 5 and info.shape_notes


def test_a_4d_problem_gets_every_reduced_size_past_1024_and_one_case_with_all_sizes_odd(tmp_path):
    info = load_problem(str(_write(tmp_path, "inorm.py", INSTANCE)), "cpu")
    names = ("batch_size", "features", "dim1", "dim2")
    for name in ("dim1", "dim2"):  # InstanceNorm normalises over height and width
        assert any(c.params[name] > 1024 for c in info.shape_cases if "big" not in c.tags), name
    for name in ("batch_size", "features"):  # 1537 instances would be 1537 programs and prove nothing new
        assert max(c.params[name] for c in info.shape_cases) < 1024, name
    ragged = [c for c in info.shape_cases if all(not _is_pow2(c.params[n]) for n in names)]
    assert ragged and all(
        footprint(Path(info.source_path), c.params).max_numel <= CPU_EDGE_MAX_NUMEL
        for c in ragged
        if "big" not in c.tags
    )
    (big,) = [c for c in info.shape_cases if "big" in c.tags]
    assert big.params["dim2"] == 4099  # the innermost size, not its tied twin
    # a normalisation: each instance is an interpreted program or more, so rows stay few
    assert footprint(Path(info.source_path), big.params).max_numel <= CPU_BIG_ROWS_MAX_NUMEL
    assert any("spatial element" in d.reason for d in info.dropped_cases)  # 1x1 instances: the reference refuses


def test_the_reference_is_probed_for_the_sizes_it_reduces_over(tmp_path):
    from evaluation.shapes import _Problem

    inorm = _Problem(_write(tmp_path, "inorm.py", INSTANCE))
    assert inorm.mixing_slots({"batch_size": 4, "features": 3, "dim1": 5, "dim2": 6}) == {"dim1", "dim2"}
    hinge = _Problem(_write(tmp_path, "hinge.py", HINGE))
    assert hinge.mixing_slots({"batch_size": 6, "input_shape[0]": 6, "dim": 1}) == {
        "batch_size",
        "input_shape[0]",
        "dim",
    }
    selu = _Problem(
        _write(
            tmp_path,
            "selu.py",
            "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
            "        return torch.selu(x)\nb = 8\nd = 8\n"
            "def get_inputs():\n    return [torch.randn(b, d)]\n",
        )
    )
    assert selu.mixing_slots({"b": 4, "d": 5}) == set()


def test_the_big_case_crosses_one_million_elements_with_over_64_rows(tmp_path):
    selu = (
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.selu(x)\n"
        "batch_size = 4096\ndim = 393216\ndef get_inputs():\n    return [torch.rand(batch_size, dim)]\n"
    )
    info = load_problem(str(_write(tmp_path, "selu.py", selu)), "cpu")
    (big,) = [c for c in info.shape_cases if "big" in c.tags]
    assert big.params["dim"] == 4099 and big.params["batch_size"] > 64 and not _is_pow2(big.params["batch_size"])
    assert big.params["batch_size"] * 4099 > 1 << 20


def test_a_pooling_window_wider_than_a_shrunk_sequence_is_dropped_with_the_references_reason(tmp_path):
    pool = (
        "import torch\nclass Model(torch.nn.Module):\n    def __init__(self, k):\n        super().__init__()\n"
        "        self.pool = torch.nn.MaxPool1d(k, stride=1, padding=4, dilation=3)\n"
        "    def forward(self, x):\n        return self.pool(x)\nbatch = 64\nfeatures = 192\nlength = 65536\n"
        "kernel_size = 8\ndef get_inputs():\n    return [torch.rand(batch, features, length)]\n"
        "def get_init_inputs():\n    return [kernel_size]\n"
    )
    info = load_problem(str(_write(tmp_path, "pool.py", pool)), "cpu")
    assert info.shape_cases and info.dropped_cases
    assert all("max_pool1d()" in d.reason for d in info.dropped_cases)
    kept = {c.params["length"] for c in info.shape_cases}
    assert 1 not in kept and {d.params["length"] for d in info.dropped_cases} & {1}


def test_a_reference_that_needs_its_shipped_ratio_falls_back_to_proportional_shrinking(tmp_path):
    ratio = (
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        assert x.shape[0] == 4 * x.shape[1], 'rows must be four times the columns'\n"
        "        return x * 2\nrows = 4096\ncols = 1024\ndef get_inputs():\n    return [torch.rand(rows, cols)]\n"
    )
    info = load_problem(str(_write(tmp_path, "ratio.py", ratio)), "cpu")
    rep = info.shape_cases[0].params
    assert rep["rows"] == 4 * rep["cols"]
    assert all(c.params["rows"] == 4 * c.params["cols"] for c in info.shape_cases)
    assert any("four times" in d.reason for d in info.dropped_cases)


def test_a_case_of_one_channel_per_group_is_dropped_because_pytorch_float32_cannot_pass_it(tmp_path):
    # Shrinking 4096 channels in 64 groups reaches 64 in 64: one element per group, an exact output of
    # zero and a float64 reference of rounding noise, against which the norm test refuses any kernel.
    groups = (
        "import torch\nclass Model(torch.nn.Module):\n    def __init__(self, features, num_groups):\n"
        "        super().__init__()\n        self.gn = torch.nn.GroupNorm(num_groups, features)\n"
        "    def forward(self, x):\n        return self.gn(x * 3.0 + 1.0)\n"
        "batch_size = 32768\nout_features = 4096\nnum_groups = 64\n"
        "def get_inputs():\n    return [torch.rand(batch_size, out_features)]\n"
        "def get_init_inputs():\n    return [out_features, num_groups]\n"
    )
    info = load_problem(str(_write(tmp_path, "groups.py", groups)), "cpu")
    per_group = [c.params["out_features"] // c.params["num_groups"] for c in info.shape_cases]
    assert info.shape_cases and min(per_group) >= 2
    rounding = [d for d in info.dropped_cases if "PyTorch's own float32 result fails" in d.reason]
    assert rounding and all(d.params["out_features"] == d.params["num_groups"] for d in rounding)
    assert "it tests rounding, not a kernel" in rounding[0].reason


def test_a_reference_that_rejects_every_shrunk_shape_is_one_clear_error(tmp_path):
    never = (
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        raise ValueError('only the shipped size')\nn = 1 << 24\n"
        "def get_inputs():\n    return [torch.rand(n)]\n"
    )
    with pytest.raises(ProblemError) as err:
        load_problem(str(_write(tmp_path, "never.py", never)), "cpu")
    assert "the reference rejects its shrunk shapes" in str(err.value) and "\n" not in str(err.value)


def test_gpu_shape_sets_follow_a_stated_budget_not_the_free_memory_of_the_moment(tmp_path, monkeypatch):
    import torch

    path = str(
        _write(
            tmp_path,
            "selu.py",
            "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
            "        return torch.selu(x)\nb = 4096\nd = 393216\n"
            "def get_inputs():\n    return [torch.rand(b, d)]\n",
        )
    )
    first = load_problem(path, "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (1 << 30, 1 << 34))  # a nearly full GPU
    assert load_problem(path, "cuda").problem_id == first.problem_id
    rep = first.shape_cases[0].params
    assert rep["b"] * rep["d"] * 4 <= 1 << 30


def test_set_accepts_an_item_of_a_tuple_constant(tmp_path):
    overrides = parse_sets(["input_shape[0]=33", "batch_size=33"])
    info = load_problem(str(_write(tmp_path, "hinge.py", HINGE)), "cpu", overrides)
    assert {c.params["input_shape[0]"] for c in info.shape_cases} == {33}
    with pytest.raises(ProblemError, match="malformed --set"):
        parse_sets(["input_shape(0)=3"])


def test_the_tolerance_policy_is_chosen_recorded_and_part_of_the_identity():
    strict = load_problem("layernorm", "cpu")
    kb = load_problem("layernorm", "cpu", tolerance="kernelbench")
    assert strict.tolerance_policy == "strict" and kb.tolerance_policy == "kernelbench"
    assert (kb.tolerances["float32"].atol, kb.tolerances["float32"].rtol) == (1e-2, 1e-2)
    assert kb.tolerances["bfloat16"] == strict.tolerances["bfloat16"]  # never tighter than strict
    assert kb.problem_id != strict.problem_id
    with pytest.raises(ProblemError, match="unknown tolerance policy 'loose'"):
        load_problem("layernorm", "cpu", tolerance="loose")


def test_cpu_problems_carry_their_gpu_sized_cases_for_launch_checks():
    cpu, cuda = load_problem("rmsnorm", "cpu"), load_problem("rmsnorm", "cuda")
    assert {c.case_id for c in cpu.launch_cases} == {c.case_id for c in cuda.shape_cases}
    assert all(c.tags == ("launch_only",) for c in cpu.launch_cases) and cuda.launch_cases == ()


def test_shapes_and_the_loader_do_not_import_the_problem_module():
    """The problem.py <-> shapes.py cycle is gone: shapes and problem_file stand on their own."""
    for name in ("shapes.py", "problem_file.py"):
        tree = ast.parse((ROOT / "evaluation" / name).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "evaluation.problem" not in imported and "evaluation" not in imported, name
