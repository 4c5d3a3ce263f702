"""The local executor (the default): a pool of threads on this machine, each waiting on a worker process.

`evaluation.evaluate` already isolates each candidate in its own subprocess, so threads are all the
pool needs. On a GPU two timings must never overlap, and no check may overlap a timing (each would
slow the other and the numbers would lie): checks hold the device shared, a timing, a re-measure and
a check re-run alone hold it exclusively. That holds across several searches sharing one executor
(`kscout optimize-many`), where the pool's size bounds the checks running at once.

GPU LANES. Without MPS, a GPU time-slices between the processes' CUDA contexts, and every
synchronisation waits for its turn: on an H100, eight softmax checks sharing the device took 5-8
times as long each as one alone, and half ran out of memory beside their siblings and ran again,
one after another. So at most `lanes` checks hold the device at once (default `DEFAULT_GPU_LANES`,
or $KSCOUT_GPU_LANES). Every check of a batch starts at once and compiles its Triton kernels on the
CPU (one call per case, nothing judged); only then does it wait for a lane, and its battery runs
inside one (`_Lane`). Lanes are weighed as well as counted: a check takes one only while the checks
holding lanes need at most `lane_capacity()` of device memory together, each by its problem's
estimate (evaluation/footprint.py). Three softmax checks fit many times over; a check of a 32768 x
32768 GEMM output takes about 13 GB, and heavy checks of several searches together must not leave the
next worker without room for its CUDA context. A check that would hold the device alone is always let in.

Cancelling (Ctrl-C) drops queued checks and kills the worker processes this executor started, so an
interrupted search exits in seconds, not after its running evaluations time out.
"""

from __future__ import annotations

import importlib
import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from agent.search.executors.base import BatchExecutor, SharedExclusiveLock
from evaluation.records import EvalResult, Fingerprint, ProblemInfo, RemeasureResult

WORKER_MODULE = "evaluation.worker"
DEFAULT_GPU_LANES = 3
LANE_MEMORY_FRACTION = 0.6  # of the GPU's memory, for the checks holding lanes (lane_capacity)


def gpu_lanes(workers: int, lanes: Optional[int] = None) -> int:
    """Checks that share one GPU at once: `lanes`, else $KSCOUT_GPU_LANES, else DEFAULT_GPU_LANES;
    never more than the pool's workers."""
    if lanes is None:
        value = os.environ.get("KSCOUT_GPU_LANES", "").strip()
        try:
            lanes = int(value) if value else DEFAULT_GPU_LANES
        except ValueError:
            raise ValueError(f"KSCOUT_GPU_LANES must be a whole number of checks (got {value!r})") from None
    if lanes < 1:
        raise ValueError(f"a GPU needs at least one lane for checks (got {lanes})")
    return min(lanes, workers)


class _Lane:
    """A check's GPU lane, taken only once its worker has compiled the candidate's kernels (a gated
    request, evaluation.isolation.lane_gate): Triton's compile is CPU work, and a check that compiled
    inside its lane kept the device's turn idle for seconds (4.4-5.0 s of a layernorm check's 8 s on
    an H100). The compiles of a batch now run side by side on the cores while `lanes` checks run."""

    def __init__(self, lock: SharedExclusiveLock, weight: int = 0) -> None:
        self._lock = lock
        self._weight = weight  # the check's device memory (evaluation/footprint.py), against the lanes' capacity

    def acquire(self, abandon: threading.Event) -> bool:
        return self._lock.acquire_shared(abandon, self._weight)

    def release(self) -> None:
        self._lock.release_shared(self._weight)


def lane_capacity() -> "int | Callable[[], Optional[int]]":
    """Device memory the checks holding lanes may need together (evaluation/footprint.py): $KSCOUT_LANE_MEMORY_GB,
    else `LANE_MEMORY_FRACTION` of the GPU's memory, asked when the first check takes a lane. The rest is
    the parent's kept references (a fifth, evaluation/context.py), the warm workers' CUDA contexts, and
    a timing worker's."""
    value = os.environ.get("KSCOUT_LANE_MEMORY_GB", "").strip()
    if not value:
        return _device_lane_capacity
    try:
        gb = float(value)
    except ValueError:
        raise ValueError(f"KSCOUT_LANE_MEMORY_GB must be a number of GB (got {value!r})") from None
    if not gb > 0:
        raise ValueError(f"KSCOUT_LANE_MEMORY_GB must be positive (got {value!r})")
    return int(gb * 1e9)


def _device_lane_capacity() -> int:
    import torch

    return int(LANE_MEMORY_FRACTION * torch.cuda.get_device_properties(0).total_memory)


def worker_children() -> list[int]:
    """Process ids of the evaluation workers this process started (Linux /proc; elsewhere none)."""
    me, found = os.getpid(), []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == me and WORKER_MODULE in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
    return found


