"""evaluate() and remeasure(): the cascade static_check -> compile -> correctness -> timing.

Every stage that runs candidate code runs it in a fresh worker process (isolation.py): one for all
shape cases and trials of the correctness stage, one more for timing on a GPU. Nothing the candidate
does raises here; it comes back as a Status with the stage that failed. Only bad harness input raises
(an unknown problem, --device cuda without a GPU).
"""

from __future__ import annotations

import datetime as _dt
import json
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from evaluation import protocol
from evaluation.correctness import CorrectnessRun, References
from evaluation.fingerprint import fingerprint, resolve_device
from evaluation.isolation import WorkerExit, last_progress, run_worker
from evaluation.problem import load_problem
from evaluation.records import (
    BASELINES, Baseline, EvalResult, KernelInfo, ProblemInfo, RemeasuredCandidate, RemeasuredCase, RemeasureResult,
    ShapeCase, Stage, Status, TimedCase, TimingStats, source_sha256,
)
from evaluation.static_check import check_source
from evaluation.timing import NOT_MEASURED_CPU, quantile, speedup
from evaluation.worker import COMPILED

N_INPUT_SETS = 4  # inputs rotated between timing samples
SHM = Path("/dev/shm")


def scratch_root() -> str | None:
    """Where worker scratch directories go: $KSCOUT_SCRATCH, else /dev/shm when it is a writable tmpfs
    with room (outputs and inputs of every correctness call cross it, up to GBs for LLM-sized cases),
    else the system temp dir."""
    import os
    import shutil

    chosen = os.environ.get("KSCOUT_SCRATCH")
    if chosen:
        return chosen
    try:
        if SHM.is_dir() and os.access(SHM, os.W_OK) and shutil.disk_usage(SHM).free > (4 << 30):
            return str(SHM)
    except OSError:
        pass
    return None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def _problem(problem: ProblemInfo | str, device: str, overrides: dict[str, int] | None) -> ProblemInfo:
    if isinstance(problem, ProblemInfo):
        if not overrides:
            return problem
        problem = problem.name if problem.builtin else problem.source_path
    return load_problem(problem, device, overrides)


def _read_status(scratch: Path, nonce: str) -> dict[str, Any] | None:
    """The worker's status, or None if it never wrote one (or a forged one: wrong nonce)."""
    try:
        status = json.loads((scratch / protocol.STATUS).read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) and status.get("nonce") == nonce else None


