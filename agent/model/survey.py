"""Which models `kscout optimize-model` can take, and why the rest are out: the flow's first half
(trace, partition, profile, extract, lower) over a folder of KernelBench-format models, no search.

    python -m agent.model.survey ../shared/kernelbench-dev/level3 [--device cpu] [--timeout 240]
        [--csv OUT.csv] [--json]

Each model runs in a child process of its own under a wall-clock limit (a large model on two CPU cores
can take minutes, and one that hangs or runs out of memory must not take the survey with it). A row
says whether the forward was captured, how many regions it has and of what kind, which share of the
profiled time lies in regions the lowering takes (what a search could speed up: the Amdahl ceiling's
input), and, where the model is out or a region is not lowered, why, in one line.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

LOWERED_STATES = ("searched", "cold")  # a region the lowering takes, hot or not


class SurveyRow(BaseModel):
    model: str
    status: str  # "taken" | "out" | "timeout"
    reason: Optional[str] = None  # why the model is out (one line)
    regions: int = 0
    contraction: int = 0
    chain: int = 0
    reference: int = 0
    not_lowered: int = 0
    lowered_share: Optional[float] = None  # of the regions' profiled time, in regions the lowering takes
    hot: int = 0  # regions a search would take (lowered, share >= min_share)
    searches: int = 0  # the problems those regions make: identical regions and size families are one each
    eager_us: Optional[float] = None
    why_not: tuple[str, ...] = ()  # the commonest reasons a region stays reference ops
    seconds: float = 0.0


def survey_one(path: str, device: str = "cpu", min_share: float = 0.05) -> SurveyRow:
    """The flow's first half on one model, in this process."""
    from agent.model import flow

    t0 = time.perf_counter()
    name = Path(path).name
    try:
        with tempfile.TemporaryDirectory(prefix="kscout-survey-") as work:
            # one profiled forward after none to warm up: a survey asks what is taken, the shares are rough
            plan = flow.prepare(
                path, device=device, budget=8, min_share=min_share, work=Path(work), profile_iters=(0, 1)
            )
    except Exception as exc:  # a survey reports every failure as a row, whatever raised it
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:240]
        return SurveyRow(model=name, status="out", reason=reason, seconds=time.perf_counter() - t0)
    rows = list(plan.rows.values())
    kinds = Counter(r.kind for r in rows)
    states = Counter(r.state for r in rows)
    total = sum(r.time_us for r in rows)
    lowered = sum(r.time_us for r in rows if r.state in LOWERED_STATES)
    why = Counter((r.reason or "").split(":")[0][:80] for r in rows if r.state in ("reference", "not_lowered"))
    return SurveyRow(
        model=name,
        status="taken",
        regions=len(rows),
        contraction=kinds["contraction"],
        chain=kinds["chain"],
        reference=kinds["reference"],
        not_lowered=states["not_lowered"],
        lowered_share=lowered / total if total > 0 else None,
        hot=states["searched"],
        searches=sum(1 for r in rows if r.state == "searched" and r.same_as is None),
        eager_us=plan.profile.eager_us,
        why_not=tuple(f"{n}x {w}" for w, n in why.most_common(3)),
        seconds=time.perf_counter() - t0,
    )


def survey(paths: list[str], device: str = "cpu", timeout_s: float = 240.0, on_row=None) -> list[SurveyRow]:
    """Each model in a child process (`--one`), under `timeout_s` of wall clock."""
    out = []
    for path in paths:
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "agent.model.survey", "--one", path, "--device", device]
        env = dict(os.environ, TRITON_INTERPRET=os.environ.get("TRITON_INTERPRET", "1"))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
            last = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
            if proc.returncode == 0 and last:
                row = SurveyRow.model_validate_json(last[0])
            else:
                tail = " ".join((proc.stderr or "").strip().splitlines()[-1:])[:240]
                row = SurveyRow(model=Path(path).name, status="out", reason=f"exit {proc.returncode}: {tail}")
        except subprocess.TimeoutExpired:
            row = SurveyRow(model=Path(path).name, status="timeout", reason=f"more than {timeout_s:.0f} s")
        row = row.model_copy(update={"seconds": time.perf_counter() - t0})
        out.append(row)
        if on_row:
            on_row(row)
    return out


def _table(rows: list[SurveyRow]):
    from agent.term import table

    t = table(
        "model", "status", "regions (mm/chain/ref)", "lowered share", "hot (searches)", "why not (commonest)", "s"
    )
    for r in rows:
        kinds = f"{r.regions} ({r.contraction}/{r.chain}/{r.reference})" if r.status == "taken" else "-"
        share = f"{r.lowered_share:.0%}" if r.lowered_share is not None else "-"
        why = "; ".join(r.why_not) if r.status == "taken" else (r.reason or "")
        hot = f"{r.hot} ({r.searches})" if r.status == "taken" else "-"
        t.add_row(r.model, r.status, kinds, share, hot, why, f"{r.seconds:.0f}")
    return t


def write_csv(path: Path, rows: list[SurveyRow]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(SurveyRow.model_fields))
        w.writeheader()
        for r in rows:
            w.writerow({**r.model_dump(), "why_not": " | ".join(r.why_not)})


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m agent.model.survey", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", help="a folder of KernelBench-format model files")
    ap.add_argument("--one", help="survey this one file in this process and print its row as JSON")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per model")
    ap.add_argument("--csv", type=Path, help="write the rows here")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    args = ap.parse_args(argv)
    if args.one:
        print(survey_one(args.one, args.device).model_dump_json())
        return
    if not args.folder or not Path(args.folder).is_dir():
        ap.error(f"not a folder of model files: {args.folder}")
    paths = sorted(str(p) for p in Path(args.folder).glob("*.py"))
    if not paths:
        ap.error(f"no .py files in {args.folder}")
    from agent.term import console

    con = console(stderr=True)
    done: list[SurveyRow] = []

    def on_row(r: SurveyRow) -> None:
        con.print(f"{r.model}: {r.status} ({r.seconds:.0f} s)", markup=False, highlight=False)
        done.append(r)
        if args.csv:  # rewritten after every model: a survey stopped part-way keeps the rows it has
            write_csv(args.csv, done)

    rows = survey(paths, args.device, args.timeout, on_row=on_row)
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in rows]))
    else:
        console().print(_table(rows))
        taken = [r for r in rows if r.status == "taken"]
        console().print(f"{len(taken)} of {len(rows)} models taken", markup=False, highlight=False)


if __name__ == "__main__":
    main()
