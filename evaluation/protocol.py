"""What the parent and a worker say to each other, and how: typed messages in MAC'd frames over pipes.

Why pipes and not files. Earlier, the worker wrote `status.json` and result files into its scratch
directory, each carrying a nonce from the request. A candidate read the request (nonce, seeds,
problem path) off the call stack, drew the inputs as the harness does, wrote every result and the
status itself, and exited: the parent believed it. Now:

- The parent creates two pipes and the worker inherits one end of each (fd numbers on its command
  line). Nothing the parent reads lives in the scratch directory, so a forged file there is never
  read at all.
- The first frame on the request pipe is the `WorkerRequest`, with a fresh 32-byte key. Every frame
  the worker sends carries HMAC-SHA256(key, sequence number, header, blob); the parent checks the
  MAC and the sequence, so a frame the candidate writes to the pipe by its fd number is refused
  (`ForgedMessage`), and a replayed or reordered one too.
- The key is in the worker's memory, and the candidate shares that process: reading it takes frame
  or heap introspection, `/proc/self/mem`, ctypes or the harness's modules, all of which the static
  check refuses (evaluation/static_check.py). That is the honest limit of any in-process secret. What
  no candidate can forge is the parent's own judgement: the parent draws the reference inputs again
  from its seeds, runs its own reference and compares (correctness.py); the worker only reports.
- Models are pydantic with `extra="forbid"` on both sides: a field nobody reads does not exist.

Frame: b"KSW1" | u32 header length | u64 blob length | header (JSON) | blob | 32-byte MAC.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import struct
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, TypeAdapter

from evaluation.emulation import EmulationReport
from evaluation.records import WeightBinding

MAGIC = b"KSW1"
_HEAD = struct.Struct("<4sIQ")
MAC_BYTES = 32
MAX_HEADER_BYTES = 16 << 20
MAX_BLOB_BYTES = 64 << 30

CANDIDATE = "candidate.py"  # every candidate file has this name, in correctness and timing alike


class Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- parent -> worker ---------------------------------------------------------------------------


class Trial(Wire):
    """One set of inputs: get_inputs() after torch.manual_seed(seed), floating inputs mapped to
    x * scale + shift (inputs that are never negative only get the scale; a stress trial leaves them
    as they are, so probabilities or lengths stay in their domain)."""

    seed: int
    scale: float = 1.0
    shift: float = 0.0
    stress: bool = False
    label: str = ""  # "random", "rescaled", "large_logits", "large_offset", "timing", "check": for messages


class CaseSpec(Wire):
    index: int  # position in ProblemInfo.shape_cases
    case_id: str
    params: dict[str, int]
    dtype: str
    state: str  # state dict file in the input folder
    trials: list[Trial]  # the eager calls judged one by one (correctness, and the same calls in timing)
    timing_sets: list[Trial] = []  # input sets rotated between timed samples
    check: Optional[Trial] = None  # fresh inputs for the replay that checks what was timed


class CandidateSpec(Wire):
    name: str
    folder: str  # relative to the input folder; holds CANDIDATE


class BenchSpec(Wire):
    budget_s: float = 0.4
    min_samples: int = 20
    max_samples: int = 200
    n_warmup: int = 5


class Limits(Wire):
    """Resource limits the worker sets on itself before it reads the request (rlimits inherit)."""

    address_space_bytes: Optional[int] = None  # RLIMIT_AS; None on a GPU (CUDA reserves huge ranges)
    cpu_s: int
    file_size_bytes: int
    nproc: Optional[int] = None  # RLIMIT_NPROC; enforced per user, so only where the uid is the sandbox's


class LaunchCase(Wire):
    """A case followed at the target's full size on meta tensors (CPU emulation of a GPU): no kernel runs,
    each launch's grid and num_warps is checked against the target's limits."""

    case_id: str
    params: dict[str, int]
    dtype: str


class WorkerRequest(Wire):
    mode: Literal["correctness", "timing", "baselines", "remeasure"]
    key: str  # hex; the MAC key of every frame the worker sends
    device: Literal["cpu", "cuda"]
    problem_file: str  # in the input folder
    problem_sha256: str
    init_seed: int
    cases: list[CaseSpec]
    candidates: list[CandidateSpec] = []
    baselines: list[str] = []
    bench: BenchSpec = BenchSpec()
    samples_per_round: int = 30
    allowed_torch_ops: list[str] = []  # the problem's ALLOWED_TORCH_OPS (aten names), for the watch
    launch_cases: list[LaunchCase] = []  # correctness on the CPU: full-size launches to check (emulation)


class RoundCommand(Wire):
    """Remeasure: sample every prepared runner of case `index` once more (parent -> worker)."""

    kind: Literal["round"] = "round"
    index: int


class NextCase(Wire):
    kind: Literal["next_case"] = "next_case"


# -- worker -> parent ---------------------------------------------------------------------------


class Outputs(Wire):
    """Header of one judged forward; the blob is the packaged outputs (torch.save of plain tensors)."""

    kind: Literal["outputs"] = "outputs"
    index: int  # case
    candidate: str = ""  # timing: whose outputs
    phase: Literal["trial", "first", "last", "check"]
    trial: int = 0  # trial number (phase "trial") or input set number (first/last)
    strides: list[Optional[list[int]]] = []  # per output item, as returned (before any copy)


class KernelFact(Wire):
    name: str
    n_regs: Optional[int] = None
    n_spills: Optional[int] = None
    shared_bytes: Optional[int] = None
    num_warps: Optional[int] = None
    num_stages: Optional[int] = None


class ProfiledKernel(Wire):
    """One device kernel seen by the profiler in a forward, with the aten ops that launched it."""

    name: str
    ops: list[str] = []  # the launching aten op and its callers, innermost first; [] for a raw launch (Triton)
    replay: bool = False  # seen in a CUDA-graph replay, where no aten op is on the CPU side


class Accounting(Wire):
    """What the worker saw the candidate do (defence in depth: the candidate shares its process)."""

    kind: Literal["accounting"] = "accounting"
    candidate: str = ""
    launches: int = 0
    kernels: list[KernelFact] = []
    torch_epilogue: list[str] = []
    hybrid_ops: list[str] = []
    profiled: list[ProfiledKernel] = []
    profiler_error: Optional[str] = None  # the profiler could not run here (the kernels are then unlisted)
    emulation: Optional[EmulationReport] = None  # a CPU run that emulated the target GPU (evaluation/emulation.py)
    weights: Optional[WeightBinding] = None  # how the reference's weights reached the candidate (first case)


class Stats(Wire):
    latency_ms_p20: float
    latency_ms_p50: float
    latency_ms_p80: float
    latency_ms_min: float
    latency_ms_mean: float
    n_samples: int
    n_warmup: int
    l2_flushed: bool
    method: str


class Timed(Wire):
    kind: Literal["timed"] = "timed"
    index: int
    candidate: str  # a candidate name, or a baseline name in a baselines worker
    stats: Optional[Stats] = None
    error: Optional[str] = None  # a baseline that could not be timed (torch.compile failed...)
    input_bytes: int = 0
    output_bytes: int = 0


class Prepared(Wire):
    """Remeasure: the runners of case `index` are ready (methods by name; errors for those that failed)."""

    kind: Literal["prepared"] = "prepared"
    index: int
    methods: dict[str, str]
    errors: dict[str, str] = {}


class RoundResult(Wire):
    kind: Literal["round_result"] = "round_result"
    index: int
    p50s_ms: dict[str, float]
    errors: dict[str, str] = {}


class Stop(Wire):
    """The worker ends with a verdict other than success (a raise, a cheat it saw, a compile error)."""

    kind: Literal["stop"] = "stop"
    status: Literal["compile_error", "incorrect", "rejected", "crashed"]
    stage: Literal["compile", "correctness", "timing"]
    error_class: str
    message: str
    candidate: str = ""  # timing: the candidate it is about ("" = the whole process)


class Done(Wire):
    """The worker finished every case; `errors` holds per-candidate failures of a shared timing."""

    kind: Literal["done"] = "done"
    errors: dict[str, str] = {}
    error_classes: dict[str, str] = {}


Message = Union[Outputs, Accounting, Timed, Prepared, RoundResult, Stop, Done]
_MESSAGE = TypeAdapter(Union[Outputs, Accounting, Timed, Prepared, RoundResult, Stop, Done])
_COMMAND = TypeAdapter(Union[RoundCommand, NextCase])


class ProtocolError(Exception):
    """A frame that is malformed, out of sequence or not MAC'd with the request's key."""


def new_key() -> bytes:
    return os.urandom(32)


def _mac(key: bytes, seq: int, header: bytes, blob: bytes) -> bytes:
    m = hmac.new(key, digestmod=hashlib.sha256)
    m.update(struct.pack("<Q", seq))
    m.update(struct.pack("<IQ", len(header), len(blob)))
    m.update(header)
    m.update(blob)
    return m.digest()


def encode(key: bytes, seq: int, message: Wire, blob: bytes = b"") -> bytes:
    header = message.model_dump_json().encode()
    return _HEAD.pack(MAGIC, len(header), len(blob)) + header + blob + _mac(key, seq, header, blob)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view[: 1 << 20])
        view = view[n:]


def read_exact(fd: int, n: int) -> bytes | None:
    """n bytes, or None at end of stream before the first byte; ProtocolError on a torn frame."""
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError(f"stream ended inside a frame ({got} of {n} bytes)")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


class FrameReader:
    """Incremental parser for the parent: feed bytes as they arrive, take out verified frames."""

    def __init__(self, key: bytes):
        self.key, self.seq, self.buf = key, 0, bytearray()

    def feed(self, data: bytes) -> None:
        self.buf += data

    def frames(self) -> list[tuple[Message, bytes]]:
        out = []
        while len(self.buf) >= _HEAD.size:
            magic, hlen, blen = _HEAD.unpack_from(self.buf)
            if magic != MAGIC or hlen > MAX_HEADER_BYTES or blen > MAX_BLOB_BYTES:
                raise ProtocolError("a frame without the worker's framing")
            total = _HEAD.size + hlen + blen + MAC_BYTES
            if len(self.buf) < total:
                break
            header = bytes(self.buf[_HEAD.size : _HEAD.size + hlen])
            blob = bytes(self.buf[_HEAD.size + hlen : _HEAD.size + hlen + blen])
            mac = bytes(self.buf[total - MAC_BYTES : total])
            del self.buf[:total]
            if not hmac.compare_digest(mac, _mac(self.key, self.seq, header, blob)):
                raise ProtocolError(f"frame {self.seq} is not MAC'd with this worker's key")
            self.seq += 1
            try:
                out.append((_MESSAGE.validate_json(header), blob))
            except ValueError as exc:  # MAC'd by the worker, so a harness bug rather than a forgery
                raise ProtocolError(f"frame {self.seq - 1} does not parse: {exc}") from None
        return out

    def pending(self) -> int:
        return len(self.buf)


class WorkerChannel:
    """The worker's end: the request (read once), frames out, and commands in (remeasure only)."""

    def __init__(self, in_fd: int, out_fd: int):
        self.in_fd, self.out_fd, self.seq = in_fd, out_fd, 0
        self.key = b""

    def read_request(self) -> WorkerRequest:
        head = read_exact(self.in_fd, _HEAD.size)
        if head is None:
            raise ProtocolError("no request")
        magic, hlen, blen = _HEAD.unpack(head)
        if magic != MAGIC or blen:
            raise ProtocolError("malformed request")
        request = WorkerRequest.model_validate_json(read_exact(self.in_fd, hlen) or b"")
        read_exact(self.in_fd, MAC_BYTES)
        self.key = bytes.fromhex(request.key)
        return request

    def read_command(self) -> RoundCommand | NextCase | None:
        head = read_exact(self.in_fd, _HEAD.size)
        if head is None:
            return None
        _magic, hlen, _blen = _HEAD.unpack(head)
        command = _COMMAND.validate_json(read_exact(self.in_fd, hlen) or b"")
        read_exact(self.in_fd, MAC_BYTES)
        return command

    def send(self, message: Wire, blob: bytes = b"") -> None:
        write_all(self.out_fd, encode(self.key, self.seq, message, blob))
        self.seq += 1


