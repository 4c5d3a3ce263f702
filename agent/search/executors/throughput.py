"""Evaluation throughput: `python -m agent.search.executors.throughput --problem softmax --n 16 --batch 8`.

Runs N evaluations of a built-in problem through the local executor, as a search does (batches of
siblings checked in parallel, then timed together against the baselines), once per configuration:

- `cold`: every process started for its phase and every search-level cache off (what a search paid
  before warm workers and search contexts: a new seed, new references and new baselines per batch);
- `warm`: warm workers from the pool and one search context (evaluation/pool.py, context.py), judged
  outputs through the pipe as MAC'd frames (`KSCOUT_OUTPUT_TRANSPORT=pipe`, protocol.py);
- `files`: as `warm`, with judged outputs sent as files (`KSCOUT_OUTPUT_TRANSPORT=file`);
- `shared`: as `warm`, with judged outputs copied into memory shared with the parent, on the GPU
  where they lie (`KSCOUT_OUTPUT_TRANSPORT=shared`, evaluation/shared.py: the default).

The siblings are the problem's seed kernel, each made distinct by a comment (same kernels, different
candidates: every one is checked, timed and judged in full). For each configuration it prints the wall
time per evaluation, split by phase as the workers and the parent report them (evaluation/phases.py),
evaluations per GPU-hour and the GPU's busy fraction (NVML, sampled), and beside them the floor: the
same correctness calls and timed cases in this one process, with no isolation and no process start.
On a machine without a GPU it still runs (correctness only, Triton's interpreter); its rates say
nothing about a GPU's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

PHASES = (
    ("start", "process start and sandbox"),
    ("imports", "imports and CUDA context"),
    ("compile", "Triton compile and load"),
    ("references", "references (parent: inputs, fp64 outputs)"),
    ("judge_wait", "parent waiting to judge (slots, shared refs)"),
    ("lane_wait", "checks compiled, waiting for a GPU lane"),
    ("correctness", "correctness calls and comparisons"),
    ("timing", "timing (prepare, samples)"),
    ("baselines", "baselines (eager, torch.compile)"),
)


class GpuBusy:
    """Samples NVML's utilization every 0.2 s while it runs; `fraction` is their mean (None without NVML)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "GpuBusy":
        try:
            import torch

            if not torch.cuda.is_available():
                return self
            torch.cuda.utilization()  # raises without pynvml
        except Exception:
            return self

        def loop() -> None:
            import torch

            while not self._stop.wait(0.2):
                try:
                    self.samples.append(float(torch.cuda.utilization()) / 100.0)
                except Exception:
                    return

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def fraction(self) -> Optional[float]:
        return statistics.fmean(self.samples) if self.samples else None


def siblings(seed_source: str, n: int, tag: str) -> list[str]:
    return [f"{seed_source}\n# throughput bench: {tag} sibling {i}\n" for i in range(n)]


