"""GPU memory a worker hands to the parent without a copy through the host: CUDA VMM allocations
exported as POSIX file descriptors and passed over a Unix socket (SCM_RIGHTS).

Why not CUDA IPC (`cudaIpcGetMemHandle`)? Its handles name the exporting process by PID, and a
sandboxed worker lives in a PID namespace of its own: the driver refuses them across namespaces. A
file descriptor is a reference the kernel passes as it is, whatever the namespaces. The memory is
`cuMemCreate`d with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` requested, exported once
(`cuMemExportToShareableHandle`), and imported by the parent (`cuMemImportFromShareableHandle`),
which maps it into its own address space and copies from it on the device.

Only the driver API is used, through ctypes on libcuda (no extra package): the calls are those of
the VMM section of the CUDA driver API, with their v2 entry points where they have one.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Optional

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103
CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102


class DevShareError(RuntimeError):
    """A driver call failed (its name and CUresult in the message)."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocationProp(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_LIB: Optional[ctypes.CDLL] = None
_LIB_LOCK = threading.Lock()


def _lib() -> ctypes.CDLL:
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
            try:
                _LIB = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise DevShareError(f"libcuda.so.1 cannot be loaded: {exc}") from None
        return _LIB


class Cuda:
    """The VMM calls on one device, in the primary context PyTorch uses (made current per call, so any
    thread may call)."""

    def __init__(self, device: int = 0):
        self.device_index = device
        lib = _lib()
        self._lib = lib
        self._check("cuInit", lib.cuInit(0))
        dev = ctypes.c_int()
        self._check("cuDeviceGet", lib.cuDeviceGet(ctypes.byref(dev), device))
        self.dev = dev.value
        ctx = ctypes.c_void_p()
        self._check("cuDevicePrimaryCtxRetain", lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.dev))
        self.ctx = ctx
        self.prop = _AllocationProp()
        self.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
        self.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        self.prop.location = _Location(CU_MEM_LOCATION_TYPE_DEVICE, self.dev)
        gran = ctypes.c_size_t()
        self._current()
        self._check(
            "cuMemGetAllocationGranularity",
            lib.cuMemGetAllocationGranularity(
                ctypes.byref(gran), ctypes.byref(self.prop), CU_MEM_ALLOC_GRANULARITY_MINIMUM
            ),
        )
        self.granularity = gran.value

    def _check(self, name: str, result: int) -> None:
        if result != 0:
            text = ctypes.c_char_p()
            self._lib.cuGetErrorString(result, ctypes.byref(text))
            detail = text.value.decode() if text.value else "unknown"
            raise DevShareError(f"{name} failed: CUresult {result} ({detail})")

    def _current(self) -> None:
        self._check("cuCtxSetCurrent", self._lib.cuCtxSetCurrent(self.ctx))

    def supported(self) -> bool:
        """Whether this device can export VMM allocations as POSIX file descriptors."""
        for attr in (
            CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
        ):
            value = ctypes.c_int()
            if self._lib.cuDeviceGetAttribute(ctypes.byref(value), attr, self.dev) != 0 or not value.value:
                return False
        return True

    def rounded(self, nbytes: int) -> int:
        g = self.granularity
        return max(g, (nbytes + g - 1) // g * g)

    def create(self, nbytes: int) -> tuple[int, int, int]:
        """A new exportable allocation of at least `nbytes`, mapped read-write here: (handle, ptr, size)."""
        size = self.rounded(nbytes)
        self._current()
        handle = ctypes.c_ulonglong()
        self._check(
            "cuMemCreate",
            self._lib.cuMemCreate(
                ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(self.prop), ctypes.c_ulonglong(0)
            ),
        )
        try:
            ptr = self.map(handle.value, size)
        except DevShareError:
            self._lib.cuMemRelease(handle)
            raise
        return handle.value, ptr, size

    def map(self, handle: int, size: int) -> int:
        """Reserve an address range of `size`, map `handle` there, allow this device to read and write it."""
        self._current()
        ptr = ctypes.c_ulonglong()
        self._check(
            "cuMemAddressReserve",
            self._lib.cuMemAddressReserve(
                ctypes.byref(ptr),
                ctypes.c_size_t(size),
                ctypes.c_size_t(0),
                ctypes.c_ulonglong(0),
                ctypes.c_ulonglong(0),
            ),
        )
        try:
            self._check(
                "cuMemMap",
                self._lib.cuMemMap(
                    ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_ulonglong(handle), ctypes.c_ulonglong(0)
                ),
            )
        except DevShareError:
            self._lib.cuMemAddressFree(ptr, ctypes.c_size_t(size))
            raise
        access = _AccessDesc(_Location(CU_MEM_LOCATION_TYPE_DEVICE, self.dev), CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        try:
            self._check(
                "cuMemSetAccess",
                self._lib.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)),
            )
        except DevShareError:
            self.unmap(ptr.value, size)
            raise
        return ptr.value

    def unmap(self, ptr: int, size: int) -> None:
        self._current()
        self._lib.cuMemUnmap(ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))
        self._lib.cuMemAddressFree(ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))

    def release(self, handle: int) -> None:
        self._current()
        self._lib.cuMemRelease(ctypes.c_ulonglong(handle))

    def export(self, handle: int) -> int:
        """A POSIX file descriptor for `handle` (the caller owns and closes it)."""
        self._current()
        fd = ctypes.c_int(-1)
        self._check(
            "cuMemExportToShareableHandle",
            self._lib.cuMemExportToShareableHandle(
                ctypes.byref(fd),
                ctypes.c_ulonglong(handle),
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                ctypes.c_ulonglong(0),
            ),
        )
        return fd.value

    def import_fd(self, fd: int) -> int:
        """The allocation a file descriptor from `export` names, as a handle of this process."""
        self._current()
        handle = ctypes.c_ulonglong()
        self._check(
            "cuMemImportFromShareableHandle",
            self._lib.cuMemImportFromShareableHandle(
                ctypes.byref(handle), ctypes.c_void_p(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
            ),
        )
        return handle.value

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Device-to-device copy; returns once the bytes are there (the legacy default stream)."""
        self._current()
        self._check(
            "cuMemcpyDtoD",
            self._lib.cuMemcpyDtoD_v2(ctypes.c_ulonglong(dst), ctypes.c_ulonglong(src), ctypes.c_size_t(nbytes)),
        )
        self._check("cuCtxSynchronize", self._lib.cuCtxSynchronize())

    def copy_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """Device-to-device copy queued on `stream` (a CUstream handle); the caller synchronizes it."""
        self._current()
        self._check(
            "cuMemcpyDtoDAsync",
            self._lib.cuMemcpyDtoDAsync_v2(
                ctypes.c_ulonglong(dst), ctypes.c_ulonglong(src), ctypes.c_size_t(nbytes), ctypes.c_void_p(stream)
            ),
        )

    def copy_to_host_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """Device-to-host copy to `dst`, queued on `stream` (into pageable memory the driver finishes it
        before it returns)."""
        self._current()
        self._check(
            "cuMemcpyDtoHAsync",
            self._lib.cuMemcpyDtoHAsync_v2(
                ctypes.c_void_p(dst), ctypes.c_ulonglong(src), ctypes.c_size_t(nbytes), ctypes.c_void_p(stream)
            ),
        )
