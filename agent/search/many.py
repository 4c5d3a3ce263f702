"""Many searches at once (`kscout optimize-many`): one per problem, concurrently, on shared executors,
under one time budget and one LLM cost ceiling.

Each search is an ordinary session (its own run, stop rule, resume); what they share:

- the executor: several sessions submit to one (its checks share a device, a timing takes it whole,
  so siblings are still compared alone on one device). Searches whose executor settings differ (a
  `ray_resource` routing one search to other hardware) get one executor each; on one machine there
  is one local executor, and the number of searches at once is bounded (`concurrency`).
- the deadline: `minutes` is wall-clock time for the whole set; a search that starts later gets what
  is left as its stop rule's time budget (written with its run, as always, before it starts).
- the cost ceiling: LLM spend of all searches is one pool (`SharedSpend`); each stops when it is spent.

Ctrl-C cancels every executor; each running search records itself interrupted (resumable), and
searches not started yet are reported as such. The store is one DuckDB file: every operation opens it
under a file lock, so sessions in threads of one process write it one at a time.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from pydantic import ValidationError

from agent import Frozen
from agent.search.executors import Executor
from agent.search.session import (
    Interrupted,
    SessionConfig,
    SessionError,
    SessionEvent,
    SharedSpend,
    start,
)
from evaluation.errors import KscoutError

# Options that decide the executor: searches agreeing on these share one.
EXECUTOR_FIELDS = ("executor", "device", "workers", "timeout_s", "trials", "ray_resource")
SHARED_FIELDS = ("minutes", "max_cost_usd", "concurrency")
LOCAL_CONCURRENCY = 2  # one machine: a second search proposes while the first one's batch runs


class Shared(Frozen):
    """What all searches of one optimize-many share (the manifest's [shared] table)."""

    minutes: Optional[float] = None  # wall-clock budget of the whole set
    max_cost_usd: Optional[float] = None  # LLM spend of the whole set
    concurrency: Optional[int] = None  # searches at once (default: all with ray, 2 with local)


class Manifest(Frozen):
    """A TOML file: [shared], [defaults] (any option of a search) and one [[search]] table per search."""

    shared: Shared = Shared()
    defaults: dict[str, Any] = {}
    search: tuple[dict[str, Any], ...] = ()


class SearchOutcome(Frozen):
    problem: str
    run_id: Optional[str] = None  # None: never started
    state: Literal["finished", "interrupted", "failed", "not_started"]
    reason: Optional[str] = None  # why it failed or did not start


class ManyResult(Frozen):
    outcomes: tuple[SearchOutcome, ...]
    elapsed_s: float
    cost_usd: float

    @property
    def interrupted_runs(self) -> tuple[str, ...]:
        return tuple(o.run_id for o in self.outcomes if o.state == "interrupted" and o.run_id)


OnManyEvent = Callable[[int, SessionEvent], None]


def load_manifest(path: Path) -> Manifest:
    import tomllib

    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SessionError(f"manifest not found: {path}") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SessionError(f"cannot read manifest {path}: {exc}") from None
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SessionError(f"manifest {path}: {where}: {first['msg']}") from None
    if not manifest.search:
        raise SessionError(f"manifest {path} names no [[search]]")
    return manifest


def plan(problems: list[str], base: dict[str, Any], manifest: Optional[Manifest] = None) -> list[SessionConfig]:
    """One checked SessionConfig per search: `base` (the command's options) for each problem named on
    the command line, then each manifest search over `base` and the manifest's [defaults]."""
    entries = [dict(base, problem=p) for p in problems]
    if manifest is not None:
        entries += [{**base, **manifest.defaults, **entry} for entry in manifest.search]
    if not entries:
        raise SessionError("optimize-many needs problems, or --manifest FILE with [[search]] tables")
    configs = []
    for i, entry in enumerate(entries, 1):
        shared = [k for k in ("minutes", "max_cost_usd") if entry.get(k) is not None]
        if shared:
            raise SessionError(
                f"search {i} ({entry.get('problem')}): {', '.join(shared)} is shared by all searches "
                f"of optimize-many; set it once (--minutes/--max-cost or the manifest's [shared])"
            )
        try:
            configs.append(SessionConfig.model_validate(entry).check())
        except ValidationError as exc:
            first = exc.errors()[0]
            raise SessionError(
                f"search {i} ({entry.get('problem')}): {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from None
    locals_ = {tuple(getattr(c, f) for f in EXECUTOR_FIELDS) for c in configs if c.executor == "local"}
    if len(locals_) > 1:
        raise SessionError(
            "searches on the local executor share one executor (one machine, one device): give "
            "them the same device, workers, trials and timeout"
        )
    return configs


def executor_key(config: SessionConfig) -> tuple:
    return tuple(getattr(config, f) for f in EXECUTOR_FIELDS)


def run_many(
    configs: list[SessionConfig],
    store,
    *,
    shared: Shared = Shared(),
    ray_address: Optional[str] = None,
    on_event: Optional[OnManyEvent] = None,
    executors: Optional[dict[tuple, Executor]] = None,
) -> ManyResult:
    """Run every search, `concurrency` at a time, until each finishes, fails or is interrupted.

    `executors` (by `executor_key`) are used as given and left open; the others are made here and
    closed at the end. Ctrl-C in the calling thread cancels every executor, lets each running search
    record itself interrupted, and returns; the caller raises `Interrupted` for those runs."""
    t0 = time.monotonic()
    deadline = t0 + shared.minutes * 60 if shared.minutes is not None else None
    spend = SharedSpend()
    given = dict(executors or {})
    made: dict[tuple, Executor] = {}
    emit = on_event or (lambda i, e: None)
    concurrency = shared.concurrency or (
        len(configs) if all(c.executor == "ray" for c in configs) else min(len(configs), LOCAL_CONCURRENCY)
    )
    _load_knowledge_once(store)
    failed: dict[tuple, str] = {}
    executors: dict[tuple, Executor] = dict(given)
    outcomes: dict[int, SearchOutcome] = {}

    def cancelled() -> bool:
        return any(getattr(ex, "cancelled", False) for ex in executors.values())

    def one(i: int, config: SessionConfig) -> SearchOutcome:
        run_ids: list[str] = []

        def relay(e: SessionEvent) -> None:
            if not run_ids:
                run_ids.append(e.run_id)
            emit(i, e)

        why = None
        if cancelled():
            why = "interrupted before it started"
        elif deadline is not None and deadline - time.monotonic() <= 0:
            why = "the shared time budget was spent before it started"
        elif shared.max_cost_usd is not None and spend.spent_usd >= shared.max_cost_usd:
            why = "the shared cost ceiling was reached before it started"
        if why:
            return SearchOutcome(problem=config.problem, state="not_started", reason=why)
        if executor_key(config) in failed:
            return SearchOutcome(problem=config.problem, state="failed", reason=failed[executor_key(config)])
        left = None if deadline is None else (deadline - time.monotonic()) / 60.0
        run_config = (
            config if shared.max_cost_usd is None else config.model_copy(update={"max_cost_usd": shared.max_cost_usd})
        )
        try:
            run_id = start(
                run_config,
                store,
                executor=executors[executor_key(config)],
                on_event=relay,
                shared_spend=spend,
                max_minutes=left,
            )
        except Interrupted as exc:
            return SearchOutcome(problem=config.problem, run_id=exc.run_id, state="interrupted")
        except Exception as exc:
            return SearchOutcome(
                problem=config.problem,
                run_id=run_ids[0] if run_ids else None,
                state="failed",
                reason=f"{type(exc).__name__}: {exc}",
            )
        return SearchOutcome(problem=config.problem, run_id=run_id, state="finished")

    pool = None
    try:
        # Every executor is made before any search starts: starting Ray briefly points this process's
        # HTTP proxies at a closed port, which must not catch a search's LLM call in flight.
        for config in configs:
            key = executor_key(config)
            if key in executors or key in failed:
                continue
            try:
                made[key] = executors[key] = config.make_executor(ray_address)
            except KscoutError as exc:  # the searches needing it fail; the others still run
                failed[key] = f"{type(exc).__name__}: {exc}"
        pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="kscout-search")
        futures: dict[Future, int] = {pool.submit(one, i, c): i for i, c in enumerate(configs)}
        pending = set(futures)
        while pending:
            try:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt:
                for ex in executors.values():
                    ex.cancel()
                continue  # each running search now records itself interrupted and returns
            for f in done:
                outcomes[futures[f]] = f.result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        for ex in reversed(list(made.values())):  # the executor that started Ray closes last
            ex.close()
    return ManyResult(
        outcomes=tuple(outcomes[i] for i in range(len(configs))),
        elapsed_s=time.monotonic() - t0,
        cost_usd=spend.spent_usd,
    )


def _load_knowledge_once(store) -> None:
    """A new store gets the shipped hardware documents before the searches start, not by each of them
    at once (two sessions would race to ingest the same files)."""
    from knowledge.retrieve import documents_or_builtin

    documents_or_builtin(store)
