"""Benchmark every built-in seed kernel: `python -m evaluation.bench [--problems a,b] [--out results.csv]`.

Each seed is evaluated (correctness on every declared case, then timing against eager and
torch.compile), then timed once more in a second, separate process, so the table can show the
run-to-run difference of the p50 next to the spread each run reports: a speedup smaller than that
difference is noise. The CSV is tidy, one measurement per row (kernel, provider, metric, unit, shape,
dtype, p20/p50/p80, GPU, timestamp, versions). On the CPU it still runs, correctness only.

`python -m evaluation.bench --transport MB`: how fast a judged output crosses from a worker to the
parent (framed, MAC'd, mapped without a copy), against a bare pipe moving the same bytes between the
same two processes in the same run. Large outputs cross once per trial, so at KernelBench sizes this
rate bounds how many evaluations an hour a GPU can judge.

`python -m evaluation.bench --compare`: the parent's host comparison of a finite float32 output with
its float64 reference, the short passes (`compare._host_finite`) against the general ones, at the sizes
a parent judges on the host (up to `HOST_COMPARE_ELEMENTS`), median of 15 each, in the same run.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import sys
from collections.abc import Iterator
from pathlib import Path

from evaluation.compare import _host_finite as _HOST_FINITE
from evaluation.problem import list_problems

CSV_FIELDS = (
    "kernel",
    "provider",
    "metric",
    "unit",
    "shape",
    "dtype",
    "p20",
    "p50",
    "p80",
    "gpu",
    "timestamp",
    "torch",
    "triton",
    "kernelscout",
    "status",
)


def _rows(result, run: int, stamp: str) -> list[dict]:
    fp = result.fingerprint
    common = dict(
        kernel=f"{result.problem_name}_seed",
        gpu=fp.device_name,
        timestamp=stamp,
        torch=fp.torch_version,
        triton=fp.triton_version,
        kernelscout=fp.kernelscout_version,
        status=result.status.value,
    )
    rows = []
    if not result.timing:
        for r in result.shape_results:
            shape, dtype = r.case_id.split("|")
            rows.append(
                dict(
                    common,
                    provider="triton_seed",
                    metric="correct",
                    unit="bool",
                    shape=shape,
                    dtype=dtype,
                    p20="",
                    p50=int(r.passed),
                    p80="",
                )
            )
        return rows
    for t in result.timing:
        shape = t.case_id.split("|")[0]
        stats = [("triton_seed", t.candidate)] + [(b.name, b.timing) for b in t.baselines if b.timing]
        for provider, s in stats:
            rows.append(
                dict(
                    common,
                    provider=provider,
                    metric=f"latency_run{run}",
                    unit="ms",
                    shape=shape,
                    dtype=t.dtype,
                    p20=s.latency_ms_p20,
                    p50=s.latency_ms_p50,
                    p80=s.latency_ms_p80,
                )
            )
        if t.bytes_moved:
            c = t.candidate
            gbps = [t.bytes_moved / (ms * 1e-3) / 1e9 for ms in (c.latency_ms_p80, c.latency_ms_p50, c.latency_ms_p20)]
            rows.append(
                dict(
                    common,
                    provider="triton_seed",
                    metric=f"bandwidth_run{run}",
                    unit="GB/s",
                    shape=shape,
                    dtype=t.dtype,
                    p20=gbps[0],
                    p50=gbps[1],
                    p80=gbps[2],
                )
            )
    return rows


def _correctness_table(pairs, console) -> None:
    from rich.table import Table

    table = Table(title="seed kernels (correctness only)")
    for col in ("problem", "shape", "dtype", "passed", "max abs err"):
        table.add_column(col)
    for first, _ in pairs:
        for r in first.shape_results:
            shape, dtype = r.case_id.split("|")
            err = "-" if r.max_abs_error is None else f"{r.max_abs_error:.3g}"
            table.add_row(first.problem_name, shape, dtype, "yes" if r.passed else "NO", err)
    console.print(table)
    for first, _ in pairs:
        if not first.passed:
            console.print(f"{first.problem_name}: {first.status.value}: {first.message}", markup=False)
    console.print(f"timing: {pairs[0][0].timing_note}" if pairs else "no seeded problems", markup=False)


def _table(pairs) -> None:
    from evaluation.cli import make_console

    console = make_console()
    if not any(first.timing for first, _ in pairs):
        _correctness_table(pairs, console)
        return
    from rich.table import Table

    table = Table(title="seed kernels")
    for col in (
        "problem",
        "shape",
        "dtype",
        "p50 ms",
        "p20-p80 ms",
        "run2-run1 p50",
        "GB/s",
        "% ceiling",
        "x eager",
        "x compile",
    ):
        table.add_column(col)
    notes = set()
    for first, second in pairs:
        if not first.timing:
            notes.add(first.timing_note or f"{first.problem_name}: {first.status.value}")
            for r in first.shape_results:
                shape, dtype = r.case_id.split("|")
                table.add_row(
                    first.problem_name, shape, dtype, "-", "-", "-", "-", "-", "-", "passed" if r.passed else "FAILED"
                )
            if not first.passed:
                notes.add(f"{first.problem_name}: {first.status.value}: {first.message}")
            continue
        again = {t.case_id: t for t in second.timing}
        for t in first.timing:
            c = t.candidate
            other = again.get(t.case_id)
            delta = f"{100 * (other.candidate.latency_ms_p50 / c.latency_ms_p50 - 1):+.1f}%" if other else "-"
            sp = {s.baseline: s for s in t.speedups}
            cell = lambda b: f"{sp[b].ratio:.2f} [{sp[b].ratio_low:.2f}, {sp[b].ratio_high:.2f}]" if b in sp else "-"  # noqa: E731
            table.add_row(
                first.problem_name,
                t.case_id.split("|")[0],
                t.dtype,
                f"{c.latency_ms_p50:.4f}",
                f"{c.latency_ms_p20:.4f}-{c.latency_ms_p80:.4f}",
                delta,
                f"{t.achieved_gbps:.0f}" if t.achieved_gbps else "-",
                f"{t.pct_of_ceiling:.0f}" if t.pct_of_ceiling else "-",
                cell("eager"),
                cell("torch_compile"),
            )
    console.print(table)
    for note in sorted(notes):
        console.print(f"note: {note}", markup=False, highlight=False)


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def _logged(info, run, call):
    """One evaluation or timing with a progress line on stderr, so a long GPU run shows where it is."""
    import time

    start = time.perf_counter()
    result = call()
    speed = result.speedup("eager")
    speed_text = "" if speed is None else f", x{speed:.2f} vs eager (geomean)"
    print(
        f"[bench] {info.name} run {run}: {result.status.value} in {time.perf_counter() - start:.1f} s{speed_text}",
        file=sys.stderr,
        flush=True,
    )
    return result


def _send_outputs(fd: int, key: bytes, numel: int, reps: int, framed: bool) -> None:
    """The worker's side: `reps` float32 outputs of `numel`, framed as the worker sends them, or raw."""
    import os

    import torch

    from evaluation import protocol

    out = torch.randn(numel)
    for i in range(reps):
        if framed:
            parts, strides = protocol.package_parts(out)
            message = protocol.Outputs(index=0, phase="trial", trial=i, strides=strides)
            protocol.write_frame(fd, key, i, message, parts)
        else:
            protocol.write_all(fd, out.numpy())
    os.close(fd)


