"""A hybrid contraction: the library's GEMM (cuBLAS through `torch.matmul`) and the epilogue in Triton.

A matmul group's knob `engine` is "triton" (the tiled GEMM with the epilogue fused into its output
tile, matmul.j2) or "library". With "library" the group becomes two: the contraction as one
`torch.matmul` into its float32 buffer, called from the forward on strided views of the operands'
buffers, and the epilogue as a pointwise Triton kernel that reads that buffer. Where cuBLAS beats the
Triton GEMM at a shape (float32 at full IEEE precision, odd sizes), the hybrid can win or draw level
with torch.compile, which makes the same split; the search measures both and keeps the faster.

A hybrid is PyTorch compute in forward by design: the judge labels it (`hybrid_ops` names `aten.mm`
and its share of the device time, evaluation/accounting.py), a ranking can leave hybrids out
(`--no-hybrid`), and its Triton kernel must still do the problem's work. So "library" applies only
where the contraction has a Triton consumer: its output is not one of the program's outputs (a bare
GEMM written by cuBLAS would be refused as PyTorch's work, rightly). A matmul applies where each
operand is a buffer read at an affine index (the operand is then a strided view, no copy); a
convolution (or a transposed one) where its input and weight are plain buffers: it is then cuDNN's
`conv{1,2,3}d` with the same stride, padding, dilation and groups, and its bias stays in the Triton
epilogue. Elsewhere the knob falls back to the Triton GEMM, which renders the same source as "triton",
so the search never evaluates it twice.
"""

from __future__ import annotations

from typing import Optional

import sympy

from agent.proposers.lowering import ir
from agent.proposers.lowering.ir import FLOATS, Load, MatmulTask, PointwiseTask
from agent.proposers.lowering.printer import sympy_text
from agent.proposers.lowering.schedule import Group

_VIEWABLE = ("input", "param", "attr", "temp", "output")


def _py(expr) -> str:
    return sympy_text(expr, mode="python")


def _operand(program, body, variables: list) -> Optional[tuple[str, list, list, object]]:
    """(buffer, sizes' variables, strides, offset) where `body` loads a float buffer at an index affine
    in `variables`; None otherwise (a computed operand, a masked or non-affine read)."""
    while isinstance(body, ir.Op) and body.op == "cast" and body.params and body.params[0] in FLOATS:
        body = body.args[0]
    if not isinstance(body, Load) or body.dtype not in FLOATS:
        return None
    buf = program.buffers.get(body.buffer)
    if buf is None or buf.kind not in _VIEWABLE or buf.storage not in ("float", "float32"):
        return None
    index = sympy.expand(sympy.sympify(body.index))
    strides = [sympy.diff(index, v) for v in variables]
    if any(s.free_symbols & set(variables) for s in strides):
        return None
    offset = index.subs({v: 0 for v in variables})
    if sympy.expand(index - offset - sum(s * v for s, v in zip(strides, variables))) != 0:
        return None  # floor/mod of a reshaped view: no single stride per dim
    return body.buffer, variables, strides, offset


def split(program, g: Group) -> Optional[list[Group]]:
    """The two groups a library contraction becomes, or None where it does not apply (module docstring)."""
    mm = g.head
    if not isinstance(mm, MatmulTask) or (mm.out_index is not None and mm.library is None):
        return None
    if mm.out.name in {name for name, _ in program.outputs}:
        return None
    epilogue = g.tasks[1:]
    if epilogue and not all(isinstance(t, PointwiseTask) for t in epilogue):
        return None
    if call(program, mm) is None:
        return None
    parts = [Group("library", [mm])]
    if epilogue:
        parts.append(Group("pointwise", list(epilogue)))
    return parts


def _conv_call(program, mm: MatmulTask) -> Optional[list[str]]:
    """A convolution of two plain buffers (MatmulTask.library): cuDNN's result, in float32 and contiguous
    (the layout the implicit GEMM writes), bound to the product's buffer name for the kernels after it."""
    kind, x, w, args = mm.library
    for name in (x, w):
        buf = program.buffers.get(name)
        if buf is None or buf.kind not in _VIEWABLE or buf.storage not in ("float", "float32"):
            return None
    nd = len(program.buffers[w].shape) - 2
    if nd not in (1, 2, 3):
        return None
    kw = ", ".join(
        f"{k}=({''.join(_py(v) + ', ' for v in value)})" if isinstance(value, tuple) else f"{k}={_py(value)}"
        for k, value in args
    )
    fn = f"torch.nn.functional.conv{nd}d" if kind == "conv" else f"torch.nn.functional.conv_transpose{nd}d"
    return [
        f"{mm.out.name} = {fn}({x}, {w}, None, {kw}).to(torch.float32).contiguous()  # the library's convolution "
        "(a hybrid, library.py)"
    ]


def call(program, mm: MatmulTask) -> Optional[list[str]]:
    """The forward's lines that compute the contraction into its buffer: `torch.matmul` on views of the
    operands, or the library's convolution."""
    if mm.library is not None:
        return _conv_call(program, mm)
    if mm.out_index is not None:
        return None
    bv = ir.index_vars("b", len(mm.batch))
    vm, vn, vk = (sympy.Symbol(s, integer=True, nonnegative=True) for s in ("mm_m", "mm_n", "mm_k"))
    a = _operand(program, mm.a_body, list(bv) + [vm, vk])
    b = _operand(program, mm.b_body, list(bv) + [vk, vn])
    if a is None or b is None:
        return None
    sizes_a = list(mm.batch) + [mm.m, mm.k]
    sizes_b = list(mm.batch) + [mm.k, mm.n]

    def view(op, sizes) -> str:  # as_strided counts from the storage's start: a view's own offset is added
        name, _, strides, offset = op
        return (
            f"torch.as_strided({name}, ({''.join(_py(s) + ', ' for s in sizes)}), "
            f"({''.join(_py(s) + ', ' for s in strides)}), {name}.storage_offset() + {_py(offset)})"
            ".to(torch.float32)"
        )

    out_shape = "(" + "".join(_py(s) + ", " for s in list(mm.batch) + [mm.m, mm.n]) + ")"
    return [
        f"if {_py(ir.prod(list(mm.batch) + [mm.m, mm.n]))} > 0:  # the library's GEMM (a hybrid, library.py)",
        f"    torch.matmul({view(a, sizes_a)}, {view(b, sizes_b)}, out={mm.out.name}.view({out_shape}))",
    ]


def buffers(program, mm: MatmulTask) -> set[str]:
    """The buffers the library call reads and writes (the forward allocates the ones it makes)."""
    reads = {ld.buffer for ld in ir.loads(mm.a_body) + ir.loads(mm.b_body)}
    return reads | {mm.out.name}
