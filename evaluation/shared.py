"""Judged outputs through shared memory: the `shared` output transport.

On an H200 a check of an LLM-sized problem sends about 13 GB of outputs to the parent. Through the
pipe every byte was copied off the GPU, MAC'd, written, read, MAC'd again and copied back onto the
GPU: most of a minute per candidate. Here the worker copies each judged output into a memory slot
it shares with the parent, and the parent copies it out, on the device where the output lies:

- `cuda`: a CUDA VMM allocation (evaluation/devshare.py), exported as a POSIX file descriptor. The
  copy in and the copy out are device-to-device copies; the bytes never touch the host.
- `host`: a memfd (anonymous shared memory) mapped by both processes: outputs on the CPU (Triton's
  interpreter) cross with two memcpys instead of the pipe's copies and two SHA-256 passes.

The file descriptor travels once per slot over a Unix socket pair (SCM_RIGHTS) that the parent made
for this worker, beside the MAC'd pipe; a slot is reused until an output needs a larger one.

What binds a slot to the worker's authenticated frames. Every slot carries a random 16-byte token,
sent with its descriptor on the socket and inside the MAC'd `Outputs` frame that names it. The
parent maps a slot only when the socket message's token equals the frame's: a candidate that writes
to the socket by its number (it cannot learn the token, which lives in the worker's memory beside the
MAC key) gets its message refused as forged. As with output files, the bytes in the slot are not
MAC'd: changing them between the worker's copy and the parent's takes the slot's address or
descriptor, which only frame or heap introspection or /proc file access reaches (the static check
refuses all three). The parent copies the bytes out before it acknowledges, so the worker never
writes a slot the parent is still reading.

Socket messages (SOCK_SEQPACKET, so each arrives whole):
    worker -> parent   b"KSS1" | u64 slot id | u64 size | 16-byte token   with one descriptor
    parent -> worker   b"KSA1" | u64 slot id | u64 output sequence         the copy-out is done
"""

from __future__ import annotations

import mmap
import os
import secrets
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any, Optional

SLOT = struct.Struct("<4sQQ16s")
ACK = struct.Struct("<4sQQ")
SLOT_MAGIC, ACK_MAGIC = b"KSS1", b"KSA1"
MAX_SLOT_BYTES = 64 << 30
# A device slot's output of at most this many bytes is copied to the parent's host memory: the parent
# compares small outputs there, with no kernel that would wait for a turn on a GPU the batch's workers
# keep busy (4 bytes a float32 element: HOST_JUDGE_ELEMENTS).
HOST_READ_BYTES = 2 << 20
RECEIVE_TIMEOUT_S = 30.0  # a slot's descriptor is sent before the frame naming it: it is there already
ACK_TIMEOUT_S = 600.0  # the parent copies out before it judges; only a dead parent takes this long


class SharedError(Exception):
    """The shared transport could not carry an output (the worker then uses the pipe)."""


def available() -> bool:
    """Whether this platform can pass descriptors over Unix sockets (Linux, Python 3.9+)."""
    return hasattr(socket, "send_fds") and hasattr(socket, "AF_UNIX") and hasattr(os, "memfd_create")


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(the parent's end, the worker's end); the worker's end is inherited by the worker process."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    child.set_inheritable(True)
    return parent, child


@dataclass
class Blob:
    """A judged output as the parent holds it: the MAC'd head (format and table) and the tensor data,
    a torch uint8 tensor on the device (cuda slots) or a host buffer (host slots)."""

    head: bytes
    data: Any


# -- memory kinds ------------------------------------------------------------------------------------


class _HostSlot:
    def __init__(self, size: int, fd: Optional[int] = None, writable: bool = True):
        self.size = size
        if fd is None:
            fd = os.memfd_create("kscout-outputs", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, size)
            except OSError as exc:
                os.close(fd)
                raise SharedError(f"a {size}-byte host slot: {exc.strerror}") from None
        self.fd = fd
        try:
            if os.fstat(fd).st_size < size:
                raise SharedError("the slot's descriptor is smaller than declared")
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, prot)
        except (OSError, ValueError) as exc:
            os.close(fd)
            raise SharedError(f"the slot cannot be mapped: {exc}") from None

    def write(self, offset: int, tensor: Any) -> None:
        import torch

        n = tensor.numel() * tensor.element_size()
        if n:
            dst = torch.frombuffer(self.map, dtype=torch.uint8, count=n, offset=offset)
            dst.copy_(tensor.reshape(-1).view(torch.uint8))

    def read(self, nbytes: int) -> Any:
        import numpy

        out = numpy.empty(nbytes, dtype=numpy.uint8)
        out[:] = numpy.frombuffer(self.map, dtype=numpy.uint8, count=nbytes)
        return out

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:  # a view still exists (a failed copy): the mapping goes with the process
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass


