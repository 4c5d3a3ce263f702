"""The Ray executor: candidates run as Ray tasks on a cluster, placed by device resource.

`pip install 'kernelscout[ray]'`; every node runs the same kernelscout (the fingerprint records its
version). The problem travels inside each task by value (`ProblemInfo` carries its source), so a node
never needs the user's file. Tasks return typed results (`EvalResult`, `RemeasureResult`); only the
driver writes the store.

Placement. A correctness check asks for a share of one device: `1/workers` of a GPU (and of the
custom resource, if one routes the search, e.g. `--ray-resource H200`), or on the CPU `1/workers` of
the custom resource `device:cpu` (a node offers it by declaring it). The timing of a batch and the
final re-measure are one task each asking for a whole device, so Ray never runs a check beside them on
that GPU, and the siblings of a batch are compared in one process on one device, as locally.

Failures. A node or worker that dies mid-task costs only that task: Ray retries it elsewhere
(`max_retries`), so the candidate is not blamed. If every retry is lost too, the candidate runs once
more alone, with a whole device; only if that is lost as well is it recorded `crashed` (the error
class names the Ray failure). A candidate's own crash never reaches Ray: it happens in the worker
process the task waits on and comes back as an ordinary result.

Cancelling (Ctrl-C) cancels every outstanding task; a running one gets KeyboardInterrupt, which kills
its worker process on the way out.

Start-up stays on this machine: a cluster this executor starts listens on 127.0.0.1, and while Ray
starts, HTTP proxies point at a closed local port so its cloud-metadata probes go nowhere.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import threading
from concurrent.futures import Future, InvalidStateError
from contextlib import contextmanager
from typing import Any, Iterator, Optional

from agent import Frozen
from agent.search.executors.base import BatchExecutor, Cancelled, ExecutorError
from evaluation.records import EvalResult, Fingerprint, ProblemInfo, RemeasureResult, Stage, Status

CPU_RESOURCE = "device:cpu"
# Set while Ray starts in this process (and so inherited by every Ray process it starts): no probe of
# cloud metadata endpoints, no usage report, leaves the machine.
OFFLINE_ENV = {
    "http_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "no_proxy": "localhost,127.0.0.1",
    "NO_PROXY": "localhost,127.0.0.1",
    "RAY_USAGE_STATS_ENABLED": "0",
}
# The environment of every task on a GPU host (multicast over NVLink off, as on the lent machines).
TASK_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}
DEFAULT_RETRIES = 3


def _ray():
    try:
        import ray
    except ImportError:
        raise ExecutorError("the ray executor needs Ray: pip install 'kernelscout[ray]'") from None
    return ray


@contextmanager
def offline_env() -> Iterator[None]:
    """OFFLINE_ENV in this process while Ray starts, then the environment as it was (an LLM proposer in
    the same process must still reach its API); usage stats stay off."""
    saved = {k: os.environ.get(k) for k in OFFLINE_ENV}
    os.environ.update(OFFLINE_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if k == "RAY_USAGE_STATS_ENABLED":
                continue
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Placement(Frozen):
    """Where one task ran: what the driver learns besides the result (tests and logs read it)."""

    kind: str  # "environment" | "check" | "check_alone" | "time" | "remeasure"
    node_id: str
    device_share: float


@contextmanager
def _own_signal_handlers() -> Iterator[None]:
    """Keep the driver's SIGINT and SIGTERM handlers across ray.init.

    ray.init installs Ray's SIGTERM handler (exit at once, after abseil's stack dump) over whatever the
    driver had, so a scheduler's SIGTERM would kill a search mid-batch with its run unmarked, where
    kscout records it interrupted and resumable. Setting ours again replaces Ray's at the C level too."""
    main = threading.current_thread() is threading.main_thread()
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:  # None: set outside Python, nothing of ours to put back
                signal.signal(sig, handler)


# -- task bodies (run on the nodes) -----------------------------------------------------------------
def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _task_environment(evaluator: str, device: str) -> tuple[str, Fingerprint]:
    ev = importlib.import_module(evaluator)
    return _node_id(), ev.fingerprint(ev.resolve_device(device))


def _task_check(
    evaluator: str, source: str, problem: ProblemInfo, device: str, timeout_s: float, trials: int, sandbox_kw: dict
) -> tuple[str, EvalResult]:
    ev = importlib.import_module(evaluator)
    return _node_id(), ev.evaluate(
        source, problem, device=device, timeout_s=timeout_s, trials=trials, time_it=False, **sandbox_kw
    )