def split(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per phase, summed over every worker process and the parent's judging."""
    out = {key: 0.0 for key, _ in PHASES}
    for row in rows:
        w = row.get("worker") or {}
        stamps, seconds = w.get("stamps", {}), w.get("seconds", {})
        request_at = row["exited_at"] - row["wall_s"]
        if row["role"] == "baselines" or (row["role"] == "remeasure" and row["candidates"] == 0):
            out["baselines"] += row["wall_s"]
            continue
        if "started" in stamps:
            if row["warm"]:  # started and warmed before it was needed: only the wait for it counts
                ready = stamps.get("warm", request_at)
                out["start"] += max(0.0, ready - request_at)
                out["imports"] += max(0.0, stamps.get("armed", ready) - max(request_at, ready))
            else:  # the sandbox, then the interpreter, the imports, the request and the CUDA context
                began = min(stamps.get("process", stamps["started"]), stamps["started"])
                out["start"] += max(0.0, began - request_at)
                out["imports"] += max(0.0, stamps.get("armed", began) - began)
        out["compile"] += seconds.get("compile", 0.0)
        out["correctness"] += seconds.get("correctness", 0.0) + seconds.get("profiler", 0.0)
        out["timing"] += seconds.get("timing", 0.0) + seconds.get("prepare", 0.0)
        waited = row.get("parent_wait_s") or 0.0  # rows from before the judge's own split: none
        out["references"] += row["parent_inputs_s"] + row["parent_judge_s"] - waited
        out["judge_wait"] += waited
        if row["role"] == "correctness":  # a gated check at its barrier (a baseline's is in its wall)
            out["lane_wait"] += row.get("gate_s") or 0.0
    return out


def run_config(
    name: str,
    problem: str,
    device: str,
    n: int,
    batch: int,
    sandbox: Optional[str],
    trials: int,
    progress: Optional[Path] = None,
    lanes: Optional[int] = None,
) -> dict[str, Any]:
    """`progress`: where the phase rows so far are written after every batch (a run cut short by a
    time limit still leaves them). `lanes`: checks sharing the GPU at once (the executor's default
    where None)."""
    import evaluation
    from agent.search.executors.local import LocalExecutor
    from evaluation import phases, pool
    from evaluation.records import BASELINES

    info = evaluation.load_problem(problem, device)
    if not info.seed_source:
        raise SystemExit(f"{problem} has no seed kernel to evaluate")
    sources = siblings(info.seed_source, n, name)
    pool.close_all()
    # cold: no warm worker; warm: a batch's checks and its timing worth (also on a CPU, for the test)
    os.environ["KSCOUT_WARM_WORKERS"] = "0" if name == "cold" else str(batch + 1)
    os.environ["KSCOUT_OUTPUT_TRANSPORT"] = {"files": "file", "shared": "shared"}.get(name, "pipe")
    evaluator = evaluation if name == "cold" else None  # an explicit evaluator: no search context
    ex = LocalExecutor(device, workers=batch, trials=trials, sandbox=sandbox, evaluator=evaluator, lanes=lanes)
    batch_ends: list[float] = []  # seconds from the start at which each batch's last verdict landed
    statuses: list[str] = []
    failures: dict[str, str] = {}  # status -> the first message with it
    t0 = time.monotonic()
    first: Optional[float] = None
    with phases.recording() as rows, GpuBusy() as busy:
        try:
            for start in range(0, n, batch):
                chunk = sources[start : start + batch]
                if progress is not None and rows:
                    progress.write_text(json.dumps(rows, indent=0))
                baselines = BASELINES if start == 0 else ("eager",)
                for _, result in ex.evaluate_batch(chunk, info, baselines=baselines):
                    print(
                        f"  {time.monotonic() - t0:7.1f} s  {result.status.value}"
                        f"{' ' + str(result.error_class) if not result.passed else ''}",
                        file=sys.stderr,
                        flush=True,
                    )
                    statuses.append(result.status.value)
                    if not result.passed:
                        failures.setdefault(result.status.value, f"{result.error_class}: {result.message}")
                    first = first if first is not None else time.monotonic() - t0
                batch_ends.append(time.monotonic() - t0)
        finally:
            ex.close()
            if progress is not None:
                progress.write_text(json.dumps(rows, indent=0))
    wall = time.monotonic() - t0
    # the steady state: every batch after the first, whose workers, references and baselines are warm
    later = len(statuses) - min(batch, len(statuses))
    steady = (wall - batch_ends[0]) / later if later and batch_ends else None
    pool.close_all()
    os.environ.pop("KSCOUT_WARM_WORKERS", None)
    os.environ.pop("KSCOUT_OUTPUT_TRANSPORT", None)
    return dict(
        config=name if lanes is None or device == "cpu" else f"{name}, {ex.lanes} lanes",
        lanes=ex.lanes,
        evaluations=len(statuses),
        passed=statuses.count("passed"),
        statuses=sorted(set(statuses)),
        failures=failures,
        wall_s=wall,
        first_verdict_s=first,
        per_eval_s=wall / max(1, len(statuses)),
        per_gpu_hour=3600.0 * len(statuses) / wall if wall else None,
        steady_per_eval_s=steady,
        steady_per_gpu_hour=3600.0 / steady if steady else None,
        gpu_busy=busy.fraction,
        phases=split(rows),
        rechecked_alone=ex.rechecked,
        waited_for_memory=ex.memory_waits,
        recheck_reasons=ex.recheck_reasons,
        processes=len(rows),
        warm_processes=sum(1 for r in rows if r["warm"]),
        rows=rows,
    )


def floor(problem: str, device: str, trials: int) -> dict[str, Any]:
    """The same correctness calls (every case, `trials` random trials, fp64 reference) and the timed
    cases (candidate only, CUDA graphs) in this one warm process: no isolation, no process start."""
    import importlib.util
    import tempfile

    import torch

    import evaluation
    from evaluation.compare import compare
    from evaluation.correctness import References, regular_trials, timing_sets
    from evaluation.inputs import trial_inputs
    from evaluation.worker import build

    info = evaluation.load_problem(problem, device)
    refs = References(info, device, 12345)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "floor_candidate.py"
        path.write_text(info.seed_source or "")
        spec = importlib.util.spec_from_file_location("floor_candidate", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules["floor_candidate"] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    t0 = time.monotonic()
    worst_ok = True
    for case in info.shape_cases:
        pm = refs.module(case.params)
        model, _ = build(module.ModelNew, pm, 12345, refs.model(case.params).state_dict(), device, case.dtype)
        for trial in regular_trials(777, trials):
            x = trial_inputs(pm, case.dtype, trial, device)
            with torch.no_grad():
                out = model(*x)
            from evaluation import protocol

            verdict = compare(protocol.package(out), refs.expected(case, x), case.dtype, info.tolerances[case.dtype])
            worst_ok = worst_ok and verdict.passed
    correctness_s = time.monotonic() - t0
    timing_s = 0.0
    if device == "cuda":
        from evaluation.harness import timed_cases
        from evaluation.timing import Bench

        bench = Bench()
        t1 = time.monotonic()
        for _, case in timed_cases(info):
            pm = refs.module(case.params)
            model, _ = build(module.ModelNew, pm, 12345, refs.model(case.params).state_dict(), device, case.dtype)
            sets = [trial_inputs(pm, case.dtype, s, device) for s in timing_sets(12345)]
            with torch.no_grad():
                bench.measure(bench.prepare(model, sets))
        timing_s = time.monotonic() - t1
    per = correctness_s + timing_s
    return dict(
        config="floor",
        correct=worst_ok,
        correctness_s=correctness_s,
        timing_s=timing_s,
        per_eval_s=per,
        per_gpu_hour=3600.0 / per if per else None,
    )


def render(results: list[dict[str, Any]], floor_row: Optional[dict[str, Any]], console) -> None:
    from rich.table import Table

    table = Table(title="evaluation throughput (seconds per evaluation, summed over processes)")
    table.add_column("phase")
    for r in results:
        table.add_column(r["config"], justify="right")
    for key, label in PHASES:
        table.add_row(label, *[f"{r['phases'][key] / max(1, r['evaluations']):.2f}" for r in results])
    table.add_row("wall per evaluation", *[f"{r['per_eval_s']:.2f}" for r in results])
    table.add_row("first verdict after", *[f"{r['first_verdict_s'] or 0:.1f}" for r in results])
    table.add_row("evaluations per GPU-hour", *[f"{r['per_gpu_hour']:.0f}" for r in results])
    table.add_row(
        "the same after the first batch",
        *[f"{r['steady_per_gpu_hour']:.0f}" if r.get("steady_per_gpu_hour") else "n/a" for r in results],
    )
    table.add_row("GPU busy", *[f"{r['gpu_busy']:.0%}" if r["gpu_busy"] is not None else "n/a" for r in results])
    table.add_row("passed / evaluated", *[f"{r['passed']}/{r['evaluations']}" for r in results])
    table.add_row("worker processes (warm)", *[f"{r['processes']} ({r['warm_processes']})" for r in results])
    table.add_row("checks run again alone", *[str(r.get("rechecked_alone", 0)) for r in results])
    table.add_row("checks that waited for device memory", *[str(r.get("waited_for_memory", 0)) for r in results])
    console.print(table)
    for r in results:
        for status, message in r["failures"].items():
            console.print(f"{r['config']}: first {status}: {message}", markup=False)
    if floor_row is not None:
        console.print(
            f"floor (one warm process, no isolation): {floor_row['per_eval_s']:.2f} s per evaluation "
            f"(correctness {floor_row['correctness_s']:.2f} s, timing {floor_row['timing_s']:.2f} s), "
            f"{floor_row['per_gpu_hour']:.0f} per GPU-hour"
        )
    by = {r["config"]: r for r in results}
    for name in ("warm", "files", "shared"):
        if "cold" in by and name in by and by[name]["per_eval_s"]:
            console.print(f"{name} / cold rate: {by['cold']['per_eval_s'] / by[name]['per_eval_s']:.2f}x")


def main(argv: Optional[list[str]] = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(
        prog="python -m agent.search.executors.throughput", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--problem", default="softmax")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--n", type=int, default=16, help="evaluations per configuration")
    parser.add_argument("--batch", type=int, default=8, help="siblings per batch (and parallel checks)")
    parser.add_argument("--configs", default="cold,warm,shared", help="comma-separated: cold, warm, files, shared")
    parser.add_argument("--trials", type=int, default=2, help="random trials per case (a search's default: 2)")
    parser.add_argument("--sandbox", choices=("auto", "required", "off"))
    parser.add_argument("--no-floor", action="store_true")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--lanes", help="comma-separated: checks sharing the GPU at once; each config runs once per value"
    )
    args = parser.parse_args(argv)
    if args.n < 1 or args.batch < 1 or args.trials < 1:
        parser.error("--n, --batch and --trials must be at least 1")
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if not configs or set(configs) - {"cold", "warm", "files", "shared"}:
        parser.error("--configs takes cold, warm, files and/or shared")
    try:
        lanes_list: list[Optional[int]] = [int(v) for v in args.lanes.split(",") if v.strip()] if args.lanes else [None]
    except ValueError:
        parser.error("--lanes takes whole numbers, comma-separated")
    if any(v is not None and v < 1 for v in lanes_list):
        parser.error("--lanes must be at least 1")
    import evaluation

    device = evaluation.resolve_device(args.device)
    console = Console(stderr=False)
    results = []
    for name in configs:
        for lanes in lanes_list:
            label = name if lanes is None else f"{name}.lanes{lanes}"
            console.print(
                f"[bold]{label}[/]: {args.n} evaluations of {args.problem} on {device}, batches of {args.batch}"
            )
            rows_file = args.json.with_suffix(f".{label}.rows.json") if args.json else None
            results.append(
                run_config(name, args.problem, device, args.n, args.batch, args.sandbox, args.trials, rows_file, lanes)
            )
            if args.json:  # after every configuration: a run cut short by a time limit keeps what finished
                args.json.write_text(json.dumps(dict(device=device, results=results, floor=None), indent=1))
    floor_row = None if args.no_floor else floor(args.problem, device, args.trials)
    render(results, floor_row, console)
    if args.json:
        args.json.write_text(json.dumps(dict(device=device, results=results, floor=floor_row), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
