"""The run report: one record built from the store, rendered as a self-contained page or rich tables.

The page must open years later on a machine without network, so everything is inline (CSS, plots as
SVG text) and a Content-Security-Policy forbids any fetch: a stray external reference would show as a
console error rather than a silent dependency. On the CPU the interpreter measures no speed, so the
progress plot shows passed/failed counts and says so instead of drawing a speedup of nothing.
"""

from __future__ import annotations

import io
from typing import Optional

import jinja2
from agent import Frozen

from agent.lifecycle.evidence import CaseSpeedup, aggregate_speedup
from evaluation.errors import KscoutError
from evaluation.records import EvalResult, Fingerprint
from store.records import CandidateRecord, RunRecord

TOP_KERNELS = 3


Record = Frozen


class TreeNode(Record):
    candidate_id: str
    anchor: str  # html id of this node
    parent_anchor: Optional[str]  # None: a root of this run's tree
    generation: int
    action: Optional[str]
    tags: tuple[str, ...]
    rationale: str
    status: Optional[str]  # of its latest search evaluation; None if never evaluated
    speedup: Optional[float]
    children: tuple["TreeNode", ...] = ()


class EvalPoint(Record):
    index: int  # 1-based position among the run's search evaluations
    candidate_id: str
    status: str
    speedup: Optional[float]
    best_speedup: Optional[float]  # best so far
    passed_so_far: int
    failed_so_far: int


class FailureCount(Record):
    status: str
    error_class: str
    count: int


class ShapeRow(Record):
    case_id: str
    dtype: str
    passed: bool
    max_abs_error: Optional[float]
    max_rel_error: Optional[float]
    message: Optional[str]
    latency_ms_p50: Optional[float] = None
    eager_ms_p50: Optional[float] = None
    compile_ms_p50: Optional[float] = None
    speedup: Optional[CaseSpeedup] = None


class KernelSummary(Record):
    candidate_id: str
    anchor: str
    eval_kind: str  # "remeasure" when a re-measure exists, else "search"
    speedup: Optional[CaseSpeedup]
    shapes: tuple[ShapeRow, ...]


class RunReport(Record):
    run: RunRecord
    env: Optional[Fingerprint]
    timed: bool  # any evaluation of the run carries timing
    timing_note: Optional[str]
    roots: tuple[TreeNode, ...]
    n_candidates: int
    points: tuple[EvalPoint, ...]
    failures: tuple[FailureCount, ...]
    best: tuple[KernelSummary, ...]
    best_source: Optional[str]


def anchor(candidate_id: str) -> str:
    return f"c-{candidate_id[:12]}"


def _speed(result: EvalResult) -> Optional[float]:
    total = aggregate_speedup(result)
    return total.ratio if total else None


def build_report(store, run_ref: str) -> RunReport:
    run = store.get_run(run_ref)
    candidates = store.candidates(run.run_id)
    search = store.evaluations(run_id=run.run_id, kind="search")
    remeasure = store.evaluations(run_id=run.run_id, kind="remeasure")
    latest: dict[str, EvalResult] = {cid: r for _e, _r, cid, r in search}

    points, best_speed, n_pass, n_fail = [], None, 0, 0
    failures: dict[tuple[str, str], int] = {}
    for i, (_eid, _rid, cid, r) in enumerate(search, start=1):
        speed = _speed(r) if r.passed else None
        if speed is not None and (best_speed is None or speed > best_speed):
            best_speed = speed
        n_pass, n_fail = n_pass + r.passed, n_fail + (not r.passed)
        if not r.passed:
            key = (r.status.value, r.error_class or "-")
            failures[key] = failures.get(key, 0) + 1
        points.append(
            EvalPoint(
                index=i,
                candidate_id=cid,
                status=r.status.value,
                speedup=speed,
                best_speedup=best_speed,
                passed_so_far=n_pass,
                failed_so_far=n_fail,
            )
        )

    all_results = [r for *_x, r in search] + [r for *_x, r in remeasure]
    timed = any(r.timing for r in all_results)
    note = next((r.timing_note for r in all_results if r.timing_note), None)
    best = _best_kernels(run, candidates, latest, {cid: r for _e, _r, cid, r in remeasure})
    source = None
    if best:
        source = next(c.source for c in candidates if c.candidate_id == best[0].candidate_id)
    try:
        env: Optional[Fingerprint] = store.get_environment(run.env_id)
    except KscoutError:  # a run row whose environment was never recorded: use what its evaluations say
        env = all_results[0].fingerprint if all_results else None
    return RunReport(
        run=run,
        env=env,
        timed=timed,
        timing_note=None if timed else (note or "speed was not measured on this device"),
        roots=_tree(candidates, latest),
        n_candidates=len(candidates),
        points=tuple(points),
        failures=tuple(
            FailureCount(status=s, error_class=e, count=n) for (s, e), n in sorted(failures.items())
        ),
        best=best,
        best_source=source,
    )


