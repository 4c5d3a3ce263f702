"""The one read model of a run: what `show`, `--json`, `report`, the kernel file and the benches render.

Built from the store alone, so it reads a run in progress, a finished one, or one another process
wrote, and every view of a run says the same thing. The verdict on a kernel names both baselines a
user compares against (eager and torch.compile) with their intervals, from the same measurement, and
covers every timed case: the geometric mean over them and the worst one, never only one case. The
numbers come from the interleaved re-measure where the kernel has one (eager, torch.compile and the
seed timed round by round in one process), else from its search evaluation; `numbers_from` says
which, and `uncovered_cases` names the timed cases the numbers leave out. Where nothing was timed
(the CPU) the verdict is still there: `measured` is false and `not_measured` names eager and
torch.compile with the reason, so no view has to guess what a missing number means. A failed
candidate's node carries its error class and the first line of its message (the case and trial).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from typing import Literal, Optional

from pydantic import computed_field

from agent import Frozen
from agent.search.precision import dot_precisions
from agent.search.stopping import measured_speedup
from evaluation.records import EvalResult, Fingerprint, ProblemInfo
from store.records import CandidateRecord, RunRecord, RunStatus, StopRule

SEED_PROPOSER = "seed"  # the proposer name of a problem's shipped seed (agent.search.session writes it)
TOP_KERNELS = 3
BASELINE_ORDER = ("eager", "torch_compile")  # shown first, in this order; any other baseline follows
BASELINE_LABEL = {"eager": "eager", "torch_compile": "torch.compile", "seed": "the seed"}


def label(baseline: str) -> str:
    return BASELINE_LABEL.get(baseline, baseline.replace("_", " "))


def _parse_time(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _gm(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


class Ratio(Frozen):
    """A speedup (baseline time over kernel time) with its conservative interval."""

    ratio: float
    low: float
    high: float

    @computed_field
    @property
    def significant(self) -> bool:
        """The interval excludes 1.0: a win (or a loss) outside the noise."""
        return self.low > 1.0 or self.high < 1.0


class CaseNumbers(Frozen):
    """The kernel on one timed case."""

    case_id: str  # carries the dtype: "M=4096,N=4096|bfloat16"
    dtype: str
    latency_ms_p50: float
    vs: dict[str, Ratio]  # baseline name ("eager", "torch_compile", "seed", ...) -> speedup over it
    gbps: Optional[float] = None
    pct_of_copy: Optional[float] = None  # achieved GB/s over the measured copy bandwidth, in %


class Across(Frozen):
    """One baseline over every timed case that has it."""

    baseline: str
    geomean: Ratio  # geometric means of the ratios and of the interval ends
    worst: Ratio
    worst_case_id: str
    cases: int


class NotMeasured(Frozen):
    """A baseline the verdict has no number against (eager, torch.compile), and why."""

    baseline: str
    speed: Literal["not measured"] = "not measured"
    reason: str  # e.g. "not measured on this device (cpu, Triton interpreter)"


class Verdict(Frozen):
    numbers_from: Optional[Literal["remeasure", "search"]]  # None: nothing was timed
    how: Optional[str] = None  # e.g. "re-measured in 5 rounds interleaved with eager and torch.compile"
    cases: tuple[CaseNumbers, ...] = ()
    across: tuple[Across, ...] = ()  # eager first, then torch.compile, then any other baseline
    not_measured: tuple[NotMeasured, ...] = ()  # eager and torch.compile where `across` lacks them
    pct_of_copy_worst: Optional[float] = None
    pct_of_copy_worst_case: Optional[str] = None
    uncovered_cases: tuple[str, ...] = ()  # timed cases of the problem these numbers do not cover

    @computed_field
    @property
    def measured(self) -> bool:
        """Some case was timed; false on the CPU, where `not_measured` says why for each baseline."""
        return bool(self.cases)

    def vs(self, baseline: str) -> Optional[Across]:
        return next((a for a in self.across if a.baseline == baseline), None)


class ShapeCheck(Frozen):
    """Correctness of one declared case: the worst trial's errors against the tolerance."""

    case_id: str
    dtype: str
    passed: bool
    max_abs_error: Optional[float] = None
    max_rel_error: Optional[float] = None
    atol: float
    rtol: float
    message: Optional[str] = None