def package(value: Any) -> dict[str, Any]:
    """Outputs as plain data: {"kind": tensor|sequence|other, "items": [...], "types": [...]}.

    Only an exact torch.Tensor is kept: a subclass could run code of the candidate's while it is
    copied here, after the compute watch has ended (the worker refuses subclasses before this)."""
    import torch

    def item(v):
        if type(v) is torch.Tensor:
            return v.detach().cpu().clone()
        if type(v) in (bool, int, float):
            return v
        return None

    if isinstance(value, torch.Tensor):
        return {"kind": "tensor", "items": [item(value)], "types": [type(value).__name__]}
    if type(value) in (tuple, list):
        return {"kind": "sequence", "items": [item(v) for v in value], "types": [type(v).__name__ for v in value]}
    return {"kind": "other", "items": [item(value)], "types": [type(value).__name__]}


def package_bytes(value: Any) -> tuple[bytes, list[Optional[list[int]]]]:
    """`package(value)` saved with torch.save, and each tensor's strides as the candidate returned it
    (a copy to the host may not keep them)."""
    import torch

    items = value if type(value) in (tuple, list) else [value]
    strides = [list(v.stride()) if type(v) is torch.Tensor else None for v in items]
    buf = io.BytesIO()
    torch.save(package(value), buf)
    return buf.getvalue(), strides


def unpackage(blob: bytes) -> Any:
    """The parent's half: weights_only, so a crafted pickle cannot run code here."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")


def request_frame(request: WorkerRequest) -> bytes:
    """The request frame (the worker has no key yet, so its MAC field is zeros)."""
    header = request.model_dump_json().encode()
    return _HEAD.pack(MAGIC, len(header), 0) + header + bytes(MAC_BYTES)


def command_frame(command: Wire) -> bytes:
    header = command.model_dump_json().encode()
    return _HEAD.pack(MAGIC, len(header), 0) + header + bytes(MAC_BYTES)


def params_key(params: dict[str, int]) -> str:
    return json.dumps(params, sort_keys=True)
