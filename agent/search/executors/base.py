"""The executor: the only way agent code runs candidate code (search, final re-measure, revalidate).

An executor is bound to one device at construction and reports that device's environment. It takes
the problem by value (`ProblemInfo` carries its source), so it may run candidates on a machine that has
never seen the user's file. It returns typed results and never writes the store: the caller records
what comes back.

`BatchExecutor.evaluate_batch` is the batch both executors share, in two phases: correctness for the
whole batch in parallel, then one timing job for every candidate of the batch that passed (siblings
compared in one process on one device). Two kinds of trouble are not the candidate's fault and get a
second chance, alone, after the parallel phase: a check that ran out of device memory while its
siblings shared the device, and a job whose infrastructure was lost (a node died). The verdict of the
second run stands. Subclasses say how a check, a timing and a re-measure run, and what "lost" means.
"""

from __future__ import annotations

import datetime as _dt
import threading
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, wait
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Protocol

from evaluation.errors import KscoutError
from evaluation.records import (
    BASELINES,
    EvalResult,
    Fingerprint,
    ProblemInfo,
    RemeasureResult,
    Stage,
    Status,
    source_sha256,
)


class ExecutorError(KscoutError):
    """An executor that cannot start, cannot reach the device it was asked for, or lost a job for good."""


class Cancelled(Exception):
    """The executor was cancelled (Ctrl-C): outstanding work is dropped and never recorded."""


class Executor(Protocol):
    name: str
    device: str  # "cpu" | "cuda": what every evaluation it runs is asked for

    def environment(self) -> Fingerprint: ...

    def evaluate_batch(
        self, sources: list[str], problem: ProblemInfo, *, baselines: tuple[str, ...] = BASELINES
    ) -> Iterator[tuple[int, EvalResult]]: ...

    def remeasure(
        self, sources: dict[str, str], problem: ProblemInfo, *, rounds: int, baselines: tuple[str, ...] = BASELINES
    ) -> RemeasureResult: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


def out_of_memory(outcome: "EvalResult | BaseException") -> bool:
    """A check that ran out of device memory: the parent raised it, or the worker reported it."""
    if isinstance(outcome, BaseException):
        return type(outcome).__name__ == "OutOfMemoryError"
    return outcome.error_class == "OutOfMemoryError"


def _why_again(outcome: "EvalResult | BaseException") -> str:
    if isinstance(outcome, BaseException):
        text = f"{type(outcome).__name__}: {outcome}"
    else:
        text = f"{outcome.failed_stage.value if outcome.failed_stage else '-'} {outcome.error_class}: {outcome.message}"
    return text.splitlines()[0][:300] if text else ""


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


