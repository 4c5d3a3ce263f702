"""Identical regions are one problem (issue 26): a deep MLP's hidden layers run the same ops on the same
shapes, their weights being inputs, so `optimize-model` searches them once, by their summed share of the
time, and runs the winner in every one of them. Everything runs on the CPU in Triton's interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agent.model import assemble, flow
from store import Store

DEEP = """
import torch
import torch.nn as nn

batch_size = 4
in_features = 12
hidden = 16
out_features = 8
depth = 4


class Model(nn.Module):
    def __init__(self, in_features, hidden, out_features, depth):
        super().__init__()
        layers = [nn.Linear(in_features, hidden), nn.ReLU()]
        for _ in range(depth):
            layers += [nn.Linear(hidden, hidden), nn.ReLU()]
        layers.append(nn.Linear(hidden, out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden, out_features, depth]
"""


@pytest.fixture(autouse=True)
def no_vectors(monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")


def deep(tmp_path: Path) -> str:
    path = tmp_path / "deep.py"
    path.write_text(DEEP)
    return str(path)


def test_the_hidden_layers_of_a_deep_mlp_are_one_problem_searched_once_with_their_summed_budget(tmp_path):
    plan = flow.prepare(deep(tmp_path), budget=12, min_share=0.0, work=tmp_path / "work")
    rows = list(plan.rows.values())
    # r0: in -> hidden, r1-r4: hidden -> hidden (the same problem), r5: hidden -> out
    assert [r.same_as for r in rows] == [None, None, "r1", "r1", "r1", None]
    assert all(r.state == "searched" for r in rows)
    assert [r.budget for r in rows[2:5]] == [0, 0, 0]  # a member's evaluations are its lead's
    shares = {r.name: r.share for r in rows}
    group = sum(shares[f"r{i}"] for i in range(1, 5))
    lead_budget = rows[1].budget
    assert lead_budget == max(1, round(12 * group / (shares["r0"] + group + shares["r5"])))
    assert lead_budget > rows[0].budget  # four layers' time, one search: the group gets the larger share
    assert flow.problem_key(plan.extracted["r1"].source) == flow.problem_key(plan.extracted["r4"].source)
    assert flow.problem_key(plan.extracted["r0"].source) != flow.problem_key(plan.extracted["r1"].source)


def test_a_group_is_hot_by_its_summed_share_where_each_member_alone_would_be_cold(tmp_path, monkeypatch):
    plan = flow.prepare(deep(tmp_path), budget=8, min_share=0.0, work=tmp_path / "probe")
    # the three plans share one measured profile: CPU times move between profiles, and the cut is
    # chosen between this profile's shares
    measured = plan.profile
    monkeypatch.setattr(flow.profile, "profile", lambda *a, **k: measured)
    alone = max(plan.rows[f"r{i}"].share for i in range(1, 5))
    together = sum(plan.rows[f"r{i}"].share for i in range(1, 5))
    cut = (alone + together) / 2  # above any one hidden layer's share, below the four together
    plan = flow.prepare(deep(tmp_path), budget=8, min_share=cut, work=tmp_path / "work")
    assert {plan.rows[f"r{i}"].state for i in range(1, 5)} == {"searched"}
    plan = flow.prepare(deep(tmp_path), budget=8, min_share=min(together * 1.5, 0.99), work=tmp_path / "w2")
    cold = [plan.rows[f"r{i}"] for i in range(1, 5)]
    assert {r.state for r in cold} == {"cold"}
    assert all("4 regions of one problem together" in (r.reason or "") for r in cold)


def test_one_search_serves_every_identical_region_and_the_assembly_holds_its_kernel_once(tmp_path):
    with Store.open(home=tmp_path / "store") as st:
        report = flow.optimize_model(deep(tmp_path), st, work=tmp_path / "work", budget=3, min_share=0.0)
        runs = {r.run_id for r in report.regions}
        region_runs = [r.run_id for r in st.list_runs() if not r.op_family.startswith("model:")]
    assert report.verdict == "passed", report.verdict_message
    rows = {r.name: r for r in report.regions}
    assert len(runs) == 3  # r0, the r1 group, r5
    for member in ("r2", "r3", "r4"):
        assert rows[member].run_id == rows["r1"].run_id and rows[member].kernel == rows["r1"].kernel
        assert rows[member].judged == rows["r1"].judged == "passed"
    assert sorted(region_runs) == sorted(runs)  # three searches in the store, not six
    assert Path(report.report_path).read_text().count("searched (with r1)") == 3  # the HTML table says so
    source = Path(report.assembled_path).read_text()
    assert source.count("class _r1_ModelNew") == 1 and "class _r2_ModelNew" not in source
    for i in range(1, 5):  # every layer dispatches to the group's kernel, each with its own reference path
        assert f"self._kscout_r{i} = _r1_ModelNew()" in source
        assert f"_kscout_region(self._kscout_r{i}, _r{i}_reference, _r{i}_SPEC" in source


def test_an_assembly_with_a_shared_winner_computes_the_reference_model(tmp_path):
    from tests.test_optimize_model import built, lowered_winners

    plan = flow.prepare(deep(tmp_path), budget=4, min_share=0.0, work=tmp_path / "work")
    leads = [r for r in plan.regions if plan.rows[r.name].same_as is None]
    won = lowered_winners(plan.traced, leads, plan.free, tmp_path / "seeds")
    for name, row in plan.rows.items():
        if row.same_as:  # at the member's own sizes, as flow.winners takes it
            won[name] = flow.member_winner(plan, won[row.same_as], name)
    source = assemble.assemble(plan.traced, plan.regions, plan.free, won, "deep")
    model = built(source, plan.traced, plan.path)
    launches = []
    for r in plan.regions:  # the regions that took a kernel, not their reference ops
        getattr(model, f"_kscout_{r.name}").register_forward_hook(lambda *a, name=r.name: launches.append(name))
    x = torch.randn(4, 12)
    with torch.no_grad():
        torch.testing.assert_close(model(x), plan.traced.model(x), atol=1e-5, rtol=1e-5)
    assert launches == [f"r{i}" for i in range(6)]
