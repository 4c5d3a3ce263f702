"""Choosing configurations of a lowered program for each search action.

seed: configurations that worked before for the same schedule kinds (seed hints, matched group by
group on the kind, so a row kernel learns from any row kernel), then the default, then single moves.
refine: continue along what the parent just changed, then its other neighbours, then schedule moves
(split or merge fusion groups, which also switches a reduction between one kernel per row and
separate passes) and coupled pairs. sibling: the same moves, those the parent did not just make
first. restart: random configurations far from the parent. A source already evaluated is never
returned.
"""

from __future__ import annotations

import functools
import hashlib
import random
from importlib import resources
from typing import Any, Iterable, Iterator

from agent.proposers.base import Action, Proposal, ProposalError, ProposeRequest, ProposeResult
from agent.proposers.lowering import Lowered, LoweringError, space
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
FAMILY_SCHEDULE = {"rowwise": "row", "elementwise": "pointwise", "reduction": "reduction", "matmul": "matmul"}


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
    return {"schedule": SCHEDULE, "fuse": fuse, "groups": config_groups({"groups": config.get("groups", [])}, groups)}


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
        for move in space.knob_moves(base) + space.schedule_moves(base):
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
