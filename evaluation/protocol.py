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

OUTPUT FILES (`transport="file"`, `KSCOUT_OUTPUT_TRANSPORT=file`). Large outputs cost most of a GPU
check on the pipe: each byte is MAC'd by the worker, written, read and MAC'd again by the parent (the
H200 measured about 0.5 GB/s a worker). With the file transport the worker writes the blob's bytes
into files of its own `out/outputs/` folder (the only place it can write; chunks under its file-size
limit) and sends a MAC'd `Outputs` frame that names them and their total size; the parent reads
exactly those files (regular files, no links, names as the harness makes them, sizes as declared),
deletes them, and judges the bytes as it would a pipe blob. The frame stays authenticated; the bytes
are not MAC'd, so changing them between the write and the read takes writing a file, which needs the
same forbidden code (file access, introspection) as reaching the key does. The worker keeps at most
`file_budget_bytes` of files waiting for the parent.

SHARED SLOTS (`transport="shared"`, the default where descriptors pass over Unix sockets): the MAC'd
`Outputs` frame carries only the blob's head (format and table) and names a slot of memory the worker
shares with the parent (a CUDA VMM allocation on a GPU, a memfd on the host), with the slot's token
and the output's number; the tensor bytes lie in the slot at their table offsets. The parent copies
them out on the device before it acknowledges (evaluation/shared.py says how slots are bound to
the frames). A worker that cannot make a slot sends that output by pipe.

Outputs blob: b"KSO1" | u64 table length | table (JSON: kind, types, per item a tensor's dtype,
shape, offset and size, or a scalar) | each tensor's bytes, 64-byte aligned. Nothing is unpickled:
the parent maps the tensors onto the bytes it read (`unpackage`), after checking every entry against
the blob. A large output is written slice by slice and read straight into its final buffer, each
slice MAC'd as it passes (measured with `python -m evaluation.bench --transport MB`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import struct
import warnings
from typing import Any, Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, TypeAdapter

from evaluation.emulation import EmulationReport
from evaluation.records import WeightBinding

MAGIC = b"KSW1"
# A warm worker whose own start failed, before it read a request (a CUDA context that did not fit beside
# a batch's checks): its exit code and stderr line, read by the parent as "not judged", not as a crash.
WARM_UP_EXIT = 75
WARM_UP_FAILED = "[kscout-worker] warm-up failed:"
Buffers = Union[bytes, bytearray, memoryview, list, tuple]  # one blob, or its parts in order
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
    # the case's tolerance: the work rule (guards.ComputeWatch) takes a value within it of one PyTorch
    # had for that value (a Triton copy of PyTorch's answer, or the answer nudged, did no work)
    atol: float = 0.0
    rtol: float = 0.0


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
    # how judged outputs reach the parent (OUTPUT FILES below, shared.py)
    transport: Literal["pipe", "file", "shared"] = "pipe"
    share_memory: Literal["host", "cuda"] = "host"  # shared transport: where the slots live
    file_budget_bytes: int = 1 << 30  # file transport: output bytes written and not yet taken by the parent
    # baselines: compile every baseline of every case first (while candidates' checks still run), then
    # send Quiet and wait for Proceed before the first timed sample (early baselines, harness.py).
    # correctness (GPU): call the candidate once per case on a timing set first, so Triton compiles its
    # kernels before the check holds a GPU lane; then Quiet, and the battery after Proceed (lanes)
    gated: bool = False


class RoundCommand(Wire):
    """Remeasure: sample every prepared runner of case `index` once more (parent -> worker)."""

    kind: Literal["round"] = "round"
    index: int


class NextCase(Wire):
    kind: Literal["next_case"] = "next_case"


class Proceed(Wire):
    """Timing: every output the worker sent before its Quiet has been judged (parent -> worker)."""

    kind: Literal["proceed"] = "proceed"


# -- worker -> parent ---------------------------------------------------------------------------


