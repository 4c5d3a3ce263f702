"""The assembled model as one artifact (issue 26, items 2-4): stored as one candidate of its own run,
promoted through the approval gate and rolled back as one, revalidated end to end, answered by the
knowledge store, and drawn in the HTML report's model view.

The flow runs once per module on a tiny MLP in Triton's interpreter (a real store, real evaluations); each
test works on its own copy of that store. GPU evidence cannot be produced here, so the one test that
promotes writes GPU evaluations as the evaluator's own records (tests/test_lifecycle_support.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from test_lifecycle_support import cpu_fp, gpu_candidate, write_deployment
from test_optimize_model import MLP
from test_report import CHROMIUM, _chromium

import evaluation
from agent.cli import main
from agent.lifecycle.gate import PromotionRefused
from agent.lifecycle.registry import deployed_entries, history, promote, rollback
from agent.lifecycle.revalidate import revalidate
from agent.model import flow, keep, page
from agent.model.records import ModelReport, RegionRow
from knowledge.aliases import model_ops
from knowledge.retrieve import ask
from store import Store
from store.records import PromotionState

MODEL = MLP  # a Sequential of Linear, ReLU, Linear: two contraction regions

FAMILY = "model:tinymlpblock"


@pytest.fixture(autouse=True)
def no_vectors(monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """One optimize-model run on the CPU: (folder holding the model, work and store; the report)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("KSCOUT_VECTORS", "off")
    try:
        root = tmp_path_factory.mktemp("model")
        path = root / "7_TinyMLPBlock.py"
        path.write_text(MODEL)
        with Store.open(home=root / "store") as st:
            report = flow.optimize_model(str(path), st, work=root / "work", budget=2, min_share=0.0)
    finally:
        mp.undo()
    return root, report


@pytest.fixture
def store(optimized, tmp_path):
    """A copy of the optimized store, so a test's promotions and revalidations stay its own."""
    root, _ = optimized
    shutil.copytree(root / "store", tmp_path / "store")
    with Store.open(home=tmp_path / "store") as st:
        yield st


def test_the_assembled_model_is_one_stored_candidate_with_its_judge_and_a_model_outcome(optimized, store):
    _, report = optimized
    assert report.verdict == "passed" and report.candidate_id and report.run_id
    run = store.get_run(report.run_id)
    assert (run.proposer, run.op_family, run.status.value) == ("optimize-model", FAMILY, "finished")
    assert run.best_candidate_id == report.candidate_id
    candidate = store.get_candidate(report.candidate_id, run_id=run.run_id)
    assert candidate.source == Path(report.assembled_path).read_text()
    knobs = json.loads(candidate.knobs_json)["regions"]
    assert {name: k["schedule"] for name, k in knobs.items()} == {"r0": "matmul", "r1": "matmul"}
    assert {name: k["run"] for name, k in knobs.items()} == {r.name: r.run_id for r in report.regions}
    assert candidate.transformation_tags == ("r0:matmul", "r1:matmul")
    judged = store.evaluations(run_id=run.run_id, kind="search")
    assert [r.status.value for *_, r in judged] == ["passed"]
    assert store.evaluations(run_id=run.run_id, kind="remeasure") == []  # a CPU times nothing
    (outcome,) = store.outcomes(op_family=FAMILY)
    assert outcome.status == "correctness_only" and outcome.summary.startswith("model 7_TinyMLPBlock.py: ")
    assert outcome.transformation == "r0:matmul+r1:matmul" and outcome.evidence_eval_ids == (judged[0][0],)
    # the run keeps the report, so `kscout report RUN` can draw the model view later
    assert keep.stored_report(run) == report.model_copy(update={"report_path": None})


def test_the_model_problem_carries_its_shapes_family_and_the_judge_tolerance(optimized):
    root, report = optimized
    problem = evaluation.load_problem(str(root / "work" / "7_TinyMLPBlock.py"), "cpu")
    assert problem.op_family == FAMILY
    assert [c.params for c in problem.shape_cases] == [
        {"batch_size": 4, "in_features": 16, "hidden": 32, "out_features": 8}
    ]
    tol = problem.tolerances["float32"]
    assert (tol.atol, tol.rtol) == (1e-2, 1e-2)  # kernelbench, written into the file, loaded as declared


