"""The console script's exit (agent.cli:console): what a normal exit does that matters, then os._exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _console(body: str, *argv: str) -> subprocess.CompletedProcess:
    script = (
        "import atexit, sys, threading, time\n"
        + body
        + f"\nsys.argv = ['kscout', *{list(argv)!r}]\nfrom agent.cli import console\nconsole()\n"
        + "print('after console', flush=True)\n"
    )
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_bad_input_exits_2_after_the_atexit_handlers_and_a_late_thread_finish():
    body = (
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "def late():\n    time.sleep(0.3)\n    print('thread done', flush=True)\n"
        "threading.Thread(target=late).start()\n"
    )
    done = _console(body, "problems", "--device", "nope")
    assert done.returncode == 2
    assert "--device must be cpu or cuda" in done.stderr
    assert done.stdout.splitlines() == ["thread done", "atexit ran"]  # the thread first, as Python does
    assert "after console" not in done.stdout  # console() never returns


def test_an_idle_thread_pool_left_open_does_not_hold_the_exit():
    body = "import concurrent.futures as cf\npool = cf.ThreadPoolExecutor(2)\npool.submit(lambda: 1).result()\n"
    done = _console(body, "problems", "--device", "nope")
    assert done.returncode == 2  # not the subprocess timeout: its idle workers were told to end


def test_a_command_that_succeeds_exits_0_with_its_output_flushed():
    done = _console("", "problems", "--json")
    assert done.returncode == 0
    assert done.stdout.startswith('{"device":"cpu","problems":[') and done.stdout.rstrip().endswith("]}")


def test_sys_exit_with_a_message_prints_it_and_exits_1():
    body = "import agent.cli\nagent.cli.main = lambda argv=None: sys.exit('no such thing')\n"
    done = _console(body)
    assert done.returncode == 1 and done.stderr.strip() == "no such thing"
