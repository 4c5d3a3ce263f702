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
    """A prepared call on one set of static input tensors, into which each input set is copied before a
    call: one CUDA graph captured on them, or the eager call where capture fails.

    Copying every input set into the same tensors (outside the timed region) means a kernel that
    stops writing after some replays leaves an answer for other inputs behind, and `check` can run
    the very call that was timed on inputs the candidate's Python never saw.
    """

    def __init__(
        self,
        fn: Callable,
        input_sets: list[list[Any]],
        static: list[Any],
        graph,
        graph_out,
        error: str | None,
        method: str,
    ):
        self.fn, self.input_sets, self.static = fn, input_sets, static
        self.graph, self.graph_out, self.capture_error, self.method = graph, graph_out, error, method
        self.last_out: Any = None

    def load(self, i: int) -> None:
        copy_into(self.static, self.input_sets[i % len(self.input_sets)])

    def launch(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.last_out = self.fn(*self.static)

    def __call__(self, i: int) -> None:
        self.load(i)
        self.launch()

    def outputs(self) -> Any:
        """What the last launch produced (for a graph: its static output tensors)."""
        return self.graph_out if self.graph is not None else self.last_out

    def check(self, fresh: list[Any]) -> Any:
        """Run the timed call once more on `fresh` inputs; its outputs (the caller judges them)."""
        copy_into(self.static, fresh)
        self.launch()
        return self.outputs()


def copy_into(static: list[Any], values: list[Any]) -> None:
    import torch

    for dst, src in zip(static, values):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)


def snapshot(value: Any) -> Any:
    """A copy of outputs that later calls cannot overwrite (for the first/last timed-output checks)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(snapshot(v) for v in value)
    return value


def _static_inputs(input_sets: list[list[Any]]) -> list[Any]:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in input_sets[0]]


class Bench:
    """Timing on a GPU: CUDA events around a graph replay (or the eager call), L2 flushed before each."""

    l2_flushed = True
    estimate_samples = 3  # timed calls n_samples() spends on its estimate (they count as warm-up)
    capturing = False  # True while prepare() captures a graph (the caller's forward must not sync then)

    def __init__(self, *, budget_s: float = 0.4, min_samples: int = 20, max_samples: int = 200, n_warmup: int = 5):
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = int(getattr(props, "L2_cache_size", 0) or (64 << 20))
        self.flush_buf = torch.empty(max(3 * l2, 64 << 20), dtype=torch.uint8, device="cuda")
        self.budget_s, self.min_samples, self.max_samples, self.n_warmup = budget_s, min_samples, max_samples, n_warmup

    def prepare(self, fn: Callable, input_sets: list[list[Any]], *, use_graph: bool = True) -> Runner:
        """Warm up on every input set (compiles kernels), then capture one graph if the call allows it."""
        import torch

        from evaluation.guards import Verdict

        static = _static_inputs(input_sets)
        for inputs in input_sets:
            copy_into(static, inputs)
            fn(*static)
        torch.cuda.synchronize()
        if not use_graph:
            return Runner(fn, input_sets, static, None, None, None, "cuda_events")
        verdict = None
        try:
            graph = torch.cuda.CUDAGraph()
            self.capturing = True
            try:
                with torch.cuda.graph(graph):
                    try:
                        out = fn(*static)
                    except Verdict as v:  # kept apart: ending a broken capture may raise over it
                        verdict = v
            finally:
                self.capturing = False
            torch.cuda.synchronize()
        except Exception as exc:  # not capturable (host sync, allocation policy...): time it eagerly
            if verdict is not None:
                raise verdict from None
            torch.cuda.synchronize()
            return Runner(fn, input_sets, static, None, None, f"{type(exc).__name__}: {exc}"[:300], "cuda_events")
        if verdict is not None:
            raise verdict
        return Runner(fn, input_sets, static, graph, out, None, "cuda_graph")

    def sample(self, runner: Runner, n: int, *, start: int = 0, keep: tuple[int, ...] = ()) -> tuple[list[float], dict]:
        """n timed calls; `keep`: sample numbers whose outputs are snapshotted (outside the timed region)."""
        import torch

        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        kept = {}
        for i in range(n):
            runner.load(start + i)
            self.flush_buf.zero_()
            starts[i].record()
            runner.launch()
            ends[i].record()
            if i in keep:
                kept[i] = snapshot(runner.outputs())
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)], kept

    def n_samples(self, runner: Runner) -> int:
        """Enough samples to fill the time budget, within [min_samples, max_samples]."""
        estimate = sorted(self.sample(runner, 3)[0])[1]
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

    def measure(self, runner: Runner) -> tuple[TimingStats, dict[str, tuple[int, Any]]]:
        """Stats of a prepared runner, and the outputs of its first and last measured call with the
        number of the input set each ran on: {"first": (set, outputs), "last": (set, outputs)}."""
        n = self.n_samples(runner)
        self.sample(runner, self.n_warmup)
        samples, kept = self.sample(runner, n, keep=(0, n - 1))
        k = len(runner.input_sets)
        checks = {"first": (0, kept[0]), "last": ((n - 1) % k, kept[n - 1])}
        stats = summarize(
            samples, n_warmup=self.n_warmup + self.estimate_samples, l2_flushed=self.l2_flushed, method=runner.method
        )
        return stats, checks


class HostBench(Bench):
    """The same protocol without a GPU: eager calls timed by the host clock. The CPU interpreter
    measures no kernel speed; this exists so the timing stage's checks run in CPU tests."""

    l2_flushed = False
    estimate_samples = 0

    def __init__(self, *, budget_s: float = 0.4, min_samples: int = 20, max_samples: int = 200, n_warmup: int = 5):
        self.budget_s, self.min_samples, self.max_samples, self.n_warmup = budget_s, min_samples, max_samples, n_warmup

    def prepare(self, fn: Callable, input_sets: list[list[Any]], *, use_graph: bool = True) -> Runner:
        static = _static_inputs(input_sets)
        for inputs in input_sets:
            copy_into(static, inputs)
            fn(*static)
        return Runner(fn, input_sets, static, None, None, None, "host_clock")

    def sample(self, runner: Runner, n: int, *, start: int = 0, keep: tuple[int, ...] = ()) -> tuple[list[float], dict]:
        import time

        samples, kept = [], {}
        for i in range(n):
            runner.load(start + i)
            t0 = time.perf_counter()
            runner.launch()
            samples.append((time.perf_counter() - t0) * 1e3)
            if i in keep:
                kept[i] = snapshot(runner.outputs())
        return samples, kept

    def n_samples(self, runner: Runner) -> int:
        return self.min_samples

    def _flush_ms(self) -> float:
        return 0.0