def _death(exit_: WorkerExit, stage: Stage, timeout_s: float) -> dict[str, Any]:
    where = last_progress(exit_.stderr_tail)
    during = f" during {where}" if where else " before its first case"
    if exit_.timed_out:
        return dict(status=Status.timed_out, failed_stage=stage, error_class="Timeout",
                    message=f"the candidate's process ran past the {timeout_s:g} s limit{during} and was killed")
    return dict(status=Status.crashed, failed_stage=stage, error_class=exit_.death_class(),
                message=f"the candidate's process died by {exit_.death()}{during} without reporting")


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
) -> EvalResult:
    """Judge one candidate. `seed` fixes the trial inputs (recorded in the result either way);
    `baselines` are those timed next to it (eager always: speedups are against it)."""
    started, t0 = _now(), time.monotonic()
    dev = resolve_device(device)
    info = _problem(problem, dev, overrides)
    if trials < 1:
        raise ValueError("trials must be >= 1")
    seed = secrets.randbelow(2**31 - 1024) if seed is None else seed
    base = dict(candidate_sha256=source_sha256(source), problem_id=info.problem_id, problem_name=info.name,
                device=dev, fingerprint=fingerprint(dev), started_at=started)

    def finish(**fields) -> EvalResult:
        return EvalResult(**base, duration_s=time.monotonic() - t0, **fields)

    report = check_source(source, Path(info.source_path).stem)
    if report.syntax_error:
        return finish(status=Status.compile_error, failed_stage=Stage.static_check, error_class="SyntaxError",
                      message=f"syntax error at {report.syntax_error}")
    if not report.has_model_new:
        return finish(status=Status.compile_error, failed_stage=Stage.static_check, error_class="MissingModelNew",
                      message="the candidate defines no ModelNew (KernelBench contract: class ModelNew(nn.Module))")
    if report.findings:
        first = report.findings[0]
        more = f" (+{len(report.findings) - 1} more)" if len(report.findings) > 1 else ""
        return finish(status=Status.rejected, failed_stage=Stage.static_check, error_class=first.rule,
                      message=first.describe() + more)

    run = CorrectnessRun(source, info, dev, trials, seed)
    with tempfile.TemporaryDirectory(prefix="kscout-eval-", dir=scratch_root()) as tmp:
        scratch = Path(tmp)
        run.prepare(scratch)
        exit_ = run_worker(scratch, dev, timeout_s, poll=lambda: run.poll(scratch))
        status = _read_status(scratch, run.nonce)
    seeds = tuple(run.seeds)
    common = dict(shape_results=tuple(run.outcome.shape_results), seeds=seeds)
    out = run.outcome
    if out.status is not None:  # the parent saw a cheat (mutated inputs, forged result)
        return finish(status=out.status, failed_stage=out.stage, error_class=out.error_class, message=out.message,
                      stderr_tail=exit_.stderr_tail, **common)
    if exit_.timed_out or status is None:
        return finish(**_death(exit_, Stage.correctness, timeout_s), stderr_tail=exit_.stderr_tail, **common)
    if status["status"] != "ok":
        return finish(status=Status(status["status"]), failed_stage=Stage(status["stage"]),
                      error_class=status["error_class"], message=status["message"],
                      stderr_tail=exit_.stderr_tail, **common)
    kernels = tuple(KernelInfo(**k) for k in status.get("kernels", ()))
    common.update(kernels=kernels, triton_launches=int(status.get("launches", 0)))
    if len(run.outcome.shape_results) != len(info.shape_cases):
        missing = len(info.shape_cases) - len(run.outcome.shape_results)
        return finish(status=Status.crashed, failed_stage=Stage.correctness, error_class="ProtocolError",
                      message=f"the worker reported success but {missing} case results never arrived",
                      stderr_tail=exit_.stderr_tail, **common)
    failed = [r for r in run.outcome.shape_results if not r.passed]
    if failed:
        return finish(status=Status.incorrect, failed_stage=Stage.correctness, error_class=run.first_failure_kind(),
                      message=f"{len(failed)} of {len(info.shape_cases)} cases failed; first {failed[0].case_id}: "
                              f"{failed[0].message}",
                      **common)
    if dev == "cpu":
        return finish(status=Status.passed, timing_note=NOT_MEASURED_CPU, **common)
    checked = finish(status=Status.passed, timing_note="timing not requested", **common)
    if not time_it:
        return checked
    return time_many([(source, checked)], info, device=dev, timeout_s=timeout_s, baselines=baselines, seed=seed)[0]


def timed_cases(info: ProblemInfo) -> list[tuple[int, ShapeCase]]:
    tagged = [(i, c) for i, c in enumerate(info.shape_cases) if "timed" in c.tags]
    return tagged or list(enumerate(info.shape_cases))


def _timing_request(info: ProblemInfo, dev: str, seed: int, mode: str, scratch: Path, sources: list[str],
                    extra: dict) -> tuple[str, list[dict]]:
    """Write request.json, the candidate files and the state dicts of the timed cases.

    Returns the nonce and the candidate entries (name = position in `sources`, as a string)."""
    import torch

    refs = References(info, dev, seed)
    nonce = secrets.token_hex(16)
    entries = [{"name": str(i), "file": f"cand_{i}.py", "index": i} for i in range(len(sources))]
    for entry, src in zip(entries, sources):
        (scratch / entry["file"]).write_text(src)
    states: dict[str, str] = {}
    cases = []
    for index, case in timed_cases(info):
        k = refs.key(case.params)
        if k not in states:
            states[k] = protocol.state_name(len(states))
            torch.save(refs.model(case.params).state_dict(), scratch / states[k])
        cases.append({"index": index, "case_id": case.case_id, "params": case.params, "dtype": case.dtype,
                      "state": states[k], "seeds": [seed + 1000 + i for i in range(N_INPUT_SETS)]})
    protocol.write_json_atomic(scratch / protocol.REQUEST, {
        "mode": mode, "nonce": nonce, "device": dev, "problem_path": info.source_path, "init_seed": seed,
        "cases": cases, "candidates": entries, **extra,
    })
    return nonce, entries


