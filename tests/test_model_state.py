"""`kscout optimize-model` on a model with state (issue 26: VanillaRNN's `self.hidden`): a plain tensor
attribute is read by the assembled model from its own module at every call, and written back where the
model's forward rebinds it, so the assembled model matches the model call after call."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from agent.model import assemble, extract, graph, partition
from agent.proposers.lowering import lower_source
from agent.proposers.lowering.state import StateWrite
from evaluation.problem import exec_problem_source, init_inputs

RNN_CELL = """
import torch
import torch.nn as nn

batch_size = 3
input_size = 6
hidden_size = 8
output_size = 4


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden = torch.randn((batch_size, hidden_size))
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.h2o(self.hidden)


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, output_size]
"""


@pytest.fixture(autouse=True)
def no_vectors(monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")


def assembled(tmp_path: Path):
    """(traced model, regions, the assembled source) with each region's lowered seed as its winner."""
    path = tmp_path / "rnn_cell.py"
    path.write_text(RNN_CELL)
    traced = graph.trace(RNN_CELL, str(path))
    graph.run(traced, record=True)
    g = traced.captured.gm.graph
    regions = partition.partition(g, traced.meta, partition.param_placeholders(traced.captured))
    free = partition.free_nodes(g, traced.meta)
    winners = {}
    for r in regions:
        e = extract.extract(r, traced.meta, free, "rnn_cell.py", tmp_path / "regions")
        low = lower_source(e.source, e.path)
        source = low.render(low.default_config())
        winners[r.name] = assemble.Winner(r.name, source, ("cpu",), e.dtype, e.input_shapes)
    return traced, regions, assemble.assemble(traced, regions, free, winners, "rnn cell"), str(path)


def test_the_traced_graph_reads_a_copy_of_the_attribute_and_returns_its_new_value(tmp_path):
    path = tmp_path / "rnn_cell.py"
    path.write_text(RNN_CELL)
    traced = graph.trace(RNN_CELL, str(path))
    (i,) = [k for k, ph in enumerate(traced.captured.placeholders) if ph.kind == "attr"]
    assert traced.args[i] is not traced.model.hidden and torch.equal(traced.args[i], traced.model.hidden)
    assert traced.captured.writes == (StateWrite("hidden", "assign"),)
    out, new_hidden = graph.run(traced)
    with torch.no_grad():
        expected = traced.model(*traced.inputs)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(new_hidden, traced.model.hidden)


def test_the_assembled_model_keeps_the_hidden_state_call_after_call_for_two_instances(tmp_path):
    traced, regions, source, path = assembled(tmp_path)
    forward = source[source.index("    def forward(") :]
    assert "self.hidden.to(x.device)" in forward and "self.hidden = o_r" in forward
    module = types.ModuleType("assembled")
    exec(compile(source, "assembled.py", "exec"), module.__dict__)
    problem = exec_problem_source(RNN_CELL, path)
    firsts = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        reference = problem.Model(*init_inputs(problem)).eval()
        torch.manual_seed(seed)
        model = module.ModelNew(*init_inputs(problem)).eval()
        model.load_state_dict(reference.state_dict())
        launches: list[str] = []
        for r in regions:
            getattr(model, f"_kscout_{r.name}").register_forward_hook(lambda *a, name=r.name: launches.append(name))
        x = torch.rand(3, 6, generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            for call in range(3):  # the same input: each call differs only by the state the last one left
                expected, got = reference(x), model(x)
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(model.hidden, reference.hidden, atol=1e-5, rtol=1e-5)
                if call == 0:
                    firsts.append(got)
        assert launches == [r.name for r in regions] * 3  # every region took its kernel on every call
    assert not torch.allclose(firsts[0], firsts[1])  # the two instances' hidden states gave different outputs
