"""Deriving a declared shape set for a KernelBench-style file that does not declare one.

KernelBench files ship inputs of several GB and one shape. A kernel must be proved on sizes that a
device can hold and on edges that break kernels tuned to one width, so the harness rebinds the file's
module-level integer constants (see problem.exec_problem). The heuristic, stated once:

- an int constant >= 8 is a size; a smaller one (axis, kernel size, stride) is structural and kept;
- sizes are shrunk by halving, each step the largest size whose halving shrinks the footprint, until
  the case fits (footprints come from get_inputs() and Model() under torch.device("meta"): nothing is
  allocated);
- cuda: the shipped sizes when they fit the device (and the per-case cap, since outputs travel between
  processes); the CPU interpreter: a few thousand elements per tensor (it costs 1-3 ms per program);
- per size constant, edge cases at 1, a prime and a non-multiple of common block sizes, the other sizes
  shrunk further when the edge makes the case too big;
- `overrides` pin constants in every case; a pinned constant gets no edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from evaluation.errors import ProblemError

SIZE_MIN = 8
EDGES = {"cpu": (1, 97, 1000), "cuda": (1, 4099, 12289)}
CPU_MAX_NUMEL = 4096  # largest tensor of a representative CPU case
CPU_EDGE_MAX_NUMEL = 16384
CUDA_CASE_MAX_BYTES = 1 << 30  # every output crosses the process boundary through a file
CUDA_EDGE_MAX_BYTES = 256 << 20
CUDA_MEMORY_FACTOR = 8  # inputs + outputs, in the worker and again as the parent's float64 reference
NOMINAL_CUDA_FREE_BYTES = 64 << 30  # planning a cuda shape set on a machine without a GPU


@dataclass(frozen=True)
class Footprint:
    max_numel: int  # the largest single tensor (input, parameter or buffer)
    total_bytes: int


def footprint(path: Path, params: dict[str, int]) -> Footprint:
    import torch

    from evaluation.problem import exec_problem, init_inputs

    module = exec_problem(path, params)
    tensors = []
    try:
        with torch.device("meta"):
            tensors += [t for t in _flatten(module.get_inputs()) if isinstance(t, torch.Tensor)]
    except Exception as exc:
        raise ProblemError(f"cannot size the inputs of {path.name} with {params}: {type(exc).__name__}: {exc}") from None
    try:
        with torch.device("meta"):
            model = module.Model(*init_inputs(module))
        tensors += list(model.parameters()) + list(model.buffers())
    except Exception:  # a Model that cannot be built on meta: size by the inputs alone
        pass
    if not tensors:
        return Footprint(0, 0)
    return Footprint(max(t.numel() for t in tensors), sum(t.numel() * t.element_size() for t in tensors))


def _flatten(value):
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def shrink(path: Path, params: dict[str, int], movable: list[str], fits: Callable[[Footprint], bool]) -> dict[str, int]:
    """Halve sizes until the case fits: each step the largest size whose halving shrinks the footprint
    (so sizes come down together and keep the shipped aspect; constants that size nothing stay)."""
    current = dict(params)
    fp = footprint(path, current)
    while not fits(fp):
        step = None
        for name in sorted(movable, key=lambda n: -current[n]):
            if current[name] <= SIZE_MIN:
                continue
            trial = dict(current, **{name: max(SIZE_MIN, (current[name] + 1) // 2)})
            tfp = footprint(path, trial)
            if (tfp.total_bytes, tfp.max_numel) < (fp.total_bytes, fp.max_numel):
                step = (trial, tfp)
                break
        if step is None:
            break  # nothing left to shrink
        current, fp = step
    return current


def _budgets(device_kind: str):
    if device_kind == "cpu":
        return (lambda f: f.max_numel <= CPU_MAX_NUMEL), (lambda f: f.max_numel <= CPU_EDGE_MAX_NUMEL)
    free = NOMINAL_CUDA_FREE_BYTES
    try:
        import torch

        if torch.cuda.is_available():
            free = torch.cuda.mem_get_info()[0]
    except Exception:
        pass

    def rep(f: Footprint) -> bool:
        return f.total_bytes * CUDA_MEMORY_FACTOR <= free and f.total_bytes <= CUDA_CASE_MAX_BYTES

    return rep, (lambda f: f.total_bytes <= CUDA_EDGE_MAX_BYTES)


def derive_cases(
    path: Path, constants: dict[str, int], device_kind: str, overrides: dict[str, int]
) -> list[tuple[dict[str, int], tuple[str, ...]]]:
    """The representative case plus edges, as (params, tags) pairs, params in file order."""
    shipped = dict(constants, **overrides)
    sizes = [n for n, v in constants.items() if v >= SIZE_MIN and n not in overrides]
    rep_fits, edge_fits = _budgets(device_kind)
    rep = shrink(path, shipped, sizes, rep_fits)
    tags = ("representative", "timed") + (("shipped",) if rep == shipped else ())
    cases = [(rep, tags)]
    seen = {tuple(sorted(rep.items()))}
    for name in sizes:
        for edge in EDGES[device_kind]:
            if edge == rep[name]:
                continue
            params = shrink(path, dict(rep, **{name: edge}), [n for n in sizes if n != name], edge_fits)
            key = tuple(sorted(params.items()))
            if key in seen or not edge_fits(footprint(path, params)):
                continue
            seen.add(key)
            cases.append((params, ("edge",)))
    return cases
