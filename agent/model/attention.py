"""The attention region: `softmax(q @ k^T * scale [causal mask]) @ v` as one region whose problem is
`F.scaled_dot_product_attention(q, k, v, is_causal=..., scale=...)`.

The partition cuts an attention written out by hand (minGPT's) at each contraction: the score matrix
(B, H, T, T) then goes to memory between the bmm, its scale and mask, the softmax and the second bmm.
As one region in canonical form, the search's flash-attention family takes it and the matrix stays on
chip.

The pattern is matched exactly, looking through views and copies (clone, an expand or reshape to the
same shape): bmm(reshape(softmax(X, -1)), reshape(v)) read only through its 4-D view, X = S * scale (or
S / d, or S alone) optionally masked as `masked_fill(buffer[:, :, :T, :T] == 0, -inf)`, S the 4-D view
of bmm(reshape(q), reshape(k^T)), q, k and v the same (B, H, T, E). Causality is proven, not assumed:
the mask is sliced from 0 on its last two dims out of a buffer or plain tensor attribute that the
forward never writes, and that buffer is zero exactly above the diagonal of its last two dims. A
numerical check on the traced values follows. A pattern any of this does not hold for leaves the
regions as the partition made them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from agent.model import graph as g
from agent.model.graph import Meta, Traced, is_contraction
from agent.model.partition import Region, sources, wire

aten = torch.ops.aten

_RESHAPES = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
_SAME_VALUE = {aten.clone.default, aten.alias.default}
# |graph - float64 SDPA| <= tol * (1 + |SDPA|), by the graph's dtype: far below any other mask or scale
_TOLERANCE = {"float64": 1e-8, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}


@dataclass(frozen=True)
class Match:
    """One attention of the graph: what the region reads, returns and covers."""

    q: torch.fx.Node  # the 4-D (B, H, T, E) nodes the pattern starts from
    k: torch.fx.Node
    v: torch.fx.Node
    bmm: torch.fx.Node  # att @ v, batched (B*H, T, E)
    out: torch.fx.Node  # its 4-D view, which the rest of the graph reads
    covered: frozenset  # every node of the pattern, views and the mask's work included
    is_causal: bool
    scale: float


def fuse_attention(traced: Traced, regions: list[Region], free: set) -> list[Region]:
    """The regions with each proven attention as one region (see the module docstring), renamed r0.. in
    forward order; the regions as given where none is proven."""
    gm_graph = traced.captured.gm.graph
    meta = traced.meta
    readers = _readers(gm_graph, free, meta)
    found: list[Match] = []
    taken: set = set()  # the nodes a match computes (views and the mask's work may be shared)
    for n in gm_graph.nodes:
        if n.op != "call_function" or n.target is not aten.bmm.default:
            continue
        m = _match(n, traced, readers, free)
        if m is not None and not (m.covered - free) & taken:
            found.append(m)
            taken |= m.covered - free
    found = _agreeing(traced, found)
    if not found:
        return regions
    return _rebuilt(gm_graph, meta, regions, free, found) or regions


# ---------------------------------------------------------------- the pattern


def _shape(meta: dict, n) -> Optional[tuple[int, ...]]:
    m = meta.get(n) if isinstance(n, torch.fx.Node) else None
    return m.shape if isinstance(m, Meta) else None


def _call(n, *targets) -> bool:
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in targets


def _through(n, meta: dict, seen: set):
    """`n` with the copies above it skipped (clone, alias, an expand or reshape to its operand's shape)."""
    while isinstance(n, torch.fx.Node) and n.op == "call_function" and n.args and isinstance(n.args[0], torch.fx.Node):
        same = n.target in _SAME_VALUE or (
            n.target in (_RESHAPES | {aten.expand.default}) and _shape(meta, n) == _shape(meta, n.args[0])
        )
        if not same:
            break
        seen.add(n)
        n = n.args[0]
    return n


def _unbatched(n3, meta: dict, seen: set):
    """The 4-D (B, H, M, N) node a batched (B*H, M, N) operand is a reshape of, or None."""
    if not _call(n3, *_RESHAPES):
        return None
    seen.add(n3)
    x = _through(n3.args[0], meta, seen)
    s3, s4 = _shape(meta, n3), _shape(meta, x)
    if s3 is None or s4 is None or len(s3) != 3 or len(s4) != 4:
        return None
    return x if (s4[0] * s4[1], *s4[2:]) == s3 else None


def _untransposed(kt, seen: set):
    """k where `kt` is k with its last two dims swapped, or None."""
    if _call(kt, aten.permute.default) and list(kt.args[1]) in ([0, 1, 3, 2], [0, 1, -1, -2]):
        seen.add(kt)
        return kt.args[0]
    dims = kt.args[1:3] if _call(kt, aten.transpose.int) else ()
    if all(isinstance(d, int) for d in dims) and {d % 4 for d in dims} == {2, 3}:
        seen.add(kt)
        return kt.args[0]
    return None


def _last_dim(dims, rank: int) -> bool:
    dims = [dims] if isinstance(dims, int) else list(dims)
    return len(dims) == 1 and isinstance(dims[0], int) and dims[0] % rank == rank - 1


def _softmax_input(p, meta: dict, seen: set):
    """X where `p` is softmax(X) over the last dim, as `_softmax` or decomposed (amax, sub, exp, sum, div)."""
    if _call(p, aten._softmax.default) and _last_dim(p.args[1], 4) and not p.args[2]:
        seen.add(p)
        return p.args[0]
    if not _call(p, aten.div.Tensor) or len(p.args) != 2:
        return None
    e, s = p.args
    if not (_call(s, aten.sum.dim_IntList) and s.args[0] is e and _keepdim_last(s) and not s.kwargs):
        return None
    if not (_call(e, aten.exp.default) and _call(e.args[0], aten.sub.Tensor) and not e.args[0].kwargs):
        return None
    x, mx = e.args[0].args
    if not (_call(mx, aten.amax.default) and mx.args[0] is x and _keepdim_last(mx)):
        return None
    seen |= {p, s, e, e.args[0], mx}
    return x


def _keepdim_last(n) -> bool:
    return len(n.args) >= 3 and _last_dim(n.args[1], 4) and n.args[2] is True


def _scaled(y, meta: dict, seen: set):
    """(S, scale) where `y` is S * scale, S / d or S itself, the factor a number."""
    if _call(y, aten.mul.Tensor):
        a, b = y.args
        for s, f in ((a, b), (b, a)):
            value = _number(f, meta)
            if value is not None and isinstance(s, torch.fx.Node):
                seen.add(y)
                return s, value
        return None, 0.0
    if _call(y, aten.div.Tensor):
        d = _number(y.args[1], meta)
        if d is None or d == 0:
            return None, 0.0
        seen.add(y)
        return y.args[0], 1.0 / d
    return y, 1.0


def _number(a, meta: dict) -> Optional[float]:
    """A finite constant operand (written in the graph, or a size it computes), or None."""
    value = meta.get(a) if isinstance(a, torch.fx.Node) else a
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _masked(x, seen: set):
    """(Y, mask tensor) where `x` is masked_fill(Y, mask == 0, -inf); (x, None) where x is not masked;
    (None, None) where it is masked otherwise."""
    if _call(x, aten.where.self, aten.where.ScalarSelf):
        cond, fill, y = x.args
    elif _call(x, aten.masked_fill.Scalar):
        y, cond, fill = x.args
    else:
        return x, None
    if not (_minus_inf(fill) and _call(cond, aten.eq.Scalar) and cond.args[1] == 0):
        return None, None
    seen |= {x, cond} | ({fill} if isinstance(fill, torch.fx.Node) else set())
    return y, cond.args[0]


def _minus_inf(fill) -> bool:
    if _call(fill, aten.scalar_tensor.default, aten.full.default):
        fill = fill.args[0] if fill.target is aten.scalar_tensor.default else fill.args[1]
    return isinstance(fill, float) and fill == -math.inf


def _match(bmm2, traced: Traced, readers: dict, free: set) -> Optional[Match]:
    meta = traced.meta
    seen: set = {bmm2}
    if len(bmm2.users) != 1:
        return None
    (out,) = bmm2.users
    p = _unbatched(bmm2.args[0], meta, seen)
    v = _unbatched(bmm2.args[1], meta, seen)
    x = _softmax_input(p, meta, seen) if p is not None else None
    if v is None or x is None or not _call(out, *_RESHAPES):
        return None
    y, mask = _masked(x, seen)
    s4, scale = _scaled(y, meta, seen)
    if not (_call(s4, *_RESHAPES) and _call(s4.args[0], aten.bmm.default)):
        return None
    bmm1 = s4.args[0]
    seen |= {s4, bmm1}
    q = _unbatched(bmm1.args[0], meta, seen)
    kt = _unbatched(bmm1.args[1], meta, seen)
    k = _untransposed(kt, seen) if kt is not None else None
    if q is None or k is None:
        return None
    shape = _shape(meta, q)
    if shape is None or any(_shape(meta, n) != shape for n in (k, v, out)):
        return None
    b, h, t, _ = shape
    if any(_shape(meta, n) != (b, h, t, t) for n in (p, x, y, s4)):
        return None
    dtypes = {meta[n].dtype for n in (q, k, v, out)}
    if len(dtypes) != 1 or dtypes.pop() not in _TOLERANCE:
        return None
    if mask is not None and not _causal_mask(mask, t, traced, seen):
        return None
    # the pattern reads nothing but q, k, v and the mask's buffer, and only it reads what it computes
    computed = {n for n in seen if n.op == "call_function" and n not in free}
    boundary = set().union(*(sources(n, free, meta) if n in free else {n} for n in (q, k, v)))
    if any(not sources(n, free, meta) <= seen | boundary | _buffer(mask) for n in computed):
        return None
    if any(not readers.get(n, set()) <= seen for n in computed - {bmm2}):
        return None
    return Match(q, k, v, bmm2, out, frozenset(seen), mask is not None, scale)


def _causal_mask(mask, t: int, traced: Traced, seen: set) -> bool:
    """Whether `mask` is buffer[..., :t, :t] of a buffer or plain tensor attribute that the forward does not
    write, zero exactly above the diagonal of its last two dims (so `mask == 0` is what is_causal masks)."""
    meta = traced.meta
    shape = _shape(meta, mask)
    if shape is None or len(shape) < 2 or shape[-2:] != (t, t):
        return False
    chain = []
    n = mask
    while _call(n, aten.slice.Tensor):
        chain.append(n)
        n = n.args[0]
    if not isinstance(n, torch.fx.Node) or n.op != "placeholder":
        return False
    placeholders = [x for x in traced.captured.gm.graph.nodes if x.op == "placeholder"]
    index = placeholders.index(n)
    ph = traced.captured.placeholders[index]
    buffers = dict(traced.model.named_buffers())
    if not ((ph.kind == "param" and ph.name in buffers) or ph.kind == "attr"):
        return False  # a parameter may be trained into anything
    if any(w.name == ph.name for w in traced.captured.writes):
        return False
    value = traced.args[index]
    rank = value.dim()
    if rank < 2 or value.shape[-2] < t or value.shape[-1] < t:
        return False
    for s in chain:
        dim = s.args[1] if len(s.args) > 1 else s.kwargs.get("dim", 0)
        start = s.args[2] if len(s.args) > 2 else s.kwargs.get("start")
        step = s.args[4] if len(s.args) > 4 else s.kwargs.get("step", 1)
        if not isinstance(dim, int) or (dim % rank >= rank - 2 and (start not in (None, 0) or step != 1)):
            return False  # the last two dims must keep their leading t x t corner
    rows, cols = value.shape[-2:]
    upper = ~torch.tril(torch.ones(rows, cols, dtype=torch.bool, device=value.device))
    if not torch.equal(value == 0, upper.expand(value.shape)):
        return False
    seen.update(chain)
    return True


def _buffer(mask) -> set:
    """The placeholder a proven mask is sliced from."""
    while _call(mask, aten.slice.Tensor):
        mask = mask.args[0]
    return {mask} if mask is not None else set()


def _readers(graph, free: set, meta: dict) -> dict:
    """node -> the nodes computed from it (the graph's output included), looking through views."""
    out: dict = {}
    for n in graph.nodes:
        if n.op == "output" or (n.op == "call_function" and n not in free):
            for a in sources(n, free, meta):
                out.setdefault(a, set()).add(n)
    return out


# ---------------------------------------------------------------- the numerical check


class _Kept(g._Runner):
    """The captured graph run, keeping only the values of `keep`."""

    def __init__(self, gm, device: str, keep: set):
        super().__init__(gm, device)
        self.keep = keep

    def run_node(self, n):
        out = super().run_node(n)
        if n not in self.keep:
            del self.seen[n]
        return out


def _agreeing(traced: Traced, found: list[Match]) -> list[Match]:
    """The matches whose graph values equal F.scaled_dot_product_attention in float64 on the first batch."""
    if not found:
        return []
    runner = _Kept(traced.captured.gm, traced.device, {n for m in found for n in (m.q, m.k, m.v, m.out)})
    try:
        with torch.no_grad():
            runner.run(*traced.args)
    except Exception:  # the graph ran once already: a failure here proves nothing, so nothing is fused
        return []
    kept = []
    for m in found:
        q, k, v, out = (runner.seen[n][:1].to(torch.float64) for n in (m.q, m.k, m.v, m.out))
        want = F.scaled_dot_product_attention(q, k, v, is_causal=m.is_causal, scale=m.scale)
        tol = _TOLERANCE[traced.meta[m.out].dtype]
        if bool(((out - want).abs() <= tol * (1 + want.abs())).all()):
            kept.append(m)
    return kept


# ---------------------------------------------------------------- the regions


def _rebuilt(graph, meta: dict, regions: list[Region], free: set, found: list[Match]) -> Optional[list[Region]]:
    """The regions without the matches' nodes, each match one region where its bmm2's region was; None
    where a region would then read what no earlier region computes."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    covered = {n for m in found for n in m.covered}
    out: list[Region] = []
    own: dict[int, Match] = {}  # index in `out` -> the match that region is
    for r in regions:
        for m in found:
            if m.bmm in r.nodes:
                nodes = sorted(
                    (n for n in m.covered if n.op == "call_function" and n not in free), key=lambda n: order[n]
                )
                own[len(out)] = m
                out.append(Region("", "contraction", nodes, canonical={"is_causal": m.is_causal, "scale": m.scale}))
        rest = [n for n in r.nodes if n not in covered]
        if rest:
            headless = r.kind == "contraction" and not any(is_contraction(n) for n in rest)
            out.append(Region("", "chain" if headless else r.kind, rest))
    for i, r in enumerate(out):
        r.name = f"r{i}"
    wire(graph, out, {n: r for r in out for n in r.nodes}, free, meta)
    read_as = {m.bmm: m.out for m in found}
    for i, r in enumerate(out):
        if i in own:
            m = own[i]
            r.inputs, r.outputs = [m.q, m.k, m.v], [m.out]
        else:
            r.inputs = list(dict.fromkeys(read_as.get(a, a) for a in r.inputs))
    return out if _computable(graph, out, free, meta, read_as) else None


def _computable(graph, regions: list[Region], free: set, meta: dict, read_as: dict) -> bool:
    """Whether each region's inputs, and the graph's outputs, are placeholders, earlier regions' outputs or
    views of those."""
    have = {n for n in graph.nodes if n.op == "placeholder"}

    def ready(a) -> bool:
        return a in have or (a in free and all(read_as.get(s, s) in have for s in sources(a, free, meta)))

    for r in regions:
        if not all(ready(a) for a in r.inputs):
            return False
        have |= set(r.outputs)
    output = next(n for n in graph.nodes if n.op == "output")
    return all(read_as.get(a, a) in have for a in sources(output, free, meta))
