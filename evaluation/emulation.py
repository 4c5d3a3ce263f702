"""Running GPU-written Triton candidates on a CPU as a CUDA run would see them, with the target's limits.

Model-written kernels assume a GPU: `assert x.is_cuda`, `torch.empty(n, device="cuda")`, `x.cuda()`,
`torch.cuda.get_device_properties(0).multi_processor_count`, `triton.runtime.driver.active`,
multi-config `@triton.autotune`. Under the Triton interpreter none of that works, so a correct kernel
was refused for the machine it was judged on. Here the worker (CPU only; a real GPU is always used as it
is) makes the candidate see the target device:

- inside `candidate_scope()` a TorchFunctionMode answers `is_cuda`/`device`/`get_device()` as a CUDA
  tensor would, and sends every allocation or move to "cuda" to the CPU, where the interpreter reads it;
- `torch.cuda.*` queries answer with the target's figures (H200 by default) while a scope is open, and
  behave as they really do outside it, so the harness's own code is never fooled;
- `triton.runtime.driver.active` is an emulated driver that reports the target;
- every launch is checked against the target's launch limits (grid dimensions, num_warps) before it
  runs, and a launch that the GPU would refuse raises `LaunchLimitError` naming the limit; `tl.arange`
  sizes (a power of two, at most 2^20 elements) the interpreter already checks itself;
- a multi-config `@triton.autotune` runs every (pruned) config once per tuning key, each on the same
  copy of the arguments, and every config must agree with the first one, whose result is the one the
  harness then judges against the reference; none is timed.

Shared memory per block is not known under the interpreter (nothing is compiled): on a GPU the compiler
refuses a kernel that needs too much, here it is not checked, and the report says so.

`check_launches_at_scale` runs a forward at the target's full shapes on the meta device without running
any kernel, so launch limits that only bite at shipped sizes (a grid y of 65536) are seen on a CPU too.

The API the worker calls: `install(target)` once before the candidate is imported, `candidate_scope()`
around importing, building and calling the candidate, `report()` for the result, `verdict_for(exc)` to
turn this module's errors into a verdict, and `check_launches_at_scale(...)` for the target-size cases.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
from typing import Any, Callable, Iterator, Optional

from evaluation.records import Record

__all__ = [
    "DeviceSpec",
    "DEVICE_SPECS",
    "DEFAULT_TARGET",
    "device_spec",
    "EmulationReport",
    "AutotuneCheck",
    "DryRunReport",
    "LaunchLimitError",
    "AutotuneConfigMismatch",
    "install",
    "installed",
    "candidate_scope",
    "report",
    "verdict_for",
    "check_launch",
    "check_launches_at_scale",
    "dry_run_verdict",
]


class DeviceSpec(Record):
    """The figures of a target device that candidates read and that bound a launch."""

    name: str  # as torch.cuda.get_device_name() reports it
    arch: str  # "sm_90", "gfx942"
    backend: str  # "cuda" | "hip": what triton's target says
    major: int
    minor: int
    sm_count: int
    warp_size: int
    max_threads_per_block: int
    grid_max_x: int
    grid_max_y: int
    grid_max_z: int
    smem_per_block_bytes: int  # the opt-in maximum a kernel may use
    smem_per_block_default_bytes: int  # without the opt-in
    smem_per_sm_bytes: int
    regs_per_sm: int
    regs_per_block: int
    max_threads_per_sm: int
    l2_cache_bytes: int
    total_memory_bytes: int

    @property
    def max_num_warps(self) -> int:
        return self.max_threads_per_block // self.warp_size

    def describe(self) -> str:
        return f"{self.name} ({self.arch})"


_NV = dict(
    backend="cuda",
    warp_size=32,
    max_threads_per_block=1024,
    grid_max_x=2**31 - 1,
    grid_max_y=65535,
    grid_max_z=65535,
    smem_per_block_default_bytes=48 * 1024,
    regs_per_sm=65536,
    regs_per_block=65536,
)
# Figures from the vendors' documents in hwdocs/ (and, for the H200, from the machine measured there).
DEVICE_SPECS: dict[str, DeviceSpec] = {
    "H200": DeviceSpec(
        name="NVIDIA H200",
        arch="sm_90",
        major=9,
        minor=0,
        sm_count=132,
        smem_per_block_bytes=232448,
        smem_per_sm_bytes=233472,
        max_threads_per_sm=2048,
        l2_cache_bytes=60 * 1024 * 1024,
        total_memory_bytes=143771 * 1024 * 1024,
        **_NV,
    ),
    "H100": DeviceSpec(
        name="NVIDIA H100 80GB HBM3",
        arch="sm_90",
        major=9,
        minor=0,
        sm_count=132,
        smem_per_block_bytes=232448,
        smem_per_sm_bytes=233472,
        max_threads_per_sm=2048,
        l2_cache_bytes=50 * 1024 * 1024,
        total_memory_bytes=81559 * 1024 * 1024,
        **_NV,
    ),
    "A100": DeviceSpec(
        name="NVIDIA A100-SXM4-80GB",
        arch="sm_80",
        major=8,
        minor=0,
        sm_count=108,
        smem_per_block_bytes=166912,
        smem_per_sm_bytes=167936,
        max_threads_per_sm=2048,
        l2_cache_bytes=40 * 1024 * 1024,
        total_memory_bytes=81920 * 1024 * 1024,
        **_NV,
    ),
    "MI300X": DeviceSpec(
        name="AMD Instinct MI300X",
        arch="gfx942",
        backend="hip",
        major=9,
        minor=4,
        sm_count=304,
        warp_size=64,
        max_threads_per_block=1024,
        grid_max_x=2**31 - 1,
        grid_max_y=65535,
        grid_max_z=65535,
        smem_per_block_bytes=65536,
        smem_per_block_default_bytes=65536,
        smem_per_sm_bytes=65536,
        regs_per_sm=131072,
        regs_per_block=131072,
        max_threads_per_sm=2048,
        l2_cache_bytes=4 * 1024 * 1024,
        total_memory_bytes=192 * 1024**3,
    ),
}
DEFAULT_TARGET = "H200"


def device_spec(target: "DeviceSpec | str | None" = None) -> DeviceSpec:
    """A DeviceSpec by name ("H200", "h100"), or the default target; ValueError for an unknown name."""
    if isinstance(target, DeviceSpec):
        return target
    name = (target or os.environ.get("KSCOUT_EMULATE", "") or DEFAULT_TARGET).upper()
    if name not in DEVICE_SPECS:
        raise ValueError(f"unknown target device {target!r}; known: {', '.join(DEVICE_SPECS)}")
    return DEVICE_SPECS[name]


# ---- errors: a launch the target would refuse, configs that disagree -------------------------------


class LaunchLimitError(RuntimeError):
    """A launch that the target device would refuse; `limit` names the limit ("grid_y", "num_warps")."""

    def __init__(self, kernel: str, limit: str, message: str):
        super().__init__(message)
        self.kernel, self.limit = kernel, limit


class AutotuneConfigMismatch(RuntimeError):
    """Two configs of one autotuned kernel computed different results from the same arguments."""

    def __init__(self, kernel: str, message: str):
        super().__init__(message)
        self.kernel = kernel


def verdict_for(exc: BaseException) -> Optional[tuple[str, str, str, str]]:
    """(status, stage, error_class, message) for an error of this module raised by a forward, else None.

    A grid over the limit fails at launch on the GPU (crashed); a num_warps the compiler refuses is a
    compile error; configs that disagree mean some config computes the wrong answer (incorrect)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, LaunchLimitError):
            status = "compile_error" if exc.limit == "num_warps" else "crashed"
            stage = "compile" if status == "compile_error" else "correctness"
            return status, stage, "LaunchLimitExceeded", str(exc)
        if isinstance(exc, AutotuneConfigMismatch):
            return "incorrect", "correctness", "AutotuneConfigMismatch", str(exc)
        exc = exc.__cause__ or exc.__context__
    return None


