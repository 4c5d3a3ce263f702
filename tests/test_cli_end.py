"""The end of a run through the real `kscout` entry point: exit codes, the kernel in hand, interrupted and
stale runs, and `resume` continuing them. Searches run on the CPU (Triton interpreter) with a budget of
a few evaluations and KSCOUT_VECTORS=off (no embedding model: the store keeps every row)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import agent.search.cli as search_cli
from agent.cli import main
from store import Store
from store.records import RunStatus

KSCOUT = str(Path(sys.executable).parent / "kscout")
ROOT = Path(__file__).resolve().parents[1]
SORT_PROBLEM = """import torch
from torch import nn

M = 4
N = 8


class Model(nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=-1).values


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return []
"""


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """Each test runs in its own folder (optimize writes ./kscout-best/ there) with vectors off."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    return tmp_path


def kscout(argv, capsys) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def env() -> dict:
    return {**os.environ, "TRITON_INTERPRET": "1", "KSCOUT_VECTORS": "off", "PYTHONPATH": str(ROOT)}


def runs_json(store, capsys) -> dict[str, dict]:
    code, out, _ = kscout(["runs", "--store", str(store), "--json"], capsys)
    assert code == 0
    return {r["run_id"]: r for r in json.loads(out)["runs"]}


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """One small search with --json, shared: (folder it ran in, its exit code, its stdout)."""
    folder = tmp_path_factory.mktemp("optimized")
    before, vectors = os.getcwd(), os.environ.get("KSCOUT_VECTORS")
    os.chdir(folder)
    os.environ["KSCOUT_VECTORS"] = "off"
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            main(
                ["optimize", "layernorm", "--device", "cpu", "--budget", "2", "--trials", "1", "--store", "store"]
                + ["--json"]
            )
        code = 0
    except SystemExit as exc:
        code = exc.code
    finally:
        os.chdir(before)
        if vectors is None:
            os.environ.pop("KSCOUT_VECTORS", None)
        else:
            os.environ["KSCOUT_VECTORS"] = vectors
    return folder, code, stdout.getvalue()


def test_optimize_writes_the_best_kernel_prints_its_path_and_the_header_reevaluates_it(optimized, capsys, monkeypatch):
    folder, code, _ = optimized
    assert code == 0
    monkeypatch.chdir(folder)
    (path,) = (folder / "kscout-best").glob("layernorm-*.py")
    run_id = path.stem.removeprefix("layernorm-")
    code, out, _ = kscout(["show", run_id, "--store", "store"], capsys)
    text = path.read_text()
    from evaluation.problem import load_problem

    declared = len(load_problem("layernorm", "cpu").shape_cases)
    assert f"# run {run_id}, candidate " in text and f"# correct on all {declared} declared cases" in text
    reeval = next(ln for ln in text.splitlines() if ln.startswith("# re-evaluate: "))
    argv = shlex.split(reeval.removeprefix("# re-evaluate: "))
    assert argv[:3] == ["kscout", "eval", str(path.relative_to(folder))]
    code, out, err = kscout(argv[1:] + ["--trials", "1"], capsys)  # the header keeps it a valid candidate
    assert code == 0, out + err

    code, out, _ = kscout(["show", run_id, "--source", "--store", "store"], capsys)
    assert code == 0 and out == text.replace(str(path.relative_to(folder)), "THIS_FILE.py")


def test_optimize_json_on_the_cpu_names_eager_and_torch_compile_as_not_measured_with_the_reason(optimized):
    folder, code, out = optimized
    summary = json.loads(out)
    assert code == 0 and summary["kernel_file"] is not None and summary["kernels"]
    reason = "not measured on this device (cpu, Triton interpreter)"
    for kernel in [summary["best"], *summary["kernels"]]:
        assert kernel["verdict"] == {
            "numbers_from": None,
            "how": None,
            "cases": [],
            "across": [],
            "not_measured": [
                {"baseline": "eager", "speed": "not measured", "reason": reason},
                {"baseline": "torch_compile", "speed": "not measured", "reason": reason},
            ],
            "pct_of_copy_worst": None,
            "pct_of_copy_worst_case": None,
            "uncovered_cases": [],
            "measured": False,
        }


