"""Choosing configurations of a lowered program for each search action.

seed: configurations that worked before for the same schedule kinds (seed hints, matched group by
group on the kind, so a row kernel learns from any row kernel), then the default, then (on a GPU, for a
graph with a contraction) a portfolio of Hopper GEMM tiles fitted to the shipped M, N, K, with the
library hybrid (cuBLAS, then the epilogue in Triton: library.py) after the first tile, then single
moves.
refine: continue along what the parent just changed, then its other neighbours, then schedule moves
(split or merge fusion groups, which also switches a reduction between one kernel per row and
separate passes) and coupled pairs. sibling: the same moves, those the parent did not just make
first. restart: random configurations far from the parent. A source already evaluated is never
returned.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import dataclass
from importlib import resources
from typing import Any, Iterable, Iterator, Optional

from agent.proposers.base import Action, Proposal, ProposalError, ProposeRequest, ProposeResult
from agent.proposers.lowering import Lowered, LoweringError, ir, space
from agent.proposers.lowering.split import size_hint
from evaluation.records import source_sha256

SCHEDULE = "lowering"


@functools.lru_cache(maxsize=1)
def templates_sha256() -> str:
    """Hash of every lowering template: what, with the config, decides the generated text."""
    root = resources.files("agent.proposers.lowering") / "templates"
    h = hashlib.sha256()
    for name in sorted(p.name for p in root.iterdir() if p.name.endswith(".j2")):
        h.update(name.encode())
        h.update((root / name).read_bytes())
    return h.hexdigest()


def is_lowering_config(knobs: Any) -> bool:
    return isinstance(knobs, dict) and knobs.get("schedule") == SCHEDULE and isinstance(knobs.get("groups"), list)


def schedule_kinds(knobs: Any) -> tuple[str, ...]:
    """The schedule kinds of a stored candidate's knobs ('' parts for a family template's knobs)."""
    if is_lowering_config(knobs):
        return tuple(str(g.get("kind", "")) for g in knobs["groups"] if isinstance(g, dict))
    return ()


# the hand-written family templates are specialised schedules of these kinds
FAMILY_SCHEDULE = {
    "rowwise": "row",
    "elementwise": "pointwise",
    "reduction": "reduction",
    "matmul": "matmul",
    "attention": "attention",
}


def schedule_kind(knobs: Any, template_name: str | None) -> str | None:
    """What an outcome is keyed by besides its op family: the kernels' schedule kinds ("matmul+row"),
    for a lowered candidate from its configuration, for a family template from the template's kind."""
    kinds = schedule_kinds(knobs)
    if kinds:
        return "+".join(kinds)
    stem = (template_name or "").rsplit("/", 1)[-1].removesuffix(".j2")
    return FAMILY_SCHEDULE.get(stem)


def _normal(lowered: Lowered, config: dict) -> dict:
    """The configuration as it applies to the groups its fusion switches produce."""
    from agent.proposers.lowering.render import config_groups

    fuse = {**space.DEFAULT_FUSE, **{k: bool(v) for k, v in config.get("fuse", {}).items() if k in space.FUSE}}
    groups = lowered.plan(fuse)
    return {
        "schedule": SCHEDULE,
        "fuse": fuse,
        "groups": config_groups({"groups": config.get("groups", [])}, groups, lowered.program),
    }


def _hinted(lowered: Lowered, base: dict, hints: Iterable) -> Iterator[tuple[dict, str]]:
    """Per-kind knob settings from past winners, applied to this graph's groups of the same kind."""
    for i, hint in enumerate(hints):
        knobs = hint.get("knobs") if isinstance(hint, dict) and isinstance(hint.get("knobs"), dict) else hint
        if not is_lowering_config(knobs):
            continue
        by_kind: dict[str, dict] = {}
        for g in knobs["groups"]:
            if isinstance(g, dict) and g.get("kind") in space.SPACES:
                by_kind.setdefault(g["kind"], g)
        out = {"schedule": SCHEDULE, "fuse": dict(base["fuse"]), "groups": []}
        applied = []
        for g in base["groups"]:
            h = by_kind.get(g["kind"])
            if h is not None:
                try:
                    # A winner recorded before a knob existed lacks it: this graph's own value fills it in,
                    # so hints survive the space growing (the values it does carry must still be legal).
                    space.validate_group(g["kind"], h, partial=True)
                    out["groups"].append({**g, **{k: v for k, v in h.items() if k != "kind"}})
                    applied.append(g["kind"])
                    continue
                except space.KnobError:
                    pass
            out["groups"].append(dict(g))
        if applied and out != base:
            yield out, f"seed from seed_hints[{i}]: {', '.join(sorted(set(applied)))} knobs that won before"


