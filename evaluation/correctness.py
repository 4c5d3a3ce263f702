"""The parent's half of judging: the reference, the inputs each judged call ran on, and the verdicts.

The parent builds the reference Model after the same seed and init inputs as the worker, saves its
state dict for the worker, and runs it itself in float64 on the same dtype-rounded inputs and
dtype-rounded parameters (so the tolerance covers only the candidate's arithmetic). For every judged
call the worker reports (a correctness trial, the first or last timed call, the call on fresh inputs
after timing), the parent draws that call's inputs again from the seed it chose itself and compares.
Outputs must match the reference in value, shape, dtype and strides (unless the problem declares
`LAYOUT_FREE = True`). Results are judged while the worker is still running. Only outputs cross
back: the worker checks that inputs are unchanged against copies it took before the forward.

The problem travels by value: the parent writes `ProblemInfo.source` into the worker's input folder
and the worker checks its sha256, so a node that never saw the user's file can run it.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from evaluation import protocol
from evaluation.compare import Comparison, compare
from evaluation.errors import ProblemError
from evaluation.inputs import RNG_LOCK, SCALING_KINDS, STRESS_LADDERS, describe, restates, trial_inputs
from evaluation.problem import exec_problem_source, init_inputs, read_source
from evaluation.records import KernelInfo, ProblemInfo, ShapeCase, ShapeResult, Stage, Status

# Float64 references and comparisons of LLM-sized outputs take GBs of device memory each; a parent
# judging a batch of candidates in threads runs at most this many at once (it ran out of an H200's
# 140 GiB with eight at once next to eight workers).
JUDGE_SLOTS = threading.BoundedSemaphore(2)
# A judgement whose float64 output a search already keeps draws no inputs and runs no reference: only
# the chunked comparison's temporaries (about 1 GiB), so more of them run at once.
KEPT_JUDGE_SLOTS = threading.BoundedSemaphore(6)
# Small outputs are judged on the host. A parent judging a batch shares the GPU with the batch's
# workers, and without MPS the device time-slices between their contexts: every kernel and every read
# back of the parent waits for a turn (a batch's judgements took 30 times longer than one alone on an
# H100). A reference output of at most this many elements is kept in host memory, and a worker's output
# of at most HOST_READ_BYTES (evaluation/shared.py) is copied straight to the host, so comparing the
# many small cases of a problem needs no kernel of the parent's at all.
HOST_JUDGE_ELEMENTS = 1 << 19
# Device memory the parent's allocator may hold unused after a judgement before it is given back for the
# workers (emptying the cache after every judgement waits for the device twice, in every thread).
JUDGE_CACHE_SLACK_BYTES = 1 << 30
REFERENCE_WAIT_S = 600.0  # at most this long for another thread's reference (then computed here)
_DONE = threading.Event()  # claim(): the reference is kept already
_DONE.set()
_OOM_RETRIES, _OOM_BACKOFF_S = 4, 0.5  # waits 0.5 + 1 + 2 + 4 s for the workers' peaks to pass

N_INPUT_SETS = 4  # input sets rotated between timed calls
# Correctness on a GPU prepares each case as timing does, with fewer input sets: eight checks share one
# GPU, and an LLM-sized case holds every set at once (the replay on fresh inputs is what is judged).
N_CHECK_SETS = 2
# Stress trials look for breakdowns (overflow to Inf/NaN, cancellation, a lost max subtraction), not
# for the last digits: a kernel passes one within this many times the dtype's tolerance. The
# magnitude itself is one where PyTorch, in the case dtype, passes the plain tolerance.
STRESS_TOLERANCE_FACTOR = 10.0
TIMING_SET_OFFSET = 1000  # seeds of the rotated sets: seed + 1000 + i
CHECK_OFFSET = 3000  # seed of the fresh-input call after timing: seed + 3000 + case index
TIMING_TRIAL_OFFSET = 10_000  # a timing worker's trial calls get seeds the correctness run never used


def problem_text(info: ProblemInfo) -> str:
    """The reference source, by value; read from its path only for a record made without it."""
    text = info.source or read_source(Path(info.source_path))
    if hashlib.sha256(text.encode()).hexdigest() != info.source_sha256:
        raise ProblemError(
            f"the source of problem {info.name} does not match its recorded sha256 "
            f"(the file changed since it was loaded: load the problem again)"
        )
    return text


class KeepBudget:
    """Bytes of kept float64 reference outputs that every search of a process shares on one device.

    Each search may keep up to its own budget, but searches side by side (`agent.coverage
    --concurrency 4`) would otherwise each keep a fifth of the GPU: four GEMM searches kept 64 GB of an
    H100's 80 beside their 32 checks, and the checks' workers could no longer make a CUDA context."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> bool:
        with self._lock:
            if self.used + nbytes > self.limit:
                return False
            self.used += nbytes
            return True

    def give(self, nbytes: int) -> None:
        with self._lock:
            self.used = max(0, self.used - nbytes)

    def full(self) -> bool:
        return self.used >= self.limit