# ---- launch limits ---------------------------------------------------------------------------------


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TypeError(f"grid dimension {value!r} is not an integer") from None


def check_launch(spec: DeviceSpec, kernel: str, grid: Any, num_warps: Any = None) -> tuple[int, int, int]:
    """The grid as three ints, or LaunchLimitError naming the first limit this launch exceeds on `spec`."""
    dims = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    if len(dims) > 3:
        raise LaunchLimitError(
            kernel, "grid_rank", f"kernel {kernel}: a grid has at most 3 dimensions, got {len(dims)}"
        )
    full = tuple(_as_int(d) for d in dims) + (1,) * (3 - len(dims))
    for axis, value, limit in zip("xyz", full, (spec.grid_max_x, spec.grid_max_y, spec.grid_max_z)):
        if value < 0:
            raise LaunchLimitError(kernel, f"grid_{axis}", f"kernel {kernel}: grid {axis} is negative ({value})")
        if value > limit:
            raise LaunchLimitError(
                kernel,
                f"grid_{axis}",
                f"kernel {kernel}: grid {axis} = {value} exceeds the {spec.name} limit of {limit} "
                f"(grid {full}); the launch would fail on the device",
            )
    if num_warps is not None:
        nw = _as_int(num_warps)
        if nw < 1 or nw & (nw - 1) or nw > spec.max_num_warps:
            raise LaunchLimitError(
                kernel,
                "num_warps",
                f"kernel {kernel}: num_warps = {nw} is not a power of two from 1 to {spec.max_num_warps} "
                f"({spec.max_threads_per_block} threads per block / warp size {spec.warp_size} on {spec.name})",
            )
    return full


