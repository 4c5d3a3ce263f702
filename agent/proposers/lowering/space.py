"""Knobs of the lowered schedules and the moves the search makes through them.

A configuration of a lowered candidate is a JSON-able dict:

    {"schedule": "lowering", "fuse": {"epilogue": true, "rows": true, "siblings": true},
     "groups": [{"kind": "matmul", "block_m": 64, ...}, {"kind": "row", "rows": "auto", ...}]}

`fuse` decides the fusion groups (a schedule move splits or merges them); each group then has the
knobs of its schedule kind. Knobs describe strategy, not sizes for one shape: the generated forward
turns them into legal block sizes for the tensors it gets (a row is kept in registers when it is at
most `single_max` wide, else reduced in `rblock`-wide chunks).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Optional

from agent.proposers.knobs import Knob

_W_UP = "more warps give more threads to hide memory latency on wide tiles"
_W_DN = "fewer warps leave more registers per thread and cheaper reductions on narrow tiles"

_ROWS = Knob(
    "rows",
    ("auto", 1, 2, 4, 8, 16, 32, 64),
    "auto",
    "more rows per program amortise index math and launch when rows are short",
    "fewer rows per program give more programs to spread over the SMs",
)
_SINGLE = Knob(
    "single_max",
    (0, 1024, 2048, 4096, 8192, 16384),
    4096,
    "keeping longer rows in registers reads each element once (single pass)",
    "a lower limit sends long rows to the looped pass, which bounds registers (no spills)",
)
_RBLOCK = Knob(
    "rblock",
    (8, 32, 128, 256, 512, 1024, 2048, 4096),
    1024,
    "larger chunks mean fewer loop trips and wider loads",
    "smaller chunks use fewer registers per thread",
)

# The reduction tile's layout. "xr" ([kept, reduced]) reads along the reduced dims, contiguous when they
# are innermost; "rx" ([reduced, kept], reducing over axis 0) reads along the kept dims, which are the
# contiguous ones when a middle or leading dim is reduced (a sum over dim 1 of [B, C, L]).
_ORDER = Knob(
    "order",
    ("xr", "rx"),
    "xr",
    "a [reduced, kept] tile puts the kept dims along the lanes: coalesced loads when the reduced dims are "
    "not innermost (a reduction over channels of NCHW)",
    "a [kept, reduced] tile puts the reduced dims along the lanes: coalesced loads when they are innermost",
)

SPACES: dict[str, tuple[Knob, ...]] = {
    "pointwise": (
        Knob(
            "block",
            (256, 512, 1024, 2048, 4096, 8192),
            1024,
            "bigger blocks mean fewer programs and more bytes in flight per program",
            "smaller blocks give more programs to fill every SM on small tensors",
        ),
        Knob("num_warps", (1, 2, 4, 8, 16), 4, _W_UP, _W_DN),
    ),
    "reduction": (
        _ROWS,
        _SINGLE,
        _RBLOCK,
        Knob("num_warps", (1, 2, 4, 8, 16), 4, _W_UP, _W_DN),
        Knob(
            "split",
            (1, 4, 16, 64, 256, 1024),
            1,
            "splitting each row over more programs (partials, then a second pass) fills the GPU "
            "when rows are few and long",
            "fewer splits save the partials' round trip and the second launch",
        ),
        _ORDER,
    ),
    "row": (
        _ROWS,
        _SINGLE,
        _RBLOCK,
        Knob("num_warps", (1, 2, 4, 8, 16), 8, _W_UP, _W_DN),
        Knob(
            "cache_hints",
            (False, True),
            False,
            "eviction hints keep a row in L2 between the passes of the looped form and stream the last",
            "no hints leave caching to the hardware",
        ),
        _ORDER,
    ),
    "window": (_ROWS, _SINGLE, _RBLOCK, Knob("num_warps", (1, 2, 4, 8), 4, _W_UP, _W_DN)),
    "scan": (_ROWS, _SINGLE, _RBLOCK, Knob("num_warps", (1, 2, 4, 8, 16), 4, _W_UP, _W_DN)),
    "matmul": (
        Knob(
            "block_m",
            (16, 32, 64, 128, 256),
            64,
            "taller tiles reuse each B tile across more rows (higher arithmetic intensity)",
            "shorter tiles make more tiles for small M and waste fewer masked rows",
        ),
        Knob(
            "block_n",
            (16, 32, 64, 128, 256),
            64,
            "wider tiles reuse each A tile across more columns",
            "narrower tiles make more tiles and a smaller accumulator",
        ),
        Knob(
            "block_k",
            (16, 32, 64, 128),
            32,
            "deeper K steps mean fewer loop trips and bigger MMA instructions",
            "shallower K steps need less shared memory per stage",
        ),
        Knob(
            "group_m",
            (1, 4, 8, 16),
            8,
            "grouping row tiles keeps B tiles hot in L2",
            "less grouping when B fits in L2 anyway",
        ),
        Knob("num_warps", (2, 4, 8), 4, _W_UP, _W_DN),
        Knob(
            "num_stages",
            (1, 2, 3, 4, 5),
            3,
            "more stages overlap the next tiles' loads with this tile's MMA",
            "fewer stages free shared memory for bigger tiles",
        ),
        Knob(
            "split_k",
            (1, 2, 4, 8, 16, 32),
            1,
            "splitting K over more programs (fp32 partials reduced by a second kernel) fills the GPU when "
            "there are few output tiles",
            "no split avoids the partials' round trip and the second launch",
        ),
        Knob(
            "precision",
            ("ieee", "tf32x3"),
            "ieee",
            "three TF32 passes keep near-fp32 accuracy at tensor-core speed",
            "IEEE fp32 products are exact to fp32 rounding",
        ),
        Knob(
            "engine",
            ("triton", "library"),
            "triton",
            "the library's GEMM (cuBLAS through torch.matmul) with the epilogue in one Triton kernel: a labelled "
            "hybrid, faster where cuBLAS beats the Triton tiles (library.py)",
            "the Triton GEMM keeps the epilogue in the output tile: no round trip of the product through memory",
        ),
    ),
}

FUSE = {
    "epilogue": "fusing pointwise epilogues into the reduction/contraction/scan kernel saves a round trip "
    "through memory",
    "rows": "one kernel per row for every reduction over the same rows (and the normalised output) reads "
    "each row from memory once",
    "siblings": "pointwise outputs over one shape written by one kernel share their loads",
}
DEFAULT_FUSE = {name: True for name in FUSE}


class KnobError(ValueError):
    """A configuration that is not a point of the lowering's space."""