class References:
    """Problem modules, reference models and their state dicts, built once per parameter binding."""

    def __init__(
        self, info: ProblemInfo, device: str, init_seed: int, *, keep_bytes: int = 0, shared: KeepBudget | None = None
    ):
        """`keep_bytes`: how many bytes of float64 reference outputs to keep for later judgements of the
        same inputs (a search's references, shared by all its candidates: evaluation/context.py).
        `shared`: the budget this search's kept outputs also count against, with every other search's of
        the process on the device; `forget` gives them back."""
        self.info, self.device, self.init_seed = info, device, init_seed
        self.shared = shared
        self._forgotten = False
        self.text = problem_text(info)
        self._modules: dict[str, Any] = {}
        self._models: dict[str, torch.nn.Module] = {}
        self._models64: dict[tuple[str, str, str], torch.nn.Module] = {}
        self.keep_bytes = keep_bytes
        self._kept: dict[tuple, Any] = {}  # (case, dtype, trial) -> the float64 output
        self._kept_bytes = 0
        self._kept_lock = threading.Lock()
        self._computing: dict[tuple, threading.Event] = {}  # references a judging thread is computing now
        self._prefetching = False
        self.prefetched = 0  # float64 outputs computed ahead of their first judgement (prefetch)
        self.reused = 0  # judgements answered from a kept reference output

    def kept(self, case: ShapeCase, trial: protocol.Trial) -> Any | None:
        """The float64 reference output already computed for this case and trial, or None."""
        if not self.keep_bytes:
            return None
        with self._kept_lock:
            found = self._kept.get((self.key(case.params), case.dtype, trial.model_dump_json()))
            if found is not None:
                self.reused += 1
            return found

    def claim(self, case: ShapeCase, trial: protocol.Trial) -> threading.Event | None:
        """Single flight for a kept reference: None when the caller is to compute it (and must call
        `release`), or the event another judging thread sets once it has kept the same one. Without
        this, a batch's first judgements of a trial all computed it at once, in two slots."""
        if not self.keep_bytes:
            return None
        k = (self.key(case.params), case.dtype, trial.model_dump_json())
        with self._kept_lock:
            if k in self._kept:
                return _DONE
            event = self._computing.get(k)
            if event is None:
                self._computing[k] = threading.Event()
            return event

    def release(self, case: ShapeCase, trial: protocol.Trial) -> None:
        k = (self.key(case.params), case.dtype, trial.model_dump_json())
        with self._kept_lock:
            event = self._computing.pop(k, None)
        if event is not None:
            event.set()

    def keep(self, case: ShapeCase, trial: protocol.Trial, expected: Any) -> None:
        if not self.keep_bytes:
            return
        items = expected if isinstance(expected, (tuple, list)) else [expected]
        nbytes = sum(t.nbytes for t in items if isinstance(t, torch.Tensor))
        with self._kept_lock:
            k = (self.key(case.params), case.dtype, trial.model_dump_json())
            # Every candidate walks the same trials in the same order: evicting would make each miss
            # what the next one needs, so once the budget is full nothing more is kept.
            if k in self._kept or self._kept_bytes + nbytes > self.keep_bytes or self._forgotten:
                return
            if self.shared is not None and not self.shared.take(nbytes):
                return  # the process's searches keep enough between them
            if sum(t.numel() for t in items if isinstance(t, torch.Tensor)) <= HOST_JUDGE_ELEMENTS:
                expected = _on_host(expected)  # judged on the host from now on (HOST_JUDGE_ELEMENTS)
            self._kept[k] = expected
            self._kept_bytes += nbytes

    def prefetch(self, work: list[tuple[ShapeCase, protocol.Trial]], *, background: bool = True) -> None:
        """Compute and keep the float64 outputs of these judgements before the first worker asks for them,
        in the order given (the order a worker runs them), once per search. A batch's first checks
        otherwise wait for each reference in turn, two at a time, while the GPU sits idle as the workers
        warm up. A reference already kept or being computed is skipped, one that fails is left to its
        judgement, and nothing is computed past the keep budget."""
        if not self.keep_bytes:
            return
        with self._kept_lock:
            if self._prefetching:
                return
            self._prefetching = True
        if not background:
            self._prefetch(work)
            return
        threading.Thread(target=self._prefetch, args=(work,), name="kscout-references", daemon=True).start()

    def _prefetch(self, work: list[tuple[ShapeCase, protocol.Trial]]) -> None:
        judge = Judge(self, self.device)
        for case, trial in work:
            if self._kept_bytes >= self.keep_bytes or (self.shared is not None and self.shared.full()):
                return
            if self.claim(case, trial) is not None:
                continue  # kept already, or a judging thread computes it now
            try:
                with JUDGE_SLOTS:
                    module = self.module(case.params)
                    drawn = judge._waiting_for_memory(lambda: trial_inputs(module, case.dtype, trial, self.device))
                    self.keep(case, trial, self.expected(case, drawn))
                    self.prefetched += 1
                    del drawn
            except Exception:  # out of memory beside the workers, as a rule: the judgement computes it
                pass
            finally:
                self.release(case, trial)
                _give_back_cache(self.device)

    def forget(self) -> None:
        """Drop every kept output and give its bytes back to the shared budget (the search is over);
        nothing is kept after this."""
        with self._kept_lock:
            nbytes, self._kept_bytes = self._kept_bytes, 0
            self._kept.clear()
            self._forgotten = True
        if self.shared is not None:
            self.shared.give(nbytes)

    @staticmethod
    def key(params: dict[str, int]) -> str:
        return protocol.params_key(params)

    def module(self, params: dict[str, int]):
        k = self.key(params)
        if k not in self._modules:
            self._modules[k] = exec_problem_source(self.text, self.info.source_path, params)
        return self._modules[k]

    def model(self, params: dict[str, int]) -> torch.nn.Module:
        k = self.key(params)
        if k not in self._models:
            pm = self.module(params)
            with RNG_LOCK:
                torch.manual_seed(self.init_seed)
                init = init_inputs(pm)
                torch.manual_seed(self.init_seed)
                self._models[k] = pm.Model(*init).eval()
        return self._models[k]

    def expected(self, case: ShapeCase, inputs: list[Any], device: str | None = None):
        """The reference output in float64, on the trial's inputs (already rounded to the case dtype),
        computed on `device` (default: the evaluation's)."""
        device = device or self.device
        k = (self.key(case.params), case.dtype, device)
        if k not in self._models64:
            rounded = copy.deepcopy(self.model(case.params)).to(dtype=getattr(torch, case.dtype))
            self._models64[k] = rounded.to(dtype=torch.float64, device=device).eval()
        wide = [
            x.to(device=device, dtype=torch.float64 if x.is_floating_point() else x.dtype)
            if isinstance(x, torch.Tensor)
            else x
            for x in inputs
        ]
        with torch.no_grad():
            return self._models64[k](*wide)

    def native(self, case: ShapeCase, inputs: list[Any], device: str | None = None):
        """The reference run by PyTorch in the case dtype itself: the precision PyTorch has there."""
        device = device or self.device
        k = ("native", self.key(case.params), case.dtype, device)
        if k not in self._models64:
            self._models64[k] = (
                copy.deepcopy(self.model(case.params)).to(dtype=getattr(torch, case.dtype), device=device).eval()
            )
        with torch.no_grad():
            return self._models64[k](*[x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs])

    def torch_handles(self, case: ShapeCase, trial: protocol.Trial) -> bool:
        """Whether PyTorch, in the case dtype, passes our comparison on `trial`'s inputs (and the float64
        reference is finite there): a stress trial never asks a kernel for more than PyTorch has."""
        module = self.module(case.params)
        plain = trial_inputs(module, case.dtype, trial.model_copy(update=dict(scale=1.0, shift=0.0)), self.device)
        if not any(
            isinstance(x, torch.Tensor) and x.is_floating_point() and restates(x, trial.scale, True, trial.label)
            for x in plain
        ):
            return False  # no input this kind changes: the trial would repeat the plain one
        inputs = trial_inputs(module, case.dtype, trial, self.device)
        try:
            expected, native = self.expected(case, inputs), self.native(case, inputs)
        except torch.OutOfMemoryError:  # a GPU shared with the workers: the host answers the same question
            inputs = _on_host(inputs)
            torch.cuda.empty_cache()
            expected, native = self.expected(case, inputs, "cpu"), self.native(case, inputs, "cpu")
        items = expected if isinstance(expected, (tuple, list)) else [expected]
        if not all(bool(torch.isfinite(t).all()) for t in items if isinstance(t, torch.Tensor)):
            return False
        return compare(protocol.package(native), expected, case.dtype, self.info.tolerances[case.dtype]).passed

    def torch_alike(self, case: ShapeCase, trial: protocol.Trial, outputs: Any) -> bool:
        """Whether the kernel's outputs on `trial`'s inputs miss the float64 reference only where PyTorch
        in the case dtype misses it too, and there do what PyTorch does: the comparison is against the
        float64 reference, except at the elements where PyTorch's own output misses it, where it is
        against PyTorch's output (infinity where it overflows). False where PyTorch passes."""
        inputs = trial_inputs(self.module(case.params), case.dtype, trial, self.device)
        try:
            expected, native = self.expected(case, inputs), self.native(case, inputs)
        except torch.OutOfMemoryError:
            inputs = _on_host(inputs)
            torch.cuda.empty_cache()
            expected, native = self.expected(case, inputs, "cpu"), self.native(case, inputs, "cpu")
        tol = self.info.tolerances[case.dtype]
        if compare(protocol.package(native), expected, case.dtype, tol).passed:
            return False  # PyTorch handles these inputs: the kernel's failure is its own
        as_list = isinstance(expected, (tuple, list))
        exp_items = list(expected) if as_list else [expected]
        nat_items = list(native) if isinstance(native, (tuple, list)) else [native]
        if len(exp_items) != len(nat_items):
            return False
        patched = []
        for e, n in zip(exp_items, nat_items):
            if isinstance(e, torch.Tensor) and isinstance(n, torch.Tensor) and e.shape == n.shape:
                e64 = e.to(torch.float64)
                n64 = n.to(device=e.device, dtype=torch.float64)
                ok = (
                    ((n64 - e64).abs() <= tol.atol + tol.rtol * e64.abs())
                    | (torch.isnan(n64) & torch.isnan(e64))
                    | (torch.isinf(e64) & (n64 == e64))
                )
                patched.append(torch.where(ok, e64, n64).to(e.dtype))
            else:
                patched.append(e)
        again = type(expected)(patched) if as_list else patched[0]
        return compare(outputs, again, case.dtype, tol).passed

    def layout_free(self, params: dict[str, int]) -> bool:
        return bool(getattr(self.module(params), "LAYOUT_FREE", False))

    def allowed_torch_ops(self) -> list[str]:
        ops = (
            getattr(self.module(self.info.shape_cases[0].params), "ALLOWED_TORCH_OPS", ())
            if self.info.shape_cases
            else ()
        )
        return [str(op) for op in ops]