class KernelView(Frozen):
    candidate_id: str
    proposer: str
    picked: bool  # the run's declared best
    status: str  # of its search evaluation
    verdict: Optional[Verdict] = None  # None only where it was never evaluated; untimed: measured false
    checks: tuple[ShapeCheck, ...] = ()
    # a hybrid (issue 25): the PyTorch compute ops in its forward, and their share of the profiled
    # device time (0..1; None where nothing was profiled, the CPU)
    hybrid_ops: tuple[str, ...] = ()
    hybrid_device_fraction: Optional[float] = None
    # what its tl.dot calls ask for ("ieee", "tf32x3", Triton's default...): agent.search.precision
    dot_precision: tuple[str, ...] = ()

    @property
    def hybrid(self) -> bool:
        return bool(self.hybrid_ops)

    # The verdict against eager, for callers that want one number (geomean over the timed cases).
    @property
    def speedup(self) -> Optional[float]:
        a = self.verdict.vs("eager") if self.verdict else None
        return a.geomean.ratio if a else None


class NodeView(Frozen):
    candidate_id: str
    parent_id: Optional[str]
    generation: int
    proposer: str
    action: Optional[str]
    reason: Optional[str]
    rationale: str = ""
    tags: tuple[str, ...] = ()
    status: Optional[str]  # None: written, not evaluated yet
    error_class: Optional[str] = None
    failed_stage: Optional[str] = None
    message: Optional[str] = None  # a failure's first line: "forward raised on CASE trial N: ValueError: ..."
    speedup: Optional[float] = None  # geomean vs eager of its search evaluation; None where untimed
    reused: bool = False  # the evaluation came from an earlier run on the same environment
    hybrid: bool = False  # passed with PyTorch compute in forward (issue 25)


class EvalPoint(Frozen):
    index: int  # 1-based position among the run's search evaluations
    candidate_id: str
    status: str
    speedup: Optional[float] = None  # vs eager (geomean over its timed cases)
    speedup_vs_compile: Optional[float] = None  # where this evaluation timed torch.compile
    best_so_far: Optional[float] = None
    passed_so_far: int
    failed_so_far: int


class FailureCount(Frozen):
    status: str
    error_class: str
    count: int


class RunSummary(Frozen):
    run_id: str
    problem_name: str
    problem_id: str
    problem_ref: str  # what `--problem` takes to judge a kernel against this problem again
    op_family: str
    device: str
    device_name: str
    arch: str
    env: Optional[Fingerprint] = None
    proposer: str
    model: Optional[str]
    status: str  # as stored
    state: str  # what is true now: the status, or "stale" for a running run whose process is gone
    stop_reason: Optional[str]
    stop_rule: StopRule
    started_at: str
    finished_at: Optional[str]
    evaluations: int  # search evaluations this run paid for
    evaluations_reused: int
    candidates: int
    passed: int  # search evaluations that passed
    failures: tuple[FailureCount, ...]
    cost_usd: float
    timed: bool
    timing_note: Optional[str] = None  # why nothing was timed
    time_cases: tuple[str, ...] = ()  # the --time-case selection the run was started with
    dtypes: tuple[str, ...] = ()  # the --dtype selection
    best: Optional[KernelView]  # the run's pick; None: nothing passed, or nothing beat the reference
    no_hybrid: bool = False  # hybrids left out of the ranking (--no-hybrid, the run's or the view's)
    hybrids_left_out: tuple[str, ...] = ()  # passing hybrids the ranking left out (candidate ids)
    kernels: tuple[KernelView, ...]  # the pick first, then the fastest passing ones
    note: str
    nodes: tuple[NodeView, ...]
    points: tuple[EvalPoint, ...]

    @property
    def failures_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.failures:
            out[f.status] = out.get(f.status, 0) + f.count
        return out

    @property
    def failed_nodes(self) -> tuple[NodeView, ...]:
        """The candidates whose search evaluation failed, in the order they were written."""
        return tuple(n for n in self.nodes if n.status is not None and n.status != "passed")

    @property
    def in_hand(self) -> Optional[KernelView]:
        """The kernel a user gets: the pick, else the fastest passing candidate (not a win; the note says)."""
        return self.best or (self.kernels[0] if self.kernels else None)


