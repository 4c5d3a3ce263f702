"""Split reductions and split-K contractions: one long reduction as two kernels.

A reduction with few rows and a long reduced extent (a mean over a whole tensor) gives one program
per row, so a handful of programs walk gigabytes while the rest of the GPU idles. Split S ways, the
first kernel reduces each of S chunks of every row into a partial (rows x S) and the second reduces
the partials, with the group's epilogue. A contraction with few output tiles and a long K (256 x 256
with K = 500k) is split the same way: S batched contractions over K chunks into partials, then a
reduction over S with the epilogue.

Both are rewrites of the group's tasks into tasks the ordinary kernels already write (the chunk
index is one more kept axis, or one more batch axis), so no template changes.
"""

from __future__ import annotations

from typing import Optional

import sympy

from agent.proposers.lowering import ir
from agent.proposers.lowering.ir import (
    BOOL,
    FLOATS,
    I64,
    Buffer,
    Index,
    Load,
    Masked,
    MatmulTask,
    Op,
    ReductionTask,
    flat_index,
    index_vars,
    reindex,
    unflatten,
)
from agent.proposers.lowering.schedule import Group

SPLITTABLE = ("sum", "max", "min", "prod", "any", "all")
_NEUTRAL = {"sum": 0, "prod": 1, "max": float("-inf"), "min": float("inf"), "any": 0, "all": 1}


def _ceil_div(a, b):
    from torch.utils._sympy.functions import FloorDiv

    return FloorDiv(a + b - 1, b)


def _neutral(rtype: str, dtype: str):
    v = _NEUTRAL[rtype]
    if dtype == BOOL:
        return bool(v)
    if dtype not in FLOATS and isinstance(v, float):
        return -(2**62) if v < 0 else 2**62
    return v


def _partial(program, name: str, shape, storage: str) -> Buffer:
    buf = program.buffers.get(name)
    if buf is None or tuple(buf.shape) != tuple(shape):
        buf = Buffer(name=name, shape=tuple(shape), storage=storage, kind="temp")
        program.buffers[name] = buf
    return buf


def _storage(dtype: str) -> str:
    return {ir.F32: "float32", ir.F64: "float64", I64: "int64", ir.I32: "int32", BOOL: "bool"}[dtype]


def split_reduction(program, g: Group, ways: int) -> Optional[list[Group]]:
    """[partial kernel, combine kernel with the group's epilogues], or None when it does not apply."""
    if ways <= 1 or g.kind != "reduction":
        return None
    red = g.reductions()[0]
    if red.rtype not in SPLITTABLE or len(g.reductions()) != 1:
        return None
    full = list(red.full_shape)
    kept = list(red.kept())
    kept_shape = [full[i] for i in kept]
    red_sizes = [full[i] for i in red.reduced]
    rn = ir.prod(red_sizes)
    chunk = _ceil_div(rn, sympy.Integer(ways))
    nk = len(kept)
    new = index_vars("f", nk + 2)
    vs, vc = new[nk], new[nk + 1]
    flat_r = vs * chunk + vc
    old = index_vars("f", len(full))
    mapping = {old[i]: new[j] for j, i in enumerate(kept)}
    mapping.update(dict(zip([old[i] for i in red.reduced], unflatten(flat_r, red_sizes))))
    inside = Op(BOOL, "lt", (Index(I64, flat_r), Index(I64, rn)))
    body = Masked(red.body.dtype, inside, reindex(red.body, mapping), _neutral(red.rtype, red.body.dtype))
    dtype = red.body.dtype if red.rtype not in ("any", "all") else BOOL
    part = _partial(program, f"{red.out.name}_part", kept_shape + [sympy.Integer(ways)], _storage(dtype))
    first = ReductionTask(
        out=part,
        full_shape=tuple(kept_shape + [sympy.Integer(ways), chunk]),
        reduced=(nk + 1,),
        rtype=red.rtype,
        body=body,
    )
    cv = index_vars("f", nk + 1)
    second = ReductionTask(
        out=red.out,
        full_shape=tuple(kept_shape + [sympy.Integer(ways)]),
        reduced=(nk,),
        rtype=red.rtype,
        body=Load(part.compute, part.name, flat_index(part.shape, cv)),
    )
    return [Group("reduction", [first]), Group("reduction", [second] + g.tasks[1:])]