class Outputs(Wire):
    """Header of one judged forward; the blob is the packaged outputs (`package_parts`)."""

    kind: Literal["outputs"] = "outputs"
    index: int  # case
    candidate: str = ""  # timing: whose outputs
    phase: Literal["trial", "first", "last", "check"]
    trial: int = 0  # trial number (phase "trial") or input set number (first/last)
    strides: list[Optional[list[int]]] = []  # per output item, as returned (before any copy)
    files: list[str] = []  # file transport: the blob is these files of the worker's outputs folder, in order
    nbytes: int = 0  # ... and their total size (shared transport: the data's size in the slot)
    slot: int = 0  # shared transport: the slot holding the data (0: none), its token and this output's number
    token: str = ""
    sequence: int = 0


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
    duration_us: float = 0.0  # its device time, as the profiler measured it


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


class Phases(Wire):
    """Where the worker's time went (diagnostics for the throughput bench, never a verdict): wall-clock
    stamps (`time.time()`, which parent and worker share) and seconds spent per kind of work."""

    kind: Literal["phases"] = "phases"
    stamps: dict[str, float] = {}
    seconds: dict[str, float] = {}


class Quiet(Wire):
    """Timing: the worker is about to take a candidate's timed samples and waits for Proceed. The parent
    answers once it has judged every output sent before: its float64 comparisons run on the same
    device and would otherwise be timed with the candidate. A gated baselines worker sends it once its
    compiles are done, and the parent answers when the device is the baselines' alone; a gated check
    once its kernels are compiled, and the parent answers when it holds a GPU lane (worker -> parent)."""

    kind: Literal["quiet"] = "quiet"


Message = Union[Outputs, Accounting, Timed, Prepared, RoundResult, Stop, Done, Phases, Quiet]
_MESSAGE = TypeAdapter(Union[Outputs, Accounting, Timed, Prepared, RoundResult, Stop, Done, Phases, Quiet])
_COMMAND = TypeAdapter(Union[RoundCommand, NextCase, Proceed])


class ProtocolError(Exception):
    """A frame that is malformed, out of sequence or not MAC'd with the request's key."""


def new_key() -> bytes:
    return os.urandom(32)


def _mac_start(key: bytes, seq: int, header: bytes, blob_len: int):
    m = hmac.new(key, digestmod=hashlib.sha256)
    m.update(struct.pack("<Q", seq))
    m.update(struct.pack("<IQ", len(header), blob_len))
    m.update(header)
    return m


def _mac(key: bytes, seq: int, header: bytes, blob: Any) -> bytes:
    """HMAC-SHA256(key, sequence number, lengths, header, blob): what ends every frame."""
    m = _mac_start(key, seq, header, memoryview(blob).nbytes)
    m.update(blob)
    return m.digest()


def encode(key: bytes, seq: int, message: Wire, blob: bytes = b"") -> bytes:
    """One whole frame as bytes (small frames; `write_frame` streams big blobs without joining them)."""
    header = message.model_dump_json().encode()
    return _HEAD.pack(MAGIC, len(header), len(blob)) + header + blob + _mac(key, seq, header, blob)


_SLICE = 1 << 20


def write_frame(fd: int, key: bytes, seq: int, message: Wire, parts: Sequence[Any] = ()) -> None:
    """The frame `encode` would build, written piece by piece: a blob of several hundred MB is never
    joined into one bytes object, and each slice is MAC'd just before it is written, so the MAC of one
    slice overlaps the parent's reading of the one before."""
    header = message.model_dump_json().encode()
    views = [memoryview(p).cast("B") for p in parts]
    blob_len = sum(len(v) for v in views)
    m = _mac_start(key, seq, header, blob_len)
    write_all(fd, _HEAD.pack(MAGIC, len(header), blob_len) + header)
    for view in views:
        for at in range(0, len(view), _SLICE):
            piece = view[at : at + _SLICE]
            m.update(piece)
            write_all(fd, piece)
    write_all(fd, m.digest())


