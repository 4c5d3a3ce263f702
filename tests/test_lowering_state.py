"""Plain tensor attributes (issue 26: VanillaRNN's `self.hidden`): captured as placeholders of kind
"attr", read by the candidate from its own module at every call (never baked into the source), and
written back where the reference's forward rebinds or writes into them (agent/proposers/lowering/state.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from lowering_cases import module_of, ref

from agent.proposers.lowering import LoweringError, lower_source
from agent.proposers.lowering.capture import Placeholder, capture
from agent.proposers.lowering.state import StateWrite

# the hidden state is drawn in __init__ and read (moved to the input's device) in forward, as VanillaRNN does
HIDDEN = ref(
    """
    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        return torch.tanh(x @ self.w + self.hidden) * 2.0
    """,
    "[torch.randn(B, N)]",
    init="self.w = nn.Parameter(torch.randn(N, H) * 0.3)\nself.hidden = torch.randn(B, H)",
    consts="B = 3\nN = 7\nH = 5\n",
)

# an RNN cell that keeps its hidden state between calls: each call reads what the last one wrote
CELL = ref(
    """
    def forward(self, x):
        self.h = torch.tanh(x @ self.w + self.h)
        return self.h * 3.0
    """,
    "[torch.randn(B, N)]",
    init="self.w = nn.Parameter(torch.randn(N, H) * 0.3)\nself.h = torch.randn(B, H)",
    consts="B = 3\nN = 7\nH = 5\n",
)

# a running sum written into the attribute's own tensor
ACCUMULATE = ref(
    """
    def forward(self, x):
        self.acc.mul_(0.5).add_(x.sum(dim=0))
        return x - self.acc
    """,
    "[torch.randn(B, H)]",
    init="self.acc = torch.zeros(H)",
    consts="B = 4\nH = 6\n",
)


def built(source: str, seed: int, candidate: str | None = None):
    """(reference, ModelNew) each built after the same seed, as the harness builds them; ModelNew gets
    the reference's state dict (which holds no plain tensor attribute: each draws its own)."""
    low = lower_source(source, "/tmp/state_case.py")
    cand = candidate or low.render(low.default_config())
    ref_mod, cand_mod = module_of(source, "reference"), module_of(cand, "candidate")
    torch.manual_seed(seed)
    reference = ref_mod.Model(*ref_mod.get_init_inputs()).eval()
    torch.manual_seed(seed)
    model = cand_mod.ModelNew(*ref_mod.get_init_inputs()).eval()
    model.load_state_dict(reference.state_dict())
    return reference, model, ref_mod


def calls(reference, model, inputs: list, n: int = 1) -> list[torch.Tensor]:
    """`n` calls of both on the same inputs; each candidate output checked against the reference's."""
    outs = []
    with torch.no_grad():
        for _ in range(n):
            expected, got = reference(*inputs), model(*inputs)
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
            outs.append(got)
    return outs


def test_a_plain_tensor_attribute_is_an_attr_placeholder_and_a_read_only_one_writes_nothing():
    c = capture(HIDDEN, "/tmp/hidden.py")
    assert c.placeholders[-1] == Placeholder(kind="attr", name="hidden", dtype=torch.float32)
    assert [p.kind for p in c.placeholders] == ["param", "input", "attr"]
    assert c.writes == () and c.n_outputs == 1  # `self.hidden = self.hidden.to(x.device)` changes nothing


def test_an_attribute_the_forward_never_reads_is_not_read_by_the_candidate():
    source = HIDDEN.replace(
        "self.hidden = torch.randn(B, H)", "self.hidden = torch.randn(B, H)\n        self.spare = torch.randn(9)"
    )
    assert [p.name for p in capture(source, "/tmp/spare.py").placeholders if p.kind == "attr"] == ["hidden", "spare"]
    low = lower_source(source, "/tmp/spare.py")
    cand = low.render(low.default_config())
    assert "self.spare" not in cand[cand.index("    def forward(") :]


