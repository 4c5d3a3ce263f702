"""From the traced aten graph to the lowered program: one function per aten op.

Each lowering takes the op's operands as `Value`s (or sympy sizes, or Python constants) and returns a
`Value`. Pointwise ops and views return lazy index functions; reductions, contractions, scans and
pooling create a task that writes a buffer and return a view of it. Type promotion is not
re-derived: each op's result dtype is read from the traced graph's metadata (`node.meta["val"]`).
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Optional, Sequence

import sympy
import torch

from agent.proposers.lowering import ir
from agent.proposers.lowering.ir import (
    BOOL,
    F32,
    FLOATS,
    I64,
    Buffer,
    BufferValue,
    Const,
    E,
    Index,
    Lazy,
    Load,
    LoweringError,
    Masked,
    MatmulTask,
    One,
    Op,
    ReductionTask,
    ScanTask,
    UnsupportedOps,
    Value,
    Zero,
    compute_dtype,
    flat_index,
    index_vars,
    prod,
    same,
    sym,
    unflatten,
)

aten = torch.ops.aten
SCHEDULES = (
    "pointwise",
    "reduction",
    "row-wise normalisation",
    "scan",
    "window (pooling)",
    "contraction (matmul, implicit-GEMM convolution)",
)

LOWERINGS: dict[Any, Callable] = {}


def register(*targets):
    def wrap(fn):
        for t in targets:
            LOWERINGS[t] = fn
        return fn

    return wrap


# ---------------------------------------------------------------- the program being built


class Program:
    """Buffers, tasks and symbol bindings of one lowered graph."""

    def __init__(self):
        self.buffers: dict[str, Buffer] = {}
        self.tasks: list[ir.Task] = []
        self.bindings: dict[sympy.Symbol, str] = {}  # size symbol -> Python expression in the wrapper
        self.checks: list[tuple[str, sympy.Expr, str]] = []  # (python expr, expected size, what)
        self.inputs: list[str] = []  # forward's input names, in order
        self.outputs: list[tuple[str, tuple]] = []  # (buffer name, shape to view it as)
        self.tuple_output = False
        self.writes: list[tuple[str, str]] = []  # (attribute, "assign" | "copy") per trailing output: state.py
        self.derived: dict = {}  # wrapper-computed scalar name -> sympy expression
        self._n = 0

    def new_buffer(self, shape, storage: str, kind: str = "temp", source: str = "", prefix: str = "buf") -> Buffer:
        name = f"{prefix}{self._n}"
        self._n += 1
        buf = Buffer(name=name, shape=tuple(sym(s) for s in shape), storage=storage, kind=kind, source=source)
        self.buffers[name] = buf
        return buf

    def add(self, task: ir.Task) -> BufferValue:
        self.tasks.append(task)
        return BufferValue(task.out)


def _storage(dtype: str) -> str:
    return {F32: "float32", ir.F64: "float64", I64: "int64", ir.I32: "int32", BOOL: "bool"}[dtype]


# ---------------------------------------------------------------- helpers


def broadcast_shapes(*shapes: Sequence) -> tuple:
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(nd):
        size = One
        for s in shapes:
            j = i - (nd - len(s))
            if j < 0:
                continue
            if s[j] != One:
                size = s[j]
        out.append(size)
    return tuple(out)


def bload(v: Value, out_shape: Sequence, idx: Sequence) -> E:
    """Load `v` broadcast to `out_shape` (right-aligned; size-1 dims read index 0)."""
    off = len(out_shape) - len(v.shape)
    sub = [Zero if v.shape[i] == One else idx[off + i] for i in range(len(v.shape))]
    return v.load(sub)


def cast(e: E, dtype: str) -> E:
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        value = e.value
        if dtype in FLOATS:
            value = float(value)
        elif dtype == BOOL:
            value = bool(value)
        else:
            value = int(value)
        return Const(dtype, value)
    return Op(dtype, "cast", (e,), (dtype,))


def as_value(x: Any, dtype: Optional[str] = None) -> Value:
    """A Python number as a 0-d value."""
    if isinstance(x, Value):
        return x
    if isinstance(x, bool):
        d = dtype or BOOL
    elif isinstance(x, int):
        d = dtype or I64
    elif isinstance(x, float):
        d = dtype or F32
    elif isinstance(x, sympy.Basic):
        expr = x
        return Lazy(
            (),
            dtype or (F32 if not expr.is_integer else I64),
            lambda idx, expr=expr, d=dtype: cast(Index(I64, expr), d or (F32 if not expr.is_integer else I64)),
        )
    else:
        raise LoweringError(f"internal: cannot use {type(x).__name__} as a tensor")
    value = x
    return Lazy((), d, lambda idx, value=value, d=d: Const(d, value))


def pointwise(out_dtype: str, fn: Callable[..., E], *values: Value, compute: Optional[str] = None) -> Lazy:
    """out[i] = fn(*(v[i] for v)) with broadcasting; each operand is cast to `compute` (default: out dtype)."""
    vals = [as_value(v) for v in values]
    shape = broadcast_shapes(*(v.shape for v in vals))
    c = compute or out_dtype

    def load(idx):
        return fn(*[cast(bload(v, shape, idx), c) for v in vals])

    return Lazy(shape, out_dtype, load)


def result_dtype(node) -> str:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        val = val[0]
    if isinstance(val, torch.Tensor):
        return compute_dtype(val.dtype)
    return F32


def norm_dims(dims, rank: int) -> tuple:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({d % rank if rank else 0 for d in dims}))


# ---------------------------------------------------------------- pointwise ops


def _unary(op: str):
    def lower(lw, node, x, *rest, **kw):
        d = result_dtype(node)
        return pointwise(d, lambda a: Op(d, op, (a,)), x, compute=d)

    return lower


for _name, _op in {
    "exp": "exp",
    "log": "log",
    "log1p": "log1p",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "sin": "sin",
    "cos": "cos",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "erf": "erf",
    "abs": "abs",
    "neg": "neg",
    "relu": "relu",
    "floor": "floor",
    "ceil": "ceil",
    "trunc": "trunc",
    "round": "round",
    "sign": "sign",
    "exp2": "exp2",
    "log2": "log2",
    "reciprocal": "reciprocal",
    "expm1": "expm1",
    "logical_not": "not",
    "bitwise_not": "not",
    "isnan": "isnan",
    "sgn": "sign",
    "silu": "silu",
    "log10": "log10",
}.items():
    packet = getattr(aten, _name, None)
    if packet is not None:
        register(*[getattr(packet, o) for o in packet.overloads()])(_unary(_op))
    prim = getattr(torch.ops.prims, _name, None)
    if prim is not None:
        register(*[getattr(prim, o) for o in prim.overloads()])(_unary(_op))


def _binary(op: str, compare: bool = False):
    def lower(lw, node, a, b, *rest, alpha=None, **kw):
        d = result_dtype(node)
        if alpha is None and rest:
            alpha = rest[0]
        if compare or op in ("and", "or", "xor"):
            va, vb = as_value(a), as_value(b)
            c = F32 if (va.dtype in FLOATS or vb.dtype in FLOATS) else (BOOL if op in ("and", "or", "xor") else I64)
            return pointwise(d, lambda x, y: Op(d, op, (x, y)), va, vb, compute=c)
        if alpha is not None and alpha != 1:
            scale = alpha
            return pointwise(d, lambda x, y: Op(d, op, (x, Op(d, "mul", (y, Const(d, scale))))), a, b, compute=d)
        return pointwise(d, lambda x, y: Op(d, op, (x, y)), a, b, compute=d)

    return lower


for _name, _op, _cmp in (
    ("add", "add", False),
    ("sub", "sub", False),
    ("mul", "mul", False),
    ("maximum", "maximum", False),
    ("minimum", "minimum", False),
    ("fmax", "maximum", False),
    ("fmin", "minimum", False),
    ("eq", "eq", True),
    ("ne", "ne", True),
    ("lt", "lt", True),
    ("le", "le", True),
    ("gt", "gt", True),
    ("ge", "ge", True),
    ("logical_and", "and", False),
    ("logical_or", "or", False),
    ("logical_xor", "xor", False),
    ("bitwise_and", "and", False),
    ("bitwise_or", "or", False),
    ("atan2", "atan2", False),
    ("remainder", "remainder", False),
    ("fmod", "fmod", False),
):
    for _ns in (aten, torch.ops.prims):
        packet = getattr(_ns, _name, None)
        if packet is not None:
            register(*[getattr(packet, o) for o in packet.overloads()])(_binary(_op, _cmp))


@register(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(lw, node, a, b, alpha=1):
    d = result_dtype(node)
    return pointwise(
        d, lambda x, y: Op(d, "sub", (y, Op(d, "mul", (x, Const(d, alpha))) if alpha != 1 else x)), a, b, compute=d
    )


@register(
    *[getattr(aten.div, o) for o in aten.div.overloads()],
    *[getattr(torch.ops.prims.div, o) for o in torch.ops.prims.div.overloads()],
)
def _div(lw, node, a, b, rounding_mode=None):
    d = result_dtype(node)
    if rounding_mode is None:
        c = d if d in FLOATS else F32
        return pointwise(d, lambda x, y: cast(Op(c, "div", (x, y)), d), a, b, compute=c)
    op = "floordiv" if rounding_mode == "floor" else "truncdiv"
    return pointwise(d, lambda x, y: Op(d, op, (x, y)), a, b, compute=d)


@register(*[getattr(aten.pow, o) for o in aten.pow.overloads()])
def _pow(lw, node, a, b):
    d = result_dtype(node)
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        e = float(b)
        return pointwise(d, lambda x: Op(d, "pow_const", (x,), (e,)), a, compute=d)
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        base = float(a)
        return pointwise(d, lambda y: Op(d, "rpow_const", (y,), (base,)), b, compute=d)
    return pointwise(d, lambda x, y: Op(d, "pow", (x, y)), a, b, compute=d)


@register(*[getattr(aten.clamp, o) for o in aten.clamp.overloads()])
def _clamp(lw, node, x, lo=None, hi=None):
    d = result_dtype(node)
    out = as_value(x)
    if lo is not None:
        out = pointwise(d, lambda v, m: Op(d, "maximum", (v, m)), out, lo, compute=d)
    if hi is not None:
        out = pointwise(d, lambda v, m: Op(d, "minimum", (v, m)), out, hi, compute=d)
    if lo is None and hi is None:
        out = pointwise(d, lambda v: v, out, compute=d)
    return out


def _clamp_side(op: str):
    def lower(lw, node, x, bound):
        d = result_dtype(node)
        return pointwise(d, lambda v, m: Op(d, op, (v, m)), x, bound, compute=d)

    return lower


register(*[getattr(aten.clamp_min, o) for o in aten.clamp_min.overloads()])(_clamp_side("maximum"))
register(*[getattr(aten.clamp_max, o) for o in aten.clamp_max.overloads()])(_clamp_side("minimum"))


@register(
    *[getattr(aten.where, o) for o in aten.where.overloads() if o != "default"],
    *[getattr(torch.ops.prims.where, o) for o in torch.ops.prims.where.overloads()],
)
def _where(lw, node, cond, a, b):
    d = result_dtype(node)
    vc, va, vb = as_value(cond), as_value(a), as_value(b)
    shape = broadcast_shapes(vc.shape, va.shape, vb.shape)

    def load(idx):
        return Op(
            d,
            "where",
            (cast(bload(vc, shape, idx), BOOL), cast(bload(va, shape, idx), d), cast(bload(vb, shape, idx), d)),
        )

    return Lazy(shape, d, load)


@register(aten._to_copy.default, torch.ops.prims.convert_element_type.default, aten.to.dtype)
def _to_copy(lw, node, x, *args, **kw):
    d = result_dtype(node)
    return pointwise(d, lambda v: cast(v, d), x, compute=as_value(x).dtype)


@register(
    aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default, aten.contiguous.default
)
def _identity(lw, node, x, *args, **kw):
    return x


@register(aten.scalar_tensor.default)
def _scalar_tensor(lw, node, value, **kw):
    d = result_dtype(node)
    return as_value(value if not isinstance(value, sympy.Basic) else value, d)


@register(aten.full.default)
def _full(lw, node, size, value, **kw):
    d = result_dtype(node)
    v = as_value(value, d)
    return Lazy([sym(s) for s in size], d, lambda idx: cast(v.load([]), d))


@register(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default, aten.empty_like.default)
def _full_like(lw, node, x, value=0, **kw):
    d = result_dtype(node)
    if node.target is aten.ones_like.default:
        value = 1
    v = as_value(value, d)
    return Lazy(x.shape, d, lambda idx: cast(v.load([]), d))


@register(aten.empty.memory_format, aten.zeros.default, aten.ones.default)
def _empty(lw, node, size, **kw):
    d = result_dtype(node)
    value = 1 if node.target is aten.ones.default else 0
    return Lazy([sym(s) for s in size], d, lambda idx: Const(d, value))


@register(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(lw, node, *args, **kw):
    d = result_dtype(node)
    if node.target is aten.arange.default:
        start, end, step = 0, args[0], 1
    elif node.target is aten.arange.start:
        start, end, step = args[0], args[1], 1
    else:
        start, end = args[0], args[1]
        step = args[2] if len(args) > 2 else kw.get("step", 1)
    if not all(isinstance(v, (int, sympy.Basic)) for v in (start, end, step)):
        raise LoweringError("arange with float bounds is not lowered")
    n = sym(sympy.ceiling((sym(end) - sym(start)) / sym(step))) if step != 1 else sym(end) - sym(start)
    return Lazy([n], d, lambda idx: cast(Index(I64, sym(start) + idx[0] * sym(step)), d))


# ---------------------------------------------------------------- views


def _reshape_value(x: Value, shape: Sequence) -> Value:
    shape = [sym(s) for s in shape]
    if -1 in [int(s) if s.is_Integer else None for s in shape]:
        known = prod([s for s in shape if not (s.is_Integer and int(s) == -1)])
        total = prod(x.shape)
        from torch.utils._sympy.functions import FloorDiv

        shape = [FloorDiv(total, known) if (s.is_Integer and int(s) == -1) else s for s in shape]
        shape = [sympy.simplify(s) for s in shape]
    if x.alias is not None:
        buf = x.alias
        return Lazy(shape, x.dtype, lambda idx: Load(x.dtype, buf.name, flat_index(shape, idx)), alias=buf)
    if len(shape) == len(x.shape) and all(same(a, b) for a, b in zip(shape, x.shape)):
        return x
    # squeeze / unsqueeze: the same dims with size-1 dims added or removed need no div/mod
    a = [s for s in x.shape if s != One]
    b = [s for s in shape if s != One]
    if len(a) == len(b) and all(same(p, q) for p, q in zip(a, b)):
        src = [i for i, s in enumerate(x.shape) if s != One]
        dst = [i for i, s in enumerate(shape) if s != One]

        def load(idx):
            sub = [Zero] * len(x.shape)
            for i, j in zip(src, dst):
                sub[i] = idx[j]
            return x.load(sub)

        return Lazy(shape, x.dtype, load, view_of=_view_base(x))

    def load(idx):
        return x.load(unflatten(flat_index(shape, idx), x.shape))

    return Lazy(shape, x.dtype, load, view_of=_view_base(x))


def _view_base(x: Value) -> Value:
    """The value a chain of reshapes starts from (so an output can be stored in its own layout)."""
    return getattr(x, "view_of", None) or x


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(lw, node, x, shape):
    return _reshape_value(x, shape)


@register(aten.unsqueeze.default)
def _unsqueeze(lw, node, x, dim):
    dim = dim % (len(x.shape) + 1)
    shape = list(x.shape[:dim]) + [One] + list(x.shape[dim:])
    return _reshape_value(x, shape)


@register(aten.squeeze.dims, aten.squeeze.dim, aten.squeeze.default)
def _squeeze(lw, node, x, dims=None):
    rank = len(x.shape)
    if dims is None:
        drop = {i for i, s in enumerate(x.shape) if s == One}
    else:
        drop = {d % rank for d in ([dims] if isinstance(dims, int) else dims) if x.shape[d % rank] == One}
    return _reshape_value(x, [s for i, s in enumerate(x.shape) if i not in drop])


@register(aten.permute.default)
def _permute(lw, node, x, dims):
    dims = [d % len(x.shape) for d in dims]
    shape = [x.shape[d] for d in dims]

    def load(idx):
        sub = [Zero] * len(dims)
        for out_axis, d in enumerate(dims):
            sub[d] = idx[out_axis]
        return x.load(sub)

    return Lazy(shape, x.dtype, load)


@register(aten.transpose.int)
def _transpose(lw, node, x, a, b):
    dims = list(range(len(x.shape)))
    a, b = a % len(dims), b % len(dims)
    dims[a], dims[b] = dims[b], dims[a]
    return _permute(lw, node, x, dims)


@register(aten.t.default)
def _t(lw, node, x):
    return x if len(x.shape) < 2 else _permute(lw, node, x, [1, 0])


@register(aten.expand.default)
def _expand(lw, node, x, size, *args, **kw):
    shape = list(x.shape)
    out = []
    off = len(size) - len(shape)
    for i, s in enumerate(size):
        s = sym(s)
        if s == -1 or (i >= off and not (shape[i - off] == One and s != One)):
            out.append(shape[i - off] if i >= off else s)
        else:
            out.append(s)

    def load(idx):
        return bload(x, out, idx)

    return Lazy(out, x.dtype, load)


def _slice_bounds(size, start, end, step) -> tuple:
    """(start, end, length) of `[start:end:step]` along a dimension of `size`: negative bounds counted
    from the end, an end past the size (or the trace's "to the end", 2**63 - 1) clipped to it."""
    start = Zero if start is None else sym(start)
    end = size if end is None or (isinstance(end, int) and end >= 2**62) else sym(end)
    if (start.is_Integer and start < 0) or (end.is_Integer and end < 0):
        start = start + size if start.is_Integer and start < 0 else start
        end = end + size if end.is_Integer and end < 0 else end
    end = sympy.Min(end, size) if not same(end, size) else size
    n = sympy.ceiling((end - start) / step) if step != 1 else end - start
    return start, end, sym(n)


@register(aten.slice.Tensor)
def _slice(lw, node, x, dim=0, start=None, end=None, step=1):
    dim = dim % len(x.shape)
    start, _, n = _slice_bounds(x.shape[dim], start, end, step)
    shape = list(x.shape)
    shape[dim] = n

    def load(idx):
        sub = list(idx)
        sub[dim] = start + idx[dim] * step
        return x.load(sub)

    return Lazy(shape, x.dtype, load)


@register(aten.split.Tensor, aten.split_with_sizes.default, aten.split.sizes)
def _split(lw, node, x, split, dim=0):
    """torch.split and Tensor.split: each piece a slice of `x` along `dim` (no copy), as the graph's
    getitems take them. An int splits into pieces of that size, the last one shorter; a list gives each
    piece's size. The number of pieces is the traced one (the node's value is a tuple of that length)."""
    dim = dim % len(x.shape)
    if isinstance(split, (list, tuple)):
        sizes = [sym(s) for s in split]
    else:
        count = len(node.meta["val"])
        step = sym(split)
        sizes = [sympy.Min(step, x.shape[dim] - i * step) for i in range(count)]
    pieces, start = [], Zero
    for n in sizes:
        pieces.append(_slice(lw, node, x, dim, start, start + n))
        start = start + n
    return pieces


@register(aten.select.int)
def _select(lw, node, x, dim, index):
    dim = dim % len(x.shape)
    index = sym(index)
    if index.is_Integer and index < 0:
        index = index + x.shape[dim]
    shape = list(x.shape[:dim]) + list(x.shape[dim + 1 :])

    def load(idx):
        return x.load(list(idx[:dim]) + [index] + list(idx[dim:]))

    return Lazy(shape, x.dtype, load)


@register(aten.slice_scatter.default)
def _slice_scatter(lw, node, base, src, dim=0, start=None, end=None, step=1):
    """`base` with `src` written over `base[start:end:step]` along `dim`: what functionalization makes of a
    write into a slice (`y[:, :c] = z`). A pointwise value over base's shape: out[i] = src[(i - start) //
    step] where i lies in the slice, else base[i]; src is loaded only where it is read."""
    d = result_dtype(node)
    base, src = as_value(base), as_value(src)
    rank = len(base.shape)
    dim = dim % rank
    start, end, n = _slice_bounds(base.shape[dim], start, end, step)
    inner = list(base.shape)
    inner[dim] = n

    def load(idx):
        off = idx[dim] - start
        inside = Op(
            BOOL,
            "and",
            (Op(BOOL, "ge", (Index(I64, off), Const(I64, 0))), Op(BOOL, "lt", (Index(I64, idx[dim]), Index(I64, end)))),
        )
        sub = list(idx)
        sub[dim] = off
        if step != 1:
            from torch.utils._sympy.functions import FloorDiv

            on_step = Op(BOOL, "eq", (Index(I64, sympy.Mod(off, step)), Const(I64, 0)))
            inside = Op(BOOL, "and", (inside, on_step))
            sub[dim] = FloorDiv(off, step)
        written = Masked(d, inside, cast(bload(src, inner, sub), d), 0)
        return Op(d, "where", (inside, written, cast(base.load(idx), d)))

    return Lazy(base.shape, d, load)


@register(aten.flip.default, torch.ops.prims.rev.default)
def _flip(lw, node, x, dims):
    dims = {d % len(x.shape) for d in dims}

    def load(idx):
        return x.load([x.shape[i] - 1 - v if i in dims else v for i, v in enumerate(idx)])

    return Lazy(x.shape, x.dtype, load)


@register(aten.cat.default)
def _cat(lw, node, tensors, dim=0):
    tensors = [t for t in tensors if not (len(t.shape) == 1 and t.shape[0] == Zero)]
    dim = dim % len(tensors[0].shape)
    d = result_dtype(node)
    offsets, acc = [], Zero
    for t in tensors:
        offsets.append(acc)
        acc = acc + t.shape[dim]
    shape = list(tensors[0].shape)
    shape[dim] = acc

    def load(idx):
        out = None
        for t, off in reversed(list(zip(tensors, offsets))):
            sub = list(idx)
            sub[dim] = idx[dim] - off
            inside = Op(
                BOOL,
                "and",
                (
                    Op(BOOL, "ge", (Index(I64, idx[dim] - off), Const(I64, 0))),
                    Op(BOOL, "lt", (Index(I64, idx[dim] - off), Index(I64, t.shape[dim]))),
                ),
            )
            value = Masked(d, inside, cast(t.load(sub), d), 0)
            out = value if out is None else Op(d, "where", (inside, value, out))
        return out

    return Lazy(shape, d, load)


# ---------------------------------------------------------------- reductions


_RED_STORAGE = {
    "sum": None,
    "max": None,
    "min": None,
    "prod": None,
    "argmax": I64,
    "argmin": I64,
    "any": BOOL,
    "all": BOOL,
}


def reduce(lw, x: Value, dims, keepdim: bool, rtype: str, out_dtype: Optional[str] = None) -> Value:
    rank = len(x.shape)
    axes = norm_dims(dims, rank) if rank else ()
    if rtype in ("argmax", "argmin") and dims is None:
        flat = _reshape_value(x, [prod(x.shape)])
        out = reduce(lw, flat, [0], False, rtype)
        return _reshape_value(out, [One] * rank) if keepdim else out
    kept = [i for i in range(rank) if i not in axes]
    red_sizes = [x.shape[i] for i in axes]
    dtype = out_dtype or _RED_STORAGE[rtype] or (x.dtype if x.dtype in FLOATS else x.dtype)
    if rtype in ("any", "all"):
        dtype = BOOL
    if all(s == One for s in red_sizes) and rtype not in ("argmax", "argmin"):
        value = x if rtype not in ("any", "all") else pointwise(BOOL, lambda v: cast(v, BOOL), x, compute=x.dtype)
        out = _reshape_value(value, [x.shape[i] for i in kept])
    elif all(s == One for s in red_sizes):
        out = Lazy([x.shape[i] for i in kept], I64, lambda idx: Const(I64, 0))
    else:
        fvars = index_vars("f", rank)
        body = x.load(fvars)
        if rtype in ("any", "all"):
            body = cast(body, BOOL)
        elif rtype in ("sum", "prod") and body.dtype not in FLOATS and dtype in FLOATS:
            body = cast(body, dtype)
        buf = lw.program.new_buffer([x.shape[i] for i in kept], _storage(dtype))
        out = lw.program.add(
            ReductionTask(out=buf, full_shape=tuple(x.shape), reduced=tuple(axes), rtype=rtype, body=body)
        )
    if keepdim:
        shape = [One if i in axes else x.shape[i] for i in range(rank)]
        out = _reshape_value(out, shape)
    return out


def _numel(x: Value, axes) -> sympy.Expr:
    return prod([x.shape[i] for i in axes])


@register(aten.sum.dim_IntList, aten.sum.default, torch.ops.prims.sum.default)
def _sum(lw, node, x, dims=None, keepdim=False, **kw):
    d = result_dtype(node)
    return reduce(lw, x, dims, keepdim, "sum", out_dtype=d)


@register(aten.mean.dim, aten.mean.default)
def _mean(lw, node, x, dims=None, keepdim=False, **kw):
    d = result_dtype(node)
    s = reduce(lw, x, dims, keepdim, "sum", out_dtype=d)
    n = _numel(x, norm_dims(dims, len(x.shape)))
    return pointwise(d, lambda v: Op(d, "div", (v, cast(Index(I64, n), d))), s, compute=d)


@register(aten.amax.default)
def _amax(lw, node, x, dims=(), keepdim=False):
    return reduce(lw, x, dims, keepdim, "max")


@register(aten.amin.default)
def _amin(lw, node, x, dims=(), keepdim=False):
    return reduce(lw, x, dims, keepdim, "min")


@register(aten.max.dim)
def _max_dim(lw, node, x, dim, keepdim=False):
    return (reduce(lw, x, [dim], keepdim, "max"), reduce(lw, x, [dim], keepdim, "argmax"))


@register(aten.min.dim)
def _min_dim(lw, node, x, dim, keepdim=False):
    return (reduce(lw, x, [dim], keepdim, "min"), reduce(lw, x, [dim], keepdim, "argmin"))


@register(aten.max.default)
def _max_all(lw, node, x):
    return reduce(lw, x, None, False, "max")


@register(aten.min.default)
def _min_all(lw, node, x):
    return reduce(lw, x, None, False, "min")


@register(aten.argmax.default)
def _argmax(lw, node, x, dim=None, keepdim=False):
    return reduce(lw, x, None if dim is None else [dim], keepdim, "argmax")


@register(aten.argmin.default)
def _argmin(lw, node, x, dim=None, keepdim=False):
    return reduce(lw, x, None if dim is None else [dim], keepdim, "argmin")


@register(aten.prod.dim_int, aten.prod.default)
def _prod(lw, node, x, dim=None, keepdim=False, **kw):
    d = result_dtype(node)
    return reduce(lw, x, None if dim is None else [dim], keepdim, "prod", out_dtype=d)


@register(*[getattr(aten.any, o) for o in aten.any.overloads()])
def _any(lw, node, x, dim=None, keepdim=False):
    return reduce(lw, x, dim, keepdim, "any")


@register(*[getattr(aten.all, o) for o in aten.all.overloads()])
def _all(lw, node, x, dim=None, keepdim=False):
    return reduce(lw, x, dim, keepdim, "all")


def _var_mean(lw, x: Value, dims, correction, keepdim: bool):
    rank = len(x.shape)
    axes = norm_dims(dims, rank)
    n = _numel(x, axes)
    d = F32 if x.dtype not in FLOATS else x.dtype
    s = reduce(lw, x, axes, True, "sum", out_dtype=d)
    mean = pointwise(d, lambda v: Op(d, "div", (v, cast(Index(I64, n), d))), s, compute=d)
    dev = pointwise(d, lambda a, m: Op(d, "mul", (Op(d, "sub", (a, m)), Op(d, "sub", (a, m)))), x, mean, compute=d)
    ss = reduce(lw, dev, axes, keepdim, "sum", out_dtype=d)
    corr = 1 if correction is None else correction
    denom = n - sym(corr)
    var = pointwise(
        d,
        lambda v: Op(
            d,
            "div",
            (
                v,
                cast(Index(I64, denom), d)
                if sym(corr).is_Integer
                else Op(d, "sub", (cast(Index(I64, n), d), Const(d, float(corr)))),
            ),
        ),
        ss,
        compute=d,
    )
    if not keepdim:
        mean = _reshape_value(mean, [x.shape[i] for i in range(rank) if i not in axes])
    return var, mean


@register(aten.var_mean.correction, aten.var_mean.dim)
def _var_mean_op(lw, node, x, dims=None, unbiased=None, keepdim=False, correction=None, **kw):
    if node.target is aten.var_mean.dim:
        correction = 1 if unbiased in (None, True) else 0
    return _var_mean(lw, x, dims, correction, keepdim)


@register(aten.var.correction, aten.var.dim)
def _var(lw, node, x, dims=None, unbiased=None, keepdim=False, correction=None, **kw):
    if node.target is aten.var.dim:
        correction = 1 if unbiased in (None, True) else 0
    return _var_mean(lw, x, dims, correction, keepdim)[0]


# ---------------------------------------------------------------- contractions


def _matmul(lw, a: Value, b: Value, batch: Sequence) -> Value:
    nb = len(batch)
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if n == One or m == One:
        return _matvec(lw, a, b, batch)
    bvars = index_vars("b", nb)
    vm, vn, vk = (sympy.Symbol(s, integer=True, nonnegative=True) for s in ("mm_m", "mm_n", "mm_k"))
    a_body = bload(a, list(batch) + [m, k], list(bvars) + [vm, vk])
    b_body = bload(b, list(batch) + [k, n], list(bvars) + [vk, vn])
    c = F32
    buf = lw.program.new_buffer(list(batch) + [m, n], _storage(c))
    return lw.program.add(MatmulTask(out=buf, batch=tuple(batch), m=m, n=n, k=k, a_body=a_body, b_body=b_body))


def _matvec(lw, a: Value, b: Value, batch: Sequence) -> Value:
    """A contraction with a size-1 side is a reduction over K (no 16-wide MMA tile to waste)."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    out_shape = list(batch) + [m, n]
    full = out_shape + [k]
    fv = index_vars("f", len(full))
    bi, vm, vn, vk = list(fv[: len(batch)]), fv[len(batch)], fv[len(batch) + 1], fv[-1]
    prod_e = Op(
        F32,
        "mul",
        (
            cast(bload(a, list(batch) + [m, k], bi + [vm, vk]), F32),
            cast(bload(b, list(batch) + [k, n], bi + [vk, vn]), F32),
        ),
    )
    buf = lw.program.new_buffer(out_shape, "float32")
    return lw.program.add(
        ReductionTask(out=buf, full_shape=tuple(full), reduced=(len(full) - 1,), rtype="sum", body=prod_e)
    )


@register(aten.mm.default)
def _mm(lw, node, a, b):
    return _matmul(lw, a, b, ())


@register(aten.bmm.default)
def _bmm(lw, node, a, b):
    return _matmul(lw, a, b, broadcast_shapes(a.shape[:-2], b.shape[:-2]))


@register(aten.addmm.default)
def _addmm(lw, node, bias, a, b, beta=1, alpha=1):
    d = result_dtype(node)
    out = _matmul(lw, a, b, ())
    return pointwise(
        d,
        lambda c, v: Op(
            d,
            "add",
            (
                Op(d, "mul", (c, Const(d, float(alpha)))) if alpha != 1 else c,
                Op(d, "mul", (v, Const(d, float(beta)))) if beta != 1 else v,
            ),
        ),
        out,
        bias,
        compute=d,
    )


@register(aten.baddbmm.default)
def _baddbmm(lw, node, bias, a, b, beta=1, alpha=1):
    d = result_dtype(node)
    out = _bmm(lw, node, a, b)
    return pointwise(
        d,
        lambda c, v: Op(
            d,
            "add",
            (
                Op(d, "mul", (c, Const(d, float(alpha)))) if alpha != 1 else c,
                Op(d, "mul", (v, Const(d, float(beta)))) if beta != 1 else v,
            ),
        ),
        out,
        bias,
        compute=d,
    )


# ---------------------------------------------------------------- scans


def _scan(lw, node, x, dim, rtype):
    d = result_dtype(node)
    rank = len(x.shape)
    if rank == 0:
        return pointwise(d, lambda v: v, x, compute=d)
    axis = dim % rank
    if x.shape[axis] == One:
        return pointwise(d, lambda v: v, x, compute=d)
    xv = index_vars("x", rank)
    body = cast(x.load(xv), d)
    buf = lw.program.new_buffer(x.shape, _storage(d))
    return lw.program.add(ScanTask(out=buf, axis=axis, rtype=rtype, body=body))


@register(aten.cumsum.default)
def _cumsum(lw, node, x, dim, dtype=None):
    return _scan(lw, node, x, dim, "sum")


@register(aten.cumprod.default)
def _cumprod(lw, node, x, dim, dtype=None):
    return _scan(lw, node, x, dim, "prod")


# ---------------------------------------------------------------- pooling (a reduction over window axes)


def _pool(lw, node, x, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor):
    from torch.utils._sympy.functions import FloorDiv

    nd = len(kernel)
    lead = list(x.shape[:-nd])
    sizes = list(x.shape[-nd:])
    k, s, p, dl = ([sym(v) for v in vals] for vals in (kernel, stride, padding, dilation))
    spans = [sizes[i] + 2 * p[i] - dl[i] * (k[i] - 1) - 1 for i in range(nd)]
    if ceil_mode:
        # capture.pool_out_size: rounded up, less a last window that would start in the right padding.
        # That window's positions past the input are masked below, and the average's divisor clamps
        # at the padded edge as PyTorch's does.
        outs = [
            sympy.Min(FloorDiv(spans[i] + s[i] - 1, s[i]), FloorDiv(sizes[i] + p[i] - 1, s[i])) + 1 for i in range(nd)
        ]
    else:
        outs = [FloorDiv(spans[i], s[i]) + 1 for i in range(nd)]
    full = lead + outs + k
    rank = len(full)
    reduced = tuple(range(len(lead) + nd, rank))
    fv = index_vars("f", rank)
    ov, wv = fv[len(lead) : len(lead) + nd], fv[len(lead) + nd :]
    pos = [ov[i] * s[i] - p[i] + wv[i] * dl[i] for i in range(nd)]
    cond = None
    for i in range(nd):
        c = Op(
            BOOL,
            "and",
            (
                Op(BOOL, "ge", (Index(I64, pos[i]), Const(I64, 0))),
                Op(BOOL, "lt", (Index(I64, pos[i]), Index(I64, sizes[i]))),
            ),
        )
        cond = c if cond is None else Op(BOOL, "and", (cond, c))
    d = x.dtype if x.dtype in FLOATS else F32
    inner = cast(x.load(list(fv[: len(lead)]) + pos), d)
    other = float("-inf") if kind == "max" else 0.0
    body = Masked(d, cond, inner, other)
    buf = lw.program.new_buffer(lead + outs, _storage(d))
    red = lw.program.add(
        ReductionTask(
            out=buf, full_shape=tuple(full), reduced=reduced, rtype="max" if kind == "max" else "sum", body=body
        )
    )
    if kind == "max":
        return red
    if divisor is not None:
        return pointwise(d, lambda v: Op(d, "div", (v, Const(d, float(divisor)))), red, compute=d)

    def count(idx):
        # One integer factor per pooled dim, multiplied in the kernel: a single index expression of
        # the product gets expanded (reindex) into ~100 terms for a 3-D window, each an op per output.
        total = None
        for i in range(nd):
            start = idx[len(lead) + i] * s[i] - p[i]
            if count_include_pad:
                n = sympy.Min(start + k[i], sizes[i] + p[i]) - start
            else:
                n = sympy.Min(start + k[i], sizes[i]) - sympy.Max(start, 0)
            total = Index(I64, n) if total is None else Op(I64, "mul", (total, Index(I64, n)))
        return total

    def load(idx):
        return Op(d, "div", (cast(red.load(idx), d), cast(count(idx), d)))

    return Lazy(red.shape, d, load)


LOWERINGS["kscout::pool"] = _pool


# ---------------------------------------------------------------- convolution as an implicit GEMM


def _conv(lw, node, x, w, bias, stride, padding, dilation, groups):
    """out[n, g*OCg + m, o] = sum_k W[g*OCg + m, k] * im2col(x)[n, g, k, o]: a GEMM batched over (sample,
    group), M = output channels per group, N = output positions, K = input channels per group x window;
    the result lands in the conv output layout directly (no transpose), so epilogues fuse."""
    from torch.utils._sympy.functions import FloorDiv

    nd = len(w.shape) - 2
    n_ = x.shape[0]
    oc, icg = w.shape[0], w.shape[1]
    ks = list(w.shape[2:])
    sizes = list(x.shape[2:])
    s, p, dl = ([sym(v) for v in vals] for vals in (stride, padding, dilation))
    g = sym(groups)
    ocg = oc if g == One else FloorDiv(oc, g)
    outs = [FloorDiv(sizes[i] + 2 * p[i] - dl[i] * (ks[i] - 1) - 1, s[i]) + 1 for i in range(nd)]
    kdim = icg * prod(ks)
    ndim = prod(outs)
    b0, b1 = index_vars("b", 2)
    vm, vn, vk = (sympy.Symbol(v, integer=True, nonnegative=True) for v in ("mm_m", "mm_n", "mm_k"))
    och = b1 * ocg + vm
    if isinstance(w, BufferValue):
        a_body = cast(Load(w.dtype, w.buffer.name, sympy.expand(och * kdim + vk)), F32)
    else:
        a_body = cast(w.load([och] + unflatten(vk, [icg] + ks)), F32)
    kk = unflatten(vk, [icg] + ks)
    ic, win = kk[0], kk[1:]
    pos_o = unflatten(vn, outs)
    pos = [pos_o[i] * s[i] - p[i] + win[i] * dl[i] for i in range(nd)]
    cond = None
    for i in range(nd):
        ci = Op(
            BOOL,
            "and",
            (
                Op(BOOL, "ge", (Index(I64, pos[i]), Const(I64, 0))),
                Op(BOOL, "lt", (Index(I64, pos[i]), Index(I64, sizes[i]))),
            ),
        )
        cond = ci if cond is None else Op(BOOL, "and", (cond, ci))
    inner = cast(x.load([b0, b1 * icg + ic] + pos), F32)
    b_body = Masked(F32, cond, inner, 0.0) if cond is not None else inner
    out_shape = [n_, oc] + outs
    buf = lw.program.new_buffer(out_shape, "float32")
    coords = tuple([b0, och] + unflatten(vn, outs))
    call = _library_conv(x, w, "conv", stride=s, padding=p, dilation=dl, groups=g)
    out = lw.program.add(
        MatmulTask(
            out=buf, batch=(n_, g), m=ocg, n=ndim, k=kdim, a_body=a_body, b_body=b_body, out_index=coords, library=call
        )
    )
    if bias is None:
        return out
    d = result_dtype(node)
    return pointwise(
        d, lambda v, bv: Op(d, "add", (v, bv)), out, _reshape_value(bias, [One, oc] + [One] * nd), compute=d
    )


LOWERINGS["kscout::conv"] = _conv


def _library_conv(x, w, kind: str, **kwargs) -> Optional[tuple]:
    """The convolution as a library call (MatmulTask.library) where input and weight are plain buffers."""
    if not (isinstance(x, BufferValue) and isinstance(w, BufferValue)):
        return None
    args = tuple((k, tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in sorted(kwargs.items()))
    return (kind, x.buffer.name, w.buffer.name, args)


def _conv_t(lw, node, x, w, bias, stride, padding, output_padding, dilation, groups):
    """A transposed convolution as a gathering implicit GEMM: output position o takes input position
    i = (o + p - k*d) / s for each window offset k where that division is exact and i is in range.
    Weight layout (IC, OC/G, K...): A[m, (ic, k)] = W[g*ICg + ic, m, k]."""
    from torch.utils._sympy.functions import FloorDiv

    from agent.proposers.lowering.capture import conv_t_out_size

    nd = len(w.shape) - 2
    n_, c = x.shape[0], x.shape[1]
    ocg = w.shape[1]
    ks = list(w.shape[2:])
    sizes = list(x.shape[2:])
    s, p, op, dl = ([sym(v) for v in vals] for vals in (stride, padding, output_padding, dilation))
    g = sym(groups)
    icg = c if g == One else FloorDiv(c, g)
    outs = [conv_t_out_size(sizes[i], ks[i], s[i], p[i], op[i], dl[i]) for i in range(nd)]
    kprod = prod(ks)
    kdim = icg * kprod
    b0, b1 = index_vars("b", 2)
    vm, vn, vk = (sympy.Symbol(v, integer=True, nonnegative=True) for v in ("mm_m", "mm_n", "mm_k"))
    kk = unflatten(vk, [icg] + ks)
    ic, win = kk[0], kk[1:]
    if isinstance(w, BufferValue):
        a_body = cast(
            Load(w.dtype, w.buffer.name, sympy.expand(((b1 * icg + ic) * ocg + vm) * kprod + flat_index(ks, win))), F32
        )
    else:
        a_body = cast(w.load([b1 * icg + ic, vm] + win), F32)
    pos_o = unflatten(vn, outs)
    cond = None
    src = []
    for i in range(nd):
        num = pos_o[i] + p[i] - win[i] * dl[i]
        src.append(FloorDiv(num, s[i]) if s[i] != One else num)
        ok = Op(
            BOOL,
            "and",
            (
                Op(BOOL, "ge", (Index(I64, num), Const(I64, 0))),
                Op(BOOL, "lt", (Index(I64, num), Index(I64, sizes[i] * s[i]))),
            ),
        )
        if s[i] != One:
            ok = Op(
                BOOL, "and", (ok, Op(BOOL, "eq", (Index(I64, sympy.Mod(num + s[i] * sizes[i], s[i])), Const(I64, 0))))
            )
        cond = ok if cond is None else Op(BOOL, "and", (cond, ok))
    inner = cast(x.load([b0, b1 * icg + ic] + src), F32)
    b_body = Masked(F32, cond, inner, 0.0)
    oc = ocg * g
    out_shape = [n_, oc] + outs
    buf = lw.program.new_buffer(out_shape, "float32")
    coords = tuple([b0, b1 * ocg + vm] + unflatten(vn, outs))
    call = _library_conv(x, w, "conv_t", stride=s, padding=p, output_padding=op, groups=g, dilation=dl)
    out = lw.program.add(
        MatmulTask(
            out=buf,
            batch=(n_, g),
            m=ocg,
            n=prod(outs),
            k=kdim,
            a_body=a_body,
            b_body=b_body,
            out_index=coords,
            library=call,
        )
    )
    if bias is None:
        return out
    d = result_dtype(node)
    return pointwise(
        d, lambda v, bv: Op(d, "add", (v, bv)), out, _reshape_value(bias, [One, oc] + [One] * nd), compute=d
    )


LOWERINGS["kscout::conv_t"] = _conv_t


# ---------------------------------------------------------------- symbolic integer arithmetic on sizes


def _sym_pow(a, b):
    return sym(a) ** sym(b)


SYM_OPS = {
    operator.add: lambda a, b: sym(a) + sym(b),
    operator.sub: lambda a, b: sym(a) - sym(b),
    operator.mul: lambda a, b: sym(a) * sym(b),
    operator.neg: lambda a: -sym(a),
    operator.truediv: lambda a, b: sym(a) / sym(b),
    operator.floordiv: lambda a, b: __import__("torch.utils._sympy.functions", fromlist=["FloorDiv"]).FloorDiv(
        sym(a), sym(b)
    ),
    operator.mod: lambda a, b: sympy.Mod(sym(a), sym(b)),
    operator.pow: _sym_pow,
    math.sqrt: lambda a: sympy.sqrt(sym(a)),
    torch.sym_float: lambda a: sympy.Float(1.0) * sym(a),
    torch.sym_int: lambda a: sympy.floor(sym(a)),
    torch.sym_sqrt: lambda a: sympy.sqrt(sym(a)),
    torch.sym_max: lambda a, b: sympy.Max(sym(a), sym(b)),
    torch.sym_min: lambda a, b: sympy.Min(sym(a), sym(b)),
}


def is_getitem(target) -> bool:
    return target is operator.getitem


def unsupported(ops: Sequence[str], where: str = "") -> UnsupportedOps:
    return UnsupportedOps(ops, SCHEDULES, where)
