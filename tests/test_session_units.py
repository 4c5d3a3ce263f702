"""The parts of the session that decide on measured numbers, checked with hand-built GPU records
(no GPU here): the executor's timing lock, the winner rule, re-measure records, outcomes per bucket."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import torch

from agent.search.executors import LocalExecutor
from agent.search.session import pick_best
from agent.search.stopping import measured_speedup
from agent.search.writeback import outcomes_for, remeasure_as_eval, shape_bucket
from evaluation.records import (
    Baseline,
    EvalResult,
    Fingerprint,
    ProblemInfo,
    RemeasuredCandidate,
    RemeasuredCase,
    RemeasureResult,
    ShapeCase,
    Speedup,
    Status,
    TimedCase,
    TimingStats,
    Tolerance,
)
from store.records import CandidateRecord

FP = Fingerprint(
    device_kind="cuda",
    device_name="NVIDIA H200",
    arch="sm_90",
    triton_version="3.6",
    torch_version="2.11",
    python_version="3.12",
    kernelscout_version="0.1.0",
)
PROBLEM = ProblemInfo(
    problem_id="p1",
    name="layernorm",
    op_family="layernorm",
    source_path="/x/layernorm.py",
    source_sha256="s",
    builtin=True,
    shape_cases=(ShapeCase(case_id="M=4096,N=4096|bfloat16", params={"M": 4096, "N": 4096}, dtype="bfloat16"),),
    dtypes=("bfloat16",),
    tolerances={"bfloat16": Tolerance(atol=1.6e-2, rtol=1.6e-2)},
)


def stats(p50):
    return TimingStats(
        latency_ms_p20=p50 * 0.95,
        latency_ms_p50=p50,
        latency_ms_p80=p50 * 1.05,
        latency_ms_min=p50 * 0.9,
        latency_ms_mean=p50,
        n_samples=100,
        n_warmup=10,
        l2_flushed=True,
        method="cuda_graph",
    )


def timed(cid, *cases, status=Status.passed):
    """cases: (params, ratio, low, high)"""
    return EvalResult(
        status=status,
        candidate_sha256=cid,
        problem_id="p1",
        problem_name="layernorm",
        device="cuda",
        fingerprint=FP,
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
        timing=tuple(
            TimedCase(
                case_id=f"c{i}",
                params=params,
                dtype="bfloat16",
                candidate=stats(1.0 / r),
                baselines=(Baseline(name="eager", timing=stats(1.0)),),
                speedups=(Speedup(baseline="eager", ratio=r, ratio_low=lo, ratio_high=hi, significant=lo > 1),),
            )
            for i, (params, r, lo, hi) in enumerate(cases)
        ),
    )


def test_the_winner_on_an_untimed_device_is_the_first_pass():
    assert pick_best(["a", "b"], timed=False, remeasured={}, seeds=["a"]) == "a"
    assert pick_best([], timed=False, remeasured={}, seeds=[]) is None


def test_the_fastest_remeasured_win_outside_the_noise_wins():
    remeasured = {"b": timed("b", ({"M": 8}, 1.3, 1.1, 1.5)), "c": timed("c", ({"M": 8}, 1.6, 1.2, 2.0))}
    assert pick_best(["seed", "b", "c"], timed=True, remeasured=remeasured, seeds=["seed"]) == "c"


def test_a_win_inside_the_noise_leaves_the_seed_as_best():
    remeasured = {"b": timed("b", ({"M": 8}, 1.3, 0.9, 1.5))}  # one round was a loss
    assert pick_best(["seed", "b"], timed=True, remeasured=remeasured, seeds=["seed"]) == "seed"
    assert pick_best(["b"], timed=True, remeasured=remeasured, seeds=[]) is None


def test_a_remeasure_becomes_an_evaluation_record_with_its_round_spread():
    case = RemeasuredCase(
        case_id="M=4096,N=4096|bfloat16",
        params={"M": 4096, "N": 4096},
        dtype="bfloat16",
        candidate_p50s_ms=(0.50, 0.40, 0.45),
        baseline_p50s_ms=(0.60, 0.60, 0.63),
        speedup=1.4,
        speedup_min=1.2,
        speedup_max=1.5,
        significant=True,
        method="cuda_graph",
    )
    rc, rm = _remeasured(case)
    result = remeasure_as_eval(rc, rm, timed("b", ({"M": 4096, "N": 4096}, 1.3, 1.1, 1.5)))
    t = result.timing[0]
    assert result.status is Status.passed and result.candidate_sha256 == "b" * 64
    assert (t.candidate.latency_ms_p50, t.candidate.latency_ms_min, t.candidate.n_samples) == (0.45, 0.40, 3)
    assert t.baselines[0].timing.latency_ms_p50 == 0.60
    m = measured_speedup(result)
    assert (m.ratio, m.ratio_low, m.ratio_high) == pytest.approx((1.4, 1.2, 1.5))
    assert "3 rounds interleaved" in result.timing_note
    assert [b.name for b in t.baselines] == ["eager"]  # no compile rounds, no compile number


def _remeasured(case) -> tuple:
    """One candidate's re-measure holding `case`, three rounds on the GPU fingerprint."""
    rc = RemeasuredCandidate(name="b", candidate_sha256="b" * 64, cases=(case,))
    rm = RemeasureResult(
        problem_id="p1",
        problem_name="layernorm",
        device="cuda",
        rounds=3,
        candidates=(rc,),
        fingerprint=FP,
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=2.0,
    )
    return rc, rm


