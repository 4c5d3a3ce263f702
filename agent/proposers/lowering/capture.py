"""Graph capture: the reference's forward as an aten graph with symbolic sizes.

The reference is built on the meta device (nothing is allocated, so shipped sizes of many GiB cost
nothing) and traced by `make_fx` on fake tensors whose every dimension is a symbol, with duck sizing
off so two sizes that happen to be equal stay two symbols. The generated candidate binds each symbol
from the tensors it gets, so one candidate serves every shape case.

Some module settings decide sizes but are plain ints (a GroupNorm's groups, a pooling window): the
harness varies them between shape cases like any size. Their modules are traced through a patched
forward that reads each such int from the size of a one-dimensional "carrier" input, so the setting
becomes a symbol as well, bound in the candidate to the module's attribute. Pooling goes through a
custom op whose shape function is symbolic (aten's pooling meta functions specialise the sizes).

A Python number among the forward's inputs is traced as a 0-d tensor and passed to the kernels as a
scalar argument, so a candidate does not bake in the value `get_inputs` happened to return.

In-place ops become out-of-place ones whose result later uses read. Where a write must reach another
tensor, because it goes into a view (a slice assignment `y[:, :c] = z`, `x[..., i] = v`,
`z[:, 0].relu_()`) or a view was taken before it, the graph is traced again through PyTorch's
functionalization: the write becomes the written value scattered into the view's base (`slice_scatter`,
a select_scatter decomposed to `where`), which every later read of the base, or of another view of it,
reads. A `copy_` becomes a cast and broadcast of its source. Writes whose scatter no schedule lowers
(`index_put` from a mask or index assignment, `as_strided_scatter` of a diagonal) are named as unsupported ops.

A plain tensor attribute (`self.hidden = torch.randn(...)` in `__init__`, neither parameter nor buffer)
is a placeholder too: the candidate reads it from its own module at run time, and an attribute the
forward rebinds, writes into or creates is written back after the call (state.py).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import operator
import textwrap
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import sympy
import torch

from agent.proposers.lowering.ir import LoweringError

_LIB = None
# Searches in threads of one process (optimize-many, coverage --concurrency) lower at the same time: the
# operator library is defined once, and a capture (which swaps torch.nn.functional's pooling and
# convolutions for the duration of its trace) runs alone. torch.fx's own class patches are made per
# thread once per process (`isolate_fx_traces`): other threads run and trace modules meanwhile.
_LOCK = threading.RLock()


def _pool_library():
    with _LOCK:
        _define_pool_library()


def _define_pool_library():
    """kscout::pool(x, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor)."""
    global _LIB
    if _LIB is not None:
        return
    lib = torch.library.Library("kscout", "FRAGMENT")
    lib.define(
        "pool(Tensor x, str kind, SymInt[] kernel, SymInt[] stride, SymInt[] padding, SymInt[] dilation, "
        "bool ceil_mode, bool count_include_pad, int? divisor) -> Tensor"
    )

    def fake(x, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor):
        d = len(kernel)
        out = list(x.shape[:-d])
        for i in range(d):
            size = x.shape[x.dim() - d + i]
            out.append(pool_out_size(size, kernel[i], stride[i], padding[i], dilation[i], ceil_mode))
        return x.new_empty(out)

    torch.library.register_fake("kscout::pool", fake, lib=lib)
    lib.define(
        "conv(Tensor x, Tensor w, Tensor? b, SymInt[] stride, SymInt[] padding, SymInt[] dilation, "
        "SymInt groups) -> Tensor"
    )

    def fake_conv(x, w, b, stride, padding, dilation, groups):
        d = len(stride)
        out = [x.shape[0], w.shape[0]]
        for i in range(d):
            out.append(pool_out_size(x.shape[2 + i], w.shape[2 + i], stride[i], padding[i], dilation[i], False))
        return x.new_empty(out)

    torch.library.register_fake("kscout::conv", fake_conv, lib=lib)
    lib.define(
        "conv_t(Tensor x, Tensor w, Tensor? b, SymInt[] stride, SymInt[] padding, SymInt[] output_padding, "
        "SymInt[] dilation, SymInt groups) -> Tensor"
    )

    def fake_conv_t(x, w, b, stride, padding, output_padding, dilation, groups):
        d = len(stride)
        out = [x.shape[0], w.shape[1] * groups]
        for i in range(d):
            out.append(
                conv_t_out_size(x.shape[2 + i], w.shape[2 + i], stride[i], padding[i], output_padding[i], dilation[i])
            )
        return x.new_empty(out)

    torch.library.register_fake("kscout::conv_t", fake_conv_t, lib=lib)
    _LIB = lib


def conv_t_out_size(size, k, s, p, op, d):
    """A transposed convolution's output size (ints, SymInts and sympy expressions alike)."""
    return (size - 1) * s - 2 * p + d * (k - 1) + op + 1


