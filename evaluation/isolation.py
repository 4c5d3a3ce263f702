"""Running the worker: a fresh process in its own session, a scratch cwd, no secrets, a time limit.

A segfault, abort, os._exit, a SIGKILL of itself or a CUDA illegal access ends that process only; the
caller gets its exit code or signal and the tail of its stderr. On timeout, or when the caller has
seen enough, the whole process group is killed (children included).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import evaluation

STDERR_TAIL_BYTES = 4096
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE")
SECRET_PREFIXES = (
    "AWS_", "OPENAI", "ANTHROPIC", "HF_", "HUGGING", "AZURE", "GOOGLE", "GCP_", "GH_", "GITHUB_", "LITELLM",
    "COHERE", "MISTRAL", "GROQ", "GEMINI", "TOGETHER", "DEEPSEEK", "OPENROUTER", "REPLICATE", "WANDB",
)
KEEP_EXACT = {
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TMPDIR", "TZ", "SHELL",
    "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "XDG_CACHE_HOME", "CC", "CXX",
}
KEEP_PREFIXES = (
    "LC_", "TRITON_", "CUDA_", "NVIDIA_", "PYTHON", "TORCH", "HIP_", "ROCM_", "HSA_", "NCCL_", "NVSHMEM_",
    "CUBLAS", "CUDNN", "PYTORCH_",
)


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(m in upper for m in SECRET_MARKERS) or upper.startswith(SECRET_PREFIXES)


def worker_env(device: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """An allowlist of what a GPU program needs, minus anything named like a secret."""
    base = dict(os.environ if base is None else base)
    env = {
        k: v for k, v in base.items()
        if (k in KEEP_EXACT or k.startswith(KEEP_PREFIXES)) and not is_secret(k)
    }
    root = str(Path(evaluation.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PATH", os.defpath)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # fixed at @triton.jit time: the worker must start with it
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


@dataclass(frozen=True)
class WorkerExit:
    returncode: int | None  # None when we killed it
    timed_out: bool
    stopped_early: bool  # the caller had its verdict and killed the worker
    stderr_tail: str
    wall_s: float

    def death(self) -> str:
        """How the process ended, for a crash message: "SIGSEGV (signal 11)" or "exit code 3"."""
        if self.returncode is not None and self.returncode < 0:
            try:
                return f"{signal.Signals(-self.returncode).name} (signal {-self.returncode})"
            except ValueError:
                return f"signal {-self.returncode}"
        return f"exit code {self.returncode}"

    def death_class(self) -> str:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"Signal{-self.returncode}"
        return f"Exit{self.returncode}"


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - STDERR_TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_worker(scratch: Path, device: str, timeout_s: float, poll: Callable[[], bool] | None = None) -> WorkerExit:
    """Run `python -m evaluation.worker` in `scratch`. `poll()` is called while it runs; returning True
    means the caller has its verdict and the worker is killed."""
    stderr_path = scratch / "stderr.txt"
    start = time.monotonic()
    with open(stderr_path, "wb") as err, open(scratch / "stdout.txt", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evaluation.worker"],
            cwd=scratch, env=worker_env(device), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            start_new_session=True,
        )
    timed_out = stopped = False
    try:
        while True:
            done = proc.poll() is not None
            if poll is not None and poll():
                stopped = not done
                break
            if done:
                break
            if time.monotonic() - start > timeout_s:
                timed_out = True
                break
            time.sleep(0.02)
    finally:
        _kill_group(proc.pid)
        proc.wait()
    return WorkerExit(
        returncode=None if (timed_out or stopped) else proc.returncode,
        timed_out=timed_out, stopped_early=stopped,
        stderr_tail=_tail(stderr_path), wall_s=time.monotonic() - start,
    )


def last_progress(stderr_tail: str) -> str | None:
    """The last case the worker announced before it died (informational: the candidate can print too)."""
    marks = [line for line in stderr_tail.splitlines() if line.startswith("[kscout-worker] ")]
    return marks[-1].removeprefix("[kscout-worker] ") if marks else None