def _compiled_case(**extra) -> RemeasuredCase:
    """A case re-measured against eager and torch.compile (1.0x [0.9, 1.1]), plus `extra` fields."""
    return RemeasuredCase(
        case_id="c0",
        params={"M": 8},
        dtype="bfloat16",
        candidate_p50s_ms=(0.50, 0.40, 0.45),
        baseline_p50s_ms=(0.60, 0.60, 0.63),
        speedup=1.4,
        speedup_min=1.2,
        speedup_max=1.5,
        significant=True,
        method="cuda_graph",
        compile_p50s_ms=(0.45, 0.44, 0.46),
        speedup_vs_compile=1.0,
        speedup_vs_compile_min=0.9,
        speedup_vs_compile_max=1.1,
        **extra,
    )


def test_a_remeasure_with_compile_rounds_carries_both_ratios_and_the_bandwidth():
    case = _compiled_case()
    rc, rm = _remeasured(case)
    searched = timed("b", ({"M": 8}, 1.3, 1.1, 1.5)).model_copy(update={"ceiling_gbps": 4000.0})
    searched = searched.model_copy(update={"timing": (searched.timing[0].model_copy(update={"bytes_moved": 900_000}),)})
    result = remeasure_as_eval(rc, rm, searched)
    t = result.timing[0]
    assert [b.name for b in t.baselines] == ["eager", "torch_compile"]
    vs_compile = measured_speedup(result, "torch_compile")
    assert (vs_compile.ratio, vs_compile.ratio_low, vs_compile.ratio_high) == (1.0, 0.9, 1.1)
    assert vs_compile.significant is False  # the interval straddles 1: a tie with torch.compile
    assert t.achieved_gbps == pytest.approx(900_000 / 0.45e-3 / 1e9)
    assert t.pct_of_ceiling == pytest.approx(100 * t.achieved_gbps / 4000.0)
    assert "eager and torch.compile" in result.timing_note


def test_a_remeasure_with_max_autotune_rounds_carries_its_ratio_beside_compiles():
    case = _compiled_case(
        autotune_p50s_ms=(0.36, 0.35, 0.37),
        speedup_vs_autotune=0.8,
        speedup_vs_autotune_min=0.72,
        speedup_vs_autotune_max=0.88,
    )
    rc, rm = _remeasured(case)
    result = remeasure_as_eval(rc, rm, timed("b", ({"M": 8}, 1.3, 1.1, 1.5)))
    t = result.timing[0]
    assert [b.name for b in t.baselines] == ["eager", "torch_compile", "torch_compile_max_autotune"]
    assert t.baselines[2].timing.latency_ms_p50 == 0.36
    tuned = measured_speedup(result, "torch_compile_max_autotune")
    assert (tuned.ratio, tuned.ratio_low, tuned.ratio_high) == (0.8, 0.72, 0.88)
    assert tuned.significant is True  # every round lost to max-autotune: a significant slowdown
    assert "eager, torch.compile and max-autotune" in result.timing_note