class LocalExecutor(BatchExecutor):
    name = "local"

    def __init__(
        self,
        device: str = "auto",
        workers: int = 1,
        *,
        timeout_s: float = 300.0,
        trials: int = 2,
        evaluator: Any = None,
        sandbox: Optional[str] = None,
        lanes: Optional[int] = None,
    ):
        """`evaluator`: what runs candidates (the `evaluation` package; tests pass a stand-in with the
        same functions: evaluate, time_many, remeasure, fingerprint, resolve_device). With the real
        evaluator, each problem's evaluations share one `evaluation.context.SearchContext` (one seed,
        the references, the baselines, the compiled kernels) and warm workers wait for the checks.
        `lanes`: on a GPU, the checks that share the device at once (gpu_lanes); on a CPU the
        workers alone bound them."""
        self._ev = evaluator if evaluator is not None else importlib.import_module("evaluation")
        super().__init__(self._ev.resolve_device(device), workers, timeout_s, trials, sandbox)
        on_gpu = self.device != "cpu"
        if on_gpu:
            self.lanes = gpu_lanes(workers, lanes)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kscout-eval")
        self._contexts: Optional[dict[str, Any]] = {} if evaluator is None else None
        self._contexts_lock = threading.Lock()
        self._device_lock = SharedExclusiveLock(
            self.lanes if on_gpu else None, capacity=lane_capacity() if on_gpu and evaluator is None else None
        )
        self._busy = 0  # jobs in flight, for the reaper
        self._busy_lock = threading.Lock()
        self._reaper: Optional[threading.Thread] = None
        if self._contexts is not None and self.device != "cpu":
            self._reserve()  # the warm-ups overlap the session's own start (store, proposer, lowering)

    def _reserve(self) -> None:
        """Warm workers for a batch's checks and its timing, and one for the baselines (a GPU only)."""
        from evaluation import harness, pool
        from evaluation.isolation import resolve_sandbox

        isolation = resolve_sandbox(self.sandbox_kw.get("sandbox"), self.device)
        pool.reserve(self.device, isolation, self.workers + 1, harness.scratch_root())
        if self.device != "cpu":
            pool.reserve(self.device, "none", 1, harness.scratch_root())

    def _fingerprint(self) -> Fingerprint:
        return self._ev.fingerprint(self.device)

    def _context(self, problem: ProblemInfo) -> dict[str, Any]:
        """`context=` for the evaluator: the problem's search context (created, and warm workers
        reserved for a batch's checks and its timing, on first use)."""
        if self._contexts is None:
            return {}
        with self._contexts_lock:
            ctx = self._contexts.get(problem.problem_id)
            if ctx is None:
                from evaluation import harness
                from evaluation.context import SearchContext

                ctx = self._contexts[problem.problem_id] = SearchContext(scratch_root=harness.scratch_root())
                self._reserve()
        return {"context": ctx}

    # -- jobs ----------------------------------------------------------------------------------------
    @contextmanager
    def _job(self) -> Iterator[None]:
        with self._busy_lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._busy_lock:
                self._busy -= 1

    def _run_check(self, source: str, problem: ProblemInfo, alone: bool) -> EvalResult:
        self._open()
        if self.device == "cuda" and not alone:  # compiles first, then waits for a lane (_Lane)
            with self._job():
                return self._evaluate_check(source, problem, lane=_Lane(self._device_lock, self._weight(problem)))
        with self._job(), self._device_lock.exclusive() if alone else self._device_lock.shared():
            return self._evaluate_check(source, problem)

    @property
    def memory_waits(self) -> int:
        """Checks that waited for device memory before taking a lane (not only for a free lane)."""
        return self._device_lock.waited_for_weight

    def _weight(self, problem: ProblemInfo) -> int:
        """A check's device memory, against the lanes' capacity (0: counted by lane only, as with a stand-in
        evaluator or a problem the meta device cannot build)."""
        if self._device_lock.capacity is None:
            return 0
        from evaluation.footprint import check_bytes

        return check_bytes(problem) or 0

    def _evaluate_check(self, source: str, problem: ProblemInfo, **lane: Any) -> EvalResult:
        self._open()
        return self._ev.evaluate(
            source,
            problem,
            device=self.device,
            timeout_s=self.timeout_s,
            trials=self.trials,
            time_it=False,
            **self.sandbox_kw,
            **self._context(problem),
            **lane,
        )

    def _check(self, source: str, problem: ProblemInfo, *, alone: bool) -> "Future[EvalResult]":
        return self._pool.submit(self._run_check, source, problem, alone)

    def _time(
        self, items: list[tuple[str, EvalResult]], problem: ProblemInfo, baselines: tuple[str, ...]
    ) -> list[EvalResult]:
        with self._job(), self._device_lock.exclusive():
            self._open()
            return self._ev.time_many(
                items,
                problem,
                device=self.device,
                timeout_s=self.timeout_s,
                baselines=baselines,
                **self.sandbox_kw,
                **self._context(problem),
            )

    def _remeasure(
        self, sources: dict[str, str], problem: ProblemInfo, rounds: int, baselines: tuple[str, ...]
    ) -> RemeasureResult:
        with self._job(), self._device_lock.exclusive():
            self._open()
            return self._ev.remeasure(
                sources,
                problem,
                device=self.device,
                rounds=rounds,
                baselines=baselines,
                **self.sandbox_kw,
                **self._context(problem),
            )

    # -- stopping ------------------------------------------------------------------------------------
    def _reap(self) -> None:
        """While jobs are still in flight after a cancel, kill the worker processes they wait on."""
        deadline = time.monotonic() + max(30.0, self.timeout_s)
        while time.monotonic() < deadline:
            for pid in worker_children():
                try:
                    os.killpg(pid, signal.SIGKILL)  # each worker leads its own process group
                except (ProcessLookupError, PermissionError):
                    pass
            with self._busy_lock:
                if self._busy == 0:
                    return
            time.sleep(0.1)

    def cancel(self) -> None:
        if self.cancelled:
            return
        super().cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._reaper = threading.Thread(target=self._reap, name="kscout-reaper", daemon=True)
        self._reaper.start()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._reaper is not None:
            self._reaper.join()
        with self._contexts_lock:
            contexts = list((self._contexts or {}).values())
            if self._contexts is not None:
                self._contexts.clear()
        for ctx in contexts:
            ctx.close()
