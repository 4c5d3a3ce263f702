"""One ModelNew for the whole model: the regions' winning kernels, the reference ops elsewhere.

The file is a candidate like any other (the evaluator judges it against the model file). It holds:
- the dispatch of `kscout export` (agent/lifecycle/templates/export_runtime.py.j2, rendered and its
  names prefixed `_rt_`): a region's kernel runs only on the arch it was proven on, for the dtypes and
  exact input shapes of its problem, on contiguous inputs; anything else takes the region's reference;
- each winning candidate's source, every top-level name prefixed `_r{k}_` so kernels do not collide;
- each region's reference path (`_r{k}_reference`), the region's aten ops as extracted (an attention
  region's in the matmul, mask and softmax the model wrote: extract.attention_math);
- ModelNew: the model's own __init__ (so the evaluator binds the model's weights to it), and a forward
  that reads parameters and tensor attributes, calls each region in order, writes back the attributes
  the model's forward changes (agent/proposers/lowering/state.py) and returns the graph's outputs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import torch

from agent.model import extract
from agent.model.graph import Meta, Traced
from agent.model.partition import Region
from agent.proposers.lowering.capture import attr_assign, attr_expr


@dataclass(frozen=True)
class Winner:
    region: str
    source: str  # the candidate (ModelNew over the region's inputs)
    archs: tuple[str, ...]  # where it was proven: "sm_90"; on a CPU also the emulated target's arch
    dtype: str
    input_shapes: tuple[tuple[int, ...], ...]


def proven_archs(device: str) -> tuple[str, ...]:
    """The arch names the export dispatch (its `arch_of`) sees where a kernel was proven on `device`.

    On a CPU the evaluator runs candidates as the emulated target would see them (evaluation/emulation.py:
    tensors on "cuda", that target's arch), and plain interpreted runs see "cpu": both took the kernel."""
    dev = torch.device(device)
    if dev.type != "cuda":
        from evaluation.emulation import device_spec

        return (device_spec().arch, dev.type)
    if getattr(torch.version, "hip", None):
        return (torch.cuda.get_device_properties(dev).gcnArchName.split(":")[0],)
    major, minor = torch.cuda.get_device_capability(dev)
    return (f"sm_{major}{minor}",)


def prefixed(source: str, prefix: str) -> str:
    """The module's source with every top-level name it defines renamed `prefix + name` (imports kept,
    the docstring dropped)."""
    tree = ast.parse(source)
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        tree.body = tree.body[1:]
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in defined:
                node.id = prefix + node.id
            return node

        def _def(self, node):
            if node.name in defined and node in tree.body:
                node.name = prefix + node.name
            self.generic_visit(node)
            return node

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _def

    return ast.unparse(Rename().visit(tree))


def _runtime() -> str:
    from agent.lifecycle.export import _templates

    text = _templates().get_template("export_runtime.py.j2").render(version="", exported_at="")
    tree = ast.parse(text)
    keep = ("REFERENCE", "arch_of", "choose")  # share_parameters: the assembled model owns its weights
    tree.body = [
        n
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom))
        or getattr(n, "name", None) in keep
        or any(getattr(t, "id", None) in keep for t in getattr(n, "targets", []))
    ]
    return prefixed(ast.unparse(tree), "_rt_")


_REGION_CALL = '''
def _kscout_region(kernel, reference, spec, inputs):
    """A region through the export dispatch: its kernel where proven, else its reference ops."""
    path, _ = _rt_choose(spec["kernels"], spec["bindings"], spec["ranks"], inputs)
    out = reference(*inputs) if path == _rt_REFERENCE else kernel(*inputs)
    return out if isinstance(out, tuple) else (out,)
'''


def _spec(w: Winner) -> dict:
    bindings = {f"S{i}_{d}": (i, d) for i, shape in enumerate(w.input_shapes) for d in range(len(shape))}
    sizes = extract.size_params(w.input_shapes)
    shape_range = {k: {"min": v, "max": v, "multiple_of": 1} for k, v in sizes.items()}
    return {
        "kernels": {arch: {"dtypes": [w.dtype], "shape_range": shape_range} for arch in w.archs},
        "bindings": bindings,
        "ranks": [len(s) for s in w.input_shapes],
    }


