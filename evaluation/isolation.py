"""Running a worker: an OS sandbox (bubblewrap), resource limits, no secrets, pipes the parent owns.

The sandbox (`--sandbox auto|required|off`, bubblewrap's `bwrap`):
- its own PID namespace: the candidate sees only its own processes, cannot signal or stop the
  parent (`os.getppid()` is the sandbox's init, which ignores signals from inside), and every
  descendant dies with the sandbox, `setsid` grandchildren included (`--die-with-parent`, and the
  namespace's init going away kills the rest);
- no network (its own, empty network namespace), no IPC or UTS namespace shared;
- a read-only view of the host, with a fresh /proc (no other process's environ), a minimal /dev
  (plus the GPU's device nodes), an empty /tmp, and $HOME and $KSCOUT_HOME replaced by empty
  folders (only the Python installation's folders under $HOME are bound back, read-only). The only
  host folder it can write is its own `out/` scratch folder; its inputs are bound read-only;
- run as root, kernelscout gives the sandbox an unprivileged uid of its own (the worker drops to it
  before reading the request), because the kernel exempts root from RLIMIT_NPROC;
- limits: address space (on the CPU; CUDA reserves terabytes of address space, so not on a GPU),
  CPU seconds, file size and process count, set by the worker on itself before the request is read.

`auto` uses the sandbox when a probe (once per process) shows it works here, and otherwise runs the
worker as a plain subprocess and warns once; `required` raises `SandboxError` instead; `off` never
sandboxes. Every result records the isolation it ran under ("bwrap" or "none").

Whatever the isolation, the worker gets an allowlisted environment without secrets, and its stderr
tail has anything that looks like a secret scrubbed before it reaches a result, the store or a prompt.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Optional, Protocol

import evaluation
from evaluation import protocol
from evaluation.errors import KscoutError

STDERR_TAIL_BYTES = 4096
SHM = Path("/dev/shm")
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE")
SECRET_PREFIXES = (
    "AWS_",
    "OPENAI",
    "ANTHROPIC",
    "HF_",
    "HUGGING",
    "AZURE",
    "GOOGLE",
    "GCP_",
    "GH_",
    "GITHUB_",
    "LITELLM",
    "COHERE",
    "MISTRAL",
    "GROQ",
    "GEMINI",
    "TOGETHER",
    "DEEPSEEK",
    "OPENROUTER",
    "REPLICATE",
    "WANDB",
)
KEEP_EXACT = {
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TMPDIR",
    "TZ",
    "SHELL",
    "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "XDG_CACHE_HOME",
    "CC",
    "CXX",
}
KEEP_PREFIXES = (
    "LC_",
    "TRITON_",
    "CUDA_",
    "NVIDIA_",
    "PYTHON",
    "TORCH",
    "HIP_",
    "ROCM_",
    "HSA_",
    "NCCL_",
    "NVSHMEM_",
    "CUBLAS",
    "CUDNN",
    "PYTORCH_",
)
SandboxMode = Literal["auto", "required", "off"]
SANDBOX_MODES = ("auto", "required", "off")
TRITON_CACHE = ".triton-cache"  # a sandboxed worker's Triton cache, in its out/ folder
SANDBOX_UID_BASE = 200_000  # uids no account uses, one per concurrent sandbox when kscout runs as root
GPU_DEVICE_GLOBS = ("nvidia*", "nvidia-caps", "dri", "kfd")


class SandboxError(KscoutError):
    """--sandbox required, and no sandbox can be made here."""


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(m in upper for m in SECRET_MARKERS) or upper.startswith(SECRET_PREFIXES)


def worker_env(device: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """An allowlist of what a GPU program needs, minus anything named like a secret."""
    base = dict(os.environ if base is None else base)
    env = {k: v for k, v in base.items() if (k in KEEP_EXACT or k.startswith(KEEP_PREFIXES)) and not is_secret(k)}
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


# -- secrets in text --------------------------------------------------------------------------

_SECRET_PATTERNS = (
    r"sk-[A-Za-z0-9_\-]{16,}",  # OpenAI, Anthropic (sk-ant-...)
    r"hf_[A-Za-z0-9]{20,}",
    r"gh[pousr]_[A-Za-z0-9]{20,}",
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"AKIA[0-9A-Z]{16}",
    r"ASIA[0-9A-Z]{16}",
    r"AIza[0-9A-Za-z_\-]{30,}",
    r"xox[abposr]-[A-Za-z0-9\-]{10,}",
    r"(?:[Aa][Pp][Ii][_-]?[Kk][Ee][Yy]|[Ss]ecret|SECRET|[Tt]oken|TOKEN|[Pp]assword|PASSWORD|[Aa]uthorization)"
    r"[\"']?\s*[:=]\s*[\"']?[^\s\"',;]{8,}",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
)
_SECRET_RE = re.compile("|".join(f"(?:{p})" for p in _SECRET_PATTERNS))


def scrub(text: str, environ: dict[str, str] | None = None) -> str:
    """`text` with secret-looking strings and the values of this process's secret variables replaced.

    Defence in depth: the sandbox hides the parent's environment, but a worker run without one, or a
    key found somewhere readable, must still not travel into results, the store or an LLM prompt."""
    if not text:
        return text
    environ = os.environ if environ is None else environ
    for name, value in environ.items():
        if is_secret(name) and len(value) >= 8 and value in text:
            text = text.replace(value, "[redacted]")
    return _SECRET_RE.sub("[redacted]", text)


# -- the sandbox --------------------------------------------------------------------------------


def scratch_root() -> str | None:
    """Where worker scratch directories go: $KSCOUT_SCRATCH, else /dev/shm when it is a writable tmpfs
    with room (outputs and inputs of every correctness call cross it, up to GBs for LLM-sized cases),
    else the system temp dir."""
    import shutil

    chosen = os.environ.get("KSCOUT_SCRATCH")
    if chosen:
        return chosen
    try:
        if SHM.is_dir() and os.access(SHM, os.W_OK) and shutil.disk_usage(SHM).free > (4 << 30):
            return str(SHM)
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class Scratch:
    """A worker's folders: `in_dir` (written by the parent, read-only inside), `out_dir` (its cwd, the
    only place it can write), and the parent's own files beside them (the stderr capture)."""

    root: Path
    in_dir: Path
    out_dir: Path

    @classmethod
    def make(cls, parent: str | None, prefix: str = "kscout-w-") -> "Scratch":
        root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        in_dir, out_dir = root / "in", root / "out"
        in_dir.mkdir()
        out_dir.mkdir()
        return cls(root, in_dir, out_dir)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _under(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def _hidden_folders() -> list[Path]:
    """$HOME and the store: replaced by empty folders inside the sandbox."""
    out = []
    for raw in (os.environ.get("HOME"), os.environ.get("KSCOUT_HOME"), os.environ.get("XDG_DATA_HOME")):
        if not raw:
            continue
        p = Path(raw).expanduser()
        if p.is_dir() and p.resolve() != Path("/"):
            out.append(p.resolve())
    return out


def _python_folders() -> list[Path]:
    """Folders the worker's Python needs: the interpreter, the environment, every import path, this
    package's root (they are bound back read-only where they lie under a hidden folder)."""
    folders = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        Path(os.path.realpath(sys.executable)).parent.parent,
        Path(evaluation.__file__).resolve().parent.parent,
    }
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            folders.add(Path(entry))
    return sorted({f.resolve() for f in folders if f.exists()})