def _kernel_name(kernel: Any) -> str:
    fn = getattr(kernel, "fn", None)
    return getattr(fn, "__name__", None) or getattr(kernel, "__name__", "kernel")


def _grid_of(kernel: Any, args: tuple, kwargs: dict, grid: Any) -> Any:
    """The grid a launch asks for, evaluated the way the interpreter's GridExecutor does it."""
    if not callable(grid):
        return grid
    fn = kernel.fn
    spec = inspect.getfullargspec(fn)
    named = {k: v for k, v in kwargs.items() if k in spec.args or k in spec.kwonlyargs}
    return grid(inspect.getcallargs(fn, *args, **named))


# ---- the state of this process -----------------------------------------------------------------


class AutotuneCheck(Record):
    """One autotuned kernel at one tuning key: how many configs ran and whether they agreed."""

    kernel: str
    configs: int
    agreed: bool
    detail: Optional[str] = None  # which config disagreed, on which argument, by how much


class EmulationReport(Record):
    """What the worker tells the harness about a CPU run that emulated a GPU."""

    emulated: bool
    device_name: Optional[str] = None  # "NVIDIA H200"
    arch: Optional[str] = None
    reason: Optional[str] = None  # why not emulated (a real GPU is here, not under the interpreter)
    cuda_apis_used: tuple[str, ...] = ()  # the emulated CUDA queries the candidate made
    launches_checked: int = 0
    autotune: tuple[AutotuneCheck, ...] = ()
    shared_memory_checked: bool = False  # never under the interpreter: nothing is compiled

    def describe(self) -> str:
        if not self.emulated:
            return f"no device emulation ({self.reason})"
        return (
            f"{self.device_name} ({self.arch}) emulated on the CPU under the Triton interpreter: launch "
            f"limits checked on {self.launches_checked} launches, shared memory not checked"
        )


class _State:
    def __init__(self) -> None:
        self.spec: Optional[DeviceSpec] = None
        self.depth = 0  # open candidate scopes
        self.dry = 0  # open dry-run scopes (meta tensors, kernels not executed)
        self.apis: dict[str, None] = {}
        self.launches = 0
        self.autotune: list[AutotuneCheck] = []
        self.dry_launches: list[tuple[str, tuple[int, int, int]]] = []
        self.lock = threading.RLock()

    @property
    def active(self) -> bool:
        return self.spec is not None and self.depth > 0


