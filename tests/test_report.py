"""The run report: the run summary (agent.search.summary) with the search tree and parent links, the
plots (speed on a GPU, correctness on the CPU, evaluations by status), per-case tables, rendered as a
self-contained page that headless Chromium loads without a console error."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from test_lifecycle_support import (
    add_candidate,
    cpu_fp,
    gpu_fp,
    make_run,
    result,
    shape_results,
    timing,
    variant,
)

import evaluation
from agent.cli import main
from agent.search.report import anchor, render_html, tree
from agent.search.summary import summarize
from evaluation.records import Status
from store import Store
from store.records import RunStatus

CHROMIUM = shutil.which("chromium")


def write_run(store, problem, fp, speeds):
    """A search tree: seed -> (a -> (c, d), b). `speeds` gives each node's eager speedup (GPU only)."""
    run = make_run(store, problem, fp)
    seed = add_candidate(store, run, variant(0))
    a = add_candidate(store, run, variant(1), parent=seed.candidate_id, generation=1, action="refine")
    b = add_candidate(store, run, "def broken(:\n", parent=seed.candidate_id, generation=1, action="sibling")
    c = add_candidate(store, run, variant(3), parent=a.candidate_id, generation=2, action="refine")
    d = add_candidate(store, run, variant(4), parent=a.candidate_id, generation=2, action="refine")
    gpu = fp.device_kind != "cpu"

    def timed(name):
        return timing(problem, speeds[name], speeds[name] * 0.95, speeds[name] * 1.05) if gpu else ()

    note = None if gpu else "not measured on this device (cpu, Triton interpreter)"
    fail_case = problem.shape_cases[-1].case_id
    evals = [
        (seed, result(problem, seed.source, fp, timed=timed("seed"), note=note)),
        (a, result(problem, a.source, fp, timed=timed("a"), note=note)),
        (b, result(problem, b.source, fp, status=Status.compile_error, shapes=(), error_class="SyntaxError")),
        (
            c,
            result(
                problem,
                c.source,
                fp,
                status=Status.incorrect,
                error_class="MaxAbsError",
                shapes=shape_results(problem, fail=(fail_case,)),
            ),
        ),
        (d, result(problem, d.source, fp, timed=timed("d"), note=note)),
    ]
    for cand, res in evals:
        store.add_evaluation(run.run_id, cand.candidate_id, res)
    best = d if gpu else seed
    if gpu:
        store.add_evaluation(
            run.run_id,
            d.candidate_id,
            result(problem, d.source, fp, shapes=(), timed=timing(problem, 1.45, 1.4, 1.5)),
            kind="remeasure",
        )
    store.finish_run(run.run_id, status=RunStatus.finished, stop_reason="budget", best_candidate_id=best.candidate_id)
    return run, {"seed": seed, "a": a, "b": b, "c": c, "d": d}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    home = tmp_path_factory.mktemp("report") / "store"
    with Store.open(home) as store:
        run, nodes = write_run(store, evaluation.load_problem("layernorm", device="cpu"), cpu_fp(), {})
        report = summarize(store, run.run_id[:8])
    return home, run, nodes, report


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory):
    home = tmp_path_factory.mktemp("report-gpu") / "store"
    with Store.open(home) as store:
        problem = evaluation.load_problem("layernorm", device="cuda")
        run, nodes = write_run(store, problem, gpu_fp(), {"seed": 1.0, "a": 1.3, "d": 1.5})
        return summarize(store, run.run_id), nodes


def test_tree_nests_children_under_their_parents_with_anchor_links(cpu_run):
    _home, _run, n, report = cpu_run
    (root,) = tree(report)
    assert root["n"].candidate_id == n["seed"].candidate_id and root["parent_anchor"] is None
    assert [k["n"].candidate_id for k in root["children"]] == [n["a"].candidate_id, n["b"].candidate_id]
    a = root["children"][0]
    assert [k["n"].candidate_id for k in a["children"]] == [n["c"].candidate_id, n["d"].candidate_id]
    assert all(k["parent_anchor"] == anchor(n["a"].candidate_id) for k in a["children"])
    assert [root["n"].status, a["n"].status, root["children"][1]["n"].status, a["children"][0]["n"].status] == [
        "passed",
        "passed",
        "compile_error",
        "incorrect",
    ]


def test_cpu_report_counts_passed_and_failed_and_says_speed_was_not_measured(cpu_run):
    _home, _run, n, report = cpu_run
    assert not report.timed and report.timing_note == "not measured on this device (cpu, Triton interpreter)"
    assert [(p.passed_so_far, p.failed_so_far) for p in report.points] == [
        (1, 0),
        (2, 0),
        (2, 1),
        (2, 2),
        (3, 2),
    ]
    assert all(p.speedup is None for p in report.points)
    html = render_html(report, n["seed"].source)
    assert "Speed was not measured: not measured on this device" in html


def test_cpu_page_plots_each_case_error_against_its_tolerance_and_evaluations_by_status(cpu_run):
    _home, _run, n, report = cpu_run
    html = render_html(report, n["seed"].source)
    assert 'id="errors-plot"><svg' in html and 'id="status-plot"><svg' in html and 'id="speed-plot"' not in html
    assert "error per case against tolerance" in html and "evaluations by status" in html
    for case in evaluation.load_problem("layernorm", device="cpu").shape_cases:  # every case on the plot's axis
        assert case.case_id in html


