"""Warm workers: sandboxed worker processes started ahead of need, each for exactly one request.

Starting a worker on a GPU costs seconds before the candidate's first line runs: the interpreter, the
sandbox, `import torch` and Triton, a CUDA context, Triton's driver helpers built with gcc. A search
pays that for every check, every timing and every baseline measurement. A warm worker pays it while
the parent is doing something else: the pool spawns `python -m evaluation.worker --warm DEVICE` in
its own scratch folder and sandbox, the process warms up (worker.warm_up) and blocks on its request
pipe, and `take()` hands it to the caller, which writes the inputs into that scratch folder and sends
the request. Nothing is shared or reused between candidates: the process runs one request and exits,
its scratch folder is removed, and the pool starts a fresh one in its place. The warm-up runs no
candidate code and reads no input; limits and privileges are set before it, as for any worker.

A warm worker is only handed out if it matches what a worker started now would be: the same device,
isolation, environment, limits and interpreter (the spawn's `signature`). One that died while it
waited, or was started under other settings, is discarded.

`KSCOUT_WARM_WORKERS`: `auto` (the default: warm workers on a CUDA device, none on the CPU, where the
two cores are better spent on the evaluation itself), `off`/`0`, or a number of warm workers kept per
(device, isolation) for any device.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Optional

from evaluation.isolation import Scratch, WorkerProcess, default_limits, kill_group, worker_env

# Limits of a warm worker are set before its request (and so its time limit) is known: the CPU-time
# cap is derived from this, the largest limit a caller passes in practice (the baselines' 900 s).
WARM_TIMEOUT_S = 900.0
DEFAULT_GPU_WARM = 2  # a check's and a timing's worker, or a batch's first two checks
MAX_WARM = 16


def _setting() -> str:
    return os.environ.get("KSCOUT_WARM_WORKERS", "auto").strip().lower()


def warm_count(device: str, *, ready: Optional[bool] = None) -> int:
    """How many warm workers this process keeps for `device` by default (before `reserve`). `ready`:
    whether the device is usable, if the caller knows (else CUDA is asked, which imports torch)."""
    value = _setting()
    if value in ("off", "0", "no", "false"):
        return 0
    if value == "auto":
        return DEFAULT_GPU_WARM if device == "cuda" and (_cuda_ready() if ready is None else ready) else 0
    try:
        return max(0, min(MAX_WARM, int(value)))
    except ValueError as exc:
        raise ValueError(f"KSCOUT_WARM_WORKERS must be auto, off or a number (got {value!r})") from exc


def _cuda_ready() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def signature(device: str, isolation: str) -> str:
    """What a worker spawned now would be started with: a warm one is used only if it matches."""
    limits = default_limits(device, WARM_TIMEOUT_S)
    env = worker_env(device)
    parts = [device, isolation, sys.executable, limits.model_dump_json(), json.dumps(sorted(env.items()))]
    parts.append(json.dumps(sys.path))  # the folders bound back into the sandbox
    for var in ("HOME", "KSCOUT_HOME", "XDG_DATA_HOME", "KSCOUT_SCRATCH"):
        parts.append(os.environ.get(var, ""))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@dataclass
class _Warm:
    worker: WorkerProcess
    signature: str


@dataclass
class WarmPool:
    """Warm workers for one (device, isolation): at most `size` waiting at any time."""

    device: str
    isolation: str
    scratch_root: Optional[str]
    size: int = 0
    idle: list[_Warm] = field(default_factory=list)
    # the workers the command will still take, where it knows (`kscout eval`: a check, a timing, the
    # baselines): none is started beyond them, to warm up beside the run and then be killed at exit
    quota: Optional[int] = None
    spawned: int = 0  # warm workers started, and handed out, over the pool's life
    handed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _spawn(self, sig: str) -> _Warm:
        scratch = Scratch.make(self.scratch_root)
        worker = WorkerProcess(
            scratch,
            self.device,
            isolation=self.isolation,
            timeout_s=WARM_TIMEOUT_S,
            limits=default_limits(self.device, WARM_TIMEOUT_S),
            warm=True,
        )
        try:
            worker.spawn()
        except BaseException:
            scratch.cleanup()
            raise
        self.spawned += 1
        return _Warm(worker, sig)

    def fill(self) -> None:
        """Start warm workers until `size` wait (they warm up in the background)."""
        sig = signature(self.device, self.isolation)
        with self.lock:
            self._drop_stale(sig)
            while len(self.idle) < self._target():
                self.idle.append(self._spawn(sig))

    def _target(self) -> int:
        return self.size if self.quota is None else min(self.size, self.quota)

    def take(self) -> Optional[WorkerProcess]:
        """A warm worker (still warming up, or waiting), replaced at once by a new one; None if the
        pool keeps none. The caller owns it: it sends one request and finishes it, and cleans up its
        scratch folder."""
        if self.size <= 0:
            return None
        sig = signature(self.device, self.isolation)
        with self.lock:
            self._drop_stale(sig)
            warm = self.idle.pop(0) if self.idle else self._spawn(sig)
            if self.quota is not None:
                self.quota = max(0, self.quota - 1)
            while len(self.idle) < self._target():
                self.idle.append(self._spawn(sig))
            self.handed += 1
        return warm.worker

    def _drop_stale(self, sig: str) -> None:
        keep = []
        for warm in self.idle:
            if warm.signature == sig and warm.worker.alive():
                keep.append(warm)
            else:
                _discard(warm.worker)
        self.idle = keep

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        _discard_all([warm.worker for warm in idle])


def _discard_all(workers: list[WorkerProcess]) -> None:
    """Kill every process group first, then reap: a CUDA context that dies takes a while to release
    its device memory, and those waits overlap instead of adding up."""
    for worker in workers:
        if worker.proc is not None:
            kill_group(worker.proc.pid)
    for worker in workers:
        _discard(worker)


def _discard(worker: WorkerProcess) -> None:
    try:
        if worker.proc is not None:
            worker.finish(stopped=True)
    finally:
        worker.scratch.cleanup()


_POOLS: dict[tuple[str, str], WarmPool] = {}
_POOLS_LOCK = threading.Lock()


def pool(device: str, isolation: str, scratch_root: Optional[str] = None, *, ready: Optional[bool] = None) -> WarmPool:
    """This process's pool for (device, isolation), created with the default size on first use."""
    with _POOLS_LOCK:
        found = _POOLS.get((device, isolation))
        if found is None:
            size = warm_count(device, ready=ready)
            found = _POOLS[(device, isolation)] = WarmPool(device, isolation, scratch_root, size)
        return found


