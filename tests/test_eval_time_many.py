"""The parent's half of batched timing (`evaluation.time_many`), without a GPU: the timing worker is
replaced by a scripted one that answers through the real scratch-directory protocol (request.json in,
status.json out, nonce checked), so what is tested is how the parent attributes numbers, failures
and dead processes to candidates. The worker's own half runs in tests/test_eval_gpu.py on a GPU."""

from __future__ import annotations

import json

import pytest

from evaluation import harness, load_problem, protocol
from evaluation.isolation import WorkerExit
from evaluation.records import EvalResult, Fingerprint, Stage, Status

FP = Fingerprint(device_kind="cuda", device_name="NVIDIA H200", arch="sm_90", triton_version="3.6.0",
                 torch_version="2.11.0", python_version="3.12", kernelscout_version="0.1.0")


def stats(p50):
    return dict(latency_ms_p20=p50 * 0.99, latency_ms_p50=p50, latency_ms_p80=p50 * 1.01, latency_ms_min=p50 * 0.98,
                latency_ms_mean=p50, n_samples=50, n_warmup=8, l2_flushed=True, method="cuda_graph")


class ScriptedWorker:
    """Candidate sources say how they behave: 'fast', 'slow', 'raises' (an exception while timed) or
    'kills' (the whole process dies)."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, scratch, device, timeout_s, poll=None):
        request = json.loads((scratch / protocol.REQUEST).read_text())
        sources = {e["name"]: (scratch / e["file"]).read_text() for e in request["candidates"]}
        self.calls.append(list(sources.values()))
        if any("kills" in s for s in sources.values()):
            return WorkerExit(returncode=-9, timed_out=False, stopped_early=False, stderr_tail="", wall_s=1.0)
        errors = {n: "timing case: RuntimeError: boom" for n, s in sources.items() if "raises" in s}
        cases = [{
            "index": c["index"],
            "candidates": {n: stats(0.5 if "fast" in s else 1.0) for n, s in sources.items() if n not in errors},
            "baselines": [{"name": b, "timing": stats(2.0), "error": None} for b in request["baselines"]],
            "input_bytes": 1 << 20, "output_bytes": 1 << 20,
        } for c in request["cases"]]
        protocol.write_json_atomic(scratch / protocol.STATUS, {
            "nonce": request["nonce"], "status": "ok", "timing": cases, "errors": errors,
            "error_classes": {n: "RuntimeError" for n in errors}})
        return WorkerExit(returncode=0, timed_out=False, stopped_early=False, stderr_tail="", wall_s=1.0)


@pytest.fixture
def gpu_less_cuda(monkeypatch):
    worker = ScriptedWorker()
    monkeypatch.setattr(harness, "resolve_device", lambda device="auto": "cuda")
    monkeypatch.setattr(harness, "fingerprint", lambda device="auto": FP)
    monkeypatch.setattr(harness, "run_worker", worker)
    monkeypatch.setattr("evaluation.ceiling.copy_ceiling_gbps", lambda name, driver: 4000.0)
    return worker


def checked(source, status=Status.passed):
    return EvalResult(status=status, candidate_sha256=source, problem_id="p", problem_name="layernorm", device="cuda",
                      fingerprint=FP, started_at="2026-12-02T00:00:00+00:00", duration_s=3.0,
                      timing_note="timing not requested")


@pytest.fixture(scope="module")
def problem():
    return load_problem("layernorm", "cpu", timed=["M=8,N=256|bfloat16"])


def test_siblings_share_one_process_and_one_baseline_and_a_failure_stays_with_its_candidate(gpu_less_cuda, problem):
    items = [(s, checked(s)) for s in ("fast", "slow", "raises")] + [("wrong", checked("wrong", Status.incorrect))]
    fast, slow, raises, wrong = harness.time_many(items, problem, device="cuda", baselines=("eager",))
    assert gpu_less_cuda.calls == [["fast", "slow", "raises"]]  # one process; the incorrect one is not timed
    assert fast.speedup("eager") == pytest.approx(4.0) and slow.speedup("eager") == pytest.approx(2.0)
    assert fast.timing[0].baselines == slow.timing[0].baselines
    assert fast.timing_note == "baselines timed: eager" and fast.ceiling_gbps == 4000.0
    assert fast.timing[0].achieved_gbps == pytest.approx(fast.timing[0].bytes_moved / 0.5e-3 / 1e9)
    assert fast.duration_s > 3.0  # its share of the timing is added to the check's duration
    assert (raises.status, raises.failed_stage, raises.error_class) == (Status.crashed, Stage.timing, "RuntimeError")
    assert "boom" in raises.message and raises.timing == ()
    assert wrong == items[3][1]


def test_a_process_that_dies_is_retried_one_candidate_at_a_time(gpu_less_cuda, problem):
    items = [(s, checked(s)) for s in ("fast", "kills", "slow")]
    fast, kills, slow = harness.time_many(items, problem, device="cuda")
    assert gpu_less_cuda.calls == [["fast", "kills", "slow"], ["fast"], ["kills"], ["slow"]]
    assert fast.passed and slow.passed and fast.speedup("torch_compile") == pytest.approx(4.0)
    assert fast.timing_note is None  # both baselines were timed
    assert (kills.status, kills.failed_stage, kills.error_class) == (Status.crashed, Stage.timing, "SIGKILL")
    assert "SIGKILL" in kills.message


def test_nothing_is_timed_on_the_cpu_and_bad_baselines_are_refused(problem, monkeypatch):
    items = [("fast", checked("fast"))]
    assert harness.time_many(items, problem, device="cpu") == [items[0][1]]
    with pytest.raises(ValueError, match="must include 'eager'"):
        harness.time_many(items, problem, device="cpu", baselines=("torch_compile",))
