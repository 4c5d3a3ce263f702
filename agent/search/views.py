"""Text views of the run summary (agent.search.summary): the tree, the verdict, the per-case tables.

`show` and `report` print these; both read one `RunSummary`, so they cannot disagree. Every line is
written to fit 80 columns: a tree line that is too long is cut at its end with "…" (never wrapped
into the next branch), deep branches stop indenting after a few levels (each node names its
generation), and case labels always carry their dtype.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

from agent.search.summary import KernelView, RunSummary, fmt_ratio, hybrid_line, label
from agent.term import human, indented, kv_table, none_line, short, table

MAX_INDENT = 6  # levels; deeper nodes line up at this depth and say their generation (g12)
_STYLE = {"passed": "green", None: "dim"}


def _fmt(value: Optional[float], spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def ordered_tree(summary: RunSummary) -> list[tuple[int, object]]:
    """(depth, node) in depth-first order; a parent outside this run makes its child a root."""
    ids = {n.candidate_id for n in summary.nodes}
    children = defaultdict(list)
    for n in summary.nodes:
        parent = n.parent_id if n.parent_id in ids and n.parent_id != n.candidate_id else None
        children[parent].append(n)
    out: list[tuple[int, object]] = []
    stack = [(0, n, frozenset({n.candidate_id})) for n in reversed(children[None])]
    while stack:
        depth, n, seen = stack.pop()
        out.append((depth, n))
        for k in reversed(children[n.candidate_id]):
            if k.candidate_id not in seen:
                stack.append((depth + 1, k, seen | {k.candidate_id}))
    return out


def tree_lines(summary: RunSummary) -> list:
    from rich.text import Text

    best = summary.best.candidate_id if summary.best else None
    lines = []
    for depth, n in ordered_tree(summary):
        indent = "  " * min(depth, MAX_INDENT) + ("└ " if depth else "")
        t = Text(indent)
        t.append(short(n.candidate_id), style="bold" if n.candidate_id == best else "")
        t.append(f" g{n.generation} {n.action or 'seed'} ")
        t.append(human(n.status) if n.status else "pending", style=_STYLE.get(n.status, "red"))
        if n.speedup is not None:
            t.append(f" {n.speedup:#.3g}x")
        if n.reused:
            t.append(" (reused)", style="dim")
        if n.hybrid:
            t.append(" hybrid", style="magenta")
        if n.candidate_id == best:
            t.append(" <- best", style="bold yellow")
        if n.tags:
            t.append(" " + ",".join(n.tags), style="dim")
        t.no_wrap, t.overflow = True, "ellipsis"
        lines.append(t)
    return lines


def verdict_rows(kernel: Optional[KernelView], summary: RunSummary) -> list[tuple[str, str]]:
    """(key, value) rows of the verdict: vs eager, vs torch.compile (and any other baseline), bandwidth."""
    if kernel is None:
        return [("best", "none")]
    head = f"{short(kernel.candidate_id)} {human(kernel.status)}"
    if not kernel.picked:
        head += " (fastest passing; not a win)"
    rows = [("best", head)]
    if kernel.hybrid:
        rows.append(("hybrid", hybrid_line(kernel)))
    v = kernel.verdict
    if v is None or not v.measured:
        why = v.not_measured[0].reason if v is not None and v.not_measured else None
        rows.append(("speed", why or summary.timing_note or "not measured"))
        return rows
    for a in v.across:
        rows.append((f"vs {label(a.baseline)}", fmt_ratio(a.geomean) + _tail(a)))
    for n in v.not_measured:
        rows.append((f"vs {label(n.baseline)}", n.reason))
    if v.pct_of_copy_worst is not None:
        rows.append(("copy bandwidth", f"{v.pct_of_copy_worst:.1f}% at worst ({v.pct_of_copy_worst_case})"))
    rows.append(
        (
            "numbers from",
            v.how
            or (
                "its search evaluation (torch.compile is timed with the seed only)"
                if v.numbers_from == "search"
                else "the re-measure"
            ),
        )
    )
    if v.uncovered_cases:
        rows.append(("not timed", f"{len(v.uncovered_cases)} timed case(s): {', '.join(v.uncovered_cases)}"))
    return rows


def _tail(a) -> str:
    if a.cases > 1:
        return f" geomean of {a.cases} cases; worst {a.worst.ratio:#.3g}x at {a.worst_case_id}"
    return f" at {a.worst_case_id}"


def case_table(kernel: KernelView, title: Optional[str] = None):
    """One row per timed case: p50, x each baseline, GB/s, % of copy."""
    v = kernel.verdict
    if v is None or not v.measured:
        return None
    names = [a.baseline for a in v.across]
    t = table("case", "p50 ms", *[f"x {label(b)}" for b in names], "GB/s", "% copy", title=title)
    for c in v.cases:
        t.add_row(
            c.case_id,
            _fmt(c.latency_ms_p50, ".4g"),
            *[(f"{c.vs[b].ratio:#.3g}" + ("" if c.vs[b].significant else "?")) if b in c.vs else "-" for b in names],
            _fmt(c.gbps, ".0f"),
            _fmt(c.pct_of_copy, ".1f"),
        )
    return t


def check_table(kernel: KernelView, title: Optional[str] = None):
    """One row per declared case: passed, the worst errors and the tolerance they were held to."""
    t = table("case", "ok", "max abs err", "atol", "max rel err", "rtol", title=title)
    for c in kernel.checks:
        t.add_row(
            c.case_id,
            "yes" if c.passed else "NO",
            _fmt(c.max_abs_error, ".2g"),
            _fmt(c.atol, ".0e"),
            _fmt(c.max_rel_error, ".2g"),
            _fmt(c.rtol, ".0e"),
        )
    return t


def summary_rows(summary: RunSummary) -> list[tuple[str, str]]:
    rule = summary.stop_rule
    fails = ", ".join(f"{human(k)} {v}" for k, v in sorted(summary.failures_by_kind.items())) or "none"
    state = summary.state + (f" ({human(summary.stop_reason)})" if summary.stop_reason else "")
    rows = [
        ("state", state),
        (
            "evaluations",
            f"{summary.evaluations} of {rule.max_evaluations}"
            + (f" (+{summary.evaluations_reused} reused)" if summary.evaluations_reused else "")
            + f", {summary.passed} passed",
        ),
        ("failures", fails),
        *verdict_rows(summary.in_hand, summary),
    ]
    if summary.in_hand is not None and summary.in_hand.dot_precision:
        rows.append(("dot precision", "; ".join(summary.in_hand.dot_precision)))
    if summary.hybrids_left_out:
        ids = ", ".join(short(c) for c in summary.hybrids_left_out[:3])
        more = f" (+{len(summary.hybrids_left_out) - 3} more)" if len(summary.hybrids_left_out) > 3 else ""
        rows.append(("left out", f"{len(summary.hybrids_left_out)} passing hybrid(s), --no-hybrid: {ids}{more}"))
    if summary.proposer == "llm":
        rows.append(("cost", f"${summary.cost_usd:.4f}"))
    rows.append(("note", summary.note))
    return rows


def failure_lines(summary: RunSummary) -> list:
    """Per failed candidate: its id, status, stage and error class, then its message's first line
    (indented; wrapped, never cut, since it names the case and trial)."""
    from rich.text import Text

    out: list = []
    for n in summary.failed_nodes:
        head = Text(f"  {short(n.candidate_id)} ")
        head.append(human(n.status), style="red")
        head.append((f" at {human(n.failed_stage)}" if n.failed_stage else "") + f": {n.error_class or '-'}")
        head.no_wrap, head.overflow = True, "ellipsis"
        out.append(head)
        if n.message:
            out.append(indented(n.message, 4))
    return out


def render_show(console, summary: RunSummary) -> None:
    from rich.text import Text

    title = Text(f"run {summary.run_id}: {summary.problem_name} on {summary.device_name}", style="bold")
    title.no_wrap, title.overflow = True, "ellipsis"
    console.print(title)
    lines = tree_lines(summary)
    if not lines:
        console.print(none_line("candidates"))
    for line in lines:
        console.print(line, no_wrap=True, overflow="ellipsis")
    kv = kv_table()
    for key, value in summary_rows(summary):
        kv.add_row(key, value)
    console.print(kv)
    failed = failure_lines(summary)
    if failed:
        console.print(f"failed candidates ({len(summary.failed_nodes)}), each with the first line of its message:")
        for line in failed:
            console.print(line)
    k = summary.in_hand
    if k is not None and k.verdict is not None and len(k.verdict.cases) > 1:
        console.print(case_table(k, title="per timed case (? = interval includes 1.0)"))


def render_report(console, summary: RunSummary) -> None:
    """`kscout report`: the show view, then failures by kind and each top kernel's cases."""
    render_show(console, summary)
    if summary.failures:
        t = table("status", "error class", "count", title="failures by kind")
        for f in summary.failures:
            t.add_row(human(f.status), f.error_class, str(f.count))
        console.print(t)
    else:
        console.print(none_line("failures by kind"))
    if not summary.kernels:
        console.print(none_line("passing kernels"))
    for k in summary.kernels:
        name = f"{short(k.candidate_id)}{' (best)' if k.picked else ''}{' (hybrid)' if k.hybrid else ''}"
        if k.candidate_id == (summary.in_hand.candidate_id if summary.in_hand else None):
            console.print(check_table(k, title=f"{name}: correctness per case"))
        elif all(c.passed for c in k.checks):
            console.print(f"{name}: correct on all {len(k.checks)} declared cases", highlight=False)
        if not summary.timed:
            continue
        timing = (
            case_table(
                k, title=f"{name}: speed per timed case, from the {k.verdict.numbers_from} (? = interval includes 1.0)"
            )
            if k.verdict
            else None
        )
        console.print(timing if timing is not None else none_line(f"{name}: speed per timed case"))
    if summary.kernels and not summary.timed:
        console.print(none_line("speed per timed case", summary.timing_note or "not measured"))
