"""`kscout optimize-model` on a hand-written causal self-attention (minGPT's): the regions the partition
cuts it into (bmm, scale and mask, softmax, bmm) become one region whose problem is
F.scaled_dot_product_attention, where causality is proven from the mask buffer; any other mask leaves
the regions as they were.

Models are small KernelBench files written into tmp_path; everything runs on the CPU.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from test_optimize_model import built, cut  # cut: (traced, the partition's own regions, free nodes)

from agent.model import assemble, attention, flow
from agent.proposers.family import match_family
from agent.proposers.lowering import lower_source
from evaluation.problem import load_problem
from evaluation.problems import attention as attention_problem
from store import Store

B, T, C, H, MAX_SEQLEN = 2, 16, 32, 2, 32
E = C // H

# the imports and sizes both model files share
HEADER = """
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 2
seq_len = 16
n_embd = 32
n_head = 2
max_seqlen = 32
"""

ATTENTION = (
    HEADER
    + """

class Model(nn.Module):
    def __init__(self, n_embd, n_head, max_seqlen):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        {mask}
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = {scores}
        {masked}
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_head, max_seqlen]
"""
)

CAUSAL = (
    'self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen))'
)
MASKED = 'att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))'
SCALED = "(q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))"


def model(mask: str = CAUSAL, masked: str = MASKED, scores: str = SCALED) -> str:
    return ATTENTION.format(mask=mask, masked=masked, scores=scores)


@pytest.fixture(autouse=True)
def no_vectors(monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")


def write(tmp_path: Path, text: str, name: str = "attn.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_partition_alone_cuts_the_attention_at_each_contraction(tmp_path):
    _, regions, _ = cut(write(tmp_path, model()))
    assert [tuple(r.ops) for r in regions] == [
        ("addmm",),
        ("clone", "clone"),
        ("bmm", "mul", "where"),
        ("amax", "sub", "exp", "sum", "div", "clone"),
        ("bmm", "clone"),
        ("addmm",),
    ]


def test_a_causal_self_attention_becomes_one_sdpa_region_in_canonical_form(tmp_path):
    plan = flow.prepare(write(tmp_path, model()), budget=4, min_share=0.0, work=tmp_path / "work")
    rows = [plan.rows[r.name] for r in plan.regions]
    assert [(r.name, r.kind, r.ops) for r in rows] == [
        ("r0", "contraction", ("addmm",)),
        ("r1", "contraction", ("scaled_dot_product_attention",)),
        ("r2", "chain", ("clone",)),  # y.transpose(1, 2).contiguous()
        ("r3", "contraction", ("addmm",)),
    ]
    assert rows[1].input_shapes == ((B, H, T, E),) * 3 and rows[1].state == "searched"
    # its speedups are against the library call its problem holds, which the row names
    assert [r.library for r in rows] == [None, "F.scaled_dot_product_attention", None, None]
    assert not any({"bmm", "amax", "exp", "where"} & set(r.ops) for r in rows)  # the score matrix's regions
    attn = plan.regions[1]
    assert attn.canonical == {"is_causal": True, "scale": 1.0 / math.sqrt(E)}
    assert [plan.traced.meta[o].shape for o in attn.outputs] == [(B, H, T, E)]
    assert attn.outputs == plan.regions[2].inputs  # the next region reads the attention's 4-D output
    source = plan.extracted["r1"].source
    assert (
        f"return F.scaled_dot_product_attention(in0, in1, in2, is_causal=True, scale={1.0 / math.sqrt(E)!r})" in source
    )
    found = match_family(plan.extracted["r1"].path)
    assert found.family == "attention"
    assert found.roles == {"q": "in0", "k": "in1", "v": "in2"}
    assert found.constants == {"is_causal": True, "scale": 1.0 / math.sqrt(E)}
    # judged at the built-in attention problem's float32 tolerance, the other regions at the strict default
    tols = {r: load_problem(plan.extracted[r].path, "cpu").tolerances["float32"] for r in ("r0", "r1")}
    assert (tols["r1"].atol, tols["r1"].rtol) == attention_problem.TOLERANCES["float32"] == (5e-4, 5e-4)
    assert (tols["r0"].atol, tols["r0"].rtol) == (1e-4, 1e-4)


@pytest.mark.parametrize(
    "mask",
    [
        # a random 0/1 mask
        'self.register_buffer("bias", (torch.rand(1, 1, max_seqlen, max_seqlen) > 0.3).float())',
        # one future token allowed
        'self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen), 1).view(1, 1, max_seqlen, max_seqlen))',
        # the causal mask as a parameter, which training may change
        "self.bias = nn.Parameter(torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen))",
    ],
    ids=["random", "tril_shifted_by_one", "parameter"],
)
def test_a_mask_that_is_not_proven_causal_leaves_the_regions_as_the_partition_made_them(tmp_path, mask):
    path = write(tmp_path, model(mask=mask))
    traced, regions, free = cut(path)
    assert attention.fuse_attention(traced, regions, free) is regions
    plan = flow.prepare(path, budget=4, min_share=0.0, work=tmp_path / "work")
    assert [(r.name, tuple(r.ops)) for r in plan.regions] == [(r.name, tuple(r.ops)) for r in regions]
    assert all(r.canonical is None for r in plan.regions)


def test_a_mask_attribute_the_forward_rebinds_is_not_proven(tmp_path):
    text = model(
        mask="self.bias = torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen)",
        masked=MASKED + "\n        self.bias = self.bias * 1.0",
    )
    traced, regions, free = cut(write(tmp_path, text))
    assert [w.name for w in traced.captured.writes] == ["bias"]
    assert attention.fuse_attention(traced, regions, free) is regions


@pytest.mark.parametrize(
    "scores,scale",
    [(SCALED, 1.0 / math.sqrt(E)), ("(q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))", 1.0 / math.sqrt(E))],
    ids=["times_a_scale", "divided"],
)
def test_an_attention_without_a_mask_fuses_as_not_causal(tmp_path, scores, scale):
    plan = flow.prepare(
        write(tmp_path, model(mask="", masked="", scores=scores)), budget=4, min_share=0.0, work=tmp_path / "work"
    )
    assert [plan.rows[r.name].ops for r in plan.regions] == [
        ("addmm",),
        ("scaled_dot_product_attention",),
        ("clone",),
        ("addmm",),
    ]
    assert plan.regions[1].canonical == {"is_causal": False, "scale": scale}
    found = match_family(plan.extracted["r1"].path)
    assert found.family == "attention" and found.constants == {"is_causal": False, "scale": scale}


def test_the_numerical_check_refuses_a_match_whose_scale_is_wrong(tmp_path):
    traced, regions, free = cut(write(tmp_path, model()))
    readers = attention._readers(traced.captured.gm.graph, free, traced.meta)
    bmm2 = [n for n in traced.captured.gm.graph.nodes if n.target is torch.ops.aten.bmm.default][-1]
    found = attention._match(bmm2, traced, readers, free)
    assert found is not None and found.is_causal
    assert attention._agreeing(traced, [found]) == [found]
    assert attention._agreeing(traced, [dataclasses.replace(found, scale=found.scale * 1.01)]) == []
    assert attention._agreeing(traced, [dataclasses.replace(found, is_causal=False)]) == []


@pytest.mark.parametrize("kernels", [False, True], ids=["reference_ops", "lowered_kernels"])
def test_the_assembled_model_computes_what_the_model_does(tmp_path, kernels):
    path = write(tmp_path, model())
    plan = flow.prepare(path, budget=4, min_share=0.0, work=tmp_path / "work")
    won = {}
    if kernels:  # each region's lowered seed as its winner: the attention's kernel over contiguous q, k, v
        for r in plan.regions:
            e = plan.extracted[r.name]
            lw = lower_source(e.source, e.path)
            won[r.name] = assemble.Winner(r.name, lw.render(lw.default_config()), ("cpu",), e.dtype, e.input_shapes)
    source = assemble.assemble(plan.traced, plan.regions, plan.free, won, "t")
    # the attention's reference path is the math the model wrote, never the library call of its problem file
    reference = source[source.index("def _r1_reference") : source.index("def _r2_reference")]
    assert "scaled_dot_product_attention" not in source
    assert "torch.softmax(s, dim=-1)" in reference and ".triu(1), float('-inf'))" in reference
    m = built(source, plan.traced, path)
    launches = []
    for name in won:
        getattr(m, f"_kscout_{name}").register_forward_hook(lambda *a, name=name: launches.append(name))
    with torch.no_grad():
        expected = plan.traced.model(*plan.traced.inputs)
        got = m(*plan.traced.inputs)
    assert launches == list(won)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


TWO_BLOCKS = (
    HEADER
    + """

