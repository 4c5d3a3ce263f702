"""`kscout optimize-model` on the CPU (issue 26, item 1): a model profiled, cut into regions, each region a
problem with its real shapes, the winners assembled into one ModelNew that the evaluator judges end to end.

Models are tiny KernelBench files written into tmp_path; everything runs in Triton's interpreter, so no
speed is claimed (the report says "not measured").
"""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest
import torch

import evaluation
from agent.cli import main
from agent.model import assemble, extract, flow, graph, partition
from agent.proposers.lowering import lower_source
from store import Store

MLP = """
import torch
import torch.nn as nn

batch_size = 4
in_features = 16
hidden = 32
out_features = 8


class Model(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, out_features))

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden, out_features]
"""

BLOCK = """
import torch
import torch.nn as nn

batch_size = 2
channels = 4
out_channels = 8
size = 6


class Model(nn.Module):
    def __init__(self, channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, out_channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(out_channels)
        self.gn = nn.GroupNorm(2, out_channels)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.gn(y) * 2.0


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return [channels, out_channels]
"""


@pytest.fixture(autouse=True)
def no_vectors(monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def cut(path: str):
    traced = graph.trace(Path(path).read_text(), path)
    graph.run(traced, record=True)
    g = traced.captured.gm.graph
    regions = partition.partition(g, traced.meta, partition.param_placeholders(traced.captured))
    return traced, regions, partition.free_nodes(g, traced.meta)


def lowered_winners(traced, regions, free, folder: Path, mutate=None) -> dict:
    """Each region's seed candidate from the lowering, as if its search had picked it."""
    out = {}
    for r in regions:
        e = extract.extract(r, traced.meta, free, "m.py", folder)
        lw = lower_source(e.source, e.path)
        source = lw.render(lw.default_config())
        out[r.name] = assemble.Winner(r.name, mutate(source) if mutate else source, ("cpu",), e.dtype, e.input_shapes)
    return out


def built(source: str, traced, path: str) -> torch.nn.Module:
    """The assembled ModelNew with the reference model's weights, as the evaluator binds them."""
    from evaluation.problem import exec_problem_source, init_inputs

    module = types.ModuleType("assembled")
    exec(compile(source, "assembled.py", "exec"), module.__dict__)
    model = module.ModelNew(*init_inputs(exec_problem_source(Path(path).read_text(), path))).eval()
    model.load_state_dict(traced.model.state_dict())
    return model


def test_the_mlp_is_two_contraction_regions_each_with_its_epilogue(tmp_path):
    traced, regions, _ = cut(write(tmp_path, "mlp.py", MLP))
    assert [(r.name, r.kind, r.ops) for r in regions] == [
        ("r0", "contraction", ["addmm", "relu"]),
        ("r1", "contraction", ["addmm"]),
    ]
    assert [str(o) for o in regions[0].outputs] == ["relu"]
    assert regions[0].outputs[0] in regions[1].inputs


def test_a_conv_block_is_conv_with_batchnorm_and_relu_then_a_groupnorm_chain(tmp_path):
    _, regions, _ = cut(write(tmp_path, "block.py", BLOCK))
    assert [r.kind for r in regions] == ["contraction", "chain"]
    assert regions[0].ops[0] == "kscout::conv" and regions[0].ops[-1] == "relu"
    assert {"var_mean", "rsqrt", "mul"} <= set(regions[1].ops) and "kscout::conv" not in regions[1].ops


def test_profile_times_every_region_and_ranks_the_wider_matmul_first(tmp_path):
    traced, regions, _ = cut(write(tmp_path, "mlp.py", MLP.replace("hidden = 32", "hidden = 256")))
    prof = flow.profile.profile(traced, regions, "cpu", warmup=1, iters=5)
    assert prof.clock == "cpu" and prof.eager_us > 0
    assert all(prof.region_us[r.name] > 0 for r in regions)
    assert sum(prof.share(r.name) for r in regions) == pytest.approx(1.0)
    assert prof.graph_us >= sum(prof.region_us.values())


def test_extraction_writes_a_problem_with_the_real_shapes_and_dtype(tmp_path):
    traced, regions, free = cut(write(tmp_path, "mlp.py", MLP))
    e = extract.extract(regions[0], traced.meta, free, "mlp.py", tmp_path / "regions")
    assert e.input_shapes == ((32, 16), (32,), (4, 16)) and e.dtype == "float32"
    problem = evaluation.load_problem(e.path, "cpu")
    assert [c.params for c in problem.shape_cases] == [{"S0_0": 32, "S0_1": 16, "S1_0": 32, "S2_0": 4, "S2_1": 16}]
    assert problem.shape_cases[0].tags == ("timed",)
    e1 = extract.extract(regions[1], traced.meta, free, "mlp.py", tmp_path / "regions")
    assert e1.input_shapes == ((8, 32), (8,), (4, 32))
    assert "torch.rand((S2_0, S2_1)" in e1.source  # the ReLU's output was never negative in the run


@pytest.mark.parametrize("name,text", [("mlp.py", MLP), ("block.py", BLOCK)])
def test_the_assembled_model_computes_what_the_reference_does(tmp_path, name, text):
    path = write(tmp_path, name, text)
    traced, regions, free = cut(path)
    source = assemble.assemble(traced, regions, free, lowered_winners(traced, regions, free, tmp_path), "t")
    model = built(source, traced, path)
    launches = []
    for r in regions:  # count the regions that took their kernel, not the reference ops
        kernel = getattr(model, f"_kscout_{r.name}")
        kernel.register_forward_hook(lambda *a, name=r.name: launches.append(name))
    with torch.no_grad():
        expected = traced.model(*traced.inputs)
        got = model(*traced.inputs)
    assert launches == [r.name for r in regions]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_region_whose_inputs_differ_from_its_proven_shapes_takes_its_reference_ops(tmp_path):
    path = write(tmp_path, "mlp.py", MLP)
    traced, regions, free = cut(path)
    source = assemble.assemble(traced, regions, free, lowered_winners(traced, regions, free, tmp_path), "t")
    model = built(source, traced, path)
    launches = []
    model._kscout_r0.register_forward_hook(lambda *a: launches.append("r0"))
    x = torch.randn(5, 16)  # batch 5: the kernels were proven for batch 4 only
    with torch.no_grad():
        torch.testing.assert_close(model(x), traced.model(x), atol=1e-5, rtol=1e-5)
    assert launches == []


def test_the_whole_flow_passes_the_mlp_end_to_end_and_reports_every_region(tmp_path):
    path = write(tmp_path, "mlp.py", MLP)
    with Store.open(home=tmp_path / "store") as st:
        report = flow.optimize_model(path, st, work=tmp_path / "work", budget=2, min_share=0.0)
    assert report.verdict == "passed" and report.speedup is None
    assert [(r.name, r.state, r.judged, r.schedule) for r in report.regions] == [
        ("r0", "searched", "passed", "matmul"),
        ("r1", "searched", "passed", "matmul"),
    ]
    assert sum(r.budget for r in report.regions) >= 2 and all(r.speedup is None for r in report.regions)
    assert report.regions[0].input_shapes == ((32, 16), (32,), (4, 16))
    assembled = Path(report.assembled_path).read_text()
    assert "_kscout_region(self._kscout_r0" in assembled and "_kscout_region(self._kscout_r1" in assembled


def test_the_end_to_end_judge_refuses_an_assembly_with_a_wrong_kernel(tmp_path):
    path = write(tmp_path, "mlp.py", MLP)
    plan = flow.prepare(path, budget=2, min_share=0.0, work=tmp_path / "work")
    line = "acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)"
    won = lowered_winners(plan.traced, plan.regions, plan.free, tmp_path / "seeds")
    wrong = won["r1"].source.replace(line, "acc = tl.full([BLOCK_M, BLOCK_N], 0.5, dtype=tl.float32)")
    archs = assemble.proven_archs("cpu")  # as the evaluator's emulated target sees the tensors
    won = {
        "r0": dataclasses.replace(won["r0"], archs=archs),
        "r1": dataclasses.replace(won["r1"], archs=archs, source=wrong),
    }
    assert line in won["r0"].source and line not in won["r1"].source
    source = assemble.assemble(plan.traced, plan.regions, plan.free, won, "broken")
    report = flow.judge(plan, source, tmp_path / "work", winners_={"r1": won["r1"]})
    assert report.verdict == "incorrect"
    assert report.regions[1].judged == "incorrect"  # the region's own judge finds it too


def test_an_op_no_schedule_lowers_stays_a_listed_reference_region(tmp_path):
    text = MLP.replace("return self.net(x)", "return torch.sort(self.net(x), dim=-1).values")
    path = write(tmp_path, "sorted.py", text)
    plan = flow.prepare(path, budget=2, min_share=0.0, work=tmp_path / "work")
    rows = list(plan.rows.values())
    assert [(r.kind, r.state) for r in rows] == [
        ("contraction", "searched"),
        ("contraction", "searched"),
        ("reference", "reference"),
    ]
    assert rows[2].ops == ("sort",) and "no schedule lowers sort" in rows[2].reason and rows[2].budget == 0


def kscout(argv, capsys) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


def test_the_command_refuses_a_missing_file_in_one_line(tmp_path, capsys):
    code, err = kscout(["optimize-model", str(tmp_path / "nope.py"), "--device", "cpu"], capsys)
    assert code == 2 and err.strip().splitlines() == [f"kscout: error: model file not found: {tmp_path / 'nope.py'}"]


@pytest.mark.parametrize("text", ["x = (\n", "import torch\n\ndef get_inputs():\n    return []\n"])
def test_the_command_refuses_a_malformed_model_file(tmp_path, capsys, text):
    code, err = kscout(["optimize-model", write(tmp_path, "bad.py", text), "--device", "cpu"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("kscout: error:")


def test_a_run_where_no_region_takes_a_kernel_is_unchanged_and_each_region_says_why(tmp_path, capsys):
    """A time budget spent before any search starts: no region has a kernel, so nothing is assembled or
    judged (a ModelNew of reference ops would be refused for launching no Triton kernel, a verdict that
    blames kernels that do not exist); the verdict is `unchanged`, and each row says why."""
    path = write(tmp_path, "mlp.py", MLP)
    with Store.open(home=tmp_path / "store") as st:
        report = flow.optimize_model(path, st, work=tmp_path / "work", budget=2, min_share=0.0, minutes=0)
    assert (report.verdict, report.assembled_path, report.candidate_id) == ("unchanged", None, None)
    assert report.verdict_message.startswith("no region took a kernel (2 searched")
    assert [r.kernel for r in report.regions] == [None, None]
    for row in report.regions:
        assert row.reason == (
            "kept the reference ops: its search not started: the shared time budget was spent before it started"
        )
    assert "unchanged end to end" in Path(report.report_path).read_text()


def test_a_search_that_ran_and_passed_nothing_gives_its_counts_failures_and_stop():
    from agent.search.summary import FailureCount

    s = types.SimpleNamespace(
        evaluations=3,
        passed=0,
        failures=(FailureCount(status="crashed", error_class="AcceleratorError", count=3),),
        stop_reason="deadline",
    )
    assert flow.no_kernel_reason(s) == (
        "kept the reference ops: no kernel passed (3 evaluated, 0 passed; 3 crashed (AcceleratorError)); "
        "stopped: deadline"
    )
    s.passed, s.failures, s.stop_reason = 2, (), None
    assert flow.no_kernel_reason(s) == "kept the reference ops: no passing kernel was picked (3 evaluated, 2 passed)"
