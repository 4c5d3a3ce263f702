"""The whole flow of `kscout optimize-model`: profile, partition, extract, search, assemble, judge.

Budget (Amdahl): a region can give the model at most its share of the time, so the evaluation budget is
split by share among the hot regions (lowered, share >= `min_share`), at least one evaluation each. The
plan (each region's budget, stall limit, target) is fixed and returned before any search starts, and
each search writes its stop rule with its run, as every search does.

Identical regions (the same ops on the same shapes and dtypes, weights being inputs: a deep MLP's hidden
layers, a transformer's repeated blocks) are one problem. The group is hot by its summed share, searched
once with the group's budget, and its winner runs in every member: fifteen 3.5% layers are one 52% search,
not fifteen cold regions. Regions that differ only in their sizes (a DenseNet's norms before each dense
layer) are one problem too, with every member's sizes as a declared case (`_groups`).

Winners: on a device that times kernels a region keeps its run's pick (a measured win over the
reference), else its reference ops; on a CPU nothing is timed, so a region takes its run's passing
kernel, which proves the assembly correct and claims no speed.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from agent.lifecycle.evidence import MODEL_FAMILY_PREFIX
from agent.model import ModelError, assemble, attention, extract, graph, partition, profile
from agent.model.records import ModelReport, RegionRow
from evaluation.errors import KscoutError


@dataclass
class Plan:
    """Everything the flow knows before a search starts."""

    path: str
    device: str
    traced: graph.Traced
    regions: list
    free: set
    profile: profile.Profile
    rows: dict[str, RegionRow] = field(default_factory=dict)
    extracted: dict[str, extract.Extracted] = field(default_factory=dict)


def prepare(
    path: str,
    *,
    device: str = "cpu",
    budget: int = 8,
    min_share: float = 0.05,
    work: Path,
    profile_iters: tuple[int, int] = (2, 3),
) -> Plan:
    """Trace, profile, partition and extract; each hot region gets its share of `budget`.
    `profile_iters`: (warm-up, profiled) forwards of the model and of the captured graph."""
    from agent.proposers.lowering import LoweringError, lower_source
    from evaluation.problem_file import read_source

    source = read_source(path)
    try:
        traced = graph.trace(source, str(path), device)
        graph.run(traced, record=True)
    except KscoutError:
        raise
    except Exception as exc:
        raise ModelError(f"{path}: cannot run the captured forward: {type(exc).__name__}: {exc}") from exc
    g = traced.captured.gm.graph
    regions = partition.partition(g, traced.meta, partition.param_placeholders(traced.captured))
    free = partition.free_nodes(g, traced.meta)
    regions = attention.fuse_attention(traced, regions, free)
    prof = profile.profile(traced, regions, device, warmup=profile_iters[0], iters=profile_iters[1])
    plan = Plan(path=str(path), device=device, traced=traced, regions=regions, free=free, profile=prof)
    name = Path(path).name
    reasons: dict[str, tuple[Any, Optional[str]]] = {}  # region -> (RegionRow.state, why)
    for r in regions:
        if r.kind == "reference":
            reasons[r.name] = ("reference", "no schedule lowers " + ", ".join(dict.fromkeys(r.ops)))
        else:
            plan.extracted[r.name] = extract.extract(r, traced.meta, free, name, work)
    same_as = _groups(plan, prof)  # a region -> the region whose problem it is searched as
    for lead in [n for n in plan.extracted if n not in same_as]:  # each problem lowered (or refused) once
        e = plan.extracted[lead]
        try:
            lower_source(e.source, e.path)
        except LoweringError as exc:
            reasons[lead] = ("not_lowered", " ".join(str(exc).split())[:200])
    for member, lead in same_as.items():
        if lead in reasons:
            reasons[member] = reasons[lead]
    # a group (identical regions, or a size family) is one problem: hot by its summed share, searched once
    group_share = {r.name: prof.share(r.name) for r in regions if r.name not in same_as}
    for member, lead in same_as.items():
        group_share[lead] += prof.share(member)
    group_size = Counter(same_as.get(r.name, r.name) for r in regions)
    for r in regions:
        lead = same_as.get(r.name, r.name)
        if r.name not in reasons and group_share[lead] < min_share:
            n = group_size[lead]
            share = f"{group_share[lead]:.1%}" + (f" ({n} regions of one problem together)" if n > 1 else "")
            reasons[r.name] = ("cold", f"{share} of the time < --min-share {min_share:.0%}")
    hot = [r for r in regions if r.name not in reasons and r.name not in same_as]
    total = sum(group_share[r.name] for r in hot) or 1.0
    for r in regions:
        state, reason = reasons.get(r.name, ("searched", None))
        found = plan.extracted.get(r.name)
        plan.rows[r.name] = RegionRow(
            name=r.name,
            kind=r.kind,  # type: ignore[arg-type]  # Region.kind is one of RegionRow's kinds
            ops=tuple(r.ops),
            input_shapes=tuple(
                tuple(traced.meta[a].shape) for a in r.inputs if isinstance(traced.meta.get(a), graph.Meta)
            ),
            time_us=prof.region_us[r.name],
            share=prof.share(r.name),
            state=state,
            reason=reason,
            problem_path=found.path if found else None,
            library=extract.LIBRARY_CALL if r.canonical is not None else None,
            same_as=same_as.get(r.name),
            budget=max(1, round(budget * group_share[r.name] / total))
            if state == "searched" and r.name not in same_as
            else 0,
        )
    return plan


def _groups(plan: Plan, prof) -> dict[str, str]:
    """Which regions are searched as one problem: member -> lead.

    Identical regions (equal `problem_key`) are one problem outright. Regions that differ only in their
    input sizes (equal `family_key`: a DenseNet's batch norm and ReLU before each dense layer, whose
    channel count grows layer by layer) are one problem whose SHAPES holds every member's sizes as a
    case (`extract.with_cases`): one kernel is searched and judged on all of them, and each member's
    dispatch takes it at that member's own sizes (assemble._spec). The lead is the family's largest share
    of the time; the cases of the largest shares are the timed ones."""
    first: dict[str, str] = {}
    same_as: dict[str, str] = {}
    for name, e in plan.extracted.items():
        key = problem_key(e.source)
        if key in first:
            same_as[name] = first[key]
        else:
            first[key] = name
    share = {lead: prof.share(lead) for lead in first.values()}
    for member, lead in same_as.items():
        share[lead] += prof.share(member)
    families: dict[str, list[str]] = {}
    for key, lead in first.items():
        families.setdefault(family_key(key), []).append(lead)
    for members in families.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda m: -share[m])
        lead = members[0]
        plan.extracted[lead] = extract.with_cases(
            plan.extracted[lead], [plan.extracted[m] for m in members], timed=TIMED_CASES
        )
        for m in members[1:]:
            same_as[m] = lead
        for dup, to in list(same_as.items()):
            if to in members[1:]:
                same_as[dup] = lead
    return same_as


TIMED_CASES = 4  # a family's cases that are timed (its largest shares): the rest are checked, not timed


def family_key(key: str) -> str:
    """A `problem_key` without its sizes (the `S0_1 = 64` lines and SHAPES): regions with equal family keys
    run the same ops in the same order on inputs of the same ranks and dtypes, at other sizes."""
    return "\n".join(line for line in key.splitlines() if not re.match(r"^(S\d+_\d+ = \d+|SHAPES = .*)$", line))


def problem_key(source: str) -> str:
    """A region problem's text without its docstring (which names the region): regions with equal keys run
    the same ops on the same shapes and dtypes, their weights being inputs."""
    return source.split('"""', 2)[-1]


