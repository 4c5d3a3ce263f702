"""Where evaluations run: an interface the session submits to, and the local default.

`evaluation.evaluate` already isolates each candidate in its own subprocess, so a pool of threads
that wait on those subprocesses is all the local executor needs. On a GPU two timings must never
overlap (each would slow the other and both numbers would lie): correctness runs in parallel, then
timing takes `timing_lock`, one candidate at a time. A fleet executor (Ray tasks placed by device
resource) implements the same two methods.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Optional, Protocol

from evaluation.records import EvalResult, ProblemInfo


class Executor(Protocol):
    def submit(self, source: str, problem: ProblemInfo, device: str) -> "Future[EvalResult]": ...

    def map(self, sources: Iterable[str], problem: ProblemInfo, device: str) -> list["Future[EvalResult]"]: ...

    def close(self) -> None: ...


class LocalExecutor:
    def __init__(
        self,
        workers: int = 1,
        *,
        timeout_s: float = 300.0,
        trials: int = 3,
        evaluate: Optional[Callable[..., EvalResult]] = None,
    ):
        if workers < 1:
            raise ValueError("an executor needs at least one worker")
        self.workers = workers
        self.timeout_s = timeout_s
        self.trials = trials
        self._evaluate = evaluate
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kscout-eval")
        self.timing_lock = threading.Lock()

    def _evaluate_fn(self) -> Callable[..., EvalResult]:
        if self._evaluate is None:
            import evaluation

            self._evaluate = evaluation.evaluate
        return self._evaluate

    def _run(self, source: str, problem: ProblemInfo, device: str) -> EvalResult:
        evaluate = self._evaluate_fn()
        kwargs = dict(device=device, timeout_s=self.timeout_s, trials=self.trials)
        if device == "cpu" or self.workers == 1:
            return evaluate(source, problem, **kwargs)
        checked = evaluate(source, problem, time_it=False, **kwargs)
        if not checked.passed:
            return checked
        with self.timing_lock:
            return evaluate(source, problem, time_it=True, **kwargs)

    def submit(self, source: str, problem: ProblemInfo, device: str) -> "Future[EvalResult]":
        return self._pool.submit(self._run, source, problem, device)

    def map(self, sources: Iterable[str], problem: ProblemInfo, device: str) -> list["Future[EvalResult]"]:
        return [self.submit(s, problem, device) for s in sources]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