class _CudaSlot:
    def __init__(self, cuda: Any, size: int, fd: Optional[int] = None):
        self.cuda, self.size = cuda, size
        self.fd = -1
        from evaluation.devshare import DevShareError

        try:
            if fd is None:
                self.handle, self.ptr, self.size = cuda.create(size)
                self.fd = cuda.export(self.handle)
            else:
                self.handle = cuda.import_fd(fd)
                os.close(fd)
                try:
                    self.ptr = cuda.map(self.handle, size)
                except DevShareError:
                    cuda.release(self.handle)
                    raise
        except DevShareError as exc:
            raise SharedError(str(exc)) from None

    def write(self, offset: int, tensor: Any) -> None:
        from evaluation.devshare import DevShareError

        n = tensor.numel() * tensor.element_size()
        if n:
            try:
                self.cuda.copy(self.ptr + offset, tensor.data_ptr(), n)
            except DevShareError as exc:
                raise SharedError(str(exc)) from None

    def read(self, nbytes: int) -> Any:
        """The bytes copied into a new tensor of the parent's, on a stream of the receiving thread's own
        (the judge's kernels on the default stream go on meanwhile); marked as used on the default
        stream, where the judge reads it, so its block is not reused before the judge is done."""
        import torch

        device = torch.device("cuda", self.cuda.device_index)
        stream = _copy_stream(device)
        if nbytes <= HOST_READ_BYTES:  # judged on the host (evaluation/correctness.py, HOST_JUDGE_ELEMENTS)
            out = torch.empty(nbytes, dtype=torch.uint8)
            if nbytes:
                self.cuda.copy_to_host_async(out.data_ptr(), self.ptr, nbytes, stream.cuda_stream)
                stream.synchronize()
            return out
        try:
            with torch.cuda.stream(stream):
                out = torch.empty(nbytes, dtype=torch.uint8, device=device)
            self.cuda.copy_async(out.data_ptr(), self.ptr, nbytes, stream.cuda_stream)
        except torch.OutOfMemoryError:  # the batch's workers hold the device: the judge reads it from the host
            out = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            self.cuda.copy_to_host_async(out.data_ptr(), self.ptr, nbytes, stream.cuda_stream)
        stream.synchronize()
        if out.is_cuda:
            out.record_stream(torch.cuda.default_stream(device))
        return out

    def close(self) -> None:
        self.cuda.unmap(self.ptr, self.size)
        self.cuda.release(self.handle)
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass


_STREAMS: dict[Any, Any] = {}
_STREAMS_LOCK = threading.Lock()


def _copy_stream(device: Any) -> Any:
    """One copy stream per receiving thread and device (a thread's copies are sequential anyway)."""
    import torch

    key = (threading.get_ident(), device)
    with _STREAMS_LOCK:
        stream = _STREAMS.get(key)
        if stream is None:
            stream = _STREAMS[key] = torch.cuda.Stream(device=device)
        return stream


def _cuda():
    from evaluation.devshare import Cuda, DevShareError

    try:
        cuda = Cuda()
    except DevShareError as exc:
        raise SharedError(str(exc)) from None
    if not cuda.supported():
        raise SharedError("this GPU does not export VMM allocations as file descriptors")
    return cuda


# -- the worker's end --------------------------------------------------------------------------------


class Sender:
    """The worker's slot: outputs are copied in, announced, and the slot is reused once acknowledged."""

    def __init__(self, fd: int, memory: str):
        if memory not in ("host", "cuda"):
            raise ValueError(f"memory must be host or cuda (got {memory!r})")
        self.sock = socket.socket(fileno=fd)
        self.memory = memory
        self.slot: Any = None
        self.slot_id = 0
        self.token = b""
        self.sequence = 0
        self.unacked: Optional[tuple[int, int]] = None
        self.broken: Optional[str] = None  # why this worker's outputs go by pipe from now on
        self._cuda: Any = None

    def _wait_ack(self) -> None:
        if self.unacked is None:
            return
        self.sock.settimeout(ACK_TIMEOUT_S)
        data = self.sock.recv(ACK.size)
        if len(data) != ACK.size:
            raise SharedError("the parent closed the socket")
        magic, slot_id, sequence = ACK.unpack(data)
        if magic != ACK_MAGIC or (slot_id, sequence) != self.unacked:
            raise SharedError("an acknowledgement out of order")
        self.unacked = None

    def _new_slot(self, nbytes: int) -> None:
        if self.slot is not None:
            self.slot.close()
            self.slot = None
        size = max(nbytes, 1 << 20)
        size = 1 << (size - 1).bit_length() if size < (1 << 30) else size  # grows by powers of two to 1 GiB
        if self.memory == "cuda":
            if self._cuda is None:
                try:
                    self._cuda = _cuda()
                except SharedError as exc:
                    self.broken = str(exc)  # no VMM export on this device: the pipe for every output
                    raise
            slot: Any = _CudaSlot(self._cuda, size)
        else:
            _check_file_limit(size)
            slot = _HostSlot(size)
        self.slot_id += 1
        self.token = secrets.token_bytes(16)
        try:
            socket.send_fds(self.sock, [SLOT.pack(SLOT_MAGIC, self.slot_id, slot.size, self.token)], [slot.fd])
        except OSError as exc:
            slot.close()
            raise SharedError(f"the slot could not be sent: {exc}") from None
        self.slot = slot

    def put(self, tensors: list[tuple[int, Any]], nbytes: int) -> tuple[int, str, int]:
        """Copy `tensors` ((offset, contiguous tensor) pairs) into the slot: (slot id, token hex, sequence)
        for the frame that names them. SharedError: use the pipe for this output."""
        if self.broken:
            raise SharedError(self.broken)
        announced = False
        try:
            self._wait_ack()
            if self.slot is None or self.slot.size < nbytes:
                self._new_slot(nbytes)
                announced = True
            for offset, tensor in tensors:
                self.slot.write(offset, tensor)
        except (SharedError, OSError) as exc:
            # The parent may still read the slot (no acknowledgement), or a slot it was told of would
            # never be named by a frame (the next one would then arrive out of sequence): no reuse.
            if self.unacked is not None or isinstance(exc, OSError) or (announced and self.slot is not None):
                self.broken = f"the shared transport broke: {exc}"
            raise SharedError(str(exc)) from None
        self.sequence += 1
        self.unacked = (self.slot_id, self.sequence)
        return self.slot_id, self.token.hex(), self.sequence