def defaults(kind: str) -> dict:
    return {"kind": kind, **{k.name: k.default for k in SPACES[kind]}}


def validate_group(kind: str, knobs: dict, *, partial: bool = False) -> dict:
    if kind not in SPACES:
        raise KnobError(f"unknown schedule kind {kind!r}")
    names = {k.name: k for k in SPACES[kind]}
    given = {k: v for k, v in knobs.items() if k != "kind"}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise KnobError(f"unknown knob(s) for the {kind} schedule: {', '.join(unknown)}")
    missing = sorted(set(names) - set(given))
    if missing and not partial:
        raise KnobError(f"missing knob(s) for the {kind} schedule: {', '.join(missing)}")
    for name, value in given.items():
        legal = names[name].values
        if value not in legal or type(value) not in {type(v) for v in legal}:
            raise KnobError(f"{kind}.{name}={value!r} is not one of {legal}")
    return {**defaults(kind), **given}


@dataclass(frozen=True)
class Move:
    """One step: a knob of one group to a neighbouring value, or a fusion switch flipped."""

    group: Optional[int]  # None: a fusion switch
    name: str
    old: Any
    new: Any
    why: str

    def apply(self, config: dict) -> dict:
        out = {"schedule": "lowering", "fuse": dict(config["fuse"]), "groups": [dict(g) for g in config["groups"]]}
        if self.group is None:
            out["fuse"][self.name] = self.new
        else:
            out["groups"][self.group][self.name] = self.new
        return out

    def describe(self) -> str:
        where = "fuse" if self.group is None else f"group {self.group} ({self.kind_of})"
        return f"{where}: {self.name} {_fmt(self.old)}->{_fmt(self.new)}"

    @property
    def kind_of(self) -> str:
        return self.why.split(":", 1)[0] if ":" in self.why else ""

    def tag(self) -> str:
        if self.group is None:
            return f"fuse.{self.name}={_fmt(self.new)}"
        return f"g{self.group}.{self.name}={_fmt(self.new)}"


def _fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _steps(knob: Knob, value: Any) -> list[tuple[Any, str]]:
    i = knob.values.index(value)
    out = []
    if i + 1 < len(knob.values):
        out.append((knob.values[i + 1], knob.up))
    if i > 0:
        out.append((knob.values[i - 1], knob.down))
    return out


def knob_moves(config: dict) -> list[Move]:
    moves = []
    for gi, g in enumerate(config["groups"]):
        for k in SPACES[g["kind"]]:
            for new, why in _steps(k, g[k.name]):
                moves.append(Move(gi, k.name, g[k.name], new, f"{g['kind']}: {why}"))
    return moves


def schedule_moves(config: dict) -> list[Move]:
    """Split or merge fusion groups: flip one fusion switch."""
    out = []
    for name, why in FUSE.items():
        now = config["fuse"].get(name, True)
        reason = (
            why if not now else f"splitting: separate kernels can each pick their own block sizes ({why} otherwise)"
        )
        out.append(Move(None, name, now, not now, reason))
    return out


def random_config(config: dict, rng: random.Random) -> dict:
    out = {"schedule": "lowering", "fuse": dict(config["fuse"]), "groups": []}
    for g in config["groups"]:
        out["groups"].append({"kind": g["kind"], **{k.name: rng.choice(k.values) for k in SPACES[g["kind"]]}})
    return out


def distance(a: dict, b: dict) -> float:
    total = sum(1.0 for n in FUSE if a["fuse"].get(n, True) != b["fuse"].get(n, True))
    for ga, gb in zip(a["groups"], b["groups"]):
        if ga["kind"] != gb["kind"]:
            total += 1.0
            continue
        for k in SPACES[ga["kind"]]:
            if len(k.values) > 1:
                total += abs(k.values.index(ga[k.name]) - k.values.index(gb[k.name])) / (len(k.values) - 1)
    return total