def _tree(candidates: list[CandidateRecord], latest: dict[str, EvalResult]) -> tuple[TreeNode, ...]:
    ids = {c.candidate_id for c in candidates}
    children: dict[Optional[str], list[CandidateRecord]] = {}
    for c in candidates:
        parent = c.parent_id if c.parent_id in ids and c.parent_id != c.candidate_id else None
        children.setdefault(parent, []).append(c)

    def node(c: CandidateRecord, seen: frozenset) -> TreeNode:
        r = latest.get(c.candidate_id)
        kids = [k for k in children.get(c.candidate_id, []) if k.candidate_id not in seen]
        parent = c.parent_id if c.parent_id in ids and c.parent_id != c.candidate_id else None
        return TreeNode(
            candidate_id=c.candidate_id,
            anchor=anchor(c.candidate_id),
            parent_anchor=anchor(parent) if parent else None,
            generation=c.generation,
            action=c.policy_action,
            tags=c.transformation_tags,
            rationale=c.rationale,
            status=r.status.value if r else None,
            speedup=_speed(r) if r and r.passed else None,
            children=tuple(node(k, seen | {k.candidate_id}) for k in kids),
        )

    return tuple(node(c, frozenset({c.candidate_id})) for c in children.get(None, []))


def _best_kernels(
    run: RunRecord,
    candidates: list[CandidateRecord],
    latest: dict[str, EvalResult],
    remeasured: dict[str, EvalResult],
) -> tuple[KernelSummary, ...]:
    """Passing candidates ranked by re-measured (else searched) speedup; the run's pick first on the CPU."""
    ranked = []
    for order, c in enumerate(candidates):
        r = latest.get(c.candidate_id)
        if r is None or not r.passed:
            continue
        timed = remeasured.get(c.candidate_id) or r
        speed = aggregate_speedup(timed)
        picked = c.candidate_id == run.best_candidate_id
        ranked.append(((speed.ratio if speed else 0.0), picked, -order, c.candidate_id, r, timed, speed))
    ranked.sort(reverse=True, key=lambda t: t[:3])
    out = []
    for _ratio, _picked, _o, cid, r, timed, speed in ranked[:TOP_KERNELS]:
        out.append(
            KernelSummary(
                candidate_id=cid,
                anchor=anchor(cid),
                eval_kind="remeasure" if cid in remeasured else "search",
                speedup=speed,
                shapes=_shape_rows(r, timed),
            )
        )
    return tuple(out)


def _shape_rows(correct: EvalResult, timed: EvalResult) -> tuple[ShapeRow, ...]:
    timing = {t.case_id: t for t in timed.timing}
    rows = []
    for s in correct.shape_results:
        t = timing.get(s.case_id)
        base = {b.name: b.timing.latency_ms_p50 for b in t.baselines if b.timing} if t else {}
        sp = next((x for x in t.speedups if x.baseline == "eager"), None) if t else None
        rows.append(
            ShapeRow(
                case_id=s.case_id,
                dtype=s.dtype,
                passed=s.passed,
                max_abs_error=s.max_abs_error,
                max_rel_error=s.max_rel_error,
                message=s.message,
                latency_ms_p50=t.candidate.latency_ms_p50 if t else None,
                eager_ms_p50=base.get("eager"),
                compile_ms_p50=base.get("torch_compile"),
                speedup=(
                    CaseSpeedup(
                        case_id=s.case_id, ratio=sp.ratio, ratio_low=sp.ratio_low, ratio_high=sp.ratio_high
                    )
                    if sp
                    else None
                ),
            )
        )
    return tuple(rows)


# -- rendering ------------------------------------------------------------------------------------


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


