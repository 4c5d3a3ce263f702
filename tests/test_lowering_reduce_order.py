"""The reduction tile's layout knob (`order`): "rx" builds [RBLOCK, XBLOCK] tiles, reducing over axis 0,
for reductions whose kept dims are the contiguous ones. Both orders must give the reference's values
for every reduction kind, single-pass and looped, with prologues and epilogues fused (interpreter)."""

from __future__ import annotations

import re

import pytest
import torch
from lowering_cases import CASES, assert_close, problem_info, ref, run_lowered

from agent.proposers.lowering import lower_source, space

ORDER_CASES = {
    "sum_dim1": ref("def forward(self, x):\n    return x.sum(dim=1)\n", "[torch.randn(3, 37, 21)]"),
    "sum_dim0": ref("def forward(self, x):\n    return x.sum(dim=0)\n", "[torch.randn(53, 19)]"),
    "mean_mid_keepdim": ref(
        "def forward(self, x):\n    return x.mean(dim=1, keepdim=True)\n", "[torch.randn(2, 29, 11)]"
    ),
    # ties: rounded values repeat along the reduced dim, so the first index must win in both orders
    "max_mid_ties": ref(
        "def forward(self, x):\n    return torch.max(x, dim=1)[0]\n", "[torch.randint(0, 3, (3, 25, 7)).float()]"
    ),
    "argmax_mid_ties": ref(
        "def forward(self, x):\n    return torch.argmax(x, dim=1)\n", "[torch.randint(0, 3, (3, 25, 7)).float()]"
    ),
    "argmin_mid_ties": ref(
        "def forward(self, x):\n    return torch.argmin(x, dim=1)\n", "[torch.randint(0, 3, (3, 25, 7)).float()]"
    ),
    "min_prologue": ref(
        "def forward(self, x):\n    return torch.min(torch.abs(x) * 2.0, dim=1)[0]\n", "[torch.randn(5, 13, 6)]"
    ),
    "prod_dim0": ref("def forward(self, x):\n    return torch.prod(x, dim=0)\n", "[torch.rand(9, 10) + 0.5]"),
    "any_all": ref(
        "def forward(self, x):\n    return torch.any(x > 1.0, dim=1).to(x.dtype) + torch.all(x > -2.0, dim=1).to(x.dtype)\n",
        "[torch.randn(4, 17, 5)]",
    ),
    "epilogue_kept": ref(
        "def forward(self, x):\n    return torch.tanh(x.sum(dim=1)) * 3.0\n", "[torch.randn(3, 31, 9)]"
    ),
    "rmsnorm_channels": ref(
        """
        def forward(self, x):
            return x * torch.rsqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)
        """,
        "[torch.randn(2, 13, 3, 5)]",
    ),
}

SINGLE = {"single_max": 4096, "rblock": 1024}
LOOPED = {"single_max": 0, "rblock": 8}  # chunks of 8 over reduced sizes that are not multiples of 8


def _config(source: str, name: str, order: str, form: dict) -> dict:
    config = lower_source(source, f"/tmp/{name}.py").default_config()
    groups = [dict(g, order=order, **form) if "order" in g else g for g in config["groups"]]
    assert any("order" in g for g in groups), name
    return {**config, "groups": groups}


@pytest.mark.parametrize("form", [SINGLE, LOOPED], ids=["single", "looped"])
@pytest.mark.parametrize("order", ["xr", "rx"])
@pytest.mark.parametrize("name", sorted(ORDER_CASES))
def test_both_tile_orders_match_the_reference(name, order, form):
    source = ORDER_CASES[name]
    src, out, expected, flagged = run_lowered(source, _config(source, name, order, form), path=f"/tmp/{name}.py")
    assert flagged == {}
    if name.startswith("arg"):
        assert torch.equal(out.cpu(), expected.cpu())  # same tie-breaking: the first index of the extreme
    else:
        assert_close(out, expected)
    if order == "rx":
        assert "tl.arange(0, XBLOCK)[None, :]" in src and "tl.arange(0, RBLOCK)[:, None]" in src
        assert re.search(r"tl\.(sum|max|min|reduce)\(.*, 0(, _kscout_\w+)?\)", src), src


def test_the_rx_kernel_reduces_over_axis_0():
    source = ORDER_CASES["sum_dim1"]
    src, *_ = run_lowered(source, _config(source, "sum_dim1", "rx", LOOPED), path="/tmp/sum_dim1.py")
    assert "tl.sum(acc0, 0)" in src and "tl.full([RBLOCK, XBLOCK]" in src
    assert "rbase = tl.arange(0, RBLOCK)[:, None]" in src
    assert "tl.sum(acc0, 1)" not in src