def search(
    plan: Plan,
    store,
    *,
    stall: Optional[int] = 30,
    minutes: Optional[float] = None,
    trials: int = 1,
    on_event: Optional[Callable] = None,
    no_hybrid: bool = False,
) -> dict[str, str]:
    """One search per hot region (optimize-many's machinery, one executor, one deadline); region -> run id."""
    from agent.search.many import Shared, run_many
    from agent.search.many import plan as many_plan

    hot = [row for row in plan.rows.values() if row.state == "searched" and row.same_as is None]
    if not hot:
        return {}
    base = dict(device=plan.device, stall=stall, trials=trials, batch=1, workers=1, no_hybrid=no_hybrid)
    configs = [
        c.model_copy(update={"budget": row.budget})
        for c, row in zip(many_plan([str(r.problem_path) for r in hot], base), hot)
    ]
    result = run_many(configs, store, shared=Shared(minutes=minutes), on_event=on_event)
    for row, o in zip(hot, result.outcomes):
        if not o.run_id:  # never started (the shared deadline had passed) or failed at once: the row says so
            why = f"its search {o.state.replace('_', ' ')}" + (f": {o.reason}" if o.reason else "")
            plan.rows[row.name] = row.model_copy(update={"reason": f"kept the reference ops: {why}"})
    return {row.name: o.run_id for row, o in zip(hot, result.outcomes) if o.run_id}