def test_outcomes_are_written_per_shape_bucket_with_their_interval():
    cand = CandidateRecord(
        candidate_id="b" * 64,
        run_id="r",
        parent_id="a" * 64,
        generation=1,
        proposer="template",
        transformation_tags=("rows_per_program=4",),
        source="x",
        created_at="t",
    )
    result = timed("b", ({"M": 4096, "N": 4099}, 1.3, 1.1, 1.5), ({"M": 1, "N": 64}, 0.9, 0.8, 1.0))
    out = outcomes_for(cand, result, "e2", PROBLEM, FP, parent_eval_id="e1")
    assert [o.shape_bucket for o in out] == ["M=4096..8191,N=4096..8191", "M=1,N=64..127"]
    assert [(o.speedup, o.speedup_low, o.speedup_high) for o in out] == [(1.3, 1.1, 1.5), (0.9, 0.8, 1.0)]
    assert all(o.transformation == "rows_per_program=4" and o.evidence_eval_ids == ("e2", "e1") for o in out)
    assert out[0].latency_ms_p50 == pytest.approx(1 / 1.3)
    assert len({o.outcome_id for o in out}) == 2
    assert outcomes_for(cand, result, "e2", PROBLEM, FP)[0].outcome_id == out[0].outcome_id  # resume-safe


def test_shape_bucket_groups_sizes_by_power_of_two():
    assert shape_bucket({"N": 4096, "M": 1}) == "M=1,N=4096..8191"
    assert shape_bucket({"N": 4099}) == shape_bucket({"N": 8000})


class Recorder:
    """A stand-in evaluator (the functions of `evaluation` an executor calls) that records what ran at
    the same time as what."""

    def __init__(self):
        self.active = {"check": 0, "time": 0}
        self.peak = {"check": 0, "time": 0}
        self.overlap = 0  # a timing that started while a check was running, or the reverse
        self.timing_calls: list[tuple[list[str], tuple[str, ...]]] = []
        self.checked = 0
        self.compiling = 0  # checks compiling before their lane (in_lane)
        self.peak_compile = 0
        self.lock = threading.Lock()

    @staticmethod
    def resolve_device(device):
        return device

    @staticmethod
    def fingerprint(device):
        return FP

    def _enter(self, kind):
        with self.lock:
            other = "time" if kind == "check" else "check"
            self.overlap += self.active[other] > 0
            self.active[kind] += 1
            self.checked += kind == "check"
            self.peak[kind] = max(self.peak[kind], self.active[kind])

    def _leave(self, kind):
        with self.lock:
            self.active[kind] -= 1

    def evaluate(self, source, problem, *, device, timeout_s, trials, time_it=True, lane=None):
        assert not time_it  # the executor asks for correctness only and times separately
        with in_lane(self, lane):
            self._enter("check")
            time.sleep(0.05)
            self._leave("check")
        return timed(source, status=Status.incorrect if source.startswith("bad") else Status.passed)

    def time_many(self, items, problem, *, device, timeout_s, baselines):
        self._enter("time")
        time.sleep(0.05)
        self.timing_calls.append(([src for src, _ in items], tuple(baselines)))
        self._leave("time")
        return [timed(src, ({"M": 8}, 2.0, 1.8, 2.2)) for src, _ in items]


@contextmanager
def in_lane(rec, lane):
    """What the harness does with a check's lane: compile first (counted in `rec.compiling`), then
    the battery inside the lane (isolation.lane_gate); no lane: the executor already holds the device."""
    if lane is None:
        yield
        return
    with rec.lock:
        rec.compiling += 1
        rec.peak_compile = max(rec.peak_compile, rec.compiling)
    time.sleep(0.1)  # Triton's compile, on the CPU
    with rec.lock:
        rec.compiling -= 1
    assert lane.acquire(threading.Event())
    try:
        yield
    finally:
        lane.release()


