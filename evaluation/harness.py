"""evaluate(), time_many() and remeasure(): the cascade static_check -> compile -> correctness -> timing.

Every stage that runs candidate code runs it in a fresh worker process, in the OS sandbox where one
can be made (isolation.py): one for all shape cases and trials of the correctness stage, one more for
timing on a GPU. The parent alone writes a verdict: the worker's messages are data it checks (MAC'd
frames, protocol.py), and every output the worker reports, timed calls included, is compared here
against the parent's own reference on inputs the parent chose. Baselines are timed in a process no
candidate ever ran in. Nothing the candidate does raises here; it comes back as a Status with the
stage that failed. Only bad harness input raises (an unknown problem, --device cuda without a GPU,
--sandbox required where no sandbox can be made).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from evaluation import compare, phases, protocol
from evaluation.compare import Comparison
from evaluation.correctness import (
    TIMING_TRIAL_OFFSET,
    CorrectnessRun,
    Judge,
    References,
    check_trial,
    timing_sets,
    trial_plan,
    write_inputs,
)
from evaluation.fingerprint import fingerprint, resolve_device
from evaluation.isolation import (
    TRITON_CACHE,
    Gate,
    Lane,
    Scratch,
    WorkerExit,
    WorkerProcess,
    lane_gate,
    last_progress,
    resolve_sandbox,
    run_worker,
    scratch_root,
    scrub,
    wait_for_gates,
)
from evaluation.problem import load_problem
from evaluation.records import (
    ALL_BASELINES,
    BASELINES,
    Baseline,
    EvalResult,
    KernelInfo,
    ProblemInfo,
    RemeasuredCandidate,
    RemeasuredCase,
    RemeasureResult,
    ShapeCase,
    Stage,
    Status,
    TimedCase,
    TimingStats,
    source_sha256,
)
from evaluation.static_check import check_source
from evaluation.timing import NOT_MEASURED_CPU, quantile, speedup

if TYPE_CHECKING:
    from evaluation.context import SearchContext

# Time the CPU with the host clock. Only tests set this: it runs the timing stage's checks (timed
# outputs judged, baselines in their own process) through the interpreter; the numbers mean nothing.
HOST_TIMING = False
HOST_BENCH = protocol.BenchSpec(budget_s=0.0, min_samples=4, max_samples=4, n_warmup=1)
MAX_AUTOTUNE_CAP_S = float(os.environ.get("KSCOUT_MAX_AUTOTUNE_S", "600"))
BASELINE_TIMEOUT_S = 900.0
# A timed candidate whose achieved bandwidth is this many times the measured copy bandwidth did not
# do what it was timed on (a patched clock, work outside the timed call): the L2 is flushed before
# every sample, so even a cache-friendly kernel stays well under this.
IMPLAUSIBLE_FACTOR = 3.0
IMPLAUSIBLE_MIN_BYTES = 1 << 20


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def _problem(problem: ProblemInfo | str, device: str, overrides: dict[str, int] | None) -> ProblemInfo:
    if isinstance(problem, ProblemInfo):
        if not overrides:
            return problem
        problem = problem.name if problem.builtin else problem.source_path
    return load_problem(problem, device, overrides)


def _death(exit_: WorkerExit, stage: Stage, timeout_s: float) -> dict[str, Any]:
    where = last_progress(exit_.stderr_tail)
    during = f" during {where}" if where else " before its first case"
    start = _warm_up_failure(exit_)
    if start is not None:
        # The worker's own start failed, before its request: no candidate code had run. Not judged, and
        # an out-of-memory class, so an executor checks it again alone once the batch's siblings are done.
        # (A candidate that prints this line and exits 75 itself gains nothing: not judged never passes.)
        return dict(
            status=Status.not_judged,
            failed_stage=stage,
            error_class="OutOfMemoryError" if "out of memory" in start.lower() else "WorkerStart",
            message=f"the worker could not start on the device before the candidate ran: {start}",
        )
    if exit_.timed_out:
        return dict(
            status=Status.timed_out,
            failed_stage=stage,
            error_class="Timeout",
            message=f"the candidate's process ran past the {timeout_s:g} s limit{during} and was killed",
        )
    return dict(
        status=Status.crashed,
        failed_stage=stage,
        error_class=exit_.death_class(),
        message=f"the candidate's process died by {exit_.death()}{during} without reporting",
    )


def _warm_up_failure(exit_: WorkerExit) -> Optional[str]:
    """What a warm worker said when its own start failed (worker.WARM_UP_EXIT), or None."""
    if exit_.timed_out or exit_.returncode != protocol.WARM_UP_EXIT:
        return None
    marks = [line for line in exit_.stderr_tail.splitlines() if line.startswith("[kscout-worker] ")]
    if not marks or not all(line.startswith(protocol.WARM_UP_FAILED) for line in marks):
        return None  # a case had started: candidate code ran, and its death is its own
    return marks[-1][len(protocol.WARM_UP_FAILED) :].strip()[:400]


def _incorrect(run: CorrectnessRun, info: ProblemInfo, exit_: Optional[WorkerExit] = None) -> dict[str, Any]:
    failed = [r for r in run.outcome.shape_results if not r.passed]
    ended = ""
    if run.screened:  # the cheap cases ran first; the larger ones would only have confirmed it
        ended = f" ({len(run.screened)} larger cases not run once a case had failed)"
    elif exit_ is not None:  # judged wrong before the process ran out of time or died
        ended = f" (judged before the process {'ran out of time' if exit_.timed_out else 'ended'})"
    return dict(
        status=Status.incorrect,
        failed_stage=Stage.correctness,
        error_class=run.first_failure_kind(),
        message=f"{len(failed)} of {len(info.shape_cases)} cases failed{ended}; first {failed[0].case_id}: "
        f"{failed[0].message}",
    )


def _interpreter_time(run: CorrectnessRun, info: ProblemInfo, exit_: WorkerExit, timeout_s: float) -> dict[str, Any]:
    """On the CPU, a process that ran out of time after judged progress, every output right: the
    interpreter's speed, not the kernel's fault (a hang makes no progress and stays `timed_out`)."""
    planned = sum(len(p) for p in run.plans.values())
    where = last_progress(exit_.stderr_tail)
    return dict(
        status=Status.not_judged,
        failed_stage=Stage.correctness,
        error_class="InterpreterTime",
        message=f"not judged: the Triton interpreter used the {timeout_s:g} s budget after "
        f"{run.judged_trials()} of {planned} trials ({len(run.outcome.shape_results)} of {len(info.shape_cases)} "
        f"cases) had passed{f', during {where}' if where else ''}; on a CPU this says nothing about the "
        "kernel (give --timeout more, or judge it on a GPU)",
    )


def _forged(exit_: WorkerExit, stage: Stage) -> dict[str, Any]:
    return dict(
        status=Status.rejected,
        failed_stage=stage,
        error_class="ForgedResult",
        message=f"a frame on the worker's result pipe failed verification ({exit_.forged}): "
        "something other than the worker wrote it",
    )


def _stopped(stop: protocol.Stop) -> dict[str, Any]:
    return dict(
        status=Status(stop.status),
        failed_stage=Stage(stop.stage),
        error_class=stop.error_class,
        message=scrub(stop.message),
    )


def output_transport() -> str:
    """How workers send judged outputs ($KSCOUT_OUTPUT_TRANSPORT): `shared` (slots of memory shared
    with the parent, on the GPU where the outputs are: shared.py), `pipe` (MAC'd frames) or `file`
    (files of the worker's own out/ folder named by MAC'd frames; protocol.py). `auto`, the default, is
    `shared` where the platform passes descriptors over Unix sockets, else `pipe`."""
    from evaluation import shared

    value = os.environ.get("KSCOUT_OUTPUT_TRANSPORT", "auto").strip().lower()
    if value not in ("auto", "shared", "pipe", "file"):
        raise ValueError(f"KSCOUT_OUTPUT_TRANSPORT must be auto, shared, pipe or file (got {value!r})")
    if value in ("auto", "shared"):
        return "shared" if shared.available() else "pipe"
    return value


def _with_transport(request: protocol.WorkerRequest, dev: str) -> protocol.WorkerRequest:
    """The request with this process's output transport (a worker falls back to the pipe, output by
    output, where a shared slot cannot be made)."""
    transport = output_transport()
    memory = "cuda" if dev == "cuda" else "host"
    if (request.transport, request.share_memory) == (transport, memory):
        return request
    return request.model_copy(update=dict(transport=transport, share_memory=memory))


def _take_warm(device: str, isolation: str) -> WorkerProcess | None:
    from evaluation import pool

    return pool.take(device, isolation, scratch_root())


def _prestart(device: str, isolation: str, candidates: int, baselines: int) -> None:
    """Warm workers for what this evaluation will need next (a check's worker, a timing's, the
    baselines'), started now so that their imports overlap the work before them."""
    from evaluation import pool

    if candidates:
        pool.reserve(device, isolation, candidates, scratch_root())
    if baselines:
        pool.reserve(device, "none", baselines, scratch_root())


_DRAINED: Any = object()  # a marker in the judging queue: everything before it is judged


class _Pipelined:
    """The parent's judgement of a worker's messages, in arrival order, on a thread of its own: while
    one output is being compared, the next one is already crossing the pipe (the worker would
    otherwise wait for every comparison before it may send again). At most `depth` messages wait, so
    a fast worker cannot fill the parent's memory. Once `on_message` says the verdict is in (True),
    the next `put` returns True and the caller stops the worker."""

    def __init__(self, on_message, heard: dict[str, Any], depth: int = 2, files: Path | None = None):
        """`files`: the worker's outputs folder when its outputs come as files (protocol.py)."""
        import queue

        self.on_message, self.heard, self.files = on_message, heard, files
        self.forged: str | None = None  # output files that are not what their frame declared
        self.queue: "queue.Queue[tuple[protocol.Message, bytes] | None]" = queue.Queue(maxsize=depth)
        self.verdict = False
        self.error: BaseException | None = None
        self.drained = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="kscout-judge", daemon=True)
        self.thread.start()

    def drain(self) -> None:
        """Return once every message put before this call has been judged (or the verdict is in)."""
        self.drained.clear()
        self.queue.put(_DRAINED)  # type: ignore[arg-type]
        while not self.drained.wait(0.5):
            if not self.thread.is_alive():
                return

    def _loop(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if item is _DRAINED:
                self.drained.set()
                continue
            if self.verdict or self.error is not None:
                continue  # the verdict is in: the rest is drained unread
            t0 = time.perf_counter()
            try:
                message, blob = item
                if isinstance(message, protocol.Outputs) and (message.files or message.nbytes) and not message.slot:
                    if self.files is None:
                        raise protocol.ProtocolError("output files on a pipe transport")
                    blob = protocol.read_output_files(self.files, message.files, message.nbytes)
                if self.on_message(message, blob):
                    self.verdict = True
            except protocol.ProtocolError as exc:  # the worker's files changed under its own frame
                self.forged = str(exc)
                self.verdict = True
            except BaseException as exc:  # a harness fault: raised in the caller's thread at close
                self.error = exc
            finally:
                self.heard["parent_s"] += time.perf_counter() - t0

    def put(self, message: protocol.Message, blob: bytes) -> bool:
        if not (self.verdict or self.error is not None):
            self.queue.put((message, blob))
        return self.verdict or self.error is not None

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


def _run(
    request_for,
    device: str,
    timeout_s: float,
    isolation: str,
    on_message,
    *,
    plant: list[Path] | None = None,
    after: Optional[Callable[[Scratch], None]] = None,
    judged_by: Optional[Judge] = None,
    gate: Optional[Gate] = None,
) -> WorkerExit:
    """One worker in its own scratch folder (a warm one from the pool where it keeps some):
    `request_for(scratch, key)` writes its inputs. `plant`: Triton caches copied into a sandboxed
    worker's cache before it starts (context.py); `after(scratch)` runs once it exited, before its
    scratch folder is removed. `judged_by`: the run's Judge, whose waiting and judging times the
    throughput benchmark's rows split the parent's time by. `gate`: holds the worker at its Quiet
    barrier until opened (isolation.Gate)."""
    warm = _take_warm(device, isolation)
    scratch = warm.scratch if warm is not None else Scratch.make(scratch_root())
    heard: dict[str, Any] = {"parent_s": 0.0}
    transport = output_transport()
    judge = _Pipelined(
        on_message, heard, files=scratch.out_dir / protocol.OUTPUT_FILES if transport == "file" else None
    )

    def hear(message: protocol.Message, blob: bytes) -> bool:
        if isinstance(message, protocol.Phases):
            heard["worker"] = message
            return False
        if isinstance(message, protocol.Quiet):  # timed samples next: no judging kernel beside them
            judge.drain()
            return False
        return judge.put(message, blob)

    try:
        key = protocol.new_key()
        t0 = time.time()
        request = _with_transport(request_for(scratch, key), device)
        heard["inputs_s"] = time.time() - t0
        if plant and isolation == "bwrap":
            from evaluation.context import plant_kernels

            heard["planted"] = plant_kernels(plant, scratch.out_dir / TRITON_CACHE)
        extra: dict[str, Any] = {"worker": warm} if warm is not None else {}
        if gate is not None:
            extra["gate"] = gate
        try:
            exit_ = run_worker(
                scratch, device, timeout_s, request, key=key, isolation=isolation, on_message=hear, **extra
            )
        finally:
            judge.close()  # every message that arrived is judged before the caller reads the outcome
        if judge.forged is not None and exit_.forged is None:
            exit_ = dataclasses.replace(exit_, forged=judge.forged)
        if after is not None:
            after(scratch)
        if phases.active():
            phases.record(
                dict(
                    role=request.mode,
                    warm=warm is not None,
                    candidates=len(request.candidates),
                    cases=len(request.cases),
                    parent_inputs_s=heard["inputs_s"],
                    parent_judge_s=heard["parent_s"],
                    parent_wait_s=judged_by.waited_s if judged_by is not None else None,
                    parent_compare_s=judged_by.judged_s if judged_by is not None else None,
                    judge_paths=dict(compare.PATHS),  # this process's comparisons so far, by path
                    planted=heard.get("planted", 0),
                    gate_s=gate.held_s if gate is not None else None,
                    spawned_at=warm.spawned_at if warm is not None else None,
                    exited_at=time.time(),
                    wall_s=exit_.wall_s,
                    worker=heard["worker"].model_dump() if "worker" in heard else None,
                )
            )
        return exit_
    finally:
        scratch.cleanup()


def _times_here(dev: str) -> bool:
    return dev != "cpu" or HOST_TIMING


def evaluate(
    source: str,
    problem: ProblemInfo | str,
    *,
    device: str = "auto",
    timeout_s: float = 120.0,
    trials: int = 3,
    time_it: bool = True,
    overrides: dict[str, int] | None = None,
    seed: int | None = None,
    baselines: tuple[str, ...] = BASELINES,
    sandbox: str | None = None,
    context: "SearchContext | None" = None,
    lane: Optional[Lane] = None,
) -> EvalResult:
    """Judge one candidate. `seed` fixes the trial inputs (recorded in the result either way);
    `baselines` are those timed next to it (eager always: speedups are against it); `sandbox` is
    auto | required | off (None: $KSCOUT_SANDBOX, else auto). `context`: the search this evaluation
    belongs to (its seed, references, baselines and compiled kernels; evaluation/context.py).
    `lane` (a GPU check, time_it False): the device turn the check waits for once the worker has
    compiled the candidate's kernels (a gated request, isolation.lane_gate); held to the check's end."""
    started, t0 = _now(), time.monotonic()
    dev = resolve_device(device)
    info = _problem(problem, dev, overrides)
    if trials < 1:
        raise ValueError("trials must be >= 1")
    isolation = resolve_sandbox(sandbox, dev)
    seed = _seed(seed, context)
    if _times_here(dev) and dev != "cpu":
        _prestart(dev, isolation, 2 if time_it else 1, 1 if time_it else 0)
    base = dict(
        candidate_sha256=source_sha256(source),
        problem_id=info.problem_id,
        problem_name=info.name,
        device=dev,
        fingerprint=fingerprint(dev),
        started_at=started,
        isolation=isolation,
    )

    seen: dict[str, protocol.Accounting] = {}  # the worker's accounting, once it arrived

    def finish(**fields) -> EvalResult:
        from evaluation import approximations, binding

        if fields.get("message"):
            fields["message"] = scrub(fields["message"])
        acc = seen.get("accounting")
        emu = acc.emulation if acc is not None else None
        if emu is not None and emu.emulated:
            fields.setdefault("emulated_device", f"{emu.device_name} ({emu.arch})")
        result = EvalResult(**base, duration_s=time.monotonic() - t0, **fields)
        result = binding.annotate(result, acc.weights if acc is not None else None)
        return approximations.annotate(result, source, info)  # the policy that judged it, approximations

    report = check_source(source, Path(info.source_path).stem)
    if report.syntax_error:
        return finish(
            status=Status.compile_error,
            failed_stage=Stage.static_check,
            error_class="SyntaxError",
            message=f"syntax error at {report.syntax_error}",
        )
    if not report.has_model_new:
        return finish(
            status=Status.compile_error,
            failed_stage=Stage.static_check,
            error_class="MissingModelNew",
            message="the candidate defines no ModelNew (KernelBench contract: class ModelNew(nn.Module))",
        )
    if report.findings:
        first = report.findings[0]
        more = f" (+{len(report.findings) - 1} more)" if len(report.findings) > 1 else ""
        return finish(
            status=Status.rejected,
            failed_stage=Stage.static_check,
            error_class=first.rule,
            message=first.describe() + more,
        )

    if context is None and time_it and dev != "cpu" and overrides is None:
        # One evaluation on a GPU is a search of one: its own context carries the compiled kernels
        # from the check into the timing process (2-4 s of Triton compile on an H200), as a search's does.
        from evaluation.context import SearchContext

        with SearchContext(seed, scratch_root=scratch_root()) as own:
            return evaluate(
                source,
                info,
                device=dev,
                timeout_s=timeout_s,
                trials=trials,
                time_it=time_it,
                baselines=baselines,
                sandbox=sandbox,
                context=own,
            ).model_copy(update=dict(started_at=started, duration_s=time.monotonic() - t0))
    refs = context.references(info, dev) if context is not None and overrides is None else None
    if refs is not None and context is not None and _times_here(dev):
        _start_early_baselines(info, dev, seed, refs, baselines, timeout_s, context)
    run = CorrectnessRun(source, info, dev, trials, seed, refs=refs, budget_s=timeout_s)
    sha = source_sha256(source)
    keep = None
    if context is not None and isolation == "bwrap":
        keep = lambda scratch: context.stash_kernels(sha, scratch.out_dir / TRITON_CACHE)  # noqa: E731
    if lane is not None and not time_it:  # executors pass one on a GPU only
        with lane_gate(lane) as gate:
            exit_ = _run(
                lambda scratch, key: run.request(scratch, key).model_copy(update=dict(gated=True)),
                dev,
                timeout_s,
                isolation,
                run.on_message,
                after=keep,
                judged_by=run.judge,
                gate=gate,
            )
    else:
        exit_ = _run(run.request, dev, timeout_s, isolation, run.on_message, after=keep, judged_by=run.judge)
    result = _judged(run, exit_, info, dev, timeout_s, finish, seen)
    if context is not None and not result.passed:
        context.drop_kernels(sha)
    if not result.passed or not _times_here(dev) or not time_it:
        return result
    return time_many(
        [(source, result)],
        info,
        device=dev,
        timeout_s=timeout_s,
        baselines=baselines,
        seed=seed,
        sandbox=sandbox,
        trials=trials,
        context=context,
    )[0]


def _seed(seed: int | None, context: "SearchContext | None") -> int:
    if context is not None:
        if seed is not None and seed != context.seed:
            raise ValueError("an evaluation in a search context uses the context's seed")
        return context.seed
    return secrets.randbelow(2**31 - 10**5) if seed is None else seed


def _judged(
    run: CorrectnessRun,
    exit_: WorkerExit,
    info: ProblemInfo,
    dev: str,
    timeout_s: float,
    finish: Callable[..., EvalResult],
    seen: dict[str, protocol.Accounting],
) -> EvalResult:
    """The correctness stage's verdict from what the parent judged and how the worker ended
    (`seen` gets the worker's accounting, which `finish` reads)."""
    position = {c.case_id: i for i, c in enumerate(info.shape_cases)}  # results in the declared order
    ordered = lambda: tuple(sorted(run.outcome.shape_results, key=lambda r: position.get(r.case_id, 0)))  # noqa: E731
    common = dict(shape_results=ordered(), seeds=tuple(run.seeds), stderr_tail=exit_.stderr_tail)
    out = run.outcome
    if exit_.forged:
        return finish(**_forged(exit_, Stage.correctness), **common)
    if out.status is not None:  # the parent refused what it was sent
        return finish(
            status=out.status, failed_stage=out.stage, error_class=out.error_class, message=out.message, **common
        )
    if run.stop is not None:
        return finish(**_stopped(run.stop), **common)
    if exit_.timed_out or not run.done:
        partial = run.failing_partial()
        if partial is not None:  # a wrong output is wrong, however the process ended afterwards
            run.outcome.shape_results.append(run._shape_result(partial[0]))
            common["shape_results"] = ordered()
        if any(not r.passed for r in run.outcome.shape_results):
            return finish(**_incorrect(run, info, exit_), **common)
        if exit_.timed_out and dev == "cpu" and run.judged_trials():
            return finish(**_interpreter_time(run, info, exit_, timeout_s), **common)
        return finish(**_death(exit_, Stage.correctness, timeout_s), **common)
    acc = run.accounting
    if acc is not None:
        seen["accounting"] = acc
    refused, hybrid, fraction = run.accounted(Stage.correctness)
    if acc is not None:
        common.update(
            kernels=tuple(KernelInfo(**k.model_dump()) for k in acc.kernels),
            triton_launches=acc.launches,
            torch_epilogue=tuple(acc.torch_epilogue),
            hybrid_ops=tuple(sorted(hybrid)),
            hybrid_device_fraction=fraction,
            accounting_note=f"profiler unavailable: {acc.profiler_error}" if acc.profiler_error else None,
        )
    if refused is not None:
        return finish(**refused, **common)
    if len(run.outcome.shape_results) != len(info.shape_cases):
        missing = len(info.shape_cases) - len(run.outcome.shape_results)
        return finish(
            status=Status.crashed,
            failed_stage=Stage.correctness,
            error_class="ProtocolError",
            message=f"the worker reported success but {missing} case results never arrived",
            **common,
        )
    if any(not r.passed for r in run.outcome.shape_results):
        return finish(**_incorrect(run, info), **common)
    if not _times_here(dev):
        return finish(status=Status.passed, timing_note=NOT_MEASURED_CPU, **common)
    return finish(status=Status.passed, timing_note="timing not requested", **common)


def timed_cases(info: ProblemInfo) -> list[tuple[int, ShapeCase]]:
    tagged = [(i, c) for i, c in enumerate(info.shape_cases) if "timed" in c.tags]
    return tagged or list(enumerate(info.shape_cases))


def _check_baselines(baselines: tuple[str, ...]) -> None:
    if "eager" not in baselines or set(baselines) - set(ALL_BASELINES):
        raise ValueError(f"baselines must include 'eager' and be among {ALL_BASELINES} (got {baselines})")


@dataclass
class _CandidateTiming:
    """What the parent learned about one candidate in a timing process."""

    stats: dict[int, TimingStats] = field(default_factory=dict)
    wrong: Optional[dict[str, Any]] = None  # the first timed output that failed its comparison
    accounting: Optional[protocol.Accounting] = None
    stop: Optional[protocol.Stop] = None
    error: Optional[str] = None
    error_class: Optional[str] = None
    launches: int = 0


class TimedRun:
    """The parent's half of one timing process: its request, and the judgement of every output."""

    def __init__(
        self,
        info: ProblemInfo,
        dev: str,
        seed: int,
        refs: References,
        trials: int,
        names: list[str],
        sources: list[str],
    ):
        self.info, self.dev, self.seed, self.refs = info, dev, seed, refs
        self.judge = Judge(refs, dev)
        self.names, self.sources = names, sources
        self.cases = timed_cases(info)
        self.trials = {index: trial_plan(refs, case, seed + TIMING_TRIAL_OFFSET, trials) for index, case in self.cases}
        self.sets = timing_sets(seed)
        self.checks = {index: check_trial(seed, index) for index, _ in self.cases}
        self.per: dict[str, _CandidateTiming] = {n: _CandidateTiming() for n in names}
        self.stop: protocol.Stop | None = None
        self.done: protocol.Done | None = None

    def request(self, scratch: Scratch, key: bytes) -> protocol.WorkerRequest:
        folders = [(f"c{i}", src) for i, src in enumerate(self.sources)]
        problem_file, states = write_inputs(scratch.in_dir, self.refs, self.cases, folders)
        return protocol.WorkerRequest(
            mode="timing",
            key=key.hex(),
            device=self.dev,
            problem_file=problem_file,
            problem_sha256=self.info.source_sha256,
            init_seed=self.seed,
            cases=self.specs(states),
            candidates=[protocol.CandidateSpec(name=n, folder=f"c{i}") for i, n in enumerate(self.names)],
            bench=HOST_BENCH if self.dev == "cpu" else protocol.BenchSpec(),
            allowed_torch_ops=self.refs.allowed_torch_ops(),
        )

    def specs(self, states: dict[int, str]) -> list[protocol.CaseSpec]:
        return [
            protocol.CaseSpec(
                index=index,
                case_id=case.case_id,
                params=case.params,
                dtype=case.dtype,
                state=states[index],
                trials=self.trials[index],
                timing_sets=self.sets,
                check=self.checks[index],
            )
            for index, case in self.cases
        ]

    def on_message(self, message: protocol.Message, blob: bytes) -> bool:
        if isinstance(message, protocol.Outputs):
            mine = self.per.get(message.candidate)
            if mine is None or mine.wrong is not None:
                return False
            case = self.info.shape_cases[message.index]
            trial = {
                "trial": lambda: self.trials[message.index][message.trial],
                "check": lambda: self.checks[message.index],
                "first": lambda: self.sets[message.trial],
                "last": lambda: self.sets[message.trial],
            }[message.phase]()
            verdict = self.judge.judge(case, trial, blob, message.strides)
            if not verdict.passed:
                mine.wrong = self._wrong(case, message.phase, trial, verdict)
        elif isinstance(message, protocol.Accounting):
            if message.candidate in self.per:
                self.per[message.candidate].accounting = message
        elif isinstance(message, protocol.Timed):
            if message.candidate in self.per and message.stats is not None:
                self.per[message.candidate].stats[message.index] = TimingStats(**message.stats.model_dump())
        elif isinstance(message, protocol.Stop):
            if message.candidate in self.per:
                self.per[message.candidate].stop = message
            else:
                self.stop = message
        elif isinstance(message, protocol.Done):
            self.done = message
            for name, error in message.errors.items():
                if name in self.per:
                    self.per[name].error = error
                    self.per[name].error_class = message.error_classes.get(name, "TimingError")
        return False

    @staticmethod
    def _wrong(case: ShapeCase, phase: str, trial: protocol.Trial, verdict: Comparison) -> dict[str, Any]:
        what = {
            "trial": "a correctness call in the timing process",
            "first": "the first timed call",
            "last": "the last timed call",
            "check": "the timed call re-run on fresh inputs",
        }[phase]
        return dict(
            status=Status.incorrect,
            failed_stage=Stage.timing,
            error_class=verdict.kind,
            message=f"{case.case_id}: {what} (seed {trial.seed}) was wrong: {verdict.message}",
        )


def _baseline_request(
    info: ProblemInfo,
    dev: str,
    seed: int,
    refs: References,
    names: list[str],
    mode: str = "baselines",
    gated: bool = False,
):
    cases = timed_cases(info)

    def request_for(scratch: Scratch, key: bytes) -> protocol.WorkerRequest:
        problem_file, states = write_inputs(scratch.in_dir, refs, cases, [])
        specs = [
            protocol.CaseSpec(
                index=index,
                case_id=case.case_id,
                params=case.params,
                dtype=case.dtype,
                state=states[index],
                trials=[],
                timing_sets=timing_sets(seed),
            )
            for index, case in cases
        ]
        return protocol.WorkerRequest(
            mode=mode,
            key=key.hex(),
            device=dev,
            problem_file=problem_file,
            problem_sha256=info.source_sha256,
            init_seed=seed,
            cases=specs,
            baselines=names,
            bench=HOST_BENCH if dev == "cpu" else protocol.BenchSpec(),
            gated=gated,
        )

    return request_for


def _time_baselines(
    info: ProblemInfo,
    dev: str,
    seed: int,
    refs: References,
    baselines: tuple[str, ...],
    timeout_s: float,
    gate: Optional[Gate] = None,
) -> tuple[dict[int, dict[str, Baseline]], dict[int, tuple[int, int]]]:
    """Every baseline of every timed case, in processes that never ran a candidate. max-autotune runs
    alone under its own cap; a baseline that fails or times out is recorded with its error. `gate`:
    the first process compiles everything, then waits at its barrier until the gate opens."""
    measured: dict[int, dict[str, Baseline]] = {}
    sizes: dict[int, tuple[int, int]] = {}

    def collect(message: protocol.Message, blob: bytes) -> bool:
        if isinstance(message, protocol.Timed):
            stats = TimingStats(**message.stats.model_dump()) if message.stats is not None else None
            measured.setdefault(message.index, {})[message.candidate] = Baseline(
                name=message.candidate, timing=stats, error=message.error
            )
            sizes[message.index] = (message.input_bytes, message.output_bytes)
        return False

    groups = [[b for b in baselines if b != "torch_compile_max_autotune"]]
    if "torch_compile_max_autotune" in baselines:
        groups.append(["torch_compile_max_autotune"])
    for names in groups:
        cap = MAX_AUTOTUNE_CAP_S if names == ["torch_compile_max_autotune"] else max(timeout_s, BASELINE_TIMEOUT_S)
        held, gate = gate, None  # only the first process waits at the gate
        request = _baseline_request(info, dev, seed, refs, names, gated=held is not None)
        exit_ = _run(request, dev, cap, "none", collect, gate=held)
        for index, _ in timed_cases(info):
            for name in names:
                if name not in measured.get(index, {}):
                    why = (
                        f"did not finish within {cap:g} s"
                        if exit_.timed_out
                        else f"the baseline process died by {exit_.death()}"
                    )
                    measured.setdefault(index, {})[name] = Baseline(name=name, error=why)
    return measured, sizes


def _start_early_baselines(
    info: ProblemInfo,
    dev: str,
    seed: int,
    refs: References,
    baselines: tuple[str, ...],
    timeout_s: float,
    context: "SearchContext",
) -> None:
    """Start the baseline process of a search's first timing now, beside the checks: torch.compile of
    the reference compiles on the CPU (12 s for softmax on an H100) while the candidates are checked,
    and the process then waits at its gate. The timing opens it once the candidates' samples are
    taken, so the baselines are still timed with the device to themselves. max-autotune, under its
    own cap, keeps its own process."""
    names = tuple(b for b in baselines if b != "torch_compile_max_autotune")
    indices = [index for index, _ in timed_cases(info)]
    if not names or not indices:
        return
    _, _, missing = context.measured(info, dev, names, indices, count=False)
    if missing:
        context.start_early_baselines(
            info, dev, lambda gate: _time_baselines(info, dev, seed, refs, tuple(missing), timeout_s, gate=gate)
        )


def _baselines_for(
    info: ProblemInfo,
    dev: str,
    seed: int,
    refs: References,
    baselines: tuple[str, ...],
    timeout_s: float,
    context: "SearchContext | None",
) -> tuple[dict[int, dict[str, Baseline]], dict[int, tuple[int, int]]]:
    """The baselines of every timed case: from the search's context where it timed them already (same
    seed, same input sets), the rest timed now and remembered there."""
    if context is None:
        return _time_baselines(info, dev, seed, refs, baselines, timeout_s)
    indices = [index for index, _ in timed_cases(info)]
    early = context.early_baselines(info, dev)
    got = early.take() if early is not None else None  # compiled beside the checks, timed now, alone
    if got is not None:
        context.remember(info, dev, *got)
    measured, sizes, missing = context.measured(info, dev, baselines, indices, count=got is None)
    if missing:
        fresh, fresh_sizes = _time_baselines(info, dev, seed, refs, tuple(missing), timeout_s)
        context.remember(info, dev, fresh, fresh_sizes)
        for index, by_name in fresh.items():
            measured.setdefault(index, {}).update(by_name)
        sizes.update(fresh_sizes)
    return measured, sizes


def time_many(
    items: list[tuple[str, EvalResult]],
    problem: ProblemInfo | str,
    *,
    device: str = "auto",
    timeout_s: float = 120.0,
    baselines: tuple[str, ...] = BASELINES,
    seed: int | None = None,
    sandbox: str | None = None,
    trials: int | None = None,
    context: "SearchContext | None" = None,
) -> list[EvalResult]:
    """Time candidates that passed correctness (`evaluate(..., time_it=False)`), all in one process.

    Siblings are timed on the same input sets against one measurement of each baseline per case; the
    baselines are measured in their own process, which no candidate ever ran in. Every timed
    candidate's outputs are judged here: the correctness calls it gets again, the first and last timed
    call, and the timed call re-run on fresh inputs; a wrong one makes the candidate `incorrect` at
    stage `timing`. Items that did not pass, and everything on the CPU, come back unchanged. If the
    shared process dies or reports anything but success, each candidate is timed again alone, so one
    bad candidate cannot take its siblings' numbers with it and gets its own status.
    """
    dev = resolve_device(device)
    info = _problem(problem, dev, None)
    _check_baselines(baselines)
    out = [r for _, r in items]
    todo = [i for i, (_, r) in enumerate(items) if r.passed and _times_here(dev)]
    if not todo:
        return out
    isolation = resolve_sandbox(sandbox, dev)
    seed = _seed(seed, context)
    if trials is None:
        trials = max((r.trials for i in todo for r in items[i][1].shape_results), default=1)
        trials = min(trials, 3)
    refs = context.references(info, dev) if context is not None else References(info, dev, seed)
    t0 = time.monotonic()
    sources = [items[i][0] for i in todo]
    kernels = (lambda srcs: context.kernels([source_sha256(x) for x in srcs])) if context else (lambda srcs: [])
    wait_for_gates(BASELINE_TIMEOUT_S)  # no early baseline process still compiling beside the samples
    timed = _time_batch(sources, info, dev, seed, refs, trials, timeout_s * len(todo), isolation, kernels(sources))
    if timed is None:  # the shared process failed: one process each, so the culprit gets its own status
        timed = [
            _time_batch([s], info, dev, seed, refs, trials, timeout_s, isolation, kernels([s]))[0] for s in sources
        ]
    if any(f["status"] is Status.passed for f in timed):
        measured, sizes = _baselines_for(info, dev, seed, refs, baselines, timeout_s, context)
    else:
        measured, sizes = {}, {}
    elapsed = (time.monotonic() - t0) / len(todo)
    fp = fingerprint(dev)
    ceiling = None
    if dev != "cpu":
        from evaluation.ceiling import copy_ceiling_gbps

        ceiling = copy_ceiling_gbps(fp.device_name, fp.driver_version)
    notes = [] if set(baselines) == set(BASELINES) else [f"baselines timed: {', '.join(baselines)}"]
    if info.float32_matmul_precision == "high" and any(c.dtype == "float32" for _, c in timed_cases(info)):
        notes.append("float32 baselines ran with TF32 matmuls, as the problem's tolerance admits")
    if dev == "cpu":
        notes.append("host clock through the Triton interpreter (a test of the timing stage's checks, not a speed)")
    for i, fields in zip(todo, timed):
        prior = items[i][1]
        if fields["status"] is Status.passed:
            fields = _assemble(info, refs, fields.pop("stats"), measured, sizes, baselines, ceiling)
        fields.setdefault("isolation", isolation)
        out[i] = prior.model_copy(
            update=dict(
                duration_s=prior.duration_s + elapsed,
                timing_note="; ".join(notes) or None,
                stderr_tail=fields.pop("stderr_tail", prior.stderr_tail),
                **fields,
            )
        )
    return out


def _time_batch(
    sources: list[str],
    info: ProblemInfo,
    dev: str,
    seed: int,
    refs: References,
    trials: int,
    timeout_s: float,
    isolation: str,
    kernels: list[Path] | None = None,
) -> list[dict] | None:
    """One timing process for `sources`: per source, the fields to update its EvalResult with (with the
    raw "stats" of a passing one). None when the process failed as a whole with several sources (the
    caller retries each alone); with a single source, that failure is the source's own status."""
    names = [str(i) for i in range(len(sources))]
    run = TimedRun(info, dev, seed, refs, trials, names, sources)
    exit_ = _run(run.request, dev, timeout_s, isolation, run.on_message, plant=kernels, judged_by=run.judge)
    whole = None
    if exit_.forged:
        whole = _forged(exit_, Stage.timing)
    elif run.stop is not None:
        whole = _stopped(run.stop)
    elif exit_.timed_out or run.done is None:
        whole = _death(exit_, Stage.timing, timeout_s)
    if whole is not None:
        if len(sources) > 1:
            return None
        whole["failed_stage"] = Stage.timing
        return [dict(whole, stderr_tail=exit_.stderr_tail)]
    from evaluation.accounting import classify, triton_functions

    results = []
    for name, source in zip(names, sources):
        mine = run.per[name]
        acc = mine.accounting
        foreign = None
        if acc is not None:
            foreign = classify(
                acc.profiled, triton_functions(source), refs.allowed_torch_ops(), acc.torch_epilogue, acc.hybrid_ops
            )
        if mine.wrong is not None:
            results.append(mine.wrong)
        elif foreign is not None and foreign.foreign:
            results.append(
                dict(
                    status=Status.rejected,
                    failed_stage=Stage.timing,
                    error_class="TorchCompute",
                    message=foreign.message("the timed call"),
                )
            )
        elif mine.stop is not None:
            results.append(_stopped(mine.stop))
        elif mine.error is not None:
            results.append(
                dict(
                    status=Status.crashed,
                    failed_stage=Stage.timing,
                    error_class=mine.error_class,
                    message=scrub(mine.error),
                )
            )
        elif set(mine.stats) != {index for index, _ in run.cases}:
            results.append(
                dict(
                    status=Status.crashed,
                    failed_stage=Stage.timing,
                    error_class="ProtocolError",
                    message="the timing process finished without timing every case",
                )
            )
        else:
            results.append(dict(status=Status.passed, stats=mine.stats))
    return results


def _assemble(
    info: ProblemInfo,
    refs: References,
    stats: dict[int, TimingStats],
    measured: dict[int, dict[str, Baseline]],
    sizes: dict[int, tuple[int, int]],
    baselines: tuple[str, ...],
    ceiling: float | None,
) -> dict[str, Any]:
    timed = []
    for index, case in timed_cases(info):
        bl = tuple(measured.get(index, {}).get(name, Baseline(name=name, error="not measured")) for name in baselines)
        tc = _timed_case(case, refs.module(case.params), sizes.get(index, (0, 0)), stats[index], bl, ceiling)
        if ceiling and tc.bytes_moved >= IMPLAUSIBLE_MIN_BYTES and tc.achieved_gbps > IMPLAUSIBLE_FACTOR * ceiling:
            return dict(
                status=Status.rejected,
                failed_stage=Stage.timing,
                error_class="ImplausibleTiming",
                message=f"{case.case_id}: timed at {tc.achieved_gbps:.0f} GB/s, {tc.achieved_gbps / ceiling:.1f}x "
                f"the device's measured copy bandwidth ({ceiling:.0f} GB/s): the timed call did not "
                "do the work",
            )
        timed.append(tc)
    return dict(status=Status.passed, timing=tuple(timed), ceiling_gbps=ceiling)


def _timed_case(
    case: ShapeCase,
    module,
    sizes: tuple[int, int],
    cand: TimingStats,
    baselines: tuple[Baseline, ...],
    ceiling: float | None,
) -> TimedCase:
    import torch

    itemsize = torch.empty((), dtype=getattr(torch, case.dtype)).element_size()
    byte_model = getattr(module, "bytes_moved", None)
    flop_model = getattr(module, "flops", None)
    nbytes = int(byte_model(case.params, itemsize)) if callable(byte_model) else sizes[0] + sizes[1]
    flops = int(flop_model(case.params)) if callable(flop_model) else None
    seconds = cand.latency_ms_p50 * 1e-3
    gbps = nbytes / seconds / 1e9
    return TimedCase(
        case_id=case.case_id,
        params=case.params,
        dtype=case.dtype,
        candidate=cand,
        baselines=baselines,
        speedups=tuple(speedup(b.name, b.timing, cand) for b in baselines if b.timing is not None),
        bytes_moved=nbytes,
        flops=flops,
        achieved_gbps=gbps,
        achieved_tflops=flops / seconds / 1e12 if flops else None,
        pct_of_ceiling=100.0 * gbps / ceiling if ceiling else None,
    )


# -- remeasure ------------------------------------------------------------------------------------


class _Remeasure:
    """Two workers, one with the candidates (sandboxed) and one with the baselines (no candidate code),
    driven round by round from here so that drift hits both alike."""

    def __init__(
        self, info, dev, seed, refs, names, sources, baselines, rounds, per_round, timeout_s, isolation, kernels=()
    ):
        self.info, self.dev, self.rounds, self.timeout_s = info, dev, rounds, timeout_s
        self.run = TimedRun(info, dev, seed, refs, 1, names, sources)
        warm_cand, warm_base = _take_warm(dev, isolation), _take_warm(dev, "none")
        self.cand_scratch = warm_cand.scratch if warm_cand is not None else Scratch.make(scratch_root())
        self.base_scratch = warm_base.scratch if warm_base is not None else Scratch.make(scratch_root())
        ck, bk = protocol.new_key(), protocol.new_key()
        timing_req = self.run.request(self.cand_scratch, ck)
        cand_req = timing_req.model_copy(
            update=dict(
                mode="remeasure",
                samples_per_round=per_round,
                cases=[c.model_copy(update=dict(trials=[])) for c in timing_req.cases],
            )
        )
        base_req = _baseline_request(info, dev, seed, refs, list(baselines), "remeasure")(self.base_scratch, bk)
        base_req = base_req.model_copy(update=dict(samples_per_round=per_round))
        cand_req = _with_transport(cand_req, dev)
        if kernels and isolation == "bwrap":
            from evaluation.context import plant_kernels

            plant_kernels(list(kernels), self.cand_scratch.out_dir / TRITON_CACHE)
        self.cand = warm_cand or WorkerProcess(self.cand_scratch, dev, key=ck, isolation=isolation, timeout_s=timeout_s)
        self.base = warm_base or WorkerProcess(self.base_scratch, dev, key=bk, isolation="none", timeout_s=timeout_s)
        self.cand.timeout_s = self.base.timeout_s = timeout_s
        self.cand.start(cand_req)
        self.base.start(base_req)
        self.prepared: dict[tuple[str, int], protocol.Prepared] = {}
        self.rounds_seen: dict[tuple[str, int], list[protocol.RoundResult]] = {}
        self.base_done = False
        self.started = time.monotonic()

    def _pump(self, which: str, until) -> bool:
        """Read `which` worker's messages until `until()` holds; False if it died, forged or ran late."""
        worker = self.cand if which == "cand" else self.base
        quiet_since = None
        while not until():
            if time.monotonic() - self.started > self.timeout_s:
                return False
            got = worker.receive(0.05)
            if got is None:
                if worker.forged is not None or worker.eof:
                    return False
                if not worker.alive():  # exited: whatever it wrote arrives within a moment, or never
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 0.5:
                        return False
                continue
            message, blob = got
            if which == "cand":
                self.run.on_message(message, blob)
            elif isinstance(message, protocol.Done):
                self.base_done = True
            if isinstance(message, protocol.Prepared):
                self.prepared[(which, message.index)] = message
            elif isinstance(message, protocol.RoundResult):
                self.rounds_seen.setdefault((which, message.index), []).append(message)
            elif isinstance(message, protocol.Stop) and not message.candidate:
                return False
        return True

    def drive(self) -> Optional[str]:
        """Every case, every round; a reason if a worker failed as a whole."""
        for index, _case in self.run.cases:
            for which in ("base", "cand"):
                if not self._pump(which, lambda w=which: (w, index) in self.prepared):
                    return self._why(which)
            for r in range(self.rounds):
                for which in ("base", "cand"):
                    (self.base if which == "base" else self.cand).send(protocol.RoundCommand(index=index))
                    if not self._pump(which, lambda w=which, r=r: len(self.rounds_seen.get((w, index), [])) > r):
                        return self._why(which)
            self.base.send(protocol.NextCase())
            self.cand.send(protocol.NextCase())
        if not self._pump("cand", lambda: self.run.done is not None or self.run.stop is not None):
            return self._why("cand")
        self._pump("base", lambda: self.base_done)
        return None

    def _why(self, which: str) -> str:
        worker = self.cand if which == "cand" else self.base
        who = "the candidates' process" if which == "cand" else "the baselines' process"
        if worker.forged:
            return f"{who}: a frame failed verification ({worker.forged})"
        if self.run.stop is not None and which == "cand":
            return scrub(self.run.stop.message)
        if time.monotonic() - self.started > self.timeout_s:
            return f"{who} ran past the {self.timeout_s:g} s limit"
        code = worker.proc.poll() if worker.proc else None
        return f"{who} died (exit {code}) without reporting"

    def close(self) -> tuple[WorkerExit, WorkerExit]:
        try:
            return self.cand.finish(), self.base.finish()
        finally:
            self.cand_scratch.cleanup()
            self.base_scratch.cleanup()


def remeasure(
    sources: dict[str, str],
    problem: ProblemInfo | str,
    *,
    device: str = "auto",
    rounds: int = 5,
    timeout_s: float = 600,
    samples_per_round: int = 30,
    seed: int | None = None,
    baselines: tuple[str, ...] = ("eager",),
    sandbox: str | None = None,
    context: "SearchContext | None" = None,
) -> RemeasureResult:
    """Time every candidate and the baselines interleaved round by round: the candidates in one
    (sandboxed) process, the baselines in another that never ran a candidate, alternated by the parent.

    Eager is always measured (speedups and significance are against it); with "torch_compile" in
    `baselines`, the compiled reference joins the rotation and each case carries its ratio too.
    Each candidate's timed call is re-run on fresh inputs after the rounds and judged: a wrong one gets
    an error instead of numbers. A win is `significant` only when every round's ratio is above 1.
    `context`: only the candidates' compiled kernels are taken from the search; the seed, the inputs
    and the baselines are this re-measure's own, so the verdict rests on nothing measured before.
    """
    started, t0 = _now(), time.monotonic()
    dev = resolve_device(device)
    info = _problem(problem, dev, None)
    _check_baselines(baselines)
    fp = fingerprint(dev)
    shas = {name: source_sha256(src) for name, src in sources.items()}
    head = dict(
        problem_id=info.problem_id,
        problem_name=info.name,
        device=dev,
        rounds=rounds,
        fingerprint=fp,
        started_at=started,
    )
    if not _times_here(dev):
        return RemeasureResult(
            **head,
            candidates=tuple(RemeasuredCandidate(name=n, candidate_sha256=shas[n]) for n in sources),
            note=NOT_MEASURED_CPU,
            duration_s=time.monotonic() - t0,
        )
    isolation = resolve_sandbox(sandbox, dev)
    head["isolation"] = isolation
    seed = secrets.randbelow(2**31 - 10**5) if seed is None else seed
    names = list(sources)
    refs = References(info, dev, seed)
    keys = [str(i) for i in range(len(names))]
    wanted = ["eager"] + [b for b in baselines if b != "eager"]
    wait_for_gates(BASELINE_TIMEOUT_S)  # no early baseline process still compiling beside the rounds
    rm = _Remeasure(
        info,
        dev,
        seed,
        refs,
        keys,
        [sources[n] for n in names],
        wanted,
        rounds,
        samples_per_round,
        timeout_s,
        isolation,
        context.kernels([shas[n] for n in names]) if context is not None else (),
    )
    try:
        failure = rm.drive()
    finally:
        cand_exit, _ = rm.close()
    if failure is not None:
        return RemeasureResult(
            **head,
            candidates=tuple(RemeasuredCandidate(name=n, candidate_sha256=shas[n], error=failure) for n in sources),
            stderr_tail=cand_exit.stderr_tail,
            duration_s=time.monotonic() - t0,
        )
    per_candidate: dict[str, list[RemeasuredCase]] = {name: [] for name in names}
    errors: dict[str, str] = {}
    compile_error = None
    for key, name in zip(keys, names):
        mine = rm.run.per[key]
        if mine.wrong is not None:
            errors[name] = mine.wrong["message"]
        elif mine.stop is not None:
            errors[name] = scrub(mine.stop.message)
        elif mine.error is not None:
            errors[name] = scrub(mine.error)
    for index, case in rm.run.cases:
        base_rounds = rm.rounds_seen.get(("base", index), [])
        cand_rounds = rm.rounds_seen.get(("cand", index), [])
        base = [r.p50s_ms.get("eager") for r in base_rounds]
        compiled = [r.p50s_ms.get("torch_compile") for r in base_rounds]
        autotuned = [r.p50s_ms.get("torch_compile_max_autotune") for r in base_rounds]
        prepared = rm.prepared.get(("cand", index))
        base_prepared = rm.prepared.get(("base", index))
        if base_prepared is not None and "torch_compile" in base_prepared.errors:
            compile_error = base_prepared.errors["torch_compile"]
        if None in base or not base:
            for name in names:
                errors.setdefault(name, f"{case.case_id}: the eager baseline could not be timed")
            continue
        compiled = compiled if None not in compiled else []
        autotuned = autotuned if None not in autotuned else []
        for key, name in zip(keys, names):
            if name in errors:
                continue
            if prepared is not None and key in prepared.errors:
                errors[name] = f"{case.case_id}: {scrub(prepared.errors[key])}"
                continue
            mine = [r.p50s_ms.get(key) for r in cand_rounds]
            if not mine or None in mine or len(mine) != len(base):
                why = next((r.errors[key] for r in cand_rounds if key in r.errors), "not timed in every round")
                errors[name] = f"{case.case_id}: {scrub(why)}"
                continue
            ratios = [b / c for b, c in zip(base, mine)]
            vs_compile = [b / c for b, c in zip(compiled, mine)] if len(compiled) == len(mine) else []
            vs_autotune = [b / c for b, c in zip(autotuned, mine)] if len(autotuned) == len(mine) else []
            per_candidate[name].append(
                RemeasuredCase(
                    case_id=case.case_id,
                    params=case.params,
                    dtype=case.dtype,
                    candidate_p50s_ms=tuple(mine),
                    baseline_p50s_ms=tuple(base),
                    speedup=quantile(ratios, 0.5),
                    speedup_min=min(ratios),
                    speedup_max=max(ratios),
                    significant=min(ratios) > 1.0,
                    method=prepared.methods.get(key, "cuda_events") if prepared else "",
                    compile_p50s_ms=tuple(compiled) if vs_compile else (),
                    speedup_vs_compile=quantile(vs_compile, 0.5) if vs_compile else None,
                    speedup_vs_compile_min=min(vs_compile) if vs_compile else None,
                    speedup_vs_compile_max=max(vs_compile) if vs_compile else None,
                    autotune_p50s_ms=tuple(autotuned) if vs_autotune else (),
                    speedup_vs_autotune=quantile(vs_autotune, 0.5) if vs_autotune else None,
                    speedup_vs_autotune_min=min(vs_autotune) if vs_autotune else None,
                    speedup_vs_autotune_max=max(vs_autotune) if vs_autotune else None,
                )
            )
    return RemeasureResult(
        **head,
        candidates=tuple(
            RemeasuredCandidate(
                name=n,
                candidate_sha256=shas[n],
                cases=tuple(per_candidate[n]) if n not in errors else (),
                error=errors.get(n),
            )
            for n in names
        ),
        note=f"torch.compile baseline failed: {compile_error}" if compile_error else None,
        stderr_tail=cand_exit.stderr_tail if errors else "",
        duration_s=time.monotonic() - t0,
    )