def test_show_source_prints_any_candidate_and_refuses_a_candidate_without_the_flag(optimized, capsys, monkeypatch):
    folder, _, _ = optimized
    monkeypatch.chdir(folder)
    code, out, _ = kscout(["runs", "--store", "store", "--json"], capsys)
    (run,) = json.loads(out)["runs"]
    code, out, _ = kscout(["show", run["run_id"], "--store", "store", "--json"], capsys)
    summary = json.loads(out)
    assert out.count("\n") == 1 and summary["state"] == "finished"
    other = next(n["candidate_id"] for n in summary["nodes"] if n["candidate_id"] != summary["best"]["candidate_id"])
    code, out, _ = kscout(["show", summary["run_id"], other[:10], "--source", "--store", "store"], capsys)
    with Store.open(folder / "store") as st:
        source = st.get_candidate(other, run_id=summary["run_id"]).source
    assert code == 0 and out.endswith("\n\n" + source) and f"candidate {other}" in out
    assert "# not the run's pick: the run picked " in out
    code, _, err = kscout(["show", summary["run_id"], other[:10], "--store", "store"], capsys)
    assert code == 2 and err.strip() == "kscout: error: a CANDIDATE after the run id is only read with --source"


CUMSUM_PROBLEM = SORT_PROBLEM.replace("torch.sort(x, dim=-1).values", "torch.cumsum(x, dim=-1)")
RAISES = """import torch
import triton
import triton.language as tl


class ModelNew(torch.nn.Module):
    def forward(self, x):
        raise ValueError("scan over an empty dimension (size 0)")
"""
# the check runs the smallest case first (correctness.cheap_first)
RAISED = "forward raised on M=4,N=1|float32 trial 0: ValueError: scan over an empty dimension (size 0)"


class _OneRaisingCandidate:
    """A stand-in proposer: one candidate whose forward raises, then nothing more."""

    name = "template"

    def __init__(self):
        self.asked = 0

    def propose(self, request):
        from agent.proposers.base import Proposal, ProposalError, ProposeResult

        self.asked += 1
        if self.asked > 1:
            return ProposeResult(errors=(ProposalError(kind="exhausted", message="stand-in: nothing more"),))
        return ProposeResult(proposals=(Proposal(source=RAISES, rationale="a candidate that raises"),))


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    """A real CPU search (budget 1) whose one candidate raises: (folder, exit code, run id, candidate id)."""
    import agent.search.session as session

    folder = tmp_path_factory.mktemp("failed")
    (folder / "cumsum.py").write_text(CUMSUM_PROBLEM)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setenv("KSCOUT_VECTORS", "off")
        mp.setattr(session, "make_proposer", lambda *a, **k: _OneRaisingCandidate())
        try:
            main(["optimize", "cumsum.py", "--device", "cpu", "--budget", "1", "--trials", "1", "--store", "store"])
            code = 0
        except SystemExit as exc:
            code = exc.code
    with Store.open(folder / "store") as st:
        (run,) = st.list_runs()
        (cand,) = st.candidates(run.run_id)
    return folder, code, run.run_id, cand.candidate_id


def _words(text: str) -> str:
    return " ".join(text.split())  # a message wrapped at 80 columns reads as one line again


@pytest.mark.slow
def test_show_and_report_of_a_failed_run_give_each_failed_candidates_message_and_error_class(failed_run, capsys):
    folder, code, run_id, cid = failed_run
    assert code == 1
    for cmd in ("show", "report"):
        code, out, err = kscout([cmd, run_id, "--store", str(folder / "store")], capsys)
        assert code == 0, err
        assert f"{cid[:12]} crashed at correctness: ValueError {RAISED}" in _words(out), cmd


@pytest.mark.slow
def test_report_json_of_a_failed_run_gives_each_failed_candidates_message_and_error_class(failed_run, capsys):
    folder, _, run_id, cid = failed_run
    code, out, err = kscout(["report", run_id, "--store", str(folder / "store"), "--json"], capsys)
    assert code == 0, err
    (node,) = json.loads(out)["nodes"]
    assert (node["candidate_id"], node["status"], node["failed_stage"], node["error_class"], node["message"]) == (
        cid,
        "crashed",
        "correctness",
        "ValueError",
        RAISED,
    )