def assemble(traced: Traced, regions: list[Region], free: set, winners: dict[str, Winner], title: str) -> str:
    """The assembled candidate's source (see the module docstring)."""
    cap, meta = traced.captured, traced.meta
    init = cap.init
    parts = [f'"""{title}"""', "", "import torch", "import torch.nn as nn", "import torch.nn.functional as F"]
    parts += [*init.imports, "", _runtime(), _REGION_CALL, extract.helpers_source(), *init.helpers]
    emitted: set[str] = set()
    for r in regions:
        # an attention region's reference is the math the model wrote, not the library call of its problem
        lines, outs = extract.body(r, [f"a{i}" for i in range(len(r.inputs))], meta, free, library=False)
        head = [f"def _{r.name}_reference({', '.join(f'a{i}' for i in range(len(r.inputs)))}):"]
        head.append(f"    _dev = {'a0.device' if r.inputs else 'torch.device(' + repr('cpu') + ')'}")
        parts.append("\n".join(head + [f"    {x}" for x in lines] + [f"    return ({', '.join(outs)},)"]))
        w = winners.get(r.name)
        if w is not None and w.region not in emitted:  # regions that share a search share its kernel's source
            emitted.add(w.region)
            parts.append(prefixed(w.source, f"_{w.region}_"))
        if w is not None:  # and each takes it at its own sizes only
            parts.append(f"_{r.name}_SPEC = {_spec(w)!r}")
    body = init.body.rstrip("\n") + "\n"
    body += "".join(f"        self._kscout_{name} = _{w.region}_ModelNew()\n" for name, w in winners.items())
    forward = _forward(traced, regions, free, winners)
    parts.append(f"class ModelNew(nn.Module):\n    def __init__({init.signature}):\n{body}\n{forward}")
    return "\n\n\n".join(parts) + "\n"


def _forward(traced: Traced, regions: list[Region], free: set, winners: dict[str, Winner]) -> str:
    cap, meta = traced.captured, traced.meta
    graph = cap.gm.graph
    ph_nodes = [n for n in graph.nodes if n.op == "placeholder"]
    names: dict = {}
    lines = []
    home = next((ph.name for ph in cap.placeholders if ph.kind == "input"), None)
    for i, (node, ph) in enumerate(zip(ph_nodes, cap.placeholders)):
        if ph.kind == "param":
            names[node] = f"p{i}"
            lines.append(f"p{i} = {attr_expr('self', ph.name)}")
            home = home or f"p{i}"
        elif ph.kind == "scalar":
            names[node] = f"x{i}"
            lines.append(f"x{i} = torch.as_tensor({ph.name})")
        elif ph.kind == "input":
            names[node] = ph.name
    for i, (node, ph) in enumerate(zip(ph_nodes, cap.placeholders)):
        if ph.kind == "attr" and node.users:  # read at every call, where the first input is (lowering/state.py)
            names[node] = f"s{i}"
            lines.append(f"s{i} = {attr_expr('self', ph.name)}{f'.to({home}.device)' if home else ''}")
    produced = {o for r in regions for o in r.outputs}
    for r in regions:
        # views a region reads as inputs (an attention's q, k, v) are computed here from what they view,
        # contiguous as the dispatch takes a kernel only on contiguous inputs
        lines += _glue([a for a in r.inputs if a not in names], names, meta, f"i_{r.name}_")
        args = ", ".join(f"{names[a]}.contiguous()" if a in free and a not in produced else names[a] for a in r.inputs)
        call = (
            f"_kscout_region(self._kscout_{r.name}, _{r.name}_reference, _{r.name}_SPEC, ({args}{',' if len(r.inputs) == 1 else ''}))"
            if r.name in winners
            else f"_{r.name}_reference({args})"
        )
        lines.append(f"o_{r.name} = {call}")
        for k, out in enumerate(r.outputs):
            names[out] = f"o_{r.name}_{k}"
            lines.append(f"o_{r.name}_{k} = o_{r.name}[{k}]")
    output = next(n for n in graph.nodes if n.op == "output")
    outs = output.args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    lines += _glue(outs, names, meta, "g")
    ret = [extract._fmt(o, names, meta) for o in outs]
    ret, written = ret[: cap.n_outputs], ret[cap.n_outputs :]
    for w, value in zip(cap.writes, written):  # the model's own state changes, as its forward makes them
        lines.append(
            attr_assign("self", w.name, value) if w.how == "assign" else f"{attr_expr('self', w.name)}.copy_({value})"
        )
    lines.append(f"return ({', '.join(ret)},)" if cap.tuple_output else f"return {ret[0]}")
    signature = ", ".join(["self", *cap.input_names])
    return f"    def forward({signature}):\n" + "".join(f"        {x}\n" for x in lines)


def _glue(outs: list, names: dict, meta: dict, prefix: str) -> list[str]:
    """Views between the regions' outputs and `outs` (`return y.view(...)`), named `prefix` + a number."""
    needed: set = set()
    stack = [o for o in outs if isinstance(o, torch.fx.Node)]
    while stack:
        a = stack.pop()
        if a in names or a in needed or not isinstance(meta.get(a), (Meta, tuple)):
            continue
        needed.add(a)
        stack.extend(a.all_input_nodes)
    if not needed:
        return []
    lines = ["_dev = next(t.device for t in (" + ", ".join(sorted(set(names.values()))) + ",) if torch.is_tensor(t))"]
    graph_nodes = list(next(iter(needed)).graph.nodes)
    for i, n in enumerate(x for x in graph_nodes if x in needed):
        names[n] = f"{prefix}{i}"
        lines.append(f"{prefix}{i} = {extract._call(n, names, meta)}")
    return lines
