"""Search benchmark: one template-proposer search per problem, timed on one LLM-sized case.

    python -m agent.search.bench --problems layernorm,rmsnorm,softmax,cross_entropy,swiglu --budget 60 \
        --dtype bfloat16 [--workers 8 --batch 8] [--minutes M] [--case-layernorm 'M=4096,N=4096'] \
        [--device auto] --out DIR

On an H200, `--batch 8` checks 8 siblings in parallel and times them in one process: about 24 s per
batch for cross_entropy with `--workers 4` (its seed's own evaluation, with the torch.compile
baseline, about 34 s); at --budget 60 a search takes 4-6 minutes. Give cross_entropy at most 4
workers: each holds copies of 8192 x 128256 logits, and a check that runs out of device memory is
redone alone, after its batch's parallel checks.

The search is for a --dtype kernel: correctness is proven on every declared shape in that dtype
(`kscout optimize --dtype`), and each search times a single case (`--time-case`), since timing every
declared case makes a 60-evaluation search too slow. The timed case is the first one tagged
"representative" and "timed" in --dtype (on the CPU: the first CPU case in --dtype), or the one given by
--case-PROBLEM.

Every number is read off the run summary (agent.search.summary), the same read model `kscout show`
and `kscout report` print; the `timing_source` column says where it applied:
  - p50, GB/s, % of ceiling, x eager, x torch.compile: the best's interleaved re-measure ("remeasure",
    where torch.compile joins the rounds), else its search evaluation ("search"; search evaluations
    time torch.compile only with the seed, so x torch.compile is "-" for other candidates there).
  - x seed: seed p50 / best p50 from the same re-measure when both were re-measured; otherwise the
    ratio of their eager speedups from their own search evaluations (eager-normalized).
  - evaluations to within 5%: the 1-based position in search order of the first evaluation whose
    eager speedup is >= 0.95 x the best's search-evaluation eager speedup.
On the CPU nothing is timed and every speed column says "not measured".
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from evaluation.errors import KscoutError, ProblemError

NOT_MEASURED = "not measured"
CSV_FIELDS = (
    "problem",
    "case",
    "dtype",
    "device",
    "run_id",
    "evaluations",
    "best_candidate",
    "best_p50_ms",
    "gbps",
    "pct_of_copy_ceiling",
    "speedup_vs_eager",
    "speedup_vs_torch_compile",
    "speedup_vs_seed",
    "evals_to_within_5pct",
    "timing_source",
    "seed_source",
)


def pick_case(problem: str, device_kind: str, dtype: str, choice: Optional[str] = None) -> str:
    """The case id timed for `problem`; `choice` is a case id or its params part ("M=4096,N=4096")."""
    import evaluation

    info = evaluation.load_problem(problem, device=device_kind)
    ids = [c.case_id for c in info.shape_cases if c.dtype == dtype]
    if not ids:
        raise ProblemError(f"{problem} declares no {dtype} cases (its dtypes: {', '.join(info.dtypes)})")
    if choice:
        wanted = choice if "|" in choice else f"{choice}|{dtype}"
        if wanted not in ids:
            raise ProblemError(f"unknown case {choice!r} for {problem}; valid {dtype} ids: {', '.join(ids)}")
        return wanted
    if device_kind == "cpu":
        return ids[0]
    for c in info.shape_cases:
        if c.dtype == dtype and {"representative", "timed"} <= set(c.tags):
            return c.case_id
    return ids[0]


def summarize_run(store, run_id: str, case_id: str) -> dict:
    """One table row, read off the run summary (agent.search.summary) like every other view of a run."""
    from agent.search.summary import summarize

    s = summarize(store, run_id)
    best = s.best
    row = dict(
        problem=s.problem_name,
        case=case_id.split("|")[0],
        dtype=case_id.split("|")[1],
        device=s.arch,
        run_id=run_id,
        evaluations=len(s.points),
        best_candidate=best.candidate_id[:12] if best else "none",
    )
    speed_cols = (
        "best_p50_ms",
        "gbps",
        "pct_of_copy_ceiling",
        "speedup_vs_eager",
        "speedup_vs_torch_compile",
        "speedup_vs_seed",
        "evals_to_within_5pct",
        "timing_source",
        "seed_source",
    )
    if not s.timed:
        return dict(row, **{k: NOT_MEASURED for k in speed_cols})
    row.update({k: "-" for k in speed_cols})
    v = best.verdict if best else None
    case = next((c for c in v.cases if c.case_id == case_id), None) if v else None
    if case is None:
        return row
    nodes = {n.candidate_id: n for n in s.nodes}
    seed = next((n for n in s.nodes if n.proposer == "seed"), None)
    vs_seed, seed_source = None, "-"
    if seed is not None and seed.candidate_id == best.candidate_id:
        vs_seed, seed_source = 1.0, "best is the seed"
    elif "seed" in case.vs:
        vs_seed, seed_source = case.vs["seed"].ratio, "remeasure (same process)"
    elif seed is not None and seed.speedup and nodes[best.candidate_id].speedup:
        vs_seed = nodes[best.candidate_id].speedup / seed.speedup
        seed_source = "search evaluations (eager-normalized)"
    target = nodes[best.candidate_id].speedup  # the best's own search evaluation, as the search saw it
    within = next((p.index for p in s.points if target and p.speedup and p.speedup >= 0.95 * target), None)
    row.update(
        best_p50_ms=case.latency_ms_p50,
        gbps=case.gbps,
        pct_of_copy_ceiling=case.pct_of_copy,
        speedup_vs_eager=case.vs["eager"].ratio if "eager" in case.vs else None,
        speedup_vs_torch_compile=case.vs["torch_compile"].ratio if "torch_compile" in case.vs else None,
        speedup_vs_seed=vs_seed,
        evals_to_within_5pct=within,
        timing_source=v.numbers_from,
        seed_source=seed_source,
    )
    return {k: ("-" if v is None else v) for k, v in row.items()}


def _cell(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _write_csv(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def _print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="search benchmark (one timed case per problem)")
    cols = (
        "problem",
        "case",
        "dtype",
        "best_candidate",
        "best_p50_ms",
        "gbps",
        "pct_of_copy_ceiling",
        "speedup_vs_eager",
        "speedup_vs_torch_compile",
        "speedup_vs_seed",
        "evals_to_within_5pct",
    )
    heads = (
        "problem",
        "case",
        "dtype",
        "best",
        "p50 ms",
        "GB/s",
        "% copy",
        "x eager",
        "x compile",
        "x seed",
        "evals to 5%",
    )
    for h in heads:
        table.add_column(h)
    for r in rows:
        table.add_row(*(_cell(r[c]) for c in cols))
    console = Console()  # a benchmark table goes to logs: wide enough for its 11 columns there
    console = console if console.is_terminal or "COLUMNS" in os.environ else Console(width=160)
    console.print(table)
    console.print(
        "x eager / p50 / GB/s: the best's interleaved re-measure where there is one (column timing_source "
        "in the CSV); x compile: the same re-measure where it has one; x seed: see seed_source",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def run_bench(
    problems: list[str],
    *,
    budget: int,
    dtype: str,
    device: str,
    out: Path,
    cases: dict[str, str],
    trials: int = 2,
    seed: int = 0,
    store_dir: Optional[Path] = None,
    workers: int = 1,
    batch: int = 1,
    minutes: Optional[float] = None,
) -> list[dict]:
    import evaluation
    from agent.search.session import SessionConfig, start
    from store import Store

    device_kind = evaluation.resolve_device(device)
    chosen = {p: pick_case(p, device_kind, dtype, cases.get(p)) for p in problems}  # bad input fails first
    out.mkdir(parents=True, exist_ok=True)
    # A fresh store by default, so no evaluation is reused from an earlier invocation.
    home = store_dir or Path(tempfile.mkdtemp(prefix="store-", dir=out))
    csv_path = out / "bench_search.csv"
    rows: list[dict] = []
    with Store.open(home) as store:
        for i, problem in enumerate(problems, 1):
            config = SessionConfig(
                problem=problem,
                device=device_kind,
                proposer="template",
                budget=budget,
                stall=None,
                seed=seed,
                trials=trials,
                time_cases=(chosen[problem],),
                dtypes=(dtype,),
                workers=workers,
                batch=batch,
                minutes=minutes,
            )
            t0 = time.monotonic()

            def show(event, problem=problem, t0=t0):  # one line per evaluation: a cut-off run still tells
                if event.kind in ("evaluated", "remeasured", "finished"):
                    print(
                        f"  {problem} {time.monotonic() - t0:6.1f}s [{event.evaluations}/{event.budget}] "
                        f"{event.message}",
                        file=sys.stderr,
                        flush=True,
                    )

            run_id = start(config, store, on_event=show)
            rows.append(summarize_run(store, run_id, chosen[problem]))
            _write_csv(csv_path, rows)
            r = rows[-1]
            print(
                f"[{i}/{len(problems)}] {problem} {chosen[problem]}: best {r['best_candidate']}, "
                f"x eager {_cell(r['speedup_vs_eager'])}, run {run_id} -> {csv_path}",
                file=sys.stderr,
                flush=True,
            )
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    from evaluation.problem import builtin_names

    for key, value in (
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("ANONYMIZED_TELEMETRY", "False"),
        ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
    ):
        os.environ.setdefault(key, value)  # as the kscout CLI does: no network

    parser = argparse.ArgumentParser(prog="python -m agent.search.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--problems", default="layernorm,rmsnorm,softmax,cross_entropy,swiglu")
    parser.add_argument("--budget", type=int, default=60, help="search evaluations per problem")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--trials", type=int, default=2, help="correctness trials per shape")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the proposer")
    parser.add_argument("--workers", type=int, default=1, help="correctness checks in parallel (timing stays serial)")
    parser.add_argument("--batch", type=int, default=1, help="candidates proposed per search step (timed together)")
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="time limit per search, a stop rule beside --budget (the CSV says how many evaluations ran)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="folder for the CSV and the fresh store (default: a new temp folder)"
    )
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="use this store instead of a fresh one under --out (its stored evaluations may be reused)",
    )
    for name in builtin_names():
        parser.add_argument(
            f"--case-{name}",
            dest=f"case_{name}",
            default=None,
            metavar="CASE",
            help=f"case timed for {name}: a case id or its params, e.g. M=4096,N=4096",
        )
    args = parser.parse_args(argv)
    problems = [p.strip() for p in args.problems.split(",") if p.strip()]
    cases = {n: getattr(args, f"case_{n}") for n in builtin_names() if getattr(args, f"case_{n}")}
    out = args.out or Path(tempfile.mkdtemp(prefix="kscout-bench-"))
    try:
        rows = run_bench(
            problems,
            budget=args.budget,
            dtype=args.dtype,
            device=args.device,
            out=out,
            cases=cases,
            trials=args.trials,
            seed=args.seed,
            store_dir=args.store,
            workers=args.workers,
            batch=args.batch,
            minutes=args.minutes,
        )
    except KscoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _print_table(rows)
    print(f"csv: {out / 'bench_search.csv'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