def winners(plan: Plan, store, runs: dict[str, str], *, no_hybrid: bool = False) -> dict[str, assemble.Winner]:
    """Each searched region's kernel: its run's pick (timed) or its passing kernel (a CPU); with
    `no_hybrid`, never one that runs PyTorch compute beside its Triton kernels."""
    from agent.search.summary import summarize

    out = {}
    for name, run_id in runs.items():
        s = summarize(store, run_id, no_hybrid=no_hybrid)
        kernel = s.best if s.timed else s.in_hand
        row = plan.rows[name]
        update: dict[str, Any] = {"run_id": run_id}
        slower = reference_is_faster(kernel) if s.timed and kernel is not None else None
        if slower is not None:  # the region keeps its reference ops: a kernel may only make the model faster
            update.update(reason=slower)
            kernel = None
        elif kernel is None:
            update.update(reason=no_kernel_reason(s))
        if kernel is not None:
            source = store.get_candidate(kernel.candidate_id, run_id=run_id).source
            e = plan.extracted[name]
            out[name] = assemble.Winner(name, source, assemble.proven_archs(plan.device), e.dtype, e.input_shapes)
            update.update(kernel=kernel.candidate_id, schedule=_schedule(source))
        plan.rows[name] = row.model_copy(update=update)
        for member in [m for m, r in plan.rows.items() if r.same_as == name]:  # the same problem: the same pick
            plan.rows[member] = plan.rows[member].model_copy(update=update)
            if name in out:
                out[member] = member_winner(plan, out[name], member)
    return out


def member_winner(plan: Plan, lead: assemble.Winner, member: str) -> assemble.Winner:
    """The lead's kernel as a member region takes it: at the member's own sizes, one of the problem's
    cases (`_groups`), so its dispatch never runs the kernel at sizes the judge did not check."""
    return dataclasses.replace(lead, input_shapes=plan.extracted[member].input_shapes)


def no_kernel_reason(s) -> str:
    """Why a region's search gave no kernel, from its run's summary: what it evaluated, how those failed and
    why it stopped ("kept the reference ops: no kernel passed (3 evaluated, 0 passed; 3 crashed
    (AcceleratorError)); stopped: deadline"); where passing kernels were timed, the fastest one's geomean
    against the region's eager reference."""
    fails = ", ".join(f"{f.count} {f.status} ({f.error_class})" for f in s.failures)
    what = f"{s.evaluations} evaluated, {s.passed} passed" + (f"; {fails}" if fails else "")
    # how far the fastest passing kernel stayed from the region's reference (timed runs only)
    timed = [k.verdict.vs("eager") for k in getattr(s, "kernels", ()) if k.verdict is not None]
    timed = [a for a in timed if a is not None]
    if timed:
        g = max(timed, key=lambda a: a.geomean.ratio).geomean
        what += f"; the fastest {g.ratio:.2f}x eager [{g.low:.2f}, {g.high:.2f}]"
    why = "no kernel passed" if s.passed == 0 else "no passing kernel was picked"
    stop = f"; stopped: {s.stop_reason}" if s.stop_reason else ""
    return f"kept the reference ops: {why} ({what}){stop}"


def reference_is_faster(kernel) -> Optional[str]:
    """Why a region's best timed kernel is not taken (its reference ops are faster), or None. The reference
    path of the assembled model runs the region's aten ops eagerly, so a kernel whose geomean over the
    timed cases is below 1x eager would slow the model down: falling below what the user already has."""
    across = kernel.verdict.vs("eager") if kernel.verdict is not None else None
    if across is None or across.geomean.ratio >= 1.0:
        return None
    g = across.geomean
    return (
        f"kept the reference ops: its best kernel was {g.ratio:.2f}x eager [{g.low:.2f}, {g.high:.2f}] "
        f"over {across.cases} timed case(s)"
    )