# -- building it -------------------------------------------------------------------------------------
def _timed_ids(problem: Optional[ProblemInfo]) -> tuple[str, ...]:
    """The cases a timing covers: those tagged "timed", else every declared case (the harness's rule)."""
    if problem is None:
        return ()
    cases = [c for c in problem.shape_cases if "timed" in c.tags] or list(problem.shape_cases)
    return tuple(c.case_id for c in cases)


NOT_TIMED_WITH_IT = "not timed with this kernel"


def _not_measured(have: set[str], reason: str) -> tuple[NotMeasured, ...]:
    return tuple(NotMeasured(baseline=b, reason=reason) for b in BASELINE_ORDER if b not in have)


def verdict_of(
    result: EvalResult,
    kind: Literal["remeasure", "search"],
    timed_ids: tuple[str, ...] = (),
    seed_result: Optional[EvalResult] = None,
) -> Verdict:
    """The kernel's numbers from one evaluation; `seed_result`: the seed in the same re-measure.

    Untimed (the CPU, or a candidate that did not pass): a verdict that measured nothing, naming each
    baseline with the reason."""
    if not result.timing:
        reason = result.timing_note or ("it did not pass, so it was not timed" if not result.passed else "not timed")
        return Verdict(numbers_from=None, not_measured=_not_measured(set(), reason))
    seed_p = {t.case_id: t.candidate for t in seed_result.timing} if seed_result else {}
    cases = []
    for t in result.timing:
        vs = {
            s.baseline: Ratio(ratio=s.ratio, low=s.ratio_low, high=s.ratio_high)
            for s in t.speedups
            if s.ratio > 0 and s.ratio_low > 0 and s.ratio_high > 0
        }
        sp = seed_p.get(t.case_id)
        if sp is not None:
            c = t.candidate
            vs["seed"] = Ratio(
                ratio=sp.latency_ms_p50 / c.latency_ms_p50,
                low=sp.latency_ms_p20 / c.latency_ms_p80,
                high=sp.latency_ms_p80 / c.latency_ms_p20,
            )
        cases.append(
            CaseNumbers(
                case_id=t.case_id,
                dtype=t.dtype,
                latency_ms_p50=t.candidate.latency_ms_p50,
                vs=vs,
                gbps=t.achieved_gbps,
                pct_of_copy=t.pct_of_ceiling,
            )
        )
    names = sorted(
        {b for c in cases for b in c.vs},
        key=lambda b: (BASELINE_ORDER.index(b) if b in BASELINE_ORDER else len(BASELINE_ORDER), b),
    )
    across = []
    for b in names:
        have = [(c.case_id, c.vs[b]) for c in cases if b in c.vs]
        worst_id, worst = min(have, key=lambda x: x[1].ratio)
        across.append(
            Across(
                baseline=b,
                worst=worst,
                worst_case_id=worst_id,
                cases=len(have),
                geomean=Ratio(
                    ratio=_gm([r.ratio for _, r in have]),
                    low=_gm([r.low for _, r in have]),
                    high=_gm([r.high for _, r in have]),
                ),
            )
        )
    pct = [(c.pct_of_copy, c.case_id) for c in cases if c.pct_of_copy is not None]
    worst_pct = min(pct) if pct else None
    covered = {c.case_id for c in cases}
    return Verdict(
        numbers_from=kind,
        how=result.timing_note if kind == "remeasure" else None,
        cases=tuple(cases),
        across=tuple(across),
        not_measured=_not_measured({a.baseline for a in across}, NOT_TIMED_WITH_IT),
        pct_of_copy_worst=worst_pct[0] if worst_pct else None,
        pct_of_copy_worst_case=worst_pct[1] if worst_pct else None,
        uncovered_cases=tuple(i for i in timed_ids if i not in covered),
    )