_STATE = _State()


def installed() -> bool:
    return _STATE.spec is not None


def report() -> EmulationReport:
    spec = _STATE.spec
    if spec is None:
        return EmulationReport(emulated=False, reason="not installed")
    return EmulationReport(
        emulated=True,
        device_name=spec.name,
        arch=spec.arch,
        cuda_apis_used=tuple(_STATE.apis),
        launches_checked=_STATE.launches,
        autotune=tuple(_STATE.autotune),
    )


def _note(api: str) -> None:
    _STATE.apis.setdefault(api, None)


# ---- the tensor view: is_cuda, device, allocations on "cuda" ---------------------------------------


def _is_cuda_device(value: Any) -> bool:
    import torch

    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value == "cuda" or value.startswith("cuda:")
    return False


def _host(value: Any) -> Any:
    """Where an allocation on the emulated device really goes: the CPU, or meta during a dry run."""
    return "meta" if _STATE.dry else "cpu"


_DEVICE_ARG_FUNCS = {"to", "_parse_to", "cuda", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor"}


class _CudaView:
    """Built lazily (torch is imported only when the worker installs emulation)."""

    mode_cls = None

    @classmethod
    def mode(cls):
        if cls.mode_cls is None:
            cls.mode_cls = _make_mode_cls()
        return cls.mode_cls()


def _make_mode_cls():
    import torch
    from torch.overrides import TorchFunctionMode

    base = torch._C.TensorBase
    is_cuda, device_attr, is_cpu = base.__dict__["is_cuda"], base.__dict__["device"], base.__dict__["is_cpu"]
    emulated = torch.device("cuda", 0)

    class CudaView(TorchFunctionMode):
        """Tensors on the host answer as tensors on cuda:0; "cuda" in a device argument means the host."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            owner = getattr(func, "__self__", None)
            if owner is is_cuda:
                return True if args[0].device.type in ("cpu", "meta") else func(*args, **kwargs)
            if owner is is_cpu:
                return False if args[0].device.type in ("cpu", "meta") else func(*args, **kwargs)
            if owner is device_attr:
                real = func(*args, **kwargs)
                return emulated if real.type in ("cpu", "meta") else real
            name = getattr(func, "__name__", "")
            if name == "get_device" and args and isinstance(args[0], torch.Tensor):
                return 0
            if name == "cuda" and args and isinstance(args[0], torch.Tensor):
                _note("Tensor.cuda")
                target = _host(None)
                return args[0] if args[0].device.type == target else args[0].to(target)
            if "device" in kwargs and (_is_cuda_device(kwargs["device"]) or isinstance(kwargs["device"], int)):
                kwargs["device"] = _host(kwargs["device"])
            if name in _DEVICE_ARG_FUNCS:
                args = tuple(_host(a) if _is_cuda_device(a) else a for a in args)
                if name in ("to", "_parse_to") and len(args) > 1 and type(args[1]) is int:
                    args = (args[0], _host(args[1])) + tuple(args[2:])  # x.to(0): device ordinal 0
            return func(*args, **kwargs)

    return CudaView


# ---- torch.cuda and triton's driver, as the target reports them ---------------------------------------


class _Props:
    """What torch.cuda.get_device_properties returns, with the target's figures."""

    def __init__(self, spec: DeviceSpec):
        self.name = spec.name
        self.major, self.minor = spec.major, spec.minor
        self.total_memory = spec.total_memory_bytes
        self.multi_processor_count = spec.sm_count
        self.max_threads_per_multi_processor = spec.max_threads_per_sm
        self.max_threads_per_block = spec.max_threads_per_block
        self.warp_size = spec.warp_size
        self.L2_cache_size = spec.l2_cache_bytes
        self.shared_memory_per_block = spec.smem_per_block_default_bytes
        self.shared_memory_per_block_optin = spec.smem_per_block_bytes
        self.shared_memory_per_multiprocessor = spec.smem_per_sm_bytes
        self.regs_per_multiprocessor = spec.regs_per_sm
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.gcnArchName = spec.arch if spec.backend == "hip" else "NVIDIA CUDA"
        self.uuid = "00000000-0000-0000-0000-000000000000"

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // 2**20}MB, multi_processor_count={self.multi_processor_count})"
        )