class Model(nn.Module):
    def __init__(self, n_embd, n_head, max_seqlen):
        super().__init__()
        self.qkv = nn.ModuleList([nn.Linear(n_embd, 3 * n_embd) for _ in range(2)])
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.size()
        mask = self.bias[:, :, :T, :T] == 0  # one mask for both blocks
        for qkv in self.qkv:
            q, k, v = qkv(x).split(self.n_embd, dim=2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
            x = x + (att @ v).transpose(1, 2).reshape(B, T, C)
        return x


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_head, max_seqlen]
"""
)


def test_two_blocks_sharing_one_mask_give_two_attention_regions_and_one_search(tmp_path):
    path = write(tmp_path, TWO_BLOCKS)
    plan = flow.prepare(path, budget=4, min_share=0.0, work=tmp_path / "work")
    rows = [plan.rows[r.name] for r in plan.regions]
    assert [(r.ops, r.same_as) for r in rows] == [
        (("addmm",), None),
        (("scaled_dot_product_attention",), None),
        (("clone", "add"), None),
        (("addmm",), "r0"),
        (("scaled_dot_product_attention",), "r1"),  # the same problem: one search serves both
        (("clone", "add"), "r2"),
    ]
    m = built(assemble.assemble(plan.traced, plan.regions, plan.free, {}, "t"), plan.traced, path)
    with torch.no_grad():
        torch.testing.assert_close(m(*plan.traced.inputs), plan.traced.model(*plan.traced.inputs), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_the_whole_flow_gives_the_attention_region_a_kernel_and_passes_end_to_end(tmp_path):
    path = write(tmp_path, model())
    with Store.open(home=tmp_path / "store") as st:
        report = flow.optimize_model(path, st, work=tmp_path / "work", budget=4, min_share=0.0)
    attn = report.regions[1]
    assert attn.ops == ("scaled_dot_product_attention",)
    assert (attn.state, attn.judged) == ("searched", "passed") and attn.kernel is not None
    assert report.verdict == "passed"
    assert "_kscout_region(self._kscout_r1" in Path(report.assembled_path).read_text()