def split_k(program, g: Group, ways: int) -> Optional[list[Group]]:
    """[batched contraction over K chunks, reduction over the chunks with the epilogue], or None."""
    if ways <= 1 or g.kind != "matmul" or g.head.out_index is not None:
        return None
    mm: MatmulTask = g.head
    nb = len(mm.batch)
    chunk = _ceil_div(mm.k, sympy.Integer(ways))
    vm, vn, vk = (sympy.Symbol(s, integer=True, nonnegative=True) for s in ("mm_m", "mm_n", "mm_k"))
    old_b = index_vars("b", nb)
    new_b = index_vars("b", nb + 1)
    vs = new_b[nb]
    k_full = vs * chunk + vk
    inside = Op(BOOL, "lt", (Index(I64, k_full), Index(I64, mm.k)))
    remap = {**dict(zip(old_b, new_b[:nb])), vk: k_full}
    a_body = Masked(mm.a_body.dtype, inside, reindex(mm.a_body, remap), 0.0)
    b_body = Masked(mm.b_body.dtype, inside, reindex(mm.b_body, remap), 0.0)
    batch = list(mm.batch) + [sympy.Integer(ways)]
    part = _partial(program, f"{mm.out.name}_part", batch + [mm.m, mm.n], "float32")
    first = MatmulTask(out=part, batch=tuple(batch), m=mm.m, n=mm.n, k=chunk, a_body=a_body, b_body=b_body)
    out_shape = list(mm.batch) + [mm.m, mm.n]
    fv = index_vars("f", nb + 3)
    src = fv[:nb] + [fv[nb + 2], fv[nb], fv[nb + 1]]  # partial is (batch, S, M, N); the full space (batch, M, N, S)
    second = ReductionTask(
        out=mm.out,
        full_shape=tuple(out_shape + [sympy.Integer(ways)]),
        reduced=(nb + 2,),
        rtype="sum",
        body=Load(ir.F32, part.name, flat_index(part.shape, src)),
    )
    return [Group("matmul", [first]), Group("reduction", [second] + g.tasks[1:])]


def size_hint(expr, hints: dict) -> Optional[int]:
    """A size expression's value at the shipped sizes (the trace's hints); None if it has none."""
    try:
        value = sympy.sympify(expr).xreplace({k: sympy.Integer(v) for k, v in hints.items()})
        return int(value) if value.is_number else None
    except (TypeError, ValueError):
        return None


def suggest(g: Group, hints: dict) -> dict:
    """Knob settings for the shipped sizes (the trace's hints): split long reductions over few rows and
    contractions with few output tiles and a long K; otherwise nothing (the kind's defaults)."""
    if g.kind in ("reduction", "row"):
        red = g.reductions()[0]
        if len(red.full_shape) - 1 not in red.reduced and red.full_shape[-1] != ir.One:
            # an outer reduction (the innermost axis is kept): many rows per program, short chunks,
            # so neighbouring lanes read neighbouring addresses
            return {"rows": 64, "single_max": 0, "rblock": 32}
    if g.kind == "reduction" and g.reductions()[0].rtype in SPLITTABLE and len(g.reductions()) == 1:
        red = g.reductions()[0]
        xn = size_hint(ir.prod([red.full_shape[i] for i in red.kept()]), hints)
        rn = size_hint(ir.prod([red.full_shape[i] for i in red.reduced]), hints)
        if xn is not None and rn is not None and xn < 256 and rn >= 1 << 16:
            ways = max(4, min(1024, rn // (1 << 15)))
            return {"split": min((4, 16, 64, 256, 1024), key=lambda w: abs(w - ways))}
    if g.kind == "matmul":
        mm: MatmulTask = g.head
        m, n, k = (size_hint(v, hints) for v in (mm.m, mm.n, mm.k))
        batch = size_hint(ir.prod(mm.batch), hints) or 1
        if m and n and k and k >= 8192:
            tiles = batch * -(-m // 128) * -(-n // 128)
            if tiles < 128:
                ways = max(2, min(32, 256 // max(tiles, 1)))
                return {"split_k": min((2, 4, 8, 16, 32), key=lambda w: abs(w - ways))}
    return {}


def degenerate_rows(g: Group, hints: dict) -> bool:
    """A row group over very few, very long rows (a normalisation by a whole-tensor norm): better split."""
    if g.kind != "row":
        return False
    red = g.reductions()[0]
    xn = size_hint(ir.prod([red.full_shape[i] for i in red.kept()]), hints)
    rn = size_hint(ir.prod([red.full_shape[i] for i in red.reduced]), hints)
    return xn is not None and rn is not None and xn < 256 and rn >= 1 << 16