def _task_time(
    evaluator: str,
    items: list[tuple[str, EvalResult]],
    problem: ProblemInfo,
    device: str,
    timeout_s: float,
    baselines: tuple[str, ...],
    sandbox_kw: dict,
) -> tuple[str, list[EvalResult]]:
    ev = importlib.import_module(evaluator)
    return _node_id(), ev.time_many(
        items, problem, device=device, timeout_s=timeout_s, baselines=baselines, **sandbox_kw
    )


def _task_remeasure(
    evaluator: str,
    sources: dict[str, str],
    problem: ProblemInfo,
    device: str,
    rounds: int,
    baselines: tuple[str, ...],
    sandbox_kw: dict,
) -> tuple[str, RemeasureResult]:
    ev = importlib.import_module(evaluator)
    return _node_id(), ev.remeasure(sources, problem, device=device, rounds=rounds, baselines=baselines, **sandbox_kw)


_REMOTE: dict[str, Any] = {}
_REMOTE_LOCK = threading.Lock()


def _remote(fn):
    with _REMOTE_LOCK:
        if fn.__name__ not in _REMOTE:
            _REMOTE[fn.__name__] = _ray().remote(fn)
        return _REMOTE[fn.__name__]


class RayExecutor(BatchExecutor):
    name = "ray"

    def __init__(
        self,
        device: str = "auto",
        workers: int = 1,
        *,
        timeout_s: float = 300.0,
        trials: int = 2,
        address: Optional[str] = None,
        resource: Optional[str] = None,
        evaluator: str = "evaluation",
        retries: int = DEFAULT_RETRIES,
        sandbox: Optional[str] = None,
    ):
        """`address`: a running cluster ("auto", "HOST:PORT", "ray://..."), else $RAY_ADDRESS, else a
        local cluster started here (stopped by `close`). `resource`: a custom resource every task
        requests, which routes the search to the nodes that declare it. `evaluator`: the module the
        tasks call (the `evaluation` package; tests name a stand-in importable on the nodes)."""
        ray = _ray()
        self.evaluator = evaluator
        self.resource = resource
        self.retries = retries
        self.placements: list[Placement] = []
        self._lock = threading.Lock()
        self._refs: dict[Future, Any] = {}
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self._owns_ray = False
        if not ray.is_initialized():
            self._connect(ray)
        try:
            resolved = self._resolve_device(ray, device)
            super().__init__(resolved, workers, timeout_s, trials, sandbox)
            self._check_feasible(ray)
        except BaseException:
            self.close()
            raise

    # -- the cluster -----------------------------------------------------------------------------------
    def _connect(self, ray) -> None:
        common = dict(log_to_driver=False, logging_level=logging.WARNING, namespace="kernelscout")
        with offline_env(), _own_signal_handlers():
            try:
                if self.address:
                    ray.init(address=self.address, **common)
                else:
                    ray.init(
                        resources={CPU_RESOURCE: 1}, include_dashboard=False, _node_ip_address="127.0.0.1", **common
                    )
            except ConnectionError as exc:
                raise ExecutorError(f"cannot reach the Ray cluster at {self.address}: {exc}") from None
        self._owns_ray = True

    def _resolve_device(self, ray, device: str) -> str:
        if device == "auto":
            return "cuda" if ray.cluster_resources().get("GPU", 0) > 0 else "cpu"
        if device == "rocm":
            return "cuda"
        if device not in ("cpu", "cuda"):
            raise ExecutorError(f"unknown device {device!r}; use one of: auto, cpu, cuda")
        return device

    def _needs(self) -> list[str]:
        if self.device == "cuda":
            return ["GPU"] + ([self.resource] if self.resource else [])
        return [self.resource or CPU_RESOURCE]

    def _check_feasible(self, ray) -> None:
        have = ray.cluster_resources()
        missing = [r for r in self._needs() if have.get(r, 0) < 1]
        if missing:
            where = self.address or "this machine"
            how = "--num-gpus N" if missing[0] == "GPU" else f"--resources '{{\"{missing[0]}\": 1}}'"
            raise ExecutorError(
                f"no node of the Ray cluster at {where} offers a whole {missing[0]!r} for a "
                f"{self.device} search; start one with `ray start ... {how}`"
            )

    # -- tasks -----------------------------------------------------------------------------------------
    def _share(self) -> float:
        """A check's share of one device; rounded down (Ray counts resources in 1e-4 units)."""
        return max(1, int(10_000 / self.workers)) / 10_000

    def _options(self, share: float) -> dict[str, Any]:
        opts: dict[str, Any] = dict(
            num_cpus=1, max_retries=self.retries, retry_exceptions=False, runtime_env={"env_vars": dict(TASK_ENV)}
        )
        if self.device == "cuda":
            opts["num_gpus"] = share
            if self.resource:
                opts["resources"] = {self.resource: share}
        else:
            opts["resources"] = {self.resource or CPU_RESOURCE: share}
        return opts

    def _submit(self, kind: str, share: float, fn, *args) -> Future:
        """Start one task; the returned future holds its value (or the task's own exception)."""
        ray = _ray()
        self._open()
        ref = _remote(fn).options(**self._options(share)).remote(self.evaluator, *args)
        out: Future = Future()
        with self._lock:
            self._refs[out] = ref

        def landed(done: Future) -> None:
            with self._lock:
                self._refs.pop(out, None)
            try:
                node_id, value = done.result()
            except ray.exceptions.TaskCancelledError:
                outcome: Any = Cancelled("the task was cancelled")
            except ray.exceptions.RayTaskError as exc:  # the task body raised: hand over its own error
                outcome = exc.cause if isinstance(exc.cause, BaseException) else exc
            except BaseException as exc:  # lost by the infrastructure, judged by the caller
                outcome = exc
            else:
                with self._lock:
                    self.placements.append(Placement(kind=kind, node_id=node_id, device_share=share))
                outcome = None
            try:
                if outcome is None:
                    out.set_result(value)
                else:
                    out.set_exception(outcome)
            except InvalidStateError:  # dropped by the caller meanwhile
                pass

        ref.future().add_done_callback(landed)
        return out

    def _lost(self, exc: BaseException) -> bool:
        ray = _ray()
        return isinstance(
            exc,
            (
                ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError,
                ray.exceptions.ObjectLostError,
                ray.exceptions.LocalRayletDiedError,
                ray.exceptions.OutOfMemoryError,
            ),
        )

    def _value(self, kind: str, share: float, fn, *args):
        """Run one task to its end; a task the infrastructure lost for good raises ExecutorError."""
        outcome = self._outcome(self._submit(kind, share, fn, *args))
        if isinstance(outcome, BaseException):
            if self._lost(outcome):
                raise ExecutorError(
                    f"the Ray {kind} task was lost {self.retries + 1} times: {type(outcome).__name__}"
                ) from outcome
            raise outcome
        return outcome

    def _fingerprint(self) -> Fingerprint:
        return self._value("environment", self._share(), _task_environment, self.device)

    def _check(self, source: str, problem: ProblemInfo, *, alone: bool) -> "Future[EvalResult]":
        share = 1.0 if alone else self._share()
        return self._submit(
            "check_alone" if alone else "check",
            share,
            _task_check,
            source,
            problem,
            self.device,
            self.timeout_s,
            self.trials,
            self.sandbox_kw,
        )

    def _time(
        self, items: list[tuple[str, EvalResult]], problem: ProblemInfo, baselines: tuple[str, ...]
    ) -> list[EvalResult]:
        outcome = self._outcome(
            self._submit(
                "time", 1.0, _task_time, items, problem, self.device, self.timeout_s, baselines, self.sandbox_kw
            )
        )
        if not isinstance(outcome, BaseException):
            return outcome
        if not self._lost(outcome):
            raise outcome
        # The batch's timing was lost on every retry: one task per candidate, so a loss is its own.
        out: list[EvalResult] = []
        for source, checked in items:
            single = self._outcome(
                self._submit(
                    "time",
                    1.0,
                    _task_time,
                    [(source, checked)],
                    problem,
                    self.device,
                    self.timeout_s,
                    baselines,
                    self.sandbox_kw,
                )
            )
            if isinstance(single, BaseException):
                if not self._lost(single):
                    raise single
                single = [self._lost_timing(checked, single)]
            out.extend(single)
        return out

    def _lost_timing(self, checked: EvalResult, exc: BaseException) -> EvalResult:
        return checked.model_copy(
            update=dict(
                status=Status.crashed,
                failed_stage=Stage.timing,
                error_class=type(exc).__name__,
                message=f"the ray executor lost this candidate's timing job on every retry, the last time alone: "
                f"{type(exc).__name__}",
            )
        )

    def _remeasure(
        self, sources: dict[str, str], problem: ProblemInfo, rounds: int, baselines: tuple[str, ...]
    ) -> RemeasureResult:
        return self._value(
            "remeasure", 1.0, _task_remeasure, sources, problem, self.device, rounds, baselines, self.sandbox_kw
        )

    # -- stopping ------------------------------------------------------------------------------------
    def _drop(self, futures: list[Future]) -> None:
        ray = _ray()
        with self._lock:
            refs = [self._refs.pop(f) for f in futures if f in self._refs]
        for f in futures:
            f.cancel()
        for ref in refs:
            ray.cancel(ref, force=False, recursive=True)

    def cancel(self) -> None:
        super().cancel()
        with self._lock:
            pending = list(self._refs)
        self._drop(pending)

    def close(self) -> None:
        ray = _ray()
        with self._lock:
            pending = list(self._refs)
        if pending:
            self._drop(pending)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False
