"""Where a process's threads spend their wall time: a sampling profiler with no dependencies.

cProfile sees one thread and slows every Python call; the parent of an evaluation does its judging in
threads beside the main one, and the question is wall time (waits included), not CPU time. Here a
daemon thread reads every other thread's stack (`sys._current_frames`) every few milliseconds and
counts each stack seen. Stacks are written in the collapsed format that flame-graph tools read
("thread;outer;...;inner COUNT"), and `python -m evaluation.stacks FILE` prints, per thread, the
functions that were on the stack in the largest share of its samples.

`kscout` samples itself when KSCOUT_STACKS names a file (agent/cli.py): `.ci/gpu`'s eval step uses it
to split the parent's seconds on the device.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
from pathlib import Path
from typing import Optional

INTERVAL_S = 0.005


def _where(code) -> str:
    path = code.co_filename
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:  # the standard library, or the project: the last two parts say which
        path = "/".join(Path(path).parts[-2:])
    return f"{path}:{code.co_name}"


class StackSampler:
    """Counts the stacks of every thread but its own, every `interval_s`, until `stop`."""

    def __init__(self, interval_s: float = INTERVAL_S):
        self.interval_s = interval_s
        self.counts: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "StackSampler":
        self._thread = threading.Thread(target=self._run, name="kscout-stacks", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval_s):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                stack = []
                f = frame
                while f is not None:
                    stack.append(_where(f.f_code))
                    f = f.f_back
                thread = names.get(ident, str(ident)).replace(";", ",")
                self.counts[";".join([thread, *reversed(stack)])] += 1
            self.samples += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def write(self, path: Path) -> None:
        lines = [f"{stack} {n}" for stack, n in self.counts.most_common()]
        path.write_text("\n".join(lines) + "\n")


def start_from_env() -> None:
    """Sample this process from now to its exit when KSCOUT_STACKS names a file to write."""
    target = os.environ.get("KSCOUT_STACKS")
    if not target:
        return
    import atexit

    sampler = StackSampler().start()

    def finish() -> None:
        sampler.stop()
        try:
            sampler.write(Path(target))
        except OSError as exc:
            print(f"kscout: cannot write the stack samples to {target}: {exc}", file=sys.stderr)

    atexit.register(finish)


def summarize(lines: list[str], top: int = 25, interval_s: float = INTERVAL_S) -> list[str]:
    """Per thread: its samples (as seconds), then the functions on its stack in the most samples,
    each with its inclusive seconds and share of the thread's samples, then the innermost frames
    (where the thread was when sampled: its own time, or the call it waited in)."""
    per_thread: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    leaves: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    totals: collections.Counter[str] = collections.Counter()
    for line in lines:
        if not line.strip():
            continue
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        thread, calls = frames[0], frames[1:]
        count = int(n)
        totals[thread] += count
        for fn in set(calls):  # inclusive: a function counts once per sample, however deep it recurses
            per_thread[thread][fn] += count
        if calls:
            leaves[thread][calls[-1]] += count
    out = []
    for thread, total in totals.most_common():
        out.append(f"{thread}: {total * interval_s:.2f} s sampled")
        for fn, n in per_thread[thread].most_common(top):
            out.append(f"  {n * interval_s:7.2f} s {100 * n / total:5.1f}%  {fn}")
        out.append("  innermost:")
        for fn, n in leaves[thread].most_common(max(5, top // 3)):
            out.append(f"  {n * interval_s:7.2f} s {100 * n / total:5.1f}%  {fn}")
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evaluation.stacks", description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path, help="collapsed stacks written under KSCOUT_STACKS")
    ap.add_argument("--top", type=int, default=25, help="functions listed per thread")
    args = ap.parse_args(argv)
    if not args.file.is_file():
        print(f"no file {args.file}", file=sys.stderr)
        return 2
    print("\n".join(summarize(args.file.read_text().splitlines(), args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
