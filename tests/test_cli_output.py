"""What kscout prints, through a pipe at 80 columns: no line wider than that, ids and case labels whole,
`--json` one compact line, `--json` shown as a flag in help, the exit codes in help, and the commands
that only list (`runs`, `deployed`, `history`, `docs`, `show`, `report`) never importing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_lifecycle_support import add_candidate, cpu_fp, gpu_fp, make_run, variant, write_deployment
from test_report import write_run

import evaluation
from store import Store

ROOT = Path(__file__).resolve().parents[1]
# Runs a kscout command and reports, on exit, whether torch was imported and how long it took.
PROBE = (
    "import atexit, sys, time; t0 = time.perf_counter()\n"
    "atexit.register(lambda: sys.stderr.write("
    "f\"\\nPROBE torch={'torch' in sys.modules} s={time.perf_counter() - t0:.3f}\\n\"))\n"
    "from agent.cli import main; main(sys.argv[1:])\n"
)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A store with a CPU run, a GPU run (re-measured) and two deployments (one per arch)."""
    home = tmp_path_factory.mktemp("output") / "store"
    with Store.open(home) as st:
        cpu_run, cpu_nodes = write_run(st, evaluation.load_problem("layernorm", device="cpu"), cpu_fp(), {})
        gpu_run, gpu_nodes = write_run(
            st, evaluation.load_problem("layernorm", device="cuda"), gpu_fp(), {"seed": 1.0, "a": 1.3, "d": 1.5}
        )
        problem = evaluation.load_problem("rmsnorm", device="cuda")
        run = make_run(st, problem, gpu_fp())
        write_deployment(st, problem, add_candidate(st, run, variant(7)), gpu_fp(), speedup=(1.45, 1.4, 1.5))
    return home, cpu_run, cpu_nodes, gpu_run, gpu_nodes


def kscout(*argv: str, columns: int = 80) -> tuple[int, str, str]:
    """The console script in a fresh process, stdout a pipe, $COLUMNS set."""
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT), "KSCOUT_VECTORS": "off"}
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, timeout=120)
    return done.returncode, done.stdout, done.stderr


def probe(err: str) -> tuple[bool, float]:
    line = next(ln for ln in err.splitlines() if ln.startswith("PROBE "))
    fields = dict(kv.split("=") for kv in line.split()[1:])
    return fields["torch"] == "True", float(fields["s"])


@pytest.mark.parametrize(
    "argv",
    [
        ["runs"],
        ["deployed"],
        ["history", "rmsnorm", "--device", "sm_90"],
        ["docs"],
    ],
)
def test_listing_commands_do_not_import_torch(home, argv):
    code, out, err = kscout(*argv, "--store", str(home[0]))
    torch_loaded, seconds = probe(err)
    assert code == 0, err
    assert not torch_loaded, f"kscout {' '.join(argv)} imported torch"


def test_show_and_report_of_a_stored_run_do_not_import_torch(home):
    for cmd in ("show", "report"):
        code, _, err = kscout(cmd, home[3].run_id, "--store", str(home[0]))
        assert code == 0 and not probe(err)[0], (cmd, err)


@pytest.mark.parametrize("which", ["cpu", "gpu"])
@pytest.mark.parametrize("cmd", ["show", "report"])
def test_run_views_fit_80_columns_with_whole_ids_and_case_labels(home, which, cmd):
    store, cpu_run, cpu_nodes, gpu_run, gpu_nodes = home
    run, nodes = (cpu_run, cpu_nodes) if which == "cpu" else (gpu_run, gpu_nodes)
    code, out, err = kscout(cmd, run.run_id, "--store", str(store))
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    for node in nodes.values():  # every candidate named whole, never folded across lines
        assert node.candidate_id[:12] in out
    if cmd == "report":
        problem = evaluation.load_problem("layernorm", device=which if which == "cpu" else "cuda")
        for case in problem.shape_cases:  # case labels carry their dtype and are never cut
            assert case.case_id in out
    if which == "gpu":
        assert "vs eager" in out and "1.45x [1.40, 1.50]" in out


def test_runs_and_deployed_fit_80_columns(home):
    store = str(home[0])
    code, out, _ = kscout("runs", "--store", store)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    assert home[1].run_id[:15] in out and "finished" in out
    code, out, _ = kscout("deployed", "--store", store)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    assert " ".join(out.split()).startswith("rmsnorm on sm_90: ")


def test_empty_listings_say_none(tmp_path):
    for argv, expected in ((["runs"], "runs: none"), (["deployed"], "deployed kernels: none")):
        code, out, _ = kscout(*argv, "--store", str(tmp_path / "empty"))
        assert code == 0 and out.strip() == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["runs"],
        ["deployed"],
        ["history", "rmsnorm", "--device", "sm_90"],
        ["show", "RUN"],
        ["report", "RUN"],
        ["problems"],
    ],
)
def test_json_is_one_compact_object_on_one_line(home, argv):
    argv = [home[3].run_id if a == "RUN" else a for a in argv]
    code, out, err = kscout(*argv, "--json", *(["--store", str(home[0])] if argv[0] != "problems" else []))
    assert code == 0, err
    assert out.count("\n") == 1 and isinstance(json.loads(out), dict)
    assert ", " not in out[:200] and ": " not in out[:40]  # compact separators, not pretty-printed


def test_help_shows_flags_as_flags_and_names_the_exit_codes(capsys, monkeypatch):
    from typer.main import get_command

    from agent.cli import build_app, main

    monkeypatch.setenv("COLUMNS", "80")
    main(["--help"])
    out = capsys.readouterr().out
    assert "Exit codes: 0 done" in " ".join(out.split()) and "3 interrupted" in out
    for name in get_command(build_app()).commands:
        main([name, "--help"])
        out = capsys.readouterr().out
        assert "<bool>" not in out and max(len(ln) for ln in out.splitlines()) <= 80, name
        json_lines = [ln.split() for ln in out.splitlines() if ln.strip().startswith("--json")]
        assert all(len(words) == 1 or words[1] not in ("BOOLEAN", "<bool>") for words in json_lines), name


def test_listing_start_up_is_fast(home):
    """Start-up of the listing commands, measured (the README quotes these); a loose ceiling on 2 cores."""
    times = {}
    for argv in (["runs"], ["deployed"], ["docs"], ["history", "rmsnorm", "--device", "sm_90"]):
        t0 = time.perf_counter()
        code, _, err = kscout(*argv, "--store", str(home[0]))
        times[argv[0]] = (time.perf_counter() - t0, probe(err)[1])
        assert code == 0
    print("start-up, process wall s / in-process s:", {k: (round(a, 2), round(b, 2)) for k, (a, b) in times.items()})
    assert all(wall < 15 for wall, _ in times.values()), times