def transport(mb: int, reps: int = 4) -> dict[str, float]:
    """GB/s of the output transport and of a bare pipe between the same two processes (see __doc__)."""
    import multiprocessing
    import os
    import select
    import time

    from evaluation import protocol
    from evaluation.isolation import widen_pipe

    numel = mb * (1 << 20) // 4
    rates = {}
    for framed in (False, True, False, True):  # interleaved: a drift of the machine hits both
        key = os.urandom(32)
        r, w = os.pipe()
        widen_pipe(r)
        proc = multiprocessing.get_context("fork").Process(target=_send_outputs, args=(w, key, numel, reps, framed))
        proc.start()
        os.close(w)
        select.select([r], [], [])  # the clock starts when the first byte is ready, not at the child's start
        t0 = time.perf_counter()
        got = 0
        if framed:
            reader = protocol.FrameReader(key)
            while reader.read_from(r):
                for _message, blob in reader.frames():
                    got += protocol.unpackage(blob)["items"][0].numel()
        else:
            buf = memoryview(bytearray(numel * 4))
            while True:
                filled = 0
                while filled < len(buf) and (n := os.readv(r, [buf[filled:]])):
                    filled += n
                if not filled:
                    break
                got += filled // 4
        seconds = time.perf_counter() - t0
        proc.join()
        os.close(r)
        if got != numel * reps:
            raise RuntimeError(f"transport bench lost data: {got} of {numel * reps} values")
        name = "framed" if framed else "bare_pipe"
        rates[name] = max(rates.get(name, 0.0), numel * 4 * reps / seconds / 1e9)
    rates["ratio"] = rates["framed"] / rates["bare_pipe"]
    return rates


