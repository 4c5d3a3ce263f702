"""Writing the candidate: one Triton kernel per fusion group (a jinja2 template per schedule kind) and a
`ModelNew` whose forward binds the sizes, allocates buffers and launches the kernels in order.

The kernels take every size as an argument and the wrapper picks block sizes from the actual sizes
and the group's knobs, so one candidate serves every shape case. Reads of a buffer the same kernel
produces are replaced by the value in registers (a reduction's result, the matmul accumulator) or by
the producer's expression; a read that is not at the producer's own index cannot be served that way
and raises FusionError, which makes the scheduler split the group.
"""

from __future__ import annotations

import functools
from typing import Optional

import jinja2
import sympy

from agent.proposers.lowering import ir
from agent.proposers.lowering.ir import (
    BOOL,
    F32,
    FLOATS,
    I64,
    Arg,
    Buffer,
    E,
    Load,
    LoweringError,
    MatmulTask,
    One,
    PointwiseTask,
    ReductionTask,
    ScanTask,
    flat_index,
    index_vars,
    reindex,
    same,
    walk,
)
from agent.proposers.lowering.lowerings import Program
from agent.proposers.lowering.printer import Axis, Writer, sympy_text
from agent.proposers.lowering.schedule import Group

CANDIDATE_INDENT = " " * 8


class FusionError(LoweringError):
    """A group whose tasks cannot share one kernel (a read of a fused buffer at another index)."""

    def __init__(self, head: str, task: str, why: str):
        super().__init__(f"cannot fuse {task} into the kernel of {head}: {why}")
        self.pair = (head, task)


