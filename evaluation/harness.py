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
    Baseline, EvalResult, KernelInfo, ProblemInfo, RemeasuredCandidate, RemeasuredCase, RemeasureResult,
    ShapeCase, Stage, Status, TimedCase, TimingStats, source_sha256,
)
from evaluation.static_check import check_source
from evaluation.timing import NOT_MEASURED_CPU, quantile, speedup

N_INPUT_SETS = 4  # inputs rotated between timing samples


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
) -> EvalResult:
    """Judge one candidate. `seed` fixes the trial inputs (recorded in the result either way)."""
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
    with tempfile.TemporaryDirectory(prefix="kscout-eval-") as tmp:
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
    if not time_it:
        return finish(status=Status.passed, timing_note="timing not requested", **common)
    return _timed(source, info, dev, seed, timeout_s, base["fingerprint"], finish, common)


def timed_cases(info: ProblemInfo) -> list[tuple[int, ShapeCase]]:
    tagged = [(i, c) for i, c in enumerate(info.shape_cases) if "timed" in c.tags]
    return tagged or list(enumerate(info.shape_cases))


def _timing_request(info: ProblemInfo, dev: str, seed: int, mode: str, scratch: Path, extra: dict) -> str:
    """Write request.json and state dicts for the timed cases; returns the nonce."""
    import torch

    refs = References(info, dev, seed)
    nonce = secrets.token_hex(16)
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
        "cases": cases, **extra,
    })
    return nonce


def _timed(source, info, dev, seed, timeout_s, fp, finish, common) -> EvalResult:
    from evaluation.ceiling import copy_ceiling_gbps
    from evaluation.problem import exec_problem

    with tempfile.TemporaryDirectory(prefix="kscout-time-") as tmp:
        scratch = Path(tmp)
        (scratch / protocol.CANDIDATE).write_text(source)
        nonce = _timing_request(info, dev, seed, "timing", scratch, {})
        exit_ = run_worker(scratch, dev, timeout_s)
        status = _read_status(scratch, nonce)
    if exit_.timed_out or status is None:
        return finish(**_death(exit_, Stage.timing, timeout_s), stderr_tail=exit_.stderr_tail, **common)
    if status["status"] != "ok":
        return finish(status=Status(status["status"]), failed_stage=Stage(status["stage"]),
                      error_class=status["error_class"], message=status["message"],
                      stderr_tail=exit_.stderr_tail, **common)
    ceiling = copy_ceiling_gbps(fp.device_name, fp.driver_version)
    timed = []
    for entry in status["timing"]:
        case = info.shape_cases[entry["index"]]
        module = exec_problem(info.source_path, case.params)
        timed.append(_timed_case(case, module, entry, ceiling))
    return finish(status=Status.passed, timing=tuple(timed), ceiling_gbps=ceiling, **common)


def _timed_case(case: ShapeCase, module, entry: dict, ceiling: float | None) -> TimedCase:
    import torch

    cand = TimingStats(**entry["candidate"])
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
) -> RemeasureResult:
    """Time every candidate and the eager baseline in one process, interleaved round by round.

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
    entries = [{"name": name, "file": f"cand_{i}.py", "index": i} for i, name in enumerate(sources)]
    with tempfile.TemporaryDirectory(prefix="kscout-remeasure-") as tmp:
        scratch = Path(tmp)
        for entry in entries:
            (scratch / entry["file"]).write_text(sources[entry["name"]])
        nonce = _timing_request(info, dev, seed, "remeasure", scratch, {
            "candidates": entries, "rounds": rounds, "samples_per_round": samples_per_round,
        })
        exit_ = run_worker(scratch, dev, timeout_s)
        status = _read_status(scratch, nonce)
    if exit_.timed_out or status is None or status["status"] != "ok":
        why = _death(exit_, Stage.timing, timeout_s)["message"] if status is None or exit_.timed_out else status["message"]
        return RemeasureResult(
            **head, candidates=tuple(RemeasuredCandidate(name=n, candidate_sha256=shas[n], error=why) for n in sources),
            stderr_tail=exit_.stderr_tail, duration_s=time.monotonic() - t0,
        )
    per_candidate: dict[str, list[RemeasuredCase]] = {name: [] for name in sources}
    for entry in status["remeasure"]:
        case = info.shape_cases[entry["index"]]
        base = entry["p50s_ms"].get("__baseline__", [])
        for name in sources:
            mine = entry["p50s_ms"].get(name, [])
            if name in status["errors"] or not mine or len(mine) != len(base):
                continue
            ratios = [b / c for b, c in zip(base, mine)]
            per_candidate[name].append(RemeasuredCase(
                case_id=case.case_id, params=case.params, dtype=case.dtype,
                candidate_p50s_ms=tuple(mine), baseline_p50s_ms=tuple(base),
                speedup=quantile(ratios, 0.5), speedup_min=min(ratios), speedup_max=max(ratios),
                significant=min(ratios) > 1.0, method=entry["methods"][name],
            ))
    return RemeasureResult(
        **head,
        candidates=tuple(
            RemeasuredCandidate(name=n, candidate_sha256=shas[n], cases=tuple(per_candidate[n]),
                                error=status["errors"].get(n))
            for n in sources
        ),
        duration_s=time.monotonic() - t0,
    )