def _layout(strides: list, expected: Any) -> str | None:
    """Why the output's strides differ from the reference's, or None. Dimensions of size 1 have no
    meaningful stride and are skipped."""
    exp_items = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    for k, (got, exp) in enumerate(zip(strides, exp_items)):
        if got is None or not isinstance(exp, torch.Tensor) or exp.dim() == 0:
            continue
        want = [s for s, n in zip(exp.stride(), exp.shape) if n > 1]
        have = [s for s, n in zip(got, exp.shape) if n > 1]
        if want != have:
            where = f"output {k}: " if len(exp_items) > 1 else ""
            return (
                f"{where}strides {tuple(got)}, the reference's are {tuple(exp.stride())} "
                f"(the problem does not declare LAYOUT_FREE = True)"
            )
    return None


def _give_back_cache(device: str) -> None:
    """Empty the parent's CUDA allocator once it holds more than JUDGE_CACHE_SLACK_BYTES that no tensor
    uses (host-side counters: no device wait): the batch's workers may need what a judgement left cached."""
    if device == "cuda" and torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > JUDGE_CACHE_SLACK_BYTES:
        torch.cuda.empty_cache()


def _on_host(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(_on_host(v) for v in value)
    return value


class Judge:
    """Draws a judged call's inputs again, runs the reference and compares (shared by every stage)."""

    def __init__(self, refs: References, device: str):
        self.refs, self.device = refs, device
        # Seconds this judge spent waiting (for a judging slot, or for another thread's reference) and
        # judging: the throughput benchmark's split of the parent's time (evaluation/phases.py).
        self.waited_s = 0.0
        self.judged_s = 0.0

    def judge(self, case: ShapeCase, trial: protocol.Trial, blob: bytes, strides: list) -> Comparison:
        try:
            payload = protocol.unpackage(blob)
        except Exception as exc:  # MAC'd by the worker, so unreadable means a harness fault
            return Comparison(False, "ProtocolError", f"outputs could not be read: {type(exc).__name__}")
        tol = self.refs.info.tolerances[case.dtype]
        if trial.stress:
            tol = tol.model_copy(
                update=dict(atol=tol.atol * STRESS_TOLERANCE_FACTOR, rtol=tol.rtol * STRESS_TOLERANCE_FACTOR)
            )
        t0 = time.perf_counter()
        kept = self.refs.kept(case, trial)
        owner = False
        if kept is None:
            pending = self.refs.claim(case, trial)
            if pending is None:
                owner = bool(self.refs.keep_bytes)
            else:  # another thread computes this very reference: wait for it rather than compute it too
                pending.wait(REFERENCE_WAIT_S)
                kept = self.refs.kept(case, trial)  # None if the budget was full: computed here after all
        try:
            with KEPT_JUDGE_SLOTS if kept is not None else JUDGE_SLOTS:  # drawing inputs takes device memory too
                t1 = time.perf_counter()
                self.waited_s += t1 - t0
                try:
                    verdict = self._compare(case, trial, payload, strides, tol, kept)
                finally:
                    self.judged_s += time.perf_counter() - t1
                if (
                    not verdict.passed
                    and verdict.kind != "LayoutMismatch"
                    and self._torch_fails_too(case, trial, payload)
                ):
                    # PyTorch fails these very inputs too: not the kernel's fault
                    verdict = Comparison(
                        True,
                        max_abs_error=verdict.max_abs_error,
                        max_rel_error=verdict.max_rel_error,
                        numel=verdict.numel,
                        output_shape=verdict.output_shape,
                        output_dtype=verdict.output_dtype,
                    )
                return verdict
        finally:
            if owner:  # kept by now (or the budget is full): whoever waits for it goes on
                self.refs.release(case, trial)

    def _torch_fails_too(self, case: ShapeCase, trial: protocol.Trial, outputs: Any) -> bool:
        """Whether the failed trial asked more than PyTorch itself gives in the case dtype.

        A stress trial: PyTorch fails its inputs (its magnitude was planned on other draws). A rescaled
        regular trial (x*4+1.5, x*0.01): PyTorch in the case dtype fails the very same inputs, and the
        kernel misses the float64 reference only where PyTorch does, doing there what PyTorch does (a
        float32 cumprod that overflows where the float64 reference does not, as torch.cumprod in float32
        does: `References.torch_alike`). The first trial (the inputs as get_inputs() draws them) is never
        excused, so a kernel that is wrong on ordinary inputs is refused whatever PyTorch does."""
        if trial.stress:
            return not self.refs.torch_handles(case, trial)
        if trial.label != "rescaled" or (trial.scale == 1.0 and trial.shift == 0.0):
            return False
        return self.refs.torch_alike(case, trial, outputs)

    def _compare(
        self, case: ShapeCase, trial: protocol.Trial, outputs: Any, strides: list, tol, expected: Any = None
    ) -> Comparison:
        """Draw the call's inputs again exactly as the worker did (same generator, same device), run the
        float64 reference on them and compare. Device memory is shared with the batch's workers: a draw
        that does not fit waits for their peaks to pass; a reference that does not fit runs on the host."""
        module = self.refs.module(case.params)
        drawn = None
        if expected is None:
            drawn = self._waiting_for_memory(lambda: trial_inputs(module, case.dtype, trial, self.device))
        try:
            if expected is None:
                try:
                    expected = self.refs.expected(case, drawn)
                except torch.OutOfMemoryError:
                    host, drawn = _on_host(drawn), None
                    torch.cuda.empty_cache()
                    expected = self.refs.expected(case, host, "cpu")
                self.refs.keep(case, trial, expected)
            try:
                verdict = compare(outputs, expected, case.dtype, tol)
            except torch.OutOfMemoryError:  # chunked, yet the batch's workers hold the device: judge on the host
                expected = _on_host(expected)
                if self.device == "cuda":
                    torch.cuda.empty_cache()
                verdict = compare(outputs, expected, case.dtype, tol)
            if verdict.passed and not self.refs.layout_free(case.params):
                why = _layout(strides, expected)
                if why:
                    verdict = Comparison(
                        False,
                        "LayoutMismatch",
                        why,
                        max_abs_error=verdict.max_abs_error,
                        max_rel_error=verdict.max_rel_error,
                        numel=verdict.numel,
                        output_shape=verdict.output_shape,
                        output_dtype=verdict.output_dtype,
                    )
            return verdict
        finally:
            del drawn
            _give_back_cache(self.device)

    def _waiting_for_memory(self, draw):
        for attempt in range(_OOM_RETRIES + 1):
            try:
                return draw()
            except torch.OutOfMemoryError:
                if self.device != "cuda" or attempt == _OOM_RETRIES:
                    raise  # never fit: the executor checks this candidate again with the GPU to itself
                torch.cuda.empty_cache()
                time.sleep(_OOM_BACKOFF_S * 2**attempt)


# -- what each worker is asked to run -------------------------------------------------------------


def regular_trials(seed: int, trials: int) -> list[protocol.Trial]:
    from evaluation.inputs import transform

    out = []
    for t in range(trials):
        scale, shift = transform(t)
        out.append(protocol.Trial(seed=seed + t, scale=scale, shift=shift, label="random" if t == 0 else "rescaled"))
    return out


PLAN_SEED = 7  # the draws stress magnitudes are planned on (the trials themselves use fresh seeds)
_STRESS_PLANS: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
_PLAN_LOCK = threading.Lock()


def _stress(kind: str, value: float, seed: int) -> protocol.Trial:
    return protocol.Trial(
        seed=seed,
        scale=value if kind in SCALING_KINDS else 1.0,
        shift=value if kind == "large_offset" else 0.0,
        stress=True,
        label=kind,
    )


def stress_trials(refs: References, case: ShapeCase, first_seed: int) -> list[protocol.Trial]:
    """Per stress kind, the largest magnitude on the ladder that PyTorch itself handles in the case
    dtype (planned once per problem, case and device), as trials with seeds from `first_seed` on.

    Planning runs the reference in float64 and in the case dtype for every rung tried: about 10 s for
    an LLM-sized problem on an H200, so a plan is also kept on disk (`_plan_file`) for the next
    process. A plan is only a choice of magnitudes: a stress trial that PyTorch itself fails is
    excused when it is judged (Judge.judge), so a stale plan cannot refuse a correct kernel."""
    key = (refs.info.problem_id, case.case_id, refs.device)
    with _PLAN_LOCK:
        plan = _STRESS_PLANS.get(key)
        if plan is None:
            path = _plan_file(refs, case)
            plan = _read_plan(path)
            if plan is None:
                plan = []
                for kind, ladder in STRESS_LADDERS.items():
                    value = next((v for v in ladder if refs.torch_handles(case, _stress(kind, v, PLAN_SEED))), None)
                    if value is not None:
                        plan.append((kind, value))
                _write_plan(path, plan)
            _STRESS_PLANS[key] = plan
    return [_stress(kind, value, first_seed + k) for k, (kind, value) in enumerate(plan)]


def _plan_file(refs: References, case: ShapeCase) -> Path:
    """Where a case's stress plan is kept: keyed by everything the plan depends on (the problem and
    case, the device model, torch's version, the ladders and the planning seed)."""
    import json

    from evaluation.ceiling import cache_dir

    device = torch.cuda.get_device_name() if refs.device == "cuda" else refs.device
    key = json.dumps(
        [PLAN_FORMAT, refs.info.problem_id, case.case_id, device, torch.__version__, STRESS_LADDERS, PLAN_SEED]
    )
    return cache_dir() / "stress-plans" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


PLAN_FORMAT = 1


def _read_plan(path: Path) -> list[tuple[str, float]] | None:
    import json

    try:
        data = json.loads(path.read_text())
        plan = [(str(kind), float(value)) for kind, value in data["plan"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if any(kind not in STRESS_LADDERS or value not in STRESS_LADDERS[kind] for kind, value in plan):
        return None  # not a rung of today's ladders: planned again
    return plan


def _write_plan(path: Path, plan: list[tuple[str, float]]) -> None:
    """Written whole or not at all (a temporary file renamed), so a concurrent reader never sees half."""
    import json
    import os
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"plan": plan}, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache costs the next process the planning, nothing else


# The CPU's time policy. The Triton interpreter works through about a million elements a second on
# these kernels (a 4096x4096 layernorm, one row per program: ~14 s), so a plan that gives every case
# the same trials spends a CPU evaluation's budget on its largest cases. There, each case keeps its
# stress trials and one random trial, and the other random trials go to the cheapest cases first
# while the planned elements fit in this share of the time budget.
CPU_ELEMENTS_PER_S = 1_000_000
CPU_PLAN_SHARE = 0.5


def cpu_trial_counts(costs: dict[int, int], stress: dict[int, int], trials: int, budget_s: float) -> dict[int, int]:
    """Random trials per case (at least 1, at most `trials`) for cases of `costs` input elements each,
    every case also running `stress[i]` stress trials, within `budget_s` of interpreter time."""
    budget = budget_s * CPU_PLAN_SHARE * CPU_ELEMENTS_PER_S
    counts = {i: 1 for i in costs}
    spent = sum(costs[i] * (1 + stress.get(i, 0)) for i in costs)
    for _ in range(1, trials):
        for i in sorted(costs, key=lambda i: (costs[i], i)):
            if spent + costs[i] > budget:
                break
            counts[i] += 1
            spent += costs[i]
    return counts


def input_elements(refs: References, case: ShapeCase) -> int:
    """How many elements a case's inputs hold (drawn once, with the planning seed)."""
    inputs = trial_inputs(refs.module(case.params), case.dtype, protocol.Trial(seed=PLAN_SEED), "cpu")
    return max(1, sum(x.numel() for x in inputs if isinstance(x, torch.Tensor)))


def input_numel(refs: References, case: ShapeCase) -> int | None:
    """How many elements a case's inputs hold, from `get_inputs()` run on the meta device (no memory,
    no data); None when the problem's inputs cannot be made there (an explicit device, say)."""
    try:
        with RNG_LOCK, torch.device("meta"):
            raw = refs.module(case.params).get_inputs()
        return sum(x.numel() for x in raw if isinstance(x, torch.Tensor))
    except Exception:
        return None


def cheap_first(refs: References, cases: list[tuple[int, ShapeCase]]) -> list[tuple[int, ShapeCase]]:
    """The cases in the order a check runs them: smallest inputs first (the screen: a wrong kernel
    usually shows on a small or edge case, in milliseconds), declared order among equals and for
    cases whose size cannot be told."""
    sizes = {index: input_numel(refs, case) for index, case in cases}
    if any(n is None for n in sizes.values()):
        return list(cases)
    return sorted(cases, key=lambda ic: (sizes[ic[0]], ic[0]))


# After a case has failed, a check still runs the cases up to this many input elements (they cost
# milliseconds and tell which shapes fail), and stops before the first larger one: the verdict is in.
SCREEN_ELEMENTS = 1 << 22


def trial_plan(refs: References, case: ShapeCase, seed: int, trials: int) -> list[protocol.Trial]:
    """The judged eager calls of a case: `trials` random ones, then the stress ones."""
    return regular_trials(seed, trials) + stress_trials(refs, case, seed + trials)


def timing_sets(seed: int, n: int = N_INPUT_SETS) -> list[protocol.Trial]:
    return [protocol.Trial(seed=seed + TIMING_SET_OFFSET + i, label="timing") for i in range(n)]


def check_trial(seed: int, index: int) -> protocol.Trial:
    return protocol.Trial(seed=seed + CHECK_OFFSET + index, label="check")


def write_inputs(
    in_dir: Path, refs: References, cases: list[tuple[int, ShapeCase]], sources: list[tuple[str, str]]
) -> tuple[str, dict[int, str]]:
    """The problem file, one folder per candidate (each with `candidate.py`) and the state dicts."""
    problem_file = f"{Path(refs.info.source_path).stem}.py"
    (in_dir / problem_file).write_text(refs.text)
    for folder, source in sources:
        (in_dir / folder).mkdir()
        (in_dir / folder / protocol.CANDIDATE).write_text(source)
    states: dict[str, str] = {}
    by_case = {}
    for index, case in cases:
        k = refs.key(case.params)
        if k not in states:
            states[k] = f"state_{len(states)}.pt"
            torch.save(refs.model(case.params).state_dict(), in_dir / states[k])
        by_case[index] = states[k]
    return problem_file, by_case


@dataclass
class Outcome:
    status: Status | None = None  # None: no verdict yet
    stage: Stage | None = None
    error_class: str | None = None
    message: str | None = None
    shape_results: list[ShapeResult] = field(default_factory=list)
    launches: int = 0
    kernels: list[KernelInfo] = field(default_factory=list)


class CorrectnessRun:
    """One candidate's correctness stage, as the parent sees it: the request, then every message."""

    def __init__(
        self,
        source: str,
        info: ProblemInfo,
        device: str,
        trials: int,
        seed: int,
        refs: References | None = None,
        budget_s: float | None = None,
    ):
        """`refs`: a search's shared references (with the same seed), else this run's own. `budget_s`:
        the evaluation's time limit; on the CPU the random trials are planned to fit in it."""
        self.source, self.info, self.device = source, info, device
        self.budget_s = budget_s
        self._cpu_counts: dict[int, int] | None = None
        self.seeds = [seed + t for t in range(trials)]
        self.refs = refs if refs is not None else References(info, device, seed)
        if self.refs.init_seed != seed:
            raise ValueError("the references were drawn for another seed")
        self.judge = Judge(self.refs, device)
        self.plans: dict[int, list[protocol.Trial]] = {}
        self.checks: dict[int, protocol.Trial] = {}
        self.verdicts: dict[int, dict[int, Comparison]] = {}
        self.check_verdicts: dict[int, Comparison] = {}
        self.outcome = Outcome()
        self.stop: protocol.Stop | None = None
        self.accounting: protocol.Accounting | None = None
        self.done = False
        self.order: list[int] = []  # case indices in the order the worker runs them (request)
        self.sizes: dict[int, int | None] = {}
        self.screened: list[int] = []  # cases not run: the check stopped after a failure (SCREEN_ELEMENTS)

    def plan(self, index: int, case: ShapeCase) -> list[protocol.Trial]:
        seed, trials = self.refs.init_seed, len(self.seeds)
        if self.device != "cpu" or self.budget_s is None or trials == 1:
            return trial_plan(self.refs, case, seed, trials)
        if self._cpu_counts is None:
            cases = dict(enumerate(self.info.shape_cases))
            costs = {i: input_elements(self.refs, c) for i, c in cases.items()}
            stress = {i: len(stress_trials(self.refs, c, seed + trials)) for i, c in cases.items()}
            self._cpu_counts = cpu_trial_counts(costs, stress, trials, self.budget_s)
        n = self._cpu_counts[index]
        return regular_trials(seed, n) + stress_trials(self.refs, case, seed + trials)

    def request(self, scratch, key: bytes) -> protocol.WorkerRequest:
        cases = cheap_first(self.refs, list(enumerate(self.info.shape_cases)))
        self.order = [index for index, _ in cases]
        self.sizes = {index: input_numel(self.refs, case) for index, case in cases}
        problem_file, states = write_inputs(scratch.in_dir, self.refs, cases, [("c0", self.source)])
        specs = []
        for index, case in cases:
            self.plans[index] = self.plan(index, case)
            extra = {}
            if self.device == "cuda":  # prepared and replayed exactly as a timing would
                self.checks[index] = check_trial(self.refs.init_seed, index)
                extra = dict(timing_sets=timing_sets(self.refs.init_seed, N_CHECK_SETS), check=self.checks[index])
            specs.append(
                protocol.CaseSpec(
                    index=index,
                    case_id=case.case_id,
                    params=case.params,
                    dtype=case.dtype,
                    state=states[index],
                    trials=self.plans[index],
                    atol=self.info.tolerances[case.dtype].atol,
                    rtol=self.info.tolerances[case.dtype].rtol,
                    **extra,
                )
            )
        if self.device == "cuda":  # a search's references, computed while its workers warm up
            work = [(case, t) for index, case in cases for t in [*self.plans[index], self.checks[index]]]
            self.refs.prefetch(work)
        return protocol.WorkerRequest(
            mode="correctness",
            key=key.hex(),
            device=self.device,
            problem_file=problem_file,
            problem_sha256=self.info.source_sha256,
            init_seed=self.refs.init_seed,
            cases=specs,
            candidates=[protocol.CandidateSpec(name="0", folder="c0")],
            allowed_torch_ops=self.refs.allowed_torch_ops(),
            launch_cases=[
                protocol.LaunchCase(case_id=c.case_id, params=c.params, dtype=c.dtype) for c in self.info.launch_cases
            ]
            if self.device == "cpu"
            else [],
        )

    def on_message(self, message: protocol.Message, blob: bytes) -> bool:
        """Judge what arrived; True once the verdict is final (the caller stops the worker)."""
        if isinstance(message, protocol.Outputs):
            if message.index not in self.plans:
                return self._reject("ProtocolError", f"outputs for undeclared case {message.index}")
            case = self.info.shape_cases[message.index]
            if message.phase == "trial" and message.trial < len(self.plans[message.index]):
                verdict = self.judge.judge(case, self.plans[message.index][message.trial], blob, message.strides)
                self.verdicts.setdefault(message.index, {})[message.trial] = verdict
            elif message.phase == "check" and message.index in self.checks:
                self.check_verdicts[message.index] = self.judge.judge(
                    case, self.checks[message.index], blob, message.strides
                )
            else:
                return self._reject("ProtocolError", f"unexpected {message.phase} outputs for {case.case_id}")
            self._maybe_complete(message.index)
            return self._screened_out(message.index)
        elif isinstance(message, protocol.Accounting):
            self.accounting = message
        elif isinstance(message, protocol.Stop):
            self.stop = message
        elif isinstance(message, protocol.Done):
            self.done = True
        return False

    def _screened_out(self, index: int) -> bool:
        """True (stop the worker) once a case has failed, `index`'s case is complete, and every case
        left to run is larger than SCREEN_ELEMENTS: they would only confirm a verdict already in."""
        done = {r.case_id for r in self.outcome.shape_results}
        failed = self.failing_partial() is not None or not all(r.passed for r in self.outcome.shape_results)
        if self.info.shape_cases[index].case_id not in done or not failed:
            return False
        if index not in self.order:
            return False
        left = self.order[self.order.index(index) + 1 :]
        if not left or any((self.sizes.get(i) or 0) <= SCREEN_ELEMENTS for i in left):
            return False
        if any(self.info.shape_cases[i].case_id in done for i in left):
            return False
        self.screened = left
        return True

    def _reject(self, error_class: str, message: str) -> bool:
        self.outcome.status, self.outcome.stage = Status.rejected, Stage.correctness
        self.outcome.error_class, self.outcome.message = error_class, message
        return True

    def _maybe_complete(self, index: int) -> None:
        have = self.verdicts.get(index, {})
        if len(have) < len(self.plans[index]) or (index in self.checks and index not in self.check_verdicts):
            return
        if any(r.case_id == self.info.shape_cases[index].case_id for r in self.outcome.shape_results):
            return
        self.outcome.shape_results.append(self._shape_result(index))

    def _shape_result(self, index: int) -> ShapeResult:
        case = self.info.shape_cases[index]
        trials = self.verdicts[index]
        plan = self.plans[index]
        failing = [t for t in sorted(trials) if not trials[t].passed]
        worst_t = failing[0] if failing else max(trials, key=lambda t: trials[t].max_abs_error or 0.0)
        worst = trials[worst_t]
        tol = self.info.tolerances[case.dtype]
        message = None
        if failing:
            tr = plan[worst_t]
            message = f"trial {worst_t} ({describe(tr.scale, tr.shift, tr.label)}, seed {tr.seed}): {worst.message}"
            if len(failing) > 1:
                message += f" (trials failing: {failing})"
        check = self.check_verdicts.get(index)
        if check is not None and not check.passed and not failing:
            worst = check
            message = (
                f"the prepared (graph-captured) call on fresh inputs (seed {self.checks[index].seed}): {check.message}"
            )
        return ShapeResult(
            case_id=case.case_id,
            params=case.params,
            dtype=case.dtype,
            passed=message is None,
            trials=len(trials),
            seeds=tuple(t.seed for t in plan),
            atol=tol.atol,
            rtol=tol.rtol,
            max_abs_error=worst.max_abs_error,
            max_rel_error=worst.max_rel_error,
            mismatch_count=worst.mismatch_count,
            numel=worst.numel,
            first_mismatch=worst.first_mismatch,
            output_shape=worst.output_shape,
            output_dtype=worst.output_dtype,
            message=message,
        )

    def accounted(self, stage: Stage):
        """The compute accounting's verdict from the profiled kernels (on a GPU), or None if clean;
        the hybrid ops either the watch or the profiler saw; PyTorch compute's share of the profiled
        device time (None where nothing was profiled: the CPU)."""
        from evaluation.accounting import classify, triton_functions

        acc = self.accounting
        if acc is None:
            return None, set(), None
        result = classify(
            acc.profiled,
            triton_functions(self.source),
            self.refs.allowed_torch_ops(),
            acc.torch_epilogue,
            acc.hybrid_ops,
        )
        hybrid = set(acc.hybrid_ops) | result.hybrid_ops
        fraction = result.torch_fraction if hybrid else None
        if result.foreign:
            return (
                dict(
                    status=Status.rejected,
                    failed_stage=stage,
                    error_class="TorchCompute",
                    message=result.message("forward"),
                ),
                hybrid,
                fraction,
            )
        return None, hybrid, fraction

    def judged_trials(self) -> int:
        """How many trial outputs the parent has judged so far (progress a slow interpreter still made)."""
        return sum(len(v) for v in self.verdicts.values())

    def failing_partial(self) -> tuple[int, int] | None:
        """A (case index, trial) whose judged output failed in a case that never completed."""
        done = {r.case_id for r in self.outcome.shape_results}
        for index in sorted(self.verdicts):
            if self.info.shape_cases[index].case_id in done:
                continue
            for t in sorted(self.verdicts[index]):
                if not self.verdicts[index][t].passed:
                    return index, t
        return None

    def first_failure_kind(self) -> str | None:
        for index in sorted(self.verdicts):
            for t in sorted(self.verdicts[index]):
                if not self.verdicts[index][t].passed:
                    return self.verdicts[index][t].kind
            check = self.check_verdicts.get(index)
            if check is not None and not check.passed:
                return check.kind
        return None
