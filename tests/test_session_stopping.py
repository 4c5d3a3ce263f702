"""Stop rules: each limit fires on its own, in a fixed order, and only measured significant wins count."""

import pytest

from agent.search.stopping import MAX_EMPTY_STEPS, Progress, StopReason, measured_speedup, should_stop
from evaluation.records import (
    Baseline,
    EvalResult,
    Fingerprint,
    Speedup,
    Status,
    TimedCase,
    TimingStats,
)
from store.records import StopRule

FP = Fingerprint(
    device_kind="cuda",
    device_name="NVIDIA H200",
    arch="sm_90",
    triton_version="3.9",
    torch_version="2.13",
    python_version="3.11",
    kernelscout_version="0.1.0",
)


def timed_result(*speedups, status=Status.passed):
    stats = TimingStats(
        latency_ms_p20=1,
        latency_ms_p50=1,
        latency_ms_p80=1,
        latency_ms_min=1,
        latency_ms_mean=1,
        n_samples=10,
        n_warmup=2,
        l2_flushed=True,
        method="cuda_graph",
    )
    cases = tuple(
        TimedCase(
            case_id=f"c{i}",
            params={"M": 8},
            dtype="float32",
            candidate=stats,
            baselines=(Baseline(name="eager", timing=stats),),
            speedups=(Speedup(baseline="eager", ratio=r, ratio_low=lo, ratio_high=hi, significant=lo > 1 or hi < 1),),
        )
        for i, (r, lo, hi) in enumerate(speedups)
    )
    return EvalResult(
        status=status,
        candidate_sha256="x",
        problem_id="p",
        problem_name="layernorm",
        device="cuda",
        timing=cases,
        fingerprint=FP,
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
    )


def test_measured_speedup_is_the_geometric_mean_of_cases_and_their_intervals():
    m = measured_speedup(timed_result((2.0, 1.5, 2.5), (0.5, 0.4, 0.6)))
    assert m.ratio == pytest.approx(1.0)
    assert m.ratio_low == pytest.approx((1.5 * 0.4) ** 0.5)
    assert m.ratio_high == pytest.approx((2.5 * 0.6) ** 0.5)
    assert m.significant is False


def test_untimed_or_failed_results_have_no_measured_speedup():
    assert measured_speedup(timed_result()) is None
    assert measured_speedup(timed_result((3.0, 2.0, 4.0), status=Status.incorrect)) is None


RULE = StopRule(max_evaluations=10, max_minutes=5.0, target_speedup=1.5, stall_limit=4, max_cost_usd=1.0)


def progress(**kw):
    return Progress(**{"evaluations": 1, "elapsed_minutes": 0.1, **kw})


@pytest.mark.parametrize(
    "kw, reason",
    [
        ({}, None),
        ({"best_significant_speedup": 1.6}, StopReason.target_reached),
        ({"best_significant_speedup": 1.4}, None),
        ({"evaluations": 10}, StopReason.evaluation_budget),
        ({"elapsed_minutes": 5.0}, StopReason.time_budget),
        ({"evaluations_since_improvement": 4}, StopReason.stalled),
        ({"cost_usd": 1.0}, StopReason.cost_ceiling),
        ({"proposer_exhausted": True}, StopReason.proposer_exhausted),
        ({"empty_steps_in_a_row": MAX_EMPTY_STEPS}, StopReason.proposer_failing),
    ],
)
def test_each_rule_fires_on_its_own(kw, reason):
    assert should_stop(RULE, progress(**kw)) == reason


def test_target_wins_over_a_budget_reached_at_the_same_time():
    p = progress(evaluations=10, best_significant_speedup=2.0, cost_usd=5.0)
    assert should_stop(RULE, p) is StopReason.target_reached


def test_cost_ceiling_comes_before_the_evaluation_budget():
    assert should_stop(RULE, progress(evaluations=10, cost_usd=1.0)) is StopReason.cost_ceiling


def test_unset_limits_never_fire():
    rule = StopRule(max_evaluations=3)
    p = progress(
        elapsed_minutes=1e6, evaluations_since_improvement=10_000, cost_usd=1e6, best_significant_speedup=100.0
    )
    assert should_stop(rule, p) is None
