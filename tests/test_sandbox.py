"""The OS sandbox (bubblewrap) holds where the static check has been bypassed.

Each test runs a candidate through evaluate() with the static check switched off, so what stops it
is the sandbox alone: its own PID namespace (no parent to see, signal or stop; descendants die with
it), no network, a read-only host with $HOME and the store hidden, only its scratch folder writable,
and resource limits. Skipped, with the reason, where bubblewrap cannot make a sandbox here.
"""

from __future__ import annotations

import json
import os
import socket
import time
import warnings
from pathlib import Path

import pytest

from evaluation import evaluate, harness, load_problem
from evaluation.isolation import _python_folders, default_limits, probe_sandbox, resolve_sandbox, scrub
from evaluation.records import Status
from evaluation.static_check import StaticReport

ROOT = Path(__file__).resolve().parent.parent
PROBE = probe_sandbox("cpu")
needs_sandbox = pytest.mark.skipif(not PROBE.ok, reason=f"no sandbox here: {PROBE.reason}")


@pytest.fixture
def unchecked(monkeypatch):
    """evaluate() without its static check, so the sandbox is the only barrier."""
    monkeypatch.setattr(harness, "check_source", lambda source, module=None: StaticReport(None, True, ()))


@pytest.fixture(scope="module")
def tiny():
    return load_problem("layernorm", "cpu", {"M": 2, "N": 16})


def _candidate(body: str) -> str:
    """A ModelNew whose forward runs `body` (indented 8 spaces) and raises what it found as JSON."""
    return (
        "import torch\nfrom torch import nn\n\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, n):\n"
        "        super().__init__()\n"
        "        self.weight = nn.Parameter(torch.ones(n))\n"
        "        self.bias = nn.Parameter(torch.zeros(n))\n\n"
        "    def forward(self, x):\n"
        "        import json, os, resource, socket\n"
        "        found = {}\n"
        + "".join(f"        {line}\n" for line in body.strip().splitlines())
        + "        raise RuntimeError('FOUND' + json.dumps(found, sort_keys=True))\n"
    )


def _found(result) -> dict:
    assert result.status is Status.crashed, result.message
    return json.loads(result.message.split("FOUND", 1)[1])


@needs_sandbox
def test_inside_the_sandbox_there_is_no_parent_no_network_no_home_and_only_scratch_is_writable(
    unchecked, tiny, tmp_path, monkeypatch
):
    home = tmp_path / "kscout-home"
    home.mkdir()
    (home / "kscout.duckdb").write_bytes(b"DUCK" * 8)
    monkeypatch.setenv("KSCOUT_HOME", str(home))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    body = f"""
found['pids'] = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
found['ppid'] = os.getppid()
found['uid'] = os.getuid()
found['parent_environ'] = os.path.exists('/proc/{os.getpid()}/environ')
found['store_visible'] = os.path.exists({str(home / "kscout.duckdb")!r})
found['tmp'] = os.listdir('/tmp')
def writable(path):
    try:
        with open(path, 'a'):
            pass
        return True
    except OSError as exc:
        return type(exc).__name__
found['write_cwd'] = writable('here.txt')
found['write_repo'] = writable({str(ROOT / "evaluation" / "compare.py")!r})
found['write_home'] = writable({str(home / "kscout.duckdb")!r})
found['write_work'] = writable('/work/x-from-sandbox')
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=2)
    found['net'] = 'connected'
except OSError as exc:
    found['net'] = type(exc).__name__
found['nproc'] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
found['fsize'] = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
found['as'] = resource.getrlimit(resource.RLIMIT_AS)[0]
found['cpu'] = resource.getrlimit(resource.RLIMIT_CPU)[0]
"""
    try:
        result = evaluate(_candidate(body), tiny, device="cpu", trials=1, sandbox="required")
    finally:
        listener.close()
    found = _found(result)
    assert result.isolation == "bwrap"
    assert len(found["pids"]) <= 3 and os.getpid() not in found["pids"]  # the sandbox's own processes only
    assert found["ppid"] == 1 and found["uid"] != 0
    # /tmp is empty inside but for the Python folders bound back (a checkout or venv under /tmp)
    bound = {
        f.relative_to("/tmp").parts[0] for f in _python_folders() if f.is_relative_to("/tmp") and f != Path("/tmp")
    }
    assert found["parent_environ"] is False and found["store_visible"] is False and set(found["tmp"]) == bound
    assert found["write_cwd"] is True
    assert {found["write_repo"], found["write_work"]} <= {"OSError", "PermissionError"}  # EROFS, or EACCES first
    assert found["write_home"] == "FileNotFoundError"
    assert found["net"] in ("OSError", "ConnectionRefusedError")  # its own, empty network: our listener is not there
    limits = default_limits("cpu", 120.0)
    assert (found["nproc"], found["fsize"], found["as"]) == (
        limits.nproc,
        limits.file_size_bytes,
        limits.address_space_bytes,
    )
    assert 0 < found["cpu"] < 10**6
    assert (home / "kscout.duckdb").read_bytes() == b"DUCK" * 8