def write_all(fd: int, data: Any) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.write(fd, view[:_SLICE])
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
    """Incremental parser for the parent: bytes in (`feed`, or `read_from` a pipe), verified frames out.

    A frame's blob is allocated once at its declared size (uninitialised) and filled in place:
    `read_from` reads the pipe straight into it and the MAC is updated as each piece lands, so a large
    output is copied once, from the pipe, and never joined, sliced or unpickled."""

    def __init__(self, key: bytes):
        self.key, self.seq = key, 0
        self._small = bytearray()  # the head, then the header, then the MAC, as each is collected
        self._hlen = self._blen = 0
        self._header: bytes | None = None  # set while the blob and the MAC are read
        self._blob: Any = None  # a uint8 numpy array of the declared length
        self._filled = 0
        self._mac: Any = None
        self._done: list[tuple[Message, Any]] = []

    def _in_blob(self) -> bool:
        return self._header is not None and self._filled < self._blen

    def _want(self) -> int:
        """Bytes still missing from the part of the frame being read (head, header, blob or MAC)."""
        if self._header is None:
            return (_HEAD.size + (self._hlen if len(self._small) >= _HEAD.size else 0)) - len(self._small)
        if self._in_blob():
            return self._blen - self._filled
        return MAC_BYTES - len(self._small)

    def _landed(self, n: int) -> None:
        """`n` more blob bytes are in place: MAC them now, while the worker writes the next ones."""
        self._mac.update(memoryview(self._blob)[self._filled : self._filled + n])
        self._filled += n

    def _advance(self) -> None:
        """Close the part of the frame that is complete, if it is."""
        if self._header is None:
            if len(self._small) == _HEAD.size and not self._hlen:
                magic, hlen, blen = _HEAD.unpack_from(self._small)
                if magic != MAGIC or hlen > MAX_HEADER_BYTES or blen > MAX_BLOB_BYTES:
                    raise ProtocolError("a frame without the worker's framing")
                self._hlen, self._blen = hlen, blen
            if len(self._small) == _HEAD.size + self._hlen:
                import numpy

                self._header = bytes(self._small[_HEAD.size :])
                self._small.clear()
                self._blob, self._filled = numpy.empty(self._blen, dtype=numpy.uint8), 0
                self._mac = _mac_start(self.key, self.seq, self._header, self._blen)
            return
        if len(self._small) == MAC_BYTES:
            header, blob, mac = self._header, self._blob, bytes(self._small)
            ok = hmac.compare_digest(mac, self._mac.digest())
            self._small.clear()
            self._header, self._blob, self._mac, self._hlen, self._blen = None, None, None, 0, 0
            if not ok:
                raise ProtocolError(f"frame {self.seq} is not MAC'd with this worker's key")
            self.seq += 1
            try:
                self._done.append((_MESSAGE.validate_json(header), blob))
            except ValueError as exc:  # MAC'd by the worker, so a harness bug rather than a forgery
                raise ProtocolError(f"frame {self.seq - 1} does not parse: {exc}") from None

    def feed(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while view:
            take = min(self._want(), len(view))
            if self._in_blob():
                self._blob[self._filled : self._filled + take] = view[:take]
                self._landed(take)
            else:
                self._small += view[:take]
                self._advance()
            view = view[take:]

    def read_from(self, fd: int, most: int = 1 << 20) -> int:
        """One read from `fd` (into the blob being filled, where one is); 0 at the end of the stream."""
        if self._in_blob():
            n = os.readv(
                fd, [memoryview(self._blob)[self._filled : self._filled + min(self._blen - self._filled, most)]]
            )
            self._landed(n)
            return n
        chunk = os.read(fd, min(most, self._want()) if self._header is None else most)
        self.feed(chunk)
        return len(chunk)

    def frames(self) -> list[tuple[Message, Any]]:
        """The frames completed since the last call: (message, blob as a uint8 buffer)."""
        out, self._done = self._done, []
        return out

    def pending(self) -> int:
        """Bytes of a frame begun and not finished."""
        if self._header is None:
            return len(self._small)
        return _HEAD.size + len(self._header) + self._filled + len(self._small)


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

    def read_command(self) -> RoundCommand | NextCase | Proceed | None:
        head = read_exact(self.in_fd, _HEAD.size)
        if head is None:
            return None
        _magic, hlen, _blen = _HEAD.unpack(head)
        command = _COMMAND.validate_json(read_exact(self.in_fd, hlen) or b"")
        read_exact(self.in_fd, MAC_BYTES)
        return command

    def send(self, message: Wire, blob: Buffers = b"") -> None:
        parts = [blob] if isinstance(blob, (bytes, bytearray, memoryview)) else list(blob)
        write_frame(self.out_fd, self.key, self.seq, message, parts)
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


OUTPUTS_FORMAT = b"KSO1"  # a blob of outputs: format, u64 table length, table (JSON), raw tensor bytes
_ALIGN = 64
# What an output tensor may be: the dtypes a problem can produce, by name; nothing here unpickles.
_RAW_DTYPES = (
    "float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "complex64", "complex128",
    "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool",
)  # fmt: skip


class _RawTensor(Wire):
    dtype: str  # one of _RAW_DTYPES
    shape: list[int]
    offset: int  # from the start of the tensor data (after the padded table); a multiple of 64
    nbytes: int


class _RawScalar(Wire):
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")

    value: Union[bool, int, float]


class _OutputsTable(Wire):
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")

    kind: Literal["tensor", "sequence", "other"]
    types: list[str]
    items: list[Optional[Union[_RawTensor, _RawScalar]]]


def _pad(n: int) -> int:
    return -n % _ALIGN


def _to_host(t: Any) -> Any:
    """A device tensor's bytes in page-locked host memory where the device allows (a DMA copy, several
    times faster than into pageable memory; PyTorch caches the blocks), else a plain copy."""
    if t.device.type != "cuda":
        return t.cpu()
    import torch

    try:
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    except RuntimeError:
        return t.cpu()
    host.copy_(t)
    return host


def _layout(value: Any, to_host: bool) -> tuple[bytes, list[tuple[int, Any]], int, list[Optional[list[int]]]]:
    """The blob's head (format, table), each tensor's data offset and contiguous tensor (copied to host
    memory when `to_host`), the data's total size with padding, and each item's strides as returned."""
    import torch

    items = value if type(value) in (tuple, list) else [value]
    strides = [list(v.stride()) if type(v) is torch.Tensor and v.layout == torch.strided else None for v in items]
    kind: Literal["tensor", "sequence", "other"] = (
        "tensor" if isinstance(value, torch.Tensor) else "sequence" if type(value) in (tuple, list) else "other"
    )
    entries: list[Optional[Union[_RawTensor, _RawScalar]]] = []
    tensors: list[tuple[int, Any]] = []
    offset = 0  # within the tensor data, which starts after the padded table
    for v in items:
        if type(v) is torch.Tensor:
            t = v.detach()
            if t.layout != torch.strided:
                t = t.to_dense()
            t = t.resolve_conj().resolve_neg().contiguous()
            if to_host:
                t = _to_host(t)
            name = str(t.dtype).removeprefix("torch.")
            if name not in _RAW_DTYPES:
                t, name = t.to(torch.float64), "float64"  # quantized or complex32: judged by its values
            nbytes = t.numel() * t.element_size()
            entries.append(_RawTensor(dtype=name, shape=list(t.shape), offset=offset, nbytes=nbytes))
            if nbytes:
                tensors.append((offset, t))
            offset += nbytes + _pad(nbytes)
        elif type(v) in (bool, int, float):
            entries.append(_RawScalar(value=v))
        else:
            entries.append(None)
    table = _OutputsTable(kind=kind, types=[type(v).__name__ for v in items], items=entries).model_dump_json().encode()
    head = OUTPUTS_FORMAT + struct.pack("<Q", len(table)) + table
    head += bytes(_pad(len(head)))
    return head, tensors, offset, strides


def package_parts(value: Any) -> tuple[list[Any], list[Optional[list[int]]]]:
    """`package(value)` as buffers to stream, and each tensor's strides as the candidate returned it.

    The blob is a table of contents (JSON) and then each tensor's bytes as they lie in memory, 64-byte
    aligned: the parent maps them with torch.frombuffer, so a 500 MB output is read from the pipe into
    its final place and never unpickled or copied again."""
    import torch

    head, tensors, _total, strides = _layout(value, to_host=True)
    parts: list[Any] = [head]
    for _offset, t in tensors:
        raw = t.reshape(-1).view(torch.uint8).numpy()
        nbytes = memoryview(raw).nbytes
        parts.append(raw)
        if _pad(nbytes):
            parts.append(bytes(_pad(nbytes)))
    return parts, strides


def package_split(value: Any) -> tuple[bytes, list[tuple[int, Any]], int, list[Optional[list[int]]]]:
    """`package(value)` for the shared transport (shared.py): the head goes in the MAC'd frame, the
    tensors stay where they are (on the device) to be copied into a slot at their data offsets."""
    return _layout(value, to_host=False)


def package_bytes(value: Any) -> tuple[bytes, list[Optional[list[int]]]]:
    """`package_parts` joined into one bytes object (small outputs, tests)."""
    parts, strides = package_parts(value)
    return b"".join(bytes(memoryview(p).cast("B")) for p in parts), strides


def unpackage(blob: Any) -> dict[str, Any]:
    """The parent's half: the same dict `package` gives, its tensors viewing `blob` (no copy, no
    pickle). `blob` is the whole blob (pipe, files), or a `shared.Blob`: the MAC'd head and the data
    copied out of a shared slot (a torch uint8 tensor on the device, or a host buffer). A table that
    does not describe the bytes after it is a ValueError."""
    import torch

    head, data = (blob.head, blob.data) if hasattr(blob, "head") and hasattr(blob, "data") else (blob, None)
    view = memoryview(head).cast("B")
    if bytes(view[:4]) != OUTPUTS_FORMAT or len(view) < 12:
        raise ValueError("not an outputs blob")
    (n,) = struct.unpack_from("<Q", view, 4)
    if 12 + n > len(view):
        raise ValueError("outputs table runs past the blob")
    table = _OutputsTable.model_validate_json(bytes(view[12 : 12 + n]))
    data_start = 12 + n + _pad(12 + n)
    if data is not None:
        if len(view) != data_start:
            raise ValueError("a shared outputs head with bytes after its table")
        device_data = isinstance(data, torch.Tensor)
        data_len = data.numel() if device_data else memoryview(data).nbytes
        data_start = 0
    else:
        device_data, data_len = False, len(view)
    items: list[Any] = []
    for e in table.items:
        if e is None:
            items.append(None)
        elif isinstance(e, _RawScalar):
            items.append(e.value)
        else:
            if e.dtype not in _RAW_DTYPES:
                raise ValueError(f"an output of dtype {e.dtype!r}")
            dtype = getattr(torch, e.dtype)
            numel = 1
            for d in e.shape:
                if d < 0:
                    raise ValueError("negative dimension in an outputs table")
                numel *= d
            itemsize = torch.empty((), dtype=dtype).element_size()
            start = data_start + e.offset
            if numel * itemsize != e.nbytes or e.offset % _ALIGN or start + e.nbytes > data_len:
                raise ValueError("an output's bytes do not match its table entry")
            if numel == 0:
                items.append(torch.empty(e.shape, dtype=dtype))
            elif device_data:
                assert data is not None
                items.append(data[start : start + e.nbytes].view(dtype).reshape(e.shape))
            else:
                source = view if data is None else memoryview(data).cast("B")
                with warnings.catch_warnings():  # a read-only bytes blob (tests): the tensors are never written
                    warnings.simplefilter("ignore")
                    items.append(torch.frombuffer(source, dtype=dtype, count=numel, offset=start).reshape(e.shape))
    return {"kind": table.kind, "items": items, "types": table.types}


def request_frame(request: WorkerRequest) -> bytes:
    """The request frame (the worker has no key yet, so its MAC field is zeros)."""
    header = request.model_dump_json().encode()
    return _HEAD.pack(MAGIC, len(header), 0) + header + bytes(MAC_BYTES)


def command_frame(command: Wire) -> bytes:
    header = command.model_dump_json().encode()
    return _HEAD.pack(MAGIC, len(header), 0) + header + bytes(MAC_BYTES)


def params_key(params: dict[str, int]) -> str:
    return json.dumps(params, sort_keys=True)


OUTPUT_FILES = "outputs"  # the file transport's folder inside the worker's out/ folder
_OUTPUT_FILE = re.compile(r"o[0-9]{1,9}-[0-9]{1,6}[.]bin")


def write_output_files(
    folder: Any, seq: int, parts: Sequence[Any], chunk_bytes: int, budget_bytes: int
) -> tuple[list[str], int]:
    """The worker's half of the file transport: `parts` (package_parts) as files of at most
    `chunk_bytes` each; waits while more than `budget_bytes` of earlier files are still there."""
    import time
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(exist_ok=True)
    views = [memoryview(p).cast("B") for p in parts]
    total = sum(len(v) for v in views)
    while True:  # the parent deletes each file once it has read it
        waiting = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        if waiting == 0 or waiting + total <= budget_bytes:
            break
        time.sleep(0.002)
    names: list[str] = []
    fd = -1
    room = 0
    try:
        for view in views:
            while view:
                if room == 0:
                    if fd >= 0:
                        os.close(fd)
                    name = f"o{seq}-{len(names)}.bin"
                    fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    names.append(name)
                    room = chunk_bytes
                n = os.write(fd, view[: min(room, _SLICE)])
                view, room = view[n:], room - n
    finally:
        if fd >= 0:
            os.close(fd)
    return names, total


def read_output_files(folder: Any, names: Sequence[str], nbytes: int) -> Any:
    """The parent's half: exactly the named files, in order, into one buffer; each is deleted once read.
    A name the harness would not make, a link, or sizes that do not add up to `nbytes` is a
    ProtocolError (the frame that named them was MAC'd: the files changed after the worker wrote them)."""
    from pathlib import Path

    import numpy

    folder = Path(folder)
    if nbytes < 0 or nbytes > MAX_BLOB_BYTES or (nbytes and not names):
        raise ProtocolError("an outputs frame declares an impossible size")
    blob: Any = numpy.empty(nbytes, dtype=numpy.uint8)
    filled = 0
    for name in names:
        if not _OUTPUT_FILE.fullmatch(name):
            raise ProtocolError(f"an outputs frame names {name!r}, not a file the harness writes")
        path = folder / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise ProtocolError(f"output file {name} cannot be opened: {exc.strerror}") from None
        try:
            import stat

            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or filled + info.st_size > nbytes:
                raise ProtocolError(f"output file {name} is not what the frame declared")
            view = memoryview(blob)[filled : filled + info.st_size]
            while view:
                n = os.readv(fd, [view[:_SLICE]])
                if n == 0:
                    raise ProtocolError(f"output file {name} is shorter than it was")
                view = view[n:]
            filled += info.st_size
        finally:
            os.close(fd)
            path.unlink(missing_ok=True)
    if filled != nbytes:
        raise ProtocolError(f"the output files hold {filled} bytes, the frame declared {nbytes}")
    return blob
