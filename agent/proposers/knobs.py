"""Knob spaces of the kernel templates, and the moves the template proposer makes through them.

A configuration is a plain dict (JSON-able, stored with the candidate). Knobs describe strategy, not
sizes for one shape: the generated forward() turns them into legal block sizes for the tensor it gets.
Some knobs only matter when another is set (the chunk size of a looped pass, the programs per SM of a
persistent grid); `normalize` pins those dead knobs to their defaults so that two configurations that
generate the same kernel are the same dict, and moves never spend a candidate on a dead knob.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

TEMPLATE_OF_FAMILY = {
    "layernorm": "rowwise", "rmsnorm": "rowwise", "add_rmsnorm": "rowwise", "softmax": "rowwise",
    "log_softmax": "rowwise", "cross_entropy": "rowwise", "swiglu": "elementwise", "geglu": "elementwise",
    "row_sum": "reduction", "matmul_epilogue": "matmul",
}


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple
    default: Any
    up: str  # why the next value in `values` may help (booleans: why True)
    down: str  # why the previous value may help (booleans: why False)
    live: Optional[Callable[[dict], bool]] = None  # None: always matters

    def is_live(self, knobs: dict) -> bool:
        return self.live is None or self.live(knobs)


_WARPS = (1, 2, 4, 8, 16, 32)
_W_UP = "more warps give more threads to hide memory latency on wide tiles"
_W_DN = "fewer warps leave more registers per thread and cheaper reductions on narrow tiles"
_PPS_UP = "more resident programs per SM hide latency between row blocks"
_PPS_DN = "fewer programs keep the persistent loop long and launch overhead low"


def _looped(k: dict) -> bool:
    return not k["single_pass"]


def _persistent(k: dict) -> bool:
    return bool(k["persistent"])


SPACES: dict[str, tuple[Knob, ...]] = {
    "rowwise": (
        Knob("rows_per_program", (1, 2, 4, 8, 16), 1,
             "more rows per program amortize launch and index math and keep SMs busy when rows are short",
             "fewer rows per program give more programs to spread over the SMs and fewer live registers"),
        Knob("single_pass", (False, True), True,
             "one pass keeps the whole row in registers: each element is read once",
             "a looped pass over BLOCK_N chunks bounds registers for wide rows (no spills)"),
        Knob("block_n", (512, 1024, 2048, 4096, 8192), 2048,
             "larger chunks mean fewer loop trips and wider vector loads",
             "smaller chunks use fewer registers per thread", _looped),
        Knob("persistent", (False, True), False,
             "a persistent grid (programs loop over row blocks) saves launch waves on many rows",
             "one program per row block lets the hardware scheduler balance uneven work"),
        Knob("programs_per_sm", (1, 2, 4, 8), 4, _PPS_UP, _PPS_DN, _persistent),
        Knob("num_warps", _WARPS, 8, _W_UP, _W_DN),
        Knob("num_stages", (1, 2, 3, 4), 2,
             "more pipeline stages prefetch the next chunk while this one is reduced",
             "fewer stages free shared memory and registers"),
        Knob("cache_hints", (False, True), False,
             "eviction hints keep the row in L2 between passes and stream the output",
             "no hints leave caching to the hardware"),
    ),
    "elementwise": (
        Knob("block", (256, 512, 1024, 2048, 4096, 8192, 16384), 1024,
             "bigger blocks mean fewer programs and more bytes in flight per program",
             "smaller blocks mean more programs to fill every SM on small tensors"),
        Knob("tiling", ("flat", "rows"), "flat",
             "2-D row tiles keep each program inside a few rows (stride-friendly for strided rows)",
             "a flat 1-D view gives perfectly contiguous blocks and the simplest index math"),
        Knob("persistent", (False, True), False,
             "a persistent grid (programs loop over blocks) saves launch waves on large tensors",
             "one program per block lets the hardware scheduler balance the work"),
        Knob("programs_per_sm", (1, 2, 4, 8), 4, _PPS_UP, _PPS_DN, _persistent),
        Knob("num_warps", _WARPS, 4, _W_UP, _W_DN),
    ),
    "reduction": (
        Knob("rows_per_program", (1, 2, 4, 8, 16), 1,
             "more rows per program amortize launch and index math when rows are short",
             "fewer rows per program give more programs to spread over the SMs"),
        Knob("single_pass", (False, True), True,
             "one pass loads the whole row at once: fewest loop trips",
             "a looped pass over BLOCK_N chunks bounds registers for wide rows"),
        Knob("block_n", (512, 1024, 2048, 4096, 8192), 2048,
             "larger chunks mean fewer loop trips", "smaller chunks use fewer registers", _looped),
        Knob("num_warps", _WARPS, 4, _W_UP, _W_DN),
    ),
    "matmul": (
        Knob("block_m", (16, 32, 64, 128, 256), 128,
             "taller tiles reuse each weight tile across more rows (higher arithmetic intensity)",
             "shorter tiles make more tiles for small M and fewer wasted masked rows"),
        Knob("block_n", (16, 32, 64, 128, 256), 128,
             "wider tiles reuse each input tile across more columns",
             "narrower tiles make more tiles and fewer registers for the accumulator"),
        Knob("block_k", (16, 32, 64, 128), 64,
             "deeper K steps mean fewer loop trips and bigger MMA instructions",
             "shallower K steps need less shared memory per stage"),
        Knob("group_m", (1, 4, 8, 16), 8,
             "grouping row tiles (swizzle) keeps weight tiles hot in L2",
             "less grouping is simpler when the weight fits in L2 anyway"),
        Knob("num_warps", (2, 4, 8), 8, _W_UP, _W_DN),
        Knob("num_stages", (1, 2, 3, 4, 5), 3,
             "more stages overlap the next tiles' loads with this tile's MMA",
             "fewer stages free shared memory for bigger tiles"),
        Knob("split_k", (1, 2, 4, 8), 1,
             "splitting K (fp32 partials reduced by a second kernel) makes more programs when M*N is small",
             "no split avoids the workspace round trip and the second launch"),
    ),
}


class KnobError(ValueError):
    """A configuration that is not a point of the template's space (unknown knob, illegal value)."""