@pytest.mark.slow  # tests/test_adversarial.py runs the same trick in the default suite
@needs_sandbox
def test_a_setsid_grandchild_dies_with_the_sandbox(unchecked, tiny):
    marker = f"{time.time_ns() % 10**6}.5"
    body = f"""
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/bin/sleep', ['sleep', '{marker}'])
    os._exit(0)
time.sleep(0.5) if False else None
"""
    result = evaluate(_candidate(body), tiny, device="cpu", trials=1, sandbox="required")
    assert result.status is Status.crashed
    time.sleep(0.5)
    survivors = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"sleep {marker}" in cmd:
            survivors.append(pid)
    assert survivors == []


@pytest.mark.slow
@needs_sandbox
def test_killing_or_stopping_the_parent_from_the_sandbox_hits_nothing(unchecked, tiny):
    # The parent is not in the sandbox's PID namespace: getppid() is the sandbox's own init, which
    # either refuses the signal (it runs as another uid) or ignores it (a namespace's init does).
    body = """
for sig in (19, 9):
    try:
        os.kill(os.getppid(), sig)
        found[str(sig)] = 'sent'
    except OSError as exc:
        found[str(sig)] = type(exc).__name__
found['ppid'] = os.getppid()
"""
    started = time.monotonic()
    result = evaluate(_candidate(body), tiny, device="cpu", trials=1, sandbox="required", timeout_s=60)
    found = _found(result)  # we are still here, and the candidate ran on after both signals
    assert found["ppid"] == 1 and {found["19"], found["9"]} <= {"sent", "PermissionError"}
    assert time.monotonic() - started < 30


@needs_sandbox
def test_memory_file_size_and_process_limits_stop_a_runaway_candidate(unchecked, tiny, monkeypatch):
    monkeypatch.setenv("KSCOUT_WORKER_MEMORY_GB", "2")
    monkeypatch.setenv("KSCOUT_WORKER_FILE_MB", "8")
    monkeypatch.setenv("KSCOUT_WORKER_NPROC", "48")
    body = """
import mmap
hold = []
try:
    while True:
        hold.append(mmap.mmap(-1, 128 << 20))  # address space, untouched: the cap, not the RAM, is hit
except OSError as exc:
    found['memory'] = (len(hold) * 128, exc.strerror)
del hold
try:
    with open('big', 'wb') as f:
        f.write(b'0' * (16 << 20))
except OSError as exc:
    found['file'] = exc.strerror
kids = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            import time
            time.sleep(1)
            os._exit(0)
        kids += 1
except OSError:
    found['forks'] = kids
"""
    found = _found(evaluate(_candidate(body), tiny, device="cpu", trials=1, sandbox="required"))
    assert found["memory"][0] < 2048 and found["memory"][1] == "Cannot allocate memory"
    assert found["file"] == "File too large"
    assert found["forks"] < 48


def test_sandbox_modes_off_and_unknown(monkeypatch):
    assert resolve_sandbox("off", "cpu") == "none"
    with pytest.raises(Exception, match="unknown sandbox mode 'jail'"):
        resolve_sandbox("jail", "cpu")
    monkeypatch.setenv("KSCOUT_SANDBOX", "off")
    assert resolve_sandbox(None, "cpu") == "none"


