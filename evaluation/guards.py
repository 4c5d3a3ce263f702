"""Run-time checks inside the worker: launches seen, PyTorch compute seen, harness left unpatched.

All of these are installed before the candidate is imported. They run in the candidate's own process,
so a determined candidate could defeat them; they are defence in depth. The verdict that cannot be
patched is the parent's comparison against its own reference, on inputs the candidate never chose.
"""

from __future__ import annotations

import functools
import importlib
from collections import Counter
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class Verdict(Exception):
    """Ends a worker (or one candidate's timing) with a verdict other than success."""

    def __init__(self, status: str, stage: str, error_class: str, message: str):
        super().__init__(message)
        self.status, self.stage, self.error_class, self.message = status, stage, error_class, message


# aten ops that allocate, view, copy, convert dtype or fill: what a wrapper around Triton kernels
# needs. An interpreted launch itself issues empty, new_empty, set_ and copy_ (it stages tensors
# through host memory). Anything else in forward is PyTorch doing the work.
ALLOWED_OPS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "new_ones",
        "full",
        "full_like",
        "new_full",
        "scalar_tensor",
        "fill_",
        "zero_",
        "lift_fresh",
        "lift_fresh_copy",
        "resize_",
        "view",
        "_unsafe_view",
        "reshape",
        "_reshape_alias",
        "as_strided",
        "expand",
        "permute",
        "transpose",
        "t",
        "slice",
        "select",
        "squeeze",
        "unsqueeze",
        "split",
        "split_with_sizes",
        "unbind",
        "chunk",
        "narrow",
        "alias",
        "detach",
        "unfold",
        "view_as_real",
        "view_as_complex",
        "contiguous",
        "clone",
        "copy_",
        "_to_copy",
        "_copy_from",
        "_copy_from_and_resize",
        "set_",
        "_local_scalar_dense",
        "is_nonzero",
        "is_same_size",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "_has_compatible_shallow_copy_type",
    }
)


# The small PyTorch epilogue a candidate may keep (issue 17): reducing its own Triton outputs to a
# scalar or to per-row values, and the square root of such a result (a norm's one-element total).
# See ComputeWatch.epilogue_ok for what "its own" and "small" mean.
EPILOGUE_OPS = frozenset({"sum", "mean", "div", "div_", "sqrt", "sqrt_"})
EPILOGUE_FRACTION = 8  # an epilogue reduces at most 1/8 of the largest input's elements (or one per row)
SIZE_ELEMENTS = 16  # an integer tensor this small, not an input, holds sizes (a shape, its product)
COPY_OPS = frozenset({"clone", "contiguous", "_to_copy", "_copy_from", "_copy_from_and_resize", "lift_fresh_copy"})


def aten_name(op: str) -> str:
    """ "aten::convolution", "aten.convolution.default", "convolution" -> "convolution"."""
    op = op.replace("::", ".")
    parts = op.split(".")
    return parts[1] if parts[0] == "aten" and len(parts) > 1 else parts[0]


def _storages(value) -> list[int]:
    import torch

    items = value if isinstance(value, (tuple, list)) else [value]
    return [t.untyped_storage().data_ptr() for t in items if isinstance(t, torch.Tensor)]


