"""The one read model of a run: what `show`, `--json`, `report` and the benches render.

Built from the store alone, so it works for a run in progress, a finished one, or one another process
wrote.
"""

from __future__ import annotations

import datetime as _dt
from typing import Optional

from agent import Frozen as _Frozen
from agent.search.stopping import measured_speedup
from store.records import RunStatus, StopRule


def _parse_time(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- what `kscout show` and `--json` report, built from the store alone -------------------------------
class NodeView(_Frozen):
    candidate_id: str
    parent_id: Optional[str]
    generation: int
    proposer: str
    action: Optional[str]
    reason: Optional[str]
    tags: tuple[str, ...] = ()
    status: Optional[str]  # None: written, not evaluated yet
    speedup: Optional[float] = None  # measured vs eager; None where untimed
    reused: bool = False  # the evaluation came from an earlier run on the same environment


class BestView(_Frozen):
    candidate_id: Optional[str]  # None: nothing beat the reference (or nothing passed)
    status: Optional[str] = None
    speedup: Optional[float] = None
    speedup_low: Optional[float] = None
    speedup_high: Optional[float] = None
    remeasured: bool = False


class RunSummary(_Frozen):
    run_id: str
    problem_name: str
    problem_id: str
    device: str
    device_name: str
    arch: str
    proposer: str
    model: Optional[str]
    status: str
    stop_reason: Optional[str]
    stop_rule: StopRule
    started_at: str
    finished_at: Optional[str]
    evaluations: int  # search evaluations this run paid for
    evaluations_reused: int
    candidates: int
    failures_by_kind: dict[str, int]
    cost_usd: float
    timed: bool
    best: BestView
    note: str
    nodes: tuple[NodeView, ...]


def summarize(store, run_ref: str) -> RunSummary:
    run = store.get_run(run_ref)
    run_start = _parse_time(run.started_at)
    search = {cid: r for _, _, cid, r in store.evaluations(run_id=run.run_id, kind="search")}
    remeasured = {cid: r for _, _, cid, r in store.evaluations(run_id=run.run_id, kind="remeasure")}
    fp = store.get_environment(run.env_id)
    reused = {cid for cid, r in search.items() if _parse_time(r.started_at) < run_start}
    nodes = []
    for c in store.candidates(run.run_id):
        r = search.get(c.candidate_id)
        m = measured_speedup(r) if r else None
        nodes.append(NodeView(candidate_id=c.candidate_id, parent_id=c.parent_id, generation=c.generation,
                              proposer=c.proposer, action=c.policy_action, reason=c.policy_reason,
                              tags=c.transformation_tags, status=r.status.value if r else None,
                              speedup=m.ratio if m else None, reused=c.candidate_id in reused))
    failures: dict[str, int] = {}
    for r in search.values():
        if not r.passed:
            failures[r.status.value] = failures.get(r.status.value, 0) + 1
    timed = any(r.timing for r in search.values())
    best = BestView(candidate_id=None)
    if run.best_candidate_id:
        r = remeasured.get(run.best_candidate_id) or search.get(run.best_candidate_id)
        m = measured_speedup(r) if r else None
        best = BestView(candidate_id=run.best_candidate_id, status=search[run.best_candidate_id].status.value
                        if run.best_candidate_id in search else None, speedup=m.ratio if m else None,
                        speedup_low=m.ratio_low if m else None, speedup_high=m.ratio_high if m else None,
                        remeasured=run.best_candidate_id in remeasured)
    best_node = next((n for n in nodes if n.candidate_id == best.candidate_id), None)
    if run.status is not RunStatus.finished:
        note = f"run not finished ({run.status.value}): continue it with `kscout resume {run.run_id}`"
    elif not timed:
        note = (f"correctness only: nothing was timed on {fp.device_name}, so no speed is claimed; the best is "
                f"the first passing candidate, not a measured winner")
    elif best.remeasured and best.speedup_low is not None and best.speedup_low > 1.0:
        note = (f"best re-measured interleaved with eager: {best.speedup:.3g}x "
                f"[{best.speedup_low:.3g}, {best.speedup_high:.3g}]")
    elif best_node is not None:
        note = "no candidate beat eager outside the noise after the interleaved re-measure; the best is the seed"
    else:
        note = "no candidate beat eager outside the noise; keep the reference"
    return RunSummary(
        run_id=run.run_id, problem_name=run.problem_name, problem_id=run.problem_id, device=run.device,
        device_name=fp.device_name, arch=run.arch, proposer=run.proposer, model=run.model, status=run.status.value,
        stop_reason=run.stop_reason, stop_rule=run.stop_rule, started_at=run.started_at,
        finished_at=run.finished_at, evaluations=len(search) - len(reused), evaluations_reused=len(reused),
        candidates=len(nodes), failures_by_kind=failures,
        cost_usd=sum(c.cost_usd or 0.0 for c in store.llm_calls(run.run_id)), timed=timed, best=best, note=note,
        nodes=tuple(nodes),
    )
