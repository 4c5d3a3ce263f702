"""The statistics the parent builds from GPU samples: quantiles and speedup intervals (pure Python)."""

import pytest

from evaluation.records import TimingStats
from evaluation.timing import NOISE_FLOOR, quantile, speedup, summarize


def stats(p20, p50, p80):
    return TimingStats(
        latency_ms_p20=p20,
        latency_ms_p50=p50,
        latency_ms_p80=p80,
        latency_ms_min=p20,
        latency_ms_mean=p50,
        n_samples=100,
        n_warmup=8,
        l2_flushed=True,
        method="cuda_graph",
    )


def test_quantile_interpolates_between_closest_ranks_like_numpy():
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.2) == pytest.approx(1.8)
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0], n_warmup=3, l2_flushed=True, method="cuda_graph")
    assert (s.latency_ms_p50, s.latency_ms_min, s.latency_ms_mean, s.n_samples) == (3.0, 1.0, 3.0, 5)


def test_a_wide_spread_sets_the_speedup_interval():
    s = speedup("eager", stats(1.8, 2.0, 2.2), stats(0.9, 1.0, 1.1))
    assert s.ratio == 2.0 and s.significant
    assert (s.ratio_low, s.ratio_high) == pytest.approx((1.8 / 1.1, 2.2 / 0.9))


def test_a_very_steady_kernel_still_gets_the_run_to_run_floor():
    # p20-p80 of 0.1%: the interval inside one process would be +-0.2%, between processes it is not.
    s = speedup("eager", stats(1.009, 1.01, 1.011), stats(0.999, 1.0, 1.001))
    assert s.ratio == pytest.approx(1.01)
    assert (s.ratio_low, s.ratio_high) == pytest.approx((1.01 * (1 - NOISE_FLOOR), 1.01 * (1 + NOISE_FLOOR)))
    assert not s.significant  # a 1% win is inside the noise between two processes


def test_a_clear_loss_is_significant_too():
    s = speedup("torch_compile", stats(0.49, 0.5, 0.51), stats(0.99, 1.0, 1.01))
    assert s.ratio == 0.5 and s.ratio_high < 1.0 and s.significant