def test_a_gpu_batch_checks_in_parallel_then_times_the_passing_candidates_in_one_call():
    rec = Recorder()
    with LocalExecutor("cuda", 3, evaluator=rec) as ex:
        landed = list(ex.evaluate_batch(["a", "bad1", "c", "d", "bad2", "f"], PROBLEM, baselines=("eager",)))
    by_pos = dict(landed)
    assert sorted(by_pos) == [0, 1, 2, 3, 4, 5]
    assert [by_pos[i].candidate_sha256 for i in range(6)] == ["a", "bad1", "c", "d", "bad2", "f"]
    assert [by_pos[i].status for i in (1, 4)] == [Status.incorrect, Status.incorrect]
    assert [measured_speedup(by_pos[i]).ratio for i in (0, 2, 3, 5)] == [2.0, 2.0, 2.0, 2.0]
    assert rec.timing_calls == [(["a", "c", "d", "f"], ("eager",))]  # one timing, passing ones only, in order
    assert rec.peak == {"check": 3, "time": 1} and rec.overlap == 0  # no check ever ran during the timing
    assert {landed[0][1].status, landed[1][1].status} == {Status.incorrect}  # failures land before the timing


def test_checks_on_a_gpu_share_it_only_as_many_at_once_as_it_has_lanes(monkeypatch):
    rec = Recorder()
    with LocalExecutor("cuda", 6, evaluator=rec, lanes=2) as ex:
        landed = dict(ex.evaluate_batch([f"c{i}" for i in range(6)], PROBLEM, baselines=("eager",)))
    assert sorted(landed) == list(range(6)) and ex.lanes == 2
    assert rec.peak == {"check": 2, "time": 1} and rec.overlap == 0
    assert rec.peak_compile > 2  # compiles run side by side, past the lanes: only the batteries wait
    monkeypatch.setenv("KSCOUT_GPU_LANES", "4")
    rec = Recorder()
    with LocalExecutor("cuda", 6, evaluator=rec) as ex:  # from the environment
        dict(ex.evaluate_batch([f"c{i}" for i in range(8)], PROBLEM))
    assert ex.lanes == 4 and rec.peak["check"] == 4
    with LocalExecutor("cuda", 2, evaluator=Recorder()) as ex:  # never more lanes than workers
        assert ex.lanes == 2
    with LocalExecutor("cpu", 3, evaluator=Recorder()) as ex:  # a CPU: the workers alone bound the checks
        assert ex.lanes == 3
    monkeypatch.setenv("KSCOUT_GPU_LANES", "many")
    with pytest.raises(ValueError, match="KSCOUT_GPU_LANES must be a whole number"):
        LocalExecutor("cuda", 2, evaluator=Recorder())
    with pytest.raises(ValueError, match="at least one lane"):
        LocalExecutor("cuda", 2, evaluator=Recorder(), lanes=0)


class Crowded(Recorder):
    """Checks that run out of device memory whenever another check shares the GPU: "oom" candidates
    report it from the worker, "raise" candidates from the parent (its own draw never fitting)."""

    def __init__(self, always: bool = False):
        super().__init__()
        self.always = always  # out of memory even alone: the candidate's own doing
        self.alone: list[str] = []
        self.checks: list[str] = []

    def evaluate(self, source, problem, *, device, timeout_s, trials, time_it=True, lane=None):
        with in_lane(self, lane):
            self._enter("check")
            time.sleep(0.05)
            with self.lock:
                crowded = self.always or self.active["check"] > 1
                self.checks.append(source)
                if self.active["check"] == 1:
                    self.alone.append(source)
            self._leave("check")
        if crowded and source.startswith("raise"):
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        if crowded and source.startswith("oom"):
            return EvalResult(
                status=Status.crashed,
                failed_stage="correctness",
                error_class="OutOfMemoryError",
                message="CUDA out of memory",
                candidate_sha256=source,
                problem_id="p1",
                problem_name="layernorm",
                device="cuda",
                fingerprint=FP,
                started_at="2026-01-01T00:00:00+00:00",
                duration_s=1.0,
            )
        return timed(source, status=Status.passed)


def test_a_check_starved_of_device_memory_by_its_siblings_is_checked_again_alone():
    rec = Crowded()
    with LocalExecutor("cuda", 4, evaluator=rec) as ex:
        landed = dict(ex.evaluate_batch(["a", "oom1", "raise1", "b"], PROBLEM, baselines=("eager",)))
    assert {i: r.status for i, r in landed.items()} == {i: Status.passed for i in range(4)}
    assert {"oom1", "raise1"} <= set(rec.alone)  # the verdict that stands came from a check with the GPU to itself
    assert rec.timing_calls == [(["a", "oom1", "raise1", "b"], ("eager",))]  # then timed with the rest
    assert rec.overlap == 0