def progress_svg(report: RunReport) -> str:
    from matplotlib.ticker import MaxNLocator

    fig = _figure()
    ax = fig.subplots()
    xs = [p.index for p in report.points]
    if report.timed:
        ax.step(
            xs,
            [p.best_speedup if p.best_speedup is not None else float("nan") for p in report.points],
            where="post",
            label="best so far",
        )
        ax.scatter(
            xs,
            [p.speedup if p.speedup is not None else float("nan") for p in report.points],
            s=12,
            label="this evaluation",
        )
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_ylabel("speedup over eager (x)")
        ax.set_title("best speedup over evaluations")
    else:
        ax.plot(xs, [p.passed_so_far for p in report.points], label="passed", color="tab:green")
        ax.plot(xs, [p.failed_so_far for p in report.points], label="failed", color="tab:red")
        ax.set_ylabel("evaluations (cumulative)")
        ax.set_title("passed / failed over evaluations (speed not measured)")
    ax.set_xlabel("search evaluation")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not report.timed:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="best", fontsize="small")
    return _svg(fig)


def failures_svg(report: RunReport) -> str:
    from matplotlib.ticker import MaxNLocator

    fig = _figure()
    ax = fig.subplots()
    totals: dict[str, int] = {}
    for f in report.failures:
        totals[f.status] = totals.get(f.status, 0) + f.count
    ax.bar(list(totals), list(totals.values()), color="tab:red")
    ax.set_ylabel("evaluations")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("failures by kind")
    return _svg(fig)


def render_html(report: RunReport) -> str:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("agent.search", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
    )
    return env.get_template("report.html.j2").render(
        r=report,
        progress_svg=progress_svg(report) if report.points else None,
        failures_svg=failures_svg(report) if report.failures else None,
        fmt=_fmt,
    )


def _fmt(value: Optional[float], spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def summary_tables(report: RunReport) -> list:
    """The same summary as rich renderables (the CLI prints them)."""
    from rich.table import Table
    from rich.tree import Tree

    run = report.run
    head = Table(title=f"run {run.run_id}: {run.problem_name} on {run.arch}", show_header=False)
    for k, v in (
        ("status", run.status.value),
        ("stop reason", run.stop_reason or "-"),
        ("candidates", str(report.n_candidates)),
        ("search evaluations", str(len(report.points))),
        ("best candidate", run.best_candidate_id[:12] if run.best_candidate_id else "-"),
        ("speed", "measured" if report.timed else report.timing_note or "not measured"),
        ("environment", _env_line(report.env)),
    ):
        head.add_row(k, v)
    tree = Tree(f"search tree ({report.n_candidates} candidates)")

    def add(branch, n: TreeNode) -> None:
        sub = branch.add(
            f"{n.candidate_id[:12]} gen {n.generation} {n.action or ''} {n.status or 'unevaluated'}"
            + (f" {n.speedup:.3f}x" if n.speedup is not None else "")
        )
        for k in n.children:
            add(sub, k)

    for root in report.roots:
        add(tree, root)
    fails = Table(title="failures by kind")
    for col in ("status", "error class", "count"):
        fails.add_column(col)
    for f in report.failures:
        fails.add_row(f.status, f.error_class, str(f.count))
    out = [head, tree, fails]
    for k in report.best:
        t = Table(title=f"{k.candidate_id[:12]} per shape ({k.eval_kind})")
        for col in ("case", "passed", "max abs err", "max rel err", "p50 ms", "eager p50 ms", "speedup"):
            t.add_column(col)
        for s in k.shapes:
            t.add_row(
                s.case_id,
                "yes" if s.passed else "NO",
                _fmt(s.max_abs_error),
                _fmt(s.max_rel_error),
                _fmt(s.latency_ms_p50),
                _fmt(s.eager_ms_p50),
                _fmt(s.speedup.ratio if s.speedup else None),
            )
        out.append(t)
    return out


def _env_line(fp: Optional[Fingerprint]) -> str:
    if fp is None:
        return "-"
    parts = [fp.device_name, fp.arch, f"triton {fp.triton_version}", f"torch {fp.torch_version}"]
    parts += [f"driver {fp.driver_version}"] if fp.driver_version else []
    parts += [f"cuda {fp.cuda_version}"] if fp.cuda_version else []
    parts += [f"hip {fp.hip_version}"] if fp.hip_version else []
    return ", ".join(parts)