class _FakeStream:
    def __init__(self, *args, **kwargs):
        self.device = None
        self.cuda_stream = 0

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event=None):
        return event or _FakeEvent()

    def query(self) -> bool:
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


class _FakeEvent:
    def __init__(self, *args, **kwargs):
        import time

        self._t = time.perf_counter()

    def record(self, stream=None) -> None:
        import time

        self._t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end) -> float:
        return (end._t - self._t) * 1e3


def _cuda_fakes(spec: DeviceSpec) -> dict[str, Callable]:
    props = _Props(spec)
    return {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device=None: None,
        "get_device_name": lambda device=None: spec.name,
        "get_device_capability": lambda device=None: (spec.major, spec.minor),
        "get_device_properties": lambda device=None: props,
        "synchronize": lambda device=None: None,
        "current_stream": lambda device=None: _FakeStream(),
        "default_stream": lambda device=None: _FakeStream(),
        "stream": lambda stream=None: contextlib.nullcontext(),
        "Stream": _FakeStream,
        "Event": _FakeEvent,
        "device": lambda device=None: contextlib.nullcontext(),
        "empty_cache": lambda: None,
        "mem_get_info": lambda device=None: (spec.total_memory_bytes, spec.total_memory_bytes),
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "reset_peak_memory_stats": lambda device=None: None,
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "is_bf16_supported": lambda *a, **k: True,
        "is_initialized": lambda: True,
        "init": lambda: None,
        "get_arch_list": lambda: [spec.arch],
    }


def _gated(name: str, real: Callable, fake: Callable) -> Callable:
    """The fake inside a candidate scope, the real function everywhere else (the harness's own calls)."""

    if isinstance(real, type) or isinstance(fake, type):

        class Gated:  # a class (Stream, Event): construction is what is gated
            def __new__(cls, *args, **kwargs):
                if _STATE.active:
                    _note(f"torch.cuda.{name}")
                    return fake(*args, **kwargs)
                return real(*args, **kwargs)

        Gated.__name__ = Gated.__qualname__ = name
        return Gated

    @functools.wraps(real)
    def gated(*args, **kwargs):
        if _STATE.active:
            _note(f"torch.cuda.{name}")
            return fake(*args, **kwargs)
        return real(*args, **kwargs)

    return gated


class _EmulatedUtils:
    def __init__(self, spec: DeviceSpec):
        self.spec = spec

    def get_device_properties(self, device=0) -> dict[str, int]:
        _note("triton.driver.utils.get_device_properties")
        s = self.spec
        return {
            "max_shared_mem": s.smem_per_block_bytes,
            "max_num_regs": s.regs_per_block,
            "multiprocessor_count": s.sm_count,
            "warpSize": s.warp_size,
            "sm_clock_rate": 1980000,
            "mem_clock_rate": 2619000,
            "mem_bus_width": 6144,
        }


class _EmulatedDriver:
    """triton.runtime.driver.active on a machine whose only backend is the interpreter."""

    def __init__(self, spec: DeviceSpec):
        self.spec = spec
        self.utils = _EmulatedUtils(spec)
        self.backend = spec.backend

    def is_active(self) -> bool:
        return True

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        _note("triton.driver.get_current_target")
        arch = self.spec.major * 10 + self.spec.minor if self.spec.backend == "cuda" else self.spec.arch
        return GPUTarget(self.spec.backend, arch, self.spec.warp_size)

    def get_active_torch_device(self):
        import torch

        _note("triton.driver.get_active_torch_device")
        return torch.device("cuda", 0)

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device) -> None:
        pass

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_device_interface(self):
        import torch

        return torch.cuda

    def get_benchmarker(self):
        def run_once(kernel_call, quantiles=None, **kwargs):
            kernel_call()
            return [0.0, 0.0, 0.0] if quantiles else 0.0

        return run_once

    def get_empty_cache_for_benchmark(self):
        import torch

        return torch.empty(0)

    def clear_cache(self, cache) -> None:
        pass


