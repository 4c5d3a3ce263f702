"""Knob spaces of the kernel templates, and the moves the template proposer makes through them.

A configuration is a plain dict (JSON-able, stored with the candidate). Knobs describe strategy, not
sizes for one shape: the generated forward() turns them into legal block sizes for the tensor it gets.
Some knobs only matter when another is set (the programs per SM of a persistent grid or a split row, the
L2 grouping of a split row); `normalize` pins those dead knobs to their defaults so that two configurations
that generate the same kernel are the same dict, and moves never spend a candidate on a dead knob.

Refinements first take the moves the parent's own measurements argue for (`steered_moves`: spills and
registers from the compiler, % of the copy ceiling per timed case, a compile out of resources), each with
that evidence at the head of its rationale.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

TEMPLATE_OF_FAMILY = {
    "layernorm": "rowwise",
    "rmsnorm": "rowwise",
    "add_rmsnorm": "rowwise",
    "softmax": "rowwise",
    "log_softmax": "rowwise",
    "cross_entropy": "rowwise",
    "swiglu": "elementwise",
    "geglu": "elementwise",
    "row_sum": "reduction",
    "matmul_epilogue": "matmul",
    "attention": "attention",
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
_EPT_UP = (
    "more elements per thread (fewer warps) keep more independent 16-byte loads in flight per thread "
    "and make the cross-warp reductions cheaper"
)
_EPT_DN = "fewer elements per thread (more warps) cut the registers each thread holds, avoiding spills"
_HINT_UP = (
    "eviction hints: streamed data is read evict_first, data read again (a second sweep, the weight) "
    "evict_last, so the bytes read twice stay in L2"
)
_HINT_DN = "no hints leave caching to the hardware"


def _persistent(k: dict) -> bool:
    return bool(k["persistent"])


def _persistent_or_split(k: dict) -> bool:
    return bool(k["persistent"]) or bool(k["split_rows"])


def _split(k: dict) -> bool:
    return bool(k["split_rows"])


# Row-wise and reduction kernels choose one of three paths per shape, at run time, from the knobs: a row
# that fits `single_max_n` (padded to a power of two) is held whole in registers (one read); a wider row
# is reduced over `block_n` chunks (statistics, then the output in a second sweep); and when there are
# fewer row blocks than `programs_per_sm` programs for every SM, `split_rows` cuts each row over several
# programs with a second small pass that combines their partial statistics. So one kernel serves a
# problem's whole shape distribution: 8192 rows of 8192, 16 rows of 4M and 4096 rows of 32000.
_ROW_COMMON = (
    Knob(
        "tile_elems",
        (1024, 2048, 4096, 8192, 16384, 32768),
        4096,
        "more elements per program: short rows are packed several to a program, amortizing index math and launch waves",
        "fewer elements per program give more programs to spread over the SMs",
    ),
    Knob(
        "single_max_n",
        (1024, 2048, 4096, 8192, 16384, 32768, 65536),
        16384,
        "hold wider rows whole in registers: each element is read once from memory",
        "loop over chunks of narrower rows too: bounded registers (no spills) at the cost of a second sweep "
        "that usually hits L2",
    ),
    Knob(
        "block_n",
        (512, 1024, 2048, 4096, 8192, 16384),
        4096,
        "larger chunks in the looped and split paths mean fewer loop trips and more bytes in flight",
        "smaller chunks use fewer registers per thread and split rows into more programs",
    ),
    Knob("elems_per_thread", (2, 4, 8, 16, 32, 64), 16, _EPT_UP, _EPT_DN),
    Knob(
        "split_rows",
        (False, True),
        True,
        "when rows are too few to fill the GPU (16 rows of 4M elements), several programs share a row and a "
        "second small pass combines their partial statistics",
        "one program per row block: no partials written, no second launch",
    ),
    Knob(
        "persistent",
        (False, True),
        False,
        "a persistent grid (programs loop over row blocks) saves launch waves on many rows",
        "one program per row block lets the hardware scheduler balance uneven work",
    ),
    Knob(
        "programs_per_sm",
        (1, 2, 4, 8),
        4,
        "more programs per SM (persistent grid size, and how many programs a split row is cut into) hide latency",
        "fewer programs keep loops long and the partials few",
        _persistent_or_split,
    ),
    Knob("cache_hints", (False, True), True, _HINT_UP, _HINT_DN),
)

SPACES: dict[str, tuple[Knob, ...]] = {
    "rowwise": _ROW_COMMON
    + (
        Knob(
            "lane_stats",
            (False, True),
            True,
            "each lane keeps running statistics (per-lane Welford, online max and sum) reduced across the "
            "program once at the end: no cross-warp reduction and barrier per chunk, loads stay in flight",
            "one reduction per chunk keeps nothing per lane: fewer registers",
        ),
        Knob(
            "split_l2_reuse",
            (False, True),
            False,
            "split rows are processed in groups of rows that fit half the L2, so the second pass reads them "
            "from L2 instead of memory (more launches)",
            "one launch per pass over all rows, the second pass walking rows in reverse so the most recently "
            "read rows are the first reused",
            _split,
        ),
        Knob(
            "num_stages",
            (1, 2, 3, 4),
            2,
            "more pipeline stages prefetch the next chunk while this one is reduced",
            "fewer stages free shared memory and registers",
        ),
    ),
    "elementwise": (
        Knob(
            "block",
            (256, 512, 1024, 2048, 4096, 8192, 16384),
            2048,
            "bigger blocks mean fewer programs and more bytes in flight per program",
            "smaller blocks mean more programs to fill every SM on small tensors",
        ),
        Knob(
            "tiling",
            ("flat", "rows"),
            "flat",
            "2-D row tiles keep each program inside a few rows (stride-friendly for strided rows)",
            "a flat 1-D view gives perfectly contiguous blocks and the simplest index math",
        ),
        Knob(
            "persistent",
            (False, True),
            False,
            "a persistent grid (programs loop over blocks) saves launch waves on large tensors",
            "one program per block lets the hardware scheduler balance the work",
        ),
        Knob("programs_per_sm", (1, 2, 4, 8), 4, _PPS_UP, _PPS_DN, _persistent),
        Knob("num_warps", _WARPS, 4, _W_UP, _W_DN),
        Knob(
            "cache_hints",
            (False, True),
            False,
            "every byte is touched once: loads evict_first so the stream does not push other data out of L2",
            _HINT_DN,
        ),
    ),
    "reduction": _ROW_COMMON,
    "matmul": (
        Knob(
            "block_m",
            (16, 32, 64, 128, 256),
            128,
            "taller tiles reuse each weight tile across more rows (higher arithmetic intensity)",
            "shorter tiles make more tiles for small M and fewer wasted masked rows",
        ),
        Knob(
            "block_n",
            (16, 32, 64, 128, 256),
            256,
            "wider tiles reuse each input tile across more columns",
            "narrower tiles make more tiles and fewer registers for the accumulator",
        ),
        Knob(
            "block_k",
            (16, 32, 64, 128),
            64,
            "deeper K steps mean fewer loop trips and bigger MMA instructions",
            "shallower K steps need less shared memory per stage",
        ),
        Knob(
            "group_m",
            (1, 4, 8, 16),
            8,
            "grouping row tiles (swizzle) keeps weight tiles hot in L2",
            "less grouping is simpler when the weight fits in L2 anyway",
        ),
        Knob("num_warps", (2, 4, 8), 8, _W_UP, _W_DN),
        Knob(
            "num_stages",
            (1, 2, 3, 4, 5),
            3,
            "more stages overlap the next tiles' loads with this tile's MMA",
            "fewer stages free shared memory for bigger tiles",
        ),
        Knob(
            "split_k",
            (1, 2, 4, 8),
            1,
            "splitting K (fp32 partials reduced by a second kernel) makes more programs when M*N is small",
            "no split avoids the workspace round trip and the second launch",
        ),
        Knob(
            "persistent",
            (False, True),
            True,
            "a persistent grid (one program per SM walking the tiles in grouped order) saves launch waves "
            "and keeps the tail of the last wave short",
            "one program per tile lets the hardware scheduler balance the work",
        ),
        Knob(
            "tma",
            (False, True),
            True,
            "tensor-memory-accelerator loads (tensor descriptors) move tiles without address arithmetic in "
            "the threads (used where the strides are 16-byte aligned)",
            "pointer loads work for any stride and leave the copy to the threads",
        ),
    ),
    # Flash attention (online softmax over key blocks, the score matrix never in memory). The forward caps
    # both tiles at 32 KB (a head dim of 1024 takes 16-row tiles whatever the knobs say) and the stages at
    # what fits in 160 KB of shared memory beside the query tile.
    "attention": (
        Knob(
            "block_m",
            (16, 32, 64, 128),
            64,
            "taller query tiles reuse each key and value tile across more rows",
            "shorter query tiles make more programs for short sequences and fewer registers",
        ),
        Knob(
            "block_n",
            (16, 32, 64, 128),
            64,
            "wider key tiles mean fewer loop trips and bigger MMA instructions",
            "narrower key tiles hold fewer scores and values in registers",
        ),
        Knob("num_warps", (2, 4, 8), 4, _W_UP, _W_DN),
        Knob(
            "num_stages",
            (1, 2, 3, 4),
            2,
            "more stages overlap the next key and value tiles' loads with this tile's MMAs",
            "fewer stages free shared memory for bigger tiles",
        ),
        Knob(
            "precision",
            ("ieee", "tf32x3"),
            "ieee",
            "three TF32 passes keep near-fp32 accuracy at tensor-core speed (float32 operands)",
            "IEEE fp32 products are exact to fp32 rounding",
        ),
        Knob(
            "k_stored",
            (False, True),
            False,
            "the key tile loaded as stored (rows of the head dim contiguous) and transposed in registers, the "
            "layout flash-attention kernels feed the tensor cores",
            "the key tile loaded already transposed through its pointers, leaving the layout to the compiler",
        ),
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
    "rowwise": (
        ("tile_elems", "elems_per_thread"),
        ("single_max_n", "block_n"),
        ("persistent", "programs_per_sm"),
        ("block_n", "elems_per_thread"),
        ("num_stages", "cache_hints"),
        ("split_rows", "programs_per_sm"),
        ("lane_stats", "elems_per_thread"),
    ),
    "elementwise": (("block", "num_warps"), ("persistent", "programs_per_sm"), ("tiling", "block")),
    "reduction": (
        ("tile_elems", "elems_per_thread"),
        ("single_max_n", "block_n"),
        ("block_n", "elems_per_thread"),
        ("split_rows", "programs_per_sm"),
    ),
    "matmul": (
        ("block_m", "block_n"),
        ("block_k", "num_stages"),
        ("block_m", "num_warps"),
        ("split_k", "block_k"),
        ("group_m", "block_m"),
        ("persistent", "tma"),
    ),
    "attention": (("block_m", "block_n"), ("block_n", "num_stages"), ("block_m", "num_warps")),
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


# ---------------------------------------------------------------- moves steered by the parent's measurements

# What the evaluator's numbers say about a kernel, and which knob steps answer it. Each entry is
# (knob, direction): "up" is the next value in `values` (True for a boolean), "down" the previous one.
_SPILL_FIXES = {
    "rowwise": (
        ("elems_per_thread", "down"),
        ("single_max_n", "down"),
        ("lane_stats", "down"),
        ("tile_elems", "down"),
        ("block_n", "down"),
    ),
    "reduction": (("elems_per_thread", "down"), ("single_max_n", "down"), ("tile_elems", "down"), ("block_n", "down")),
    "elementwise": (("num_warps", "up"), ("block", "down")),
    "matmul": (("num_stages", "down"), ("block_n", "down"), ("num_warps", "up"), ("block_k", "down")),
    "attention": (("block_n", "down"), ("block_m", "down"), ("num_stages", "down")),
}
_PARALLELISM_FIXES = {  # far below the copy ceiling: too few programs or bytes in flight to cover latency
    "rowwise": (
        ("split_rows", "up"),
        ("lane_stats", "up"),
        ("programs_per_sm", "up"),
        ("tile_elems", "down"),
        ("elems_per_thread", "down"),
    ),
    "reduction": (
        ("split_rows", "up"),
        ("programs_per_sm", "up"),
        ("tile_elems", "down"),
        ("elems_per_thread", "down"),
    ),
    "elementwise": (("block", "down"), ("num_warps", "up"), ("persistent", "down")),
    "matmul": (),
    "attention": (("block_m", "down"),),
}
_BANDWIDTH_FIXES = {  # close but not at the ceiling: more bytes in flight per thread, fewer re-reads
    "rowwise": (
        ("cache_hints", "up"),
        ("lane_stats", "up"),
        ("elems_per_thread", "up"),
        ("block_n", "up"),
        ("num_stages", "up"),
        ("tile_elems", "up"),
    ),
    "reduction": (("cache_hints", "up"), ("elems_per_thread", "up"), ("tile_elems", "up"), ("single_max_n", "up")),
    "elementwise": (("cache_hints", "up"), ("block", "up"), ("persistent", "up")),
    "matmul": (),
    "attention": (),
}
_OCCUPANCY_FIXES = {  # many registers per thread: fewer resident warps to hide memory latency
    "rowwise": (("elems_per_thread", "down"), ("tile_elems", "down")),
    "reduction": (("elems_per_thread", "down"), ("tile_elems", "down")),
    "elementwise": (("num_warps", "down"),),
    "matmul": (("num_stages", "down"),),
    "attention": (("num_stages", "down"), ("block_n", "down")),
}
_RESOURCE_FIXES = {  # a compile that ran out of shared memory or registers
    "rowwise": (("num_stages", "down"), ("single_max_n", "down"), ("block_n", "down"), ("tile_elems", "down")),
    "reduction": (("single_max_n", "down"), ("block_n", "down"), ("tile_elems", "down")),
    "elementwise": (("block", "down"),),
    "matmul": (("num_stages", "down"), ("block_k", "down"), ("block_n", "down"), ("block_m", "down")),
    "attention": (("num_stages", "down"), ("block_n", "down"), ("block_m", "down")),
}
LOW_PCT = 50.0  # below this % of the copy ceiling a memory-bound kernel is latency-bound, not bandwidth-bound
GOOD_PCT = 90.0  # at or above it, the measurements argue for nothing in particular
MANY_REGS = 128  # registers per thread above which fewer warps fit on an SM than latency hiding wants


def _step(template: str, knobs: dict, name: str, direction: str, evidence: str) -> Optional[Move]:
    """One step of `name` in `direction`, its why led by the evidence; None at the end of the range or dead."""
    knob = {k.name: k for k in SPACES[template]}.get(name)
    if knob is None or not knob.is_live(knobs):
        return None
    i = knob.values.index(knobs[name])
    j = i + 1 if direction == "up" else i - 1
    if not 0 <= j < len(knob.values):
        return None
    move = Move(((name, knobs[name], knob.values[j]),), f"{evidence}; {knob.up if direction == 'up' else knob.down}")
    return move if move.apply(template, knobs) != knobs else None


def diagnose(template: str, result: Any) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """What the parent's evaluation says, strongest first, as (evidence sentence, knob steps that answer it).

    Reads only what the evaluator recorded: the compiler's registers and spills per kernel
    (`EvalResult.kernels`), the achieved % of the copy ceiling per timed case, and a compile that ran out
    of resources. A result without them (a CPU run) gives nothing to steer by."""
    if result is None:
        return []
    found: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    message = (getattr(result, "message", None) or "") + " " + (getattr(result, "stderr_tail", None) or "")[-2000:]
    if not getattr(result, "passed", False):
        if "out of resource" in message.lower() or "OutOfResources" in message:
            found.append(
                ("the parent did not compile: it ran out of shared memory or registers", _RESOURCE_FIXES[template])
            )
        return found
    kernels = [k for k in getattr(result, "kernels", ()) if k is not None]
    spilled = [k for k in kernels if (k.n_spills or 0) > 0]
    if spilled:
        worst = max(spilled, key=lambda k: k.n_spills)
        found.append(
            (
                f"the parent's {worst.name} spills {worst.n_spills} registers to local memory "
                f"({worst.n_regs} per thread)",
                _SPILL_FIXES[template],
            )
        )
    timed = [t for t in getattr(result, "timing", ()) if t.pct_of_ceiling is not None]
    if timed and template not in ("matmul", "attention"):
        low = min(timed, key=lambda t: t.pct_of_ceiling)
        where = f"{low.pct_of_ceiling:.0f}% of the copy ceiling at {low.case_id}"
        if low.pct_of_ceiling < LOW_PCT:
            found.append(
                (
                    f"the parent reaches only {where}: too little work in flight to cover memory latency",
                    _PARALLELISM_FIXES[template],
                )
            )
        elif low.pct_of_ceiling < GOOD_PCT:
            regs = max((k.n_regs or 0 for k in kernels), default=0)
            if regs > MANY_REGS and not spilled:
                found.append(
                    (
                        f"the parent reaches {where} with {regs} registers per thread: few warps resident",
                        _OCCUPANCY_FIXES[template],
                    )
                )
            found.append(
                (f"the parent reaches {where}: bandwidth-bound but short of the ceiling", _BANDWIDTH_FIXES[template])
            )
    elif template in ("matmul", "attention"):
        regs = max((k.n_regs or 0 for k in kernels), default=0)
        if regs >= 255 and not spilled:
            found.append(
                (f"the parent uses {regs} registers per thread, the most there are", _OCCUPANCY_FIXES[template])
            )
    return found


def steered_moves(template: str, knobs: dict, result: Any) -> list[Move]:
    """One-knob moves that the parent's measurements argue for, in order of the evidence (see `diagnose`);
    each move's `why` starts with the evidence, so the candidate's rationale records why it was made."""
    moves: list[Move] = []
    seen: set = set()
    for evidence, steps in diagnose(template, result):
        for name, direction in steps:
            move = _step(template, knobs, name, direction, evidence)
            if move is None:
                continue
            key = tuple(sorted(move.apply(template, knobs).items()))
            if key not in seen:
                seen.add(key)
                moves.append(move)
    return moves