def test_running_out_of_memory_with_the_gpu_to_itself_is_the_candidates_own_failure():
    rec = Crowded(always=True)
    with LocalExecutor("cuda", 1, evaluator=rec) as ex:  # one worker: nothing shared
        ((i, result),) = ex.evaluate_batch(["oom1"], PROBLEM)
    assert (i, result.status, result.error_class) == (0, Status.crashed, "OutOfMemoryError")
    assert rec.checks == ["oom1"] and rec.timing_calls == []
    rec = Crowded(always=True)
    with LocalExecutor("cuda", 3, evaluator=rec) as ex:  # shared, then alone: still OOM
        landed = dict(ex.evaluate_batch(["oom1", "a"], PROBLEM))
    assert (landed[0].status, landed[0].error_class) == (Status.crashed, "OutOfMemoryError")
    assert rec.checks.count("oom1") == 2 and rec.alone[-1] == "oom1"


def test_with_one_gpu_lane_a_check_out_of_memory_had_the_device_alone_and_is_not_run_again():
    rec = Crowded(always=True)
    with LocalExecutor("cuda", 4, evaluator=rec, lanes=1) as ex:
        landed = dict(ex.evaluate_batch(["oom1", "a"], PROBLEM))
    assert (landed[0].status, landed[0].error_class) == (Status.crashed, "OutOfMemoryError")
    assert rec.checks.count("oom1") == 1 and ex.rechecked == 0 and rec.peak["check"] == 1


def test_batches_of_several_searches_sharing_one_executor_never_time_during_a_check():
    """optimize-many: four searches submit batches to one executor at once; timings stay exclusive."""
    rec = Recorder()
    with LocalExecutor("cuda", 3, evaluator=rec) as ex:

        def search(tag):
            return dict(ex.evaluate_batch([f"{tag}{i}" for i in range(3)], PROBLEM))

        with ThreadPoolExecutor(4) as searches:
            landed = list(searches.map(search, "abcd"))
    assert [sorted(r.candidate_sha256 for r in batch.values()) for batch in landed] == [
        [f"{t}{i}" for i in range(3)] for t in "abcd"
    ]
    assert rec.peak["time"] == 1 and rec.peak["check"] >= 2 and rec.overlap == 0
    assert sorted(srcs for srcs, _ in rec.timing_calls) == [[f"{t}{i}" for i in range(3)] for t in "abcd"]
    assert {b for _, b in rec.timing_calls} == {("eager", "torch_compile")}


def test_a_remeasure_goes_through_the_executor_with_the_device_to_itself():
    rec = Recorder()
    seen = []

    def remeasure(sources, problem, *, device, rounds, baselines):
        seen.append((sorted(sources), device, rounds, baselines, rec.active["check"]))
        return "remeasured"

    rec.remeasure = remeasure
    with LocalExecutor("cuda", 2, evaluator=rec) as ex:
        assert ex.remeasure({"x": "a", "y": "b"}, PROBLEM, rounds=4) == "remeasured"
        assert ex.environment() is FP
    assert seen == [(["x", "y"], "cuda", 4, ("eager", "torch_compile"), 0)]


def test_a_cancelled_executor_drops_queued_checks_and_refuses_new_work():
    from agent.search.executors import Cancelled

    rec = Recorder()
    ex = LocalExecutor("cpu", 1, evaluator=rec)
    batch = ex.evaluate_batch([f"c{i}" for i in range(20)], PROBLEM)
    first = next(batch)
    ex.cancel()
    with pytest.raises(Cancelled):
        list(batch)
    with pytest.raises(Cancelled):
        list(ex.evaluate_batch(["late"], PROBLEM))
    ex.close()
    assert first[1].candidate_sha256 == "c0"
    assert rec.peak["check"] == 1 and rec.checked < 20  # the queued ones never ran


def test_on_the_cpu_a_batch_is_never_timed():
    rec = Recorder()
    with LocalExecutor("cpu", 2, evaluator=rec) as ex:
        landed = dict(ex.evaluate_batch(["a", "b"], PROBLEM))
    assert sorted(landed) == [0, 1] and rec.timing_calls == []