def test_the_gate_refuses_the_cpu_model_because_the_interpreter_measures_no_speed(optimized, store):
    _, report = optimized
    with pytest.raises(PromotionRefused) as info:
        promote(store, report.candidate_id, approved_by="alice")
    assert info.value.op == FAMILY and info.value.arch == "cpu"
    first, *rest = info.value.missing
    assert first.startswith("timing: a CPU-only result can never be promoted")
    # a CPU records no driver or CUDA version; no OS sandbox adds an isolation line; nothing else is missing
    assert {m.split(":")[0] for m in rest} <= {"environment", "isolation"}
    assert any("no driver version" in m for m in rest)


def test_the_model_is_promoted_and_rolled_back_as_one_artifact(optimized, store):
    root, report = optimized
    source = Path(report.assembled_path).read_text()
    knobs = store.get_candidate(report.candidate_id, run_id=report.run_id).knobs_json
    problem = evaluation.load_problem(str(root / "work" / "7_TinyMLPBlock.py"), "cuda")
    gpu_candidate(store, problem, source, knobs=knobs)  # a passed GPU judge and a significant re-measure
    _, deployed = promote(store, report.candidate_id, approved_by="alice", arch="sm_90")
    assert deployed.state is PromotionState.deployed and deployed.op_family == FAMILY
    (entry,) = deployed_entries(store, "sm_90")
    assert (entry.op, entry.candidate_id) == (FAMILY, report.candidate_id)
    assert entry.evidence.assumptions.knobs["regions"]["r0"]["schedule"] == "matmul"
    event = rollback(store, FAMILY, "sm_90", by="bob", reason="model regressed in canary")
    assert event.candidate_id is None  # the reference model again, in one event
    assert [e.state for e in history(store, FAMILY, "sm_90")] == [
        PromotionState.approved,
        PromotionState.deployed,
        PromotionState.rolled_back,
    ]
    (entry,) = deployed_entries(store, "sm_90")
    assert entry.candidate_id is None


def test_revalidate_judges_the_deployed_model_end_to_end_again(optimized, store):
    root, report = optimized
    problem = evaluation.load_problem(str(root / "work" / "7_TinyMLPBlock.py"), "cpu")
    candidate = store.get_candidate(report.candidate_id, run_id=report.run_id)
    write_deployment(store, problem, candidate, cpu_fp())  # the gate refuses a CPU kernel; this test needs one
    (outcome,) = revalidate(store, arch="cpu")
    assert (outcome.op, outcome.candidate_id, outcome.verdict) == (FAMILY, report.candidate_id, "passed")
    (row,) = store.evaluations(candidate_id=report.candidate_id, kind="revalidate")
    assert row[0] == outcome.eval_id and row[3].problem_id == problem.problem_id and row[3].passed


def test_a_question_naming_the_model_gets_its_measurements(optimized, store):
    _, report = optimized
    answer = ask(store, "what do we know about TinyMLP blocks?")
    assert FAMILY in answer.facets.ops
    assert [o.outcome.candidate_id for o in answer.outcome_hits] == [report.candidate_id]
    assert answer.outcome_hits[0].verdict.startswith("correct")
    assert ask(store, "what do we know about layernorm?").outcome_hits == ()  # no model named: not its rows


def test_model_names_match_loosely_and_only_whole_names():
    families = ["model:minigptblock", "model:lenet5", "model:vgg16"]
    assert model_ops("what worked for MiniGPT blocks on H200", families) == ("model:minigptblock",)
    assert model_ops("how fast is LeNet-5 on MI300?", families) == ("model:lenet5",)
    assert model_ops("what worked for layernorm", families) == ()
    assert model_ops("vgg1 results", families) == ()


def row(name: str, us: float, speedup, kernel="k" * 64) -> RegionRow:
    return RegionRow(
        name=name,
        kind="contraction",
        ops=("mm",),
        input_shapes=(),
        time_us=us,
        share=0.0,
        state="searched",
        kernel=kernel,
        speedup=speedup,
    )