# ---- launches: limits, autotune configs, dry runs --------------------------------------------------


class _WarmedUp:
    """What `kernel.warmup(...)` returns under emulation: enough of a CompiledKernel for the tutorials'
    occupancy arithmetic (nominal registers, no shared memory known), and a launcher."""

    def __init__(self, kernel, kwargs: dict):
        self._kernel = kernel
        names = set(getattr(kernel, "arg_names", ()))
        self._kwargs = {
            k: v for k, v in kwargs.items() if k in ("num_warps", "num_stages", "num_ctas") and k not in names
        }
        self.n_regs, self.n_spills, self.n_max_threads = 32, 0, 1024
        self.metadata = type(
            "Metadata",
            (),
            {"shared": 0, "num_warps": kwargs.get("num_warps", 4), "num_stages": kwargs.get("num_stages", 3)},
        )()
        self.name = _kernel_name(kernel)

    def _init_handles(self) -> None:
        pass

    def __getitem__(self, grid):
        return lambda *args: self._kernel.run(*args, grid=grid, warmup=False, **self._kwargs)


def _launch_wrapper(original):
    @functools.wraps(original)
    def run(kernel, *args, grid, warmup, **kwargs):
        spec = _STATE.spec
        if spec is None:
            return original(kernel, *args, grid=grid, warmup=warmup, **kwargs)
        if warmup:
            return _WarmedUp(kernel, kwargs)
        name = _kernel_name(kernel)
        full = check_launch(spec, name, _grid_of(kernel, args, kwargs, grid), kwargs.get("num_warps"))
        with _STATE.lock:
            _STATE.launches += 1
        if _STATE.dry:
            _STATE.dry_launches.append((name, full))
            return None
        if 0 in full:
            return None  # the driver launches nothing for an empty grid
        return original(kernel, *args, grid=grid, warmup=warmup, **kwargs)

    run.__kscout_emulation__ = True
    return run


