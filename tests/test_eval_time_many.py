"""The parent's half of batched timing (`evaluation.time_many`), without a GPU: the timing worker is
replaced by a scripted one that answers through the real message types (Outputs, Timed, Stop, Done),
so what is tested is how the parent attributes numbers, wrong timed outputs, failures and dead
processes to candidates, and that baselines come from a process of their own. The worker's own half
runs in tests/test_eval_gpu.py on a GPU and, with the host clock, in tests/test_timing_checks.py."""

from __future__ import annotations

import pytest
import torch

from evaluation import harness, load_problem, protocol
from evaluation.correctness import Judge, References
from evaluation.inputs import trial_inputs
from evaluation.isolation import WorkerExit
from evaluation.records import EvalResult, Fingerprint, Stage, Status

FP = Fingerprint(
    device_kind="cuda",
    device_name="NVIDIA H200",
    arch="sm_90",
    triton_version="3.6.0",
    torch_version="2.11.0",
    python_version="3.12",
    kernelscout_version="0.1.0",
)


def stats(p50):
    return protocol.Stats(
        latency_ms_p20=p50 * 0.99,
        latency_ms_p50=p50,
        latency_ms_p80=p50 * 1.01,
        latency_ms_min=p50 * 0.98,
        latency_ms_mean=p50,
        n_samples=50,
        n_warmup=8,
        l2_flushed=True,
        method="cuda_graph",
    )


class ScriptedWorker:
    """Candidate sources say how they behave: 'fast', 'slow', 'raises' (an exception while timed),
    'kills' (the whole process dies), 'lies' (right in correctness, wrong on the fresh-input replay)."""

    def __init__(self, problem):
        self.problem = problem
        self.calls: list[list[str]] = []
        self.modes: list[tuple[str, str]] = []

    def outputs(self, refs, case, trial, wrong=False):
        pm = refs.module(case.params)
        inputs = trial_inputs(pm, case.dtype, trial, "cpu")
        out = refs.expected(case, inputs).to(getattr(torch, case.dtype))
        return protocol.package_bytes(out + 1 if wrong else out)

    def __call__(self, scratch, device, timeout_s, request, *, key, isolation, on_message, limits=None):
        self.modes.append((request.mode, isolation))
        exit_ok = WorkerExit(
            returncode=0, timed_out=False, stopped_early=False, stderr_tail="", wall_s=1.0, isolation=isolation
        )
        if request.mode == "baselines":
            for c in request.cases:
                for b in request.baselines:
                    on_message(
                        protocol.Timed(
                            index=c.index, candidate=b, stats=stats(2.0), input_bytes=1 << 20, output_bytes=1 << 20
                        ),
                        b"",
                    )
            on_message(protocol.Done(), b"")
            return exit_ok
        sources = {e.name: (scratch.in_dir / e.folder / protocol.CANDIDATE).read_text() for e in request.candidates}
        self.calls.append(list(sources.values()))
        if any("kills" in s for s in sources.values()):
            return WorkerExit(returncode=-9, timed_out=False, stopped_early=False, stderr_tail="", wall_s=1.0)
        refs = References(self.problem, "cpu", request.init_seed)
        errors = {n: "timing case: RuntimeError: boom" for n, s in sources.items() if "raises" in s}
        for c in request.cases:
            case = self.problem.shape_cases[c.index]
            for name, src in sources.items():
                if name in errors:
                    continue
                for t, trial in enumerate(c.trials):
                    blob, strides = self.outputs(refs, case, trial)
                    on_message(
                        protocol.Outputs(index=c.index, candidate=name, phase="trial", trial=t, strides=strides), blob
                    )
                for phase, k in (("first", 0), ("last", 3)):
                    blob, strides = self.outputs(refs, case, c.timing_sets[k])
                    on_message(
                        protocol.Outputs(index=c.index, candidate=name, phase=phase, trial=k, strides=strides), blob
                    )
                blob, strides = self.outputs(refs, case, c.check, wrong="lies" in src)
                on_message(protocol.Outputs(index=c.index, candidate=name, phase="check", strides=strides), blob)
                on_message(
                    protocol.Timed(index=c.index, candidate=name, stats=stats(0.5 if "fast" in src else 1.0)), b""
                )
        on_message(protocol.Done(errors=errors, error_classes={n: "RuntimeError" for n in errors}), b"")
        return exit_ok


@pytest.fixture(scope="module")
def problem():
    return load_problem("layernorm", "cpu", timed=["M=8,N=256|bfloat16"])