def test_two_instances_with_different_hidden_states_each_match_their_reference():
    outs = []
    for seed in (0, 1):
        reference, model, mod = built(HIDDEN, seed)
        assert torch.equal(model.hidden, reference.hidden)  # drawn by the copied __init__ after the same seed
        torch.manual_seed(7)
        (out,) = calls(reference, model, mod.get_inputs())
        outs.append(out)
    assert not torch.allclose(outs[0], outs[1])  # same input, other instance: the attribute decides the output


def test_the_attribute_is_read_at_call_time_not_baked_into_the_source():
    source = HIDDEN.replace("self.hidden = torch.randn(B, H)", "self.hidden = torch.full((B, H), 0.8125)")
    low = lower_source(source, "/tmp/hidden_full.py")
    cand = low.render(low.default_config())
    forward = cand[cand.index("    def forward(") :]
    assert "0.8125" not in forward  # only the copied __init__ draws the value
    assert re.search(r"a_\d+ = self\.hidden\.to\(in_\d+\.device\)\.contiguous\(\)", cand)
    reference, model, _ = built(source, 0, candidate=cand)
    for value in (-3.0, 0.25):  # another value set on both modules after they were built
        reference.hidden = torch.full((3, 5), value)
        model.hidden = torch.full((3, 5), value)
        x = torch.randn(3, 7)
        (out,) = calls(reference, model, [x])
        expected = torch.tanh(x @ reference.w.detach() + value) * 2.0
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_an_attribute_of_another_size_than_the_inputs_is_refused_in_one_line():
    _, model, _ = built(HIDDEN, 0)
    model.hidden = torch.randn(4, 5)  # batch 4 against inputs of batch 3
    with pytest.raises(ValueError, match=r"self\.hidden must have the size s\d+ = 3 of the tensors it meets; got 4"):
        model(torch.randn(3, 7))


def test_a_forward_that_rebinds_its_state_writes_it_back_so_every_later_call_matches():
    c = capture(CELL, "/tmp/cell.py")
    assert c.writes == (StateWrite("h", "assign"),) and c.n_outputs == 1
    reference, model, mod = built(CELL, 0)
    torch.manual_seed(3)
    x = mod.get_inputs()[0]
    outs = calls(reference, model, [x], n=3)
    torch.testing.assert_close(model.h, reference.h, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(outs[0], outs[1])  # the same input twice: the second call read the new state


def test_an_attribute_written_in_place_is_copied_back_into_the_module_tensor():
    c = capture(ACCUMULATE, "/tmp/acc.py")
    assert c.writes == (StateWrite("acc", "copy"),)
    reference, model, _ = built(ACCUMULATE, 0)
    acc = model.acc
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    calls(reference, model, [x], n=2)
    assert model.acc is acc  # the module's own tensor, as the reference's `mul_`/`add_` leave it
    expected = 0.5 * x.sum(dim=0) + x.sum(dim=0)  # 0 -> s -> s/2 + s
    torch.testing.assert_close(model.acc, expected)
    torch.testing.assert_close(reference.acc, expected)


def test_copying_an_input_into_the_whole_attribute_is_a_broadcast():
    copy_in = ref(
        """
        def forward(self, x, h0):
            self.h.copy_(h0)
            return x + self.h
        """,
        "[torch.randn(B, H), torch.randn(1, H)]",  # h0 broadcast over the batch, as copy_ does
        init="self.h = torch.zeros(B, H)",
        consts="B = 3\nH = 4\n",
    )
    c = capture(copy_in, "/tmp/copy_in.py")
    assert "aten.copy.default" not in {str(n.target) for n in c.gm.graph.nodes if n.op == "call_function"}
    assert c.writes == (StateWrite("h", "copy"),)  # written into the module's tensor, as copy_ does
    reference, model, mod = built(copy_in, 0)
    torch.manual_seed(1)
    calls(reference, model, mod.get_inputs(), n=2)
    torch.testing.assert_close(model.h, reference.h)


def test_a_slice_assignment_into_an_attribute_is_copied_back_and_the_next_call_sees_it():
    # a rolling window kept in the module: shift left by one column, write the newest sample at the end
    window = ref(
        """
        def forward(self, x):
            self.buf[:, :-1] = self.buf[:, 1:].clone()
            self.buf[:, -1] = x
            return self.buf.mean(dim=1) + x
        """,
        "[torch.randn(B)]",
        init="self.buf = torch.zeros(B, W)",
        consts="B = 3\nW = 4\n",
    )
    c = capture(window, "/tmp/window.py")
    assert c.writes == (StateWrite("buf", "copy"),)
    reference, model, _ = built(window, 0)
    buf = model.buf
    inputs = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, 0.5, 4.0]), torch.tensor([2.0, 2.0, -2.0])]
    for x in inputs:
        calls(reference, model, [x])
    assert model.buf is buf  # written into the module's own tensor, as the reference's slice assignments do
    torch.testing.assert_close(model.buf, reference.buf)
    torch.testing.assert_close(model.buf[:, 1:], torch.stack(inputs, dim=1))