def time_many(
    items: list[tuple[str, EvalResult]],
    problem: ProblemInfo | str,
    *,
    device: str = "auto",
    timeout_s: float = 120.0,
    baselines: tuple[str, ...] = BASELINES,
    seed: int | None = None,
) -> list[EvalResult]:
    """Time candidates that passed correctness (`evaluate(..., time_it=False)`), all in one process.

    Siblings are timed on the same input sets against one measurement of each baseline per case,
    which is both cheaper (one process start, one torch.compile) and a fairer comparison than one
    process each. Items that did not pass, and everything on the CPU, come back unchanged. If the
    shared process dies or reports anything but success, each candidate is timed again alone, so one
    bad candidate cannot take its siblings' numbers with it and gets its own status.
    """
    dev = resolve_device(device)
    info = _problem(problem, dev, None)
    if "eager" not in baselines or set(baselines) - set(BASELINES):
        raise ValueError(f"baselines must include 'eager' and be among {BASELINES} (got {baselines})")
    out = [r for _, r in items]
    todo = [i for i, (_, r) in enumerate(items) if r.passed and dev != "cpu"]
    if not todo:
        return out
    seed = secrets.randbelow(2**31 - 1024) if seed is None else seed
    timed = _time_batch([items[i][0] for i in todo], info, dev, seed, timeout_s * len(todo), baselines)
    if timed is None:  # the shared process failed: one process each, so the culprit gets its own status
        timed = [_time_batch([items[i][0]], info, dev, seed, timeout_s, baselines)[0] for i in todo]
    notes = [] if set(baselines) == set(BASELINES) else [f"baselines timed: {', '.join(baselines)}"]
    if info.float32_matmul_precision == "high" and any(c.dtype == "float32" for _, c in timed_cases(info)):
        notes.append("float32 baselines ran with TF32 matmuls, as the problem's tolerance admits")
    for i, fields in zip(todo, timed):
        prior = items[i][1]
        out[i] = prior.model_copy(update=dict(
            duration_s=prior.duration_s + fields.pop("elapsed_s"), timing_note="; ".join(notes) or None,
            stderr_tail=fields.pop("stderr_tail", prior.stderr_tail), **fields))
    return out


def _time_batch(sources: list[str], info: ProblemInfo, dev: str, seed: int, timeout_s: float,
                baselines: tuple[str, ...]) -> list[dict] | None:
    """One timing process for `sources`: per source, the fields to update its EvalResult with.

    None when the process failed as a whole with several sources (the caller retries each alone);
    with a single source, that failure is the source's own status."""
    from evaluation.ceiling import copy_ceiling_gbps
    from evaluation.problem import exec_problem

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kscout-time-", dir=scratch_root()) as tmp:
        scratch = Path(tmp)
        nonce, entries = _timing_request(info, dev, seed, "timing", scratch, sources,
                                         {"baselines": list(baselines)})
        exit_ = run_worker(scratch, dev, timeout_s)
        status = _read_status(scratch, nonce)
    elapsed = (time.monotonic() - t0) / len(sources)
    if exit_.timed_out or status is None or status["status"] != "ok":
        if len(sources) > 1:
            return None
        if exit_.timed_out or status is None:
            fields = _death(exit_, Stage.timing, timeout_s)
        else:
            fields = dict(status=Status(status["status"]), failed_stage=Stage(status["stage"]),
                          error_class=status["error_class"], message=status["message"])
        return [dict(fields, stderr_tail=exit_.stderr_tail, elapsed_s=elapsed)]
    fp = fingerprint(dev)
    ceiling = copy_ceiling_gbps(fp.device_name, fp.driver_version)
    modules: dict[str, Any] = {}
    results = []
    for entry in entries:
        name = entry["name"]
        error = status["errors"].get(name)
        if error:
            results.append(dict(status=Status.crashed, failed_stage=Stage.timing,
                                error_class=status.get("error_classes", {}).get(name, "TimingError"),
                                message=error, elapsed_s=elapsed))
            continue
        timed = []
        for case_entry in status["timing"]:
            case = info.shape_cases[case_entry["index"]]
            key = json.dumps(case.params, sort_keys=True)
            if key not in modules:
                modules[key] = exec_problem(info.source_path, case.params)
            timed.append(_timed_case(case, modules[key], case_entry, case_entry["candidates"][name], ceiling))
        results.append(dict(status=Status.passed, timing=tuple(timed), ceiling_gbps=ceiling, elapsed_s=elapsed))
    return results