def _check_file_limit(size: int) -> None:
    """A memfd counts against RLIMIT_FSIZE, and growing one past it kills the process (SIGXFSZ)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and size > soft:
        raise SharedError(f"a {size}-byte slot is over the worker's file-size limit ({soft} bytes)")


# -- the parent's end --------------------------------------------------------------------------------


class Receiver:
    """The parent's side of one worker's socket: slots mapped as they are announced, outputs copied out."""

    def __init__(self, sock: socket.socket, memory: str):
        self.sock, self.memory = sock, memory
        self.slots: dict[int, tuple[bytes, Any]] = {}  # slot id -> (token, mapped slot)
        self.last_slot = 0
        self.lock = threading.Lock()
        self._cuda: Any = None

    def _next_slot(self, want_id: int, want_token: bytes) -> None:
        """Receive the slot the frame names, refusing anything else before it is mapped: a descriptor
        is only imported once its message carries the token of the MAC'd frame."""
        from evaluation.protocol import ProtocolError

        self.sock.settimeout(RECEIVE_TIMEOUT_S)
        try:
            msg, fds, _flags, _addr = socket.recv_fds(self.sock, SLOT.size + 1, 2)
        except (OSError, TimeoutError) as exc:
            raise ProtocolError(f"no shared slot arrived for an outputs frame ({exc})") from None
        if len(fds) != 1 or len(msg) != SLOT.size:
            for fd in fds:
                os.close(fd)
            raise ProtocolError("a malformed message on the shared socket")
        magic, slot_id, size, token = SLOT.unpack(msg)
        if magic != SLOT_MAGIC or slot_id != want_id or not 0 < size <= MAX_SLOT_BYTES:
            os.close(fds[0])
            raise ProtocolError("a slot message out of sequence on the shared socket")
        if not secrets.compare_digest(token, want_token):
            os.close(fds[0])
            raise ProtocolError("a shared slot whose token differs from its frame's")
        try:
            if self.memory == "cuda":
                if self._cuda is None:
                    self._cuda = _cuda()
                slot: Any = _CudaSlot(self._cuda, size, fds[0])
            else:
                slot = _HostSlot(size, fds[0], writable=False)
        except SharedError as exc:
            raise ProtocolError(f"a shared slot could not be mapped: {exc}") from None
        for old in self.slots.values():  # the worker moved on: every output of the old slots was copied out
            old[1].close()
        self.slots = {slot_id: (token, slot)}
        self.last_slot = slot_id

    def take(self, slot_id: int, token_hex: str, sequence: int, nbytes: int) -> Any:
        """The output bytes a MAC'd frame names, copied out of its slot into memory of the parent's own;
        the worker may reuse the slot once this returns. ProtocolError for anything a worker would not
        send (the caller reports it as a forged result)."""
        from evaluation.protocol import ProtocolError

        with self.lock:
            try:
                want = bytes.fromhex(token_hex)
            except ValueError:
                raise ProtocolError("an outputs frame with a malformed slot token") from None
            if slot_id == self.last_slot + 1:  # a new slot: its descriptor was sent before this frame
                self._next_slot(slot_id, want)
            elif slot_id > self.last_slot:
                raise ProtocolError(f"an outputs frame names slot {slot_id}, after slot {self.last_slot}")
            found = self.slots.get(slot_id)
            if found is None:
                raise ProtocolError(f"an outputs frame names slot {slot_id}, which is gone")
            token, slot = found
            if not secrets.compare_digest(token, want):
                raise ProtocolError("a shared slot whose token differs from its frame's")
            if not 0 <= nbytes <= slot.size:
                raise ProtocolError("an outputs frame declares more bytes than its slot holds")
            data = slot.read(nbytes)
            try:
                self.sock.send(ACK.pack(ACK_MAGIC, slot_id, sequence))
            except OSError:
                pass  # the worker is gone; what it sent is judged all the same
            return data

    def close(self) -> None:
        with self.lock:
            for _, slot in self.slots.values():
                try:
                    slot.close()
                except Exception:
                    pass
            self.slots = {}
            try:
                self.sock.close()
            except OSError:
                pass
