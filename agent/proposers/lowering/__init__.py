"""Lowering: any traced reference to all-Triton candidates, the way a compiler's scheduler works.

    capture (capture.py)      the forward as an aten graph with symbolic sizes (make_fx, fake tensors;
                              functionalized where a write goes into a view)
    lower (lower.py)          each aten op to index functions and tasks (lowerings.py), sizes in sympy
    schedule (schedule.py)    tasks into fusion groups, each with a schedule kind
    render (render.py)        one kernel per group from its kind's jinja2 template (codegen.py, printer.py)
                              and a ModelNew that launches them in order
    space (space.py)          the knobs of each schedule kind and the fusion switches the search moves

Entry points: `lower_problem(problem)` (cached per source) and `Lowered.render(config)`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

from agent.proposers.lowering.ir import LoweringError, UnsupportedOps
from agent.proposers.lowering.lowerings import SCHEDULES

__all__ = ["Lowered", "LoweringError", "UnsupportedOps", "SCHEDULES", "lower_problem", "lower_source"]


@dataclass
class Lowered:
    name: str
    program: object  # lowerings.Program
    init: object  # capture.InitSource
    hints: dict  # size symbol -> value at the shipped sizes

    def plan(self, fuse: dict):
        from agent.proposers.lowering.render import plan_groups

        return plan_groups(self.program, fuse)[0]

    def kinds(self, fuse: dict) -> tuple[str, ...]:
        return tuple(g.kind for g in self.plan(fuse))

    def default_config(self, fuse: dict | None = None) -> dict:
        """The seed configuration: each kind's defaults, adjusted to the shipped sizes (long reductions
        over few rows split, contractions with few tiles and a long K split over K)."""
        from agent.proposers.lowering import space
        from agent.proposers.lowering.split import degenerate_rows, suggest

        chosen = fuse is not None
        fuse = dict(fuse or space.DEFAULT_FUSE)
        groups = self.plan(fuse)
        rows = [g for g in groups if g.kind == "row"]
        if not chosen and rows and all(degenerate_rows(g, self.hints) for g in rows):
            fuse["rows"] = False
            groups = self.plan(fuse)
        configs = [{**space.defaults(g.kind), **suggest(g, self.hints)} for g in groups]
        return {"schedule": "lowering", "fuse": fuse, "groups": configs}

    def render(self, config: dict) -> str:
        from agent.proposers.lowering.render import render

        header = (
            f"{self.name}: candidate from kernelscout's lowering (graph -> Triton schedules).\n\n"
            f"config: {json.dumps(config, sort_keys=True)}"
        )
        return render(self.program, self.init, config, header)[0]


@functools.lru_cache(maxsize=32)
def _lower_cached(source: str, path: str, sha: str) -> Lowered:
    from agent.proposers.lowering.capture import capture
    from agent.proposers.lowering.lower import lower

    del sha
    name = path.rsplit("/", 1)[-1]
    captured = capture(source, path)
    program = lower(captured, name)
    return Lowered(name=name, program=program, init=captured.init, hints=captured.hints)


def lower_source(source: str, path: str) -> Lowered:
    return _lower_cached(source, path, hashlib.sha256(source.encode()).hexdigest())


def lower_problem(problem) -> Lowered:
    """The lowered program of a problem (its reference source travels with it)."""
    source = problem.source or open(problem.source_path).read()
    return lower_source(source, problem.source_path)