def space(template: str) -> tuple[Knob, ...]:
    return SPACES[template]


def default_knobs(template: str) -> dict:
    return {k.name: k.default for k in SPACES[template]}


def normalize(template: str, knobs: dict) -> dict:
    """Pin dead knobs to their defaults (same kernel, same dict)."""
    out = dict(knobs)
    for k in SPACES[template]:
        if not k.is_live(out):
            out[k.name] = k.default
    return out


def validate(template: str, knobs: dict, *, partial: bool = False) -> dict:
    """Check a (possibly partial) configuration; return it completed with defaults and normalized."""
    if not isinstance(knobs, dict):
        raise KnobError(f"knobs must be a dict, got {type(knobs).__name__}")
    names = {k.name: k for k in SPACES[template]}
    unknown = sorted(set(knobs) - set(names))
    if unknown:
        raise KnobError(f"unknown knob(s) for the {template} template: {', '.join(unknown)}")
    missing = sorted(set(names) - set(knobs))
    if missing and not partial:
        raise KnobError(f"missing knob(s) for the {template} template: {', '.join(missing)}")
    for name, value in knobs.items():
        legal = names[name].values
        if type(value) is not type(legal[0]) or value not in legal:
            raise KnobError(f"{name}={value!r} is not one of {legal}")
    return normalize(template, {**default_knobs(template), **knobs})


@dataclass(frozen=True)
class Move:
    """One mutation: the knobs it changes, old -> new, and why it may help."""

    changes: tuple[tuple[str, Any, Any], ...]
    why: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c[0] for c in self.changes)

    def apply(self, template: str, knobs: dict) -> dict:
        out = dict(knobs)
        for name, _, new in self.changes:
            out[name] = new
        return normalize(template, out)

    def describe(self) -> str:
        return ", ".join(f"{n} {fmt(a)}->{fmt(b)}" for n, a, b in self.changes)

    def tags(self) -> tuple[str, ...]:
        return tuple(f"{n}={fmt(b)}" for n, _, b in self.changes)


def fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _steps(knob: Knob, value: Any) -> list[tuple[Any, str]]:
    """Neighbouring values with the reason to go there (`up` explains the later value in `values`)."""
    i = knob.values.index(value)
    out = []
    if i + 1 < len(knob.values):
        out.append((knob.values[i + 1], knob.up))
    if i > 0:
        out.append((knob.values[i - 1], knob.down))
    return out


def single_moves(template: str, knobs: dict) -> list[Move]:
    """Every one-knob step to a neighbouring value of a live knob (structural switches included)."""
    moves = []
    for k in SPACES[template]:
        if not k.is_live(knobs):
            continue
        for new, why in _steps(k, knobs[k.name]):
            moves.append(Move(((k.name, knobs[k.name], new),), why))
    return [m for m in moves if m.apply(template, knobs) != knobs]


_PAIRS = {  # knobs that tend to move together
    "rowwise": (("rows_per_program", "num_warps"), ("single_pass", "block_n"), ("persistent", "programs_per_sm"),
                ("block_n", "num_warps"), ("num_stages", "cache_hints")),
    "elementwise": (("block", "num_warps"), ("persistent", "programs_per_sm"), ("tiling", "block")),
    "reduction": (("rows_per_program", "num_warps"), ("single_pass", "block_n"), ("block_n", "num_warps")),
    "matmul": (("block_m", "block_n"), ("block_k", "num_stages"), ("block_m", "num_warps"),
               ("split_k", "block_k"), ("group_m", "block_m")),
}


def pair_moves(template: str, knobs: dict) -> list[Move]:
    """Two coupled knobs each to a neighbouring value, where both are live after the move."""
    names = {k.name: k for k in SPACES[template]}
    moves = []
    for a, b in _PAIRS[template]:
        if not names[a].is_live(knobs):
            continue
        for va, wa in _steps(names[a], knobs[a]):
            mid = normalize(template, {**knobs, a: va})
            if not names[b].is_live(mid):
                continue
            for vb, wb in _steps(names[b], mid[b]):
                m = Move(((a, knobs[a], va), (b, mid[b], vb)), f"{wa}; {wb}")
                if m.apply(template, knobs) != knobs:
                    moves.append(m)
    return moves


def random_knobs(template: str, rng: random.Random) -> dict:
    return normalize(template, {k.name: rng.choice(k.values) for k in SPACES[template]})


def distance(template: str, a: dict, b: dict) -> float:
    """How far apart two configurations are: summed index distance, each knob scaled to [0, 1]."""
    total = 0.0
    for k in SPACES[template]:
        if len(k.values) > 1:
            total += abs(k.values.index(a[k.name]) - k.values.index(b[k.name])) / (len(k.values) - 1)
    return total


def far_configs(template: str, parent: dict, rng: random.Random, samples: int = 64) -> list[dict]:
    """Random configurations, the farthest from `parent` first (restart must leave the neighbourhood)."""
    seen, pool = set(), []
    for _ in range(samples):
        k = random_knobs(template, rng)
        key = tuple(sorted(k.items()))
        if key not in seen and k != parent:
            seen.add(key)
            pool.append(k)
    pool.sort(key=lambda k: -distance(template, parent, k))  # stable: ties keep the rng's order
    return pool