def _tensors(*trees) -> list:
    """Every tensor in nested args (torch.cat takes a list of them)."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(trees) if isinstance(t, torch.Tensor)]


# The work rule (issue 25): values are followed by storage through a forward. A storage is `fed` once a
# Triton launch leaves in it a value that PyTorch did not already have; a torch op that reads a fed
# storage makes its result fed. `Shadows` are samples of the values PyTorch had without Triton: the
# inputs, the parameters, and every result of a PyTorch compute op that read nothing fed.
WORK_SAMPLES = 64  # elements sampled, evenly spaced over the flattened tensor
WATCH_LABEL = "kscout.watch"  # profiler label of the watch's own ops (not the candidate's device time)


def sample(t):
    """WORK_SAMPLES values of `t` as float64 on the host, or None where they say nothing: fewer than
    two elements, or one value repeated (an edge case's constant answer matches any constant)."""
    import torch

    n = t.numel()
    if n < 2 or t.is_complex() or t.device.type == "meta":
        return None
    k = min(n, WORK_SAMPLES)
    flat = torch.arange(k, device=t.device) * (n - 1) // (k - 1)
    vals = t.detach()[torch.unravel_index(flat, t.shape)].to(torch.float64).cpu()
    if bool(((vals == vals[0]) | (vals.isnan() & vals[0].isnan())).all()):
        return None
    return vals


def same_values(a, b, atol: float, rtol: float) -> bool:
    """Two samples agree within `atol + rtol * |b|` (NaN with NaN, an infinity with itself)."""
    ok = ((a - b).abs() <= atol + rtol * b.abs()) | (a.isnan() & b.isnan()) | (a == b)
    return bool(ok.all())


class ComputeWatch(TorchDispatchMode):
    """Names every aten op in forward that is not allocation, view, copy, fill or arithmetic on sizes:
    PyTorch compute, which makes the candidate a hybrid (labelled, not refused), except the small
    epilogue (labelled apart).

    For the epilogue it follows storages: the forward's inputs and the model's parameters are
    `tainted`, and so is whatever is copied from them; a Triton output is a storage the forward
    allocated, passed to a Triton launch, and never filled from a tainted one.

    With `judge_work` it also follows values for the work rule (`work_problem`): which storages hold
    Triton's work (`fed`), and samples of what PyTorch computed without it (`shadows`)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in a dynamo-disable whose first call imports
        # torch._dynamo (seconds, and it rebinds torch.manual_seed). No compile runs under this mode.
        return False

    def __init__(
        self,
        allowed_torch_ops=(),
        counter: "LaunchCounter | None" = None,
        inputs=(),
        params=(),
        *,
        judge_work: bool = False,
        atol: float = 0.0,
        rtol: float = 0.0,
    ) -> None:
        import torch

        super().__init__()
        self.flagged: Counter[str] = Counter()  # PyTorch compute ops, by overload, with their counts
        self.hybrid: set[str] = set()
        self.epilogue: set[str] = set()
        self.allowed = frozenset(aten_name(op) for op in allowed_torch_ops)
        self.counter = counter
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        self.tainted = set(_storages(tensors)) | set(_storages(list(params)))
        self.sources = frozenset(self.tainted)  # the inputs' and parameters' own storages
        self.derived: set[int] = set()
        self.judge_work, self.atol, self.rtol = judge_work and counter is not None, atol, rtol
        self.fed: set[int] = set()
        self.shadows: list[tuple[int, int, Any, str]] = []  # (numel, storage, sample, what PyTorch had)
        self.copies: list[str] = []  # Triton launches that left only a value PyTorch had
        if self.judge_work:
            assert counter is not None
            counter.observer = self.on_launch
            for i, t in enumerate(tensors):
                self._shadow(t, f"input {i}")
            for t in params:
                self._shadow(t, "a parameter")
        largest = max(tensors, key=lambda t: t.numel(), default=None)
        self.limit = (
            0
            if largest is None
            else max(
                largest.numel() // EPILOGUE_FRACTION,
                largest.numel() // max(1, largest.shape[-1] if largest.dim() else 1),
            )
        )

    def __exit__(self, *exc):
        if self.judge_work and self.counter is not None and self.counter.observer == self.on_launch:
            self.counter.observer = None
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        reads = {t.untyped_storage().data_ptr() for t in _tensors(args, kwargs)} if self.judge_work else set()
        compute = False
        if name in EPILOGUE_OPS and name not in self.allowed and self.epilogue_ok(args, kwargs):
            self.epilogue.add(name.rstrip("_"))
            out = func(*args, **kwargs)
            self.derived.update(_storages(out))
            self._follow(reads, out, False)
            return out
        elif name in self.allowed or (name not in ALLOWED_OPS and not self.size_arithmetic(args, kwargs)):
            self.flagged[str(func)] += 1
            self.hybrid.add(name)
            compute = True
        out = func(*args, **kwargs)
        if name == "copy_" and len(args) >= 2 and set(_storages(args[1])) & self.tainted:
            self.tainted.update(_storages(args[0]))
        elif name in COPY_OPS and set(_storages(list(args))) & self.tainted:
            self.tainted.update(_storages(out))
        self._follow(reads, out, compute, str(func))
        return out

    # -- the work rule ------------------------------------------------------------------------------
    def _shadow(self, t, what: str) -> None:
        import torch

        with torch.profiler.record_function(WATCH_LABEL):
            vals = sample(t)
        if vals is not None:
            self.shadows.append((t.numel(), t.untyped_storage().data_ptr(), vals, what))

    def _match(self, t, vals, *, computed_only: bool = False) -> tuple[int, str] | None:
        """The first value PyTorch had that `t`'s sample equals: (its storage, what it was)."""
        for numel, storage, shadow, what in self.shadows:
            if computed_only and not what.startswith("aten."):
                continue
            if numel == t.numel() and same_values(vals, shadow, self.atol, self.rtol):
                return storage, what
        return None

    def _follow(self, reads: set[int], out, compute: bool, op: str = "") -> None:
        """After one torch op: its results are fed if it read anything fed; a fresh allocation that
        read nothing fed holds no Triton work; a compute result that read nothing fed is a shadow."""
        if not self.judge_work:
            return
        fed = bool(reads & self.fed)
        for t in _tensors(out):
            storage = t.untyped_storage().data_ptr()
            if fed:
                self.fed.add(storage)
            elif storage not in reads:
                self.fed.discard(storage)
            if compute and not fed:
                self._shadow(t, op.replace("aten::", "aten.") if op.startswith("aten") else f"aten.{op}")

    def on_launch(self, args) -> None:
        """After a Triton launch (LaunchCounter calls it): each tensor it was given, other than an input or
        a parameter (never written: MutatedInput), is fed unless it now holds only a value PyTorch had."""
        import torch
        from torch.utils._python_dispatch import _disable_current_modes

        tensors = _tensors(args)
        if torch.version.cuda and torch.cuda.is_current_stream_capturing():  # a CUDA build (not emulation)
            return  # an autotuner's graph-captured benchmark: nothing can be read back now
        with _disable_current_modes(), torch.profiler.record_function(WATCH_LABEL):
            seen: set[int] = set()
            for t in tensors:
                storage = t.untyped_storage().data_ptr()
                if storage in self.sources or storage in seen:
                    continue
                seen.add(storage)
                vals = sample(t)
                match = self._match(t, vals) if vals is not None else None
                if match is None:
                    self.fed.add(storage)
                    continue
                self.fed.discard(storage)
                if match[0] != storage:
                    self.copies.append(match[1])

    def work_problem(self, out) -> str | None:
        """Why the candidate's Triton kernels did not do this forward's work, or None. Judged only where
        PyTorch computed something (a forward without PyTorch compute has nothing else doing the work):
        every non-empty output must hold Triton's work, and must not equal what PyTorch computed alone."""
        if not self.judge_work or not self.flagged:
            return None
        import torch
        from torch.utils._python_dispatch import _disable_current_modes

        ops = ", ".join(op for op, _ in self.flagged.most_common(4))
        items = out if type(out) in (tuple, list) else [out]
        with _disable_current_modes(), torch.profiler.record_function(WATCH_LABEL):
            for k, t in enumerate(items):
                if not isinstance(t, torch.Tensor) or t.numel() == 0:
                    continue
                where = f"output {k}" if len(items) > 1 else "the output"
                if t.untyped_storage().data_ptr() not in self.fed:
                    copied = f"; a Triton launch only copied {self.copies[0]}" if self.copies else ""
                    return f"{where} holds no work of the Triton kernels: PyTorch computed it ({ops}){copied}"
                vals = sample(t)
                match = self._match(t, vals, computed_only=True) if vals is not None else None
                if match is not None:
                    return f"{where} equals what PyTorch computed alone ({match[1]}), before any Triton work"
        return None

    def size_arithmetic(self, args, kwargs) -> bool:
        """Arithmetic on sizes, not compute: every tensor operand is an integer (or bool) tensor of at
        most SIZE_ELEMENTS values that is not an input or parameter (`torch.tensor(x.shape[1:]).prod()`)."""
        import torch

        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
        return bool(tensors) and all(
            not (t.is_floating_point() or t.is_complex())
            and t.numel() <= SIZE_ELEMENTS
            and t.untyped_storage().data_ptr() not in self.tainted
            for t in tensors
        )

    def epilogue_ok(self, args, kwargs) -> bool:
        """Every tensor operand is a Triton output of this forward (or an epilogue's result) and holds
        at most one value per row of the largest input, or 1/8 of its elements."""
        import torch

        if self.counter is None:
            return False
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
        for t in tensors:
            ptr = t.untyped_storage().data_ptr()
            if t.dim() == 0 and ptr in self.derived:
                continue
            own = ptr in self.derived or (ptr in self.counter.touched and ptr not in self.tainted)
            if not own or t.numel() > self.limit:
                return False
        return bool(tensors)


def _compile_error_types() -> tuple[type, ...]:
    """Exceptions that, raised by a launch, mean the kernel did not compile (also under the interpreter,
    where the front end's ValueError/TypeError/NameError come back wrapped as InterpreterError)."""
    types_: list[type] = []
    for module, name in (
        ("triton.compiler.errors", "CompilationError"),
        ("triton.runtime.errors", "InterpreterError"),
        ("triton.runtime.errors", "OutOfResources"),
        ("triton.runtime.errors", "PTXASError"),
    ):
        try:
            types_.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(types_)


class LaunchCounter:
    """Wraps JITFunction.run and InterpretedFunction.run (autotuners and heuristics end there too)."""

    def __init__(self) -> None:
        self.count = 0  # launches in the current forward (the worker resets it per call)
        self.total = 0
        self.touched: set[int] = set()  # storages passed to a launch in the current forward
        self.observer: Any = None  # the compute watch's on_launch while it judges the work rule
        self.kernels: dict[str, dict[str, Any]] = {}
        self._compile_errors: list[BaseException] = []
        self._types = _compile_error_types()

    def install(self) -> None:
        targets = [("triton.runtime.jit", "JITFunction")]
        targets.append(("triton.runtime.interpreter", "InterpretedFunction"))
        for module, cls_name in targets:
            try:
                cls = getattr(importlib.import_module(module), cls_name)
            except (ImportError, AttributeError):
                continue
            if "run" in vars(cls):
                cls.run = self._wrap(cls.run)

    def _wrap(self, original):
        counter = self

        @functools.wraps(original)
        def run(kernel, *args, **kwargs):
            try:
                result = original(kernel, *args, **kwargs)
            except BaseException as exc:
                if isinstance(exc, counter._types):
                    counter._compile_errors.append(exc)
                raise
            if not kwargs.get("warmup", False):
                counter.count += 1
                counter.total += 1
                counter.touched.update(_storages([a for a in list(args) + list(kwargs.values())]))
                counter._note(kernel, result)
                if counter.observer is not None:
                    counter.observer((args, kwargs))
            return result

        return run

    def begin(self) -> None:
        """A new forward: its launches and the storages they touched start from nothing."""
        self.count = 0
        self.touched = set()

    def _note(self, kernel, compiled) -> None:
        name = getattr(getattr(kernel, "fn", None), "__name__", None) or getattr(kernel, "__name__", "kernel")
        if name in self.kernels and self.kernels[name].get("n_regs") is not None:
            return
        meta = getattr(compiled, "metadata", None)

        def fact(obj, attr):
            value = getattr(obj, attr, None) if obj is not None else None
            return value if isinstance(value, int) else None

        self.kernels[name] = {
            "name": name,
            "n_regs": fact(compiled, "n_regs"),
            "n_spills": fact(compiled, "n_spills"),
            "shared_bytes": fact(meta, "shared"),
            "num_warps": fact(meta, "num_warps"),
            "num_stages": fact(meta, "num_stages"),
        }

    def is_compile_error(self, exc: BaseException) -> BaseException | None:
        """The Triton compile error behind `exc` (raised by a launch), if there is one."""
        seen = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            if any(exc is e for e in self._compile_errors):
                return exc
            exc = exc.__cause__ or exc.__context__
        return None


# Callables whose identity must not change: the tools the worker uses to check, save and time.
WATCHED = (
    (
        "torch",
        ("allclose", "isclose", "equal", "save", "load", "manual_seed", "randn", "rand", "randint", "empty", "no_grad"),
    ),
    ("torch.testing", ("assert_close",)),
    (
        "torch.Tensor",
        (
            "copy_",
            "clone",
            "cpu",
            "to",
            "detach",
            "__eq__",
            "data_ptr",
            "untyped_storage",
            "view",
            "reshape",
            "contiguous",
        ),
    ),
    ("torch.nn.Module", ("__call__", "load_state_dict", "state_dict", "to")),
    ("torch.cuda", ("synchronize", "graph", "Event", "CUDAGraph", "mem_get_info", "memory_snapshot")),
    ("torch.cuda.Event", ("elapsed_time", "record", "synchronize")),
    ("torch.cuda.CUDAGraph", ("replay", "capture_begin", "capture_end")),
    ("time", ("perf_counter", "perf_counter_ns", "time", "monotonic", "sleep")),
    ("json", ("dump", "dumps", "loads")),
    ("os", ("replace", "fsync", "getpid", "_exit")),
    ("builtins", ("open", "isinstance", "id", "len", "print", "getattr", "setattr")),
    ("triton.runtime.jit.JITFunction", ("run",)),
    ("triton.runtime.interpreter.InterpretedFunction", ("run",)),
    ("triton.runtime.autotuner.Autotuner", ("run",)),
    ("torch.utils._python_dispatch.TorchDispatchMode", ("__enter__", "__exit__")),
)
WATCHED_MODULES = (
    "torch",
    "triton",
    "time",
    "json",
    "os",
    "builtins",
    "hmac",
    "hashlib",
    "evaluation",
    "evaluation.worker",
    "evaluation.guards",
    "evaluation.inputs",
    "evaluation.problem",
    "evaluation.timing",
    "evaluation.protocol",
)


def _lookup(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


class HarnessSnapshot:
    """Identities of the callables and modules the harness relies on, taken before the candidate runs."""

    def __init__(self) -> None:
        import sys

        self._entries: list[tuple[str, Any, Any]] = []
        self._own: list[tuple[str, type, Any]] = []  # attributes defined on the harness's own classes
        for owner, attrs in WATCHED:
            try:
                obj = _lookup(owner)
            except (ImportError, AttributeError):
                continue
            for attr in attrs:
                if hasattr(obj, attr):
                    self._entries.append((f"{owner}.{attr}", obj, getattr(obj, attr)))
        self._modules = {name: sys.modules[name] for name in WATCHED_MODULES if name in sys.modules}
        for name in WATCHED_MODULES:
            module = self._modules.get(name)
            if module is None or not name.startswith("evaluation."):
                continue
            for attr, value in list(vars(module).items()):
                if attr.startswith("__"):
                    continue
                # Callables and the module's constants (an allow-list widened in place is a new object
                # only if replaced; frozensets and tuples cannot be changed in place).
                self._entries.append((f"{name}.{attr}", module, value))
                if isinstance(value, type) and value.__module__ == name:
                    for cattr, cvalue in list(vars(value).items()):
                        if not cattr.startswith("__") or cattr in (
                            "__call__",
                            "__torch_dispatch__",
                            "__enter__",
                            "__exit__",
                            "__init__",
                        ):
                            self._own.append((f"{name}.{attr}.{cattr}", value, cvalue))

    def changed(self) -> list[str]:
        import sys

        out = [name for name, module in self._modules.items() if sys.modules.get(name) is not module]
        missing = object()
        for name, owner, value in self._entries:
            if getattr(owner, name.rsplit(".", 1)[1], missing) is not value:
                out.append(name)
        for name, cls, value in self._own:
            if vars(cls).get(name.rsplit(".", 1)[1], missing) is not value:
                out.append(name)
        return out


def shares_memory(output, inputs) -> bool:
    """True when an output tensor lives in the storage of an input (aliasing, not computing)."""
    import torch

    def spans(t):
        storage = t.untyped_storage()
        return storage.data_ptr(), storage.data_ptr() + storage.nbytes()

    ins = [spans(t) for t in inputs if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes()]
    for out in output:
        if not isinstance(out, torch.Tensor) or out.untyped_storage().nbytes() == 0:
            continue
        lo, hi = spans(out)
        if any(lo < ihi and ilo < hi for ilo, ihi in ins):
            return True
    return False


def same_bits(a: Any, b: Any) -> bool:
    """Equal dtype, shape and bytes (NaN payloads and -0.0 included); non-tensors by ==."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))
    return a == b


def mutated(inputs: list[Any], pristine: list[Any]) -> list[int]:
    """Positions of the inputs whose bits differ from the copies taken before the forward."""
    return [i for i, (a, b) in enumerate(zip(inputs, pristine)) if not same_bits(a, b)]


PROFILE_MAX_KERNELS = 500


def profile_kernels(run, replay: bool):
    """`run()` under torch.profiler (CPU + CUDA): its result, the device kernels it launched with the
    chain of aten ops that launched each (none for a raw launch such as Triton's, or in a graph
    replay), and the profiler's error if it could not run (then the list is empty)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from evaluation.protocol import ProfiledKernel

    try:
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    except Exception as exc:  # CUPTI unavailable, another profiler active...
        return run(), [], f"{type(exc).__name__}: {exc}"[:200]
    try:
        out = run()
        torch.cuda.synchronize()
    finally:
        prof.__exit__(None, None, None)
    try:
        events = prof.events()
        kernels, attributed = [], Counter()
        for evt in events:
            if evt.device_type != DeviceType.CPU or not evt.kernels:
                continue
            chain, e, mine = [], evt, False
            while e is not None:
                if e.name.startswith("aten::"):
                    chain.append(e.name[len("aten::") :])
                mine = mine or e.name == WATCH_LABEL  # the watch's own samples, not the candidate's work
                e = e.cpu_parent
            for k in evt.kernels:
                attributed[k.name] += 1
                if not mine:
                    duration = float(getattr(k, "duration", 0.0) or 0.0)
                    kernels.append(ProfiledKernel(name=k.name, ops=chain, replay=replay, duration_us=duration))
        device: dict[str, list[float]] = {}
        for evt in events:
            # a record_function range (the watch's own label) shows on the device timeline as an
            # annotation, not a kernel
            if evt.device_type == DeviceType.CUDA and not getattr(evt, "is_user_annotation", False):
                device.setdefault(evt.name, []).append(float(evt.time_range.elapsed_us()))
        for name, durations in device.items():
            for duration in durations[attributed.get(name, 0) :]:
                kernels.append(ProfiledKernel(name=name, replay=replay, duration_us=duration))
    except Exception as exc:
        return out, [], f"reading the profile: {type(exc).__name__}: {exc}"[:200]
    return out, kernels[:PROFILE_MAX_KERNELS], None