class SharedExclusiveLock:
    """Checks share the device; a timing, a re-measure or a check run alone has it to itself.

    Writer-preferring, so a timing waits only for the checks already running, not for every check
    queued behind it (several searches may share one executor). `max_shared`: at most this many
    holders share it at once (the executor's GPU lanes); None: no bound but the callers'.

    `capacity`: shared holders also declare a weight (a check's device memory, evaluation/footprint.py),
    and together they hold at most this much. A holder is always let in when it would share with no
    one, however heavy: the bound keeps checks from crowding each other out, never one check out.
    A callable is asked once, at the first weighted acquire (the device's memory, without a CUDA
    context made before a check needs one)."""

    def __init__(
        self, max_shared: Optional[int] = None, capacity: Optional[int | Callable[[], Optional[int]]] = None
    ) -> None:
        if max_shared is not None and max_shared < 1:
            raise ValueError("max_shared must be at least 1")
        self.max_shared = max_shared
        self._capacity = capacity
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self.weight_held = 0  # the shared holders' weights, together
        self.waited_for_weight = 0  # acquires that waited for weight (and not only for a lane or a timing)

    @property
    def capacity(self) -> Optional[int]:
        if callable(self._capacity):
            try:
                self._capacity = self._capacity()
            except Exception:  # no device to ask: counted lanes only
                self._capacity = None
        return self._capacity

    def _too_heavy(self, weight: int) -> bool:
        if not weight or not self._readers:
            return False
        capacity = self.capacity
        return capacity is not None and self.weight_held + weight > capacity

    @contextmanager
    def shared(self) -> Iterator[None]:
        self.acquire_shared()
        try:
            yield
        finally:
            self.release_shared()

    def acquire_shared(self, abandon: Optional[threading.Event] = None, weight: int = 0) -> bool:
        """Hold it shared (True), or give up once `abandon` is set (False: nothing held). `weight`: what
        this holder adds against `capacity`; release it with the same weight."""
        with self._cond:
            counted = False
            while (
                self._writer
                or self._writers_waiting
                or (self.max_shared is not None and self._readers >= self.max_shared)
                or self._too_heavy(weight)
            ):
                if not counted and not (self._writer or self._writers_waiting) and self._too_heavy(weight):
                    if self.max_shared is None or self._readers < self.max_shared:
                        self.waited_for_weight += 1
                        counted = True
                if abandon is not None and abandon.is_set():
                    return False
                self._cond.wait(None if abandon is None else 0.05)
            self._readers += 1
            self.weight_held += weight
            return True

    def release_shared(self, weight: int = 0) -> None:
        with self._cond:
            self._readers -= 1
            self.weight_held -= weight
            self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class BatchExecutor:
    """What both executors share: device binding, the two-phase batch, cancellation."""

    name = "base"

    def __init__(self, device: str, workers: int, timeout_s: float, trials: int, sandbox: Optional[str] = None):
        if workers < 1:
            raise ExecutorError("an executor needs at least one worker")
        if device not in ("cpu", "cuda"):
            raise ExecutorError(f"an executor runs on 'cpu' or 'cuda' (got {device!r})")
        self.device = device
        self.workers = workers
        self.timeout_s = timeout_s
        self.trials = trials
        self.sandbox = sandbox  # the evaluator's --sandbox (None: $KSCOUT_SANDBOX, else auto)
        self.lanes = workers  # checks sharing the device at once (LocalExecutor bounds it on a GPU)
        self._fp: Optional[Fingerprint] = None
        self._cancelled = threading.Event()
        self.rechecked = 0  # checks run a second time alone (out of memory beside siblings, or lost)
        self.recheck_reasons: list[str] = []  # why, one line each (the throughput benchmark reports them)

    @property
    def sandbox_kw(self) -> dict:
        """The evaluator's sandbox option, passed only when set (stand-in evaluators need not take it)."""
        return {"sandbox": self.sandbox} if self.sandbox else {}

    # -- what a subclass provides ------------------------------------------------------------------
    def _fingerprint(self) -> Fingerprint:
        raise NotImplementedError

    def _check(self, source: str, problem: ProblemInfo, *, alone: bool) -> "Future[EvalResult]":
        """Start one correctness check (no timing); `alone`: with the device to itself."""
        raise NotImplementedError

    def _time(
        self, items: list[tuple[str, EvalResult]], problem: ProblemInfo, baselines: tuple[str, ...]
    ) -> list[EvalResult]:
        """Time candidates that passed, all in one job on one device; results in the items' order."""
        raise NotImplementedError

    def _remeasure(
        self, sources: dict[str, str], problem: ProblemInfo, rounds: int, baselines: tuple[str, ...]
    ) -> RemeasureResult:
        raise NotImplementedError

    def _lost(self, exc: BaseException) -> bool:
        """The job was lost by the infrastructure (a node or worker died), not failed by the candidate."""
        return False

    def _drop(self, futures: list[Future]) -> None:
        """Stop work nobody will read (the caller stopped early, or was interrupted)."""
        for f in futures:
            f.cancel()

    # -- the public face -------------------------------------------------------------------------------
    def environment(self) -> Fingerprint:
        if self._fp is None:
            self._fp = self._fingerprint()
        return self._fp

    def _open(self) -> None:
        if self._cancelled.is_set():
            raise Cancelled("the executor was cancelled")

    def _completed(self, futures) -> Iterator[Future]:
        """Futures as they finish; raises Cancelled as soon as the executor is cancelled (a future
        cancelled while queued never counts as finished for `as_completed`, so it cannot be used)."""
        pending = set(futures)
        while pending:
            if self._cancelled.is_set():
                raise Cancelled("the executor was cancelled")
            done = [f for f in pending if f.done()]
            if not done:
                wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                continue
            for f in done:
                pending.discard(f)
                yield f

    def _outcome(self, future: Future) -> Any:
        # EvalResult for a check, list[EvalResult] for a timing batch, the environment's Fingerprint,
        # or the exception the future raised
        """The future's result, or the exception it raised (judged by the caller); waits for it."""
        for _ in self._completed([future]):
            pass
        try:
            return future.result()
        except CancelledError:
            raise Cancelled("the executor was cancelled") from None
        except Cancelled:
            raise
        except Exception as exc:  # judged by the caller: starved, lost, or a real error to re-raise
            return exc

    def lost_result(self, source: str, problem: ProblemInfo, stage: Stage, exc: BaseException) -> EvalResult:
        """A job lost twice, the second time run alone: now it counts against the candidate."""
        return EvalResult(
            status=Status.crashed,
            failed_stage=stage,
            error_class=type(exc).__name__,
            message=f"the {self.name} executor lost this job twice, the second time with the device to itself: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
            candidate_sha256=source_sha256(source),
            problem_id=problem.problem_id,
            problem_name=problem.name,
            device=self.device,
            fingerprint=self.environment(),
            started_at=now_utc(),
            duration_s=0.0,
        )

    def evaluate_batch(
        self, sources: list[str], problem: ProblemInfo, *, baselines: tuple[str, ...] = BASELINES
    ) -> Iterator[tuple[int, EvalResult]]:
        """Yield (position, result) as each lands: failures as soon as their check ends, the passing
        candidates after one shared timing once the whole batch is checked (on the CPU, at once)."""
        self._open()
        timed = self.device != "cpu"
        shared = timed and self.lanes > 1 and len(sources) > 1
        futures = {self._check(s, problem, alone=False): i for i, s in enumerate(sources)}
        passed: list[tuple[int, EvalResult]] = []
        again: list[int] = []
        try:
            for future in self._completed(futures):
                i = futures[future]
                outcome = self._outcome(future)
                if shared and out_of_memory(outcome) or isinstance(outcome, BaseException) and self._lost(outcome):
                    again.append(i)
                    self.recheck_reasons.append(_why_again(outcome))
                elif isinstance(outcome, BaseException):
                    raise outcome
                elif timed and outcome.passed:
                    passed.append((i, outcome))
                else:
                    yield i, outcome
            self.rechecked += len(again)
            for i in sorted(again):  # the parallel phase is over: each has the device to itself
                outcome = self._outcome(self._check(sources[i], problem, alone=True))
                if isinstance(outcome, BaseException):
                    if not self._lost(outcome):
                        raise outcome
                    outcome = self.lost_result(sources[i], problem, Stage.correctness, outcome)
                if timed and outcome.passed:
                    passed.append((i, outcome))
                else:
                    yield i, outcome
            if passed:
                passed.sort(key=lambda p: p[0])
                results = self._time([(sources[i], r) for i, r in passed], problem, baselines)
                self._open()
                yield from ((i, r) for (i, _), r in zip(passed, results))
        finally:
            self._drop([f for f in futures if not f.done()])

    def remeasure(
        self, sources: dict[str, str], problem: ProblemInfo, *, rounds: int, baselines: tuple[str, ...] = BASELINES
    ) -> RemeasureResult:
        """Time the given candidates and the baselines in one job, interleaved round by round."""
        self._open()
        result = self._remeasure(sources, problem, rounds, baselines)
        self._open()
        return result

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
