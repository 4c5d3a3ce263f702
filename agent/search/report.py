"""The run report: the run summary (agent.search.summary) as a self-contained HTML page.

The page must open years later on a machine without network, so everything is inline (CSS, plots as
SVG text) and a Content-Security-Policy forbids any fetch: a stray external reference would show as a
console error rather than a silent dependency.

What the plots show depends on what was measured. On a GPU: each evaluation's speedup over eager, the
best so far, and torch.compile's own speedup over eager as a line (a kernel below that line is slower
than torch.compile). On the CPU the interpreter measures no speed, so instead of an empty speed plot
the page shows the best kernel's error on each declared case against the tolerance it was held to.
Both show the evaluations by status.
"""

from __future__ import annotations

import io
from typing import Optional

import jinja2

from agent.search.summary import RunSummary, across_line, hybrid_line, label


def anchor(candidate_id: str) -> str:
    return f"c-{candidate_id[:12]}"


# -- plots -----------------------------------------------------------------------------------------
def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _figure():
    import matplotlib

    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable
    matplotlib.rcParams["svg.hashsalt"] = "kscout"  # stable ids, reproducible pages
    from matplotlib.figure import Figure

    return Figure(figsize=(6.4, 3.0))


def compile_over_eager(s: RunSummary) -> Optional[float]:
    """torch.compile's speedup over eager, from the best kernel's numbers (x eager / x compile)."""
    k = s.in_hand
    v = k.verdict if k else None
    eager, comp = (v.vs("eager"), v.vs("torch_compile")) if v else (None, None)
    return eager.geomean.ratio / comp.geomean.ratio if eager and comp else None


def speed_svg(s: RunSummary) -> str:
    from matplotlib.ticker import MaxNLocator

    fig = _figure()
    ax = fig.subplots()
    xs = [p.index for p in s.points]
    nan = float("nan")
    ax.step(
        xs, [p.best_so_far if p.best_so_far is not None else nan for p in s.points], where="post", label="best so far"
    )
    ax.scatter(xs, [p.speedup if p.speedup is not None else nan for p in s.points], s=12, label="this evaluation")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--", label="eager")
    comp = compile_over_eager(s)
    if comp is not None:
        ax.axhline(comp, color="tab:purple", linewidth=1.0, linestyle="-.", label="torch.compile")
    ax.set_ylabel("speedup over eager (x)")
    ax.set_xlabel("search evaluation")
    ax.set_title("speedup over evaluations")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="best", fontsize="small")
    return _svg(fig)


def errors_svg(s: RunSummary) -> Optional[str]:
    """The best kernel's worst error on each declared case, against the tolerance it was held to."""
    k = s.in_hand
    checks = [c for c in (k.checks if k else ()) if c.max_abs_error is not None]
    if not checks:
        return None
    fig = _figure()
    fig.set_size_inches(6.4, max(2.4, 0.32 * len(checks) + 1.0))
    ax = fig.subplots()
    ys = list(range(len(checks)))
    tiny = 1e-12  # an exact result (error 0) still needs a place on a log axis
    ax.scatter([max(c.max_abs_error, tiny) for c in checks], ys, marker="o", color="tab:blue", label="max abs error")
    ax.scatter([c.atol for c in checks], ys, marker="|", s=200, color="tab:red", label="atol")
    ax.set_xscale("log")
    ax.set_yticks(ys)
    ax.set_yticklabels([c.case_id for c in checks], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("absolute error (log)")
    ax.set_title("error per case against tolerance (pass: |err| <= atol + rtol*|ref|)")
    ax.legend(loc="best", fontsize="small")
    return _svg(fig)


def status_svg(s: RunSummary) -> str:
    from matplotlib.ticker import MaxNLocator

    fig = _figure()
    ax = fig.subplots()
    counts: dict[str, int] = {}
    for p in s.points:
        counts[p.status] = counts.get(p.status, 0) + 1
    names = sorted(counts, key=lambda n: (n != "passed", n))
    ax.bar(names, [counts[n] for n in names], color=["tab:green" if n == "passed" else "tab:red" for n in names])
    ax.set_ylabel("evaluations")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("evaluations by status")
    return _svg(fig)


# -- the page ------------------------------------------------------------------------------------------
def tree(s: RunSummary) -> list[dict]:
    """Nested nodes for the template: each with its anchor, its parent's anchor and its children."""
    ids = {n.candidate_id for n in s.nodes}
    kids: dict[Optional[str], list] = {}
    for n in s.nodes:
        parent = n.parent_id if n.parent_id in ids and n.parent_id != n.candidate_id else None
        kids.setdefault(parent, []).append(n)

    def node(n, seen: frozenset) -> dict:
        parent = n.parent_id if n.parent_id in ids and n.parent_id != n.candidate_id else None
        return {
            "n": n,
            "anchor": anchor(n.candidate_id),
            "parent_anchor": anchor(parent) if parent else None,
            "children": [
                node(k, seen | {k.candidate_id}) for k in kids.get(n.candidate_id, []) if k.candidate_id not in seen
            ],
        }

    return [node(n, frozenset({n.candidate_id})) for n in kids.get(None, [])]


def render_html(s: RunSummary, best_source: Optional[str], model_section: Optional[str] = None) -> str:
    """`model_section`: the model view (agent.model.page.section) of a `kscout optimize-model` run."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("agent.search", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
    )
    timed = s.timed and any(p.speedup is not None for p in s.points)
    return env.get_template("report.html.j2").render(
        s=s,
        roots=tree(s),
        speed_svg=speed_svg(s) if timed else None,
        errors_svg=None if timed else errors_svg(s),
        status_svg=status_svg(s) if s.points else None,
        best_source=best_source,
        model_section=model_section,
        failed=s.failed_nodes,
        fmt=_fmt,
        label=label,
        across_line=across_line,
        hybrid_line=hybrid_line,
    )


def _fmt(value: Optional[float], spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)