@pytest.mark.slow
def test_report_html_of_a_failed_run_gives_each_failed_candidates_message_and_error_class(failed_run, capsys):
    import re

    folder, _, run_id, cid = failed_run
    page = folder / "page.html"
    code, _, err = kscout(["report", run_id, "--store", str(folder / "store"), "--html", str(page)], capsys)
    assert code == 0, err
    html = page.read_text()
    table = re.search(r'<table id="failed-candidates">(.*?)</table>', html, re.S).group(1)
    rows = re.findall(r"<tr><td>(.*?)</td><td[^>]*>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", table)
    assert [r[1:] for r in rows] == [("crashed", "correctness", "ValueError", RAISED)]
    assert f"<code>{cid[:12]}</code>" in rows[0][0]
    assert f'<small class="failed">ValueError: {RAISED}</small>' in html  # on its node in the search tree


def test_eval_without_a_sandbox_says_so_in_one_line_that_names_bubblewrap(cwd, capsys, monkeypatch):
    from evaluation import isolation

    reason = "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    monkeypatch.setitem(isolation._PROBE, "cpu", isolation._Probe(False, reason))
    monkeypatch.setattr(isolation, "_WARNED", False)
    monkeypatch.delenv("KSCOUT_SANDBOX", raising=False)
    (cwd / "broken.py").write_text("def f(:\n")
    code, out, err = kscout(["eval", "broken.py", "--problem", "layernorm", "--device", "cpu"], capsys)
    assert code == 1, out + err
    assert err.splitlines() == [  # not Python's "file.py:86: UnsandboxedWarning:" and a dangling source line
        "kscout: warning: candidate code runs WITHOUT an OS sandbox on this machine: bubblewrap (bwrap) is "
        "not installed (Debian/Ubuntu: apt-get install bubblewrap). Every result records isolation='none' "
        "and cannot be promoted without an explicit override"
    ]


