"""Coverage benchmark: one short template-proposer search per KernelBench problem file.

    python -m agent.coverage DIR_OR_FILE... [--budget 4] [--device auto] [--out DIR] [--match REGEX]

Per problem it reports the schedule(s) of the kernels written (the lowering's schedule kinds, or the
hand-written family's), whether any candidate passed the evaluator within the budget, after how many
evaluations, and on a GPU the best's x eager and x torch.compile from the session's interleaved
re-measure. A problem no schedule covers is "unsupported", with the ops named; a harness that cannot
judge the problem (a reference that fails on the derived shapes) is "harness_error". It writes
`coverage.csv` and prints one summary line: counts, the rates the issue's targets are stated in
(level-1 problems without convolutions, level-2 problems whose contraction is a GEMM), geomeans.

Problems run one after another (or `--concurrency K` at once on one device: checks side by side,
timings alone) in a fresh store under --out (vectors off unless KSCOUT_VECTORS says
otherwise: the benchmark retrieves nothing it needs embeddings for). On the CPU nothing is timed; the
interpreter costs 1-3 ms per program instance, so a full run of the dev set takes a while (run it with
`nice` in the background; the CSV is rewritten after every problem).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from evaluation.errors import KscoutError

CSV_FIELDS = (
    "level",
    "problem",
    "category",
    "status",
    "schedule",
    "evaluations",
    "first_pass",
    "speedup_vs_eager",
    "speedup_vs_torch_compile",
    "torch_compile_low",
    "torch_compile_high",
    "seconds",
    "run_id",
    "detail",
)
NOT_MEASURED = "not measured"


def category(path: Path) -> str:
    """conv | gemm | other, from the file name (KernelBench names say what they compute)."""
    name = path.stem.lower()
    if "conv" in name:
        return "conv"
    if re.search(r"gemm|matmul|bmm|matrix_mult|matrix_vector|matrix_scalar|tensor_matrix", name):
        return "gemm"
    return "other"


def level_of(path: Path) -> str:
    m = re.search(r"level(\d+)", str(path.parent))
    return m.group(1) if m else "?"


def problem_files(specs: list[str], match: Optional[str] = None) -> list[Path]:
    out: list[Path] = []
    for spec in specs:
        p = Path(spec)
        if p.is_dir():
            out += sorted(p.glob("*.py"), key=lambda f: (_number(f), f.name))
        elif p.is_file():
            out.append(p)
        else:
            raise KscoutError(f"no such problem file or folder: {spec}")
    if match:
        out = [p for p in out if re.search(match, p.name)]
    return out


def literal_sizes(path: Path, folder: Path) -> Path:
    """A copy of the problem whose integer-expression, tuple and chained size constants are plain int
    constants (`M = 1024 * 2` -> `M = 2048`; `input_shape = (32768,)` -> `input_shape_0 = 32768` and
    `input_shape = (input_shape_0,)`; `height = width = 128` -> two constants), so a harness that
    shrinks only `NAME = <int>` constants can derive CPU-sized cases for it. Nothing else changes."""
    import ast

    source = path.read_text()
    tree = ast.parse(source)
    body = []
    changed = False
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) > 1
            and isinstance(node.value, ast.Constant)
            and all(isinstance(t, ast.Name) for t in node.targets)
        ):
            # `height = width = 128`: one constant each, so both can be shrunk
            body += [ast.Assign(targets=[t], value=ast.Constant(node.value.value)) for t in node.targets]
            changed = True
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            value = node.value
            if isinstance(value, ast.BinOp):
                try:
                    folded = eval(compile(ast.Expression(value), "<size>", "eval"), {"__builtins__": {}})
                except Exception:
                    folded = None
                if type(folded) is int:
                    body.append(ast.Assign(targets=node.targets, value=ast.Constant(folded)))
                    changed = True
                    continue
            if (
                isinstance(value, ast.Tuple)
                and value.elts
                and all(isinstance(e, ast.Constant) and type(e.value) is int for e in value.elts)
            ):
                names = []
                for i, e in enumerate(value.elts):
                    body.append(ast.Assign(targets=[ast.Name(f"{name}_{i}", ast.Store())], value=ast.Constant(e.value)))
                    names.append(ast.Name(f"{name}_{i}", ast.Load()))
                body.append(ast.Assign(targets=node.targets, value=ast.Tuple(names, ast.Load())))
                changed = True
                continue
        body.append(node)
    if not changed:
        return path
    out = folder / path.parent.name / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(ast.unparse(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))) + "\n")
    return out


def _number(p: Path) -> int:
    m = re.match(r"(\d+)_", p.name)
    return int(m.group(1)) if m else 10**9


def _schedule(store, run_id: str, cid: Optional[str]) -> str:
    cands = {c.candidate_id: c for c in store.candidates(run_id)}
    c = cands.get(cid) if cid else next(iter(cands.values()), None)
    if c is None:
        return "-"
    try:
        knobs = json.loads(c.knobs_json or "{}")
    except ValueError:
        knobs = {}
    return schedule_label(knobs, c.prompt_template) or c.proposer


def schedule_label(knobs: dict, template: Optional[str]) -> str:
    """A candidate's schedule for the CSV: the lowering's kinds ("matmul+row", a hybrid's library
    contraction as "matmul[library]": agent/proposers/lowering/library.py), or "family:<template>"."""
    from agent.proposers.lowering.propose import schedule_kind

    kind = schedule_kind(knobs, template)
    if kind and (template or "").startswith("lowering/"):
        groups = [g for g in knobs.get("groups", []) if isinstance(g, dict)]
        return "+".join(
            f"{g.get('kind')}[library]" if g.get("engine") == "library" else str(g.get("kind")) for g in groups
        )
    stem = (template or "").removesuffix(".j2")
    return f"family:{stem}" if stem else (kind or "")


def summarize_run(store, run_id: str, errors: list[str]) -> dict:
    """status, schedule, evaluations, first pass and speedups of one finished run, from the store."""
    from agent.search.stopping import measured_speedup

    run = store.get_run(run_id)
    search = [(cid, r) for _, _, cid, r in store.evaluations(run_id=run_id, kind="search")]
    remeasured = {cid: r for _, _, cid, r in store.evaluations(run_id=run_id, kind="remeasure")}
    first_pass = next((i for i, (_, r) in enumerate(search, 1) if r.passed), None)
    passed = [cid for cid, r in search if r.passed]
    best = run.best_candidate_id or (passed[0] if passed else None)
    row = dict(
        run_id=run_id, evaluations=len(search), first_pass=first_pass or "-", schedule=_schedule(store, run_id, best)
    )
    if passed:
        row["status"] = "passed"
        row["detail"] = ""
    elif not search and any(e.startswith("unsupported") for e in errors):
        row["status"] = "unsupported"
        row["detail"] = next(e for e in errors if e.startswith("unsupported")).split(": ", 1)[-1]
    else:
        row["status"] = "failed"
        first_fail = next((r for _, r in search if not r.passed), None)
        row["detail"] = (
            f"{first_fail.status.value}/{first_fail.error_class}: {first_fail.message or ''}"
            if first_fail
            else "; ".join(errors) or "no candidate"
        )
    timed = any(r.timing for _, r in search)
    if not timed:
        row["speedup_vs_eager"] = row["speedup_vs_torch_compile"] = NOT_MEASURED
        return row
    final = remeasured.get(best) if best else None
    final = final or (dict(search).get(best) if best else None)
    eager = measured_speedup(final, "eager") if final else None
    compiled = measured_speedup(final, "torch_compile") if final else None
    row["speedup_vs_eager"] = eager.ratio if eager else "-"
    row["speedup_vs_torch_compile"] = compiled.ratio if compiled else "-"
    # the interval of the x torch.compile ratio (geomeans of baseline p20 / candidate p80 and p80 / p20):
    # a win over torch.compile is significant when its low end is above 1
    row["torch_compile_low"] = compiled.ratio_low if compiled else "-"
    row["torch_compile_high"] = compiled.ratio_high if compiled else "-"
    return row


def _base(path: Path) -> dict:
    return dict(level=level_of(path), problem=path.stem, category=category(path))


def _batch(batch: Optional[int], device_kind: str) -> int:
    """Candidates per step: as `kscout optimize` searches by default (8 on a GPU, checked side by side
    and timed in one process; one at a time on a CPU)."""
    from agent.search.session import search_defaults

    return search_defaults(device_kind)["batch"] if batch is None else batch


def _config(
    path: Path,
    *,
    budget: int,
    device_kind: str,
    trials: int,
    seed: int,
    timeout_s: float,
    batch: Optional[int] = None,
    concurrency: int = 1,
):
    """One coverage search: the template proposer, no stall rule, `_batch` candidates a step checked
    side by side (on at least `concurrency` workers where searches share one executor)."""
    from agent.search.session import SessionConfig

    size = _batch(batch, device_kind)
    return SessionConfig(
        problem=str(path),
        device=device_kind,
        proposer="template",
        budget=budget,
        stall=None,
        seed=seed,
        trials=trials,
        timeout_s=timeout_s,
        workers=max(concurrency, size),
        batch=size,
    )


def _unjudged_row(path: Path, status: str, detail: str, *, seconds: float = 0.0, run_id: str = "-") -> dict:
    """A problem whose search could not judge it (harness_error) or was cut off (interrupted)."""
    return dict(
        _base(path),
        status=status,
        schedule="-",
        evaluations=0,
        first_pass="-",
        speedup_vs_eager="-",
        speedup_vs_torch_compile="-",
        seconds=seconds,
        run_id=run_id,
        detail=detail,
    )


def run_one(
    store,
    path: Path,
    *,
    budget: int,
    device_kind: str,
    trials: int,
    seed: int,
    timeout_s: float,
    batch: Optional[int] = None,
) -> dict:
    from agent.search.session import start

    errors: list[str] = []
    config = _config(
        path, budget=budget, device_kind=device_kind, trials=trials, seed=seed, timeout_s=timeout_s, batch=batch
    )

    def on_event(event):
        if event.kind == "proposal_error":
            errors.append(event.message)

    t0 = time.monotonic()
    try:
        run_id = start(config, store, on_event=on_event)
    except Exception as exc:  # a harness that cannot judge this problem: record it, go on with the next
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
        return _unjudged_row(path, "harness_error", text, seconds=time.monotonic() - t0)
    row = dict(_base(path), **summarize_run(store, run_id, errors))
    row["seconds"] = time.monotonic() - t0
    return row


def run_concurrently(
    store,
    files: list[Path],
    *,
    concurrency: int,
    budget: int,
    device_kind: str,
    trials: int,
    seed: int,
    timeout_s: float,
    on_row: Callable[[int, dict], None],
    batch: Optional[int] = None,
) -> None:
    """`concurrency` searches at once on one shared local executor (`optimize-many`'s machinery): their
    correctness checks run side by side on `concurrency` workers, a batch's timing and each re-measure
    still have the device to themselves. `on_row(i, row)` gets each problem's row as its search ends."""
    from agent.search.many import Shared, run_many

    configs = [
        _config(
            path,
            budget=budget,
            device_kind=device_kind,
            trials=trials,
            seed=seed,
            timeout_s=timeout_s,
            batch=batch,
            concurrency=concurrency,
        )
        for path in files
    ]
    errors: dict[int, list[str]] = {i: [] for i in range(len(files))}
    began: dict[int, float] = {}
    done: set[int] = set()
    lock = threading.Lock()

    def on_event(i: int, event) -> None:
        if event.kind == "started":
            began[i] = time.monotonic()
        elif event.kind == "proposal_error":
            errors[i].append(event.message)
        elif event.kind == "finished" and event.message.startswith("stopped"):
            row = dict(_base(files[i]), **summarize_run(store, event.run_id, errors[i]))
            row["seconds"] = time.monotonic() - began.get(i, time.monotonic())
            with lock:
                done.add(i)
                on_row(i, row)

    result = run_many(configs, store, shared=Shared(concurrency=concurrency), on_event=on_event)
    for i, outcome in enumerate(result.outcomes):
        if i in done:
            continue
        if outcome.state == "interrupted":
            on_row(
                i,
                _unjudged_row(
                    files[i],
                    "interrupted",
                    f"interrupted: continue with `kscout resume {outcome.run_id}`",
                    run_id=outcome.run_id or "-",
                ),
            )
        else:
            reason = " ".join((outcome.reason or outcome.state).split())[:400]
            on_row(i, _unjudged_row(files[i], "harness_error", reason, run_id=outcome.run_id or "-"))


def geomean(values: list[float]) -> Optional[float]:
    vals = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def summary_line(rows: list[dict]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    l1 = [r for r in rows if r["level"] == "1" and r["category"] != "conv"]
    l2 = [r for r in rows if r["level"] == "2" and r["category"] == "gemm"]

    def rate(group):
        ok = sum(1 for r in group if r["status"] == "passed")
        return f"{ok}/{len(group)}" + (f" ({100.0 * ok / len(group):.0f}%)" if group else "")

    g_e = geomean([r["speedup_vs_eager"] for r in rows if r["status"] == "passed"])
    g_c = geomean([r["speedup_vs_torch_compile"] for r in rows if r["status"] == "passed"])
    beat = sum(
        1 for r in rows if isinstance(r["speedup_vs_torch_compile"], float) and r["speedup_vs_torch_compile"] > 1
    )
    significant = sum(1 for r in rows if isinstance(r.get("torch_compile_low"), float) and r["torch_compile_low"] > 1)
    parts = [
        f"{len(rows)} problems: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())),
        f"level-1 without convolutions passed {rate(l1)}",
        f"level-2 GEMM passed {rate(l2)}",
    ]
    if g_e is not None:
        parts.append(f"geomean x eager {g_e:.3g}")
    if g_c is not None:
        parts.append(f"geomean x torch.compile {g_c:.3g} ({beat} above 1, {significant} significantly)")
    if g_e is None and g_c is None:
        parts.append("speed not measured on this device")
    return "; ".join(parts)


def _compile_cell(r: dict) -> str:
    low, high = r.get("torch_compile_low"), r.get("torch_compile_high")
    text = _cell(r["speedup_vs_torch_compile"])
    if isinstance(low, float) and isinstance(high, float):
        text += f" [{low:.3g}, {high:.3g}]"
    return text


def markdown_table(rows: list[dict]) -> str:
    """The per-problem table as Markdown (the README's coverage table)."""
    head = (
        "level",
        "problem",
        "kind",
        "status",
        "schedule",
        "evals",
        "first pass",
        "x eager",
        "x compile [interval]",
        "detail",
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        detail = str(r.get("detail", "")).replace("|", "/")
        detail = detail[:90] + ("…" if len(detail) > 90 else "")
        cells = (
            r["level"],
            r["problem"],
            r["category"],
            r["status"],
            r["schedule"],
            r["evaluations"],
            r["first_pass"],
            _cell(r["speedup_vs_eager"]),
            _compile_cell(r),
            detail,
        )
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _cell(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _write_csv(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows({k: _cell(r.get(k, "-")) for k in CSV_FIELDS} for r in rows)
    tmp.replace(path)


def run_coverage(
    files: list[Path],
    *,
    budget: int,
    device: str,
    out: Path,
    trials: int = 2,
    seed: int = 0,
    timeout_s: float = 300.0,
    store_dir: Optional[Path] = None,
    quiet: bool = False,
    concurrency: int = 1,
    batch: Optional[int] = None,
) -> list[dict]:
    """One search per file. `batch`: candidates per step (None: a GPU search's default of 8, checked
    side by side and timed together; 1 on a CPU)."""
    import evaluation
    from store import Store

    device_kind = evaluation.resolve_device(device)
    out.mkdir(parents=True, exist_ok=True)
    home = store_dir or Path(tempfile.mkdtemp(prefix="store-", dir=out))
    rows: dict[int, dict] = {}

    def land(i: int, row: dict) -> None:
        rows[i] = row
        _write_csv(out / "coverage.csv", [rows[k] for k in sorted(rows)])
        if not quiet:
            print(
                f"[{len(rows)}/{len(files)}] level{row['level']} {row['problem']}: {row['status']} "
                f"({row['schedule']}, {row['evaluations']} evals, {row['seconds']:.0f}s) {row['detail'][:160]}",
                file=sys.stderr,
                flush=True,
            )

    with Store.open(home) as store:
        if concurrency > 1:
            run_concurrently(
                store,
                files,
                concurrency=concurrency,
                budget=budget,
                device_kind=device_kind,
                trials=trials,
                seed=seed,
                timeout_s=timeout_s,
                on_row=land,
                batch=batch,
            )
        else:
            for i, path in enumerate(files):
                land(
                    i,
                    run_one(
                        store,
                        path,
                        budget=budget,
                        device_kind=device_kind,
                        trials=trials,
                        seed=seed,
                        timeout_s=timeout_s,
                        batch=batch,
                    ),
                )
    return [rows[k] for k in sorted(rows)]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.coverage", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", help="problem files or folders of them (KernelBench format)")
    parser.add_argument("--budget", type=int, default=4, help="search evaluations per problem")
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help="candidates per search step (default: 8 on a GPU, checked side by side and timed together, as "
        "kscout optimize does; 1 on a CPU)",
    )
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--out", type=Path, default=None, help="folder for coverage.csv and the fresh store")
    parser.add_argument("--match", default=None, help="only files whose name matches this regex")
    parser.add_argument("--trials", type=int, default=2, help="correctness trials per shape")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per evaluation")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="searches at once on one device: their checks run side by side, timings still alone",
    )
    parser.add_argument(
        "--literal-sizes",
        action="store_true",
        help="run copies whose integer-expression and tuple size constants are plain ints, so a "
        "harness that shrinks only plain constants sizes them for the CPU (see literal_sizes)",
    )
    args = parser.parse_args(argv)
    for flag, value in (("--budget", args.budget), ("--batch", args.batch)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be at least 1 (got {value})")  # exit 2, one line
    for key, value in (  # after the flags are checked: a refused command changes nothing
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("ANONYMIZED_TELEMETRY", "False"),
        ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
        ("KSCOUT_VECTORS", "off"),
    ):
        os.environ.setdefault(key, value)
    out = args.out or Path(tempfile.mkdtemp(prefix="kscout-coverage-"))
    try:
        files = problem_files(args.paths, args.match)
        if args.literal_sizes:
            files = [literal_sizes(f, out / "problems") for f in files]
        rows = run_coverage(
            files,
            budget=args.budget,
            device=args.device,
            out=out,
            trials=args.trials,
            seed=args.seed,
            timeout_s=args.timeout,
            concurrency=max(1, args.concurrency),
            batch=args.batch,
        )
    except KscoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from agent.search.goals import judge, markdown

    goals = markdown(judge(rows))  # the speed issue's sets of problems against their goals
    print(summary_line(rows))
    print(goals)
    (out / "coverage.md").write_text(markdown_table(rows) + "\n\n" + summary_line(rows) + "\n\n" + goals + "\n")
    print(f"csv: {out / 'coverage.csv'}, table: {out / 'coverage.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
