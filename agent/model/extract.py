"""Each region as a problem: a KernelBench file whose forward is the region's aten ops (an attention
region's: the one F.scaled_dot_product_attention call they compute, attention.py).

The file declares the real run's shapes (one size constant per input dimension, `S{input}_{dim}`),
its dtype, and a SHAPES table holding exactly that case: the shape set comes from the run, not from a
guess. A region searched for a family of regions that differ only in sizes holds every member's sizes
as a case (`with_cases`). Sizes that the graph computes (a view's target shape) are written as the values of the real
run. Inputs that were never negative in the run (a ReLU's output, a running variance) are drawn from
torch.rand, the others from torch.randn; integer inputs keep the run's range.

The same emitter writes a region's reference path inside the assembled model (assemble.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import operator
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from agent.model import graph as g
from agent.model.graph import Meta
from agent.model.partition import Region
from evaluation.problems import attention as attention_problem

LIBRARY_CALL = "F.scaled_dot_product_attention"  # what a region in canonical form (attention.py) calls
HELPERS = (g._conv, g._conv_t, g._pool)  # the kscout:: ops of the capture, as torch.nn.functional calls
_HELPER_NAMES = {"kscout::conv": "_conv", "kscout::conv_t": "_conv_t", "kscout::pool": "_pool"}


@dataclass(frozen=True)
class Extracted:
    region: str
    path: str  # the problem file
    source: str
    input_shapes: tuple[tuple[int, ...], ...]
    dtype: str  # the floating dtype of the case


def helpers_source() -> str:
    return "\n\n".join(inspect.getsource(fn) for fn in HELPERS)


def _fmt(a, names: dict, meta: dict) -> str:
    if isinstance(a, torch.fx.Node):
        if a in names:
            return names[a]
        value = meta.get(a)
        if isinstance(value, (int, float)):
            return _fmt(value, names, meta)
        raise ValueError(f"internal: {a} is neither emitted nor a size")
    if isinstance(a, (list, tuple)):
        inner = ", ".join(_fmt(x, names, meta) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
    if isinstance(a, torch.dtype):
        return str(a)
    if isinstance(a, torch.device):
        return "_dev"
    if isinstance(a, (torch.layout, torch.memory_format)):
        return str(a)
    if isinstance(a, float) and not math.isfinite(a):
        return f"float({str(a)!r})"
    return repr(a)


def _call(n, names: dict, meta: dict) -> str:
    if n.target is operator.getitem:
        return f"{_fmt(n.args[0], names, meta)}[{n.args[1]!r}]"
    name = g.op_name(n.target)
    if name == "_to_copy":  # private aten names are refused in a candidate (static check): the public call
        keep = {k: v for k, v in n.kwargs.items() if k in ("dtype", "device")}
        return f"{_fmt(n.args[0], names, meta)}.to({', '.join(f'{k}={_fmt(v, names, meta)}' for k, v in keep.items())})"
    if name == "_unsafe_view":
        return f"torch.ops.aten.reshape.default({_fmt(n.args[0], names, meta)}, {_fmt(n.args[1], names, meta)})"
    args = [_fmt(a, names, meta) for a in n.args] + [f"{k}={_fmt(v, names, meta)}" for k, v in n.kwargs.items()]
    helper = _HELPER_NAMES.get(name)
    fn = helper or f"torch.ops.{n.target}"
    return f"{fn}({', '.join(args)})"


def body(region: Region, inputs: list[str], meta: dict, free: set, library: bool = True) -> tuple[list[str], list[str]]:
    """(lines, returned expressions): the region's ops over variables named `inputs` (one per region input).

    Views and parameter work the region reads are emitted in it; sizes are the real run's values. A region
    in canonical form (attention.py) is its one F.scaled_dot_product_attention call; with `library` off,
    the same attention in the matmul, mask and softmax that the model computes (`attention_math`)."""
    if region.canonical is not None:
        if not library:
            return attention_math(inputs, **region.canonical)
        keywords = ", ".join(f"{k}={v!r}" for k, v in region.canonical.items())
        return [], [f"{LIBRARY_CALL}({', '.join(inputs)}, {keywords})"]
    names = dict(zip(region.inputs, inputs))
    needed: set = set(region.nodes)
    stack = [a for n in region.nodes for a in n.all_input_nodes]
    while stack:
        a = stack.pop()
        if a in names or a in needed or not isinstance(meta.get(a), (Meta, tuple)):
            continue
        if a not in free:
            raise ValueError(f"internal: region {region.name} reads {a} from nowhere")
        needed.add(a)
        stack.extend(a.all_input_nodes)
    graph_nodes = list(region.nodes[0].graph.nodes)
    lines = []
    for i, n in enumerate(x for x in graph_nodes if x in needed):
        names[n] = f"v{i}"
        lines.append(f"v{i} = {_call(n, names, meta)}")
    return lines, [names[n] for n in region.outputs]


def attention_math(inputs: list[str], is_causal: bool, scale: float) -> tuple[list[str], list[str]]:
    """An attention region's reference path in an assembled model: the scores, the causal mask, the
    softmax and the second product, as the model wrote them. A region whose kernel was not taken, or not
    dispatched, then costs what it cost in the model: the library call its problem file holds
    (F.scaled_dot_product_attention) would speed the model up with no kernel of ours in it, a gain the
    report would have nowhere to attribute."""
    q, k, v = inputs
    lines = [f"s = torch.matmul({q}, {k}.transpose(-2, -1)) * {scale!r}"]
    if is_causal:  # query i sees keys 0..i, torch's is_causal
        lines.append(
            f"s = s.masked_fill(torch.ones({q}.shape[-2], {k}.shape[-2], dtype=torch.bool, device=s.device)"
            ".triu(1), float('-inf'))"
        )
    return lines, [f"torch.matmul(torch.softmax(s, dim=-1), {v})"]


def _draw(shape_names: list[str], m: Meta) -> str:
    size = f"({', '.join(shape_names)}{',' if len(shape_names) == 1 else ''})"
    dtype = f"torch.{m.dtype}"
    if m.dtype == "bool":
        return f"torch.rand({size}) > 0.5"
    if m.dtype.startswith(("int", "uint")):
        return f"torch.randint({int(m.low)}, {int(m.high) + 1}, {size}, dtype={dtype})"
    return f"torch.{'rand' if m.nonnegative else 'randn'}({size}, dtype={dtype})"


def problem_source(region: Region, meta: dict, free: set, model_name: str) -> tuple[str, str]:
    """(source, floating dtype) of the region's problem file."""
    metas = [meta[a] for a in region.inputs]
    params = [f"in{i}" for i in range(len(region.inputs))]
    lines, outs = body(region, params, meta, free)
    floats = [m.dtype for m in metas if m.dtype.startswith(("float", "bfloat"))]
    dtype = floats[0] if floats else "float32"
    consts: dict[str, int] = {}
    draws = []
    for i, m in enumerate(metas):
        dims = []
        for d, size in enumerate(m.shape):
            consts[f"S{i}_{d}"] = size
            dims.append(f"S{i}_{d}")
        draws.append(_draw(dims, m))
    case = dict(consts, tags=["timed"])
    ret = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
    # the device ops that create tensors take; a canonical forward is its one call, as the family rules read it
    dev = [f"        _dev = {params[0]}.device" if params else "        _dev = torch.device('cpu')"]
    tolerances = []
    if region.canonical is not None:
        dev = []
        # judged as the built-in attention problem is: strict float32 (1e-4) is tighter than PyTorch's own
        # float32 attention reaches over a few hundred keys (evaluation/problems/attention.py)
        tols = ", ".join(f"{d!r}: {t!r}" for d, t in attention_problem.TOLERANCES.items())
        tolerances = [f"TOLERANCES = {{{tols}}}  # the built-in attention problem's"]
    text = [
        f'"""Region {region.name} of {model_name} ({region.kind}: {", ".join(dict.fromkeys(region.ops))}), '
        f'with the shapes of its real run.\n\nExtracted by kscout optimize-model."""',
        "",
        "import torch",
        "import torch.nn as nn",
        "import torch.nn.functional as F",
        "",
        f"DTYPES = ({dtype!r},)",
        *[f"{k} = {v}" for k, v in consts.items()],
        f"SHAPES = {{'cpu': [{case!r}], 'cuda': [{case!r}]}}",
        *tolerances,
        "",
        "",
        helpers_source().rstrip(),
        "",
        "",
        "class Model(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        "",
        f"    def forward(self, {', '.join(params)}):",
        *dev,
        *[f"        {line}" for line in lines],
        f"        return {ret}",
        "",
        "",
        "def get_inputs():",
        f"    return [{', '.join(draws)}]",
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return "\n".join(text), dtype


def extract(region: Region, meta: dict, free: set, model_name: str, folder: Path) -> Extracted:
    source, dtype = problem_source(region, meta, free, model_name)
    folder.mkdir(parents=True, exist_ok=True)
    stem = Path(model_name).stem
    path = folder / f"{stem}_{region.name}.py"
    path.write_text(source)
    shapes = tuple(tuple(meta[a].shape) for a in region.inputs)
    return Extracted(region=region.name, path=str(path), source=source, input_shapes=shapes, dtype=dtype)


def size_params(input_shapes) -> dict[str, int]:
    """The size constants a region's problem file declares for these input shapes: {"S0_1": 64, ...}."""
    return {f"S{i}_{d}": size for i, shape in enumerate(input_shapes) for d, size in enumerate(shape)}


def with_cases(lead: Extracted, members: list[Extracted], timed: int) -> Extracted:
    """`lead`'s problem with one SHAPES case per member's input sizes (the lead's first, as its file's
    defaults stay), the first `timed` of them tagged "timed", the rest checked for correctness only. The
    members run the lead's ops on inputs of the same ranks (flow.family_key), so each case binds every
    `S{input}_{dim}` the file declares."""
    cases = []
    for j, m in enumerate(members):
        case: dict = {**size_params(m.input_shapes), "tags": ["timed"] if j < timed else []}
        if case not in cases:
            cases.append(case)
    line = f"SHAPES = {{'cpu': {cases!r}, 'cuda': {cases!r}}}"
    source, n = re.subn(r"^SHAPES = .*$", lambda _: line, lead.source, count=1, flags=re.M)
    if n != 1:
        raise ValueError(f"{lead.path}: no SHAPES line to widen")
    Path(lead.path).write_text(source)
    return dataclasses.replace(lead, source=source)
