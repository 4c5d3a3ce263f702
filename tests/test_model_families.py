"""Regions that differ only in their sizes are one problem with a case per size (issue 26): a DenseNet
runs the same batch norm and ReLU before every dense layer at a channel count that grows layer by
layer, each under 5% of the time alone. Here a widening MLP: three linear+ReLU layers at three sizes
are one search, hot by their summed share, whose kernel each layer's dispatch takes at its own sizes
only. Everything runs on the CPU in Triton's interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import evaluation
from agent.model import assemble, flow

WIDENING = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 24)
        self.b = nn.Linear(24, 24)
        self.c = nn.Linear(24, 32)
        self.out = nn.Linear(32, 8)

    def forward(self, x):
        x = torch.relu(self.a(x))
        x = torch.relu(self.b(x))
        x = torch.relu(self.c(x))
        return self.out(x)


def get_inputs():
    return [torch.rand(4, 16)]  # never negative, as the ReLU outputs the later layers read


def get_init_inputs():
    return []
"""


@pytest.fixture(autouse=True)
def no_vectors(monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")


def widening(tmp_path: Path) -> str:
    path = tmp_path / "widening.py"
    path.write_text(WIDENING)
    return str(path)


def test_layers_that_differ_only_in_sizes_are_one_problem_with_a_case_each(tmp_path):
    plan = flow.prepare(widening(tmp_path), budget=12, min_share=0.0, work=tmp_path / "work")
    rows = plan.rows
    family = ["r0", "r1", "r2"]
    leads = [r for r in family if rows[r].same_as is None]
    assert len(leads) == 1  # the family's largest share leads; which one that is, the CPU profile decides
    lead = leads[0]
    assert all(rows[r].same_as == lead for r in family if r != lead)
    assert rows["r3"].same_as is None  # no ReLU: another problem
    assert [rows[r].budget for r in family if r != lead] == [0, 0]
    group = sum(rows[r].share for r in family)
    assert rows[lead].budget == max(1, round(12 * group / (group + rows["r3"].share)))
    # the lead's file declares each member's sizes, its own first (its constants stay its defaults)
    cases = evaluation.load_problem(plan.extracted[lead].path, "cpu").shape_cases
    sizes = [c.params for c in cases]
    assert all("timed" in c.tags for c in cases)
    # addmm(bias, x, weight.t()): bias n, x 4 x k, weight n x k, for (k, n) = (16, 24), (24, 24), (24, 32)
    assert sorted(sorted(p.values()) for p in sizes) == [[4, 16, 16, 24, 24], [4, 24, 24, 24, 24], [4, 24, 24, 32, 32]]
    assert sizes[0] == {
        f"S{i}_{d}": s for i, shape in enumerate(plan.extracted[lead].input_shapes) for d, s in enumerate(shape)
    }


def test_a_problem_beyond_its_timed_cases_checks_the_rest_without_timing_them(tmp_path, monkeypatch):
    monkeypatch.setattr(flow, "TIMED_CASES", 1)
    plan = flow.prepare(widening(tmp_path), budget=4, min_share=0.0, work=tmp_path / "work")
    lead = next(r for r in ("r0", "r1", "r2") if plan.rows[r].same_as is None)
    cases = evaluation.load_problem(plan.extracted[lead].path, "cpu").shape_cases
    assert [("timed" in c.tags) for c in cases] == [True, False, False]


def test_each_member_takes_the_family_kernel_at_its_own_sizes_and_the_model_is_unchanged(tmp_path):
    from tests.test_optimize_model import built, lowered_winners

    plan = flow.prepare(widening(tmp_path), budget=4, min_share=0.0, work=tmp_path / "work")
    leads = [r for r in plan.regions if plan.rows[r.name].same_as is None]
    won = lowered_winners(plan.traced, leads, plan.free, tmp_path / "seeds")
    for name, row in plan.rows.items():
        if row.same_as:
            won[name] = flow.member_winner(plan, won[row.same_as], name)
    source = assemble.assemble(plan.traced, plan.regions, plan.free, won, "widening")
    lead = next(r for r in ("r0", "r1", "r2") if plan.rows[r].same_as is None)
    assert source.count(f"class _{lead}_ModelNew") == 1  # one kernel source for the family
    for r in ("r0", "r1", "r2"):
        spec = source.split(f"_{r}_SPEC = ")[1].split("\n")[0]
        k, n = {"r0": (16, 24), "r1": (24, 24), "r2": (24, 32)}[r]
        # the member's own sizes, exactly: never a range that would take sizes nobody proved
        assert f"{{'min': {k}, 'max': {k}," in spec and f"{{'min': {n}, 'max': {n}," in spec
    model = built(source, plan.traced, plan.path)
    launches = []
    for r in plan.regions:
        getattr(model, f"_kscout_{r.name}").register_forward_hook(lambda *a, name=r.name: launches.append(name))
    x = torch.rand(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(model(x), plan.traced.model(x), atol=1e-5, rtol=1e-5)
    assert launches == ["r0", "r1", "r2", "r3"]  # every layer ran a kernel, none fell back to its reference


@pytest.mark.slow
def test_one_search_over_the_family_passes_every_size_and_the_model_end_to_end(tmp_path):
    from store import Store

    with Store.open(home=tmp_path / "store") as st:
        report = flow.optimize_model(widening(tmp_path), st, work=tmp_path / "work", budget=3, min_share=0.0)
    assert report.verdict == "passed", report.verdict_message
    rows = {r.name: r for r in report.regions}
    lead = next(r for r in ("r0", "r1", "r2") if rows[r].same_as is None)
    assert len({rows[r].run_id for r in ("r0", "r1", "r2")}) == 1  # one search for the three layers
    assert rows["r3"].run_id != rows[lead].run_id
    for r in ("r0", "r1", "r2"):  # the family's kernel, judged on all three sizes, runs in every member
        assert rows[r].kernel == rows[lead].kernel is not None
        assert rows[r].judged == "passed"
    source = Path(report.assembled_path).read_text()
    assert source.count(f"class _{lead}_ModelNew") == 1


def test_the_survey_counts_a_family_as_one_search(tmp_path):
    from agent.model.survey import survey_one

    row = survey_one(widening(tmp_path))
    assert row.status == "taken" and row.regions == 4
    # the three widening layers (three quarters of the contractions' time) are hot as one search; the
    # last layer is hot or cold by its own share, one search or none
    assert row.hot - row.searches == 2


def test_a_member_row_quotes_its_own_timed_case_and_an_untimed_one_the_family_geomean():
    from evaluation.records import Baseline, EvalResult, Speedup, Status, TimedCase
    from tests.test_speedup_definition import FP, STATS

    def case(width, ratio, ms):
        stats = STATS.model_copy(update={"latency_ms_p50": ms})
        return TimedCase(
            case_id=f"w{width}",
            params={"S0_0": 4, "S0_1": width},
            dtype="float32",
            candidate=stats,
            baselines=(Baseline(name="eager", timing=STATS),),
            speedups=(Speedup(baseline="eager", ratio=ratio, ratio_low=ratio, ratio_high=ratio, significant=True),),
        )

    res = EvalResult(
        status=Status.passed,
        candidate_sha256="x",
        problem_id="p",
        problem_name="r1",
        device="cuda",
        timing=(case(16, 2.0, 0.5), case(24, 0.5, 2.0)),
        fingerprint=FP,
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
    )
    assert flow.region_judged(res, ((4, 24),)) == {"judged": "passed", "speedup": 0.5, "kernel_us": 2000.0}
    assert flow.region_judged(res, ((4, 16),)) == {"judged": "passed", "speedup": 2.0, "kernel_us": 500.0}
    untimed = flow.region_judged(res, ((4, 32),))  # checked, not timed: the family's geomean over its timed cases
    assert untimed["speedup"] == pytest.approx(1.0) and untimed["kernel_us"] == pytest.approx(1000.0)
    failed = res.model_copy(update={"status": Status.incorrect})
    assert flow.region_judged(failed, ((4, 16),)) == {"judged": "incorrect", "speedup": None, "kernel_us": None}
