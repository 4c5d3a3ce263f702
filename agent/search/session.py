"""The search loop: propose, evaluate, write back, decide, until the stop rule says enough.

Everything a session knows lives in the store, and the loop rebuilds its state from there at the top
(`Session.load`): that is what makes `kscout resume` work after any crash, kill -9 included.
Candidates are written before they are evaluated, and an evaluation row is what marks a candidate
done, so a resumed session evaluates exactly the candidates that have no search evaluation yet.

The stop rule is fixed and written with the run before the first proposal. Before a winner is
declared, the top measured candidates are re-timed interleaved with the baseline; a speedup inside
the noise is no win (the best is then the seed). Where nothing is timed (the CPU) the run proves
correctness only: the best is the first passing candidate, never one ranked by an unmeasured speed.
"""

from __future__ import annotations

import datetime as _dt
import json
import threading
import time
import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Optional

from agent import Frozen
from agent.proposers.base import Action, ParentInfo, Proposal, ProposeRequest
from agent.search import writeback
from agent.search.executors import DEFAULT_EXECUTOR, EXECUTORS, Cancelled, Executor, make_executor
from agent.search.policy import Node, PolicyConfig, Tree, decide
from agent.search.stopping import Progress, StopReason, measured_speedup, should_stop
from evaluation.errors import KscoutError
from evaluation.records import BASELINES, EvalResult, Fingerprint, ProblemInfo, source_sha256
from store.records import CandidateRecord, RunRecord, RunStatus, StopRule, utc_now

if TYPE_CHECKING:
    from knowledge.context import KnowledgeContext

SEED_PROPOSER = "seed"


class SessionError(KscoutError):
    """A session that cannot start or resume: bad options, a finished run, another environment."""


class Interrupted(KscoutError):
    """The search was stopped (Ctrl-C, or its executor cancelled) and recorded as interrupted.

    Raised only after the run row says so; `kscout resume RUN` continues it. Exit code 3 tells a
    supervising process "stopped on request, resumable" apart from bad input (2) and a failure (1)."""

    exit_code = 3

    def __init__(self, run_id: str, *more: str):
        self.run_ids = (run_id, *more)
        self.run_id = run_id
        hint = "; ".join(f"kscout resume {r}" for r in self.run_ids)
        runs = f"run{'s' if more else ''} {', '.join(self.run_ids)}"
        super().__init__(f"interrupted: {runs} recorded as interrupted; continue with `{hint}`")


# An interrupted run is written as status interrupted (stop reason "interrupted"); an error as status
# failed with stop reason "error: <class>". `kscout resume` continues either.
INTERRUPTED_STATUS = RunStatus.interrupted


class SharedSpend:
    """LLM spend shared by several searches of one `optimize-many` (each stops when the pool is spent)."""

    def __init__(self, spent_usd: float = 0.0):
        self._lock = threading.Lock()
        self._spent = spent_usd

    def add(self, usd: float) -> None:
        with self._lock:
            self._spent += usd

    @property
    def spent_usd(self) -> float:
        with self._lock:
            return self._spent


_Frozen = Frozen


# What `kscout optimize PROBLEM` searches with when no budget flag is given. On a GPU a real search: a
# batch of 8 siblings checked in parallel and timed together per step, up to 64 evaluations or 5
# minutes, whichever comes first (or the stall rule: 30 evaluations without a better kernel). On a
# CPU, where every check runs in Triton's interpreter, 20 evaluations one at a time, no time limit.
GPU_SEARCH_DEFAULTS: dict[str, Any] = dict(budget=64, minutes=5.0, batch=8, workers=8)
CPU_SEARCH_DEFAULTS: dict[str, Any] = dict(budget=20, minutes=None, batch=1, workers=1)


def search_defaults(device: str) -> dict[str, Any]:
    """The budget, time limit, batch and workers of a search on `device` (auto | cpu | cuda) when the
    user gave none of them."""
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return dict(GPU_SEARCH_DEFAULTS if device == "cuda" else CPU_SEARCH_DEFAULTS)