def reserve(device: str, isolation: str, count: int, scratch_root: Optional[str] = None) -> WarmPool:
    """Keep at least `count` warm workers for (device, isolation) from now on (a search with `--workers
    8` reserves its checks' worth), unless warm workers are off; starts them now."""
    p = pool(device, isolation, scratch_root)
    if warm_count(device) == 0:
        return p
    with p.lock:
        p.size = max(p.size, min(MAX_WARM, count))
    p.fill()
    return p


def prestart(device: str, sandbox: Optional[str], checks: int, baselines: int = 1, *, only: bool = False) -> int:
    """At the start of a command told `--device cuda`: the warm workers its first evaluations take
    (`checks` sandboxed ones, for a batch's checks and its timing, and `baselines` for the reference),
    started before the command's own set-up (importing torch, loading the problem, opening the store,
    a new store's shipped docs), so that their imports and CUDA contexts overlap it. The flag is
    trusted rather than torch imported to confirm it: a device that cannot warm up ends its workers,
    and the evaluation then says why. `only`: these are all the workers the command takes (one
    evaluation), so none is started to replace a worker taken. Returns the workers started (0: warm
    workers are off, another device, or no sandbox where one is required, which the evaluation reports)."""
    if device != "cuda" or checks < 1 or warm_count(device, ready=True) == 0:
        return 0
    from evaluation.isolation import resolve_sandbox, scratch_root

    try:
        isolation = resolve_sandbox(sandbox, device)
    except Exception:
        return 0
    started = 0
    takes = {isolation: checks}  # without a sandbox, the checks and the baselines share one pool
    takes["none"] = takes.get("none", 0) + baselines
    for iso, count in ((isolation, checks), ("none", baselines)):
        if count < 1:
            continue
        p = pool(device, iso, scratch_root(), ready=True)
        with p.lock:
            p.size = max(p.size, min(MAX_WARM, count))
            if only:
                p.quota = takes[iso]
            before = p.spawned
        p.fill()
        started += p.spawned - before
    return started


def take(device: str, isolation: str, scratch_root: Optional[str] = None) -> Optional[WorkerProcess]:
    return pool(device, isolation, scratch_root).take()


def close_all() -> None:
    """Stop every waiting warm worker and remove its scratch folder (at exit, and in tests)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    workers: list[WorkerProcess] = []
    for p in pools:
        with p.lock:
            idle, p.idle = p.idle, []
        workers += [warm.worker for warm in idle]
    _discard_all(workers)


atexit.register(close_all)