def test_the_gain_shares_add_up_and_the_page_draws_an_after_bar_only_when_measured():
    measured = ModelReport(
        model="m.py",
        device="cuda",
        clock="device",
        eager_us=100.0,
        graph_us=100.0,
        glue_us=10.0,
        regions=(row("r0", 60.0, 2.0), row("r1", 30.0, None, kernel=None)),
        verdict="passed",
        speedup=1.4,
    )
    assert measured.after_us(measured.regions[0]) == 30.0 and measured.after_us(measured.regions[1]) == 30.0
    assert measured.gain_shares() == {"r0": 1.0, "r1": 0.0}
    assert measured.predicted_speedup() == pytest.approx(100.0 / 70.0)  # (60 + 30 + 10) / (30 + 30 + 10)
    assert [label for label, _ in page.bars(measured)] == ["before", "after"]
    html = page.render(measured)
    assert 'id="share-plot"' in html and 'id="share-note"' not in html and "100.0%" in html
    unmeasured = measured.model_copy(update={"regions": (row("r0", 60.0, None), row("r1", 30.0, None))})
    assert unmeasured.gain_shares() is None and unmeasured.predicted_speedup() is None
    assert [label for label, _ in page.bars(unmeasured)] == ["before"]
    assert 'id="share-note"' in page.render(unmeasured)


def test_the_model_is_judged_against_the_faster_of_eager_and_torch_compile():
    base = dict(model="m.py", device="cuda", clock="device", eager_us=1.0, graph_us=1.0, glue_us=0.0, regions=())
    compile_wins = ModelReport(**base, verdict="passed", speedup=1.3, compile_speedup=0.9)
    assert compile_wins.vs_user_choice == 0.9  # compiled is the user's choice: a loss, though 1.3x eager
    eager_wins = compile_wins.model_copy(update={"compile_speedup": 1.6})
    assert eager_wins.vs_user_choice == 1.3
    no_compile = compile_wins.model_copy(update={"compile_speedup": None})
    assert no_compile.vs_user_choice == 1.3  # compile could not be timed: eager is what the user has
    assert compile_wins.model_copy(update={"speedup": None}).vs_user_choice is None
    assert "0.9x the faster of the two" in page.render(compile_wins)


def test_the_model_remeasure_adds_max_autotune_to_its_rotation_only_when_asked():
    from test_lifecycle_support import gpu_fp, result, timing

    from evaluation.records import RemeasuredCandidate, RemeasuredCase, RemeasureResult

    problem = evaluation.load_problem("layernorm", device="cuda")
    searched = result(problem, "src", gpu_fp(), timed=timing(problem, 1.2, 1.1, 1.3))
    asked: list[tuple[str, ...]] = []

    class Timer:  # the GPU's re-measure, as a local executor returns it
        def remeasure(self, sources, problem, *, rounds, baselines):
            asked.append(tuple(baselines))
            tuned = "torch_compile_max_autotune" in baselines
            case = RemeasuredCase(
                case_id=searched.timing[0].case_id,
                params=searched.timing[0].params,
                dtype="float32",
                candidate_p50s_ms=(1.0,) * rounds,
                baseline_p50s_ms=(1.3,) * rounds,
                speedup=1.3,
                speedup_min=1.25,
                speedup_max=1.35,
                significant=True,
                method="cuda_graph",
                compile_p50s_ms=(1.1,) * rounds,
                speedup_vs_compile=1.1,
                speedup_vs_compile_min=1.05,
                speedup_vs_compile_max=1.15,
                autotune_p50s_ms=(0.9,) * rounds if tuned else (),
                speedup_vs_autotune=0.9 if tuned else None,
                speedup_vs_autotune_min=0.85 if tuned else None,
                speedup_vs_autotune_max=0.95 if tuned else None,
            )
            (name,) = sources
            return RemeasureResult(
                problem_id=problem.problem_id,
                problem_name=problem.name,
                device="cuda",
                rounds=rounds,
                candidates=(RemeasuredCandidate(name=name, candidate_sha256="c" * 64, cases=(case,)),),
                fingerprint=gpu_fp(),
                started_at="2026-01-01T00:00:00+00:00",
                duration_s=1.0,
            )

    _, plain = keep._remeasure("cid", "src", problem, searched, Timer())
    _, tuned = keep._remeasure("cid", "src", problem, searched, Timer(), autotune=True)
    assert asked == [("eager", "torch_compile"), ("eager", "torch_compile", "torch_compile_max_autotune")]
    assert plain["autotune_speedup"] is None and plain["compile_speedup"] == 1.1
    assert tuned["autotune_speedup"] == 0.9 and tuned["speedup"] == 1.3
    base = dict(model="m.py", device="cuda", clock="device", eager_us=1.0, graph_us=1.0, glue_us=0.0, regions=())
    html = page.render(ModelReport(**base, verdict="passed", **tuned))
    assert "0.9x max-autotune" in html and "1.1x torch.compile" in html