def host_compare(sizes=(4096, 1 << 17, 1 << 19), repeats: int = 15, busy: int = 0) -> list[dict]:
    """Per size: the median ms of one host comparison by the general passes and by the short ones;
    `busy` processes spin on the CPU meanwhile, as a batch's workers keep cores busy beside the parent."""
    import statistics
    import subprocess
    import time

    import torch

    from evaluation import compare
    from evaluation.records import Tolerance

    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        tol = Tolerance(atol=1e-4, rtol=1e-4)
        gen = torch.Generator().manual_seed(0)
        out = []
        for n in sizes:
            exp = torch.randn(n, generator=gen, dtype=torch.float64)
            act = (exp + 1e-6 * torch.randn(n, generator=gen, dtype=torch.float64)).float()
            ms = {}
            for name, short in (("general", None), ("short", compare._host_finite)):
                compare._host_finite = short or (lambda *a: None)
                try:
                    times = []
                    for _ in range(repeats + 2):
                        t = time.perf_counter()
                        assert compare._stream(act, exp, tol, 0, "", {}, exact=False).passed
                        times.append(time.perf_counter() - t)
                finally:
                    compare._host_finite = _HOST_FINITE
                ms[name] = statistics.median(times[2:]) * 1e3
            out.append({"elements": n, "general_ms": ms["general"], "short_ms": ms["short"]})
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    return out


_SPAWN_STEPS = {
    "interpreter": "pass",
    "harness imports": "import evaluation.worker, evaluation.protocol",
    "torch import": "import torch, triton",
    "warm-up": "import evaluation.worker as w; w.warm_up({device!r})",
}


# the namespaces isolation._bwrap_args makes, each left out in turn by `spawn` (diagnostics only)
_SPAWN_NAMESPACES = ("--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")


def spawn(device: str, repeats: int = 2, together: int = 3) -> Iterator[dict]:
    """Where a worker's start goes: each layer (the interpreter, the harness's imports, torch and
    Triton, the whole warm-up) timed plain and inside the sandbox, median of `repeats`, then the
    warm-up `together` at once, as an evaluation starts its correctness, timing and baseline workers.
    The sandbox is the one the workers get (isolation._bwrap_args, the same environment). After the
    bare interpreter come the sandbox's own costs: `together` sandboxes at once, then one without each
    namespace it makes (a network namespace can wait on the teardown of earlier ones); diagnostics only,
    the workers' sandbox is never changed here. Rows come as they are measured, so a run cut short by a
    time limit still shows the layers it reached."""
    import statistics
    import subprocess
    import time

    from evaluation import isolation

    def command(code: str, sandboxed: bool, drop: str = "") -> tuple[list[str], dict, isolation.Scratch]:
        scratch = isolation.Scratch.make(isolation.scratch_root(), "kscout-bench-")
        env = isolation.worker_env(device)
        cmd = [sys.executable, "-c", code]
        if sandboxed:
            uid = isolation._sandbox_uid()
            isolation._prepare_for_uid(scratch, uid)
            cmd = [a for a in isolation._bwrap_args(scratch, device, uid) if a != drop] + cmd
            env = isolation._sandbox_env(env)
        return cmd, env, scratch

    def wall(code: str, sandboxed: bool, n: int = 1, drop: str = "") -> float:
        runs = [command(code, sandboxed, drop) for _ in range(n)]
        t = time.perf_counter()
        procs = [
            subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for cmd, env, _ in runs
        ]
        errors = [p.communicate()[1] for p in procs]
        seconds = time.perf_counter() - t
        for (_, _, scratch), p, err in zip(runs, procs, errors):
            scratch.cleanup()
            if p.returncode:
                raise RuntimeError(f"{code!r} failed (exit {p.returncode}): {err.decode(errors='replace')[-400:]}")
        return seconds

    sandbox = isolation.probe_sandbox(device).ok
    for i, (step, code) in enumerate(_SPAWN_STEPS.items()):
        code = code.format(device=device)
        row = {"step": step, "plain_s": statistics.median(wall(code, False) for _ in range(repeats))}
        row["sandboxed_s"] = statistics.median(wall(code, True) for _ in range(repeats)) if sandbox else None
        yield row
        if i == 0 and sandbox:  # the sandbox alone, around the bare interpreter
            yield {
                "step": f"{step}, {together} at once",
                "plain_s": wall(code, False, together),
                "sandboxed_s": wall(code, True, together),
            }
            for flag in _SPAWN_NAMESPACES:
                seconds = statistics.median(wall(code, True, drop=flag) for _ in range(repeats))
                yield {"step": f"{step}, no {flag}", "plain_s": None, "sandboxed_s": seconds}
    warm = _SPAWN_STEPS["warm-up"].format(device=device)
    yield {
        "step": f"warm-up, {together} at once",
        "plain_s": wall(warm, False, together),
        "sandboxed_s": wall(warm, True, together) if sandbox else None,
    }