def _checks(result: EvalResult) -> tuple[ShapeCheck, ...]:
    return tuple(
        ShapeCheck(
            case_id=s.case_id,
            dtype=s.dtype,
            passed=s.passed,
            max_abs_error=s.max_abs_error,
            max_rel_error=s.max_rel_error,
            atol=s.atol,
            rtol=s.rtol,
            message=s.message,
        )
        for s in result.shape_results
    )


def _first_line(text: Optional[str]) -> Optional[str]:
    lines = (text or "").strip().splitlines()
    return lines[0].strip() if lines else None


def _speed(result: Optional[EvalResult], baseline: str = "eager") -> Optional[float]:
    m = measured_speedup(result, baseline) if result is not None else None
    return m.ratio if m else None


def _config(run: RunRecord) -> dict:
    try:
        data = json.loads(run.config_json or "{}")
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _owner(store, run_id: str):
    owners = getattr(store, "run_owners", None)
    return owners([run_id]).get(run_id) if owners else None


class _Loaded:
    """One read of a run's rows; every view below is derived from it and nothing else."""

    def __init__(self, store, run_ref: str):
        from evaluation.errors import KscoutError

        self.run = run = store.get_run(run_ref)
        self.candidates = store.candidates(run.run_id)
        self.by_id: dict[str, CandidateRecord] = {c.candidate_id: c for c in self.candidates}
        self.search_rows = store.evaluations(run_id=run.run_id, kind="search")
        self.search = {cid: r for _, _, cid, r in self.search_rows}
        self.remeasured = {cid: r for _, _, cid, r in store.evaluations(run_id=run.run_id, kind="remeasure")}
        try:
            self.env: Optional[Fingerprint] = store.get_environment(run.env_id)
        except KscoutError:  # a run row whose environment was never recorded: use what its evaluations say
            self.env = next(iter(self.search.values())).fingerprint if self.search else None
        try:
            self.problem: Optional[ProblemInfo] = store.get_problem(run.problem_id)
        except KscoutError:
            self.problem = None
        self.timed_ids = _timed_ids(self.problem)
        self.seed_id = next((c.candidate_id for c in self.candidates if c.proposer == SEED_PROPOSER), None)

    def kernel(self, cid: str) -> KernelView:
        r = self.search.get(cid)
        again = self.remeasured.get(cid)
        verdict = None
        if again is not None and again.timing:
            seed_again = self.remeasured.get(self.seed_id) if self.seed_id and self.seed_id != cid else None
            verdict = verdict_of(again, "remeasure", self.timed_ids, seed_again)
        elif r is not None:
            verdict = verdict_of(r, "search", self.timed_ids)
        return KernelView(
            candidate_id=cid,
            proposer=self.by_id[cid].proposer if cid in self.by_id else "?",
            picked=cid == self.run.best_candidate_id,
            status=r.status.value if r else "not evaluated",
            verdict=verdict,
            checks=_checks(r) if r else (),
            hybrid_ops=r.hybrid_ops if r else (),
            hybrid_device_fraction=r.hybrid_device_fraction if r else None,
            dot_precision=dot_precisions(self.by_id[cid].source) if cid in self.by_id else (),
        )


