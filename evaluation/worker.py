"""The process a candidate runs in: `python -m evaluation.worker --in-fd R --out-fd W --limits JSON`.

Started by the parent (isolation.py), sandboxed where it can be. Before anything else it drops to the
sandbox's uid (when started as root) and sets its resource limits; then it reads the request from the
pipe the parent owns, checks the problem text against its sha256 and loads the reference weights,
all before any candidate code is imported. Everything it reports goes back as MAC'd frames
(protocol.py); the parent judges every output itself, against its own reference.

Modes:
- `correctness`: per case, every trial as one eager call on poisoned memory (outputs sent); on a GPU
  the case is then prepared exactly as for timing (warm-up calls, one CUDA-graph capture) and the
  captured call runs once more on fresh inputs, whose outputs are sent too.
- `timing`: the same calls, then the timed samples; the outputs of the first and last timed call and
  of one more call on fresh inputs are sent for judgement. Several candidates may share the process
  (siblings of one batch); each is imported as `candidate` from a file named `candidate.py`, as in
  correctness, so a candidate cannot tell the two apart by its name. No baseline runs here.
- `baselines`: the reference alone (eager, torch.compile, torch.compile max-autotune): a process no
  candidate ever ran in, so nothing a candidate patches or hooks can slow or speed a baseline.
- `remeasure`: prepared runners (candidates, or the baselines when the request names no candidate),
  sampled one round per command from the parent, which alternates two such workers.

Checks made here (launches seen, no PyTorch compute, no aliasing, inputs unchanged, harness unpatched)
are installed before the candidate is imported; they share the candidate's process, so they are
defence in depth behind the static check and the parent's own comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

_STARTED = time.time()  # the interpreter is up and this module is being imported

from evaluation import protocol  # noqa: E402
from evaluation.guards import Verdict  # noqa: E402

COMPILE_MODES = {"torch_compile": None, "torch_compile_max_autotune": "max-autotune-no-cudagraphs"}


def one_line(exc: BaseException, limit: int = 600) -> str:
    """Multi-line messages (Triton's CompilationError puts the reason last) joined into one line."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text}"[:limit]


def progress(case_id: str, what: str) -> None:
    print(f"[kscout-worker] {case_id} {what}", file=sys.stderr, flush=True)


def drop_privileges(uid: int) -> None:
    """From root to the sandbox's own uid (and no capability left): RLIMIT_NPROC binds only then."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def apply_limits(limits: protocol.Limits) -> None:
    import resource

    pairs = [
        (resource.RLIMIT_CPU, limits.cpu_s),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_CORE, 0),
    ]
    if limits.address_space_bytes:
        pairs.append((resource.RLIMIT_AS, limits.address_space_bytes))
    if limits.nproc:
        pairs.append((resource.RLIMIT_NPROC, limits.nproc))
    for which, value in pairs:
        soft, hard = resource.getrlimit(which)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (cap, cap))


def matmul_precision(problem_module) -> None:
    """fp32 matmuls in the baselines at the precision the problem's tolerance admits (IEEE by default)."""
    import torch

    value = getattr(problem_module, "FLOAT32_MATMUL_PRECISION", "highest")
    torch.set_float32_matmul_precision(value if value in ("highest", "high") else "highest")


def _process_started() -> float | None:
    """When this process was started (`time.time()` scale), from /proc: the interpreter's start and the
    `evaluation` package's imports (torch among them) come before any line of this module."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of stat: start time in clock ticks after boot
        boot = next(
            int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


class Clock:
    """Seconds per kind of work in this process, and wall-clock stamps: the worker's half of the
    throughput bench's phase table (`protocol.Phases`). Diagnostics only; nothing is judged on them."""

    def __init__(self) -> None:
        self.stamps: dict[str, float] = {"started": _STARTED}
        process = _process_started()
        if process is not None:
            self.stamps["process"] = process
        self.seconds: dict[str, float] = {}
        self.open: list[str] = []  # spans in progress, innermost last

    def stamp(self, name: str) -> None:
        self.stamps[name] = time.time()

    def add(self, name: str, seconds: float, *, exclusive: bool = False) -> None:
        """`exclusive`: the seconds belong to `name` alone, so the span they happened in gives them up
        (a Triton compile inside a correctness call is compile time, not correctness time)."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        if exclusive and self.open and self.open[-1] != name:
            outer = self.open[-1]
            self.seconds[outer] = self.seconds.get(outer, 0.0) - seconds

    def timed(self, name: str):
        clock = self

        class _Span:
            def __enter__(self):
                clock.open.append(name)
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                clock.open.pop()
                clock.add(name, time.perf_counter() - self.t0, exclusive=True)

        return _Span()

    def watch_triton(self) -> None:
        """Count the seconds inside Triton's compiler and its launcher/module loading (gcc for the
        launcher stub, cubin load) as `compile`, whichever Triton version is here."""
        try:
            from triton.compiler.compiler import CompiledKernel
            from triton.runtime.jit import JITFunction
        except Exception:
            return
        for owner, name in ((JITFunction, "_do_compile"), (CompiledKernel, "_init_handles")):
            original = getattr(owner, name, None)
            if original is None or getattr(original, "_kscout_clocked", False):
                continue

            def clocked(*args, _original=original, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    CLOCK.add("compile", time.perf_counter() - t0, exclusive=True)

            clocked._kscout_clocked = True  # type: ignore[attr-defined]
            setattr(owner, name, clocked)

    def message(self) -> protocol.Phases:
        return protocol.Phases(stamps=dict(self.stamps), seconds=dict(self.seconds))


CLOCK = Clock()
OUT_DIR = Path(".")  # the worker's out/ folder (its working directory at start), set by main()
FILE_CHUNK = [64 << 20]  # bytes per output file: under the file-size limit, set by main()
SHARE_FD = [-1]  # the shared transport's socket (shared.py), set by main(); -1: none


def warm_up(device: str) -> None:
    """What every request needs, done before the request exists (a warm worker, evaluation/pool.py):
    torch, Triton and the harness's modules imported, and on a GPU the CUDA context made, the
    profiler and dynamo imported and Triton's driver utilities built. No candidate code exists in this
    process yet; the request, and with it the candidate, arrives only afterwards, and the worker still
    runs exactly one request and exits."""
    import torch
    import triton  # noqa: F401

    from evaluation import binding, emulation, guards, inputs, problem, timing  # noqa: F401

    if device == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
        import torch._dynamo  # noqa: F401
        import torch.profiler  # noqa: F401

        try:
            from triton.runtime import driver

            driver.active.utils  # noqa: B018  (builds and loads Triton's CUDA helper module once)
        except Exception:
            pass  # the request will meet the same failure and report it as its own


def import_candidate(path: Path, name: str = "candidate"):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def rebind_sizes(model_cls, params: dict[str, int] | None) -> list[str]:
    """The case's size constants, rebound in the candidate's own module wherever it defines the same
    name as an int, as the harness rebinds them in the problem's: a candidate whose `__init__` reads a
    module-level `batch_size`, as the reference's does, builds at each case's sizes instead of failing
    every case but the shipped one. The values are the case's public sizes (its inputs' shapes show
    them); nothing else in the module is touched. Returns the names rebound."""
    init = getattr(model_cls, "__init__", None)
    names = getattr(init, "__globals__", None)  # the defining module's namespace (not sys.modules[...],
    # which the timing process's candidates, all imported as `candidate`, share)
    if not params or names is None or str(names.get("__name__", "")).startswith("torch"):
        return []
    done = [name for name in params if type(names.get(name)) is int]
    names.update({name: params[name] for name in done})
    return done


def build(
    model_cls,
    problem_module,
    init_seed: int,
    state: dict,
    device: str,
    dtype_name: str,
    params: dict[str, int] | None = None,
):
    """Build a model after the reference's seed and init inputs; give it the reference's weights as far
    as they map (evaluation/binding.py: same keys, else by shape and name), so parameter init order
    cannot matter; cast to the case. `params`: the case's size constants (rebind_sizes). Returns the
    model and how its weights were bound."""
    import torch

    from evaluation import binding, emulation
    from evaluation.problem import init_inputs

    rebind_sizes(model_cls, params)
    torch.manual_seed(init_seed)
    init = init_inputs(problem_module)
    torch.manual_seed(init_seed)
    with emulation.candidate_scope():
        model = model_cls(*init)
        bound = binding.bind(model, state)
        if isinstance(model, torch.nn.Module):
            model = model.to(device=device).to(dtype=getattr(torch, dtype_name)).eval()
    return model, bound


class Worker:
    def __init__(self, channel: protocol.WorkerChannel, request: protocol.WorkerRequest, in_dir: Path):
        import torch

        self.ch, self.req, self.in_dir = channel, request, in_dir
        self.device = request.device
        problem_path = in_dir / request.problem_file
        text = problem_path.read_text()
        if hashlib.sha256(text.encode()).hexdigest() != request.problem_sha256:
            raise Verdict(
                "crashed",
                "compile",
                "ProblemMismatch",
                "the problem file in the scratch folder does not match the request's sha256",
            )
        self.problem_text, self.problem_path = text, problem_path
        self._problems: dict[str, Any] = {}
        self.states = {}
        for case in request.cases:
            if case.state not in self.states:
                self.states[case.state] = torch.load(in_dir / case.state, weights_only=True)
        self.counter = None
        self.snapshot = None
        self.bench = None
        self.seen: dict[str, dict[str, Any]] = {}  # candidate -> hybrid ops, epilogue ops, profiled kernels
        self.sender: Any = None  # the shared transport's slot (shared.Sender), made on the first output

    # -- shared pieces --------------------------------------------------------------------------
    def problem(self, case: protocol.CaseSpec):
        from evaluation.problem import exec_problem_source

        key = protocol.params_key(case.params)
        if key not in self._problems:
            self._problems[key] = exec_problem_source(self.problem_text, self.problem_path, case.params)
        return self._problems[key]

    def inputs(self, pm, case: protocol.CaseSpec, trial: protocol.Trial) -> list[Any]:
        from evaluation.inputs import trial_inputs

        return trial_inputs(pm, case.dtype, trial, self.device)

    def send_outputs(self, out: Any, case: protocol.CaseSpec, phase: str, trial: int = 0, candidate: str = "") -> None:
        header = protocol.Outputs(index=case.index, candidate=candidate, phase=phase, trial=trial)
        if self.req.transport == "shared" and self._send_shared(out, header):
            return
        with CLOCK.timed("to_host"):
            parts, strides = protocol.package_parts(out)
        header = header.model_copy(update=dict(strides=strides))
        with CLOCK.timed("transport"):  # MAC'd writes, and waiting for the parent to read them
            if self.req.transport == "file":
                names, total = protocol.write_output_files(
                    OUT_DIR / protocol.OUTPUT_FILES, self.ch.seq, parts, FILE_CHUNK[0], self.req.file_budget_bytes
                )
                self.ch.send(header.model_copy(update=dict(files=names, nbytes=total)))
            else:
                self.ch.send(header, parts)

    def _send_shared(self, out: Any, header: protocol.Outputs) -> bool:
        """The outputs through this worker's shared slot (shared.py); False: send them by pipe instead
        (no socket, a slot that could not be made, an output over the file-size limit on the host)."""
        from evaluation import shared

        if self.sender is None:
            if SHARE_FD[0] < 0:
                return False
            self.sender = shared.Sender(SHARE_FD[0], self.req.share_memory)
        with CLOCK.timed("transport"):
            head, tensors, total, strides = protocol.package_split(out)
            on_device = any(t.device.type == "cuda" for _, t in tensors)
            if on_device != (self.req.share_memory == "cuda"):
                return False  # an output on the other side of the bus: the pipe's packaging copies it
            if on_device:
                import torch

                torch.cuda.synchronize()  # every stream's work on the outputs is done before the copy
            try:
                slot, token, sequence = self.sender.put(tensors, total)
            except shared.SharedError:
                return False
            update = dict(strides=strides, slot=slot, token=token, sequence=sequence, nbytes=total)
            self.ch.send(header.model_copy(update=update), [head])
        return True

    def make_bench(self):
        from evaluation.timing import Bench, HostBench

        spec = self.req.bench.model_dump()
        return Bench(**spec) if self.device == "cuda" else HostBench(**spec)

    def arm(self) -> None:
        """The same guards, in the same order, in every mode that imports a candidate."""
        import torch

        from evaluation import emulation, inputs, problem, timing  # noqa: F401  (before the snapshot watches them)
        from evaluation.guards import ComputeWatch, HarnessSnapshot, LaunchCounter

        # On a CPU under the interpreter, the candidate sees the target GPU (its CUDA view, its launch
        # limits); a no-op on a real GPU. Installed before the launch counter wraps the same entry points.
        emulation.install(device=self.device)
        CLOCK.watch_triton()
        self.counter = LaunchCounter()
        self.counter.install()
        with ComputeWatch():  # exercise the mode once, so lazy imports it triggers precede the snapshot
            torch.empty(1)
        if self.device == "cuda":
            self.bench = self.make_bench()  # the flush buffer exists in correctness and timing alike
            # The profiler and graph capture import torch._dynamo lazily, and that import rebinds
            # torch.manual_seed: imported here, before the snapshot, the harness never blames a candidate
            # for its own import.
            import torch._dynamo  # noqa: F401
            import torch.profiler  # noqa: F401
        self.snapshot = HarnessSnapshot()
        CLOCK.stamp("armed")

    def check_harness(self, stage: str) -> None:
        changed = self.snapshot.changed()
        if changed:
            raise Verdict("rejected", stage, "PatchedHarness", "the candidate replaced " + ", ".join(changed[:6]))

    def note(self, name: str) -> dict[str, Any]:
        return self.seen.setdefault(
            name, {"hybrid": set(), "epilogue": set(), "profiled": [], "error": None, "work": {}}
        )

    def accounting(self, name: str, launches: int = 0) -> protocol.Accounting:
        seen = self.note(name)
        return protocol.Accounting(
            candidate=name,
            launches=launches,
            torch_epilogue=sorted(seen["epilogue"]),
            hybrid_ops=sorted(seen["hybrid"]),
            profiled=seen["profiled"],
            profiler_error=seen["error"],
            kernels=[protocol.KernelFact(**k) for k in self.counter.kernels.values()],
        )

    def call(
        self,
        model,
        inputs: list[Any],
        where: str,
        stage: str,
        *,
        capturing: bool = False,
        name: str = "",
        case: protocol.CaseSpec | None = None,
    ):
        """One forward, watched; a Verdict for anything but honest Triton work. With `case` (a judged
        trial of the correctness stage) the work rule is followed too, and its finding kept per case."""
        import torch

        from evaluation import emulation
        from evaluation.guards import ComputeWatch, shares_memory

        self.counter.begin()
        params = list(model.parameters()) + list(model.buffers()) if isinstance(model, torch.nn.Module) else []
        judge = case is not None and self.req.mode == "correctness"
        watch = ComputeWatch(
            self.req.allowed_torch_ops,
            self.counter,
            inputs,
            params,
            judge_work=judge,
            atol=case.atol if case is not None else 0.0,
            rtol=case.rtol if case is not None else 0.0,
        )
        try:
            with emulation.candidate_scope(), torch.no_grad(), watch:
                out = model(*inputs)
            if self.device == "cuda" and not capturing:
                torch.cuda.synchronize()  # an illegal memory access surfaces here
        except Verdict:
            raise
        except Exception as exc:
            emulated = emulation.verdict_for(exc)  # a launch the emulated GPU would refuse, named as such
            if emulated is not None:
                raise Verdict(*emulated)
            if capturing:
                raise  # Bench.prepare decides: not capturable is not a failure
            compile_error = self.counter.is_compile_error(exc)
            if compile_error is not None:
                raise Verdict("compile_error", "compile", type(compile_error).__name__, one_line(compile_error))
            raise Verdict("crashed", stage, type(exc).__name__, f"forward raised on {where}: {one_line(exc)}")
        self.check_harness(stage)
        if self.counter.count == 0:
            raise Verdict("rejected", stage, "NoTritonLaunch", f"forward launched no Triton kernel on {where}")
        seen = self.note(name)
        seen["hybrid"] |= watch.hybrid
        seen["epilogue"] |= watch.epilogue
        if judge and case is not None:
            problem = watch.work_problem(out)
            size = sum(t.numel() for t in inputs if isinstance(t, torch.Tensor))
            # A trial whose output holds Triton's work clears its case: on some inputs honest work is a
            # copy (a ReLU after a PyTorch convolution whose outputs a stress trial made all positive).
            if case.index not in seen["work"] or (seen["work"][case.index][1] and not problem):
                seen["work"][case.index] = (size, f"{problem} on {where}" if problem else None)
        items = out if type(out) in (tuple, list) else [out]
        if any(isinstance(t, torch.Tensor) and type(t) is not torch.Tensor for t in items):
            raise Verdict(
                "rejected",
                stage,
                "TensorSubclass",
                f"forward returned a {type(next(t for t in items if type(t) is not torch.Tensor)).__name__} "
                f"on {where}: outputs must be plain torch.Tensor",
            )
        tensors = [t for t in items if isinstance(t, torch.Tensor)]
        if any(t.device.type != self.device for t in tensors):
            raise Verdict("incorrect", stage, "WrongDevice", f"an output is not on {self.device} on {where}")
        if shares_memory(tensors, inputs):
            raise Verdict("rejected", stage, "OutputAliasesInput", f"an output shares memory with an input on {where}")
        return out

    def exercise(self, name: str, model, pm, case: protocol.CaseSpec, stage: str, *, timed: bool):
        """Every call a candidate gets on one case, in correctness and timing alike; returns the stats
        when `timed`. Outputs of every judged call go to the parent as they are made."""
        import torch

        from evaluation.guards import mutated
        from evaluation.inputs import poison_memory

        for t, trial in enumerate(case.trials):
            where = f"{case.case_id} trial {t}"
            try:
                inputs = self.inputs(pm, case, trial)
                pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
            except Exception as exc:  # out of device memory, as a rule: say so, do not just die
                raise Verdict("crashed", stage, type(exc).__name__, f"drawing inputs for {where}: {one_line(exc)}")
            poison_memory(self.device, inputs)
            progress(case.case_id, f"trial {t}")
            with CLOCK.timed("correctness"):
                if t == 0 and self.device == "cuda":  # the kernels of one eager forward, from the profiler
                    out = self.profiled(
                        name, False, lambda xs=inputs: self.call(model, xs, where, stage, name=name, case=case)
                    )
                else:
                    out = self.call(model, inputs, where, stage, name=name, case=case)
            changed = mutated(inputs, pristine)
            if changed:
                raise Verdict("rejected", stage, "MutatedInput", f"forward modified input(s) {changed} on {where}")
            self.send_outputs(out, case, "trial", t, name)
            del out, inputs, pristine
        if not (self.device == "cuda" or timed) or not case.timing_sets or case.check is None:
            return None
        bench = self.bench or self.make_bench()
        with CLOCK.timed("prepare"):
            runner = self.prepare(bench, model, case, stage, name)
        stats = None
        if timed:
            progress(case.case_id, f"timing {name}")
            self.quiet()
            with CLOCK.timed("timing"):
                stats, checks = bench.measure(runner)
            for phase, (set_index, outputs) in checks.items():
                self.send_outputs(outputs, case, phase, set_index, name)
        with CLOCK.timed("correctness"):
            self.send_check(runner, pm, case, stage, name)
        del runner
        return stats

    def quiet(self, stage: str = "timing") -> None:
        """Wait until the parent has judged every output sent so far: its comparisons share the device
        (or, on a CPU, the cores) and must not run while a candidate's samples are taken. A gated
        check or baselines worker waits here for its turn on the device."""
        self.ch.send(protocol.Quiet())
        command = self.ch.read_command()
        if not isinstance(command, protocol.Proceed):
            what = type(command).__name__ if command is not None else "the end of the request pipe"
            raise Verdict("crashed", stage, "ProtocolError", f"waited for the parent's Proceed, got {what}")
        CLOCK.stamp("proceed")

    def prepare(self, bench, model, case: protocol.CaseSpec, stage: str, name: str):
        """The timed call prepared (warm-up, capture), every call of the candidate watched."""
        where = f"{case.case_id} timed call"

        def fn(*xs):
            return self.call(model, list(xs), where, stage, capturing=bench.capturing, name=name)

        pm = self.problem(case)
        return bench.prepare(fn, [self.inputs(pm, case, s) for s in case.timing_sets])

    def profiled(self, name: str, replay: bool, run):
        """`run()` under the profiler; its device kernels are kept for the parent to classify."""
        from evaluation.guards import profile_kernels

        with CLOCK.timed("profiler"):
            out, kernels, error = profile_kernels(run, replay)
        seen = self.note(name)
        seen["profiled"].extend(kernels)
        seen["error"] = seen["error"] or error
        return out

    def send_check(self, runner, pm, case: protocol.CaseSpec, stage: str, name: str) -> None:
        """The prepared call once more, on inputs the candidate's Python never saw; outputs judged."""
        import torch

        from evaluation.guards import mutated

        fresh = self.inputs(pm, case, case.check)
        pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in fresh]
        if self.device == "cuda":  # the kernels the timed call really runs (a graph replay, as a rule)
            out = self.profiled(name, runner.graph is not None, lambda: runner.check(fresh))
        else:
            out = runner.check(fresh)
        if self.device == "cuda":
            torch.cuda.synchronize()
        changed = mutated(runner.static, pristine)
        if changed:
            raise Verdict(
                "rejected", stage, "MutatedInput", f"the timed call modified input(s) {changed} on {case.case_id}"
            )
        self.check_harness(stage)
        self.send_outputs(out, case, "check", 0, name)

    # -- correctness ----------------------------------------------------------------------------
    def correctness(self) -> None:
        from evaluation import emulation

        self.arm()
        entry = self.req.candidates[0]
        try:
            with emulation.candidate_scope():
                module = import_candidate(self.in_dir / entry.folder / protocol.CANDIDATE)
        except Exception as exc:
            raise Verdict("compile_error", "compile", type(exc).__name__, "importing the candidate: " + one_line(exc))
        self.check_harness("compile")
        model_cls = getattr(module, "ModelNew", None)
        if model_cls is None:
            raise Verdict("compile_error", "compile", "MissingModelNew", "the candidate defines no ModelNew")
        if self.req.gated:
            self.compile_pass(entry.name, model_cls)
            CLOCK.stamp("compiled")
            self.quiet("correctness")  # the parent answers once this check holds a GPU lane
        launches, weights = 0, None
        for number, case in enumerate(self.req.cases):
            if number == 1:  # after the first case (so a candidate that kills itself dies in a named case):
                self._launch_checks(model_cls)  # full-size launches the target would refuse, before big cases
            pm = self.problem(case)
            matmul_precision(pm)
            model, bound = self._build(model_cls, pm, case, "correctness")
            weights = weights or bound
            before = self.counter.total
            self.exercise(entry.name, model, pm, case, "correctness", timed=False)
            launches += self.counter.total - before
            del model
            self._free()
        if len(self.req.cases) == 1:
            self._launch_checks(model_cls)
        self._work_rule(entry.name)
        acc = self.accounting(entry.name, launches)
        self.ch.send(
            acc.model_copy(
                update={"emulation": emulation.report() if emulation.installed() else None, "weights": weights}
            )
        )
        self.ch.send(protocol.Done())

    def compile_pass(self, name: str, model_cls) -> None:
        """A gated check: each case's forward once, on its first timing set (inputs a timing warms up
        on unjudged anyway, never a judged trial's), so Triton compiles every kernel the battery will
        launch while other checks hold the device. Nothing here is judged, and a crash here is the
        candidate's, as in any call; the launches are not counted with the battery's."""
        for case in self.req.cases:
            if not case.timing_sets:
                continue
            pm = self.problem(case)
            matmul_precision(pm)
            model, _ = self._build(model_cls, pm, case, "correctness")
            progress(case.case_id, "compile pass")
            try:
                inputs = self.inputs(pm, case, case.timing_sets[0])
            except Exception as exc:  # out of device memory beside other checks, as a rule
                raise Verdict(
                    "crashed", "correctness", type(exc).__name__, f"drawing inputs for {case.case_id}: {one_line(exc)}"
                )
            self.call(model, inputs, f"{case.case_id} compile pass", "correctness", name=name)
            del model, inputs
            self._free()

    def _work_rule(self, name: str) -> None:
        """Refuse a candidate whose Triton kernels did not do the work of the largest case (by input
        elements) on any of its judged trials. Smaller cases may have a dim of size 1, where a legitimate reduction or scan is a
        copy of its input; the largest case has none of that excuse, and a cheat cheats there too."""
        work = self.note(name)["work"]
        if not work:
            return
        largest = max(size for size, _ in work.values())
        problem = next((p for size, p in work.values() if size == largest and p), None)
        if problem is not None:
            raise Verdict(
                "rejected",
                "correctness",
                "TorchCompute",
                f"the Triton kernels did not do the problem's work: {problem}",
            )

    def _launch_checks(self, model_cls) -> None:
        """Each launch case's forward followed at the target's full size on meta tensors (CPU emulation
        only: no kernel runs); a launch over a limit of the target is a verdict."""
        from evaluation import emulation

        if not emulation.installed():
            return
        for lc in self.req.launch_cases:
            dry = emulation.check_launches_at_scale(
                model_cls, self.problem(lc), lc.dtype, lc.case_id, self.req.init_seed
            )
            verdict = emulation.dry_run_verdict(dry)
            if verdict is not None:
                raise Verdict(*verdict)

    def _build(self, model_cls, pm, case: protocol.CaseSpec, stage: str):
        try:
            return build(
                model_cls, pm, self.req.init_seed, self.states[case.state], self.device, case.dtype, case.params
            )
        except Verdict:
            raise
        except Exception as exc:
            from evaluation import emulation

            emulated = emulation.verdict_for(exc)
            if emulated is not None:
                raise Verdict(*emulated)
            raise Verdict(
                "compile_error", "compile", type(exc).__name__, f"building ModelNew for {case.case_id}: {one_line(exc)}"
            )

    def _free(self) -> None:
        if self.device == "cuda":  # workers share one GPU: give each case's blocks back
            import torch

            torch.cuda.empty_cache()

    # -- timing ---------------------------------------------------------------------------------
    def _import_all(self) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
        """Every candidate of the request, each imported as `candidate` from its own candidate.py."""
        from evaluation import emulation

        modules, errors, classes = {}, {}, {}
        for entry in self.req.candidates:
            try:
                with emulation.candidate_scope():
                    modules[entry.name] = import_candidate(self.in_dir / entry.folder / protocol.CANDIDATE)
            except Exception as exc:
                errors[entry.name] = "importing the candidate again: " + one_line(exc)
                classes[entry.name] = type(exc).__name__
        self.check_harness("timing")
        return modules, errors, classes

    def timing(self) -> None:
        """Each candidate on each case: the correctness calls, then the timed samples, then the check.

        Several candidates share one process only after each passed correctness alone; one that
        fails here is recorded against its name and the others go on."""
        self.arm()
        modules, errors, classes = self._import_all()
        for case in self.req.cases:
            pm = self.problem(case)
            matmul_precision(pm)
            for name, module in modules.items():
                if name in errors:
                    continue
                sys.modules["candidate"] = module
                try:
                    model, _ = self._build(module.ModelNew, pm, case, "timing")
                    stats = self.exercise(name, model, pm, case, "timing", timed=True)
                    self.ch.send(protocol.Timed(index=case.index, candidate=name, stats=stats.model_dump()))
                except Verdict as v:
                    errors[name], classes[name] = f"{case.case_id}: {v.message}", v.error_class
                    self.ch.send(
                        protocol.Stop(
                            status=v.status if v.status != "compile_error" else "crashed",
                            stage="timing",
                            error_class=v.error_class,
                            message=f"{case.case_id}: {v.message}",
                            candidate=name,
                        )
                    )
                except Exception as exc:
                    errors[name], classes[name] = f"timing {case.case_id}: {one_line(exc)}", type(exc).__name__
                model = None
                self._free()
        for name in modules:
            if name not in errors:
                self.ch.send(self.accounting(name))
        self.ch.send(protocol.Done(errors=errors, error_classes=classes))

    # -- baselines ------------------------------------------------------------------------------
    def _reference(self, pm, case: protocol.CaseSpec):
        import torch

        from evaluation.problem import init_inputs

        torch.manual_seed(self.req.init_seed)
        init = init_inputs(pm)
        torch.manual_seed(self.req.init_seed)
        ref = pm.Model(*init)
        ref.load_state_dict(self.states[case.state])
        return ref.to(device=self.device).to(dtype=getattr(torch, case.dtype)).eval()

    def _baseline_fn(self, name: str, ref):
        import torch

        if name == "eager":
            return ref
        return torch.compile(ref, dynamic=False, mode=COMPILE_MODES[name])

    def compile_baselines(self) -> dict[int, tuple[Any, dict[str, Any]]]:
        """A gated request: every case's reference and compiled baselines, each called once on one
        timing set (torch.compile compiles on its first call), while the device may still be shared.
        A baseline that fails here fails again when timed, and is recorded then."""
        import torch

        built: dict[int, tuple[Any, dict[str, Any]]] = {}
        for case in self.req.cases:
            pm = self.problem(case)
            matmul_precision(pm)
            progress(case.case_id, "compiling baselines")
            first = self.inputs(pm, case, case.timing_sets[0])
            with torch.no_grad():
                ref = self._reference(pm, case)
                fns: dict[str, Any] = {}
                for name in self.req.baselines:
                    try:
                        with CLOCK.timed(f"baseline:{name}"):
                            fn = self._baseline_fn(name, ref)
                            fn(*first)
                        fns[name] = fn
                    except Exception:
                        pass
            built[case.index] = (ref, fns)
            del first
            self._free()
        return built

    def baselines(self) -> None:
        import torch

        bench = self.make_bench()
        built: dict[int, tuple[Any, dict[str, Any]]] = {}
        if self.req.gated:
            built = self.compile_baselines()
            if self.device == "cuda":
                torch.cuda.synchronize()
            self.quiet()  # the parent lets the samples start once the device is the baselines' alone
        for case in self.req.cases:
            pm = self.problem(case)
            matmul_precision(pm)
            progress(case.case_id, "baselines")
            sets = [self.inputs(pm, case, s) for s in case.timing_sets]
            with torch.no_grad():
                ref, fns = built.pop(case.index, (None, {}))
                ref = ref if ref is not None else self._reference(pm, case)
                outs = ref(*sets[0])  # the byte count comes from the reference, not from a candidate
                outs = outs if isinstance(outs, (tuple, list)) else [outs]
                sizes = dict(
                    input_bytes=sum(t.nbytes for t in sets[0] if isinstance(t, torch.Tensor)),
                    output_bytes=sum(t.nbytes for t in outs if isinstance(t, torch.Tensor)),
                )
                for name in self.req.baselines:
                    try:
                        with CLOCK.timed(f"baseline:{name}"):
                            fn = fns[name] if name in fns else self._baseline_fn(name, ref)
                            stats, _ = bench.measure(bench.prepare(fn, sets))
                        self.ch.send(
                            protocol.Timed(index=case.index, candidate=name, stats=stats.model_dump(), **sizes)
                        )
                    except Exception as exc:  # a baseline that cannot run is recorded, not fatal
                        self.ch.send(protocol.Timed(index=case.index, candidate=name, error=one_line(exc), **sizes))
            del sets, ref, outs
            self._free()
        self.ch.send(protocol.Done())

    # -- remeasure ------------------------------------------------------------------------------
    def remeasure(self) -> None:
        """Prepare every runner of a case, then sample them one round per command from the parent."""
        import torch

        from evaluation.timing import quantile

        if self.req.candidates:
            self.arm()
            modules, errors, _ = self._import_all()
        else:
            modules, errors = {}, {}
        bench = self.bench or self.make_bench()
        for case in self.req.cases:
            pm = self.problem(case)
            matmul_precision(pm)
            progress(case.case_id, "remeasure")
            runners: dict[str, Any] = {}
            case_errors: dict[str, str] = {}
            with torch.no_grad():
                if not self.req.candidates:
                    sets = [self.inputs(pm, case, s) for s in case.timing_sets]
                    ref = self._reference(pm, case)
                    for name in self.req.baselines:
                        try:
                            runners[name] = bench.prepare(self._baseline_fn(name, ref), sets)
                        except Exception as exc:
                            case_errors[name] = one_line(exc)
                for name, module in modules.items():
                    if name in errors:
                        continue
                    sys.modules["candidate"] = module
                    try:
                        model, _ = self._build(module.ModelNew, pm, case, "timing")
                        runners[name] = self.prepare(bench, model, case, "timing", name)
                    except Verdict as v:
                        case_errors[name] = v.message
                    except Exception as exc:
                        case_errors[name] = one_line(exc)
                self.ch.send(
                    protocol.Prepared(
                        index=case.index, methods={n: r.method for n, r in runners.items()}, errors=case_errors
                    )
                )
                while True:
                    command = self.ch.read_command()
                    if command is None or isinstance(command, protocol.NextCase):
                        break
                    if command.index != case.index:
                        raise Verdict(
                            "crashed",
                            "timing",
                            "ProtocolError",
                            f"a round for case {command.index} arrived during case {case.index}",
                        )
                    p50s, round_errors = {}, {}
                    for name, runner in runners.items():
                        if name in case_errors:
                            continue
                        try:
                            samples, _ = bench.sample(runner, self.req.samples_per_round)
                            p50s[name] = quantile(samples, 0.5)
                        except Exception as exc:
                            case_errors[name] = round_errors[name] = one_line(exc)
                    self.ch.send(protocol.RoundResult(index=case.index, p50s_ms=p50s, errors=round_errors))
                if self.req.candidates:
                    self._check_remeasured(pm, case, runners, case_errors)
            del runners
            self._free()
        self.ch.send(protocol.Done(errors=errors))

    def _check_remeasured(self, pm, case, runners, case_errors) -> None:
        """After the rounds: each candidate's prepared call once more on fresh inputs, judged."""
        for name, runner in runners.items():
            if name in case_errors or case.check is None:
                continue
            try:
                self.send_check(runner, pm, case, "timing", name)
            except Verdict as v:
                self.ch.send(
                    protocol.Stop(
                        status="rejected" if v.status == "rejected" else "crashed",
                        stage="timing",
                        error_class=v.error_class,
                        message=v.message,
                        candidate=name,
                    )
                )
            except Exception as exc:
                self.ch.send(
                    protocol.Stop(
                        status="crashed",
                        stage="timing",
                        error_class=type(exc).__name__,
                        message=one_line(exc),
                        candidate=name,
                    )
                )

    def run(self) -> None:
        try:
            self._run_mode()
        finally:
            CLOCK.stamp("finished")
            try:
                self.ch.send(CLOCK.message())
            except OSError:
                pass  # the parent has its verdict and closed the pipe

    def _run_mode(self) -> None:
        mode = self.req.mode
        try:
            {
                "correctness": self.correctness,
                "timing": self.timing,
                "baselines": self.baselines,
                "remeasure": self.remeasure,
            }[mode]()
        except Verdict as v:
            self.ch.send(protocol.Stop(status=v.status, stage=v.stage, error_class=v.error_class, message=v.message))
        except Exception as exc:  # out of device memory drawing a timed case's inputs, as a rule: said by name,
            # so an executor can tell a full GPU from a candidate's fault and check it again alone
            self.ch.send(
                protocol.Stop(
                    status="crashed",
                    stage="correctness" if mode == "correctness" else "timing",
                    error_class=type(exc).__name__,
                    message=one_line(exc),
                )
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m evaluation.worker")
    parser.add_argument("--in-fd", type=int, required=True)
    parser.add_argument("--out-fd", type=int, required=True)
    parser.add_argument("--in-dir", required=True)
    parser.add_argument("--limits", required=True)
    parser.add_argument("--uid", type=int)
    parser.add_argument("--share-fd", type=int, default=-1, help="the shared transport's socket (shared.py)")
    parser.add_argument("--warm", choices=("cpu", "cuda"), help="warm up for this device before the request")
    args = parser.parse_args(argv)
    if args.uid is not None:
        drop_privileges(args.uid)
    limits = protocol.Limits.model_validate_json(args.limits)
    apply_limits(limits)
    global OUT_DIR
    OUT_DIR = Path.cwd()
    if limits.file_size_bytes:
        FILE_CHUNK[0] = max(1 << 16, min(FILE_CHUNK[0], limits.file_size_bytes // 2))
    os.umask(0o077)
    SHARE_FD[0] = args.share_fd
    channel = protocol.WorkerChannel(args.in_fd, args.out_fd)
    CLOCK.stamp("main")
    if args.warm:
        try:
            warm_up(args.warm)
        except Exception as exc:  # before any request, so before any candidate code: the device's doing
            print(f"{protocol.WARM_UP_FAILED} {one_line(exc)}", file=sys.stderr, flush=True)
            leave(protocol.WARM_UP_EXIT)
        CLOCK.stamp("warm")
    try:
        request = channel.read_request()
    except protocol.ProtocolError:
        if args.warm:  # a warm worker nobody needed: the pool closed its pipe
            return
        raise
    CLOCK.stamp("request")
    # timing and gated baselines or checks wait for Proceed (Worker.quiet), remeasure for rounds
    if request.mode not in ("remeasure", "timing") and not request.gated:
        os.close(args.in_fd)  # nothing more comes from the parent; nothing for the candidate to read
    try:
        worker = Worker(channel, request, Path(args.in_dir))
    except Verdict as v:
        channel.send(protocol.Stop(status=v.status, stage=v.stage, error_class=v.error_class, message=v.message))
        return
    worker.run()
    leave()


def leave(code: int = 0) -> None:
    """End the process now that its last message is sent, without the interpreter's teardown: the
    CUDA context, inductor's compile pool and whatever a candidate registered at exit would otherwise
    run for 0.7-1.8 s (H100) while the parent waits for the exit before the next process may start.
    Nothing is left to write: every output and message went out before Done."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    # Re-enter through the package, so the harness's functions live in sys.modules["evaluation.worker"]
    # where the snapshot watches them, not in an unwatched __main__.
    from evaluation import worker as _worker

    _worker.main()