def test_required_fails_clearly_where_no_sandbox_can_be_made(monkeypatch):
    from evaluation import isolation

    monkeypatch.setitem(isolation._PROBE, "cpu", isolation._Probe(False, "bubblewrap (bwrap) is not installed"))
    with pytest.raises(isolation.SandboxError, match="no sandbox can be made here: bubblewrap"):
        resolve_sandbox("required", "cpu")
    monkeypatch.setattr(isolation, "_WARNED", False)
    with pytest.warns(isolation.UnsandboxedWarning, match="WITHOUT an OS sandbox"):
        assert resolve_sandbox("auto", "cpu") == "none"


def test_secret_looking_text_is_scrubbed():
    env = {"OPENAI_API_KEY": "not-a-pattern-but-a-value-123", "HOME": "/root"}
    text = "key=not-a-pattern-but-a-value-123 sk-ant-api03-abcdefghijklmnopqrstuv hf_ABCDEFGHIJKLMNOPQRSTUVWX /root"
    assert scrub(text, env) == "key=[redacted] [redacted] [redacted] /root"


@needs_sandbox
def test_an_import_path_under_tmp_is_visible_inside_the_sandbox(tmp_path, monkeypatch):
    """/tmp is a fresh, empty mount inside; a Python environment installed there (pip --target /tmp/site,
    as on a bare GPU machine) must be bound back, or the worker cannot import pydantic at all."""
    import subprocess
    import sys

    from evaluation import isolation

    site = tmp_path / "site"
    site.mkdir()
    (site / "kscout_tmp_probe.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(site))
    scratch = isolation.Scratch.make(None, "kscout-test-")
    try:
        cmd = isolation._bwrap_args(scratch, "cpu", None) + [
            sys.executable,
            "-c",
            "import kscout_tmp_probe, os; print(kscout_tmp_probe.VALUE, os.listdir('/tmp'))",
        ]
        env = dict(os.environ, PYTHONPATH=str(site))
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    finally:
        scratch.cleanup()
    assert done.returncode == 0, done.stderr[-500:]
    value, listing = done.stdout.split(" ", 1)
    assert value == "42"
    assert "kscout-home" not in listing  # only the bound paths exist under the fresh /tmp


def test_the_unsandboxed_warning_is_one_line_that_says_what_bubblewrap_is_for(monkeypatch):
    from evaluation import isolation

    failed = "bwrap failed here (exit 1): bwrap: setting up uid map:\n  Permission denied"
    monkeypatch.setitem(isolation._PROBE, "cpu", isolation._Probe(False, failed))
    monkeypatch.setattr(isolation, "_WARNED", False)
    with pytest.warns(isolation.UnsandboxedWarning) as caught:
        assert resolve_sandbox("auto", "cpu") == "none"
    assert [str(w.message) for w in caught] == [
        "candidate code runs WITHOUT an OS sandbox on this machine: bwrap failed here (exit 1): bwrap: setting up "
        "uid map: Permission denied. Every result records isolation='none' and cannot be promoted without an "
        "explicit override; the sandbox is bubblewrap (apt-get install bubblewrap)"
    ]
    with warnings.catch_warnings():  # once per process: a second candidate warns no more
        warnings.simplefilter("error")
        assert resolve_sandbox("auto", "cpu") == "none"


def test_the_probe_finds_the_harness_and_torch_without_importing_them():
    import subprocess
    import sys

    from evaluation.isolation import _PROBE_SCRIPT

    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _PROBE_SCRIPT, "-1"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-500:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "importlib.util" in imported
    assert not {"torch", "evaluation", "evaluation.worker"} & imported


def test_the_probe_fails_where_torch_cannot_be_found():
    import subprocess
    import sys

    from evaluation.isolation import _PROBE_SCRIPT

    # -S: no site-packages, so torch is nowhere on the path (the project is, from the working folder)
    done = subprocess.run([sys.executable, "-S", "-c", _PROBE_SCRIPT, "-1"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1
    assert "torch cannot be imported in the sandbox" in done.stderr
