"""The parent's half of the correctness stage: the reference, and the judgement of every result.

The parent builds the reference Model after the same seed and init inputs as the worker, saves its
state dict for the worker, and runs it itself in float64 on the same dtype-rounded inputs and
dtype-rounded parameters (so the tolerance covers only the candidate's arithmetic). It regenerates
each trial's inputs from the seed and compares outputs (compare.py). Results are judged while the
worker is still running. Only outputs cross back: the worker checks that the inputs are unchanged
against copies it took before the forward, on the device (shipping LLM-sized inputs back cost every
judgement a device-to-host copy, a file round trip and a comparison on the host).
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from evaluation import protocol
from evaluation.compare import Comparison, compare
from evaluation.inputs import RNG_LOCK, describe_trial, make_inputs
from evaluation.problem import exec_problem, init_inputs
from evaluation.records import KernelInfo, ProblemInfo, ShapeCase, ShapeResult, Stage, Status


# Float64 references and comparisons of LLM-sized outputs take GBs of device memory each; a parent
# judging a batch of candidates in threads runs at most this many at once (it ran out of an H200's
# 140 GiB with eight at once next to eight workers).
JUDGE_SLOTS = threading.BoundedSemaphore(2)
_OOM_RETRIES, _OOM_BACKOFF_S = 4, 0.5  # waits 0.5 + 1 + 2 + 4 s for the workers' peaks to pass


class References:
    """Problem modules, reference models and their state dicts, built once per parameter binding."""

    def __init__(self, info: ProblemInfo, device: str, init_seed: int):
        self.info, self.device, self.init_seed = info, device, init_seed
        self._modules: dict[str, Any] = {}
        self._models: dict[str, torch.nn.Module] = {}
        self._models64: dict[tuple[str, str, str], torch.nn.Module] = {}

    @staticmethod
    def key(params: dict[str, int]) -> str:
        return json.dumps(params, sort_keys=True)

    def module(self, params: dict[str, int]):
        k = self.key(params)
        if k not in self._modules:
            self._modules[k] = exec_problem(self.info.source_path, params)
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
            if isinstance(x, torch.Tensor) else x
            for x in inputs
        ]
        with torch.no_grad():
            return self._models64[k](*wide)


def _well_formed(payload: Any) -> bool:
    if not isinstance(payload, dict):
        return False
    outputs = payload.get("outputs")
    return (
        isinstance(payload.get("nonce"), str)
        and isinstance(outputs, dict)
        and isinstance(outputs.get("kind"), str)
        and isinstance(outputs.get("items"), list)
        and isinstance(outputs.get("types"), list)
    )


@dataclass
class Outcome:
    status: Status | None = None  # None: no verdict yet (the worker's status decides)
    stage: Stage | None = None
    error_class: str | None = None
    message: str | None = None
    shape_results: list[ShapeResult] = field(default_factory=list)
    launches: int = 0
    kernels: list[KernelInfo] = field(default_factory=list)


class CorrectnessRun:
    def __init__(self, source: str, info: ProblemInfo, device: str, trials: int, seed: int):
        self.source, self.info, self.device = source, info, device
        self.seeds = [seed + t for t in range(trials)]
        self.refs = References(info, device, seed)
        self.nonce = secrets.token_hex(16)
        self.trials: dict[int, dict[int, Comparison]] = {}
        self.outcome = Outcome()
        self.expected_files = len(info.shape_cases) * trials

    def prepare(self, scratch: Path) -> None:
        (scratch / protocol.CANDIDATE).write_text(self.source)
        states: dict[str, str] = {}
        cases = []
        for index, case in enumerate(self.info.shape_cases):
            k = self.refs.key(case.params)
            if k not in states:
                states[k] = protocol.state_name(len(states))
                torch.save(self.refs.model(case.params).state_dict(), scratch / states[k])
            cases.append({
                "index": index, "case_id": case.case_id, "params": case.params, "dtype": case.dtype,
                "state": states[k], "seeds": self.seeds,
            })
        protocol.write_json_atomic(scratch / protocol.REQUEST, {
            "mode": "correctness", "nonce": self.nonce, "device": self.device,
            "problem_path": self.info.source_path, "init_seed": self.refs.init_seed, "cases": cases,
        })

    def poll(self, scratch: Path) -> bool:
        """Judge every result that has arrived; True once the verdict is final (a cheat was seen)."""
        for path in sorted(scratch.glob("r*_*.pt")):
            try:
                index, trial = (int(p) for p in path.stem[1:].split("_"))
            except ValueError:
                continue
            try:  # weights_only: a crafted pickle cannot run code here; anything unreadable is not ours
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # foreign pickle protocols warn before they fail
                    payload = torch.load(path, weights_only=True, map_location="cpu")
            except Exception as exc:
                payload = f"{type(exc).__name__}"
            path.unlink()
            if not _well_formed(payload) or payload["nonce"] != self.nonce:
                self._reject("ForgedResult", f"{path.name} in the scratch dir was not written by the worker")
                return True
            self._judge(index, trial, payload)
            if self.outcome.status is not None:
                return True
        return False

    def _reject(self, error_class: str, message: str) -> None:
        self.outcome.status, self.outcome.stage = Status.rejected, Stage.correctness
        self.outcome.error_class, self.outcome.message = error_class, message

    def _judge(self, index: int, trial: int, payload: dict) -> None:
        case = self.info.shape_cases[index]
        tol = self.info.tolerances[case.dtype]
        with JUDGE_SLOTS:  # drawing the inputs again takes device memory too
            verdict = self._compare(case, self.seeds[trial], trial, payload["outputs"], tol)
        self.trials.setdefault(index, {})[trial] = verdict
        if len(self.trials[index]) == len(self.seeds):
            self.outcome.shape_results.append(self._shape_result(index))

    def _compare(self, case: ShapeCase, seed: int, trial: int, outputs: Any, tol) -> Comparison:
        """Draw the trial's inputs again exactly as the worker did (same generator, same device), run the
        float64 reference on them and compare. Device memory is shared with the batch's workers: a draw
        that does not fit waits for their peaks to pass; a reference that does not fit runs on the host."""
        module = self.refs.module(case.params)
        drawn = self._waiting_for_memory(lambda: make_inputs(module, case.dtype, seed, trial, self.device))
        try:
            try:
                return compare(outputs, self.refs.expected(case, drawn), case.dtype, tol)
            except torch.OutOfMemoryError:
                host, drawn = [x.cpu() if isinstance(x, torch.Tensor) else x for x in drawn], None
                torch.cuda.empty_cache()
                return compare(outputs, self.refs.expected(case, host, "cpu"), case.dtype, tol)
        finally:
            del drawn
            if self.device == "cuda":
                torch.cuda.empty_cache()  # threads take turns: what one judgement cached, the next may need

    def _waiting_for_memory(self, draw):
        for attempt in range(_OOM_RETRIES + 1):
            try:
                return draw()
            except torch.OutOfMemoryError:
                if self.device != "cuda" or attempt == _OOM_RETRIES:
                    raise  # never fit: the executor checks this candidate again with the GPU to itself
                torch.cuda.empty_cache()
                time.sleep(_OOM_BACKOFF_S * 2 ** attempt)

    def _shape_result(self, index: int) -> ShapeResult:
        case = self.info.shape_cases[index]
        trials = self.trials[index]
        failing = [t for t in sorted(trials) if not trials[t].passed]
        worst_t = failing[0] if failing else max(trials, key=lambda t: trials[t].max_abs_error or 0.0)
        worst = trials[worst_t]
        tol = self.info.tolerances[case.dtype]
        message = None
        if failing:
            message = f"trial {worst_t} ({describe_trial(worst_t)}, seed {self.seeds[worst_t]}): {worst.message}"
            if len(failing) > 1:
                message += f" (trials failing: {failing})"
        return ShapeResult(
            case_id=case.case_id, params=case.params, dtype=case.dtype, passed=not failing,
            trials=len(trials), seeds=tuple(self.seeds), atol=tol.atol, rtol=tol.rtol,
            max_abs_error=worst.max_abs_error, max_rel_error=worst.max_rel_error,
            mismatch_count=worst.mismatch_count, numel=worst.numel, first_mismatch=worst.first_mismatch,
            output_shape=worst.output_shape, output_dtype=worst.output_dtype, message=message,
        )

    def first_failure_kind(self) -> str | None:
        for index, trials in sorted(self.trials.items()):
            for t in sorted(trials):
                if not trials[t].passed:
                    return trials[t].kind
        return None
