"""Fusion groups: which tasks of the lowered program share one kernel, and each kernel's schedule kind.

Tasks come in dependency order; a task joins the group being built when it iterates over a space that
group can serve, so every buffer it reads is either finished by an earlier kernel or produced inside
the group (read from registers, never from memory the kernel is still writing):

- pointwise: any number of pointwise tasks over one shape (siblings written by one kernel);
- reduction: one reduction, its prologue inlined, with pointwise epilogues over its kept space;
- row (a normalisation): several reductions over the same rows (a mean, then a variance that reads
  it), pointwise outputs over the full rows (x - mean) * rstd), epilogues over the kept space;
- window: a reduction whose reduced axes are a pooling window (the same kernel as a reduction);
- matmul: a contraction with its pointwise epilogue over the output tile;
- scan: a cumulative sum/product along one axis, with epilogues over the same shape.

Whether a read inside a group is really "the value this program just computed" is decided when the
kernel is written (codegen.FusionError); a group that fails is split and the program scheduled again.
The `fuse` switches turn each kind of merge off, which is one of the search's schedule moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from agent.proposers.lowering.ir import (
    MatmulTask,
    PointwiseTask,
    ReductionTask,
    ScanTask,
    Task,
    same,
)

KINDS = ("pointwise", "reduction", "row", "window", "matmul", "scan")


@dataclass
class Group:
    kind: str
    tasks: list = field(default_factory=list)

    @property
    def head(self) -> Task:
        return self.tasks[0]

    def reductions(self) -> list[ReductionTask]:
        return [t for t in self.tasks if isinstance(t, ReductionTask)]

    def produced(self) -> set[str]:
        return {t.out.name for t in self.tasks}

    def label(self) -> str:
        return self.kind


def _same_shape(a, b) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def _is_window(t: ReductionTask) -> bool:
    from agent.proposers.lowering.ir import Masked

    return (
        isinstance(t.body, Masked)
        and t.rtype in ("max", "sum")
        and len(t.reduced) >= 1
        and t.reduced == tuple(range(len(t.full_shape) - len(t.reduced), len(t.full_shape)))
    )


def _new_group(t: Task) -> Group:
    if isinstance(t, ReductionTask):
        return Group("window" if _is_window(t) else "reduction", [t])
    if isinstance(t, MatmulTask):
        return Group("matmul", [t])
    if isinstance(t, ScanTask):
        return Group("scan", [t])
    return Group("pointwise", [t])


def _reads_group(t: Task, g: Group) -> bool:
    return bool(t.reads() & g.produced())


def can_join(g: Group, t: Task, fuse: dict) -> bool:
    if g.kind in ("reduction", "row", "window"):
        red = g.reductions()[0]
        kept_shape = red.out.shape
        if isinstance(t, ReductionTask):
            if not fuse.get("rows", True) or g.kind == "window" or _is_window(t):
                return False
            return _same_shape(t.full_shape, red.full_shape) and tuple(t.reduced) == tuple(red.reduced)
        if isinstance(t, PointwiseTask) and _reads_group(t, g):
            if _same_shape(t.out.shape, red.full_shape) and g.kind != "window":
                return fuse.get("rows", True)
            if _same_shape(t.out.shape, kept_shape):
                return fuse.get("epilogue", True)
        return False
    if g.kind == "matmul":
        mm = g.head
        return (
            isinstance(t, PointwiseTask)
            and fuse.get("epilogue", True)
            and _reads_group(t, g)
            and _same_shape(t.out.shape, mm.out.shape)
        )
    if g.kind == "scan":
        return (
            isinstance(t, PointwiseTask)
            and fuse.get("epilogue", True)
            and _reads_group(t, g)
            and _same_shape(t.out.shape, g.head.out.shape)
        )
    if g.kind == "pointwise":
        return (
            isinstance(t, PointwiseTask) and fuse.get("siblings", True) and _same_shape(t.out.shape, g.head.out.shape)
        )
    return False


def group_tasks(tasks: list, fuse: Optional[dict] = None, forbidden: frozenset = frozenset()) -> list[Group]:
    """Greedy, in dependency order: a task joins the last group when it can, else opens a new one.

    `forbidden` holds (first task's buffer, task's buffer) pairs that failed to fuse before."""
    fuse = fuse or {}
    groups: list[Group] = []
    for t in tasks:
        g = groups[-1] if groups else None
        if g is not None and (g.head.out.name, t.out.name) not in forbidden and can_join(g, t, fuse):
            g.tasks.append(t)
            if (
                g.kind == "reduction"
                and isinstance(t, (ReductionTask,))
                or (
                    g.kind == "reduction"
                    and isinstance(t, PointwiseTask)
                    and _same_shape(t.out.shape, g.head.full_shape)
                )
            ):
                g.kind = "row"
            continue
        groups.append(_new_group(t))
    return groups


def stored(groups: list[Group], outputs: set[str]) -> dict[int, set[str]]:
    """Per group, the buffers it must write to memory: outputs, and what later kernels read."""
    out: dict[int, set[str]] = {}
    for i, g in enumerate(groups):
        later = set()
        for h in groups[i + 1 :]:
            for t in h.tasks:
                later |= t.reads()
        out[i] = {name for name in g.produced() if name in outputs or name in later}
    return out
