"""What one search keeps for all its candidates, so that each evaluation pays only for its own work.

A search evaluates many candidates of one problem on one device. Without a context every evaluation
draws a new secret seed, and with it new inputs, so the parent recomputes every float64 reference
output, a new baseline process re-times eager PyTorch (and recompiles torch.compile) for every batch,
and a candidate's timing process compiles again the kernels its own check has just compiled. With a
`SearchContext` (the local executor keeps one per problem):

- one secret seed for the whole search: the trial inputs, timing sets and checks are the same for
  every candidate, drawn fresh inside each candidate's own process as before (a candidate cannot
  learn them beforehand, and no process outlives its one candidate to remember them);
- the parent's references (problem modules, reference models) and the float64 reference outputs of
  every judged trial, kept up to a byte budget and shared by all candidates' judgements;
- each baseline's timing per case, measured once in a process no candidate ran in and quoted for
  every batch after (the final interleaved re-measure still times its own baselines, with a fresh
  seed, and it is what the verdict quotes);
- the baseline process of the first timing, started beside the first checks (harness.py): it compiles
  torch.compile's reference while the candidates are checked and waits at a gate
  (isolation.Gate) until the timing lets it take its samples alone;
- the Triton cache a passing candidate's check filled in its sandbox, copied into the candidate's
  timing process, so its timing does not compile the same kernels again. A timing process only
  gets the caches of the candidates it times, which all ran their checks in their own processes.

Nothing here changes what is checked: every candidate still gets every case, every trial, the stress
trials, the timed-output checks and the profiler accounting.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional

from evaluation.correctness import KeepBudget, References
from evaluation.records import Baseline, ProblemInfo

KEEP_REFERENCE_FRACTION_GPU = 0.2  # of the device's memory, for a search's float64 reference outputs
KEEP_REFERENCE_BYTES_CPU = 512 << 20
MAX_KEPT_KERNEL_CACHES = 64

Measured = tuple[dict[int, dict[str, Baseline]], dict[int, tuple[int, int]]]


class EarlyBaselines:
    """A baseline process started ahead of its timing, in a thread; held at its gate until `result()`."""

    def __init__(self, run: Callable[[Any], Measured]):
        from evaluation.isolation import Gate

        self.gate = Gate()
        self._got: Optional[Measured] = None
        self._taken = False
        self._taken_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, args=(run,), name="kscout-early-baselines", daemon=True)
        try:
            self._thread.start()
        except RuntimeError:  # no thread to be had: nothing will wait at this gate, so none may wait for it
            self.gate.ready.set()
            self.gate.open()
            raise

    def _run(self, run: Callable[[Any], Measured]) -> None:
        try:
            self._got = run(self.gate)
        except Exception:  # the timing measures them itself then, and meets the same trouble in the open
            self._got = None
        finally:
            self.gate.ready.set()

    def result(self) -> Optional[Measured]:
        """Let the process take its samples (the device is its own now) and wait for them; at once
        once done. None if the process failed (the timing then measures the baselines itself)."""
        self.gate.open()
        self._thread.join()
        return self._got

    def take(self) -> Optional[Measured]:
        """`result()` the first time it is asked for, None after: a later timing finds the baselines
        in the search's context, as a reuse."""
        with self._taken_lock:
            first, self._taken = not self._taken, True
        return self.result() if first else None

    def cancel(self) -> None:
        self.gate.cancel()
        self._thread.join()


_SHARED_BUDGETS: dict[str, KeepBudget] = {}
_SHARED_LOCK = threading.Lock()


def shared_budget(device: str) -> KeepBudget:
    """The process's one budget of kept reference outputs on `device`, shared by its searches."""
    with _SHARED_LOCK:
        budget = _SHARED_BUDGETS.get(device)
        if budget is None:
            budget = _SHARED_BUDGETS[device] = KeepBudget(reference_budget(device))
        return budget


def reference_budget(device: str) -> int:
    """Bytes of float64 reference outputs a search keeps: a fifth of the GPU's memory (about 28 GB on an
    H200, where a batch's workers need the rest), 512 MiB of host memory on a CPU."""
    if device == "cuda":
        import torch

        return int(KEEP_REFERENCE_FRACTION_GPU * torch.cuda.get_device_properties(0).total_memory)
    return KEEP_REFERENCE_BYTES_CPU


