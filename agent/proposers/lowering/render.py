"""The whole candidate file for one configuration of a lowered program.

`plan()` groups the program's tasks under the configuration's fusion switches (splitting any group
whose kernel cannot be written fused) and `render()` writes the module: the reference's imports and
`__init__`, one kernel per group from its schedule kind's template, and the forward. The forward binds
every size symbol from the tensors it gets, checks the sizes the trace fixed, allocates the buffers
(outputs in the case's float dtype, intermediates in float32) and launches the kernels in order;
between launches it does nothing but allocate and view, except a hybrid's library contraction
(`engine="library"`, library.py). It reads the module's plain tensor attributes
at every call and, after the launches, writes back those the reference's forward changes (state.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

import sympy

from agent.proposers.lowering import codegen, ir, library, space
from agent.proposers.lowering.capture import InitSource, attr_assign, attr_expr
from agent.proposers.lowering.codegen import FusionError, _Kernel
from agent.proposers.lowering.lowerings import Program
from agent.proposers.lowering.printer import sympy_text
from agent.proposers.lowering.schedule import Group, group_tasks, stored

_TORCH_DTYPE = {
    "float32": "torch.float32",
    "float64": "torch.float64",
    "int64": "torch.int64",
    "int32": "torch.int32",
    "bool": "torch.bool",
    "bfloat16": "torch.bfloat16",
    "float16": "torch.float16",
}


@dataclass
class Plan:
    groups: list[Group]
    kernels: list[str]  # kernel sources
    launches: list[list[str]]  # wrapper lines per group
    combiners: set
    notes: list[str]


def py(expr) -> str:
    return sympy_text(expr, mode="python")


def _group_label(g: Group) -> str:
    ops = {t.kind if not isinstance(t, ir.ReductionTask) else t.rtype for t in g.tasks}
    return f"{g.kind} ({', '.join(sorted(ops))})"


def plan_groups(program: Program, fuse: dict) -> tuple[list[Group], list]:
    """Groups for these fusion switches, after splitting every pair that cannot share a kernel."""
    forbidden: set = set()
    for _ in range(len(program.tasks) + 1):
        groups = group_tasks(program.tasks, fuse, frozenset(forbidden))
        try:
            kernels = _kernels(program, groups, [space.defaults(g.kind) for g in groups])
            return groups, kernels
        except FusionError as exc:
            if exc.pair in forbidden:
                raise
            forbidden.add(exc.pair)
    raise ir.LoweringError("internal: fusion did not settle")


def expand(program: Program, groups: list[Group], knobs: list[dict]) -> tuple[list[Group], list[dict]]:
    """Groups whose knobs split them (split reductions, split-K) as the two groups they become."""
    from agent.proposers.lowering.split import split_k, split_reduction

    out_g, out_k = [], []
    for g, k in zip(groups, knobs):
        parts = None
        if g.kind == "reduction":
            parts = split_reduction(program, g, k.get("split", 1))
        elif g.kind == "matmul":
            if k.get("engine") == "library":
                parts = library.split(program, g)
                if parts:  # the library call and a pointwise epilogue; tile knobs no longer apply
                    out_g += parts
                    out_k += [{"kind": "library"}] + [space.defaults("pointwise")] * (len(parts) - 1)
                    continue
            parts = split_k(program, g, k.get("split_k", 1))
        if not parts:
            out_g.append(g)
            out_k.append(k)
            continue
        for part in parts:
            out_g.append(part)
            if part.kind == g.kind:
                out_k.append({**k, "split": 1} if "split" in k else {**k, "split_k": 1})
            else:
                out_k.append(space.defaults(part.kind))
    return out_g, out_k


def _kernels(program: Program, groups: list[Group], knobs: list[dict]) -> list:
    outputs = {name for name, _ in program.outputs}
    store = stored(groups, outputs)
    out = []
    for i, (g, k) in enumerate(zip(groups, knobs)):
        out.append(_kernel(program, g, i, store[i], k))
    return out


def _kernel(program: Program, g: Group, i: int, store: set, knobs: dict):
    name = f"_k{i}_{g.kind}"
    kernel = _Kernel(program, name)
    note = _group_label(g)
    if g.kind == "pointwise":
        ctx = codegen.pointwise_kernel(g, kernel, store)
        template = "pointwise.j2"
    elif g.kind in ("reduction", "row", "window"):
        ctx = codegen.reduction_kernel(
            g, kernel, store, bool(knobs.get("cache_hints", False)), str(knobs.get("order", "xr"))
        )
        template = "reduction.j2"
    elif g.kind == "library":  # no kernel: the forward calls the library (library.py)
        for name in sorted(library.buffers(program, g.head)):
            kernel.use_buffer(name)
        return kernel, None
    elif g.kind == "matmul":
        ctx = codegen.matmul_kernel(g, kernel, store, knobs.get("precision", "ieee"))
        template = "matmul.j2"
    else:
        ctx = codegen.scan_kernel(g, kernel, store)
        template = "scan.j2"
    source = codegen.env().get_template(template).render(name=name, params=kernel.params(), note=note, **ctx)
    return kernel, source


def _launch(program: Program, g: Group, kernel: _Kernel, knobs: dict) -> list[str]:
    args = ", ".join(kernel.call_args())
    lines = []
    if g.kind == "pointwise":
        shape = g.head.out.shape
        lines += [
            f"_xn = {py(ir.prod(shape))}",
            f"_XB = min({knobs['block']}, _pow2(_xn))",
            "if _xn > 0:",
            f"    {kernel.name}[(triton.cdiv(_xn, _XB),)]({args}, XBLOCK=_XB, INDEX64=_i64, "
            f"num_warps={knobs['num_warps']})",
        ]
    elif g.kind in ("reduction", "row", "window", "scan"):
        if g.kind == "scan":
            sc = g.head
            xn = ir.prod([s for i, s in enumerate(sc.out.shape) if i != sc.axis])
            rn = sc.out.shape[sc.axis]
        else:
            red = g.reductions()[0]
            xn = ir.prod([s for i, s in enumerate(red.full_shape) if i not in red.reduced])
            rn = ir.prod([red.full_shape[i] for i in red.reduced])
        rows = knobs["rows"]
        # A scan over an empty dim has an empty output, as the reference does: nothing to launch. A
        # reduction over one would need its identity (0 for a sum, NaN for a mean, an error for a max).
        empty = (
            []
            if g.kind == "scan"
            else [
                "if _rn <= 0 and _xn > 0:",
                f"    raise ValueError('{g.kind} over an empty dimension (size ' + str(_rn) + ')')",
            ]
        )
        lines += [
            f"_xn = {py(xn)}",
            f"_rn = {py(rn)}",
            *empty,
            f"_single = _rn <= {knobs['single_max']}",
            f"_RB = _pow2(_rn) if _single else min({knobs['rblock']}, _pow2(_rn))",
            ("_XB = max(1, min(64, 4096 // _RB))" if rows == "auto" else f"_XB = {rows}"),
            "if _single:",
            "    _XB = max(1, min(_XB, 16384 // _RB))",
            "_XB = min(_XB, _pow2(_xn))",
            "if _xn > 0 and _rn > 0:",
            f"    {kernel.name}[(triton.cdiv(_xn, _XB),)]({args}, XBLOCK=_XB, RBLOCK=_RB, SINGLE=_single, "
            f"INDEX64=_i64, num_warps={knobs['num_warps']})",
        ]
    elif g.kind == "library":
        lines += library.call(program, g.head) or []
    else:
        mm = g.head
        lines += [
            f"_M, _N, _K = {py(mm.m)}, {py(mm.n)}, {py(mm.k)}",
            f"_nb = {py(ir.prod(mm.batch))}",
            f"_BM = max(16, min({knobs['block_m']}, _pow2(_M)))",
            f"_BN = max(16, min({knobs['block_n']}, _pow2(_N)))",
            f"_BK = max(16, min({knobs['block_k']}, _pow2(_K)))",
            "if _M * _N * _nb > 0:",
            f"    {kernel.name}[(_nb * triton.cdiv(_M, _BM) * triton.cdiv(_N, _BN),)]({args}, BLOCK_M=_BM, "
            f"BLOCK_N=_BN, BLOCK_K=_BK, GROUP_M={knobs['group_m']}, DOT=_dot, INDEX64=_i64, "
            f"num_warps={knobs['num_warps']}, num_stages={knobs['num_stages']})",
        ]
    return lines


def _wrapper(program: Program, groups: list[Group], kernels: list, knobs: list[dict]) -> str:
    lines: list[str] = []
    bufs = program.buffers
    floating = None
    first = None
    # a plain tensor attribute goes where the forward's first input is (state.py), else the first parameter
    home = next((b.name for b in bufs.values() if b.kind == "input"), None)
    home = home or next((b.name for b in bufs.values() if b.kind == "param"), None)
    for b in bufs.values():
        if b.kind in ("input", "param"):
            lines.append(f"{b.name} = {b.source}.contiguous()")
            if first is None:
                first = b.name
            if floating is None and b.storage == "float":
                floating = b.name
        elif b.kind == "scalar":
            lines.append(f"{b.name} = {'float' if b.storage.startswith('float') else 'int'}({b.source})")
    for b in bufs.values():
        if b.kind == "attr":  # read at every call from this module: never a constant of the source
            lines.append(f"{b.name} = {b.source}{f'.to({home}.device)' if home else ''}.contiguous()")
    bound = []
    sources = {b.source: b.name for b in bufs.values() if b.kind in ("input", "param", "attr")}
    for symbol, expr in program.bindings.items():
        for src, name in sources.items():
            if expr.startswith(src + ".shape["):
                expr = name + expr[len(src) :]
                break
        lines.append(f"{symbol.name} = {expr}")
        bound.append(symbol)
    for expr, expected, what in program.checks:
        for src, name in sources.items():
            if expr.startswith(src + ".shape["):
                expr = name + expr[len(src) :]
                break
        lines.append(f"if {expr} != {py(expected)}:")
        if getattr(expected, "is_Symbol", False):  # module state against the size the inputs bound
            size = py(expected)
            head = f"{what} must have the size {size} = "
            lines.append(
                f"    raise ValueError({head!r} + str({size}) + ' of the tensors it meets; got ' + str({expr}))"
            )
            continue
        lines.append(
            f"    raise ValueError({('this candidate was generated for ' + what + ' with a size fixed at ' + py(expected) + ' by the trace; got ').__repr__()} + str({expr}))"
        )
    for name, e in program.derived.items():
        lines.append(f"{name} = float({py(e)})")
    lines.append(f"_fdt = {floating}.dtype" if floating else "_fdt = torch.float32")
    lines.append(
        f"_dev = {first}.device" if first else "_dev = torch.device('cuda' if torch.cuda.is_available() else 'cpu')"
    )
    lines.append(
        '_dot = 0 if _dev.type == "cpu" else 1 if _fdt == torch.bfloat16 else 2 if _fdt == torch.float16 else 0'
    )
    needed = set()
    for kernel, _ in kernels:
        needed |= set(kernel.buffers)
    needed |= {name for name, _ in program.outputs}
    # the buffers this configuration uses (a split's partials exist only in the configurations that split)
    sizes = [
        py(ir.prod(b.shape))
        for b in bufs.values()
        if b.kind != "scalar" and b.shape and (b.kind in ("input", "param", "attr") or b.name in needed)
    ]
    lines.append(f"_i64 = max([1{''.join(', ' + s for s in sizes)}]) >= 2 ** 31 - 1")
    # a library convolution binds its result to its buffer's name (library.py): nothing to allocate
    bound_by_library = {g.head.out.name for g in groups if g.kind == "library" and g.head.library is not None}
    for b in bufs.values():
        if b.kind in ("temp", "output") and b.name in needed and b.name not in bound_by_library:
            dtype = "_fdt" if b.storage == "float" else _TORCH_DTYPE[b.storage]
            shape = "(" + "".join(f"{py(s)}, " for s in b.shape) + ")"
            lines.append(f"{b.name} = torch.empty({shape}, device=_dev, dtype={dtype})")
    for g, (kernel, _), k in zip(groups, kernels, knobs):
        lines += _launch(program, g, kernel, k)
    rets = []
    for name, shape in program.outputs:
        b = bufs[name]
        if len(shape) == len(b.shape) and all(ir.same(a, c) for a, c in zip(shape, b.shape)):
            rets.append(name)
        else:
            rets.append(f"{name}.view(({''.join(py(s) + ', ' for s in shape)}))")
    if program.writes:  # the forward's changes to its module's tensor attributes, as the reference makes them
        rets, written = rets[: len(rets) - len(program.writes)], rets[len(rets) - len(program.writes) :]
        for (attr, how), value in zip(program.writes, written):
            target = attr_expr("self", attr)
            lines.append(attr_assign("self", attr, value) if how == "assign" else f"{target}.copy_({value})")
    if program.tuple_output or len(rets) > 1:
        lines.append(f"return ({', '.join(rets)},)")
    else:
        lines.append(f"return {rets[0]}")
    return "\n".join(" " * 8 + line for line in lines)


def render(program: Program, init: InitSource, config: dict, header: str) -> tuple[str, list[Group]]:
    """The candidate source for one configuration, and the groups it was written with."""
    groups, kernels = plan_groups(program, config["fuse"])
    knobs = config_groups(config, groups, program)
    groups, knobs = expand(program, groups, knobs)
    kernels = _kernels(program, groups, knobs)
    combiners = set()
    for kernel, _ in kernels:
        combiners |= kernel.combiners
    ctx = dict(
        header=header,
        imports=list(init.imports),
        helpers=list(init.helpers),
        combiners=[codegen.COMBINERS[c] for c in sorted(combiners)],
        kernels=[src for _, src in kernels if src is not None],
        init_signature=init.signature,
        init_body=init.body.rstrip("\n"),
        inputs=program.inputs,
        wrapper=_wrapper(program, groups, kernels, knobs),
    )
    return codegen.env().get_template("module.j2").render(**ctx) + "\n", groups


def config_groups(config: dict, groups: list[Group], program: Optional[Program] = None) -> list[dict]:
    """The configuration's per-group knobs for these groups (defaults where kinds disagree). Knobs that
    cannot change the kernel are set to one value, so two configurations that write the same kernels
    are one point (and the search, seeing the same source, skips the second)."""
    given = config.get("groups", [])
    out = []
    for i, g in enumerate(groups):
        k = given[i] if i < len(given) and given[i].get("kind") == g.kind else space.defaults(g.kind)
        k = space.validate_group(g.kind, k, partial=True)
        if k.get("order") == "rx" and _reduces_innermost(g):
            # the [kept, reduced] tile already reads along the contiguous dims: "rx" would only stride the
            # lanes, so it is the same point as "xr"
            k = {**k, "order": "xr"}
        if k.get("engine") == "library" and program is not None:
            if library.split(program, g) is None:  # no library call here: the Triton GEMM, as "triton"
                k = {**k, "engine": "triton"}
            else:  # the library picks its own tiles: the Triton tile knobs do not apply
                k = {**space.defaults("matmul"), "engine": "library"}
        out.append(k)
    return out


def _reduces_innermost(g: Group) -> bool:
    red = g.reductions()[0]
    n, reduced = len(red.full_shape), tuple(sorted(red.reduced))
    return reduced == tuple(range(n - len(reduced), n))


def default_config(groups: list[Group], fuse: Optional[dict] = None) -> dict:
    return {
        "schedule": "lowering",
        "fuse": dict(fuse or space.DEFAULT_FUSE),
        "groups": [space.defaults(g.kind) for g in groups],
    }


def describe(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


del sympy
