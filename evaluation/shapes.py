"""Deriving a declared shape set for a KernelBench-style file that does not declare one.

KernelBench files ship inputs of several GB and one shape. A kernel must be proved on sizes that a
device can hold and on edges that break kernels tuned to one width, so the harness rebinds the file's
size constants (problem_file.py: `M = 16384 * 4` and `input_shape = (32768,)` count too). The plan,
stated once:

- a size constant >= 8 is a size; a smaller one (an axis, a kernel size, a stride) is structural and
  kept. Sizes that the file ships with the same value are *tied* and move together, since references
  often depend on it (100_HingeLoss multiplies a (batch, N) tensor by a (batch,) one: batch == N);
- sizes are shrunk by halving, each step the largest (tied) size whose halving shrinks the footprint,
  until the case fits a budget stated here (footprints come from get_inputs() and Model() on the meta
  device: nothing is allocated). The budgets are constants, never the free memory of the moment, so a
  file has the same shape set, and the same problem_id, on every machine;
- every derived case is checked by running the reference on it (for real on the CPU, where the cases
  are small; on the meta device for GPU-sized cases): a case the reference itself rejects is dropped,
  and the reason is kept on the ProblemInfo;
- CPU (the interpreter costs 1-3 ms per program): a representative case of a few thousand elements; per
  size (and per tied group) edges at 1, 97 and 1537 (past 1024, where one-block kernels stop; 1537 only
  for sizes the reference reduces, normalises or scans over, probed on the reference itself), the
  other sizes shrunk to fit; one "ragged" case where every size is a different non-power-of-two at once (4-D
  problems included); one "big" case, tagged "big" so a quick search may choose to skip it: for a
  reduction over some sizes (growing them leaves the output's element count unchanged) those at 4099
  and the kept ones small and odd, so a kernel with one program per output stays cheap; for elementwise
  problems and full reductions the innermost input dimension at 4099 (a non-power-of-two past 4096) and
  just past 2^20 elements where the shape allows (a kernel whose grid stops at 1024 blocks of 1024 fails
  there); for norms, scans and pooling (the reference mixes along a size but keeps the output's size)
  4099 wide and about 67 rows (issue 10's shape), since each row costs an interpreted program or more;
- GPU: the shipped sizes when they fit the case budget (outputs travel between processes), else shrunk;
  edges at 1, 4099 and 12289;
- `overrides` pin constants in every case; a pinned constant gets no edges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from evaluation.errors import ProblemError
from evaluation.problem_file import exec_problem_source, init_inputs, read_source

SIZE_MIN = 8
EDGE_SIZE_MIN = 2  # an edge may shrink the other sizes this far to fit its budget
EDGES = {"cpu": (1, 97, 1537), "cuda": (1, 4099, 12289)}
CPU_MAX_NUMEL = 4096  # largest tensor of a representative CPU case
CPU_EDGE_MAX_NUMEL = 16384
CPU_BIG_MIN_NUMEL = (1 << 20) + 1  # the big case aims past this many elements...
CPU_BIG_MAX_NUMEL = 1 << 21  # ...and stays under this
CPU_BIG_TRIM_NUMEL = 1_250_000  # a big case past this is trimmed back towards CPU_BIG_MIN_NUMEL
CPU_BIG_ROWS_MAX_NUMEL = 300_000  # norms, scans, pooling: about 67 rows of 4099 (issue 10's shape)
BIG_WIDTHS = (4099, 2053, 1031)  # innermost size of the big case: the first that fits
CUDA_CASE_MAX_BYTES = 1 << 30  # the stated GPU budget: inputs + parameters of one case
CUDA_EDGE_MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class Footprint:
    max_numel: int  # the largest single tensor (input, parameter or buffer)
    total_bytes: int


@dataclass
class Plan:
    """A derived shape set: (params, tags) pairs, the shapes dropped with their reasons, and notes."""

    cases: list[tuple[dict[str, int], tuple[str, ...]]] = field(default_factory=list)
    dropped: list[tuple[dict[str, int], str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _flatten(value):
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def _key(params: dict[str, int]) -> tuple:
    return tuple(sorted(params.items()))


class _Problem:
    """One problem file under derivation: its module per binding, footprints and reference checks, cached."""

    def __init__(self, path: Path, source: str | None = None):
        self.path = Path(path)
        self.source = read_source(self.path) if source is None else source
        self._fp: dict[tuple, Footprint] = {}
        self._checked: dict[tuple, str | None] = {}
        self.meta_checks = True

    def module(self, params: dict[str, int]):
        return exec_problem_source(self.source, self.path, params)

    def footprint(self, params: dict[str, int]) -> Footprint:
        k = _key(params)
        if k not in self._fp:
            self._fp[k] = self._measure(params)
        return self._fp[k]

    def _measure(self, params: dict[str, int]) -> Footprint:
        import torch

        module = self.module(params)
        tensors = []
        try:
            with torch.device("meta"):
                tensors += [t for t in _flatten(module.get_inputs()) if isinstance(t, torch.Tensor)]
        except Exception as exc:
            raise ProblemError(
                f"cannot size the inputs of {self.path.name} with {params}: {type(exc).__name__}: {exc}"
            ) from None
        try:
            with torch.device("meta"):
                model = module.Model(*init_inputs(module))
            tensors += list(model.parameters()) + list(model.buffers())
        except Exception:  # a Model that cannot be built on meta: size by the inputs alone
            pass
        if not tensors:
            return Footprint(0, 0)
        return Footprint(max(t.numel() for t in tensors), sum(t.numel() * t.element_size() for t in tensors))

    def inputs_meta(self, params: dict[str, int]) -> list:
        import torch

        with torch.device("meta"):
            return [t for t in _flatten(self.module(params).get_inputs()) if isinstance(t, torch.Tensor)]

    def output_numel(self, params: dict[str, int]) -> int | None:
        """Elements of the reference's outputs at this binding, on the meta device; None if meta cannot
        follow the reference."""
        import torch

        k = _key(params) + ("out",)
        if k not in self._checked:
            try:
                module = self.module(params)
                with torch.random.fork_rng(), torch.no_grad(), torch.device("meta"):
                    model = module.Model(*init_inputs(module))
                    out = model(*module.get_inputs())
                self._checked[k] = sum(t.numel() for t in _flatten(out) if isinstance(t, torch.Tensor))
            except Exception:
                self._checked[k] = None
        return self._checked[k]

    def mixing_slots(self, params: dict[str, int]) -> set[str] | None:
        """The size constants that size an input axis along which the reference mixes values (a reduction,
        a normalisation, a scan): two inputs along that axis move a common output. Probed on the CPU at
        this (small) binding by pushing one input element far up or down at the origin and at index 1 of
        the axis. A constant that sizes no input axis counts as mixing. None when the probe cannot run."""
        import torch

        try:
            axes = self._slot_axes(params)
            module = self.module(params)
            with torch.random.fork_rng(), torch.no_grad():
                torch.manual_seed(0)
                model = module.Model(*init_inputs(module))
                if isinstance(model, torch.nn.Module):
                    model = model.eval()
                inputs = list(module.get_inputs())
                base = self._flat(model(*inputs))

                def moved(i: int, index: tuple[int, ...]) -> set[int]:
                    out: set[int] = set()
                    for delta in (1e3, -1e3):
                        trial = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
                        trial[i][index] += delta
                        diff = self._flat(model(*trial)) != base
                        out |= set(torch.nonzero(diff).flatten().tolist())
                    return out

                mixing_axes = set()
                for i, x in enumerate(inputs):
                    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
                        continue
                    origin = moved(i, (0,) * x.dim())
                    for a in range(x.dim()):
                        if x.shape[a] < 2:
                            mixing_axes.add((i, a))
                            continue
                        index = tuple(1 if k == a else 0 for k in range(x.dim()))
                        if not origin or origin & moved(i, index):
                            mixing_axes.add((i, a))
        except Exception:
            return None
        return {n for n, where in axes.items() if not where or where & mixing_axes}

    @staticmethod
    def _flat(out):
        import torch

        parts = [t.detach().reshape(-1).to(torch.float64) for t in _flatten(out) if isinstance(t, torch.Tensor)]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)

    def _slot_axes(self, params: dict[str, int]) -> dict[str, set[tuple[int, int]]]:
        """Which (input, axis) each size constant sets, found by growing it by one on the meta device."""
        base = [tuple(t.shape) for t in self.inputs_meta(params)]
        out: dict[str, set[tuple[int, int]]] = {}
        for name, value in params.items():
            try:
                grown = [tuple(t.shape) for t in self.inputs_meta(dict(params, **{name: value + 1}))]
            except Exception:
                grown = base
            out[name] = {
                (i, a)
                for i, (s0, s1) in enumerate(zip(base, grown))
                if len(s0) == len(s1)
                for a in range(len(s0))
                if s0[a] != s1[a]
            }
        return out

    def rejects(self, params: dict[str, int], device_kind: str) -> str | None:
        """Why the reference refuses this binding (one line), or None when it runs.

        On the CPU the reference runs for real (CPU cases are small); for GPU-sized cases it runs on the
        meta device, unless meta cannot follow this reference at all (then nothing is checked)."""
        k = _key(params) + (device_kind,)
        if k not in self._checked:
            self._checked[k] = self._run_reference(params, "cpu" if device_kind == "cpu" else "meta")
        return self._checked[k]

    def _run_reference(self, params: dict[str, int], where: str) -> str | None:
        import torch

        if where == "meta" and not self.meta_checks:
            return None
        try:
            module = self.module(params)
        except ProblemError as exc:
            return str(exc)
        try:
            with torch.random.fork_rng(), torch.no_grad(), torch.device(where):
                torch.manual_seed(0)
                model = module.Model(*init_inputs(module))
                if isinstance(model, torch.nn.Module):
                    model = model.eval()
                inputs = module.get_inputs()
                out = model(*inputs)
        except Exception as exc:
            return f"the reference raised {type(exc).__name__}: {' '.join(str(exc).split())[:240]}"
        return _ill_conditioned(model, inputs, out) if where == "cpu" else None


def _ill_conditioned(model, inputs: list, out) -> str | None:
    """Why a case tests rounding rather than a kernel, or None: PyTorch's own float32 result fails our
    comparison against the float64 reference on the same inputs. Shrinking can make such a case (64
    channels in 64 groups: each group one element, the exact output zero, the float64 reference rounding
    noise that the norm test then measures every kernel against), and no kernel can be asked to pass it."""
    import copy

    import torch

    from evaluation.compare import compare
    from evaluation.protocol import package
    from evaluation.records import DEFAULT_TOLERANCES

    floating = [t for t in _flatten(out) if isinstance(t, torch.Tensor) and t.dtype == torch.float32]
    if not floating or not isinstance(model, torch.nn.Module):
        return None
    try:
        with torch.random.fork_rng(), torch.no_grad():
            torch.manual_seed(0)
            wide = copy.deepcopy(model).to(torch.float64)
            expected = wide(
                *[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
            )
        verdict = compare(package(out), expected, "float32", DEFAULT_TOLERANCES["float32"])
    except Exception:  # the reference does not run in float64: nothing to tell
        return None
    if verdict.passed:
        return None
    return (
        f"PyTorch's own float32 result fails this case against the float64 reference ({verdict.message}): "
        "it tests rounding, not a kernel"
    )


def footprint(path: Path, params: dict[str, int]) -> Footprint:
    return _Problem(path).footprint(params)


def ties(shipped: dict[str, int], sizes: list[str]) -> list[tuple[str, ...]]:
    """Sizes grouped by their shipped value, in file order: each group moves as one."""
    groups: dict[int, list[str]] = {}
    for name in sizes:
        groups.setdefault(shipped[name], []).append(name)
    return [tuple(g) for g in groups.values()]


def shrink(
    problem: _Problem,
    params: dict[str, int],
    units: list[tuple[str, ...]],
    fits: Callable[[Footprint], bool],
    floor: int = SIZE_MIN,
) -> dict[str, int]:
    """Halve sizes until the case fits: each step the largest unit whose halving shrinks the footprint
    (so sizes come down together and keep the shipped aspect; constants that size nothing stay)."""
    current = dict(params)
    fp = problem.footprint(current)
    while not fits(fp):
        step = None
        for unit in sorted(units, key=lambda u: -current[u[0]]):
            if current[unit[0]] <= floor:
                continue
            value = max(floor, (current[unit[0]] + 1) // 2)
            trial = dict(current, **{n: value for n in unit})
            tfp = problem.footprint(trial)
            if (tfp.total_bytes, tfp.max_numel) < (fp.total_bytes, fp.max_numel):
                step = (trial, tfp)
                break
        if step is None:
            break  # nothing left to shrink
        current, fp = step
    return current


def _budgets(device_kind: str) -> tuple[Callable[[Footprint], bool], Callable[[Footprint], bool]]:
    if device_kind == "cpu":
        return (lambda f: f.max_numel <= CPU_MAX_NUMEL), (lambda f: f.max_numel <= CPU_EDGE_MAX_NUMEL)
    return (lambda f: f.total_bytes <= CUDA_CASE_MAX_BYTES), (lambda f: f.total_bytes <= CUDA_EDGE_MAX_BYTES)


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _primes_below(n: int) -> list[int]:
    """Odd primes below n, largest first (at least [3])."""
    out = [p for p in range(max(n - 1, 3), 2, -1) if all(p % d for d in range(2, int(math.isqrt(p)) + 1))]
    return out or [3]


def _without(units: list[tuple[str, ...]], names: tuple[str, ...]) -> list[tuple[str, ...]]:
    out = []
    for unit in units:
        rest = tuple(n for n in unit if n not in names)
        if rest:
            out.append(rest)
    return out


class _Deriver:
    def __init__(self, problem: _Problem, slots: dict[str, int], device_kind: str, overrides: dict[str, int]):
        self.problem, self.device_kind = problem, device_kind
        self.shipped = dict(slots, **overrides)
        sizes = [n for n, v in slots.items() if v >= SIZE_MIN and n not in overrides]
        self.units = ties(self.shipped, sizes)
        self.rep_fits, self.edge_fits = _budgets(device_kind)
        self.plan = Plan()
        self.seen: set[tuple] = set()
        self.structural: set[tuple[str, ...]] = set()  # ties the reference needs: never untied

    def find_structural_ties(self, rep: dict[str, int]) -> None:
        """A tie is structural when the reference rejects it untied by one (100_HingeLoss multiplies a
        (batch, N) tensor by a (batch,) one): such sizes only ever move together, since an untied value
        that the reference still accepts (batch = 1 broadcasts) changes what it computes."""
        for unit in self.units:
            if len(unit) > 1:
                reason = self.problem.rejects(dict(rep, **{unit[0]: rep[unit[0]] + 1}), self.device_kind)
                if reason:
                    self.structural.add(unit)
                    self.plan.notes.append(f"{' and '.join(unit)} always move together: apart, {reason}")

    def accept(self, params: dict[str, int], tags: tuple[str, ...]) -> bool:
        key = _key(params)
        if key in self.seen:
            return False
        self.seen.add(key)
        reason = self.problem.rejects(params, self.device_kind)
        if reason is not None:
            self.plan.dropped.append((params, reason))
            return False
        self.plan.cases.append((params, tags))
        return True

    def representative(self) -> dict[str, int]:
        if self.device_kind != "cpu" and self.problem.rejects(self.shipped, "cuda") is not None:
            self.problem.meta_checks = False  # meta cannot follow this reference: GPU cases go unchecked
            self.plan.notes.append(
                "the reference cannot run on the meta device, so GPU-sized cases are not checked against it"
            )
        tied = shrink(self.problem, self.shipped, self.units, self.rep_fits)
        proportional = self._proportional()
        last = None
        for params in (tied, proportional):
            reason = self.problem.rejects(params, self.device_kind)
            if reason is None:
                tags = ("representative", "timed") + (("shipped",) if params == self.shipped else ())
                self.seen.add(_key(params))
                self.plan.cases.append((params, tags))
                return params
            if _key(params) not in {_key(p) for p, _ in self.plan.dropped}:
                self.plan.dropped.append((params, reason))
            last = reason
        raise ProblemError(
            f"{self.problem.path.name}: the reference rejects its shrunk shapes "
            f"({', '.join(f'{k}={v}' for k, v in tied.items())}): {last}"
        )

    def _proportional(self) -> dict[str, int]:
        """Every size halved together each step: keeps every ratio of the shipped sizes."""
        current = dict(self.shipped)
        while not self.rep_fits(self.problem.footprint(current)):
            movable = [u for u in self.units if current[u[0]] > SIZE_MIN]
            if not movable:
                break
            current = dict(current, **{n: max(SIZE_MIN, (current[n] + 1) // 2) for u in movable for n in u})
        return current

    def edges(self, rep: dict[str, int]) -> None:
        """Per size (and per tied group) the device's edges. On the CPU the edge past 1024 goes only to
        sizes the reference reduces over (or all of them, when that cannot be told): 1537 rows of a
        row-wise kernel are 1537 interpreted programs and prove nothing the 97-row edge does not."""
        mixing = self.problem.mixing_slots(rep) if self.device_kind == "cpu" else None
        if mixing is None:
            mixing = {n for u in self.units for n in u}
        for unit in self.units:
            groups = [unit] + ([(n,) for n in unit] if len(unit) > 1 and unit not in self.structural else [])
            for group in groups:
                for edge in EDGES[self.device_kind]:
                    if all(rep[n] == edge for n in group):
                        continue
                    if self.device_kind == "cpu" and edge > 1024 and not set(group) & mixing:
                        continue
                    self._edge(rep, group, edge)

    def _edge(self, rep: dict[str, int], group: tuple[str, ...], edge: int) -> None:
        """The edge with the other sizes shrunk to fit (as far as EDGE_SIZE_MIN). If the reference rejects
        that (a pooling window wider than the shrunk sequence), the shrink is tried again keeping one
        other size at its representative value, each in turn; the first the reference accepts is kept."""
        start = dict(rep, **{n: edge for n in group})
        others = _without(self.units, group)
        tries = [others] + [[u for u in others if u != keep] for keep in others]
        first = None
        for movable in tries:
            params = shrink(self.problem, start, movable, self.edge_fits, EDGE_SIZE_MIN)
            if not self.edge_fits(self.problem.footprint(params)):
                continue
            first = first or params
            if self.problem.rejects(params, self.device_kind) is None:
                self.accept(params, ("edge",))
                return
        if first is not None:
            self.accept(first, ("edge",))  # recorded as dropped, with the reference's reason

    def ragged(self, rep: dict[str, int]) -> None:
        """Every size a different non-power-of-two at once (tied sizes stay tied)."""
        if not self.units:
            return
        used: set[int] = set()
        values: dict[tuple[str, ...], int] = {}
        for unit in self.units:
            choice = next((p for p in _primes_below(2 * rep[unit[0]] + 1) if p not in used), 3)
            used.add(choice)
            values[unit] = choice
        while True:
            params = dict(rep, **{n: v for u, v in values.items() for n in u})
            if self.edge_fits(self.problem.footprint(params)):
                break
            biggest = max(values, key=values.get)
            lower = [p for p in _primes_below(values[biggest]) if p not in used]
            if values[biggest] <= 3 or not lower:
                self.plan.notes.append("no case with every size a non-power-of-two fits the CPU edge budget")
                return
            used.discard(values[biggest])
            values[biggest] = lower[0]
            used.add(lower[0])
        self.accept(params, ("edge",))

    def _width_units(self, rep: dict[str, int]) -> list[tuple[str, ...]]:
        """The sizes that set the innermost dimension of the largest input: its tied group first, then
        the member alone (InstanceNorm ties height and width; only width is innermost)."""
        try:
            inputs = self.problem.inputs_meta(rep)
        except Exception:
            inputs = []
        out: list[tuple[str, ...]] = []
        if inputs:
            largest = max(range(len(inputs)), key=lambda i: inputs[i].numel())
            last = tuple(inputs[largest].shape)[-1:]
            for unit in sorted(self.units, key=lambda u: -rep[u[0]]):
                members = [(n,) for n in unit] if len(unit) > 1 and unit not in self.structural else []
                for group in members + [unit]:  # an untied member first: the rows need not grow with it
                    try:
                        moved = self.problem.inputs_meta(dict(rep, **{n: rep[n] + 1 for n in group}))
                    except Exception:
                        continue
                    if len(moved) > largest and tuple(moved[largest].shape)[-1:] != last:
                        out.append(group)
                if out:
                    return out
        return [max(self.units, key=lambda u: rep[u[0]])] if self.units else []

    def _reduced_units(self, rep: dict[str, int]) -> list[tuple[str, ...]]:
        """Sizes the reference reduces away: growing one leaves the number of output elements unchanged."""
        base = self.problem.output_numel(rep)
        if base is None:
            return []
        return [u for u in self.units if self.problem.output_numel(dict(rep, **{n: rep[n] + 1 for n in u})) == base]

    def big(self, rep: dict[str, int]) -> None:
        """A reduction gets its reduced sizes at 4099 and small odd kept sizes (few outputs, so a kernel
        with one program per output stays cheap); anything else its innermost size at 4099 and more than
        2^20 elements (a grid capped at 1024 blocks of 1024 falls short there)."""
        reduced = self._reduced_units(rep)
        kept = [u for u in self.units if u not in reduced]
        mixing = self.problem.mixing_slots(rep)
        elementwise = mixing is not None and not mixing & {n for u in self.units for n in u}
        if reduced and not kept or elementwise:  # a full reduction, or elementwise: past 2^20 elements
            self._wide(rep, CPU_BIG_MAX_NUMEL, trim=True)
            return
        if not reduced:  # norms, scans, pooling: rows past 64 of 4099, each row one interpreted program or more
            self._wide(rep, CPU_BIG_ROWS_MAX_NUMEL, trim=False)
            return
        if reduced and kept:
            small = dict(zip(kept, (3, 5, 7, 11, 13, 17, 19, 23)))
            start = dict(
                rep, **{n: v for u, v in small.items() for n in u}, **{n: BIG_WIDTHS[0] for u in reduced for n in u}
            )
            params = shrink(self.problem, start, reduced, lambda f: f.max_numel <= CPU_BIG_MAX_NUMEL, EDGE_SIZE_MIN)
            for unit in reduced:
                if _is_pow2(params[unit[0]]):
                    params = dict(params, **{n: params[n] - 1 for n in unit})
            self.accept(params, ("big",))

    def _wide(self, rep: dict[str, int], max_numel: int, trim: bool) -> None:
        big_fits = lambda f: f.max_numel <= max_numel  # noqa: E731
        params = None
        others: list[tuple[str, ...]] = []
        for width in self._width_units(rep):
            others = _without(self.units, width)
            for w in BIG_WIDTHS:
                start = dict(self.shipped, **{n: w for n in width})
                params = shrink(self.problem, start, others, big_fits, EDGE_SIZE_MIN)
                if big_fits(self.problem.footprint(params)):
                    break
                params = None
            if params is not None:
                break
        if params is None:
            self.plan.notes.append(
                f"no big case fits {max_numel} elements with its innermost size at {BIG_WIDTHS[-1]} or more"
            )
            return
        numel = lambda p: self.problem.footprint(p).max_numel  # noqa: E731
        if trim and others and numel(params) > CPU_BIG_TRIM_NUMEL:  # trim to just past 2^20: the interpreter's cost
            unit = max(others, key=lambda u: params[u[0]])
            v = params[unit[0]]
            want = max(2, -(-v * CPU_BIG_MIN_NUMEL // numel(params)))
            while want < v and numel(dict(params, **{n: want for n in unit})) < CPU_BIG_MIN_NUMEL:
                want += 1
            if want < v:
                params = dict(params, **{n: want for n in unit})
        for unit in others:  # every other size a non-power-of-two too, if the budget allows
            v = params[unit[0]]
            if not _is_pow2(v):
                continue
            for cand in (v + 1, v - 1):
                trial = dict(params, **{n: cand for n in unit})
                if cand >= 2 and big_fits(self.problem.footprint(trial)):
                    params = trial
                    break
        if trim and numel(params) < CPU_BIG_MIN_NUMEL:
            self.plan.notes.append(
                f"the big case has fewer than {CPU_BIG_MIN_NUMEL} elements: the sizes that "
                f"do not scale the largest input stop it"
            )
        self.accept(params, ("big",))


def derive_plan(
    path: Path, slots: dict[str, int], device_kind: str, overrides: dict[str, int], source: str | None = None
) -> Plan:
    """The representative case first, then edges (and on the CPU the ragged and big cases)."""
    deriver = _Deriver(_Problem(path, source), slots, device_kind, overrides)
    rep = deriver.representative()
    deriver.find_structural_ties(rep)
    deriver.edges(rep)
    if device_kind == "cpu":
        deriver.ragged(rep)
        deriver.big(rep)
    return deriver.plan


def derive_cases(
    path: Path, constants: dict[str, int], device_kind: str, overrides: dict[str, int]
) -> list[tuple[dict[str, int], tuple[str, ...]]]:
    """The derived cases alone, as (params, tags) pairs (derive_plan has the dropped ones too)."""
    return derive_plan(path, constants, device_kind, overrides).cases