def test_a_run_without_a_passing_candidate_exits_1_and_writes_no_kernel(cwd, capsys):
    (cwd / "sortp.py").write_text(SORT_PROBLEM)  # no kernel family or schedule covers sort
    code, out, err = kscout(["optimize", "sortp.py", "--device", "cpu", "--budget", "3", "--store", "store"], capsys)
    assert code == 1, err
    assert "kernel: none (no candidate passed)" in out and "no candidate passed" in out
    assert not (cwd / "kscout-best").exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["optimize", "layernorm", "--budget", "0"], "--budget must be at least 1"),
        (["optimize", "layernorm", "--minutes", "-1"], "--minutes must be more than 0 (got -1)"),
        (["optimize", "layernorm", "--minutes", "0"], "--minutes must be more than 0 (got 0)"),
        (["optimize", "layernorm", "--trials", "0"], "--trials must be at least 1 (got 0)"),
        (["optimize", "layernorm", "--max-cost", "-0.5"], "--max-cost must be 0 or more (got -0.5)"),
        (["optimize", "layernorm", "--target-speedup", "0"], "--target-speedup must be more than 0 (got 0)"),
        (["resume", "no-such-run"], "no run matches 'no-such-run'"),
        (["show", "no-such-run", "--source"], "no run matches 'no-such-run'"),
    ],
)
def test_bad_input_exits_2_with_one_line(cwd, capsys, argv, needle):
    code, out, err = kscout(argv + ["--store", "store"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith(f"kscout: error: {needle}")


def test_a_refused_budget_records_no_run(cwd, capsys):
    code, _, _ = kscout(["optimize", "layernorm", "--minutes", "-1", "--store", "store"], capsys)
    assert code == 2
    assert runs_json(cwd / "store", capsys) == {}


@pytest.mark.parametrize(
    "argv, expected",
    [
        # no budget flag on a GPU: a real search, 8 siblings a step checked side by side, 64 or 5 minutes
        (["--device", "cuda"], dict(budget=64, minutes=5.0, batch=8, workers=8)),
        (["--device", "cpu"], dict(budget=20, minutes=None, batch=1, workers=1)),
        # any budget flag given: the rest keep their per-device defaults, the time limit is the user's
        (["--device", "cuda", "--budget", "10"], dict(budget=10, minutes=None, batch=8, workers=8)),
        (["--device", "cuda", "--batch", "4"], dict(budget=64, minutes=None, batch=4, workers=4)),
        (["--device", "cpu", "--batch", "3"], dict(budget=20, minutes=None, batch=3, workers=1)),
    ],
)
def test_optimize_without_budget_flags_searches_by_the_devices_defaults(cwd, capsys, monkeypatch, argv, expected):
    import agent.search.session as session

    seen = {}

    def start(config, store, **kw):
        seen.update(budget=config.budget, minutes=config.minutes, batch=config.batch, workers=config.workers)
        raise session.SessionError("stopped by the test")

    monkeypatch.setattr(session, "start", start)
    try:
        code, _, err = kscout(["optimize", "layernorm", *argv, "--store", "store"], capsys)
    finally:  # `--device cuda` prestarted warm workers in this process: they end with the command, as they would
        from evaluation import pool

        pool.close_all()
    assert code == 2 and "stopped by the test" in err
    assert seen == expected


def test_an_interrupt_inside_the_session_marks_the_claimed_run_and_exits_3(cwd, capsys, monkeypatch):
    """The fast path of the mapping: a session that was started (and claimed) and then interrupted."""
    from test_lifecycle_support import cpu_fp, make_run

    import agent.search.session as session
    import evaluation
    from agent.search.session import SessionEvent

    def interrupted_start(config, st, on_event=None, **_):
        run = make_run(st, evaluation.load_problem("layernorm", device="cpu"), cpu_fp())
        on_event(SessionEvent(kind="started", run_id=run.run_id, message="started", evaluations=0, budget=1))
        assert runs_json_from(st)[run.run_id] == "running"  # claimed by this (live) process
        raise KeyboardInterrupt

    def runs_json_from(st):
        from agent.search.liveness import run_state

        return {r.run_id: run_state(r, st.run_owners().get(r.run_id)) for r in st.list_runs()}

    monkeypatch.setattr(session, "start", interrupted_start)
    code, out, err = kscout(["optimize", "layernorm", "--device", "cpu", "--store", "store"], capsys)
    ((run_id, state),) = ((r, v["state"]) for r, v in runs_json(cwd / "store", capsys).items())
    assert code == 3 and out == "" and state == "interrupted"
    assert err.strip().splitlines()[-2:] == [
        f"kscout: interrupted (SIGINT): run {run_id} marked interrupted",
        f"resume with: kscout resume {run_id}",
    ]


@pytest.mark.slow
def test_ctrl_c_marks_the_run_interrupted_prints_the_resume_hint_exits_3_and_resume_finishes_it(
    cwd, capsys, monkeypatch
):
    """Ctrl-C raises KeyboardInterrupt in the main thread wherever the session is; here: as an evaluation
    lands. The real signals (SIGINT, SIGTERM) through a separate process are the slow tests below."""
    real = search_cli._ProgressView.__call__

    def ctrl_c_after_first_evaluation(self, e):
        real(self, e)
        if e.kind == "evaluated":
            raise KeyboardInterrupt

    monkeypatch.setattr(search_cli._ProgressView, "__call__", ctrl_c_after_first_evaluation)
    code, out, err = kscout(
        ["optimize", "layernorm", "--device", "cpu", "--budget", "3", "--trials", "1", "--store", "store"], capsys
    )
    run_id = err.split("resume with: kscout resume ", 1)[1].split()[0]
    assert code == 3 and out == ""
    assert f"kscout: interrupted (SIGINT): run {run_id} marked interrupted\nresume with: kscout resume {run_id}" in err
    assert runs_json(cwd / "store", capsys)[run_id]["state"] == "interrupted"

    monkeypatch.setattr(search_cli._ProgressView, "__call__", real)
    code, out, err = kscout(["resume", run_id[:15], "--store", "store", "--json"], capsys)
    assert code == 0, err
    done = json.loads(out)
    assert (done["state"], done["stop_reason"], done["evaluations"]) == ("finished", "evaluation_budget", 3)
    with Store.open(cwd / "store") as st:
        evaluated = [cid for _, _, cid, _ in st.evaluations(run_id=run_id, kind="search")]
    assert len(evaluated) == len(set(evaluated)) == 3  # nothing evaluated twice
    assert Path(done["kernel_file"]).exists()


def default_signals() -> None:
    """In the child, before exec: SIGINT and SIGTERM at their defaults. A disposition of SIG_IGN is
    inherited across exec, and Python then installs no Ctrl-C handler; an earlier test in this process
    (or a shell that starts jobs with SIGINT ignored) must not decide what the signal does here."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start(store: Path, budget: int = 30, executor: str = "local") -> subprocess.Popen:
    return subprocess.Popen(
        [
            KSCOUT,
            "optimize",
            "layernorm",
            "--device",
            "cpu",
            "--budget",
            str(budget),
            "--trials",
            "1",
            "--executor",
            executor,
            "--store",
            str(store),
        ],
        cwd=store.parent,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )


def _wait_for(proc: subprocess.Popen, needle: str, timeout_s: float = 240) -> list[str]:
    lines, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    proc.kill()
    raise AssertionError(f"never saw {needle!r}:\n{''.join(lines)}")


@pytest.mark.slow
@pytest.mark.parametrize(
    "executor, sig, name",
    [
        ("local", signal.SIGINT, "SIGINT"),
        ("local", signal.SIGTERM, "SIGTERM"),
        # ray.init installs Ray's own SIGTERM handler (exit at once, abseil's stack dump): the executor puts
        # ours back, else a job scheduler's SIGTERM leaves the run unmarked (seen on the H200)
        ("ray", signal.SIGTERM, "SIGTERM"),
    ],
)
def test_a_real_signal_to_optimize_marks_the_run_and_exits_3(tmp_path, executor, sig, name):
    proc = _start(tmp_path / "store", executor=executor)
    try:
        lines = _wait_for(proc, "[evaluated 1/")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    run_id = next(ln for ln in lines if ln.startswith("[started")).split("run ", 1)[1].split(":")[0]
    assert proc.returncode == 3, err
    assert err.strip().splitlines()[-2:] == [
        f"kscout: interrupted ({name}): run {run_id} marked interrupted",
        f"resume with: kscout resume {run_id}",
    ]
    with Store.open(tmp_path / "store") as st:
        assert st.get_run(run_id).status is RunStatus.interrupted


@pytest.mark.slow
def test_a_killed_run_shows_as_stale_and_resume_continues_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    proc = _start(store, budget=3)
    try:
        lines = _wait_for(proc, "[evaluated 1/")
        proc.kill()  # kill -9: nothing in the process can mark the run
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    run_id = next(ln for ln in lines if ln.startswith("[started")).split("run ", 1)[1].split(":")[0]
    assert runs_json(store, capsys)[run_id]["state"] == "stale"
    code, out, _ = kscout(["runs", "--store", str(store)], capsys)
    assert "stale" in out and "`kscout resume RUN` continues it" in out
    code, out, err = kscout(["resume", run_id, "--store", str(store), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["state"] == "finished" and runs_json(store, capsys)[run_id]["state"] == "finished"


def test_an_owner_is_alive_only_while_that_very_process_runs():
    import socket

    from agent.search.liveness import owner_alive, process_mark
    from store.owners import RunOwner

    def owner(pid, mark, host=None):
        return RunOwner(run_id="r", pid=pid, host=host or socket.gethostname(), process_mark=mark, claimed_at="t")

    me = os.getpid()
    assert owner_alive(owner(me, process_mark(me))) is True
    assert owner_alive(owner(me, "another-boot:1")) is False  # the pid was recycled by another process
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert owner_alive(owner(int(done.stdout), None)) is False  # that process has exited
    assert owner_alive(owner(me, None, host="another-host")) is None  # not checkable from here


def test_ingest_of_a_missing_path_is_one_line_and_exit_2(cwd, capsys):
    code, out, err = kscout(["ingest", str(cwd / "missing.md"), "--store", "store"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "missing.md" in err


def test_eval_writes_one_phase_row_per_process_where_asked_and_refuses_a_missing_folder_first(cwd, capsys):
    seed = str(ROOT / "evaluation" / "seeds" / "layernorm.py")
    args = ["eval", seed, "--problem", "layernorm", "--device", "cpu", "--set", "M=2", "--trials", "1"]
    code, out, err = kscout([*args, "--phases", "nowhere/phases.json"], capsys)
    assert code == 2 and "--phases: no folder nowhere" in err and "passed" not in out
    code, out, err = kscout([*args, "--phases", "phases.json", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["status"] == "passed"
    # on a CPU: the check's process (nothing timed), then the command's own row
    row, command = json.loads((cwd / "phases.json").read_text())
    assert row["role"] == "correctness" and row["cases"] >= 1 and row["parent_judge_s"] >= 0
    assert row["worker"]["seconds"]["correctness"] > 0 and row["worker"]["stamps"]["finished"] > 0
    assert command["role"] == "command"
    assert command["started_at"] <= command["evaluate_at"] <= row["worker"]["stamps"]["finished"] <= command["done_at"]