_AGREE = {"float64": (1e-9, 1e-9), "float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}


def _as_numpy(t):
    """A host numpy copy without aten compute (the worker's compute watch sees aten ops, not numpy)."""
    import numpy as np
    import torch

    if t.dtype == torch.bfloat16:
        bits = t.detach().contiguous().view(torch.int16).numpy().astype(np.int32) << 16
        return bits.astype(np.uint32).view(np.float32)
    return t.detach().contiguous().numpy()


def _disagreement(first, other) -> Optional[str]:
    import numpy as np

    a, b = _as_numpy(first), _as_numpy(other)
    if a.shape != b.shape:
        return "shapes differ"
    if a.dtype.kind in "iub":
        bad = int((a != b).sum())
        return f"{bad} of {a.size} values differ" if bad else None
    atol, rtol = _AGREE.get(str(first.dtype).removeprefix("torch."), (1e-5, 1e-5))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    close = np.isclose(b64, a64, atol=atol, rtol=rtol, equal_nan=True)
    if close.all():
        return None
    diff = np.abs(np.nan_to_num(b64 - a64, nan=np.inf))
    return f"{int((~close).sum())} of {a.size} values differ (max abs difference {float(diff.max()):.3g})"


def _config_text(config) -> str:
    parts = [f"{k}={v}" for k, v in config.kwargs.items()]
    parts += [f"num_warps={config.num_warps}", f"num_stages={config.num_stages}"]
    return ", ".join(parts)


def _autotune_wrapper(original):
    @functools.wraps(original)
    def run(self, *args, **kwargs):
        if _STATE.spec is None or len(self.configs) <= 1:
            return original(self, *args, **kwargs)
        import torch

        self.nargs = dict(zip(self.arg_names, args))
        named = {**self.nargs, **kwargs}
        key = [named[k] for k in self.keys if k in named]
        key += [str(v.dtype) for k, v in named.items() if k in self.arg_names and hasattr(v, "dtype")]
        key = tuple(key)
        try:
            if key in self.cache:
                config = self.cache[key]
                if config.pre_hook is not None:
                    config.pre_hook({**named, **config.all_kwargs()})
                return self.fn.run(*args, **kwargs, **config.all_kwargs())
            configs = self.prune_configs(kwargs)
            tensors = {k: v for k, v in named.items() if isinstance(v, torch.Tensor)}
            before = {k: v.clone() for k, v in tensors.items()}
            results = []
            for config in configs:
                for k, v in tensors.items():
                    v.copy_(before[k])
                full = {**named, **config.all_kwargs()}
                if not self.user_defined_pre_hook:
                    self.pre_hook(full, reset_only=True)
                if config.pre_hook is not None:
                    config.pre_hook(full)
                self.fn.run(*args, **kwargs, **config.all_kwargs())
                results.append({k: v.clone() for k, v in tensors.items()})
            name = getattr(self.base_fn, "__name__", "kernel")
            detail = None
            if not _STATE.dry:
                for i, result in enumerate(results[1:], start=1):
                    for k in tensors:
                        why = _disagreement(results[0][k], result[k])
                        if why:
                            detail = (
                                f"config {i} ({_config_text(configs[i])}) disagrees with config 0 "
                                f"({_config_text(configs[0])}) on argument {k}: {why}"
                            )
                            break
                    if detail:
                        break
            for k, v in tensors.items():
                v.copy_(results[0][k])  # the first config's answer is the one the harness judges
            with _STATE.lock:
                _STATE.autotune.append(
                    AutotuneCheck(kernel=name, configs=len(configs), agreed=detail is None, detail=detail)
                )
            if detail:
                raise AutotuneConfigMismatch(
                    name,
                    f"autotuned kernel {name}: {detail}; every config must be "
                    f"correct, since the GPU may pick any of them",
                )
            self.cache[key] = configs[0]
            self.best_config = configs[0]
            return None
        finally:
            self.nargs = None

    run.__kscout_emulation__ = True
    return run


# ---- install and scopes ---------------------------------------------------------------------------------


def install(target: "DeviceSpec | str | None" = None, device: str = "cpu") -> EmulationReport:
    """Emulate `target` in this process (the worker, before the candidate is imported); idempotent.

    Nothing is emulated where a real GPU is (the real device is always the judge there) or where Triton
    does not run under its interpreter."""
    import torch

    spec = device_spec(target)
    if device != "cpu" or torch.cuda.is_available():
        return EmulationReport(emulated=False, reason="a real GPU is used as it is")
    if os.environ.get("TRITON_INTERPRET") != "1":
        return EmulationReport(
            emulated=False, reason="Triton is not running under its interpreter (TRITON_INTERPRET=1)"
        )
    if _STATE.spec is not None:
        return report()
    import torch.cuda as tcuda
    import triton.runtime.autotuner as autotuner
    import triton.runtime.interpreter as interpreter
    from triton.runtime import driver

    saved = _SAVED
    for name, fake in _cuda_fakes(spec).items():
        real = getattr(tcuda, name, None)
        if real is not None:
            saved.append((tcuda, name, real))
            setattr(tcuda, name, _gated(name, real, fake))
    cls = interpreter.InterpretedFunction
    saved.append((cls, "run", cls.run))
    cls.run = _launch_wrapper(cls.run)
    saved.append((autotuner.Autotuner, "run", autotuner.Autotuner.run))
    autotuner.Autotuner.run = _autotune_wrapper(autotuner.Autotuner.run)
    saved.append((driver, "_active", driver._active))
    driver.set_active(_EmulatedDriver(spec))
    _STATE.spec = spec
    return report()


_SAVED: list[tuple[Any, str, Any]] = []


def _uninstall() -> None:
    """Undo install() (tests only: the worker process ends with it installed)."""
    while _SAVED:
        owner, name, value = _SAVED.pop()
        setattr(owner, name, value)
    _STATE.__init__()


@contextlib.contextmanager
def candidate_scope() -> Iterator[None]:
    """Around the candidate's import, construction and forward: the CUDA view of tensors and torch.cuda.

    A no-op when emulation is not installed (a real GPU, or not the worker)."""
    if _STATE.spec is None:
        yield
        return
    mode = _CudaView.mode()
    _STATE.depth += 1
    try:
        with mode:
            yield
    finally:
        _STATE.depth -= 1


class DryRunReport(Record):
    """The launches of one forward at the target's full size, run on the meta device (no kernel runs)."""

    case_id: str
    launches: tuple[tuple[str, tuple[int, int, int]], ...] = ()
    violation: Optional[str] = None  # the first launch limit exceeded, in one line
    limit: Optional[str] = None
    inconclusive: Optional[str] = None  # why the forward could not be followed on meta tensors


def dry_run_verdict(report: DryRunReport) -> Optional[tuple[str, str, str, str]]:
    """(status, stage, error_class, message) when a full-size launch exceeds a limit, else None."""
    if report.violation is None:
        return None
    status, stage = ("compile_error", "compile") if report.limit == "num_warps" else ("crashed", "correctness")
    return status, stage, "LaunchLimitExceeded", f"at the target's size {report.case_id}: {report.violation}"


def check_launches_at_scale(model_cls, problem_module, dtype: str, case_id: str, init_seed: int = 0) -> DryRunReport:
    """Build `model_cls` and the problem's inputs on the meta device at the problem's bound (full) size
    and follow one forward without running any kernel: each launch's grid and num_warps is checked
    against the target. A forward that needs real data (`.item()`, host copies) is inconclusive, never a
    failure. Requires `install()` first; inside it, runs under the candidate scope."""
    import torch

    if _STATE.spec is None:
        return DryRunReport(case_id=case_id, inconclusive="device emulation is not installed")
    import sys

    get_init = getattr(problem_module, "get_init_inputs", None)
    start = len(_STATE.dry_launches)
    # PyTorch ops on meta tensors often run Python reference implementations whose first call imports
    # torch._dynamo, and that import rebinds torch.manual_seed, which the worker's snapshot watches. The
    # harness's own import must not be blamed on the candidate: the binding is put back afterwards.
    seed_fn, had_dynamo = torch.manual_seed, "torch._dynamo" in sys.modules
    _STATE.dry += 1
    try:
        with candidate_scope(), torch.device("meta"), torch.no_grad():
            torch.manual_seed(init_seed)
            init = list(get_init()) if callable(get_init) else []
            model = model_cls(*init)
            if isinstance(model, torch.nn.Module):
                model = model.to(dtype=getattr(torch, dtype))
            inputs = [
                x.to(getattr(torch, dtype)) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                for x in problem_module.get_inputs()
            ]
            model(*inputs)
    except LaunchLimitError as exc:
        return DryRunReport(
            case_id=case_id, launches=tuple(_STATE.dry_launches[start:]), violation=str(exc), limit=exc.limit
        )
    except Exception as exc:  # data-dependent Python, host copies: the meta device cannot follow it
        text = " ".join(str(exc).split())[:300]
        return DryRunReport(
            case_id=case_id, launches=tuple(_STATE.dry_launches[start:]), inconclusive=f"{type(exc).__name__}: {text}"
        )
    finally:
        _STATE.dry -= 1
        if not had_dynamo and "torch._dynamo" in sys.modules:
            torch.manual_seed = seed_fn
    return DryRunReport(case_id=case_id, launches=tuple(_STATE.dry_launches[start:]))