def _schedule(source: str) -> Optional[str]:
    """The lowering's config line of a candidate: its groups' kinds (`matmul`, `row+pointwise`)."""
    m = re.search(r"^config: (\{.*\})", source, re.M)
    if not m:
        return None
    try:
        return "+".join(g.get("kind", "?") for g in json.loads(m.group(1)).get("groups", []))
    except (ValueError, AttributeError):
        return None


def model_family(path: str) -> str:
    """The model's op family in the store and the registry: its file stem without KernelBench's number,
    lowercased ("44_MiniGPTBlock.py" -> "model:minigptblock")."""
    return MODEL_FAMILY_PREFIX + re.sub(r"^\d+_", "", Path(path).stem).lower()


def model_problem(plan: Plan, work: Path, tolerance: str = "kernelbench") -> str:
    """The model file as a problem that carries its own judge: its shipped sizes as its one declared case
    (a file that declares SHAPES keeps them), its op family (`model_family`) and the tolerances of
    `tolerance` written out as TOLERANCES. The policy travels with the file, so a promotion's gate and a
    later `kscout revalidate` judge the model exactly as this run did."""
    import evaluation
    from evaluation.problem_file import parse_source, read_source, size_slots

    source = read_source(plan.path)
    tree = parse_source(source, plan.path)
    declared = {getattr(t, "id", None) for n in tree.body for t in getattr(n, "targets", [])}
    if "SHAPES" not in declared:
        case = dict(size_slots(tree), tags=["timed"])
        source += f"\n\nSHAPES = {{'cpu': [{case!r}], 'cuda': [{case!r}]}}\n"
    if "OP_FAMILY" not in declared:
        source += f"\nOP_FAMILY = {model_family(plan.path)!r}\n"
    tols = evaluation.load_problem(plan.path, "cpu", tolerance=tolerance).tolerances
    source += f"\nTOLERANCES = {{{', '.join(f'{d!r}: ({t.atol!r}, {t.rtol!r})' for d, t in tols.items())}}}\n"
    path = work / Path(plan.path).name
    path.write_text(source)
    return str(path)


def region_judged(res, input_shapes) -> dict[str, Any]:
    """A region row's judge fields from its problem's evaluation: the timed case at the region's own sizes
    where there is one (a member of a size family, `_groups`), else the geomean over the timed cases."""
    speed = res.measured_speedup("eager")
    fields: dict[str, Any] = {"judged": res.status.value, "speedup": None, "kernel_us": None}
    if speed is None:
        return fields
    own = extract.size_params(input_shapes)
    case = next((t for t in res.timing if t.params == own), None)
    ratio = next((s.ratio for s in case.speedups if s.baseline == "eager"), None) if case else None
    if case is not None and ratio is not None:
        return {**fields, "speedup": ratio, "kernel_us": case.candidate.latency_ms_p50 * 1000.0}
    return {**fields, "speedup": speed.ratio, "kernel_us": kernel_us(res)}


def kernel_us(res) -> Optional[float]:
    """A timed evaluation's own time in microseconds: the geometric mean of its timed cases' p50."""
    from agent.search.coverage import geomean

    return geomean([t.candidate.latency_ms_p50 * 1000.0 for t in res.timing])


