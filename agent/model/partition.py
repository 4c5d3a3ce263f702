"""The captured graph cut into regions, in the forward's order.

A region is what one searched problem covers:
- `contraction`: a matmul or convolution with its fusable epilogue, the pointwise nodes after it whose
  output has the contraction's size (views between allowed) and that read what the region computed (bias, BatchNorm in eval
  mode, activation, residual add);
- `chain`: the pointwise, normalisation and reduction work between two contractions;
- `reference`: nodes the lowering does not take (no schedule lowers them); they stay PyTorch ops.

Views (reshape, permute, slices) and the work on parameters alone (a BatchNorm's rsqrt(var + eps)) own
no region: they are copied into every region that reads them, as the lowering itself recomputes them.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Optional

from agent.model.graph import VIEWS, Meta, is_contraction, lowerable, op_name


@dataclass(eq=False)
class Region:
    name: str  # r0, r1, ... in forward order
    kind: str  # contraction | chain | reference
    nodes: list = field(default_factory=list)  # fx nodes the region computes, in order
    inputs: list = field(default_factory=list)  # fx nodes it reads from outside (placeholders, other regions)
    outputs: list = field(default_factory=list)  # its nodes read outside it (later regions, the graph output)
    # the keyword values of the F.scaled_dot_product_attention call the region's nodes compute (attention.py):
    # its problem and reference path are that call over its inputs, not its nodes' ops
    canonical: Optional[dict[str, Any]] = None

    @property
    def ops(self) -> list[str]:
        if self.canonical is not None:
            return ["scaled_dot_product_attention"]
        return [op_name(n.target) for n in self.nodes if n.target is not operator.getitem]


def _tensor(meta) -> bool:
    return isinstance(meta, Meta)


def free_nodes(graph, meta: dict) -> set:
    """Nodes that own no region: sizes, views, and work on parameters and constants alone."""
    params = {n for n, ph in _placeholders(graph) if ph}
    free: set = set()
    weight_only: set = set(params)
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        m = meta.get(n)
        reads = list(n.all_input_nodes)
        if not _valued(m):
            free.add(n)  # a size (sym_size, arithmetic on sizes)
        elif n.target in VIEWS or (n.target is operator.getitem and n.args[0] in free):
            free.add(n)
        elif all(a in weight_only or not _valued(meta.get(a)) for a in reads):
            free.add(n)
        if n in free and all(a in weight_only or not _valued(meta.get(a)) for a in reads):
            weight_only.add(n)
    return free


def _valued(m) -> bool:
    """A tensor, or a tuple of them (split, var_mean): a value, where anything else is a size."""
    return isinstance(m, (Meta, tuple))


def _placeholders(graph):
    """(node, is_parameter) for each placeholder; parameters are the ones named in `meta` later."""
    return [(n, n.meta.get("kscout_param", False)) for n in graph.nodes if n.op == "placeholder"]


def sources(node, free: set, meta: dict) -> set:
    """The non-free nodes a node reads, looking through views and parameter work."""
    out: set = set()
    stack = list(node.all_input_nodes)
    while stack:
        a = stack.pop()
        if a in free:
            if isinstance(meta.get(a), (Meta, tuple)):  # a size is written as its value: no input
                stack.extend(a.all_input_nodes)
        else:
            out.add(a)
    return out


def _numel(m) -> int:
    n = 1
    for s in m.shape:
        n *= s
    return n


def _epilogue(node, region: Region, meta: dict, free: set) -> bool:
    head = meta.get(region.nodes[0])
    m = meta.get(node)
    if not (isinstance(m, Meta) and isinstance(head, Meta)) or _numel(m) != _numel(head):
        return False  # the contraction's output size (through a view: a bmm's scale in attention)
    if is_contraction(node) or not lowerable(node):
        return False
    reads = sources(node, free, meta)
    inside = set(region.nodes)
    biggest = max((_numel(meta[a]) for a in reads if _tensor(meta.get(a))), default=0)
    return bool(reads & inside) and biggest <= _numel(m)


def partition(graph, meta: dict, params: set) -> list[Region]:
    """Regions of the graph (see the module docstring); `params`: placeholder nodes of parameters."""
    for n in graph.nodes:
        if n.op == "placeholder":
            n.meta["kscout_param"] = n in params
    free = free_nodes(graph, meta)
    regions: list[Region] = []
    owner: dict = {}
    for n in graph.nodes:
        if n.op != "call_function" or n in free:
            continue
        if n.target is operator.getitem and n.args[0] in owner:
            region = owner[n.args[0]]  # a part of a multi-output node stays with it
        elif is_contraction(n) and lowerable(n):
            region = Region(f"r{len(regions)}", "contraction")
            regions.append(region)
        elif not lowerable(n):
            last = regions[-1] if regions else None
            region = last if last is not None and last.kind == "reference" else Region(f"r{len(regions)}", "reference")
            if region is not last:
                regions.append(region)
        else:
            last = regions[-1] if regions else None
            if last is not None and last.kind == "contraction" and _epilogue(n, last, meta, free):
                region = last
            elif last is not None and last.kind == "chain":
                region = last
            else:
                region = Region(f"r{len(regions)}", "chain")
                regions.append(region)
        region.nodes.append(n)
        owner[n] = region
    wire(graph, regions, owner, free, meta)
    return regions


def wire(graph, regions: list[Region], owner: dict, free: set, meta: dict) -> None:
    """Each region's inputs and outputs from its nodes; `owner`: node -> its region."""
    output = next(n for n in graph.nodes if n.op == "output")
    for region in regions:
        inside = set(region.nodes)
        seen: dict = {}
        for n in region.nodes:
            for a in sorted(sources(n, free, meta), key=_order(graph)):
                if a not in inside:
                    seen.setdefault(a, None)
        region.inputs = list(seen)
    readers: dict = {}
    for n in list(graph.nodes):
        if n.op == "output" or n in free:
            continue
        for a in sources(n, free, meta):
            readers.setdefault(a, set()).add(owner.get(n))
    for a in sources(output, free, meta) if output.args else ():
        readers.setdefault(a, set()).add(None)
    for region in regions:
        region.outputs = [n for n in region.nodes if any(r is not region for r in readers.get(n, ()))]


def _order(graph):
    index = {n: i for i, n in enumerate(graph.nodes)}
    return lambda n: index[n]


def param_placeholders(captured) -> set:
    """The placeholder nodes of the model's parameters, buffers and plain tensor attributes (the model's
    state: work on it alone is glue) and of carriers, which are settings."""
    nodes = [n for n in captured.gm.graph.nodes if n.op == "placeholder"]
    return {n for n, ph in zip(nodes, captured.placeholders) if ph.kind in ("param", "attr", "carrier")}


def describe(region: Region, meta: dict) -> str:
    """`addmm + relu -> [4, 32]`: the region's ops and its first output's shape."""
    ops = region.ops
    head = ", ".join(dict.fromkeys(ops))
    out = meta.get(region.outputs[0]) if region.outputs else None
    return f"{head} -> {list(out.shape)}" if isinstance(out, Meta) else head
