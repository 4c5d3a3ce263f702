"""Writes into views: a slice or select assignment (`y[:, :c] = z`, `x[..., i] = v`) and an in-place op on
a view (`z[:, 0].relu_()`). A forward with such a write is traced a second time through functionalization
(capture._functionalize), so each write becomes an out-of-place value scattered into its base
(slice_scatter; select_scatter, decomposed to `where`), and every later read of the base sees it. Each
case is lowered, rendered, run under the interpreter and compared with the reference."""

from __future__ import annotations

import textwrap

import pytest
import torch
from lowering_cases import assert_close, module_of, ref, run_lowered

from agent.proposers.lowering import LoweringError, lower_source
from agent.proposers.lowering.capture import _out_of_place, capture


def forward_of(body: str, inputs: str, args: str = "x, y") -> str:
    return ref(f"def forward(self, {args}):\n{textwrap.indent(textwrap.dedent(body), '    ')}\n", inputs)


def ops_of(source: str) -> set[str]:
    c = capture(source, "/tmp/views.py")
    return {str(n.target) for n in c.gm.graph.nodes if n.op == "call_function"}


def lowered_matches(source: str, path: str = "/tmp/views.py") -> str:
    cand, out, expected, flagged = run_lowered(source, path=path)
    assert flagged == {}  # no torch compute op in the candidate: the kernels did the work
    assert_close(out, expected)
    return cand


# EfficientNet-style: a fresh buffer filled by slice assignments, read afterwards
FILLED = forward_of(
    """
    out = x.new_zeros(x.shape[0], x.shape[1] + y.shape[1], x.shape[2])
    out[:, : x.shape[1]] = torch.relu(x)
    out[:, x.shape[1] :] = y * 2.0
    return out + 1.0
    """,
    "[torch.randn(2, 3, 5), torch.randn(2, 4, 5)]",
)


def test_a_slice_assignment_into_a_fresh_buffer_lowers_and_matches():
    ops = ops_of(FILLED)
    assert "aten.slice_scatter.default" in ops
    assert not {"aten.copy.default", "aten.copy_.default"} & ops  # every copy became a cast and broadcast
    lowered_matches(FILLED, "/tmp/filled.py")


def test_an_in_place_activation_and_slice_assignments_in_one_forward_lower_and_match():
    # EfficientNet's blocks: BatchNorm, ReLU6(inplace=True), then writes into slices of a fresh buffer
    source = ref(
        """
        def forward(self, x, y):
            h = self.act(self.bn(x))
            out = h.new_zeros(h.shape[0], h.shape[1] + y.shape[1], h.shape[2], h.shape[3])
            out[:, : h.shape[1]] = h
            out[:, h.shape[1] :] = y
            out[:, :, 0].relu_()
            return self.act(out)
        """,
        "[torch.randn(2, 4, 3, 5), torch.randn(2, 3, 3, 5) * 4.0]",
        init="self.bn = nn.BatchNorm2d(4)\nself.act = nn.ReLU6(inplace=True)",
    )
    lowered_matches(source, "/tmp/bn_relu6_slices.py")


def test_a_slice_assignment_after_a_convolution_and_pooling_keeps_their_symbolic_settings():
    # the second trace (functionalization) runs over the custom conv and pool ops: their settings stay symbols
    source = ref(
        """
        def forward(self, x):
            h = self.pool(self.conv(x))
            out = x.new_zeros(h.shape[0], h.shape[1] * 2, h.shape[2], h.shape[3])
            out[:, : h.shape[1]] = h
            out[:, h.shape[1] :] = torch.sigmoid(h)
            return out
        """,
        "[torch.randn(2, 3, 8, 8)]",
        init="self.conv = nn.Conv2d(3, 4, 3, padding=1)\nself.pool = nn.MaxPool2d(2)",
    )
    c = capture(source, "/tmp/conv_slices.py")
    ops = {str(n.target) for n in c.gm.graph.nodes if n.op == "call_function"}
    assert {"kscout.conv.default", "kscout.pool.default", "aten.slice_scatter.default"} <= ops
    bound = set(lower_source(source, "/tmp/conv_slices.py").program.bindings.values())
    assert {"int(self.conv.padding[0]) + 2", "int(self.pool.kernel_size) + 2"} <= bound


def test_a_forward_without_writes_into_views_is_traced_once(monkeypatch):
    # an in-place activation writes into a whole fresh tensor: no second (functionalizing) trace
    import agent.proposers.lowering.capture as capture_module

    def second_trace(gm, name):
        raise AssertionError("functionalized a graph with no write into a view")

    monkeypatch.setattr(capture_module, "_functionalize", second_trace)
    source = ref(
        "def forward(self, x):\n    return self.act(self.bn(x)) * 2.0\n",
        "[torch.randn(2, 4, 3, 5)]",
        init="self.bn = nn.BatchNorm2d(4)\nself.act = nn.ReLU6(inplace=True)",
    )
    ops = ops_of(source)
    assert "aten.clamp.default" in ops and not {"aten.copy.default", "aten.copy_.default"} & ops