def test_the_run_report_of_a_model_run_carries_the_model_view(optimized, store, tmp_path, capsys):
    _, report = optimized
    html = tmp_path / "report.html"
    main(["report", report.run_id, "--html", str(html), "--store", str(tmp_path / "store")])
    text = html.read_text()
    assert 'id="model"' in text and 'id="share-plot"' in text and "7_TinyMLPBlock.py" in text
    assert f"kscout promote {report.candidate_id[:12]}" in text
    assert Path(report.report_path).read_text().count('id="regions"') == 1
    capsys.readouterr()
    main(["report", report.run_id, "--store", str(tmp_path / "store")])
    out = capsys.readouterr().out
    assert "model: passed end to end under kernelbench" in out
    assert f"kscout promote {report.candidate_id[:12]} --approved-by NAME" in out


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)")
def test_the_model_page_renders_in_headless_chromium_without_console_errors(optimized, tmp_path):
    _, report = optimized
    dom, console = _chromium(tmp_path, Path(report.report_path))
    assert console == []
    assert 'id="share-plot"><svg' in dom and 'id="share-note"' in dom  # a CPU: no "after" bar, and why
    assert dom.count("reference ops") == 0 and dom.count("not measured") >= 2  # both regions run kernels
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', dom)
    assert all(r.startswith("#") or r.startswith("data:") for r in refs)


def test_an_attention_regions_time_after_is_its_kernels_own_since_its_speedup_is_against_sdpa():
    """minGPT on an H100: the attention took 8.5 ms as the model wrote it and 1.72 ms as SDPA, its region's
    problem. A kernel 1.2x SDPA takes 1.43 ms: 8.5 / 1.2 would claim 7.1 ms and hide most of the gain."""
    sdpa = "F.scaled_dot_product_attention"
    attn = row("r1", 8500.0, 1.2).model_copy(update={"library": sdpa, "kernel_us": 1433.0})
    report = ModelReport(
        model="m.py",
        device="cuda",
        clock="device",
        eager_us=16000.0,
        graph_us=16000.0,
        glue_us=0.0,
        regions=(row("r0", 6000.0, 1.0), attn, row("r2", 1500.0, None, kernel=None)),
        verdict="passed",
    )
    assert report.after_us(attn) == 1433.0
    assert report.predicted_speedup() == pytest.approx(16000.0 / (6000.0 + 1433.0 + 1500.0))
    assert report.gain_shares() == {"r0": 0.0, "r1": 1.0, "r2": 0.0}
    assert "1.2x vs F.scaled_dot_product_attention" in page.render(report)
    # untimed (a CPU): no time after is made up for it
    untimed = attn.model_copy(update={"speedup": None, "kernel_us": None})
    assert report.after_us(untimed) is None


def test_a_judged_kernels_own_time_is_the_geomean_of_its_timed_cases():
    from types import SimpleNamespace

    from test_eval_timing_stats import stats

    from agent.model.flow import kernel_us
    from evaluation.records import TimedCase

    def case(ms: float) -> TimedCase:
        return TimedCase(
            case_id=f"c{ms}", params={}, dtype="float32", candidate=stats(ms, ms, ms), baselines=(), speedups=()
        )

    assert kernel_us(SimpleNamespace(timing=(case(1.0), case(4.0)))) == pytest.approx(2000.0)
    assert kernel_us(SimpleNamespace(timing=())) is None