def judge(
    plan: Plan,
    source: str,
    work: Path,
    *,
    tolerance: str = "kernelbench",
    trials: int = 1,
    winners_: Optional[dict] = None,
    store=None,
    autotune: bool = False,
) -> ModelReport:
    """The assembled model end to end against the model file, and each winner on its own problem.

    With a `store`, the assembled model is recorded as one candidate of its own run (agent.model.keep),
    re-measured against the whole model's baselines on a GPU, so the approval gate can promote it."""
    import evaluation
    from agent.model import keep
    from agent.search.executors import make_executor

    dev = "cuda" if plan.device.startswith("cuda") else "cpu"
    # Candidates run through an executor, as everywhere in agent/ (a sandboxed worker; timed on a GPU).
    executor = make_executor(device=dev, trials=trials)
    try:
        judged: dict[str, Any] = {}  # a winner's region -> its judge's result, once per kernel
        for name, w in (winners_ or {}).items():
            if w.region not in judged:
                problem = evaluation.load_problem(plan.extracted[w.region].path, dev)
                judged[w.region] = dict(executor.evaluate_batch([w.source], problem))[0]
            plan.rows[name] = plan.rows[name].model_copy(update=region_judged(judged[w.region], w.input_shapes))
        # the tolerance policy is written into the model's problem file (model_problem): loaded as declared
        problem = evaluation.load_problem(model_problem(plan, work, tolerance), dev)
        res = dict(executor.evaluate_batch([source], problem))[0]
        path = work / f"{Path(plan.path).stem}_assembled.py"
        path.write_text(source)
        speed, comp = res.measured_speedup("eager"), res.measured_speedup("torch_compile")
        report = ModelReport(
            **_profile_fields(plan),
            assembled_path=str(path),
            verdict=res.status.value,
            verdict_message=res.message,
            model_tolerance=tolerance,
            speedup=speed.ratio if speed else None,
            speedup_low=speed.ratio_low if speed else None,
            speedup_high=speed.ratio_high if speed else None,
            compile_speedup=comp.ratio if comp else None,
            speedup_source="judge" if speed else None,
            timing_note=res.timing_note,
        )
        if store is not None:
            report = keep.record(store, report, source, problem, res, executor=executor, autotune=autotune)
    finally:
        executor.close()
    return report


def optimize_model(
    path: str,
    store,
    *,
    work: Path,
    device: str = "cpu",
    budget: int = 8,
    min_share: float = 0.05,
    stall: Optional[int] = 30,
    minutes: Optional[float] = None,
    tolerance: str = "kernelbench",
    trials: int = 1,
    on_event: Optional[Callable] = None,
    no_hybrid: bool = False,
    autotune: bool = False,
) -> ModelReport:
    plan = prepare(path, device=device, budget=budget, min_share=min_share, work=work)
    runs = search(plan, store, stall=stall, minutes=minutes, trials=trials, on_event=on_event, no_hybrid=no_hybrid)
    won = winners(plan, store, runs, no_hybrid=no_hybrid)
    if not won:  # nothing to assemble: the model stays as it is, and says why region by region
        report = unchanged(plan, tolerance)
    else:
        report = assembled(plan, won, path, work, tolerance, trials, store, autotune)
    from agent.model import page

    html = work / f"{Path(path).stem}_report.html"
    html.write_text(page.render(report))
    return report.model_copy(update={"report_path": str(html)})


def assembled(plan: Plan, won: dict, path: str, work: Path, tolerance: str, trials: int, store, autotune: bool):
    """The ModelNew of the winning kernels, judged end to end (and recorded, with a store)."""
    title = f"{Path(path).name}: ModelNew assembled by kscout optimize-model from regions {', '.join(won) or '(none)'}."
    source = assemble.assemble(plan.traced, plan.regions, plan.free, won, title)
    return judge(plan, source, work, tolerance=tolerance, trials=trials, winners_=won, store=store, autotune=autotune)


def _profile_fields(plan: Plan) -> dict[str, Any]:
    """What every model report carries from the plan: the model, its device, the profile and the rows."""
    p = plan.profile
    return dict(
        model=Path(plan.path).name,
        device=plan.device,
        clock=p.clock,
        eager_us=p.eager_us,
        graph_us=p.graph_us,
        glue_us=p.glue_us,
        regions=tuple(plan.rows[r.name] for r in plan.regions),
    )


def unchanged(plan: Plan, tolerance: str) -> ModelReport:
    """The report of a run where no region took a kernel: verdict `unchanged`, nothing assembled, judged or
    recorded (a ModelNew of reference ops alone would be refused as launching no Triton kernel, which reads
    as a fault of the model's kernels when there are none). Each region's row says why."""
    searched = [r for r in plan.rows.values() if r.state == "searched"]
    return ModelReport(
        **_profile_fields(plan),
        verdict="unchanged",
        verdict_message=(
            f"no region took a kernel ({len(searched)} searched; each row says why): the model keeps its own ops"
            if searched
            else "no region was hot and lowerable enough to search: the model keeps its own ops"
        ),
        model_tolerance=tolerance,
        timing_note="not measured: nothing was assembled",
    )