def test_one_candidate_serves_other_sizes_of_a_slice_assignment():
    cand, _, _, _ = run_lowered(FILLED, path="/tmp/filled.py")
    other = FILLED.replace("torch.randn(2, 3, 5), torch.randn(2, 4, 5)", "torch.randn(3, 6, 2), torch.randn(3, 1, 2)")
    _, out, expected, flagged = run_lowered(other, candidate=cand, path="/tmp/filled.py")
    assert flagged == {}
    assert_close(out, expected)


def test_an_in_place_op_on_a_view_is_seen_by_its_base():
    # the case capture used to lower wrong (max error 3.0 on a 4x3 input): the relu must reach z's column 0
    source = forward_of("z = x.clone()\nz[:, 0].relu_()\nreturn z * 2", "[torch.randn(4, 3), torch.randn(4, 3)]")
    cand = lowered_matches(source, "/tmp/relu_view.py")
    x = torch.tensor([[-1.5, -2.0, 3.0], [1.0, -1.0, -0.5], [-3.0, 2.0, 1.0], [0.5, 0.25, -4.0]])
    with torch.no_grad():
        got = module_of(cand, "candidate").ModelNew().eval()(x, x)
    expected = x * 2
    expected[:, 0] = torch.relu(x[:, 0]) * 2
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    "body",
    [
        "z = x.clone()\nz[..., 1] = y[..., 0]\nreturn z",  # a select assignment
        "z = x.clone()\nz[:, -1] = y.sum(dim=1)\nreturn z.softmax(dim=1)",  # negative index, a reduction on each side
        "z = torch.zeros_like(x)\nz[2] = y[0] + 1.0\nreturn z - x",  # a row of dim 0
    ],
)
def test_a_select_assignment_lowers_and_matches(body):
    lowered_matches(forward_of(body, "[torch.randn(4, 5), torch.randn(4, 5)]"), "/tmp/select_assign.py")


@pytest.mark.parametrize(
    "body",
    [
        "z = x.clone()\nz[:, 1::2] = y[:, 1::2] * 3.0\nreturn z",  # a strided slice
        "z = x.clone()\nz[1:3, 2:] = 0.5\nreturn z",  # a number into a slice of two dims
        "z = x.clone()\nz[:, :2] *= y[:, :2]\nreturn z",  # an augmented assignment into a slice
        "z = x.clone()\nv = z[:, :2]\nz.copy_(y)\nreturn v + 1",  # a view taken before a whole copy sees it
        "z = x.clone()\nz.view(-1)[:4].mul_(2)\nreturn z",  # through a reshape
        "z = x.clone()\nz.t()[0].add_(1)\nreturn z",  # through a transpose
        "z = x.clone()\nz.chunk(2, dim=1)[1].neg_()\nreturn z",  # a piece of a split
        "x[:, 0].mul_(2)\nreturn x + y",  # a view of an input
    ],
)
def test_a_write_through_a_view_reaches_its_base(body):
    lowered_matches(forward_of(body, "[torch.randn(4, 6), torch.randn(4, 6)]"), "/tmp/view_write.py")


@pytest.mark.parametrize(
    "body,op",
    [
        ("z = x.clone()\nz[z > 0] = 0.0\nreturn z", "index_put"),  # a boolean-mask assignment
        ("z = x.clone()\nz.diagonal().fill_(1.0)\nreturn z", "as_strided_scatter"),  # diagonal: an as_strided view
    ],
)
def test_a_write_no_schedule_lowers_is_refused_in_one_line(body, op):
    with pytest.raises(LoweringError, match=f"no schedule lowers .*{op}") as info:
        lower_source(forward_of(body, "[torch.randn(4, 4), torch.randn(4, 4)]"), "/tmp/refused_write.py")
    assert "\n" not in str(info.value)


def test_an_in_place_op_on_a_view_left_unfunctionalized_is_refused_not_lowered_wrong():
    # an unfunctionalized graph: redirecting later uses of z to the relu would drop the write, so it refuses
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        z = x.clone()
        z[:, 0].relu_()
        return z * 2

    gm = make_fx(f)(torch.randn(4, 3))
    with pytest.raises(
        LoweringError, match=r"in-place op aten\.relu_\.default writes into a tensor that shares memory"
    ):
        _out_of_place(gm)