def kernel_view(store, run_ref: str, candidate_ref: str) -> tuple[KernelView, RunSummary, str]:
    """Any candidate of a run (a unique id prefix), with the run's summary and the candidate's source."""
    data = _Loaded(store, run_ref)
    cid = store.get_candidate(candidate_ref, run_id=data.run.run_id).candidate_id
    return data.kernel(cid), _summarize(store, data), data.by_id[cid].source


def summarize(store, run_ref: str, *, no_hybrid: bool = False) -> RunSummary:
    """`no_hybrid`: leave hybrids out of the ranking (a run started with --no-hybrid always does)."""
    return _summarize(store, _Loaded(store, run_ref), no_hybrid)


def _summarize(store, data: _Loaded, no_hybrid: bool = False) -> RunSummary:
    from agent.search.liveness import run_state

    run, search, remeasured = data.run, data.search, data.remeasured
    no_hybrid = no_hybrid or bool(_config(run).get("no_hybrid"))
    run_start = _parse_time(run.started_at)
    reused = {cid for cid, r in search.items() if _parse_time(r.started_at) < run_start}
    nodes = []
    for c in data.candidates:
        r = search.get(c.candidate_id)
        nodes.append(
            NodeView(
                candidate_id=c.candidate_id,
                parent_id=c.parent_id,
                generation=c.generation,
                proposer=c.proposer,
                action=c.policy_action,
                reason=c.policy_reason,
                rationale=c.rationale,
                tags=c.transformation_tags,
                status=r.status.value if r else None,
                error_class=r.error_class if r else None,
                failed_stage=r.failed_stage.value if r and r.failed_stage else None,
                message=_first_line(r.message) if r and not r.passed else None,
                speedup=_speed(r),
                reused=c.candidate_id in reused,
                hybrid=bool(r and r.passed and r.hybrid),
            )
        )

    points, best_so_far, n_pass, n_fail = [], None, 0, 0
    failures: dict[tuple[str, str], int] = {}
    for i, (_e, _r, cid, r) in enumerate(data.search_rows, start=1):
        speed = _speed(r)
        if speed is not None and (best_so_far is None or speed > best_so_far):
            best_so_far = speed
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
                speedup_vs_compile=_speed(r, "torch_compile"),
                best_so_far=best_so_far,
                passed_so_far=n_pass,
                failed_so_far=n_fail,
            )
        )

    order = {c.candidate_id: i for i, c in enumerate(data.candidates)}
    passing = [cid for cid, r in search.items() if r.passed and not (no_hybrid and r.hybrid)]
    left_out = tuple(cid for cid, r in search.items() if r.passed and no_hybrid and r.hybrid)

    def rank(cid: str):
        k = remeasured.get(cid) or search[cid]
        return (cid != run.best_candidate_id, -(_speed(k) or 0.0), order.get(cid, len(order)))

    kernels = tuple(data.kernel(cid) for cid in sorted(passing, key=rank)[:TOP_KERNELS])
    best = None
    if run.best_candidate_id and run.best_candidate_id in search and run.best_candidate_id not in left_out:
        best = next((k for k in kernels if k.candidate_id == run.best_candidate_id), None) or data.kernel(
            run.best_candidate_id
        )

    timed = any(r.timing for r in search.values())
    all_results = list(search.values()) + list(remeasured.values())
    timing_note = (
        None
        if timed
        else next((r.timing_note for r in all_results if r.timing_note), "speed was not measured on this device")
    )
    state = run_state(run, _owner(store, run.run_id))
    config = _config(run)
    env = data.env
    return RunSummary(
        run_id=run.run_id,
        problem_name=run.problem_name,
        problem_id=run.problem_id,
        problem_ref=str(config.get("problem") or run.problem_name),
        op_family=run.op_family,
        device=run.device,
        device_name=env.device_name if env else run.arch,
        arch=run.arch,
        env=env,
        proposer=run.proposer,
        model=run.model,
        status=run.status.value,
        state=state,
        stop_reason=run.stop_reason,
        stop_rule=run.stop_rule,
        started_at=run.started_at,
        finished_at=run.finished_at,
        evaluations=len(search) - len(reused),
        evaluations_reused=len(reused),
        candidates=len(nodes),
        passed=len(passing) + len(left_out),
        failures=tuple(FailureCount(status=s, error_class=e, count=n) for (s, e), n in sorted(failures.items())),
        cost_usd=sum(c.cost_usd or 0.0 for c in store.llm_calls(run.run_id)),
        timed=timed,
        timing_note=timing_note,
        time_cases=tuple(config.get("time_cases") or ()),
        dtypes=tuple(config.get("dtypes") or ()),
        best=best,
        no_hybrid=no_hybrid,
        hybrids_left_out=left_out,
        kernels=kernels,
        note=_note(run, state, timed, best, kernels, env),
        nodes=tuple(nodes),
        points=tuple(points),
    )