# The Triton interpreter costs ~1-3 ms per program instance whatever the tile: on the CPU the seed
# takes the largest tiles, so a correctness search spends its time on arithmetic, not on launches.
_INTERPRETER_TILES = {"pointwise": {"block": 8192}, "matmul": {"block_m": 128, "block_n": 128, "block_k": 64}}


def for_device(config: dict, device: str) -> dict:
    if device != "cpu":
        return config
    groups = [{**g, **_INTERPRETER_TILES.get(g["kind"], {})} for g in config["groups"]]
    return {**config, "groups": groups}


@dataclass(frozen=True)
class Tile:
    """One contraction setting of the seed portfolio (group_m is 8 throughout)."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    precision: str
    why: str

    def knobs(self) -> dict:
        return {
            "block_m": self.block_m,
            "block_n": self.block_n,
            "block_k": self.block_k,
            "group_m": 8,
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "precision": self.precision,
        }


_TC = "on tensor cores at near-fp32 accuracy"
# Best first: the tiles fast Hopper Triton GEMMs use (Triton's matmul tutorial, inductor's mm configs),
# with K steps of 32 where the fp16 configs take 64, since fp32 operands take twice the shared memory.
# tf32x3 (three TF32 passes) passes fp32 tolerances at tensor-core speed; the two ieee entries keep an
# exact-fp32 option among the large tiles.
_CURATED = (
    Tile(128, 128, 32, 8, 3, "tf32x3", f"the square Hopper GEMM tile {_TC}"),
    Tile(128, 256, 32, 8, 3, "tf32x3", f"a wide tile reusing each A tile over 256 columns, {_TC}"),
    Tile(128, 128, 64, 8, 3, "tf32x3", f"deeper K steps, half the loop trips, {_TC}"),
    Tile(64, 256, 32, 4, 4, "tf32x3", f"a short wide tile with a 4-deep load pipeline, {_TC}"),
    Tile(128, 128, 32, 8, 4, "tf32x3", f"the square tile with a 4-deep load pipeline, {_TC}"),
    Tile(256, 128, 32, 8, 3, "tf32x3", f"a tall tile reusing each B tile over 256 rows, {_TC}"),
    Tile(128, 64, 32, 4, 4, "tf32x3", f"a mid-sized tile: twice the programs of 128x128 for mid-sized outputs, {_TC}"),
    Tile(64, 128, 32, 4, 4, "tf32x3", f"a mid-sized tile: twice the programs of 128x128 for mid-sized outputs, {_TC}"),
    Tile(128, 128, 32, 8, 3, "ieee", "a large tile in exact fp32 FMAs, for when tf32x3 misses the tolerance"),
    Tile(64, 128, 32, 4, 4, "ieee", "a mid-sized tile in exact fp32 FMAs"),
)

SMEM_LIMIT_BYTES = 220 * 1024  # Hopper: 228 KB of shared memory per SM, less what a kernel keeps besides its tiles


def _smem_bytes(block_m: int, block_n: int, block_k: int, num_stages: int) -> int:
    """Shared memory of a contraction's load pipeline: one fp32 A and B tile per stage (bf16 or fp16
    operands take half, so this bound holds for every dtype the kernel takes)."""
    return num_stages * 4 * (block_m * block_k + block_k * block_n)


# An entry whose pipeline does not fit shared memory fails to compile (out of resources): dropped here.
PORTFOLIO = tuple(t for t in _CURATED if _smem_bytes(t.block_m, t.block_n, t.block_k, t.num_stages) <= SMEM_LIMIT_BYTES)

SMS = 132  # H100 SXM and H200: fewer output tiles than this leave SMs idle
# split_k values for a few-tile, long-K contraction: the smallest giving about SMS..4*SMS programs.
# 32 (legal in the space, and what the default's own split picks) covers outputs of 2-4 tiles.
SPLIT_WAYS = (4, 8, 16, 32)
SPLIT_TOP = 3  # portfolio entries that get a split-K variant right after them


@dataclass(frozen=True)
class Contraction:
    """The shipped sizes of one matmul group (the trace's hints)."""

    batch: int
    m: int
    n: int
    k: int
    splittable: bool  # split_k rewrites it (a convolution's GEMM writing into its own layout does not)


def _pow2_at_least(x: int) -> int:
    return max(16, 1 << max(0, x - 1).bit_length())


def contractions(lowered: Lowered, config: dict) -> dict[int, Optional[Contraction]]:
    """Per matmul group of `config` (by index), its sizes at the shipped shapes; None where a size has
    no hint (a size the trace left symbolic with no value)."""
    out: dict[int, Optional[Contraction]] = {}
    for gi, (g, knobs) in enumerate(zip(lowered.plan(config["fuse"]), config["groups"])):
        if g.kind != "matmul" or knobs["kind"] != "matmul":
            continue
        mm = g.head
        sizes = [size_hint(v, lowered.hints) for v in (ir.prod(mm.batch), mm.m, mm.n, mm.k)]
        if any(v is None or v <= 0 for v in sizes):
            out[gi] = None
            continue
        b, m, n, k = (int(v) for v in sizes if v is not None)
        out[gi] = Contraction(batch=b, m=m, n=n, k=k, splittable=mm.out_index is None)
    return out


def _fit(tile: Tile, c: Optional[Contraction]) -> dict:
    """The tile's knobs, block_m and block_n clamped to the output (a 32-row output takes 32-row tiles:
    the launch would clamp them anyway, so two entries that differ only there are one configuration)."""
    knobs = tile.knobs()
    if c is not None:
        knobs["block_m"] = min(knobs["block_m"], _pow2_at_least(c.m))
        knobs["block_n"] = min(knobs["block_n"], _pow2_at_least(c.n))
    return knobs


def _split_ways(knobs: dict, c: Optional[Contraction]) -> Optional[tuple[int, int]]:
    """(split_k, output tiles) when a contraction has too few output tiles to fill the GPU and a long
    K; None otherwise. Every split keeps at least 8 K steps per program, so the partials' round trip
    stays small beside the work."""
    if c is None or not c.splittable:
        return None
    tiles = c.batch * -(-c.m // knobs["block_m"]) * -(-c.n // knobs["block_n"])
    if tiles >= SMS or not (c.k >= 8 * max(c.m, c.n) or c.k >= 16384):
        return None
    ways = [w for w in SPLIT_WAYS if c.k // w >= 8 * knobs["block_k"]]
    if not ways:
        return None
    return next((w for w in ways if tiles * w >= SMS), ways[-1]), tiles


def portfolio(lowered: Lowered, base: dict) -> Iterator[tuple[dict, str]]:
    """The curated tiles applied to every matmul group of `base` (other groups as they are), fitted
    to the shipped sizes, each of the first SPLIT_TOP followed by its split-K variant where that
    fills the GPU; no configuration twice, nor the base again."""
    shapes = contractions(lowered, base)
    if not shapes:
        return
    seen = {json.dumps(base, sort_keys=True)}
    top = 0
    for tile in PORTFOLIO:
        out = {"schedule": SCHEDULE, "fuse": dict(base["fuse"]), "groups": [dict(g) for g in base["groups"]]}
        clamped = []
        for gi, c in shapes.items():
            knobs = _fit(tile, c)
            space.validate_group("matmul", knobs, partial=True)
            out["groups"][gi].update(knobs)
            if c is not None and (knobs["block_m"], knobs["block_n"]) != (tile.block_m, tile.block_n):
                clamped.append(f"{knobs['block_m']}x{knobs['block_n']} for M={c.m}, N={c.n}")
        key = json.dumps(out, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        name = (
            f"{tile.block_m}x{tile.block_n}x{tile.block_k} tiles, {tile.num_warps} warps, "
            f"{tile.num_stages} stages, {tile.precision}"
        )
        fitted = f" (clamped to {'; '.join(clamped)})" if clamped else ""
        yield out, f"seed portfolio: {name}{fitted}: {tile.why}"
        if top >= SPLIT_TOP:
            continue
        top += 1
        split = {"schedule": SCHEDULE, "fuse": dict(out["fuse"]), "groups": [dict(g) for g in out["groups"]]}
        notes = []
        for gi, c in shapes.items():
            found = _split_ways(split["groups"][gi], c)
            if found is not None and c is not None:
                ways, tiles = found
                split["groups"][gi]["split_k"] = ways
                notes.append(f"{tiles} output tile(s) with K={c.k} split {ways} ways for {tiles * ways} programs")
        key = json.dumps(split, sort_keys=True)
        if notes and key not in seen:
            seen.add(key)
            yield split, f"seed portfolio: {name}, split K: {'; '.join(notes)} on {SMS} SMs"
        if top == 1:  # the other kind, measured in the first batch beside the Triton tiles (library.py)
            hybrid = {"schedule": SCHEDULE, "fuse": dict(base["fuse"]), "groups": [dict(g) for g in base["groups"]]}
            for gi in shapes:
                hybrid["groups"][gi]["engine"] = "library"
            seen.add(json.dumps(hybrid, sort_keys=True))
            yield (
                hybrid,
                (
                    "seed portfolio: the library's GEMM (cuBLAS through torch.matmul) with the epilogue in one Triton "
                    "kernel, a labelled hybrid: where cuBLAS beats the Triton tiles at this shape"
                ),
            )


class LoweringSearch:
    """Configurations of one lowered program, rendered to candidates."""

    def __init__(self, lowered: Lowered):
        self.lowered = lowered

    def kinds(self) -> tuple[str, ...]:
        return tuple(g["kind"] for g in self.lowered.default_config()["groups"])

    def propose(self, request: ProposeRequest, note: str = "", extra_hints: tuple = ()) -> ProposeResult:
        """`extra_hints`: knobs of past wins with the same schedule kinds on other op families."""
        base = for_device(self.lowered.default_config(), request.device)
        if request.action is Action.seed:
            candidates = self._seed(base, request, extra_hints)
        else:
            candidates = self._from_parent(base, request)
        proposals: list[Proposal] = []
        seen = set(request.seen_sha256)
        parent_id = request.parent.candidate_id if request.parent and request.action is not Action.seed else None
        rendered = 0
        for config, rationale, tags in candidates:
            try:
                config = _normal(self.lowered, config)
                if not request.hybrids and any(g.get("engine") == "library" for g in config["groups"]):
                    continue  # --no-hybrid: a library contraction could never be the search's pick
                source = self.lowered.render(config)
            except (LoweringError, space.KnobError) as exc:
                return ProposeResult(
                    proposals=tuple(proposals),
                    errors=(ProposalError(kind="unsupported", message=" ".join(str(exc).split())[:500]),),
                )
            rendered += 1
            sha = source_sha256(source)
            if sha in seen:
                if rendered > 400:
                    break
                continue
            seen.add(sha)
            kinds = "+".join(g["kind"] for g in config["groups"])
            proposals.append(
                Proposal(
                    source=source,
                    rationale=f"{rationale} [schedule: {kinds}]{note}",
                    transformation_tags=tuple(tags) + (f"schedule={kinds}",),
                    knobs=config,
                    parent_id=parent_id,
                    template_name=f"lowering/{kinds}.j2",
                    template_sha256=templates_sha256(),
                )
            )
            if len(proposals) >= request.n:
                break
        errors = ()
        if len(proposals) < request.n:
            errors = (
                ProposalError(
                    kind="exhausted",
                    message=(
                        f"{request.action.value}: {len(proposals)} of {request.n} new configuration(s) of the lowered "
                        f"schedule; every other one in reach was already evaluated"
                    ),
                ),
            )
        return ProposeResult(proposals=tuple(proposals), errors=errors)

    def _seed(self, base: dict, request: ProposeRequest, extra: tuple) -> Iterator[tuple[dict, str, tuple]]:
        for config, why in _hinted(self.lowered, base, request.seed_hints):
            yield config, why, ("seed", "seed_hint")
        for config, why in _hinted(self.lowered, base, extra):
            yield (
                config,
                why.replace("seed_hints", "schedule hints", 1) + " (same schedule kind, another op)",
                ("seed", "schedule_hint"),
            )
        yield base, "seed: the lowered graph's default schedule", ("seed",)
        if request.device != "cpu":  # the interpreter's tiles (for_device) are the CPU's whole portfolio
            for config, why in portfolio(self.lowered, base):
                yield config, why, ("seed", "portfolio")
        # The tile's layout first: where a middle or leading dim is reduced, "rx" puts the contiguous kept
        # dims along the lanes, and a GPU's first batch of 8 measures both layouts (at its place among the
        # knob moves it came ninth, past the batch). Elsewhere "rx" renders xr's kernels and is skipped.
        moves = space.knob_moves(base) + space.schedule_moves(base)
        moves.sort(key=lambda m: m.name != "order")
        for move in moves:
            yield move.apply(base), f"seed variant, {move.describe()}: {move.why}", ("seed", move.tag())

    def _parent(self, base: dict, request: ProposeRequest) -> tuple[dict, str]:
        if request.parent is None:
            return base, "no parent given: from the default schedule; "
        knobs = dict(request.parent.knobs)
        if not is_lowering_config(knobs):
            return base, "parent has no lowering configuration: from the default schedule; "
        try:
            return _normal(self.lowered, knobs), ""
        except space.KnobError as exc:
            return base, f"parent configuration not usable ({exc}): from the default schedule; "

    def _from_parent(self, base: dict, request: ProposeRequest) -> Iterator[tuple[dict, str, tuple]]:
        start, prefix = self._parent(base, request)
        parent_sha = source_sha256(request.parent.source) if request.parent else ""
        rng = random.Random(f"{request.rng_seed}:{request.action.value}:{parent_sha}")
        if request.action is Action.restart:
            pool = [space.random_config(start, rng) for _ in range(48)]
            pool.sort(key=lambda c: -space.distance(start, c))
            for config in pool:
                yield (
                    config,
                    (
                        f"{prefix}restart: a random configuration {space.distance(start, config):.1f} "
                        f"knob-steps from the parent, to leave a local optimum"
                    ),
                    ("restart",),
                )
            return
        last = {t.split("=")[0] for t in (request.parent.transformation_tags if request.parent else ())}
        knob_moves = space.knob_moves(start)
        sched = space.schedule_moves(start)
        rng.shuffle(knob_moves)
        along = [m for m in knob_moves if m.tag().split("=")[0] in last]
        across = [m for m in knob_moves if m.tag().split("=")[0] not in last]
        pairs = []
        for a in knob_moves[:12]:
            for b in knob_moves[:12]:
                if a.group == b.group and a.name < b.name:
                    pairs.append((a, b))
        if request.action is Action.refine:
            order: list = along + across + sched + pairs
            verb = "refine"
        else:
            order = across + sched + pairs + along
            verb = request.action.value
        for item in order:
            if isinstance(item, tuple):
                a, b = item
                yield (
                    b.apply(a.apply(start)),
                    f"{prefix}{verb}, {a.describe()} and {b.describe()}: {a.why}; {b.why}",
                    (a.tag(), b.tag()),
                )
            else:
                yield item.apply(start), f"{prefix}{verb}, {item.describe()}: {item.why}", (item.tag(),)
