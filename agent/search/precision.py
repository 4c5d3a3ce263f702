"""Which precision a candidate's matrix products use: a declared property of the kernel, read from its
source and shown beside its verdict (`show`, `report`, the kernel file).

On NVIDIA, `tl.dot` of float32 operands runs on TF32 tensor cores unless told otherwise (Triton's
`default_dot_input_precision` is "tf32"; TRITON_F32_DEFAULT changes it for a whole process), so a
kernel that never says so trades 13 bits of mantissa for speed without a reader knowing. The judge
compares every kernel with float64 whatever it says; this only names what the kernel asked for.
"""

from __future__ import annotations

import ast

DEFAULT = "Triton's default (tf32 for float32 operands on NVIDIA, unless TRITON_F32_DEFAULT says otherwise)"
_DOT_MODULES = ("tl", "triton.language", "language")


def _is_dot(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "dot" and ast.unparse(func.value) in _DOT_MODULES


def _label(call: ast.Call) -> str:
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    if "input_precision" in kw:
        v = kw["input_precision"]
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            return v.value
        if isinstance(v, ast.Constant) and v.value is None:
            return DEFAULT
        return f"set at launch ({ast.unparse(v)})"
    if "allow_tf32" in kw:  # the older spelling
        v = kw["allow_tf32"]
        if isinstance(v, ast.Constant) and isinstance(v.value, bool):
            return "tf32" if v.value else "ieee"
        return f"set at launch ({ast.unparse(v)})"
    return DEFAULT


# A hybrid's library contraction (agent/proposers/lowering/library.py): the precision is torch's
LIBRARY = "library (cuBLAS/cuDNN through torch, at torch's float32 precision: IEEE unless the process allows TF32)"
_LIBRARY_CALLS = (
    "torch.matmul",
    "torch.mm",
    "torch.bmm",
    "torch.nn.functional.linear",
    "torch.nn.functional.conv1d",
    "torch.nn.functional.conv2d",
    "torch.nn.functional.conv3d",
    "torch.nn.functional.conv_transpose1d",
    "torch.nn.functional.conv_transpose2d",
    "torch.nn.functional.conv_transpose3d",
)


def dot_precisions(source: str) -> tuple[str, ...]:
    """The distinct precisions of the source's `tl.dot` calls, in source order, then `LIBRARY` where it
    calls a library contraction; () where it has neither (or does not parse: the judge says why
    elsewhere)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    calls = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_dot(n.func)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    labels = [_label(c) for c in calls]
    if any(isinstance(n, ast.Call) and ast.unparse(n.func) in _LIBRARY_CALLS for n in ast.walk(tree)):
        labels.append(LIBRARY)
    return tuple(dict.fromkeys(labels))
