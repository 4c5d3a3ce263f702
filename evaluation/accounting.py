"""Compute accounting, judged in the parent: which device kernels did the candidate's forward run?

On a GPU the worker profiles one eager forward per case and the timed call re-run on fresh inputs
(a CUDA-graph replay, as a rule), and reports every device kernel with the aten ops that launched it
and its device time (protocol.ProfiledKernel). The parent decides here, from the candidate's source it
parsed itself:

- a kernel with no aten op behind it must be one of the candidate's own `@triton.jit` functions
  (or a memcpy/memset): anything else is not the candidate's Triton (a compiled graph's kernels,
  a library called around the watch) and is refused;
- a kernel launched by aten ops is plumbing (allocation, view, copy, fill: the compute watch's
  allow-list), the small epilogue the watch admitted (issue 17), or PyTorch compute that the watch saw
  too: the candidate is then a hybrid (issue 25), labelled with the ops and their share of the
  profiled device time. PyTorch compute the watch did not see (dispatch turned off around it) is
  refused: the work rule could not follow it;
- in a graph replay no aten op is on the CPU side, so a kernel is judged by name: the candidate's
  Triton, a copy or fill, or, where the watch saw PyTorch compute in forward, a hybrid's PyTorch kernel.

Whether the candidate's Triton did the problem's work is the work rule's question (guards.ComputeWatch),
asked in the worker where the values are.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from evaluation.guards import ALLOWED_OPS, EPILOGUE_OPS, aten_name
from evaluation.protocol import ProfiledKernel

MEMORY_KERNELS = ("Memcpy", "Memset")
# aten's copy and fill kernels by name, for a graph replay where no op is attached to them
PLUMBING_KERNELS = ("FillFunctor", "direct_copy_kernel", "copy_device_to_device", "CopyFunctor")


def triton_functions(source: str) -> list[str]:
    """Names of the candidate's functions decorated with triton.jit (or autotune/heuristics over it)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and any(
            any(w in ast.unparse(d) for w in ("jit", "autotune", "heuristics")) for d in node.decorator_list
        ):
            out.append(node.name)
    return out


@dataclass
class Accounted:
    hybrid_ops: set[str] = field(default_factory=set)
    foreign: list[str] = field(default_factory=list)  # kernels that are nobody's Triton
    torch_us: float = 0.0  # device time of PyTorch compute kernels (a hybrid's share)
    total_us: float = 0.0  # device time of every profiled kernel, memory traffic included

    @property
    def torch_fraction(self) -> float | None:
        """PyTorch compute's share of the profiled device time; None where nothing was timed."""
        return self.torch_us / self.total_us if self.total_us > 0 else None

    def message(self, where: str) -> str:
        shown = ", ".join(self.foreign[:4]) + (f" (+{len(self.foreign) - 4} more)" if len(self.foreign) > 4 else "")
        return f"the profiler saw kernels in {where} that are not the candidate's own Triton: {shown}"


def _own(name: str, triton: list[str]) -> bool:
    return any(name == t or name.startswith(t + "_") or name.startswith(t + "__") for t in triton)


def classify(
    kernels: list[ProfiledKernel],
    triton: list[str],
    allowed_torch_ops: list[str],
    epilogue: list[str],
    hybrid_seen: Iterable[str] = (),
) -> Accounted:
    """`hybrid_seen`: the PyTorch compute ops the watch saw in forward (names for the profiler's
    kernels; in a replay, they make a non-Triton kernel the hybrid's own PyTorch work)."""
    named = {aten_name(op) for op in allowed_torch_ops} | set(hybrid_seen)
    plumbing = set(ALLOWED_OPS) | ({op for op in EPILOGUE_OPS if op.rstrip("_") in epilogue} if epilogue else set())
    out = Accounted()
    for k in kernels:
        out.total_us += k.duration_us
        if k.name.startswith(MEMORY_KERNELS):
            continue
        if k.ops:
            ops = set(k.ops)
            if ops <= plumbing:
                continue
            if ops & named:
                out.hybrid_ops |= ops & named
                out.torch_us += k.duration_us
            else:  # PyTorch work the watch never saw: dispatch turned off around it
                out.foreign.append(f"{k.name[:80]} (aten::{k.ops[0]})")
            continue
        if _own(k.name, triton) or any(p in k.name for p in PLUMBING_KERNELS):
            continue
        if k.replay and named:  # a hybrid's PyTorch kernel, replayed: the watch saw which op it was
            out.torch_us += k.duration_us
            continue
        out.foreign.append(k.name[:80])
    return out
