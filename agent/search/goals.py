"""The speed issue's goals, read from a coverage CSV: per set of KernelBench problems, how many passed, the
geomean and the worst x torch.compile, and whether the set meets the goal stated for it.

    python -m agent.search.goals coverage.csv [--json]

The sets and their goals (x torch.compile, from each problem's final interleaved re-measure):

| set | members (by file name) | goal |
|---|---|---|
| level-1 matmul | level 1, a GEMM by name, not the matrix-scalar product | geomean >= 1.0, none below 0.8 |
| level-2 GEMM + epilogue | level 2, a GEMM by name | geomean >= 1.2, none below 0.9 |
| level-2 convolution + epilogue | level 2, a convolution by name | geomean >= 1.0 (hybrids labelled) |
| level-1 reductions over a non-last dim | InstanceNorm, RMSNorm, "reduction over a dimension", argmin/argmax | geomean >= 1.3 |

A set is met only when every problem of it in the CSV passed and was timed: a problem that reached no
passing kernel is a miss, never left out of the geomean. A CSV from a CPU (nothing timed) gives "not
measured"; a set with no problem in the CSV is "no problems", so a run over part of the dev set says
which goals it speaks to.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from agent.search.coverage import geomean, read_csv


@dataclass(frozen=True)
class Goal:
    name: str
    member: Callable[[dict], bool]
    geomean: float  # the set's geomean x torch.compile must reach this
    floor: Optional[float] = None  # and no problem of it may be below this


def _named(pattern: str) -> Callable[[str], bool]:
    rx = re.compile(pattern, re.IGNORECASE)
    return lambda name: bool(rx.search(name))


_MATRIX_SCALAR = _named(r"matrix_scalar")
_NON_LAST_REDUCTION = _named(r"instancenorm|rmsnorm|_reduction_over_a_dimension|arg(min|max)_over_a_dimension")

GOALS = (
    Goal(
        "level-1 matmul",
        lambda r: r["level"] == "1" and r["category"] == "gemm" and not _MATRIX_SCALAR(r["problem"]),
        1.0,
        0.8,
    ),
    Goal("level-2 GEMM + epilogue", lambda r: r["level"] == "2" and r["category"] == "gemm", 1.2, 0.9),
    Goal("level-2 convolution + epilogue", lambda r: r["level"] == "2" and r["category"] == "conv", 1.0),
    Goal(
        "level-1 reductions over a non-last dim",
        lambda r: r["level"] == "1" and r["category"] != "conv" and _NON_LAST_REDUCTION(r["problem"]),
        1.3,
    ),
)


@dataclass
class SetResult:
    name: str
    problems: int
    passed: int
    timed: int
    geomean: Optional[float]
    worst: Optional[str]  # the problem with the lowest x torch.compile
    worst_ratio: Optional[float]
    goal: str
    verdict: str  # met | not met: <why> | not measured | no problems
    missed: tuple[str, ...] = ()  # problems that did not pass


def _ratio(value) -> Optional[float]:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None  # "not measured", "-"
    return v if v > 0 else None


def judge_set(goal: Goal, rows: list[dict]) -> SetResult:
    members = [r for r in rows if goal.member(r)]
    passed = [r for r in members if r["status"] == "passed"]
    ratios = {r["problem"]: x for r in passed if (x := _ratio(r.get("speedup_vs_torch_compile"))) is not None}
    g = geomean(list(ratios.values()))
    worst = min(ratios, key=ratios.__getitem__) if ratios else None
    text = f"geomean >= {goal.geomean:g}" + (f", none below {goal.floor:g}" if goal.floor is not None else "")
    missed = tuple(r["problem"] for r in members if r["status"] != "passed")
    if not members:
        verdict = "no problems"
    elif not ratios and not missed:
        verdict = "not measured"
    else:
        why = []
        if missed:
            why.append(f"{len(missed)} of {len(members)} did not pass")
        untimed = len(passed) - len(ratios)
        if untimed:
            why.append(f"{untimed} passed but were not timed")
        if g is not None and g < goal.geomean:
            why.append(f"geomean {g:.3g} < {goal.geomean:g}")
        if worst is not None and goal.floor is not None and ratios[worst] < goal.floor:
            why.append(f"{worst} at {ratios[worst]:.3g} < {goal.floor:g}")
        verdict = "not met: " + "; ".join(why) if why else "met"
    return SetResult(
        name=goal.name,
        problems=len(members),
        passed=len(passed),
        timed=len(ratios),
        geomean=g,
        worst=worst,
        worst_ratio=ratios[worst] if worst else None,
        goal=text,
        verdict=verdict,
        missed=missed,
    )


def judge(rows: list[dict]) -> list[SetResult]:
    return [judge_set(goal, rows) for goal in GOALS]


def markdown(results: list[SetResult]) -> str:
    head = ("set", "problems", "passed", "timed", "geomean x compile", "worst", "goal", "verdict")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in results:
        worst = f"{s.worst} {s.worst_ratio:.3g}" if s.worst and s.worst_ratio is not None else "-"
        geo = f"{s.geomean:.3g}" if s.geomean is not None else "-"
        cells = (s.name, s.problems, s.passed, s.timed, geo, worst, s.goal, s.verdict)
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.search.goals", description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path, help="coverage.csv written by python -m agent.coverage")
    parser.add_argument("--json", action="store_true", help="one JSON object per set, one per line")
    args = parser.parse_args(argv)
    try:
        rows = read_csv(args.csv)
    except OSError as exc:
        print(f"error: cannot read {args.csv}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    need = {"level", "problem", "category", "status", "speedup_vs_torch_compile"}
    if rows and not need <= set(rows[0]):
        print(
            f"error: {args.csv} is not a coverage CSV (missing {', '.join(sorted(need - set(rows[0])))})",
            file=sys.stderr,
        )
        return 2
    results = judge(rows)
    if args.json:
        for s in results:
            print(json.dumps(asdict(s)))
    else:
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
