"""What `kscout optimize-model` reports: one row per region and the model's verdict."""

from __future__ import annotations

from typing import Literal, Optional

from agent import Frozen

TOLERANCE_POLICY = (
    "each region's kernel is proven on its own problem under the strict policy (float32: atol = rtol = "
    "1e-4; an attention region at the built-in attention problem's 5e-4, which PyTorch's own float32 "
    "attention needs), since it is compared with the very ops it replaces; the assembled model is judged end to end "
    "under --tolerance (default kernelbench, atol = rtol = 1e-2), because per-region rounding compounds "
    "through the model's depth"
)


class RegionRow(Frozen):
    name: str  # r0, r1, ... in forward order
    kind: Literal["contraction", "chain", "reference"]
    ops: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    time_us: float  # profiled, one forward (device time on a GPU, CPU self time on a CPU)
    share: float  # of the regions' time, before
    state: Literal["searched", "cold", "reference", "not_lowered"]
    reason: Optional[str] = None  # why a region was not searched, or why it kept its reference ops
    problem_path: Optional[str] = None
    # the region whose search this one shares: the same problem (ops, shapes, dtype), as a deep MLP's hidden
    # layers or a transformer's repeated blocks are; one search, its winner used in every such region
    same_as: Optional[str] = None
    budget: int = 0  # evaluations, fixed before the searches start
    run_id: Optional[str] = None
    kernel: Optional[str] = None  # the winning candidate id; None: the reference ops stay
    schedule: Optional[str] = None  # the winner's schedule (its config line)
    judged: Optional[str] = None  # the region's own judge: the evaluator's status of the winner
    speedup: Optional[float] = None  # vs eager, the region alone; None: not measured (a CPU)
    # the library call the region's problem holds in place of the model's own ops (an attention region:
    # "F.scaled_dot_product_attention", attention.py): `speedup` is against that call, not the ops the
    # model ran, so the region's time after is its kernel's own (`kernel_us`)
    library: Optional[str] = None
    kernel_us: Optional[float] = None  # the winner's time in its own judge (geomean of the timed cases' p50)


class ModelReport(Frozen):
    model: str
    device: str
    clock: str  # "device" | "cpu"
    eager_us: float  # the eager model, one forward, profiled
    graph_us: float  # the captured graph, regions and glue
    glue_us: float
    regions: tuple[RegionRow, ...]
    assembled_path: Optional[str] = None
    verdict: str  # the evaluator's status of the assembled model, end to end
    verdict_message: Optional[str] = None
    tolerance_policy: str = TOLERANCE_POLICY
    model_tolerance: str = "kernelbench"
    speedup: Optional[float] = None  # the assembled model vs eager; None: not measured
    speedup_low: Optional[float] = None  # the interval of `speedup` (geomean of p20/p80 ratios)
    speedup_high: Optional[float] = None
    compile_speedup: Optional[float] = None  # vs torch.compile of the whole model; None: not measured
    autotune_speedup: Optional[float] = None  # vs max-autotune of the whole model; None: not asked or not measured
    speedup_source: Optional[str] = None  # "remeasure" (interleaved rounds) | "judge" (the judge's timing)
    timing_note: Optional[str] = None
    run_id: Optional[str] = None  # the model's run in the store (one candidate: the assembled model)
    candidate_id: Optional[str] = None  # what `kscout promote` takes; None: not recorded
    report_path: Optional[str] = None  # the HTML page with the time-share view

    def after_us(self, row: RegionRow) -> Optional[float]:
        """The region's time with its kernel: before / measured speedup (the kernel's own time where the
        speedup is against a library call, not the model's ops); its own time where the reference ops
        stay; None where a kernel runs but no speed was measured (a CPU)."""
        if row.kernel is None:
            return row.time_us
        if row.library is not None:
            return row.kernel_us
        return row.time_us / row.speedup if row.speedup else None

    def predicted_speedup(self) -> Optional[float]:
        """The model's speedup that the regions' own speedups predict (glue kept as it was): the check
        that the region table accounts for the measured gain; None where a region was not measured."""
        after = [self.after_us(r) for r in self.regions]
        if any(a is None for a in after):
            return None
        before = sum(r.time_us for r in self.regions) + self.glue_us
        total = sum(a or 0.0 for a in after) + self.glue_us
        return before / total if total > 0 else None

    def gain_shares(self) -> Optional[dict[str, float]]:
        """Each region's share of the model's gain (time saved / all time saved); None if not measured."""
        saved = {}
        for r in self.regions:
            after = self.after_us(r)
            if after is None:
                return None
            saved[r.name] = r.time_us - after
        total = sum(saved.values())
        return {k: v / total for k, v in saved.items()} if total > 0 else None

    @property
    def vs_user_choice(self) -> Optional[float]:
        """The assembled model against the faster of eager and torch.compile of the whole model: what a user
        already has without kscout, and the ratio issue 26 judges (below 1 is a loss). Eager alone where the
        compiled model could not be timed; None where nothing was timed."""
        if self.speedup is None:
            return None
        return min(self.speedup, self.compile_speedup) if self.compile_speedup else self.speedup

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"