def _note(run: RunRecord, state: str, timed: bool, best: Optional[KernelView], kernels, env) -> str:
    device = env.device_name if env else run.arch
    if state == "stale":
        return f"the process running this run is gone (killed?): continue it with `kscout resume {run.run_id}`"
    if run.status is RunStatus.interrupted:
        return f"run interrupted: continue it with `kscout resume {run.run_id}`"
    if run.status is not RunStatus.finished:
        return f"run not finished ({run.status.value}): continue it with `kscout resume {run.run_id}`"
    if not kernels:
        return "no candidate passed: there is no kernel to use; keep the reference"
    if not timed:
        return (
            f"correctness only: nothing was timed on {device}, so no speed is claimed; the best is the first "
            f"passing candidate, not a measured winner"
        )
    if best is not None and best.verdict is not None and best.verdict.numbers_from == "remeasure":
        eager = best.verdict.vs("eager")
        if eager is not None and eager.geomean.low > 1.0:
            return f"best re-measured interleaved with its baselines: {verdict_line(best.verdict)}"
    if best is not None:
        return "no candidate beat eager outside the noise after the interleaved re-measure; the best is the seed"
    return "no candidate beat eager outside the noise; keep the reference"


# -- one-line phrasings every view shares ------------------------------------------------------------
def fmt_ratio(r: Ratio) -> str:
    return f"{r.ratio:#.3g}x [{r.low:#.3g}, {r.high:#.3g}]"


def across_line(a: Across) -> str:
    """'1.45x [1.40, 1.50] vs eager (geomean of 3 cases; worst 1.10x at M=..|bfloat16)'."""
    text = f"{fmt_ratio(a.geomean)} vs {label(a.baseline)}"
    if a.cases > 1:
        text += f" (geomean of {a.cases} cases; worst {a.worst.ratio:#.3g}x at {a.worst_case_id})"
    else:
        text += f" at {a.worst_case_id}"
    return text


def hybrid_line(kernel: KernelView) -> str:
    """What makes a kernel a hybrid: "PyTorch computes mul, sub in forward (12% of device time)"."""
    share = (
        f"{kernel.hybrid_device_fraction:.0%} of device time"
        if kernel.hybrid_device_fraction is not None
        else "share of device time not measured here"
    )
    return f"PyTorch computes {', '.join(kernel.hybrid_ops)} in forward ({share})"


def verdict_line(v: Verdict) -> str:
    parts = [across_line(a) for a in v.across if a.baseline in BASELINE_ORDER]
    if v.vs("torch_compile") is None:
        parts.append("torch.compile not timed with it")
    if v.pct_of_copy_worst is not None:
        parts.append(f"{v.pct_of_copy_worst:.1f}% of copy bandwidth at worst")
    if v.uncovered_cases:
        parts.append(f"not timed on {len(v.uncovered_cases)} of the problem's timed cases")
    return "; ".join(parts)
