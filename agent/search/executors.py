"""Where evaluations run: an interface the session submits to, and the local default.

`evaluation.evaluate` already isolates each candidate in its own subprocess, so a pool of threads
that wait on those subprocesses is all the local executor needs. On a GPU two timings must never
overlap, and no correctness run may overlap a timing (each would slow the other and the numbers
would lie). `evaluate_batch`, the session's path, therefore works in two phases: correctness for the
whole batch in parallel, then one timing process for every candidate of the batch that passed
(`evaluation.time_many`: one process start, one measurement of each baseline, siblings compared on
the same inputs), under `timing_lock`. A check that ran out of device memory while other checks
shared the GPU is not the candidate's failure yet: it is run again once the parallel phase is over,
with the GPU to itself, and that verdict stands. `submit` judges one candidate alone (correctness in
the pool, timing under the lock). A fleet executor (Ray tasks placed by device resource) implements
the same methods.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import Callable, Iterable, Iterator, Optional, Protocol

from evaluation.records import BASELINES, EvalResult, ProblemInfo


def _out_of_memory(outcome: "EvalResult | BaseException") -> bool:
    """A check that ran out of device memory: the parent raised it, or the worker reported it."""
    if isinstance(outcome, BaseException):
        return type(outcome).__name__ == "OutOfMemoryError"
    return outcome.error_class == "OutOfMemoryError"


class Executor(Protocol):
    def submit(self, source: str, problem: ProblemInfo, device: str) -> "Future[EvalResult]": ...

    def evaluate_batch(self, sources: list[str], problem: ProblemInfo, device: str, *,
                       baselines: tuple[str, ...] = BASELINES) -> Iterator[tuple[int, EvalResult]]: ...

    def close(self) -> None: ...


class LocalExecutor:
    def __init__(
        self,
        workers: int = 1,
        *,
        timeout_s: float = 300.0,
        trials: int = 3,
        evaluate: Optional[Callable[..., EvalResult]] = None,
        time_many: Optional[Callable[..., list[EvalResult]]] = None,
    ):
        if workers < 1:
            raise ValueError("an executor needs at least one worker")
        self.workers = workers
        self.timeout_s = timeout_s
        self.trials = trials
        self._evaluate = evaluate
        self._time_many = time_many
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kscout-eval")
        self.timing_lock = threading.Lock()

    def _fns(self) -> tuple[Callable[..., EvalResult], Callable[..., list[EvalResult]]]:
        if self._evaluate is None or self._time_many is None:
            import evaluation

            self._evaluate = self._evaluate or evaluation.evaluate
            self._time_many = self._time_many or evaluation.time_many
        return self._evaluate, self._time_many

    def _check(self, source: str, problem: ProblemInfo, device: str) -> EvalResult:
        evaluate, _ = self._fns()
        return evaluate(source, problem, device=device, timeout_s=self.timeout_s, trials=self.trials, time_it=False)

    def _time(self, items: list[tuple[str, EvalResult]], problem: ProblemInfo, device: str,
              baselines: tuple[str, ...]) -> list[EvalResult]:
        _, time_many = self._fns()
        with self.timing_lock:
            return time_many(items, problem, device=device, timeout_s=self.timeout_s, baselines=baselines)

    def _run(self, source: str, problem: ProblemInfo, device: str) -> EvalResult:
        checked = self._check(source, problem, device)
        if device == "cpu" or not checked.passed:
            return checked
        return self._time([(source, checked)], problem, device, BASELINES)[0]

    def submit(self, source: str, problem: ProblemInfo, device: str) -> "Future[EvalResult]":
        return self._pool.submit(self._run, source, problem, device)

    def map(self, sources: Iterable[str], problem: ProblemInfo, device: str) -> list["Future[EvalResult]"]:
        return [self.submit(s, problem, device) for s in sources]

    def evaluate_batch(self, sources: list[str], problem: ProblemInfo, device: str, *,
                       baselines: tuple[str, ...] = BASELINES) -> Iterator[tuple[int, EvalResult]]:
        """Yield (position, result) as each lands: failures as soon as their check ends, the passing
        candidates after one shared timing once the whole batch is checked (on the CPU, at once)."""
        futures = {self._pool.submit(self._check, s, problem, device): i for i, s in enumerate(sources)}
        shared = device != "cpu" and self.workers > 1 and len(sources) > 1
        passed: list[tuple[int, EvalResult]] = []
        starved: list[int] = []
        for future in as_completed(futures):
            i = futures[future]
            try:
                result = future.result()
            except Exception as exc:
                if not (shared and _out_of_memory(exc)):
                    raise
                starved.append(i)
                continue
            if shared and _out_of_memory(result):
                starved.append(i)
            elif device != "cpu" and result.passed:
                passed.append((i, result))
            else:
                yield i, result
        for i in sorted(starved):  # the parallel phase is over: each has the GPU to itself
            result = self._check(sources[i], problem, device)
            if device != "cpu" and result.passed:
                passed.append((i, result))
            else:
                yield i, result
        if passed:
            passed.sort()
            timed = self._time([(sources[i], r) for i, r in passed], problem, device, baselines)
            yield from ((i, r) for (i, _), r in zip(passed, timed))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
