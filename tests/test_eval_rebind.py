"""A candidate whose `__init__` reads a module-level size, as the reference's does (KernelBench's
VanillaRNN builds its hidden state from the module's `batch_size`), is judged at every case's sizes: the
worker rebinds the case's size constants in the candidate's module as the harness does in the problem's
(evaluation/worker.py rebind_sizes). Before, such a correct candidate failed every case but the shipped one."""

from __future__ import annotations

import textwrap

import pytest
import torch

from evaluation import evaluate, load_problem
from evaluation.records import Status
from evaluation.worker import rebind_sizes

PROBLEM = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    batch_size = 16
    dim = 24


    class Model(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.hidden = torch.randn((batch_size, dim))
            self.scale = nn.Parameter(torch.randn(dim))

        def forward(self, x):
            return torch.softmax(x * self.scale + self.hidden, dim=1)


    def get_inputs():
        return [torch.randn(batch_size, dim)]


    def get_init_inputs():
        return [dim]
    """
)

CANDIDATE = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl

    batch_size = 16
    dim = 24


    @triton.jit
    def _row_softmax(x_ptr, s_ptr, h_ptr, out_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n
        x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0)
        s = tl.load(s_ptr + cols, mask=mask, other=0.0)
        h = tl.load(h_ptr + row * n + cols, mask=mask, other=0.0)
        z = tl.where(mask, x * s + h, -float("inf"))
        z = z - tl.max(z, axis=0)
        e = tl.exp(z)
        tl.store(out_ptr + row * n + cols, e / tl.sum(e, axis=0), mask=mask)


    class ModelNew(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.hidden = torch.randn((batch_size, dim))
            self.scale = nn.Parameter(torch.randn(dim))

        def forward(self, x):
            x = x.contiguous()
            h = self.hidden.to(x.device).contiguous()
            out = torch.empty_like(x)
            n = x.shape[1]
            _row_softmax[(x.shape[0],)](x, self.scale, h, out, n, BLOCK=triton.next_power_of_2(n))
            return out
    """
)


def _namespace(source: str) -> dict:
    names: dict = {"__name__": "candidate"}
    exec(compile(source, "candidate.py", "exec"), names)
    return names


def test_rebind_sizes_sets_only_the_int_names_the_candidates_module_defines():
    names = _namespace(
        "import torch\nbatch_size = 16\nlabel = 'x'\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.n = batch_size\n"
    )
    assert rebind_sizes(names["M"], {"batch_size": 97, "dim": 5, "label": 3}) == ["batch_size"]
    assert names["batch_size"] == 97 and names["label"] == "x" and "dim" not in names
    assert names["M"]().n == 97
    assert rebind_sizes(torch.nn.Identity, {"batch_size": 3}) == []  # torch's own module is never touched
    assert rebind_sizes(names["M"], None) == [] and names["batch_size"] == 97


def test_a_candidate_mirroring_a_module_level_batch_size_passes_every_batch_case(tmp_path):
    path = tmp_path / "hidden_softmax.py"
    path.write_text(PROBLEM)
    info = load_problem(str(path), "cpu", overrides={"dim": 24})  # the batch size alone varies
    small = tuple(c for c in info.shape_cases if c.params["batch_size"] < 1000)  # 4099 rows: 20 s interpreted
    info = info.model_copy(update={"shape_cases": small})
    batches = sorted({c.params["batch_size"] for c in info.shape_cases})
    assert len(batches) >= 3 and 1 in batches and 16 in batches
    result = evaluate(CANDIDATE, info, device="cpu", trials=1)
    assert result.status is Status.passed, result.message
    assert sorted(r.case_id.split(",")[0] for r in result.shape_results) == sorted(
        f"batch_size={b}" for b in [c.params["batch_size"] for c in info.shape_cases]
    )


@pytest.mark.slow  # lowering and an interpreted evaluation: about 15 s on the 2-core machine
def test_the_lowering_mirrors_a_module_level_size_and_its_candidate_passes_every_batch_case(tmp_path):
    from agent.proposers.lowering import lower_source

    source = PROBLEM.replace(
        "self.hidden = torch.randn((batch_size, dim))", "self.hidden = nn.Parameter(torch.randn((batch_size, dim)))"
    )
    path = tmp_path / "hidden_param_softmax.py"
    path.write_text(source)
    low = lower_source(source, str(path))
    candidate = low.render(low.default_config())
    assert "\nbatch_size = 16\n" in candidate
    info = load_problem(str(path), "cpu", overrides={"dim": 24})
    result = evaluate(candidate, info, device="cpu", trials=1)
    assert result.status is Status.passed, result.message
    assert {r.case_id.split(",")[0] for r in result.shape_results} >= {"batch_size=1", "batch_size=97"}


CHAINED = textwrap.dedent(
    """
    import torch
    from torch import nn

    batch_size = 16
    height = width = 256
    width2 = 3


    class Model(nn.Module):
        def forward(self, x):
            return x.mean(dim=(2, 3))


    def get_inputs():
        return [torch.randn(batch_size, 2, height, width)]


    def get_init_inputs():
        return []
    """
)


def test_a_chained_size_constant_is_one_slot_and_its_derived_cases_shrink_both_names(tmp_path):
    """`height = width = 256` (13 KernelBench dev files): one slot named `height` whose rebinding sizes
    both names, so a CPU case is no longer stuck at 256 x 256 under the interpreter."""
    import ast

    from evaluation.problem_file import exec_problem_source, size_slots

    assert size_slots(ast.parse(CHAINED)) == {"batch_size": 16, "height": 256, "width2": 3}
    module = exec_problem_source(CHAINED, "chained.py", {"height": 6})
    assert (module.height, module.width) == (6, 6)
    assert module.get_inputs()[0].shape == (16, 2, 6, 6)
    path = tmp_path / "chained.py"
    path.write_text(CHAINED)
    info = load_problem(str(path), "cpu")
    small = [c for c in info.shape_cases if "big" not in c.tags]
    assert small and all(c.params["height"] < 256 for c in small)