def _bwrap_args(scratch: Scratch, device: str, uid: int | None) -> list[str]:
    args = [
        "bwrap",
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if uid is None:  # an ordinary user: a user namespace makes RLIMIT_NPROC count this sandbox alone
        args += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    else:  # root: the worker drops to `uid` itself, then holds no capability at all
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    args += [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--perms",
        "1777",
        "--size",
        str(1 << 30),
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        str(1 << 30),
        "--tmpfs",
        "/dev/shm",
    ]
    fresh = [Path("/tmp"), Path("/dev")]  # folders that are new, empty mounts inside
    hidden = [h for h in _hidden_folders() if not any(_under(h, f) for f in fresh)]
    for folder in hidden:
        args += ["--tmpfs", str(folder)]
    fresh += hidden
    made: set[Path] = set()

    def parents(path: Path) -> list[str]:
        """bwrap makes a bind's missing parents 0700, which the sandbox's uid could not pass through."""
        out = []
        for parent in reversed(path.parents):
            if parent not in made and any(_under(parent, f) and parent != f for f in fresh):
                made.add(parent)
                out += ["--perms", "0755", "--dir", str(parent)]
        return out

    for folder in _python_folders():  # an environment under /tmp or a hidden folder is bound back, read-only
        if any(_under(folder, f) for f in fresh if f != Path("/dev")):
            args += parents(folder) + ["--ro-bind", str(folder), str(folder)]
    if device != "cpu":
        for pattern in GPU_DEVICE_GLOBS:
            for node in sorted(Path("/dev").glob(pattern)):
                args += ["--dev-bind", str(node), str(node)]
    args += parents(scratch.in_dir)
    args += [
        "--ro-bind",
        str(scratch.in_dir),
        str(scratch.in_dir),
        "--bind",
        str(scratch.out_dir),
        str(scratch.out_dir),
        "--chdir",
        str(scratch.out_dir),
    ]
    return args


_UIDS = itertools.count()


def _sandbox_uid() -> int | None:
    """An unused uid per sandbox when kscout runs as root (None: keep our own uid in a user namespace)."""
    if os.geteuid() != 0:
        return None
    return SANDBOX_UID_BASE + (os.getpid() % 997) * 64 + next(_UIDS) % 64


def _sandbox_env(env: dict[str, str]) -> dict[str, str]:
    """Inside: a writable HOME and caches in the sandbox's own /tmp, and a user name without passwd."""
    env = dict(env)
    env.update(
        HOME="/tmp",
        TMPDIR="/tmp",
        USER="kscout-sandbox",
        LOGNAME="kscout-sandbox",
        XDG_CACHE_HOME="/tmp/.cache",
        TRITON_HOME="/tmp",
        TRITON_CACHE_DIR="/tmp/.triton/cache",
    )
    return env


# What a worker needs, tried as the worker would: drop to the sandbox's uid, find and read the harness
# and torch where the worker imports them from, open the GPU's device nodes (a node only a group may
# open is refused to the sandbox's uid). Found, not imported: importing them (torch, through the
# `evaluation` package) took 3-4 s on the lent GPU image, paid before any warm worker could start.
_PROBE_SCRIPT = """
import importlib.util, os, sys
uid = int(sys.argv[1])
if uid >= 0:
    os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
for name in ("evaluation", "torch"):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        sys.exit(f"{name} cannot be imported in the sandbox")
    with open(spec.origin, "rb") as f:
        f.read(1)
for node in sys.argv[2:]:
    os.close(os.open(node, os.O_RDWR))
"""


@dataclass
class _Probe:
    ok: bool
    reason: str


_PROBE: dict[str, _Probe] = {}
_PROBE_LOCK = threading.Lock()
_WARNED = False


class UnsandboxedWarning(UserWarning):
    """Candidate code runs without an OS sandbox on this machine."""


def probe_sandbox(device: str = "cpu") -> _Probe:
    """Whether bwrap can start this Python in the sandbox here; tried once per process and device."""
    with _PROBE_LOCK:
        if device in _PROBE:
            return _PROBE[device]
        if shutil.which("bwrap") is None:
            result = _Probe(False, "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
        else:
            scratch = Scratch.make(None, "kscout-probe-")
            try:
                uid = _sandbox_uid()
                _prepare_for_uid(scratch, uid)
                nodes = [
                    str(n)
                    for n in sorted(Path("/dev").glob("nvidia*")) + [Path("/dev/kfd")]
                    if device != "cpu" and n.is_char_device()
                ]
                cmd = _bwrap_args(scratch, device, uid) + [
                    sys.executable,
                    "-c",
                    _PROBE_SCRIPT,
                    str(-1 if uid is None else uid),
                    *nodes,
                ]
                try:
                    done = subprocess.run(cmd, env=_sandbox_env(worker_env(device)), capture_output=True, timeout=60)
                    err = done.stderr.decode(errors="replace").strip()
                    result = _Probe(
                        done.returncode == 0,
                        "" if done.returncode == 0 else f"bwrap failed here (exit {done.returncode}): {err[-300:]}",
                    )
                except (OSError, subprocess.TimeoutExpired) as exc:
                    result = _Probe(False, f"bwrap could not run: {exc}")
            finally:
                scratch.cleanup()
        _PROBE[device] = result
        return result


def resolve_sandbox(mode: str | None, device: str) -> str:
    """The isolation a worker gets: "bwrap" or "none". `mode` None means $KSCOUT_SANDBOX or auto."""
    global _WARNED
    mode = mode or os.environ.get("KSCOUT_SANDBOX") or "auto"
    if mode not in SANDBOX_MODES:
        raise SandboxError(f"unknown sandbox mode {mode!r}; use one of {', '.join(SANDBOX_MODES)}")
    if mode == "off":
        return "none"
    probe = probe_sandbox(device)
    if probe.ok:
        return "bwrap"
    if mode == "required":
        raise SandboxError(f"--sandbox required, but no sandbox can be made here: {probe.reason}")
    if not _WARNED:
        _WARNED = True
        reason = " ".join(probe.reason.split())  # one line, whatever bwrap printed
        install = "" if "install bubblewrap" in reason else "; the sandbox is bubblewrap (apt-get install bubblewrap)"
        warnings.warn(
            f"candidate code runs WITHOUT an OS sandbox on this machine: {reason}. Every result records "
            f"isolation='none' and cannot be promoted without an explicit override{install}",
            UnsandboxedWarning,
            stacklevel=3,
        )
    return "none"


def _prepare_for_uid(scratch: Scratch, uid: int | None) -> None:
    """Let the sandbox's uid reach its folders: traverse the root, read `in/`, own `out/`."""
    os.chmod(scratch.root, 0o711)
    for path in [scratch.in_dir, *scratch.in_dir.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    if uid is not None:  # bwrap enters it (chdir) as root without capabilities: group root may too
        os.chown(scratch.out_dir, uid, os.getegid())
    os.chmod(scratch.out_dir, 0o770 if uid is not None else 0o700)


# -- limits -------------------------------------------------------------------------------------


def default_limits(device: str, timeout_s: float) -> protocol.Limits:
    """Caps a runaway candidate hits long before the machine does. $KSCOUT_WORKER_MEMORY_GB (0: none),
    $KSCOUT_WORKER_FILE_MB and $KSCOUT_WORKER_NPROC override the address space, file size and
    process-count caps."""
    gb = os.environ.get("KSCOUT_WORKER_MEMORY_GB")
    if gb is not None:
        address_space = int(float(gb) * (1 << 30)) or None
    elif device == "cpu":
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        address_space = max(8 << 30, total // 2)
    else:
        address_space = None
    cores = os.cpu_count() or 1
    return protocol.Limits(
        address_space_bytes=address_space,
        cpu_s=int(timeout_s * max(2, cores)) + 60,
        file_size_bytes=int(os.environ.get("KSCOUT_WORKER_FILE_MB", "256")) << 20,
        nproc=int(os.environ.get("KSCOUT_WORKER_NPROC", "1024")),
    )


# -- one worker ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerExit:
    returncode: int | None  # None when we killed it
    timed_out: bool
    stopped_early: bool  # the caller had its verdict and killed the worker
    stderr_tail: str
    wall_s: float
    isolation: str = "none"
    forged: Optional[str] = None  # a frame that failed its MAC or sequence: why

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


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class WorkerProcess:
    """One `python -m evaluation.worker`, sandboxed or not, and the two pipes to it.

    The parent writes the request (and, in a re-measure, round commands) to one pipe and reads MAC'd
    frames from the other; the worker's stdout and stderr go to a file beside (not inside) its scratch
    folders. `receive` returns verified messages; a frame that fails verification ends the worker and
    is reported as `forged` in its `WorkerExit`.
    """

    def __init__(
        self,
        scratch: Scratch,
        device: str,
        *,
        key: bytes | None = None,
        isolation: str,
        timeout_s: float,
        limits: protocol.Limits | None = None,
        warm: bool = False,
    ):
        """`key`: the MAC key the request will carry (None: taken from the request at `start`).
        `warm`: the process warms up for `device` (imports, CUDA context) as soon as it is spawned,
        before its request exists (evaluation/pool.py)."""
        self.scratch, self.device, self.isolation, self.timeout_s = scratch, device, isolation, timeout_s
        self.limits = limits or default_limits(device, timeout_s)
        self.key = key
        self.warm = warm
        self.reader = protocol.FrameReader(key or b"")
        self.proc: subprocess.Popen | None = None
        self.eof = False
        self.forged: str | None = None
        self._queue: list[tuple[protocol.Message, bytes]] = []
        self._share: Any = None  # the parent's end of the shared transport's socket (shared.py)
        self.inbox: Any = None  # its shared.Receiver, made when the request says the transport
        self._start = 0.0
        self.spawned_at = 0.0  # time.time() at spawn, and when the request went out
        self.request_at = 0.0
        self._stderr = scratch.root / "stderr.txt"

    def start(self, request: protocol.WorkerRequest) -> None:
        """Send the request, spawning the process first unless `spawn` already did; the time limit
        counts from here."""
        if self.key is not None and request.key != self.key.hex():
            raise ValueError("the request must carry this worker's key")
        self.key = bytes.fromhex(request.key)
        self.reader = protocol.FrameReader(self.key)
        if self.proc is None:
            self.spawn()
        elif self.isolation == "bwrap":  # the inputs were written after the spawn: let its uid read them
            _prepare_for_uid(self.scratch, self._uid)
        if request.transport == "shared" and self._share is not None:
            from evaluation.shared import Receiver

            self.inbox = Receiver(self._share, request.share_memory)
        self._start = time.monotonic()
        self.request_at = time.time()
        frame = protocol.request_frame(request)
        # The request can exceed a pipe's buffer: write it from a thread, so a worker that dies first
        # (EPIPE) or reads late cannot block the parent.
        threading.Thread(target=self._write, args=(frame,), daemon=True).start()

    def spawn(self) -> None:
        """Start the process; it sets its limits, warms up if asked, and waits for its request."""
        if self.proc is not None:
            raise RuntimeError("this worker was spawned already")
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        widen_pipe(res_r)
        from evaluation import shared

        share_child = None
        if shared.available():
            self._share, share_child = shared.socket_pair()
        limits = self.limits
        if self.isolation != "bwrap":  # RLIMIT_NPROC counts every process of the user outside a sandbox
            limits = limits.model_copy(update={"nproc": None})
        argv = [
            "-m",
            "evaluation.worker",
            "--in-fd",
            str(req_r),
            "--out-fd",
            str(res_w),
            "--in-dir",
            str(self.scratch.in_dir),
            "--limits",
            limits.model_dump_json(),
        ]
        if share_child is not None:
            argv += ["--share-fd", str(share_child.fileno())]
        if self.warm:
            argv += ["--warm", self.device]
        env = worker_env(self.device)
        self._uid: int | None = None
        if self.isolation == "bwrap":
            uid = self._uid = _sandbox_uid()
            _prepare_for_uid(self.scratch, uid)
            if uid is not None:
                argv += ["--uid", str(uid)]
            cmd = _bwrap_args(self.scratch, self.device, uid) + [sys.executable, *argv]
            env = _sandbox_env(env)
            # Triton's cache in the worker's own out/ folder (not its /tmp), so the parent can carry a
            # passing candidate's compiled kernels from its check to its own timing (harness.py)
            env["TRITON_CACHE_DIR"] = str(self.scratch.out_dir / TRITON_CACHE)
        else:
            cmd = [sys.executable, *argv]
        self._start = time.monotonic()
        self.spawned_at = time.time()
        try:
            with open(self._stderr, "wb") as err:
                self.proc = subprocess.Popen(
                    cmd,
                    cwd=self.scratch.out_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=err,
                    stderr=err,
                    start_new_session=True,
                    pass_fds=(req_r, res_w) + ((share_child.fileno(),) if share_child is not None else ()),
                )
        finally:
            os.close(req_r)
            os.close(res_w)
            if share_child is not None:
                share_child.close()
        self._out = res_r
        self._in = req_w

    def _write(self, data: bytes) -> None:
        try:
            protocol.write_all(self._in, data)
        except OSError:
            pass

    def send(self, command: protocol.Wire) -> None:
        self._write(protocol.command_frame(command))

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def receive(self, wait_s: float = 0.05) -> tuple[protocol.Message, bytes] | None:
        """The next verified message, or None if none arrived within `wait_s` (check `eof`/`alive`)."""
        deadline = time.monotonic() + wait_s
        while not self._queue and not self.eof and self.forged is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._out], [], [], min(left, 0.05))
            if not ready:
                continue
            try:
                got = self.reader.read_from(self._out)
            except protocol.ProtocolError as exc:
                self.forged = str(exc)
                break
            if not got:  # a torn last frame means the process died mid-write: not a forgery
                self.eof = True
                break
            self._queue.extend(self.reader.frames())
        if not self._queue:
            return None
        message, blob = self._queue.pop(0)
        if isinstance(message, protocol.Outputs) and message.slot:
            try:
                blob = self._shared_blob(message, blob)
            except protocol.ProtocolError as exc:
                self.forged = str(exc)
                self._queue.clear()
                return None
        return message, blob

    def _shared_blob(self, message: protocol.Outputs, head: bytes) -> Any:
        """An outputs frame whose data lies in a shared slot: the data copied out (shared.py)."""
        from evaluation.shared import Blob

        if self.inbox is None:
            raise protocol.ProtocolError("an outputs frame names a shared slot, but the transport is not shared")
        data = self.inbox.take(message.slot, message.token, message.sequence, message.nbytes)
        return Blob(head=bytes(head), data=data)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def finish(self, *, timed_out: bool = False, stopped: bool = False) -> WorkerExit:
        """Kill what is left of the process group, close the pipes, read the stderr tail."""
        proc = self.proc
        assert proc is not None
        kill_group(proc.pid)
        proc.wait()
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.inbox is not None:
            self.inbox.close()
        elif self._share is not None:
            self._share.close()
        code = None if (timed_out or stopped) else proc.returncode
        if code is not None and self.isolation == "bwrap" and 128 < code < 128 + 65:
            code = 128 - code  # bwrap exits 128+N when its child died by signal N
        return WorkerExit(
            returncode=code,
            timed_out=timed_out,
            stopped_early=stopped,
            stderr_tail=scrub(_tail(self._stderr)),
            wall_s=self.elapsed(),
            isolation=self.isolation,
            forged=self.forged,
        )


class Gate:
    """Holds a worker at its Quiet barrier until the caller opens it (early baselines, harness.py).

    `ready` is set once the worker waits at the barrier, or has ended without reaching it: from then
    on it runs nothing on the device until `open()`. `cancel()` opens the gate to end the worker
    instead. The time the worker waits does not count against its timeout. Every gate not yet open is
    listed, so a timing can wait until no gated worker still runs (`wait_for_gates`)."""

    _pending: "set[Gate]" = set()
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.cancelled = False
        self.held_s = 0.0  # seconds the worker waited at the barrier (run_worker)
        self.ended = False  # the worker's run is over (run_worker): at the barrier or not, it waits no more
        self._open = threading.Event()
        with Gate._lock:
            Gate._pending.add(self)

    def open(self) -> None:
        with Gate._lock:
            Gate._pending.discard(self)
        self._open.set()

    def cancel(self) -> None:
        self.cancelled = True
        self.open()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def wait_open(self, timeout_s: float) -> bool:
        return self._open.wait(timeout_s)


class Lane(Protocol):
    """A turn on the device that a gated check waits for once its kernels are compiled (an executor's
    GPU lane, agent/search/executors/local.py)."""

    def acquire(self, abandon: threading.Event) -> bool:
        """Block until the turn is held (True), or until `abandon` is set (False: nothing held)."""
        ...

    def release(self) -> None: ...


@contextmanager
def lane_gate(lane: Lane) -> Iterator[Gate]:
    """A Gate that opens once its worker waits at the barrier and `lane` is held; the lane is held until
    the block ends. A worker that ends before the barrier, or a block left early, takes no lane."""
    gate, ended, held = Gate(), threading.Event(), threading.Event()

    def admit() -> None:
        while not gate.ready.wait(0.05):
            if ended.is_set():
                return
        if gate.is_open or gate.ended or ended.is_set() or not lane.acquire(ended):
            return
        held.set()
        gate.open()

    thread = threading.Thread(target=admit, name="kscout-lane", daemon=True)
    thread.start()
    try:
        yield gate
    finally:
        ended.set()
        thread.join()
        gate.open()  # no longer pending, whatever happened
        if held.is_set():
            lane.release()


def wait_for_gates(timeout_s: float) -> bool:
    """Wait until every gated worker not yet let through waits at its barrier (or ended): none of them
    runs on the device then. False if one was still busy after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    with Gate._lock:
        pending = list(Gate._pending)
    return all(gate.ready.wait(max(0.0, deadline - time.monotonic())) for gate in pending)


PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged pipe (/proc/sys/fs/pipe-max-size)


def widen_pipe(fd: int) -> None:
    """A 1 MiB pipe instead of 64 KiB: a large output crosses in a sixteenth of the wake-ups, which
    count most under gVisor, where every system call is dear."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (AttributeError, OSError):  # not Linux, or a lower ceiling: the default pipe still works
        pass


def run_worker(
    scratch: Scratch,
    device: str,
    timeout_s: float,
    request: protocol.WorkerRequest,
    *,
    key: bytes,
    isolation: str,
    on_message: Callable[[protocol.Message, bytes], bool] | None = None,
    limits: protocol.Limits | None = None,
    worker: "WorkerProcess | None" = None,
    gate: Gate | None = None,
) -> WorkerExit:
    """Run one worker to its end. `on_message` gets every verified message; True means the caller has
    its verdict and the worker is killed. A forged frame, the deadline or the worker's exit end it.
    `worker`: one spawned ahead of need for `scratch` (a warm worker from evaluation/pool.py); else a
    new process is started here. `gate`: the worker's first Quiet waits until the gate opens (the wait
    is not counted against `timeout_s`); a cancelled gate ends the worker there."""
    if worker is None:
        worker = WorkerProcess(scratch, device, key=key, isolation=isolation, timeout_s=timeout_s, limits=limits)
    elif worker.scratch != scratch:
        raise ValueError("a spawned worker runs in its own scratch folder")
    worker.start(request)
    timed_out = stopped = False
    quiet_since: float | None = None
    held_s = 0.0  # seconds held at the gate
    try:
        while True:
            got = worker.receive(0.05)
            if got is not None:
                quiet_since = None
                if on_message is not None and on_message(*got):
                    stopped = worker.alive()
                    break
                if isinstance(got[0], protocol.Quiet):  # on_message has judged everything before it
                    if gate is not None and not gate.is_open:
                        gate.ready.set()
                        t0 = time.monotonic()
                        while not gate.wait_open(0.05) and worker.alive():
                            pass
                        held_s += time.monotonic() - t0
                        gate.held_s = held_s
                        if gate.cancelled:
                            stopped = worker.alive()
                            break
                        if not worker.alive():
                            continue  # it died waiting: read what is left
                    worker.send(protocol.Proceed())
                continue
            if worker.forged is not None:
                stopped = worker.alive()
                break
            if not worker.alive():
                # Exited: read what is left. A grandchild holding the pipe (possible only without the
                # sandbox) must not keep the parent waiting for an end of stream that never comes.
                if worker.eof:
                    break
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 0.5:
                    break
                continue
            if worker.elapsed() - held_s > timeout_s:
                timed_out = True
                break
    finally:
        if gate is not None:
            gate.ended = True
            gate.ready.set()  # ended: it runs nothing more on the device
        result = worker.finish(timed_out=timed_out, stopped=stopped)
    return result


def last_progress(stderr_tail: str) -> str | None:
    """The last case the worker announced before it died (informational: the candidate can print too)."""
    marks = [line for line in stderr_tail.splitlines() if line.startswith("[kscout-worker] ")]
    return marks[-1].removeprefix("[kscout-worker] ") if marks else None