def pool_out_size(size, k, s, p, d, ceil_mode):
    """PyTorch's pooling output size (works on ints, SymInts and sympy expressions alike)."""
    span = size + 2 * p - d * (k - 1) - 1
    if not ceil_mode:
        return span // s + 1
    # ceil, except that the last window must start inside the input or its left padding:
    # PyTorch drops an output whose window would start in the right padding or beyond it.
    out, cap = -((-span) // s) + 1, (size + p - 1) // s + 1
    if isinstance(out, int) and isinstance(cap, int):
        return min(out, cap)
    if isinstance(out, torch.SymInt) or isinstance(cap, torch.SymInt):
        return torch.sym_min(out, cap)
    return sympy.Min(out, cap)


# ---------------------------------------------------------------- the decomposition table


@functools.lru_cache(maxsize=1)
def decompositions() -> dict:
    """Core aten decompositions plus the composite ops the lowering rebuilds from primitives."""
    from torch._decomp import core_aten_decompositions, get_decompositions

    aten = torch.ops.aten
    table = dict(core_aten_decompositions())
    table.update(
        get_decompositions(
            [
                aten.gelu,
                aten.hardtanh,
                aten.leaky_relu,
                aten.elu,
                aten._softmax,
                aten._log_softmax,
                aten.native_batch_norm,
                aten._native_batch_norm_legit_no_training,
                aten._native_batch_norm_legit,
                aten.linalg_vector_norm,
                aten.native_layer_norm,
                aten.native_group_norm,
                aten.clamp_min,
                aten.clamp_max,
                aten.constant_pad_nd,
                aten.diagonal,
                aten.expm1,
                aten.reciprocal,
                aten.trunc,
                aten.round,
            ]
        )
    )
    for keep in (
        aten.cumsum,
        aten.cumprod,
        aten.addmm,
        aten.mm,
        aten.bmm,
        aten.sigmoid,
        aten.clamp,
        aten.sign,
        aten._to_copy,
        aten.where,
    ):
        for overload in keep.overloads():
            table.pop(getattr(keep, overload), None)
    table[aten.constant_pad_nd.default] = _constant_pad
    return table


def _constant_pad(x, pad, value=0.0):
    """F.pad(mode="constant") as slices (negative pads crop) and a `cat` with filled blocks, dim by dim:
    ops the lowering has, with no write. PyTorch's own decomposition fills a new tensor and copies the
    input into a slice of it (`prims.copy_to`), a write into a view that functionalization refuses."""
    aten = torch.ops.aten
    out = x
    for i in range(len(pad) // 2):
        dim = x.dim() - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        if lo < 0:
            out = aten.slice.Tensor(out, dim, -lo, out.shape[dim])
        if hi < 0:
            out = aten.slice.Tensor(out, dim, 0, out.shape[dim] + hi)
        if lo > 0 or hi > 0:

            def block(width, like=out, dim=dim):
                shape = [width if j == dim else s for j, s in enumerate(like.shape)]
                return [aten.full.default(shape, value, dtype=x.dtype, device=x.device)] if width > 0 else []

            out = aten.cat.default(block(lo) + [out] + block(hi), dim)
    return out


# ---------------------------------------------------------------- the reference's __init__ for ModelNew


@dataclass(frozen=True)
class InitSource:
    """The reference's `__init__` (signature and body) and what it needs, to mirror it in ModelNew."""

    signature: str  # e.g. "self, in_features, out_features, num_groups"
    body: str  # indented 8 spaces, `super(Model, self).__init__()` written as `super().__init__()`
    imports: tuple[str, ...]
    helpers: tuple[str, ...]  # module-level classes/functions the body uses


def init_source(source: str) -> InitSource:
    """Copy `Model.__init__` so the candidate has the reference's submodules, parameters and settings.

    The candidate's forward never calls them: it reads parameters and settings, nothing else.
    """
    tree = ast.parse(source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise LoweringError("the reference defines no class Model")
    init = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    imports = tuple(ast.get_source_segment(source, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
    if init is None:
        return InitSource(signature="self", body="        super().__init__()\n", imports=imports, helpers=())
    args = ast.unparse(init.args) or "self"
    lines = source.splitlines()
    start = init.body[0].lineno - 1
    if isinstance(init.body[0], ast.Expr) and isinstance(getattr(init.body[0], "value", None), ast.Constant):
        start = init.body[0].end_lineno  # leave the docstring out
    body_lines = lines[start : init.end_lineno]
    body = textwrap.dedent("\n".join(body_lines))
    body = body.replace("super(Model, self).__init__()", "super().__init__()")
    if not body.strip():
        body = "super().__init__()"
    imported = set()
    for n in tree.body:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            imported |= {(a.asname or a.name).split(".")[0] for a in n.names}
    defined = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name != "Model"}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    params = {a.arg for a in init.args.args + init.args.kwonlyargs}
    if init.args.vararg:
        params.add(init.args.vararg.arg)
    if init.args.kwarg:
        params.add(init.args.kwarg.arg)
    used = {n.id for n in ast.walk(init) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    sizes = _int_constants(tree)
    constants, helpers = [], []
    for name in sorted(used - params - imported):
        if name in defined:
            helpers.append(ast.get_source_segment(source, defined[name]))
        elif name in sizes:  # a size constant: the harness rebinds it per case in the candidate's module too
            constants.append(f"{name} = {sizes[name]}")
        elif name in assigned:
            raise LoweringError(
                f"Model.__init__ reads the module-level value {name!r}, which is not a plain int constant; "
                f"the lowering mirrors only __init__'s own arguments and the problem's int size constants"
            )
    return InitSource(
        signature=args,
        body=textwrap.indent(body, " " * 8) + "\n",
        imports=imports,
        helpers=tuple(constants + helpers),
    )


def _int_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level names last assigned a plain int (`batch_size = 256`): the size constants a shape
    case rebinds (evaluation/worker.py rebinds them in the candidate's module as in the problem's)."""
    found: dict[str, int] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        value = node.value
        is_int = isinstance(value, ast.Constant) and type(value.value) is int
        for target in node.targets:
            if isinstance(target, ast.Name):
                if is_int:
                    found[target.id] = value.value  # type: ignore[union-attr]
                else:
                    found.pop(target.id, None)
    return found


# ---------------------------------------------------------------- placeholders


@dataclass(frozen=True)
class Placeholder:
    kind: str  # "param" | "carrier" | "input" | "scalar" | "attr" (a plain tensor attribute: state.py)
    name: str  # dotted state name, input name, or the attribute expression of a carrier ("self.pool.kernel_size[0]")
    dtype: Optional[torch.dtype] = None  # None for carriers


@dataclass
class Captured:
    gm: Any  # torch.fx.GraphModule
    placeholders: list[Placeholder]
    n_outputs: int  # the forward's own outputs; the graph's outputs after them are the state writes
    tuple_output: bool
    shape_env: Any
    input_names: list[str]
    init: InitSource
    hints: dict = field(default_factory=dict)  # symbol -> value at the shipped sizes
    writes: tuple = ()  # state.StateWrite per trailing graph output: attributes the forward changed


_CONVS = {torch.nn.Conv1d: 1, torch.nn.Conv2d: 2, torch.nn.Conv3d: 3}
_CONVS_T = {torch.nn.ConvTranspose1d: 1, torch.nn.ConvTranspose2d: 2, torch.nn.ConvTranspose3d: 3}
_POOLS = {
    torch.nn.MaxPool1d: ("max", 1),
    torch.nn.MaxPool2d: ("max", 2),
    torch.nn.MaxPool3d: ("max", 3),
    torch.nn.AvgPool1d: ("avg", 1),
    torch.nn.AvgPool2d: ("avg", 2),
    torch.nn.AvgPool3d: ("avg", 3),
}


def attr_expr(base: str, dotted: str) -> str:
    """Python that reads the attribute path `dotted` ("network.0.weight", a name of
    named_parameters/named_modules) from `base`. Parts that are not identifiers (the children of
    nn.Sequential, nn.ModuleList, a ModuleDict's keys) are read with a literal getattr, so the
    generated source stays valid Python and the static check sees a constant name."""
    import keyword

    expr = base
    for part in (p for p in dotted.split(".") if p):
        expr = f"{expr}.{part}" if part.isidentifier() and not keyword.iskeyword(part) else f"getattr({expr}, {part!r})"
    return expr


def attr_assign(base: str, dotted: str, value: str) -> str:
    """A Python statement that sets the attribute path `dotted` of `base` to `value`."""
    import keyword

    owner, _, attr = dotted.rpartition(".")
    target = attr_expr(base, owner)
    if attr.isidentifier() and not keyword.iskeyword(attr):
        return f"{target}.{attr} = {value}"
    return f"setattr({target}, {attr!r}, {value})"


def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


CARRIER_OFFSET = 2  # a carrier is v + 2 long: sizes 0 and 1 would be fixed by the trace, not symbols


class _Carriers:
    """Module int settings traced as sizes of one-dimensional placeholder tensors (v + CARRIER_OFFSET long)."""

    def __init__(self, fake_mode, sizes):
        self.fake_mode = fake_mode
        self.sizes = sizes  # the capture's DimDynamic: in a static one the settings are plain ints too
        self.names: list[str] = []
        self.tensors: list = []

    def __call__(self, expr: str, value: int):
        from torch.fx.experimental.symbolic_shapes import StatelessSymbolicContext

        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise LoweringError(f"{expr} = {value!r} is not a size")
        meta = torch.empty(value + CARRIER_OFFSET, device="meta")
        fake = self.fake_mode.from_tensor(meta, symbolic_context=StatelessSymbolicContext(dynamic_sizes=[self.sizes]))
        self.names.append(expr)
        self.tensors.append(fake)
        return len(self.tensors) - 1


def _patch_modules(model: torch.nn.Module, carriers: _Carriers) -> list:
    """Give size-deciding int settings a carrier; returns the (module, slot -> carrier index) list."""
    patched = []
    for path, m in model.named_modules():
        owner = attr_expr("self", path)
        if type(m) in _POOLS:
            kind, d = _POOLS[type(m)]
            slots = {}
            names = ("kernel_size", "stride", "padding") + (("dilation",) if kind == "max" else ())
            for attr in names:
                value = getattr(m, attr)
                if value is None:
                    value = m.kernel_size
                for i, v in enumerate(_tuple(value, d)):
                    expr = f"{owner}.{attr}" if not isinstance(value, (tuple, list)) else f"{owner}.{attr}[{i}]"
                    if attr == "stride" and getattr(m, "stride", None) is None:
                        expr = expr.replace(".stride", ".kernel_size")
                    slots[(attr, i)] = carriers(expr, int(v))
            patched.append((m, "pool", (kind, d, slots)))
        elif type(m) in _CONVS_T:
            d = _CONVS_T[type(m)]
            if m.padding_mode != "zeros":
                continue
            slots = {}
            for attr in ("stride", "padding", "output_padding", "dilation"):
                for i, v in enumerate(_tuple(getattr(m, attr), d)):
                    slots[(attr, i)] = carriers(f"{owner}.{attr}[{i}]", int(v))
            slots[("groups", 0)] = carriers(f"{owner}.groups", int(m.groups))
            patched.append((m, "conv_t", (d, slots)))
        elif type(m) in _CONVS:
            d = _CONVS[type(m)]
            if m.padding_mode != "zeros" or isinstance(m.padding, str):
                continue  # traced as aten.convolution: unsupported, named as such
            slots = {}
            for attr in ("stride", "padding", "dilation"):
                for i, v in enumerate(_tuple(getattr(m, attr), d)):
                    slots[(attr, i)] = carriers(f"{owner}.{attr}[{i}]", int(v))
            slots[("groups", 0)] = carriers(f"{owner}.groups", int(m.groups))
            patched.append((m, "conv", (d, slots)))
        elif isinstance(m, torch.nn.GroupNorm):
            patched.append((m, "group_norm", {"groups": carriers(f"{owner}.num_groups", int(m.num_groups))}))
        elif isinstance(m, torch.nn.LayerNorm):
            slots = [carriers(f"{owner}.normalized_shape[{i}]", int(v)) for i, v in enumerate(m.normalized_shape)]
            patched.append((m, "layer_norm", slots))
        elif isinstance(m, torch.nn.modules.instancenorm._InstanceNorm):
            # its forward compares the input's channels with num_features, which would fix that size
            patched.append((m, "instance_norm", None))
    return patched


def _pool_call(x, kind, d, kernel, stride, padding, dilation, ceil_mode, count_include_pad=True, divisor=None):
    _pool_library()
    squeeze = x.dim() == d + 1
    if squeeze:
        x = x.unsqueeze(0)
    out = torch.ops.kscout.pool(
        x,
        kind,
        list(kernel),
        list(stride),
        list(padding),
        list(dilation),
        bool(ceil_mode),
        bool(count_include_pad),
        divisor,
    )
    return out.squeeze(0) if squeeze else out


def _conv_call(x, weight, bias, stride, padding, dilation, groups):
    _pool_library()
    d = weight.dim() - 2
    squeeze = x.dim() == d + 1
    if squeeze:
        x = x.unsqueeze(0)
    out = torch.ops.kscout.conv(x, weight, bias, list(stride), list(padding), list(dilation), groups)
    return out.squeeze(0) if squeeze else out


def _conv_t_call(x, weight, bias, stride, padding, output_padding, dilation, groups):
    _pool_library()
    d = weight.dim() - 2
    squeeze = x.dim() == d + 1
    if squeeze:
        x = x.unsqueeze(0)
    out = torch.ops.kscout.conv_t(
        x, weight, bias, list(stride), list(padding), list(output_padding), list(dilation), groups
    )
    return out.squeeze(0) if squeeze else out


def _functional_convs() -> dict:
    """torch.nn.functional.conv{1,2,3}d routed through kscout::conv (numeric padding only)."""

    def conv(d):
        def f(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
            if isinstance(padding, str):
                raise LoweringError(f"conv{d}d with padding={padding!r} is not lowered")
            return _conv_call(input, weight, bias, _tuple(stride, d), _tuple(padding, d), _tuple(dilation, d), groups)

        return f

    def conv_t(d):
        def f(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
            return _conv_t_call(
                input,
                weight,
                bias,
                _tuple(stride, d),
                _tuple(padding, d),
                _tuple(output_padding, d),
                _tuple(dilation, d),
                groups,
            )

        return f

    out = {f"conv{d}d": conv(d) for d in (1, 2, 3)}
    out.update({f"conv_transpose{d}d": conv_t(d) for d in (1, 2, 3)})
    return out


def _functional_pools() -> dict:
    """Replacements for torch.nn.functional's pooling, routed through kscout::pool."""

    def maxp(d):
        def f(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
            if return_indices:
                raise LoweringError("max pooling with return_indices=True is not lowered")
            stride = kernel_size if stride is None or stride == [] or stride == () else stride
            return _pool_call(
                input,
                "max",
                d,
                _tuple(kernel_size, d),
                _tuple(stride, d),
                _tuple(padding, d),
                _tuple(dilation, d),
                ceil_mode,
            )

        return f

    def avgp(d):
        def f(
            input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
        ):
            stride = kernel_size if stride is None or stride == [] or stride == () else stride
            return _pool_call(
                input,
                "avg",
                d,
                _tuple(kernel_size, d),
                _tuple(stride, d),
                _tuple(padding, d),
                (1,) * d,
                ceil_mode,
                count_include_pad,
                divisor_override,
            )

        return f

    out = {f"max_pool{d}d": maxp(d) for d in (1, 2, 3)}
    out.update({f"avg_pool{d}d": avgp(d) for d in (1, 2, 3)})
    out.update({f"max_pool{d}d_with_indices": maxp(d) for d in (1, 2, 3)})
    return out


def _in_thread(tracer: int, fn, original):
    """`fn` in the tracing thread, `original` in any other: a reference run by another search while this
    one traces (a shape check on the CPU) still gets PyTorch's own pooling and convolutions."""

    @functools.wraps(original)
    def dispatch(*args, **kwargs):
        return (fn if threading.get_ident() == tracer else original)(*args, **kwargs)

    return dispatch


def _number_tensor(original):
    """`torch.tensor(number, ...)` in a forward (SwinV2's `torch.log(torch.tensor(1. / 0.01,
    device=x.device))`) as `torch.full((), number, ...)`: the factory op the trace records with its value.
    torch.tensor itself makes a real tensor, on the meta device here, which the fake tensors refuse as
    an input nobody lifted. Anything but a plain number goes to `original`."""

    def tensor(data, *args, dtype=None, device=None, requires_grad=False, **kwargs):
        if args or kwargs or requires_grad or type(data) not in (bool, int, float):
            return original(data, *args, dtype=dtype, device=device, requires_grad=requires_grad, **kwargs)
        if dtype is None:
            dtype = {bool: torch.bool, int: torch.int64}.get(type(data), torch.get_default_dtype())
        return torch.full((), data, dtype=dtype, device=device)

    return tensor


@contextlib.contextmanager
def _patched(model, patched, carrier_values):
    import torch.nn.functional as F

    replacements = {**_functional_pools(), **_functional_convs()}
    saved_f = {name: getattr(F, name) for name in replacements}
    tracer = threading.get_ident()
    for name, fn in replacements.items():
        setattr(F, name, _in_thread(tracer, fn, saved_f[name]))
    saved_tensor = torch.tensor
    torch.tensor = _in_thread(tracer, _number_tensor(saved_tensor), saved_tensor)
    saved_fwd = []
    try:
        for m, what, info in patched:
            saved_fwd.append((m, m.__dict__.get("forward")))
            if what == "pool":
                kind, d, slots = info

                def fwd(x, m=m, kind=kind, d=d, slots=slots):
                    def get(attr):
                        return tuple(carrier_values()[slots[(attr, i)]].shape[0] - CARRIER_OFFSET for i in range(d))

                    dil = get("dilation") if kind == "max" else (1,) * d
                    return _pool_call(
                        x,
                        kind,
                        d,
                        get("kernel_size"),
                        get("stride"),
                        get("padding"),
                        dil,
                        m.ceil_mode,
                        getattr(m, "count_include_pad", True),
                        getattr(m, "divisor_override", None),
                    )

                m.forward = fwd
            elif what == "conv":

                def fwd(x, m=m, info=info):
                    d, slots = info

                    def get(attr):
                        return [carrier_values()[slots[(attr, i)]].shape[0] - CARRIER_OFFSET for i in range(d)]

                    groups = carrier_values()[slots[("groups", 0)]].shape[0] - CARRIER_OFFSET
                    return _conv_call(x, m.weight, m.bias, get("stride"), get("padding"), get("dilation"), groups)

                m.forward = fwd
            elif what == "conv_t":

                def fwd(x, output_size=None, m=m, info=info):
                    if output_size is not None:
                        raise LoweringError("a transposed convolution called with output_size is not lowered")
                    d, slots = info

                    def get(attr):
                        return [carrier_values()[slots[(attr, i)]].shape[0] - CARRIER_OFFSET for i in range(d)]

                    groups = carrier_values()[slots[("groups", 0)]].shape[0] - CARRIER_OFFSET
                    return _conv_t_call(
                        x,
                        m.weight,
                        m.bias,
                        get("stride"),
                        get("padding"),
                        get("output_padding"),
                        get("dilation"),
                        groups,
                    )

                m.forward = fwd
            elif what == "group_norm":

                def fwd(x, m=m, slot=info["groups"]):
                    groups = carrier_values()[slot].shape[0] - CARRIER_OFFSET
                    return _group_norm(x, groups, m.weight, m.bias, m.eps)

                m.forward = fwd
            elif what == "layer_norm":

                def fwd(x, m=m, slots=info):
                    shape = [carrier_values()[i].shape[0] - CARRIER_OFFSET for i in slots]
                    return torch.nn.functional.layer_norm(x, shape, m.weight, m.bias, m.eps)

                m.forward = fwd
            else:

                def fwd(x, m=m):
                    unbatched = x.dim() == m._get_no_batch_dim()
                    if unbatched:
                        x = x.unsqueeze(0)
                    y = torch.nn.functional.instance_norm(
                        x,
                        m.running_mean,
                        m.running_var,
                        m.weight,
                        m.bias,
                        m.training or not m.track_running_stats,
                        m.momentum if m.momentum is not None else 0.0,
                        m.eps,
                    )
                    return y.squeeze(0) if unbatched else y

                m.forward = fwd
        yield
    finally:
        torch.tensor = saved_tensor
        for name, fn in saved_f.items():
            setattr(F, name, fn)
        for m, old in saved_fwd:
            if old is None:
                m.__dict__.pop("forward", None)
            else:
                m.forward = old


def _group_norm(x, groups, weight, bias, eps):
    """GroupNorm with a symbolic group count: statistics over (C/G, spatial) per (sample, group)."""
    n, c = x.shape[0], x.shape[1]
    xg = x.reshape(n, groups, -1)
    var, mean = torch.var_mean(xg, dim=-1, keepdim=True, correction=0)
    y = ((xg - mean) * torch.rsqrt(var + eps)).reshape(x.shape)
    if weight is not None:
        shape = [1, c] + [1] * (x.dim() - 2)
        y = y * weight.reshape(shape)
        if bias is not None:
            y = y + bias.reshape(shape)
    return y


def _in_place(node) -> bool:
    """Whether the node is an aten op that writes into its first operand (`relu_`, `copy_`, `mul_`)."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    args = target._schema.arguments
    return bool(args) and args[0].alias_info is not None and args[0].alias_info.is_write


def _shares_memory(node, order: dict) -> bool:
    """Whether the tensor the in-place `node` writes into shares memory with another value of the graph
    that the write must reach: it is a view itself, or a view of it was taken before the write."""
    mutated = node.args[0]
    return _may_alias(mutated) or any(u is not node and order[u] < order[node] and _may_alias(u) for u in mutated.users)


def _aliased_writes(gm) -> list:
    """The in-place nodes whose write must reach another tensor (a slice assignment, `z[:, 0].relu_()`)."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    return [n for n in gm.graph.nodes if _in_place(n) and _shares_memory(n, order)]


def _functionalize(gm, name: str):
    """The graph traced again through PyTorch's functionalization, on the same fake values (so the same
    size symbols): each in-place op becomes its out-of-place form, and a write into a view becomes the
    written value scattered into the view's base (`slice_scatter`; `select_scatter`, decomposed to
    `where`), which every later read of the base or of another view of it reads. A placeholder written in
    place (a tensor attribute the forward writes into) is returned with its new value.

    Only graphs with such a write take this second trace: the others keep their graph as traced."""
    from torch._subclasses.functional_tensor import FunctionalTensorMode, dispatch_functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    args = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    run = dispatch_functionalize(torch.fx.Interpreter(gm).run, FunctionalTensorMode())
    try:
        return make_fx(run, decomposition_table=decompositions(), tracing_mode="fake")(*args)
    except LoweringError:
        raise
    except Exception as exc:
        text = " ".join(str(exc).split())[:300]
        raise LoweringError(
            f"{name}: cannot functionalize the forward's writes into views: {type(exc).__name__}: {text}"
        ) from exc


def _out_of_place(gm) -> None:
    """Rewrite in-place aten ops (decompositions use some: clamp_min_ in cosine_similarity; an in-place
    activation, `nn.ReLU6(inplace=True)`, traces to its op and a `copy_` back) as their out-of-place form,
    and let every later use of the mutated tensor read the result instead.

    Redirecting later uses is right only where nothing else shares the mutated memory. A graph with a write
    into a view, or into a tensor a view was taken from before the write, is functionalized first
    (`_functionalize`); one left here would be lowered wrong, so it is refused."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for node in list(gm.graph.nodes):
        if not _in_place(node):
            continue
        target = node.target
        packet = target.overloadpacket.__name__
        if not packet.endswith("_"):
            raise LoweringError(f"in-place op {target} is not lowered")
        functional = getattr(getattr(torch.ops.aten, packet[:-1], None), target._overloadname, None)
        if functional is None:
            raise LoweringError(f"in-place op {target} has no out-of-place form")
        if _shares_memory(node, order):
            raise LoweringError(
                f"in-place op {target} writes into a tensor that shares memory with a view; it is not lowered"
            )
        mutated = node.args[0]
        node.target = functional
        for user in list(mutated.users):
            if user is not node and order[user] > order[node]:
                user.replace_input_with(mutated, node)
    gm.graph.lint()
    gm.recompile()


def _may_alias(node) -> bool:
    """Whether the node's result may share memory with another tensor of the graph (a view: slice,
    select, view, a piece of split...). Unknown targets count as views."""
    if node.op == "placeholder":
        return False
    if node.op != "call_function" or node.target is operator.getitem:
        return True
    schema = getattr(node.target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _copies(gm, fake_mode) -> None:
    """Rewrite `aten.copy(dst, src)` as `src` cast to dst's dtype and broadcast to dst's shape: ops the
    lowering has. `aten.copy` is out-of-place here (dst lends only its shape and dtype): `_out_of_place` made
    it of a `copy_` whose destination shares memory with nothing, and functionalization makes a slice
    assignment `x[:, :c] = y` this copy into the slice, then a slice_scatter into the base."""
    aten = torch.ops.aten
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.target is not aten.copy.default or not all(isinstance(a, torch.fx.Node) for a in node.args[:2]):
            continue
        dst, src = node.args[0], node.args[1]
        dval, sval = dst.meta.get("val"), src.meta.get("val")
        if not (isinstance(dval, torch.Tensor) and isinstance(sval, torch.Tensor)):
            continue
        with graph.inserting_before(node), fake_mode:
            value = src
            if sval.dtype != dval.dtype:
                value = graph.call_function(aten._to_copy.default, (src,), {"dtype": dval.dtype})
                sval = value.meta["val"] = sval.to(dval.dtype)
            sizes: list = []
            for i, s in enumerate(dval.shape):
                if isinstance(s, torch.SymInt):
                    size = graph.call_function(aten.sym_size.int, (dst, i))
                    size.meta["val"] = s
                    sizes.append(size)
                else:
                    sizes.append(s)
            out = graph.call_function(aten.expand.default, (value, sizes))
            out.meta["val"] = sval.expand(dval.shape)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        changed = True
    if changed:
        graph.lint()
        gm.recompile()


# ---------------------------------------------------------------- torch.fx's class patches, per thread
#
# torch.fx's Tracer.trace (run by make_fx here, and by torch.fx.symbolic_trace in the family matcher of
# another search) routes module calls into its tracer by setting torch.nn.Module.__call__ and
# __getattr__ on the class for the whole trace (_Patcher.patch_method), and undoes that through the
# module-global CURRENT_PATCHER (_new_patcher). With threads that goes wrong three ways: a module called
# in another thread during a trace is handed to that trace's tracer (Tracer.call_module ->
# path_of_module: "NameError: module is not installed as a submodule"), and a trace sees another
# thread's patch instead of its own (its modules traced through, not recorded); overlapping traces stack
# their wrappers and undo them out of order, leaving a finished tracer's wrapper on the class for every
# later module call in the process; and a trace that ends undoes whichever patcher was set last, so the
# other one fails ("CURRENT_PATCHER is None in finally block") with its own patches left in place.
#
# `isolate_fx_traces` (once per process) keeps those two patches per thread: while any thread traces,
# the class holds a dispatcher that gives each thread its own innermost patch and a thread that is not
# tracing PyTorch's own method; the class gets its methods back when the last trace ends. The current
# patcher is per thread too. The other patches a trace makes (autowrapped functions such as math's)
# stay global: their wrappers only act on their tracer's proxies and pass anything else through.

_FX_NAMES = ("__call__", "__getattr__")
_FX_DRAIN_S = 5.0  # how long the install waits for traces begun before it (old-style patches) to end


class _FxThread(threading.local):
    def __init__(self) -> None:
        self.stacks: dict[str, list] = {name: [] for name in _FX_NAMES}
        self.patcher: Any = None


_FX_THREAD = _FxThread()
_FX_GUARD = threading.Lock()  # the active counts and the class attributes
_FX_INSTALL = threading.Lock()
_FX: dict[str, Any] = {"installed": False, "active": dict.fromkeys(_FX_NAMES, 0), "below": {}}


def _fx_module_call(self, *args, **kwargs):
    stack = _FX_THREAD.stacks["__call__"]
    return (stack[-1] if stack else _FX["below"]["__call__"])(self, *args, **kwargs)


def _fx_module_getattr(self, name):
    stack = _FX_THREAD.stacks["__getattr__"]
    return (stack[-1] if stack else _FX["below"]["__getattr__"])(self, name)


_FX_DISPATCH = {"__call__": _fx_module_call, "__getattr__": _fx_module_getattr}


def _fx_enter(name: str) -> None:
    if _FX["active"][name] == 0:
        current = torch.nn.Module.__dict__[name]
        if current is not _FX_DISPATCH[name]:
            _FX["below"][name] = current
            setattr(torch.nn.Module, name, _FX_DISPATCH[name])
    _FX["active"][name] += 1


def _fx_leave(name: str) -> None:
    _FX["active"][name] -= 1
    if _FX["active"][name] == 0 and torch.nn.Module.__dict__.get(name) is _FX_DISPATCH[name]:
        setattr(torch.nn.Module, name, _FX["below"][name])


class _FxThreadPatch:
    """One trace's patch of torch.nn.Module.<name>, seen by the thread that made it and no other
    (duck-types torch.fx's _PatchedFn: the patcher calls patch and revert)."""

    def __init__(self, name: str, new_fn) -> None:
        self.name, self.new_fn = name, new_fn
        self.stack = _FX_THREAD.stacks[name]  # the patching thread's
        self.applied = False

    def patch(self) -> None:
        with _FX_GUARD:
            if not self.applied:
                self.applied = True
                self.stack.append(self.new_fn)
                _fx_enter(self.name)

    def revert(self) -> None:
        with _FX_GUARD:
            if self.applied:
                self.applied = False
                for i in range(len(self.stack) - 1, -1, -1):
                    if self.stack[i] is self.new_fn:
                        del self.stack[i]
                        break
                _fx_leave(self.name)


def isolate_fx_traces() -> None:
    """Make torch.fx's module patches per thread, once per process (before the first capture)."""
    if _FX["installed"]:
        return
    with _FX_INSTALL:
        if not _FX["installed"]:
            _install_fx_isolation()
            _FX["installed"] = True


def _install_fx_isolation() -> None:
    from torch.fx import _symbolic_trace as st

    needed = ("_Patcher", "_new_patcher", "_maybe_revert_all_patches", "_orig_module_call", "_orig_module_getattr")
    if not all(hasattr(st, n) for n in needed) or not all(n in torch.nn.Module.__dict__ for n in _FX_NAMES):
        warnings.warn(
            "torch.fx's tracer internals are not the ones kernelscout knows: traces in threads are not isolated",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    originals = {"__call__": st._orig_module_call, "__getattr__": st._orig_module_getattr}
    plain_patch_method = st._Patcher.patch_method

    def patch_method(self, cls, name, new_fn, deduplicate=True):
        if cls is torch.nn.Module and name in _FX_DISPATCH:
            patch = _FxThreadPatch(name, new_fn)
            self.patches_made.append(patch)
            patch.patch()
            return None
        return plain_patch_method(self, cls, name, new_fn, deduplicate)

    @contextlib.contextmanager
    def new_patcher():
        prior = _FX_THREAD.patcher
        patcher = _FX_THREAD.patcher = st._Patcher()
        try:
            yield patcher
        finally:
            patcher.revert_all_patches()
            _FX_THREAD.patcher = prior

    @contextlib.contextmanager
    def maybe_revert_all_patches():  # dynamo's compile inside a trace: the thread's own patches off meanwhile
        patcher = _FX_THREAD.patcher
        if patcher is not None:
            patcher.revert_all_patches()
        try:
            yield
        finally:
            if patcher is not None:
                patcher.reapply_all_patches()

    with _FX_GUARD:
        _FX["below"].update(originals)
    st._Patcher.patch_method = patch_method
    st._new_patcher = new_patcher
    st._maybe_revert_all_patches = maybe_revert_all_patches

    # Traces begun in other threads before this patched the class the old way: let them end, then put
    # PyTorch's own methods back wherever an out-of-order undo left a finished tracer's wrapper.
    def old_style_in_flight() -> bool:
        return st.CURRENT_PATCHER is not None or any(
            torch.nn.Module.__dict__[n] not in (originals[n], _FX_DISPATCH[n]) for n in _FX_NAMES
        )

    deadline = time.monotonic() + _FX_DRAIN_S
    while old_style_in_flight() and time.monotonic() < deadline:
        time.sleep(0.001)
    with _FX_GUARD:
        for name, fn in originals.items():
            _FX["below"][name] = fn
            if torch.nn.Module.__dict__[name] is not _FX_DISPATCH[name]:
                setattr(torch.nn.Module, name, fn)


# ---------------------------------------------------------------- the entry point


def capture(source: str, path: str, static: bool = False) -> Captured:
    """Trace the reference's forward (eval mode) to an aten graph with symbolic sizes (one capture at a time).

    `static`: every size a plain int, as the file ships it. The model flow (agent/model) writes its
    regions and glue with the real run's sizes and judges the model at its shipped sizes, so it needs no
    symbols; symbolic tracing of a deep model spends minutes in sympy (DenseNet121: each dense layer's
    `cat` sums the previous channel counts, and every guard on them is re-simplified), and each region
    extracted from it is lowered with symbols of its own."""
    isolate_fx_traces()
    with _LOCK:
        return _capture(source, path, static)


def _meta_model(module, name: str) -> torch.nn.Module:
    """The problem's Model in eval mode with every parameter and buffer on the meta device. Built there
    directly (nothing allocated) unless its `__init__` reads a value back (`.item()` on a schedule of
    drop rates, as Swin's stochastic depth does), which no meta tensor holds: then it is built on the
    host, the global RNG left as it was, and moved to the meta device (the host copy is freed)."""
    from evaluation.problem import init_inputs

    try:
        return module.Model(*init_inputs(module)).eval()
    except Exception as first:
        try:
            with torch.device("cpu"), torch.random.fork_rng(devices=[]):
                return module.Model(*init_inputs(module)).eval().to("meta")
        except Exception as second:
            raise LoweringError(
                f"{name}: cannot build the reference on the meta device ({type(first).__name__}: {first}) "
                f"nor on the host ({type(second).__name__}: {second})"
            ) from second


def _capture(source: str, path: str, static: bool = False) -> Captured:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    from agent.proposers.lowering.state import TensorAttributes, split_writes
    from evaluation.problem import exec_problem_source

    _pool_library()
    init = init_source(source)
    module = exec_problem_source(source, path)
    name = path.rsplit("/", 1)[-1]
    try:
        with torch.device("meta"):
            model = _meta_model(module, name)
            raw_inputs = list(module.get_inputs())
    except LoweringError:
        raise
    except Exception as exc:
        raise LoweringError(
            f"{name}: cannot build the reference on the meta device: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        input_names = [p.name for p in inspect.signature(model.forward).parameters.values()][: len(raw_inputs)]
    except (TypeError, ValueError):
        input_names = [f"input{i}" for i in range(len(raw_inputs))]
    if len(input_names) < len(raw_inputs):
        raise LoweringError(f"{name}: forward takes fewer named inputs than get_inputs() returns")

    env = ShapeEnv(duck_shape=False)
    fake_mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=False)

    sizes = DimDynamic.STATIC if static else DimDynamic.DYNAMIC

    def fake(t: torch.Tensor):
        meta = t.detach().to("meta") if t.device.type != "meta" else t.detach()
        return fake_mode.from_tensor(
            meta, symbolic_context=StatelessSymbolicContext(dynamic_sizes=[sizes] * meta.dim())
        )

    placeholders: list[Placeholder] = []
    flat: list = []
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    for key, t in state.items():
        placeholders.append(Placeholder(kind="param", name=key, dtype=t.dtype))
        flat.append(fake(t))
    carriers = _Carriers(fake_mode, sizes)
    patched = _patch_modules(model, carriers)
    for expr, t in zip(carriers.names, carriers.tensors):
        placeholders.append(Placeholder(kind="carrier", name=expr))
        flat.append(t)
    for iname, x in zip(input_names, raw_inputs):
        if isinstance(x, torch.Tensor):
            placeholders.append(Placeholder(kind="input", name=iname, dtype=x.dtype))
            flat.append(fake(x))
        elif isinstance(x, float) or (isinstance(x, int) and not isinstance(x, bool)):
            dtype = torch.float32 if isinstance(x, float) else torch.int64
            placeholders.append(Placeholder(kind="scalar", name=iname, dtype=dtype))
            flat.append(fake_mode.from_tensor(torch.empty((), dtype=dtype, device="meta")))
        else:
            raise LoweringError(
                f"{name}: input {iname!r} is a {type(x).__name__}; only tensors and numbers are lowered"
            )
    attrs = TensorAttributes(model)
    for aname, t in zip(attrs.names, attrs.values):
        placeholders.append(Placeholder(kind="attr", name=aname, dtype=t.dtype))
        flat.append(fake(t))
    n_state, n_carriers, n_inputs = len(state), len(carriers.tensors), len(placeholders) - len(attrs.names)
    keys = list(state)
    current: dict = {}

    def forward(*args):
        params = dict(zip(keys, args[:n_state]))
        current["carriers"] = args[n_state : n_state + n_carriers]
        attr_values = args[n_inputs:]
        attrs.install(attr_values)
        out = torch.func.functional_call(model, params, tuple(args[n_state + n_carriers : n_inputs]))
        current["tuple"] = isinstance(out, (tuple, list))
        current["after"] = attrs.after_forward(attr_values)
        if not current["after"]:
            return out
        # every attribute's value after the call, as trailing outputs: state.split_writes keeps the changed ones
        return (*(out if isinstance(out, (tuple, list)) else (out,)), *(now for _, now, _ in current["after"]))

    try:
        with _patched(model, patched, lambda: current["carriers"]):
            gm = make_fx(forward, decomposition_table=decompositions(), tracing_mode="fake")(*flat)
        if _aliased_writes(gm):
            gm = _functionalize(gm, name)
        _out_of_place(gm)
        _copies(gm, fake_mode)
        gm.graph.eliminate_dead_code()  # views that functionalization regenerates after a write and nothing reads
        gm.recompile()
    except LoweringError:
        raise
    except Exception as exc:
        text = " ".join(str(exc).split())[:300]
        if "convert all Tensors to FakeTensors" in text:
            raise LoweringError(
                f"{name}: forward reads a tensor that is none of an input, a parameter, a buffer or a plain tensor "
                f"attribute of a module (a tensor in a list, a dict or a global is not lifted): {text}"
            ) from exc
        raise LoweringError(f"{name}: cannot trace the forward to aten ops: {type(exc).__name__}: {text}") from exc
    finally:
        attrs.restore()
    outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    tuple_output = bool(current.get("tuple"))
    n_out = len(outputs) if isinstance(outputs, (tuple, list)) else 1
    writes: tuple = ()
    if current["after"]:
        n_out -= len(current["after"])
        attr_nodes = [n for n in gm.graph.nodes if n.op == "placeholder"][n_inputs:]
        by_slot = [attr_nodes[i] for _, _, i, _ in attrs.slots]
        writes = split_writes(gm, n_out, tuple_output, current["after"], by_slot)
    values = getattr(env, "backed_var_to_val", None)  # empty, not missing, in a static capture
    values = env.var_to_val if values is None else values
    hints = {s: int(v) for s, v in values.items()}
    return Captured(
        gm=gm,
        placeholders=placeholders,
        n_outputs=n_out,
        tuple_output=tuple_output,
        shape_env=env,
        input_names=input_names,
        init=init,
        hints=hints,
        writes=writes,
    )