def test_failures_are_counted_by_kind(cpu_run):
    _home, _run, _n, report = cpu_run
    assert [(f.status, f.error_class, f.count) for f in report.failures] == [
        ("compile_error", "SyntaxError", 1),
        ("incorrect", "MaxAbsError", 1),
    ]
    assert report.failures_by_kind == {"compile_error": 1, "incorrect": 1}


def test_gpu_report_tracks_the_best_speedup_and_ranks_the_remeasured_kernel_first(gpu_report):
    report, n = gpu_report
    assert report.timed and report.timing_note is None
    assert [p.best_so_far for p in report.points] == pytest.approx([1.0, 1.3, 1.3, 1.3, 1.5])
    best = report.kernels[0]
    assert best.candidate_id == n["d"].candidate_id == report.best.candidate_id and best.picked
    assert best.verdict.numbers_from == "remeasure" and best.speedup == pytest.approx(1.45)
    assert [k.candidate_id for k in report.kernels[1:]] == [n["a"].candidate_id, n["seed"].candidate_id]
    assert all(c.vs["eager"].ratio == pytest.approx(1.45) for c in best.verdict.cases)
    html = render_html(report, n["d"].source)
    assert 'id="speed-plot"><svg' in html and "speedup over evaluations" in html
    assert "Speed was not measured" not in html and 'id="errors-plot"' not in html


def test_cpu_best_kernel_checks_list_every_declared_case(cpu_run):
    _home, _run, n, report = cpu_run
    problem = evaluation.load_problem("layernorm", device="cpu")
    assert report.kernels[0].candidate_id == n["seed"].candidate_id  # the run's pick leads when nothing is timed
    assert [c.case_id for c in report.kernels[0].checks] == [c.case_id for c in problem.shape_cases]
    assert all(k.verdict is not None and not k.verdict.measured for k in report.kernels)  # and it says why


def test_page_is_self_contained(cpu_run):
    html = render_html(cpu_run[3], cpu_run[2]["seed"].source)
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', html)
    assert refs and all(r.startswith("#") or r.startswith("data:") for r in refs), refs
    assert "<link" not in html and "<script" not in html and html.count("<svg") == 2


def _chromium(tmp_path, page) -> tuple[str, list[str]]:
    """The DOM after load and the page's console messages (Chromium logs them as ':CONSOLE' lines)."""
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)")
def test_report_renders_in_headless_chromium_without_console_errors(tmp_path, cpu_run, capsys):
    home, run, n, _report = cpu_run
    page = tmp_path / "report.html"
    main(["report", run.run_id, "--html", str(page), "--store", str(home)])
    assert capsys.readouterr().out.strip() == f"wrote {page}"
    dom, console = _chromium(tmp_path, page)
    assert console == []
    for cand in n.values():
        assert f'id="{anchor(cand.candidate_id)}"' in dom
    parent_links = re.findall(r'class="parent-link" href="#([^"]+)"', dom)
    assert sorted(parent_links) == sorted([anchor(n["seed"].candidate_id)] * 2 + [anchor(n["a"].candidate_id)] * 2)
    assert 'id="errors-plot"><svg' in dom and 'id="status-plot"><svg' in dom
    assert "error per case against tolerance" in dom and 'id="best-source"' in dom


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)")
def test_the_console_check_catches_a_page_that_tries_to_fetch(tmp_path, cpu_run):
    html = render_html(cpu_run[3], None).replace("</body>", '<img src="https://example.com/x.png"></body>')
    page = tmp_path / "bad.html"
    page.write_text(html)
    _dom, console = _chromium(tmp_path, page)
    assert len(console) == 1 and "https://example.com/x.png" in console[0]


def test_report_cli_prints_tables_and_json(cpu_run, capsys):
    home, run, n, _report = cpu_run
    main(["report", run.run_id[:10], "--store", str(home)])
    out = capsys.readouterr().out
    assert f"run {run.run_id}: layernorm on cpu" in out and "failures by kind" in out
    assert n["d"].candidate_id[:12] in out and "pending" not in out
    assert "M=5,N=1000|bfloat16" in out  # case labels carry their dtype
    main(["report", run.run_id, "--store", str(home), "--json"])
    raw = capsys.readouterr().out
    data = json.loads(raw)
    assert raw.count("\n") == 1  # one compact object on one line
    assert data["run_id"] == run.run_id and data["html"] is None and len(data["points"]) == 5


def test_report_of_an_unknown_run_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["report", "nope", "--store", str(tmp_path / "store")])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip() == "kscout: error: no run matches 'nope'"


def test_a_run_without_failures_says_so_instead_of_plotting_nothing(tmp_path):
    problem = evaluation.load_problem("layernorm", device="cpu")
    with Store.open(tmp_path / "store") as store:
        run = make_run(store, problem, cpu_fp())
        seed = add_candidate(store, run, variant(0))
        store.add_evaluation(run.run_id, seed.candidate_id, result(problem, seed.source, cpu_fp()))
        report = summarize(store, run.run_id)
    html = render_html(report, seed.source)
    assert report.failures == () and "No failed evaluation." in html
    assert 'id="status-plot"><svg' in html and 'id="failures"' not in html