def test_the_default_order_is_xr_and_its_kernel_is_unchanged():
    low = lower_source(ORDER_CASES["sum_dim1"], "/tmp/sum_dim1.py")
    config = low.default_config()
    assert [g["order"] for g in config["groups"]] == ["xr"]
    src = low.render(config)
    assert "xindex = xoffset + tl.arange(0, XBLOCK)[:, None]" in src
    assert "rbase = tl.arange(0, RBLOCK)[None, :]" in src
    assert "tl.sum(acc0, 1)" in src and "[RBLOCK, XBLOCK]" not in src and "0)[None, :]" not in src
    without = {**config, "groups": [{k: v for k, v in g.items() if k != "order"} for g in config["groups"]]}
    # configurations recorded before the knob existed render the same kernels (the header names the config)
    assert low.render(without).split("@triton.jit", 1)[1] == src.split("@triton.jit", 1)[1]


def test_the_search_offers_the_rx_order_as_a_move():
    config = lower_source(ORDER_CASES["sum_dim1"], "/tmp/sum_dim1.py").default_config()
    moves = [m for m in space.knob_moves(config) if m.name == "order"]
    assert [(m.old, m.new) for m in moves] == [("xr", "rx")]
    assert "kept dims along the lanes" in moves[0].why
    assert space.validate_group("row", {"order": "rx"}, partial=True)["order"] == "rx"
    with pytest.raises(space.KnobError):
        space.validate_group("reduction", {"order": "xx"}, partial=True)


def test_rx_over_the_innermost_dims_is_the_xr_point():
    low = lower_source(CASES["logsumexp"], "/tmp/logsumexp.py")  # over the last dim of [5, 70]
    config = low.default_config()
    rx = {**config, "groups": [dict(g, order="rx") for g in config["groups"]]}
    assert low.render(rx).split("@triton.jit", 1)[1] == low.render(config).split("@triton.jit", 1)[1]


@pytest.mark.parametrize("name", ["softmax_dim1", "rms_norm_dim1", "var_std", "mean_two_dims"])
def test_cases_over_middle_and_leading_dims_match_in_the_rx_order(name):
    source = CASES[name]
    for form in (SINGLE, LOOPED):
        src, out, expected, flagged = run_lowered(source, _config(source, name, "rx", form), path=f"/tmp/{name}.py")
        assert flagged == {}
        assert_close(out, expected)
        assert "tl.arange(0, XBLOCK)[None, :]" in src


def _seed_tags(tmp_path, name: str, source: str) -> set[str]:
    from agent.proposers.base import Action, ProposeRequest
    from agent.proposers.lowering.propose import LoweringSearch

    problem = problem_info(tmp_path, name, source)
    path = problem.source_path
    search = LoweringSearch(lower_source(source, path))
    request = ProposeRequest(
        problem=problem, device="cuda", arch="sm_90", device_name="H200", action=Action.seed, n=100
    )
    return {tag for p in search.propose(request).proposals for tag in p.transformation_tags}


def test_the_seed_offers_rx_only_where_the_reduced_dims_are_not_innermost(tmp_path):
    assert "g0.order=rx" in _seed_tags(tmp_path, "sum_dim1", ORDER_CASES["sum_dim1"])
    last = _seed_tags(tmp_path, "logsumexp", CASES["logsumexp"])  # over the last dim: the same point as xr
    assert "g0.order=rx" not in last and "g0.num_warps=16" in last


def test_a_gpu_seed_batch_of_eight_measures_both_layouts_of_a_middle_dim_reduction(tmp_path):
    from agent.proposers.base import Action, ProposeRequest
    from agent.proposers.lowering.propose import LoweringSearch

    def batch(name: str, source: str) -> list[tuple[str, ...]]:
        problem = problem_info(tmp_path, name, source)
        search = LoweringSearch(lower_source(source, problem.source_path))
        request = ProposeRequest(
            problem=problem, device="cuda", arch="sm_90", device_name="H200", action=Action.seed, n=8
        )
        return [p.transformation_tags for p in search.propose(request).proposals]

    mid = batch("sum_dim1", ORDER_CASES["sum_dim1"])
    assert len(mid) == 8
    assert ("seed", "schedule=reduction") == mid[0]  # the default schedule, in xr, first
    assert "g0.order=rx" in mid[1]  # its rx twin next, so both layouts are timed together
    last = batch("logsumexp", CASES["logsumexp"])
    assert len(last) == 8 and not any("g0.order=rx" in t for t in last)