def _timed_case(case: ShapeCase, module, entry: dict, stats: dict, ceiling: float | None) -> TimedCase:
    import torch

    cand = TimingStats(**stats)
    baselines = tuple(
        Baseline(name=b["name"], timing=TimingStats(**b["timing"]) if b["timing"] else None, error=b["error"])
        for b in entry["baselines"]
    )
    itemsize = torch.empty((), dtype=getattr(torch, case.dtype)).element_size()
    byte_model = getattr(module, "bytes_moved", None)
    flop_model = getattr(module, "flops", None)
    nbytes = int(byte_model(case.params, itemsize)) if callable(byte_model) else entry["input_bytes"] + entry["output_bytes"]
    flops = int(flop_model(case.params)) if callable(flop_model) else None
    seconds = cand.latency_ms_p50 * 1e-3
    gbps = nbytes / seconds / 1e9
    return TimedCase(
        case_id=case.case_id, params=case.params, dtype=case.dtype, candidate=cand, baselines=baselines,
        speedups=tuple(speedup(b.name, b.timing, cand) for b in baselines if b.timing is not None),
        bytes_moved=nbytes, flops=flops, achieved_gbps=gbps,
        achieved_tflops=flops / seconds / 1e12 if flops else None,
        pct_of_ceiling=100.0 * gbps / ceiling if ceiling else None,
    )


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
) -> RemeasureResult:
    """Time every candidate and the baselines in one process, interleaved round by round.

    Eager is always measured (speedups and significance are against it); with "torch_compile" in
    `baselines`, the compiled reference joins the rotation and each case carries its ratio too.

    Callers pass candidates that already passed evaluate(); nothing is re-checked for correctness.
    A win is `significant` only when every round's ratio is above 1, not the median alone.
    """
    started, t0 = _now(), time.monotonic()
    dev = resolve_device(device)
    info = _problem(problem, dev, None)
    fp = fingerprint(dev)
    shas = {name: source_sha256(src) for name, src in sources.items()}
    head = dict(problem_id=info.problem_id, problem_name=info.name, device=dev, rounds=rounds,
                fingerprint=fp, started_at=started)
    if dev == "cpu":
        return RemeasureResult(
            **head, candidates=tuple(RemeasuredCandidate(name=n, candidate_sha256=shas[n]) for n in sources),
            note=NOT_MEASURED_CPU, duration_s=time.monotonic() - t0,
        )
    seed = secrets.randbelow(2**31 - 1024) if seed is None else seed
    names = list(sources)
    with tempfile.TemporaryDirectory(prefix="kscout-remeasure-", dir=scratch_root()) as tmp:
        scratch = Path(tmp)
        nonce, _ = _timing_request(info, dev, seed, "remeasure", scratch, [sources[n] for n in names], {
            "rounds": rounds, "samples_per_round": samples_per_round, "baselines": list(baselines),
        })
        exit_ = run_worker(scratch, dev, timeout_s)
        status = _read_status(scratch, nonce)
    if exit_.timed_out or status is None or status["status"] != "ok":
        why = _death(exit_, Stage.timing, timeout_s)["message"] if status is None or exit_.timed_out else status["message"]
        return RemeasureResult(
            **head, candidates=tuple(RemeasuredCandidate(name=n, candidate_sha256=shas[n], error=why) for n in sources),
            stderr_tail=exit_.stderr_tail, duration_s=time.monotonic() - t0,
        )
    errors = {names[int(k)]: v for k, v in status["errors"].items() if k.isdigit()}
    per_candidate: dict[str, list[RemeasuredCase]] = {name: [] for name in sources}
    for entry in status["remeasure"]:
        case = info.shape_cases[entry["index"]]
        base = entry["p50s_ms"].get("__baseline__", [])
        compiled = entry["p50s_ms"].get(COMPILED, [])
        for i, name in enumerate(names):
            mine = entry["p50s_ms"].get(str(i), [])
            if name in errors or not mine or len(mine) != len(base):
                continue
            ratios = [b / c for b, c in zip(base, mine)]
            vs_compile = [b / c for b, c in zip(compiled, mine)] if len(compiled) == len(mine) else []
            per_candidate[name].append(RemeasuredCase(
                case_id=case.case_id, params=case.params, dtype=case.dtype,
                candidate_p50s_ms=tuple(mine), baseline_p50s_ms=tuple(base),
                speedup=quantile(ratios, 0.5), speedup_min=min(ratios), speedup_max=max(ratios),
                significant=min(ratios) > 1.0, method=entry["methods"][str(i)],
                compile_p50s_ms=tuple(compiled) if vs_compile else (),
                speedup_vs_compile=quantile(vs_compile, 0.5) if vs_compile else None,
                speedup_vs_compile_min=min(vs_compile) if vs_compile else None,
                speedup_vs_compile_max=max(vs_compile) if vs_compile else None,
            ))
    return RemeasureResult(
        **head,
        candidates=tuple(
            RemeasuredCandidate(name=n, candidate_sha256=shas[n], cases=tuple(per_candidate[n]), error=errors.get(n))
            for n in sources
        ),
        note=f"torch.compile baseline failed: {status['errors'][COMPILED]}" if COMPILED in status["errors"] else None,
        duration_s=time.monotonic() - t0,
    )

