"""Measuring device time on a GPU, and the statistics and speedups built from the samples.

What a sample is: one call on one of several input sets (rotated, so no set stays in cache), after an
L2 flush (a write to a buffer larger than twice the L2), timed by CUDA events around a CUDA-graph
replay of the call when it can be captured, else around the eager call (which then also counts
Python launch overhead: `method` records which). Many samples after warm-up; the p50 is the number,
p20/p80 the spread. Baselines are measured the same way in the same process.

`Bench` runs in the worker (it touches the GPU); the statistics helpers are plain Python for the parent.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from evaluation.records import Speedup, TimingStats

NOT_MEASURED_CPU = "not measured on this device (cpu, Triton interpreter)"


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(samples_ms: Sequence[float], *, n_warmup: int, l2_flushed: bool, method: str) -> TimingStats:
    return TimingStats(
        latency_ms_p20=quantile(samples_ms, 0.2),
        latency_ms_p50=quantile(samples_ms, 0.5),
        latency_ms_p80=quantile(samples_ms, 0.8),
        latency_ms_min=min(samples_ms),
        latency_ms_mean=sum(samples_ms) / len(samples_ms),
        n_samples=len(samples_ms),
        n_warmup=n_warmup,
        l2_flushed=l2_flushed,
        method=method,
    )


# Run-to-run floor on a speedup's interval. On an H200 (2026-12-02, `python -m evaluation.bench`, every
# seed timed in two processes) the p50 moved by up to 1.4% between processes on like-for-like cases,
# while some very steady kernels reported a p20-p80 spread of only 0.2%: the spread inside one process
# understates the noise between processes, so no interval is narrower than +-1.5%.
NOISE_FLOOR = 0.015


def speedup(baseline_name: str, baseline: TimingStats, candidate: TimingStats) -> Speedup:
    """Ratio of p50s; the interval pairs the spreads conservatively, never narrower than the run-to-run
    floor; significant if it excludes 1."""
    ratio = baseline.latency_ms_p50 / candidate.latency_ms_p50
    low = min(baseline.latency_ms_p20 / candidate.latency_ms_p80, ratio * (1 - NOISE_FLOOR))
    high = max(baseline.latency_ms_p80 / candidate.latency_ms_p20, ratio * (1 + NOISE_FLOOR))
    return Speedup(
        baseline=baseline_name,
        ratio=ratio,
        ratio_low=low,
        ratio_high=high,
        significant=low > 1.0 or high < 1.0,
    )


class Runner:
    """A prepared call: CUDA graphs captured per input set, or the eager fallback."""

    def __init__(self, fn: Callable, input_sets: list[list[Any]], graphs: list | None, error: str | None):
        self.fn, self.input_sets, self.graphs, self.capture_error = fn, input_sets, graphs, error
        self.method = "cuda_graph" if graphs else "cuda_events"

    def __call__(self, i: int) -> None:
        if self.graphs:
            self.graphs[i % len(self.graphs)].replay()
        else:
            self.fn(*self.input_sets[i % len(self.input_sets)])


class Bench:
    def __init__(self, *, budget_s: float = 0.4, min_samples: int = 20, max_samples: int = 200, n_warmup: int = 5):
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = int(getattr(props, "L2_cache_size", 0) or (64 << 20))
        self.flush_buf = torch.empty(max(3 * l2, 64 << 20), dtype=torch.uint8, device="cuda")
        self.budget_s, self.min_samples, self.max_samples, self.n_warmup = budget_s, min_samples, max_samples, n_warmup

    def prepare(self, fn: Callable, input_sets: list[list[Any]], *, use_graph: bool = True) -> Runner:
        """Warm up (compiles kernels), then capture one graph per input set if the call allows it."""
        import torch

        for inputs in input_sets:
            fn(*inputs)
        torch.cuda.synchronize()
        if not use_graph:
            return Runner(fn, input_sets, None, None)
        graphs = []
        try:
            for inputs in input_sets:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fn(*inputs)
                graphs.append(graph)
            torch.cuda.synchronize()
        except Exception as exc:  # not capturable (host sync, allocation policy...): time it eagerly
            torch.cuda.synchronize()
            return Runner(fn, input_sets, None, f"{type(exc).__name__}: {exc}"[:300])
        return Runner(fn, input_sets, graphs, None)

    def sample(self, runner: Runner, n: int, *, start: int = 0) -> list[float]:
        import torch

        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            self.flush_buf.zero_()
            starts[i].record()
            runner(start + i)
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def n_samples(self, runner: Runner) -> int:
        """Enough samples to fill the time budget, within [min_samples, max_samples]."""
        estimate = sorted(self.sample(runner, 3))[1]
        flush = sorted(self._flush_ms() for _ in range(3))[1]
        n = int(self.budget_s * 1e3 / max(estimate + flush, 1e-3))
        return max(self.min_samples, min(self.max_samples, n))

    def _flush_ms(self) -> float:
        import torch

        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        self.flush_buf.zero_()
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    def measure(self, fn: Callable, input_sets: list[list[Any]]) -> TimingStats:
        runner = self.prepare(fn, input_sets)
        n = self.n_samples(runner)
        self.sample(runner, self.n_warmup)
        return summarize(self.sample(runner, n), n_warmup=self.n_warmup + 3, l2_flushed=True, method=runner.method)
