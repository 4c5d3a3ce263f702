"""How much device memory one check of a problem needs, estimated on meta tensors before it runs.

Checks that share a GPU (an executor's lanes, agent/search/executors/local.py) were bounded by count
only. Three softmax checks side by side need a few GB; one check of a 32768 x 32768 GEMM output
needs about 13 GB, and heavy checks of several searches side by side, beside the parent's references,
can leave too little for the next worker's CUDA context. Checks now wait for the memory as well as for
a lane.

The estimate follows one forward per declared case on the meta device (the model built and called
there; nothing is allocated or run): the bytes of the parameters, of one set of inputs in the case's
dtype, and of the outputs. A forward the meta device cannot follow (`.item()`, host copies) counts
its outputs as large as its largest input. A check holds, at its peak, roughly:

- the parameters once (the candidate's own copy);
- `INPUT_SETS` sets of inputs: the trial's inputs and their pristine copy, the timing sets a prepared
  call captures, and the fresh inputs of the check after it;
- `OUTPUT_COPIES` outputs: the candidate's output, the copy into the shared slot, and the
  intermediates a fused kernel chain keeps (as large as an output, as a rule);
- a CUDA context and the caching allocator's slack (`CONTEXT_BYTES`).

It is an estimate to keep checks from crowding each other out, not a limit on a candidate: a check
that needs more still runs alone (admission never refuses a check when no other holds the device),
and one that runs out of memory beside its siblings is re-run alone, as before.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional

from evaluation.records import ProblemInfo, ShapeCase

INPUT_SETS = 4
OUTPUT_COPIES = 3
CONTEXT_BYTES = 1 << 30


@dataclass(frozen=True)
class CaseFootprint:
    """One case's tensors, in bytes, on the meta device."""

    case_id: str
    params: int
    inputs: int
    outputs: Optional[int]  # None: the forward could not be followed on meta tensors
    inconclusive: str = ""  # why not, one line
    largest_input: int = 0  # stands for the outputs where the forward could not be followed

    @property
    def check_bytes(self) -> int:
        """A check's peak on this case (module docstring)."""
        outputs = self.outputs if self.outputs is not None else self.largest_input
        return self.params + INPUT_SETS * self.inputs + OUTPUT_COPIES * outputs + CONTEXT_BYTES


def _nbytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return 0


def case_footprint(source: str, path: str, case: ShapeCase) -> CaseFootprint:
    """The case's parameters, inputs and outputs on the meta device. A problem whose module or inputs
    cannot be made on meta tensors raises (the caller treats it as unknown)."""
    import torch

    from evaluation.problem_file import exec_problem_source, init_inputs

    module = exec_problem_source(source, path, case.params)
    target = getattr(torch, case.dtype)
    with torch.device("meta"), torch.no_grad():
        raw = list(module.get_inputs())
        inputs = [x.to(target) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in raw]
        sizes = [_nbytes(x) for x in inputs]
        in_bytes, largest = sum(sizes), max(sizes, default=0)
        try:
            model = module.Model(*init_inputs(module))
        except Exception as exc:
            return CaseFootprint(case.case_id, 0, in_bytes, None, _one_line(exc), largest)
        params = sum(_nbytes(t) for t in model.parameters()) + sum(_nbytes(t) for t in model.buffers())
        try:
            out = model(*inputs)
        except Exception as exc:  # data-dependent Python, host copies: the meta device cannot follow it
            return CaseFootprint(case.case_id, params, in_bytes, None, _one_line(exc), largest)
    return CaseFootprint(case.case_id, params, in_bytes, _nbytes(out), "", largest)


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


_CACHE: dict[tuple[str, str], Optional[int]] = {}
_CACHE_LOCK = threading.Lock()


def check_bytes(problem: ProblemInfo) -> Optional[int]:
    """The device memory one check of `problem` needs at its peak: the largest over its declared cases
    (a check runs them all). None where the problem's inputs cannot be made on meta tensors. Cached
    per problem, so a search pays it once (milliseconds: no tensor is allocated)."""
    key = (problem.problem_id, problem.source_sha256)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
    from evaluation.correctness import problem_text

    try:
        text = problem_text(problem)
        peak = max((case_footprint(text, problem.source_path, c).check_bytes for c in problem.shape_cases), default=0)
        found: Optional[int] = peak or None
    except Exception:  # an estimate only: the check itself reports what is wrong with the problem
        found = None
    with _CACHE_LOCK:
        _CACHE[key] = found
    return found