@functools.lru_cache(maxsize=1)
def env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("agent.proposers.lowering", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


COMBINERS = {
    "argmax": """@triton.jit
def _kscout_argmax(a, ai, b, bi):
    take = (a > b) | ((a == b) & (ai < bi))
    return tl.where(take, a, b), tl.where(take, ai, bi)""",
    "argmin": """@triton.jit
def _kscout_argmin(a, ai, b, bi):
    take = (a < b) | ((a == b) & (ai < bi))
    return tl.where(take, a, b), tl.where(take, ai, bi)""",
    "mul": """@triton.jit
def _kscout_mul(a, b):
    return a * b""",
}


def _indent(lines: list[str], n: int) -> str:
    pad = " " * n
    return "\n".join(pad + line if line.strip() else "" for line in lines) if lines else pad + "pass"


class _Kernel:
    """What one kernel needs from the wrapper: buffers, sizes and scalars it uses."""

    def __init__(self, program: Program, name: str):
        self.program = program
        self.name = name
        self.buffers: list[str] = []
        self.sizes: set = set()
        self.args: set[str] = set()
        self.combiners: set[str] = set()

    def use_buffer(self, name: str) -> str:
        if name not in self.buffers:
            self.buffers.append(name)
        return name

    def size(self, expr) -> str:
        e = sympy.sympify(expr)
        self.sizes |= {s for s in e.free_symbols if not _is_index(s)}
        return sympy_text(e)

    def note_expr(self, e: E) -> None:
        for x in walk(e):
            if isinstance(x, Arg):
                self.args.add(x.name)

    def writer(self, axes: dict, lines: list, counter: list, resolve=None, indent: str = "    ") -> Writer:
        w = _TrackingWriter(self, axes, lines, counter=counter, resolve=resolve, indent=indent)
        return w

    def params(self) -> str:
        names = list(self.buffers) + sorted(s.name for s in self.sizes) + sorted(self.args)
        return "".join(f"{n}, " for n in names)

    def call_args(self) -> list[str]:
        out = []
        for b in self.buffers:
            out.append(b)
        out += sorted(s.name for s in self.sizes)
        out += sorted(self.args)
        return out


def _is_index(s) -> bool:
    return s.name[:1] in ("x", "f", "b", "r") and s.name[1:].isdigit() or s.name.startswith("mm_")


class _TrackingWriter(Writer):
    def __init__(self, kernel: _Kernel, axes, lines, counter, resolve, indent):
        super().__init__(axes, lines, counter=counter, resolve=resolve, indent=indent)
        self.kernel = kernel

    def index(self, expr) -> str:
        e = sympy.sympify(expr)
        self.kernel.sizes |= {s for s in e.free_symbols if s not in self.axes and not _is_index(s)}
        return super().index(e)

    def _value(self, e: E) -> str:
        if isinstance(e, Load):
            self.buffers[e.buffer] = e.buffer
            out = super()._value(e)
            return out
        if isinstance(e, Arg):
            self.kernel.args.add(e.name)
        return super()._value(e)


def _loads_used(kernel: _Kernel, lines: list[str], candidates: set[str]) -> None:
    text = "\n".join(lines)
    for name in sorted(candidates):
        if f"tl.load({name} " in text or f"tl.store({name} " in text:
            kernel.use_buffer(name)


# ---------------------------------------------------------------- decomposing a flat index


def _decompose(var: str, dims: list, sizes: list, kernel: _Kernel, indent: int) -> list[str]:
    """Lines that split the flat index `var` into one variable per dim (row-major over `sizes`)."""
    lines = []
    for j, (name, size) in enumerate(zip(dims, sizes)):
        stride = ir.prod(sizes[j + 1 :])
        if size == One:
            lines.append(f"{name} = {var} * 0")
            continue
        expr = var
        if stride != One:
            expr = f"({var} // ({kernel.size(stride)}))"
        if j > 0:
            expr = f"({expr} % ({kernel.size(size)}))"
        lines.append(f"{name} = {expr}")
    return [" " * indent + line for line in lines]


# ---------------------------------------------------------------- reading inside a group


class _Resolver:
    """Serves reads of buffers produced inside the kernel from registers or the producer's expression."""

    def __init__(self, head: str):
        self.head = head
        self.registers: dict[str, tuple] = {}  # buffer -> (expected flat index, variable name)
        self.inline: dict[str, tuple] = {}  # buffer -> (expected flat index, replacement expression)
        self.pending: set[str] = set()  # produced in the kernel, not yet available
        self.current = ""

    def __call__(self, load: Load):
        if load.buffer in self.registers:
            expected, var = self.registers[load.buffer]
            if same(load.index, expected):
                return var
            raise FusionError(self.head, self.current, f"{load.buffer} is read at another index")
        if load.buffer in self.inline:
            expected, value = self.inline[load.buffer]
            if same(load.index, expected):
                return value
            raise FusionError(self.head, self.current, f"{load.buffer} is read at another index")
        if load.buffer in self.pending:
            raise FusionError(self.head, self.current, f"{load.buffer} is read before it is computed")
        return None


_XR = "[XBLOCK, RBLOCK]"

ORDERS = ("xr", "rx")


class _Layout:
    """Where a reduction tile puts its kept and reduced indices. "xr": [XBLOCK, RBLOCK], kept rows along
    axis 0, reduced along axis 1 (contiguous when the reduced dims are innermost). "rx": [RBLOCK,
    XBLOCK], reduced along axis 0, kept along axis 1: when the kept dims are the contiguous ones (a sum
    over dim 1 of [B, C, L]) neighbouring lanes then read neighbouring addresses."""

    def __init__(self, order: str = "xr"):
        if order not in ORDERS:
            raise LoweringError(f"unknown reduction order {order!r}; one of {ORDERS}")
        self.order = order
        rx = order == "rx"
        self.axis = 0 if rx else 1  # the reduced axis
        self.keep = "[None, :]" if rx else "[:, None]"  # a reduced value back to a tile dim
        self.tile = "[RBLOCK, XBLOCK]" if rx else _XR
        self.kept_tile = "[1, XBLOCK]" if rx else "[XBLOCK, 1]"


def _tile(text: str, shape: str) -> str:
    """An offset or value broadcast to the kernel's tile (an index may skip a size-1 dim's variable)."""
    return f"tl.broadcast_to({text}, {shape})"


def _cast_store(value: str, ptr: str) -> str:
    return f"{value}.to({ptr}.dtype.element_ty)"


# ---------------------------------------------------------------- pointwise


def pointwise_kernel(g: Group, kernel: _Kernel, store: set[str]) -> dict:
    shape = list(g.head.out.shape)
    n = len(shape)
    xv = index_vars("x", n)
    axes = {v: Axis(v.name, "xmask") for v in xv}
    lines: list[str] = []
    counter = [0]
    resolver = _Resolver(g.head.out.name)
    resolver.pending = {t.out.name for t in g.tasks}
    flat = flat_index(shape, xv)
    w = kernel.writer(axes, lines, counter, resolve=resolver)
    w.index = _flat_alias(w.index, flat, "xindex")
    stores = []
    for t in g.tasks:
        resolver.current = t.out.name
        kernel.note_expr(t.body)
        v = w.value(t.body)
        resolver.pending.discard(t.out.name)
        resolver.registers[t.out.name] = (flat, v)
        if t.out.name in store:
            kernel.use_buffer(t.out.name)
            stores.append(
                f"    tl.store({t.out.name} + (xindex), {_cast_store(_tile(v, '[XBLOCK]'), t.out.name)}, xmask)"
            )
    decomp = _decompose("xindex", [v.name for v in xv], shape, kernel, 4)
    _loads_used(kernel, lines, set(kernel.program.buffers))
    body = "\n".join(decomp + lines + stores)
    return dict(xnumel=kernel.size(ir.prod(shape)), body=body, shape=", ".join(sympy_text(s) for s in shape))


def _flat_alias(index_fn, flat, name):
    def index(expr):
        if same(expr, flat) and not sympy.sympify(flat).is_number:
            return name
        return index_fn(expr)

    return index


# ---------------------------------------------------------------- reductions, rows and windows


_INIT = {
    "sum": "0",
    "prod": "1",
    "max": "float('-inf')",
    "min": "float('inf')",
    "any": "0",
    "all": "1",
    "argmax": "float('-inf')",
    "argmin": "float('inf')",
}


def _acc_dtype(t: ReductionTask) -> str:
    if t.rtype in ("argmax", "argmin"):
        return "tl.float32" if t.body.dtype in FLOATS else "tl.int64"
    if t.rtype in ("any", "all"):
        return "tl.int32"
    return "tl.float32" if t.body.dtype in FLOATS else ("tl.float64" if t.body.dtype == ir.F64 else "tl.int64")


def _neutral(t: ReductionTask, acc: str) -> str:
    init = _INIT[t.rtype]
    if acc == "tl.int64" and init.startswith("float"):
        return "-9223372036854775807" if "-" in init else "9223372036854775807"
    return init


def _red_update(
    t: ReductionTask, v: str, acc: str, j: int, mask: str, single: bool, kernel: _Kernel, lay: _Layout
) -> list[str]:
    """Lines accumulating value `v` into reduction j's accumulator (single: reducing the row at once)."""
    ax, keep = lay.axis, lay.keep
    init = _neutral(t, acc)
    masked = f"tl.where({mask}, {v}, {init})"
    if t.rtype in ("any", "all"):
        masked = f"tl.where({mask}, ({v} != 0).to(tl.int32), {init})"
    else:
        masked = f"tl.where({mask}, {v}.to({acc}), {init})"
    r = f"red{j}"
    if single:
        if t.rtype == "sum":
            return [f"{r} = tl.sum({masked}, {ax}){keep}"]
        if t.rtype in ("max", "any"):
            return [f"{r} = tl.max({masked}, {ax}){keep}"]
        if t.rtype in ("min", "all"):
            return [f"{r} = tl.min({masked}, {ax}){keep}"]
        if t.rtype == "prod":
            kernel.combiners.add("mul")
            return [f"{r} = tl.reduce({masked}, {ax}, _kscout_mul){keep}"]
        kernel.combiners.add(t.rtype)
        return [
            f"_, {r} = tl.reduce(({masked}, tl.broadcast_to(rindex, {masked}.shape).to(tl.int64)), {ax}, "
            f"_kscout_{t.rtype})",
            f"{r} = {r}{keep}",
        ]
    a = f"acc{j}"
    if t.rtype == "sum" and _compensated(acc):
        # Kahan: each lane's running sum carries what its last addition rounded off. Plain, a lane that
        # adds thousands of values near 1e4 to a sum past 2**24 drops every fraction, the same way each
        # time: an instance norm over 4M-wide rows came out 1.2 off (PyTorch, summing in a tree, 4e-4).
        return [
            f"{a}_y = {masked} - {a}_c",
            f"{a}_t = {a} + {a}_y",
            f"{a}_c = ({a}_t - {a}) - {a}_y",
            f"{a} = {a}_t",
        ]
    if t.rtype == "sum":
        return [f"{a} = {a} + {masked}"]
    if t.rtype == "prod":
        return [f"{a} = {a} * {masked}"]
    if t.rtype in ("max", "any"):
        return [f"{a} = tl.maximum({a}, {masked})"]
    if t.rtype in ("min", "all"):
        return [f"{a} = tl.minimum({a}, {masked})"]
    cmp = ">" if t.rtype == "argmax" else "<"
    return [
        f"vv{j} = {masked}",
        f"better{j} = vv{j} {cmp} {a}",
        f"{a}_i = tl.where(better{j}, tl.broadcast_to(rindex, {a}_i.shape).to(tl.int64), {a}_i)",
        f"{a} = tl.where(better{j}, vv{j}, {a})",
    ]


def _compensated(acc: str) -> bool:
    """Whether a looped sum in this accumulator dtype carries a Kahan compensation term."""
    return acc in ("tl.float32", "tl.float64")


def _red_init(t: ReductionTask, acc: str, j: int, lay: _Layout) -> list[str]:
    a = f"acc{j}"
    out = [f"{a} = tl.full({lay.tile}, {_neutral(t, acc)}, {acc})"]
    if t.rtype in ("argmax", "argmin"):
        out.append(f"{a}_i = tl.zeros({lay.tile}, tl.int64)")
    if t.rtype == "sum" and _compensated(acc):
        out.append(f"{a}_c = tl.zeros({lay.tile}, {acc})")
    return out


def _red_final(t: ReductionTask, j: int, kernel: _Kernel, lay: _Layout) -> list[str]:
    a, r = f"acc{j}", f"red{j}"
    ax, keep = lay.axis, lay.keep
    if t.rtype == "sum" and _compensated(_acc_dtype(t)):
        # the lanes' sums in a tree, less what each lane still owes
        return [f"{r} = (tl.sum({a}, {ax}) - tl.sum({a}_c, {ax})){keep}"]
    if t.rtype == "sum":
        return [f"{r} = tl.sum({a}, {ax}){keep}"]
    if t.rtype in ("max", "any"):
        return [f"{r} = tl.max({a}, {ax}){keep}"]
    if t.rtype in ("min", "all"):
        return [f"{r} = tl.min({a}, {ax}){keep}"]
    if t.rtype == "prod":
        kernel.combiners.add("mul")
        return [f"{r} = tl.reduce({a}, {ax}, _kscout_mul){keep}"]
    kernel.combiners.add(t.rtype)
    return [f"_, {r} = tl.reduce(({a}, {a}_i), {ax}, _kscout_{t.rtype})", f"{r} = {r}{keep}"]


def reduction_kernel(g: Group, kernel: _Kernel, store: set[str], cache_hints: bool = False, order: str = "xr") -> dict:
    """`cache_hints`: in the looped form, every pass but the last keeps its loads in L2 (evict_last),
    the last streams them (evict_first). `order`: the tile layout (_Layout)."""
    lay = _Layout(order)
    tile = lay.tile
    reds = g.reductions()
    head = reds[0]
    full = list(head.full_shape)
    n = len(full)
    fv = index_vars("f", n)
    kept = [i for i in range(n) if i not in head.reduced]
    reduced = list(head.reduced)
    axes = {fv[i]: Axis(fv[i].name, "xmask" if i in kept else "rmask") for i in range(n)}
    kept_vars = [fv[i] for i in kept]
    kept_shape = [full[i] for i in kept]
    full_flat = flat_index(full, fv)
    x_flat = flat_index(kept_shape, kept_vars)
    full_tasks = [
        t
        for t in g.tasks
        if isinstance(t, PointwiseTask)
        and len(t.out.shape) == n
        and all(same(a, b) for a, b in zip(t.out.shape, full))
        and not (len(kept_shape) == n and all(same(a, b) for a, b in zip(kept_shape, full)))
    ]
    x_tasks = [t for t in g.tasks if isinstance(t, PointwiseTask) and t not in full_tasks]

    def body_of(t):
        if isinstance(t, ReductionTask):
            return t.body
        vs = index_vars("x", len(t.out.shape))
        target = fv if t in full_tasks else kept_vars
        return reindex(t.body, dict(zip(vs, target)))

    def inline_table(resolver):
        for t in full_tasks:
            resolver.inline[t.out.name] = (flat_index(t.out.shape, fv), body_of(t))
        for t in x_tasks:
            resolver.inline[t.out.name] = (flat_index(t.out.shape, kept_vars), body_of(t))

    for t in g.tasks:
        kernel.note_expr(body_of(t))
    mask = "xmask & rmask"
    produced_reds = {t.out.name for t in reds}

    def run(single: bool) -> list[str]:
        counter = [0]
        out: list[str] = []
        resolver = _Resolver(head.out.name)
        resolver.pending = set(produced_reds)
        inline_table(resolver)
        if single:
            lines: list[str] = []
            w = kernel.writer(axes, lines, counter, resolve=resolver, indent="")
            w.index = _flat_alias(w.index, x_flat, "xindex")
            for j, t in enumerate(reds):
                resolver.current = t.out.name
                v = w.value(t.body)
                lines += _red_update(t, v, _acc_dtype(t), j, mask, True, kernel, lay)
                resolver.pending.discard(t.out.name)
                resolver.registers[t.out.name] = (flat_index(t.out.shape, kept_vars), f"red{j}")
            for t in full_tasks:
                if t.out.name in store:
                    resolver.current = t.out.name
                    v = w.value(body_of(t))
                    kernel.use_buffer(t.out.name)
                    lines.append(
                        f"tl.store({t.out.name} + {_tile(w.index(full_flat), tile)}, "
                        f"{_cast_store(_tile(v, tile), t.out.name)}, {mask})"
                    )
            out += lines
        else:
            stored_full = [t for t in full_tasks if t.out.name in store]
            for j, t in enumerate(reds):
                lines = []
                w = kernel.writer(axes, lines, counter, resolve=resolver, indent="")
                w.index = _flat_alias(w.index, x_flat, "xindex")
                if cache_hints:
                    w.eviction = "evict_last" if (stored_full or j + 1 < len(reds)) else "evict_first"
                resolver.current = t.out.name
                v = w.value(t.body)
                body = lines + _red_update(t, v, _acc_dtype(t), j, mask, False, kernel, lay)
                out += _red_init(t, _acc_dtype(t), j, lay)
                out.append(f"for roffset in range(0, {kernel.size(ir.prod([full[i] for i in reduced]))}, RBLOCK):")
                out.append("    rindex = roffset + rbase")
                out.append(f"    rmask = rindex < {kernel.size(ir.prod([full[i] for i in reduced]))}")
                out += [
                    "    " + x.strip()
                    for x in _decompose("rindex", [fv[i].name for i in reduced], [full[i] for i in reduced], kernel, 0)
                ]
                out += ["    " + x for x in body]
                out += _red_final(t, j, kernel, lay)
                resolver.pending.discard(t.out.name)
                resolver.registers[t.out.name] = (flat_index(t.out.shape, kept_vars), f"red{j}")
            if stored_full:
                lines = []
                w = kernel.writer(axes, lines, counter, resolve=resolver, indent="")
                w.index = _flat_alias(w.index, x_flat, "xindex")
                if cache_hints:
                    w.eviction = "evict_first"
                stores = []
                for t in stored_full:
                    resolver.current = t.out.name
                    v = w.value(body_of(t))
                    kernel.use_buffer(t.out.name)
                    stores.append(
                        f"tl.store({t.out.name} + {_tile(w.index(full_flat), tile)}, "
                        f"{_cast_store(_tile(v, tile), t.out.name)}, {mask})"
                    )
                rn = kernel.size(ir.prod([full[i] for i in reduced]))
                out.append(f"for roffset in range(0, {rn}, RBLOCK):")
                out.append("    rindex = roffset + rbase")
                out.append(f"    rmask = rindex < {rn}")
                out += [
                    "    " + x.strip()
                    for x in _decompose("rindex", [fv[i].name for i in reduced], [full[i] for i in reduced], kernel, 0)
                ]
                out += ["    " + x for x in lines + stores]
        # the kept space: epilogues and the stored reductions
        lines = []
        w = kernel.writer(axes, lines, counter, resolve=resolver, indent="")
        w.index = _flat_alias(w.index, x_flat, "xindex")
        for j, t in enumerate(reds):
            if t.out.name in store:
                kernel.use_buffer(t.out.name)
                lines.append(f"tl.store({t.out.name} + (xindex), {_cast_store(f'red{j}', t.out.name)}, xmask)")
        for t in x_tasks:
            resolver.current = t.out.name
            v = w.value(body_of(t))
            if t.out.name in store:
                kernel.use_buffer(t.out.name)
                lines.append(
                    f"tl.store({t.out.name} + (xindex), {_cast_store(_tile(v, lay.kept_tile), t.out.name)}, xmask)"
                )
        out += lines
        return out

    single = run(True)
    looped = run(False)
    rdecomp = _decompose("rindex", [fv[i].name for i in reduced], [full[i] for i in reduced], kernel, 8)
    _loads_used(kernel, single + looped, set(kernel.program.buffers))
    return dict(
        xnumel=kernel.size(ir.prod(kept_shape)),
        rnumel=kernel.size(ir.prod([full[i] for i in reduced])),
        xdecomp="\n".join(_decompose("xindex", [fv[i].name for i in kept], kept_shape, kernel, 4)) or "    pass",
        single="\n".join(rdecomp) + "\n" + _indent(single, 8),
        looped=_indent(looped, 8),
        shape=", ".join(sympy_text(s) for s in full),
        reduced=str(tuple(reduced)),
        kind=g.kind,
        order=lay.order,
    )


# ---------------------------------------------------------------- matmul


def matmul_kernel(g: Group, kernel: _Kernel, store: set[str], precision: str) -> dict:
    mm: MatmulTask = g.head
    nb = len(mm.batch)
    bv = index_vars("b", nb)
    vm, vn, vk = (sympy.Symbol(s, integer=True, nonnegative=True) for s in ("mm_m", "mm_n", "mm_k"))
    counter = [0]
    bdecomp = _decompose("bid", [v.name for v in bv], list(mm.batch), kernel, 4)
    a_lines: list[str] = []
    baxes = {v: Axis(v.name) for v in bv}
    wa = kernel.writer(
        {**baxes, vm: Axis("am", "am_mask"), vk: Axis("ak", "ak_mask")}, a_lines, counter, indent="        "
    )
    kernel.note_expr(mm.a_body)
    kernel.note_expr(mm.b_body)
    a_val = wa.value(mm.a_body)
    b_lines: list[str] = []
    wb = kernel.writer(
        {**baxes, vk: Axis("bk", "bk_mask"), vn: Axis("bn", "bn_mask")}, b_lines, counter, indent="        "
    )
    b_val = wb.value(mm.b_body)
    out_vars = mm.coords(bv, vm, vn)
    flat = flat_index(mm.out.shape, out_vars)
    resolver = _Resolver(mm.out.name)
    resolver.registers[mm.out.name] = (flat, "acc")
    resolver.pending = {t.out.name for t in g.tasks[1:]}
    e_lines: list[str] = []
    we = kernel.writer(
        {**baxes, vm: Axis("em", "am_mask"), vn: Axis("en", "bn_mask")}, e_lines, counter, resolve=resolver
    )
    stores = []
    if mm.out.name in store:
        kernel.use_buffer(mm.out.name)
        stores.append(
            f"    tl.store({mm.out.name} + {_tile(we.index(flat), '[BLOCK_M, BLOCK_N]')}, "
            f"{_cast_store('acc', mm.out.name)}, emask)"
        )
    for t in g.tasks[1:]:
        resolver.current = t.out.name
        body = reindex(t.body, dict(zip(index_vars("x", len(out_vars)), out_vars)))
        kernel.note_expr(body)
        v = we.value(body)
        resolver.pending.discard(t.out.name)
        resolver.inline[t.out.name] = (flat_index(t.out.shape, out_vars), body)
        if t.out.name in store:
            kernel.use_buffer(t.out.name)
            stores.append(
                f"    tl.store({t.out.name} + {_tile(we.index(flat), '[BLOCK_M, BLOCK_N]')}, "
                f"{_cast_store(_tile(v, '[BLOCK_M, BLOCK_N]'), t.out.name)}, emask)"
            )
    _loads_used(kernel, a_lines + b_lines + e_lines, set(kernel.program.buffers))
    return dict(
        m=kernel.size(mm.m),
        n=kernel.size(mm.n),
        k=kernel.size(mm.k),
        bdecomp="\n".join(bdecomp),
        a_body="\n".join(a_lines),
        a_value=a_val,
        b_body="\n".join(b_lines),
        b_value=b_val,
        epilogue="\n".join(e_lines + stores),
        precision=precision,
        a_plain=_plain_load(mm.a_body, {vm, vk}),
        b_plain=_plain_load(mm.b_body, {vk, vn}),
        shape=", ".join(sympy_text(s) for s in mm.out.shape),
        a_shape=", ".join(sympy_text(s) for s in list(mm.batch) + [mm.m, mm.k]),
        b_shape=", ".join(sympy_text(s) for s in list(mm.batch) + [mm.k, mm.n]),
    )


def _plain_load(e: E, tile_vars: set) -> bool:
    """A float load whose index uses both tile variables: masked with other=0 already, so the
    operand needs no second select in the K loop."""
    while isinstance(e, ir.Op) and e.op == "cast" and e.params and e.params[0] in FLOATS:
        e = e.args[0]
    return isinstance(e, Load) and e.dtype in FLOATS and tile_vars <= e.index.free_symbols


# ---------------------------------------------------------------- scan


def scan_kernel(g: Group, kernel: _Kernel, store: set[str]) -> dict:
    sc: ScanTask = g.head
    shape = list(sc.out.shape)
    n = len(shape)
    xv = index_vars("x", n)
    others = [i for i in range(n) if i != sc.axis]
    axes = {xv[i]: Axis(xv[i].name, "xmask" if i != sc.axis else "rmask") for i in range(n)}
    flat = flat_index(shape, xv)
    acc = "tl.float32" if sc.body.dtype in FLOATS else "tl.int64"
    identity = "0" if sc.rtype == "sum" else "1"
    kernel.note_expr(sc.body)
    if sc.rtype == "prod":
        kernel.combiners.add("mul")

    def run(single: bool) -> list[str]:
        counter = [0]
        lines: list[str] = []
        resolver = _Resolver(sc.out.name)
        resolver.pending = {t.out.name for t in g.tasks}
        w = kernel.writer(axes, lines, counter, resolve=resolver, indent="")
        v = w.value(sc.body)
        lines.append(f"v = tl.where(xmask & rmask, {v}.to({acc}), {identity})")
        scan = "tl.cumsum(v, 1)" if sc.rtype == "sum" else "tl.associative_scan(v, 1, _kscout_mul)"
        if single:
            lines.append(f"c = {scan}")
        else:
            op = "+" if sc.rtype == "sum" else "*"
            lines.append(f"c = {scan} {op} carry")
            total = "tl.sum(v, 1)" if sc.rtype == "sum" else "tl.reduce(v, 1, _kscout_mul)"
            lines.append(f"carry = carry {op} {total}[:, None]")
        resolver.pending.discard(sc.out.name)
        resolver.registers[sc.out.name] = (flat, "c")
        stores = []
        if sc.out.name in store:
            kernel.use_buffer(sc.out.name)
            stores.append(
                f"tl.store({sc.out.name} + {_tile(w.index(flat), _XR)}, {_cast_store('c', sc.out.name)}, xmask & rmask)"
            )
        for t in g.tasks[1:]:
            resolver.current = t.out.name
            kernel.note_expr(t.body)
            val = w.value(t.body)
            resolver.pending.discard(t.out.name)
            resolver.inline[t.out.name] = (flat, t.body)
            if t.out.name in store:
                kernel.use_buffer(t.out.name)
                stores.append(
                    f"tl.store({t.out.name} + {_tile(w.index(flat), _XR)}, "
                    f"{_cast_store(_tile(val, _XR), t.out.name)}, xmask & rmask)"
                )
        return lines + stores

    rdecomp = [f"x{sc.axis} = rindex"]
    single = rdecomp + run(True)
    looped = rdecomp + run(False)
    _loads_used(kernel, single + looped, set(kernel.program.buffers))
    return dict(
        xnumel=kernel.size(ir.prod([shape[i] for i in others])),
        rnumel=kernel.size(shape[sc.axis]),
        xdecomp="\n".join(_decompose("xindex", [xv[i].name for i in others], [shape[i] for i in others], kernel, 4))
        or "    pass",
        single=_indent(single, 8),
        looped=_indent(looped, 12),
        identity=identity,
        acc_dtype=acc,
        rtype=sc.rtype,
        axis=sc.axis,
        shape=", ".join(sympy_text(s) for s in shape),
    )


del BOOL, F32, I64, Buffer, Optional