def test_a_tensor_attribute_the_forward_creates_is_set_on_the_candidate_too():
    source = ref("def forward(self, x):\n    self.cache = x * 2\n    return x + 1\n", "[torch.randn(2, 4)]")
    c = capture(source, "/tmp/cache.py")
    assert c.writes == (StateWrite("cache", "assign"),) and not any(p.kind == "attr" for p in c.placeholders)
    reference, model, _ = built(source, 0)
    x = torch.randn(2, 4)
    calls(reference, model, [x])
    torch.testing.assert_close(model.cache, x * 2)


@pytest.mark.parametrize(
    "forward,init,message",
    [
        (
            "def forward(self, x):\n    y = x + self.h\n    self.h = None\n    return y\n",
            "self.h = torch.zeros(4)",
            r"forward turns the tensor attribute self\.h into a NoneType",
        ),
        (
            "def forward(self, x):\n    return x + self.hs[0]\n",
            "self.hs = [torch.zeros(4)]",
            r"none of an input, a parameter, a buffer or a plain tensor attribute",
        ),
    ],
)
def test_state_the_lowering_cannot_keep_is_refused_with_its_reason(forward, init, message):
    with pytest.raises(LoweringError, match=message):
        capture(ref(forward, "[torch.randn(2, 4)]", init=init), "/tmp/refused.py")


KB_DEV = Path(
    os.environ.get("KSCOUT_KERNELBENCH_DEV", Path(__file__).resolve().parents[1] / ".." / "shared" / "kernelbench-dev")
)
RNN = KB_DEV / "level3" / "33_VanillaRNN.py"


@pytest.mark.skipif(not RNN.exists(), reason="the KernelBench dev set is not beside the repo")
def test_the_vanilla_rnn_dev_model_lowers_and_matches_at_small_sizes():
    source = RNN.read_text()
    small = {"batch_size": 4, "input_size": 24, "hidden_size": 20, "output_size": 12}
    for name, value in small.items():
        source, n = re.subn(rf"^{name} = \d+$", f"{name} = {value}", source, flags=re.M)
        assert n == 1, name
    c = capture(source, "/tmp/33_VanillaRNN.py")
    assert [p.name for p in c.placeholders if p.kind == "attr"] == ["hidden"]
    assert c.writes == (StateWrite("hidden", "assign"),)  # `self.hidden = self.tanh(...)` after the copy_
    for seed in (0, 1):
        reference, model, mod = built(source, seed)
        torch.manual_seed(10 + seed)
        calls(reference, model, mod.get_inputs(), n=2)
        torch.testing.assert_close(model.hidden, reference.hidden, atol=1e-5, rtol=1e-5)