@pytest.fixture
def gpu_less_cuda(monkeypatch, problem):
    worker = ScriptedWorker(problem)
    monkeypatch.setattr(harness, "resolve_device", lambda device="auto": "cuda")
    monkeypatch.setattr(harness, "fingerprint", lambda device="auto": FP)
    monkeypatch.setattr(harness, "run_worker", worker)
    # the scripted worker stands in for the whole process: no warm one from a pool that an earlier test
    # (an in-process `kscout optimize --device cuda`) left behind
    monkeypatch.setattr(harness, "_take_warm", lambda device, isolation: None)
    monkeypatch.setattr(harness, "resolve_sandbox", lambda mode, device: "bwrap")
    monkeypatch.setattr("evaluation.ceiling.copy_ceiling_gbps", lambda name, driver: 4000.0)
    # the parent's references and judgements run on the CPU here, whatever device the run is for
    monkeypatch.setattr(harness, "References", lambda info, device, seed: References(info, "cpu", seed))
    monkeypatch.setattr("evaluation.correctness.Judge.__init__", _judge_on_cpu)
    return worker


_JUDGE_INIT = Judge.__init__


def _judge_on_cpu(self, refs, device):
    _JUDGE_INIT(self, refs, "cpu")


def checked(source, status=Status.passed):
    return EvalResult(
        status=status,
        candidate_sha256=source,
        problem_id="p",
        problem_name="layernorm",
        device="cuda",
        fingerprint=FP,
        started_at="2026-12-02T00:00:00+00:00",
        duration_s=3.0,
        timing_note="timing not requested",
        isolation="bwrap",
    )


def test_siblings_share_one_process_and_baselines_come_from_a_process_of_their_own(gpu_less_cuda, problem):
    items = [(s, checked(s)) for s in ("fast", "slow", "raises")] + [("wrong", checked("wrong", Status.incorrect))]
    fast, slow, raises, wrong = harness.time_many(items, problem, device="cuda", baselines=("eager",))
    assert gpu_less_cuda.calls == [["fast", "slow", "raises"]]  # one process; the incorrect one is not timed
    assert gpu_less_cuda.modes == [("timing", "bwrap"), ("baselines", "none")]  # no candidate in the baselines'
    assert fast.speedup("eager") == pytest.approx(4.0) and slow.speedup("eager") == pytest.approx(2.0)
    assert fast.timing[0].baselines == slow.timing[0].baselines
    assert fast.timing_note == "baselines timed: eager" and fast.ceiling_gbps == 4000.0
    assert fast.timing[0].achieved_gbps == pytest.approx(fast.timing[0].bytes_moved / 0.5e-3 / 1e9)
    assert fast.duration_s > 3.0 and fast.isolation == "bwrap"
    assert (raises.status, raises.failed_stage, raises.error_class) == (Status.crashed, Stage.timing, "RuntimeError")
    assert "boom" in raises.message and raises.timing == ()
    assert wrong == items[3][1]


def test_a_candidate_whose_timed_call_is_wrong_on_fresh_inputs_is_incorrect_at_timing(gpu_less_cuda, problem):
    honest, lies = harness.time_many(
        [(s, checked(s)) for s in ("fast", "fast lies")], problem, device="cuda", baselines=("eager",)
    )
    assert honest.passed and honest.speedup("eager") == pytest.approx(4.0)
    assert (lies.status, lies.failed_stage, lies.error_class) == (Status.incorrect, Stage.timing, "ValueMismatch")
    assert "the timed call re-run on fresh inputs" in lies.message and lies.timing == ()


def test_a_process_that_dies_is_retried_one_candidate_at_a_time(gpu_less_cuda, problem):
    items = [(s, checked(s)) for s in ("fast", "kills", "slow")]
    fast, kills, slow = harness.time_many(items, problem, device="cuda")
    assert gpu_less_cuda.calls == [["fast", "kills", "slow"], ["fast"], ["kills"], ["slow"]]
    assert fast.passed and slow.passed and fast.speedup("torch_compile") == pytest.approx(4.0)
    assert fast.timing_note is None  # both baselines were timed
    assert (kills.status, kills.failed_stage, kills.error_class) == (Status.crashed, Stage.timing, "SIGKILL")
    assert "SIGKILL" in kills.message


def test_an_implausible_bandwidth_is_refused(gpu_less_cuda, problem, monkeypatch):
    monkeypatch.setattr("evaluation.ceiling.copy_ceiling_gbps", lambda name, driver: 0.001)
    monkeypatch.setattr(harness, "IMPLAUSIBLE_MIN_BYTES", 0)
    (result,) = harness.time_many([("fast", checked("fast"))], problem, device="cuda", baselines=("eager",))
    assert (result.status, result.failed_stage, result.error_class) == (
        Status.rejected,
        Stage.timing,
        "ImplausibleTiming",
    )


def test_nothing_is_timed_on_the_cpu_and_bad_baselines_are_refused(problem, monkeypatch):
    items = [("fast", checked("fast"))]
    assert harness.time_many(items, problem, device="cpu") == [items[0][1]]
    with pytest.raises(ValueError, match="must include 'eager'"):
        harness.time_many(items, problem, device="cpu", baselines=("torch_compile",))
    with pytest.raises(ValueError, match="must include 'eager'"):
        harness.time_many(items, problem, device="cpu", baselines=("eager", "tvm"))
