"""The stack sampler (evaluation/stacks.py): where a process's threads spend their wall time."""

from __future__ import annotations

import threading
import time

from evaluation.stacks import StackSampler, main, summarize


def _waits_in_here(stop: threading.Event) -> None:
    stop.wait(5.0)


def test_a_thread_waiting_in_a_function_is_sampled_there():
    stop = threading.Event()
    worker = threading.Thread(target=_waits_in_here, args=(stop,), name="waiter")
    worker.start()
    sampler = StackSampler(interval_s=0.002).start()
    time.sleep(0.3)
    sampler.stop()
    stop.set()
    worker.join()
    waiter = {stack: n for stack, n in sampler.counts.items() if stack.startswith("waiter;")}
    assert sampler.samples >= 20
    in_fn = sum(n for stack, n in waiter.items() if "test_stacks.py:_waits_in_here" in stack)
    assert in_fn >= 0.8 * sum(waiter.values()) > 0
    assert not any(stack.startswith("kscout-stacks;") for stack in sampler.counts)  # never itself


def test_summary_counts_a_recursive_function_once_per_sample_and_names_the_innermost_frame():
    lines = ["Main;a;b;a;c 30", "Main;a;d 10", "judge;wait 5", ""]
    out = summarize(lines, top=5, interval_s=0.01)
    assert out[0] == "Main: 0.40 s sampled"
    assert "     0.40 s 100.0%  a" in out  # on every sample, not 70 (counted twice in the first stack)
    assert "     0.30 s  75.0%  b" in out
    inner = out.index("  innermost:")
    assert out[inner + 1] == "     0.30 s  75.0%  c"
    assert "judge: 0.05 s sampled" in out


def test_the_command_refuses_a_missing_file(tmp_path, capsys):
    assert main([str(tmp_path / "none.txt")]) == 2
    assert "no file" in capsys.readouterr().err


def test_the_command_prints_a_written_profile(tmp_path, capsys):
    sampler = StackSampler(interval_s=0.002).start()
    time.sleep(0.05)
    sampler.stop()
    path = tmp_path / "stacks.txt"
    sampler.write(path)
    assert main([str(path), "--top", "3"]) == 0
    assert "MainThread:" in capsys.readouterr().out