class SearchContext:
    """One search's seed, references, baselines and compiled kernels (thread-safe)."""

    def __init__(self, seed: Optional[int] = None, *, scratch_root: Optional[str] = None):
        self.seed = secrets.randbelow(2**31 - 10**5) if seed is None else seed
        self._lock = threading.Lock()
        self._refs: dict[tuple[str, str], References] = {}
        self._baselines: dict[tuple[str, str, str, int], Baseline] = {}
        self._sizes: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._kernels: dict[str, Path] = {}  # candidate sha256 -> its check's Triton cache, oldest first
        self._scratch_root = scratch_root
        self._root: Optional[Path] = None  # made when the first cache is kept
        self.baselines_reused = 0
        self._early: dict[tuple[str, str], EarlyBaselines] = {}

    # -- references ----------------------------------------------------------------------------
    def references(self, info: ProblemInfo, device: str) -> References:
        key = (info.problem_id, device)
        with self._lock:
            refs = self._refs.get(key)
            if refs is None:
                refs = self._refs[key] = References(
                    info, device, self.seed, keep_bytes=reference_budget(device), shared=shared_budget(device)
                )
            return refs

    # -- baselines -----------------------------------------------------------------------------
    def measured(
        self, info: ProblemInfo, device: str, names: tuple[str, ...], indices: list[int], *, count: bool = True
    ) -> tuple[dict[int, dict[str, Baseline]], dict[int, tuple[int, int]], list[str]]:
        """The baselines already timed for these cases, their byte sizes, and the names still to time
        (a name counts as timed only when it was timed, without error, for every case). `count`: a
        reuse is counted (a look that only asks what is missing is not one)."""
        found: dict[int, dict[str, Baseline]] = {}
        sizes: dict[int, tuple[int, int]] = {}
        missing = []
        with self._lock:
            for name in names:
                have = [self._baselines.get((info.problem_id, device, name, i)) for i in indices]
                if all(b is not None and b.timing is not None for b in have):
                    for i, b in zip(indices, have):
                        found.setdefault(i, {})[name] = b  # type: ignore[assignment]
                else:
                    missing.append(name)
            for i in indices:
                size = self._sizes.get((info.problem_id, device, i))
                if size is not None:
                    sizes[i] = size
            if names and not missing and count:
                self.baselines_reused += 1
        return found, sizes, missing

    def remember(
        self,
        info: ProblemInfo,
        device: str,
        measured: dict[int, dict[str, Baseline]],
        sizes: dict[int, tuple[int, int]],
    ) -> None:
        with self._lock:
            for index, by_name in measured.items():
                for name, baseline in by_name.items():
                    if baseline.timing is not None:
                        self._baselines[(info.problem_id, device, name, index)] = baseline
            for index, size in sizes.items():
                self._sizes[(info.problem_id, device, index)] = size

    def start_early_baselines(self, info: ProblemInfo, device: str, run: Callable[[Any], Measured]) -> bool:
        """Start `run(gate)` (harness._time_baselines) now, unless this problem's early baselines are
        started already; False then."""
        key = (info.problem_id, device)
        with self._lock:
            if key in self._early:
                return False
            try:
                self._early[key] = EarlyBaselines(run)
            except RuntimeError:  # no thread: the timing measures its baselines itself, as before
                return False
            return True

    def early_baselines(self, info: ProblemInfo, device: str) -> Optional[EarlyBaselines]:
        """This problem's early baselines, if they were started (kept once done, so they start once)."""
        with self._lock:
            return self._early.get((info.problem_id, device))

    # -- compiled kernels ----------------------------------------------------------------------
    def stash_kernels(self, sha: str, cache_dir: Path) -> None:
        """Move a checked candidate's Triton cache out of its scratch folder (before that is removed)."""
        if not cache_dir.is_dir():
            return
        with self._lock:
            if sha in self._kernels:
                return
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="kscout-ctx-", dir=self._scratch_root))
            target = self._root / sha
            try:
                shutil.move(str(cache_dir), str(target))
            except OSError:
                return
            self._kernels[sha] = target
            while len(self._kernels) > MAX_KEPT_KERNEL_CACHES:
                oldest = next(iter(self._kernels))
                shutil.rmtree(self._kernels.pop(oldest), ignore_errors=True)

    def drop_kernels(self, sha: str) -> None:
        """A candidate that did not pass is never timed: its cache goes."""
        with self._lock:
            path = self._kernels.pop(sha, None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def kernels(self, shas: list[str]) -> list[Path]:
        with self._lock:
            return [self._kernels[s] for s in shas if s in self._kernels]

    def close(self) -> None:
        with self._lock:
            early, self._early = list(self._early.values()), {}
        for job in early:  # nothing passed to time: the waiting baseline processes end
            job.cancel()
        with self._lock:
            self._kernels.clear()
            refs, self._refs = list(self._refs.values()), {}
        for r in refs:  # their bytes go back to the searches still running in this process
            r.forget()
        with self._lock:
            root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    def __enter__(self) -> "SearchContext":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def plant_kernels(caches: list[Path], cache_dir: Path) -> int:
    """Copy kept Triton caches into a worker's (not yet started) cache folder; returns entries copied.
    The folder is open to the sandbox's uid (Triton adds entries; `out/` around it is the uid's alone),
    the copied entries are readable."""
    import json
    import os

    cache_dir.mkdir(parents=True, exist_ok=True)
    copied = 0
    for cache in caches:
        for entry in cache.iterdir():
            target = cache_dir / entry.name
            if target.exists() or not entry.is_dir():
                continue
            shutil.copytree(entry, target)
            copied += 1
            for group in target.glob("__grp__*"):  # Triton records a group's files by absolute path
                try:
                    data = json.loads(group.read_text())
                    data["child_paths"] = {
                        name: str(target / Path(path).name) for name, path in data.get("child_paths", {}).items()
                    }
                    group.write_text(json.dumps(data))
                except (OSError, ValueError, AttributeError):
                    group.unlink(missing_ok=True)  # unreadable: Triton compiles that kernel again
    for path in cache_dir.rglob("*"):  # the uid may add files beside the copied ones (a new specialisation)
        os.chmod(path, 0o777 if path.is_dir() else 0o644)
    os.chmod(cache_dir, 0o777)
    return copied