class SessionConfig(_Frozen):
    """Every option of a session; stored as the run's config_json so a resume runs the same search."""

    problem: str
    device: str = "auto"
    proposer: Literal["template", "llm"] = "template"
    model: Optional[str] = None
    api_base: Optional[str] = None
    budget: int = 20
    minutes: Optional[float] = None
    target_speedup: Optional[float] = None
    stall: Optional[int] = 30
    seed: int = 0
    max_cost_usd: Optional[float] = None
    batch: int = 1
    workers: int = 1
    trials: int = 2
    timeout_s: float = 300.0
    context_tokens: int = 1500
    llm_timeout_s: float = 180.0
    llm_attempts: int = 3
    llm_backoff_s: float = 2.0
    remeasure_top: int = 3  # the seed joins them, so the winner's speedup over it is measured in one process
    compile_every: bool = False  # time torch.compile with every batch, not only with the seed and the re-measure
    remeasure_rounds: int = 5
    time_cases: tuple[str, ...] = ()  # case ids timed instead of the problem's declared "timed" cases
    dtypes: tuple[str, ...] = ()  # the declared dtypes this search proves and times (empty: all of them)
    executor: str = DEFAULT_EXECUTOR  # where candidates run: "local" | "ray" (agent.search.executors)
    ray_resource: Optional[str] = None  # a custom Ray resource every task requests (routes to that hardware)
    sandbox: Optional[Literal["auto", "required", "off"]] = (
        None  # the evaluator's OS sandbox (None: $KSCOUT_SANDBOX or auto)
    )
    tolerance: Literal["strict", "kernelbench"] = "strict"  # the policy every candidate is judged under
    # --no-hybrid: a hybrid (PyTorch compute in forward, issue 25) is judged and kept, but never the best
    no_hybrid: bool = False

    def load_problem(self, device_kind: str) -> ProblemInfo:
        import evaluation

        return evaluation.load_problem(
            self.problem,
            device=device_kind,
            timed=list(self.time_cases) or None,
            dtypes=list(self.dtypes) or None,
            tolerance=self.tolerance,
        )

    def check(self) -> "SessionConfig":
        if self.budget < 1:
            raise SessionError(f"--budget must be at least 1 (got {self.budget})")
        if self.batch < 1 or self.workers < 1:
            raise SessionError("--batch and workers must be at least 1")
        if self.minutes is not None and not self.minutes > 0:
            raise SessionError(f"--minutes must be more than 0 (got {self.minutes:g})")
        if self.trials < 1:
            raise SessionError(f"--trials must be at least 1 (got {self.trials})")
        if self.max_cost_usd is not None and self.max_cost_usd < 0:
            raise SessionError(f"--max-cost must be 0 or more (got {self.max_cost_usd:g})")
        if self.target_speedup is not None and not self.target_speedup > 0:
            raise SessionError(f"--target-speedup must be more than 0 (got {self.target_speedup:g})")
        if self.stall is not None and self.stall < 1:
            raise SessionError(f"--stall must be at least 1 (got {self.stall})")
        if self.proposer == "llm" and not self.model:
            raise SessionError("--proposer llm needs --model (any litellm model string, e.g. openai/NAME)")
        if self.executor not in EXECUTORS:
            raise SessionError(f"--executor must be one of: {', '.join(EXECUTORS)} (got {self.executor!r})")
        if self.ray_resource and self.executor != "ray":
            raise SessionError("--ray-resource needs --executor ray")
        return self

    def make_executor(self, ray_address: Optional[str] = None) -> Executor:
        return make_executor(
            self.executor,
            device=self.device,
            workers=self.workers,
            timeout_s=self.timeout_s,
            trials=self.trials,
            ray_address=ray_address,
            ray_resource=self.ray_resource,
            sandbox=self.sandbox,
        )

    def stop_rule(self) -> StopRule:
        return StopRule(
            max_evaluations=self.budget,
            max_minutes=self.minutes,
            target_speedup=self.target_speedup,
            stall_limit=self.stall,
            max_cost_usd=self.max_cost_usd,
        )

    def policy(self) -> PolicyConfig:
        restart_after = 8 if self.stall is None else max(2, min(8, self.stall // 2))
        return PolicyConfig(allow_repair=self.proposer == "llm", restart_after=restart_after)


EventKind = Literal["started", "decision", "proposal_error", "duplicate", "evaluated", "remeasured", "finished"]


class SessionEvent(_Frozen):
    """What the CLI's progress display shows; the session never prints."""

    kind: EventKind
    run_id: str
    message: str
    evaluations: int
    budget: int
    best_speedup: Optional[float] = None
    failures_by_kind: dict[str, int] = {}
    candidate_id: Optional[str] = None
    status: Optional[str] = None


OnEvent = Callable[[SessionEvent], None]


def _parse_time(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def make_proposer(config: SessionConfig, run_id: str, store, spent_usd: float = 0.0):
    if config.proposer == "llm":
        from agent.proposers.llm import LLMProposer

        return LLMProposer(
            config.model or "",
            api_base=config.api_base,
            run_id=run_id,
            on_call=store.record_llm_call,
            timeout_s=config.llm_timeout_s,
            attempts=config.llm_attempts,
            backoff_s=config.llm_backoff_s,
            max_cost_usd=config.max_cost_usd,
            spent_usd=spent_usd,
        )
    from agent.proposers.template import TemplateProposer

    return TemplateProposer(schedule_hints=store.schedule_hints)


class Session:
    """One search on one executor; the executor belongs to the caller (`start`, `resume`, optimize-many)."""

    def __init__(
        self,
        store,
        run: RunRecord,
        config: SessionConfig,
        problem: ProblemInfo,
        fingerprint: Fingerprint,
        *,
        executor: Executor,
        proposer=None,
        on_event: Optional[OnEvent] = None,
        shared_spend: Optional[SharedSpend] = None,
    ):
        self.store, self.run, self.config, self.problem, self.fp = store, run, config, problem, fingerprint
        self.rule = run.stop_rule
        self.on_event = on_event or (lambda event: None)
        self.candidates: dict[str, CandidateRecord] = {}
        self.results: dict[str, tuple[str, EvalResult]] = {}  # candidate id -> (eval id, result), eval order
        self.reused: set[str] = set()
        self.load()
        self.cost_usd = sum(c.cost_usd or 0.0 for c in store.llm_calls(run.run_id))
        self.shared_spend = shared_spend
        self.proposer = proposer or make_proposer(config, run.run_id, store, self.cost_usd)
        self.executor = executor
        self.policy = config.policy()
        self.empty_steps = 0
        self.exhausted = False
        self._clock0 = time.monotonic()
        self._context: Optional[KnowledgeContext] = None  # built on first use, once per process

    # -- state from the store --------------------------------------------------------------------
    def load(self) -> None:
        run_start = _parse_time(self.run.started_at)
        self.candidates = {c.candidate_id: c for c in self.store.candidates(self.run.run_id)}
        self.results, self.reused = {}, set()
        last_end = run_start
        for eval_id, _, cid, result in self.store.evaluations(run_id=self.run.run_id, kind="search"):
            self.results[cid] = (eval_id, result)
            started = _parse_time(result.started_at)
            if started < run_start:
                self.reused.add(cid)
            else:
                last_end = max(last_end, started + _dt.timedelta(seconds=result.duration_s))
        # Time already spent before this process (a resume): up to the end of the last evaluation.
        self.elapsed_before_s = (last_end - run_start).total_seconds()

    @property
    def paid_evaluations(self) -> int:
        return len(self.results) - len(self.reused)

    def _node(self, c: CandidateRecord) -> Node:
        done = self.results.get(c.candidate_id)
        speed = measured_speedup(done[1]) if done else None
        return Node(
            candidate_id=c.candidate_id,
            parent_id=c.parent_id,
            action=c.policy_action or "seed",
            status=done[1].status.value if done else None,
            speedup=speed.ratio if speed else None,
        )

    def tree(self) -> Tree:
        evaluated = [self.candidates[cid] for cid in self.results if cid in self.candidates]
        pending = [c for cid, c in self.candidates.items() if cid not in self.results]
        return Tree([self._node(c) for c in evaluated + pending])

    def failures_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, r in self.results.values():
            if not r.passed:
                out[r.status.value] = out.get(r.status.value, 0) + 1
        return out

    def rankable(self, result: EvalResult) -> bool:
        """Whether a result may be the best: every passing one, less the hybrids under --no-hybrid."""
        return result.passed and not (self.config.no_hybrid and result.hybrid)

    def best_measured(self) -> Optional[float]:
        ratios = [
            m.ratio
            for _, r in self.results.values()
            if self.rankable(r) and (m := measured_speedup(r)) and m.significant
        ]
        return max(ratios) if ratios else None

    def since_improvement(self) -> int:
        best, since, seen_pass = None, 0, False
        for _, r in self.results.values():
            m = measured_speedup(r)
            if r.passed and (not seen_pass or (m and (best is None or m.ratio > best))):
                since = 0
            else:
                since += 1
            seen_pass = seen_pass or r.passed
            if m:
                best = m.ratio if best is None else max(best, m.ratio)
        return since

    def progress(self) -> Progress:
        return Progress(
            evaluations=self.paid_evaluations,
            elapsed_minutes=(self.elapsed_before_s + time.monotonic() - self._clock0) / 60.0,
            best_significant_speedup=self.best_measured(),
            evaluations_since_improvement=self.since_improvement(),
            cost_usd=self.shared_spend.spent_usd if self.shared_spend else self.cost_usd,
            proposer_exhausted=self.exhausted,
            empty_steps_in_a_row=self.empty_steps,
        )

    def _emit(self, kind: EventKind, message: str, **extra) -> None:
        self.on_event(
            SessionEvent(
                kind=kind,
                run_id=self.run.run_id,
                message=message,
                evaluations=self.paid_evaluations,
                budget=self.rule.max_evaluations,
                best_speedup=self.best_measured(),
                failures_by_kind=self.failures_by_kind(),
                **extra,
            )
        )

    # -- context ---------------------------------------------------------------------------------
    def context_text(self) -> str:
        """Knowledge retrieved once per process, plus this op's failure patterns as they are now."""
        if self._context is None:
            from knowledge.context import build_context

            self._context = build_context(
                self.store, self.problem, self.fp.device_name, self.fp.arch, token_budget=self.config.context_tokens
            )
        text = self._context.render()
        known = {i.ref_id for i in self._context.items if i.section == "failure"}
        fresh = [
            f
            for f in self.store.failure_patterns(op_family=self.problem.op_family, arch=self.fp.arch, limit=10)
            if f.signature not in known
        ]
        if fresh:
            text += "\n\n## Failures seen since this search started\n" + "\n".join(
                f"- {f.stage}/{f.error_class} seen {f.count}x: {f.message_shape}" for f in fresh
            )
        return text

    # -- one step --------------------------------------------------------------------------------
    def _parent_info(self, cid: str) -> ParentInfo:
        c = self.candidates[cid]
        done = self.results.get(cid)
        return ParentInfo(
            candidate_id=cid,
            source=c.source,
            knobs=json.loads(c.knobs_json or "{}"),
            transformation_tags=c.transformation_tags,
            result=done[1] if done else None,
        )

    def _propose(self, decision, n: int) -> tuple[list[Proposal], str]:
        if decision.action is Action.seed and self.problem.seed_source and not self.candidates:
            return [
                Proposal(source=self.problem.seed_source, rationale="the problem's shipped seed kernel")
            ], SEED_PROPOSER
        parent = self._parent_info(decision.node_id) if decision.node_id else None
        context_text = self.context_text()  # builds the context first: the hints come from it
        hints = tuple(self._context.seed_hints()) if self._context is not None else ()
        request = ProposeRequest(
            problem=self.problem,
            device=self.fp.device_kind if self.fp.device_kind == "cpu" else "cuda",
            arch=self.fp.arch,
            device_name=self.fp.device_name,
            action=decision.action,
            parent=parent,
            n=n,
            seen_sha256=frozenset(self.candidates),
            context_text=context_text,
            seed_hints=hints,
            rng_seed=self.config.seed * 1_000_003 + len(self.candidates),
            hybrids=not self.config.no_hybrid,
        )
        result = self.proposer.propose(request)
        self.cost_usd += result.cost_usd
        if self.shared_spend is not None:
            self.shared_spend.add(result.cost_usd)
        for err in result.errors:
            if err.kind == "exhausted":
                self.exhausted = True
            self._emit("proposal_error", f"{err.kind}: {err.message}")
        return list(result.proposals), self.proposer.name

    def _lineage(self, decision) -> tuple[Optional[str], int]:
        """Every action but seed and restart derives the new candidate from the decision's node."""
        if decision.node_id is None:
            return None, 0
        return decision.node_id, self.candidates[decision.node_id].generation + 1

    def step(self) -> None:
        remaining = self.rule.max_evaluations - self.paid_evaluations
        pending = [cid for cid in self.candidates if cid not in self.results]
        if pending:
            self.evaluate(pending[:remaining])
            return
        decision = decide(self.tree(), self.policy)
        self._emit("decision", f"{decision.action.value}: {decision.reason}")
        proposals, proposer_name = self._propose(decision, min(self.config.batch, remaining))
        parent_id, generation = self._lineage(decision)
        written = []
        for p in proposals[:remaining]:
            cid = source_sha256(p.source)
            if cid in self.candidates:
                self._emit(
                    "duplicate", f"{cid[:12]} was already proposed in this run; not evaluated again", candidate_id=cid
                )
                continue
            c = CandidateRecord(
                candidate_id=cid,
                run_id=self.run.run_id,
                parent_id=parent_id,
                generation=generation,
                proposer=proposer_name,
                model=self.config.model if proposer_name == "llm" else None,
                prompt_template=p.template_name,
                prompt_sha256=p.template_sha256,
                rationale=p.rationale,
                transformation_tags=p.transformation_tags,
                knobs_json=json.dumps(p.knobs, sort_keys=True, default=str),
                policy_action=decision.action.value,
                policy_reason=decision.reason,
                source=p.source,
                created_at=utc_now(),
            )
            self.store.add_candidate(c)
            self.candidates[cid] = c
            written.append(cid)
        self.empty_steps = 0 if written else self.empty_steps + 1
        if written:
            self.evaluate(written)

    # -- evaluation and write-back -----------------------------------------------------------------
    def _reusable(self, cid: str) -> Optional[EvalResult]:
        """A stored search evaluation of the same source on this environment and problem, from another run."""
        env = self.fp.key()
        for _, run_id, _, result in reversed(self.store.evaluations(candidate_id=cid, kind="search")):
            if (
                run_id != self.run.run_id
                and result.fingerprint.key() == env
                and result.problem_id == self.problem.problem_id
            ):
                return result
        return None

    def _parent_eval(self, c: CandidateRecord) -> Optional[str]:
        done = self.results.get(c.parent_id) if c.parent_id else None
        return done[0] if done else None

    def _landed(self, cid: str, eval_id: str, result: EvalResult, reused: bool) -> None:
        self.results[cid] = (eval_id, result)
        if reused:
            self.reused.add(cid)
        speed = measured_speedup(result)
        detail = f"{speed.ratio:.3g}x vs eager" if speed else (result.error_class or "")
        self._emit(
            "evaluated",
            f"{cid[:12]} {result.status.value}{' ' + detail if detail else ''}"
            f"{' (reused from an earlier run)' if reused else ''}",
            candidate_id=cid,
            status=result.status.value,
        )

    def _baselines(self, cids: list[str]) -> tuple[str, ...]:
        """torch.compile is timed with the seed and in the final re-measure; eager with every candidate
        (the search ranks by it). `compile_every` times compile with every batch too."""
        if self.config.compile_every or any(self.candidates[c].proposer == SEED_PROPOSER for c in cids):
            return BASELINES
        return ("eager",)

    def evaluate(self, cids: list[str]) -> None:
        todo = []
        for cid in cids:
            old = self._reusable(cid)
            if old is not None:
                eval_id = self.store.add_evaluation(self.run.run_id, cid, old, kind="search")
                self._landed(cid, eval_id, old, reused=True)
                continue
            todo.append(cid)
        if not todo:
            return
        batch = self.executor.evaluate_batch(
            [self.candidates[cid].source for cid in todo], self.problem, baselines=self._baselines(todo)
        )
        for i, result in batch:
            cid = todo[i]
            c = self.candidates[cid]
            eval_id = writeback.record(
                self.store, self.run.run_id, c, result, self.problem, self.fp, parent_eval_id=self._parent_eval(c)
            )
            self._landed(cid, eval_id, result, reused=False)

    # -- the whole run -----------------------------------------------------------------------------
    def run_search(self) -> StopReason:
        evaluations = [(e, cid, r) for cid, (e, r) in self.results.items() if cid not in self.reused]
        writeback.backfill(
            self.store,
            self.run.run_id,
            self.candidates,
            evaluations,
            self.problem,
            self.fp,
            {cid: e for cid, (e, _) in self.results.items()},
        )
        self._emit(
            "started",
            f"run {self.run.run_id}: {self.problem.name} on {self.fp.device_name}, "
            f"{self.paid_evaluations} of {self.rule.max_evaluations} evaluations done",
        )
        while (reason := should_stop(self.rule, self.progress())) is None:
            self.step()
        return reason

    def _remeasure(self, cids: list[str]) -> dict[str, EvalResult]:
        """Re-time the top candidates interleaved with eager; store each as a `remeasure` evaluation."""
        rm = self.executor.remeasure(
            {cid: self.candidates[cid].source for cid in cids},
            self.problem,
            rounds=self.config.remeasure_rounds,
            baselines=BASELINES,
        )
        out = {}
        for rc in rm.candidates:
            cid = rc.name
            if cid not in self.candidates or not rc.cases:
                self._emit(
                    "remeasured", f"{cid[:12]}: no numbers ({rc.error or rm.note or 'not timed'})", candidate_id=cid
                )
                continue
            result = writeback.remeasure_as_eval(rc, rm, self.results[cid][1])
            self.store.add_evaluation(self.run.run_id, cid, result, kind="remeasure")
            out[cid] = result
            speed = measured_speedup(result)
            said = (
                f"{speed.ratio:.3g}x [{speed.ratio_low:.3g}, {speed.ratio_high:.3g}] vs eager"
                if speed is not None
                else "no speedup vs eager"
            )
            self._emit("remeasured", f"{cid[:12]}: {said} over {rm.rounds} rounds", candidate_id=cid)
        return out

    def choose_best(self) -> Optional[str]:
        passed = [cid for cid, (_, r) in self.results.items() if self.rankable(r)]
        measured = sorted(
            ((m.ratio, cid) for cid in passed if (m := measured_speedup(self.results[cid][1]))), reverse=True
        )
        seeds = [cid for cid in passed if self.candidates[cid].proposer == SEED_PROPOSER]
        top = [cid for _, cid in measured[: self.config.remeasure_top]]
        top += [
            cid for cid in seeds if cid not in top and measured_speedup(self.results[cid][1])
        ]  # x seed, same process
        remeasured = self._remeasure(top) if measured else {}
        return pick_best(passed, bool(measured), remeasured, seeds)

    def finish(self, reason: StopReason) -> Optional[str]:
        best = self.choose_best()
        self.store.finish_run(
            self.run.run_id, status=RunStatus.finished, stop_reason=reason.value, best_candidate_id=best
        )
        self._emit("finished", f"stopped: {reason.value}", candidate_id=best)
        return best

    def run_to_end(self) -> Optional[str]:
        """Search, re-measure, finish. An interrupt or an error is written to the run before it leaves:
        Ctrl-C (KeyboardInterrupt in this thread, or the executor cancelled from another) cancels the
        executor's outstanding work, records the run interrupted and raises `Interrupted`; any other
        error records it failed and propagates. Either way `kscout resume` continues it."""
        try:
            return self.finish(self.run_search())
        except (KeyboardInterrupt, Cancelled):
            self.executor.cancel()
            self.store.finish_run(
                self.run.run_id,
                status=INTERRUPTED_STATUS,
                stop_reason=StopReason.interrupted.value,
                best_candidate_id=None,
            )
            self._emit("finished", f"interrupted: continue with `kscout resume {self.run.run_id}`")
            raise Interrupted(self.run.run_id) from None
        except Exception as exc:
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            self.store.finish_run(
                self.run.run_id,
                status=RunStatus.failed,
                best_candidate_id=None,
                stop_reason=f"error: {type(exc).__name__}" + (f": {first}" if first else ""),
            )
            raise


def pick_best(passed: list[str], timed: bool, remeasured: dict[str, EvalResult], seeds: list[str]) -> Optional[str]:
    """The run's winner.

    Untimed (the CPU): the first passing candidate (in evaluation order), never a guess at speed.
    Timed: the fastest re-measured candidate whose conservative interval is above 1 (every round a
    win); if none is, a win inside the noise is no win and the best is the seed, else nothing (the
    reference stays).
    """
    if not timed:
        return passed[0] if passed else None
    wins = [(m.ratio, cid) for cid, r in remeasured.items() if (m := measured_speedup(r)) and m.ratio_low > 1.0]
    if wins:
        return max(wins)[1]
    return seeds[0] if seeds else None


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


@contextmanager
def _executor(config: SessionConfig, executor: Optional[Executor], ray_address: Optional[str]) -> Iterator[Executor]:
    """The caller's executor, or one made from the config and closed afterwards."""
    if executor is not None:
        yield executor
        return
    made = config.make_executor(ray_address)
    try:
        yield made
    finally:
        made.close()


def start(
    config: SessionConfig,
    store,
    *,
    on_event: Optional[OnEvent] = None,
    proposer=None,
    executor: Optional[Executor] = None,
    ray_address: Optional[str] = None,
    shared_spend: Optional[SharedSpend] = None,
    max_minutes: Optional[float] = None,
) -> str:
    """Create the run (stop rule fixed and written first), search, finish; returns the run id.

    The executor (given, or made from `config.executor`) decides the device and reports the
    environment; the problem is loaded for that device and travels to it by value. `max_minutes`
    caps the stop rule's time budget (optimize-many's shared deadline)."""
    config.check()
    with _executor(config, executor, ray_address) as ex:
        fp = ex.environment()
        problem = config.load_problem(fp.device_kind)
        env_id = store.record_environment(fp)
        store.record_problem(problem)
        rule = config.stop_rule()
        if max_minutes is not None and (rule.max_minutes is None or max_minutes < rule.max_minutes):
            rule = rule.model_copy(update={"max_minutes": max_minutes})
        run = RunRecord(
            run_id=new_run_id(),
            problem_id=problem.problem_id,
            problem_name=problem.name,
            op_family=problem.op_family,
            device=fp.device_kind,
            arch=fp.arch,
            env_id=env_id,
            proposer=config.proposer,
            model=config.model,
            seed=config.seed,
            stop_rule=rule,
            started_at=utc_now(),
            config_json=config.model_dump_json(),
        )
        store.create_run(run)
        session = Session(
            store,
            run,
            config,
            problem,
            fp,
            executor=ex,
            proposer=proposer,
            on_event=on_event,
            shared_spend=shared_spend,
        )
        session.run_to_end()
    return run.run_id


def resume(
    run_id: str,
    store,
    *,
    on_event: Optional[OnEvent] = None,
    proposer=None,
    executor: Optional[Executor] = None,
    executor_name: Optional[str] = None,
    ray_address: Optional[str] = None,
) -> str:
    """Continue a run that did not finish (crashed, killed, interrupted) on the same environment.

    `executor_name` runs the rest on another executor than the run started with (its device must
    still fingerprint the same)."""
    run = store.get_run(run_id)
    if run.status is RunStatus.finished:
        raise SessionError(f"run {run.run_id} already finished ({run.stop_reason}); nothing to resume")
    config = SessionConfig.model_validate_json(run.config_json)
    if executor_name is not None and executor_name != config.executor:
        config = config.model_copy(
            update={"executor": executor_name, "ray_resource": config.ray_resource if executor_name == "ray" else None}
        )
    config.check()
    with _executor(config, executor, ray_address) as ex:
        fp = ex.environment()
        if fp.key() != run.env_id:
            raise SessionError(
                f"run {run.run_id} ran on environment {run.env_id}, this is {fp.key()} "
                f"({fp.device_name}); resume it where it started"
            )
        problem = config.load_problem(fp.device_kind)
        if problem.problem_id != run.problem_id:
            raise SessionError(
                f"problem {config.problem!r} changed since run {run.run_id} started "
                f"({run.problem_id} -> {problem.problem_id})"
            )
        session = Session(store, run, config, problem, fp, executor=ex, proposer=proposer, on_event=on_event)
        session.run_to_end()
    return run.run_id
