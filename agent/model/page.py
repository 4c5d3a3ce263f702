"""The model view of `kscout optimize-model`: where the model's time went before and after, by region.

One horizontal bar per state, each cut into the regions (named r0, r1, ... as in the table) and the glue
between them, widths in microseconds of one forward. "After" divides each region's time by its own
measured speedup and keeps the reference ops' time elsewhere; where a kernel runs but no speed was
measured (a CPU), there is no "after" bar and the page says why rather than drawing a guess.

The page is self-contained like the run report (inline CSS and SVG, a CSP that forbids every fetch);
`section` is the same view as a fragment, which `kscout report RUN --html` puts into a model run's page.
"""

from __future__ import annotations

from typing import Optional

import jinja2

from agent.model.records import ModelReport

COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
GLUE_COLOR = "#bab0ac"


def bars(report: ModelReport) -> list[tuple[str, list[tuple[str, float]]]]:
    """[("before", [(region, us), ..., ("glue", us)]), ("after", ...)]; "after" only where measured."""
    before = [(r.name, r.time_us) for r in report.regions] + [("glue", report.glue_us)]
    out = [("before", before)]
    after = [(r.name, report.after_us(r)) for r in report.regions]
    if all(us is not None for _, us in after):
        out.append(("after", [(n, float(us or 0.0)) for n, us in after] + [("glue", report.glue_us)]))
    return out


def share_svg(report: ModelReport) -> str:
    from agent.search.report import _figure, _svg

    rows = bars(report)
    fig = _figure()
    fig.set_size_inches(6.4, 0.9 + 0.6 * len(rows))
    ax = fig.subplots()
    colors = {r.name: COLORS[i % len(COLORS)] for i, r in enumerate(report.regions)} | {"glue": GLUE_COLOR}
    total = max(sum(us for _, us in parts) for _, parts in rows) or 1.0
    for y, (label, parts) in enumerate(reversed(rows)):
        left = 0.0
        for name, us in parts:
            ax.barh(y, us, left=left, color=colors[name], edgecolor="white", label=name if y == 0 else None)
            if us / total > 0.06:
                ax.text(left + us / 2, y, name, ha="center", va="center", fontsize=8, color="white")
            left += us
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)])
    ax.set_xlabel(f"microseconds of one forward ({'device' if report.clock == 'device' else 'CPU self'} time)")
    ax.legend(ncols=min(6, len(report.regions) + 1), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    return _svg(fig)


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("agent.model", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
    )


def _fmt(value: Optional[float], spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def section(report: ModelReport) -> str:
    measured = len(bars(report)) > 1
    return (
        _env()
        .get_template("model_section.html.j2")
        .render(m=report, svg=share_svg(report), measured=measured, gains=report.gain_shares(), fmt=_fmt)
    )


def render(report: ModelReport) -> str:
    return _env().get_template("model.html.j2").render(m=report, section=section(report))