def main(argv: list[str] | None = None) -> int:
    from evaluation.fingerprint import resolve_device
    from evaluation.harness import evaluate, time_many

    parser = argparse.ArgumentParser(prog="python -m evaluation.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--problems", help="comma-separated built-in names (default: every one with a seed)")
    parser.add_argument("--out", type=Path, help="write the tidy CSV here")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--trials", type=int, default=1, help="correctness trials per case (timing needs one pass)")
    parser.add_argument("--transport", type=int, metavar="MB", help="time the worker->parent output transport")
    parser.add_argument("--compare", action="store_true", help="time the parent's host comparison, both paths")
    parser.add_argument("--busy", type=int, default=0, help="with --compare: processes spinning on the CPU meanwhile")
    parser.add_argument("--spawn", action="store_true", help="time each layer of a worker's start, plain and sandboxed")
    args = parser.parse_args(argv)
    if args.spawn:
        dev = resolve_device(args.device)
        print(f"{'step':<36}  plain s  sandboxed s   ({dev})")
        for r in spawn(dev):
            plain, box = ("-" if r[k] is None else f"{r[k]:.2f}" for k in ("plain_s", "sandboxed_s"))
            print(f"{r['step']:<36}  {plain:>7}  {box:>11}", flush=True)
        return 0
    if args.compare:
        print(f"elements  general ms  short ms  ratio   ({args.busy} busy processes beside)")
        for r in host_compare(busy=args.busy):
            g, q = r["general_ms"], r["short_ms"]
            print(f"{r['elements']:>8}  {g:>10.2f}  {q:>8.2f}  {g / q:>5.2f}x")
        return 0
    if args.transport:
        rates = transport(args.transport)
        print(
            f"outputs of {args.transport} MB, 4 a run, best of 2 runs each: framed {rates['framed']:.2f} GB/s, "
            f"bare pipe {rates['bare_pipe']:.2f} GB/s, ratio {rates['ratio']:.2f}"
        )
        return 0
    dev = resolve_device(args.device)
    problems = [p for p in list_problems(dev) if p.seed_path]
    if args.problems:
        wanted = [w.strip() for w in args.problems.split(",") if w.strip()]
        unknown = sorted(set(wanted) - {p.name for p in problems})
        if unknown:
            print(f"bench: no seeded built-in problem named {', '.join(unknown)}", file=sys.stderr)
            return 2
        problems = [p for p in problems if p.name in wanted]
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat()
    pairs, rows = [], []
    for info in problems:
        source = Path(info.seed_path).read_text()
        first = _logged(info, 1, lambda: evaluate(source, info, device=dev, trials=args.trials, timeout_s=600))
        runs = [first, first]
        if dev != "cpu" and first.passed:  # a second timing process for the same kernel: the run-to-run check
            runs[1] = _logged(
                info, 2, lambda: time_many([(source, first)], info, device=dev, timeout_s=600, baselines=("eager",))[0]
            )
        pairs.append(tuple(runs))
        rows += _rows(runs[0], 1, stamp)
        if runs[1] is not runs[0]:
            rows += _rows(runs[1], 2, stamp)
        # Written after every problem: a run cut short by a time limit still leaves what it measured.
        if args.out:
            _write_csv(args.out, rows)
    _table(pairs)
    return 0 if all(a.passed for a, _ in pairs) else 1


if __name__ == "__main__":
    sys.exit(main())
