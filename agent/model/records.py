"""What `kscout optimize-model` reports: one row per region and the model's verdict."""

from __future__ import annotations

from typing import Literal, Optional

from agent import Frozen

TOLERANCE_POLICY = (
    "each region's kernel is proven on its own problem under the strict policy (float32: atol = rtol = "
    "1e-4), since it is compared with the very ops it replaces; the assembled model is judged end to end "
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
    reason: Optional[str] = None  # why a region was not searched
    problem_path: Optional[str] = None
    budget: int = 0  # evaluations, fixed before the searches start
    run_id: Optional[str] = None
    kernel: Optional[str] = None  # the winning candidate id; None: the reference ops stay
    schedule: Optional[str] = None  # the winner's schedule (its config line)
    judged: Optional[str] = None  # the region's own judge: the evaluator's status of the winner
    speedup: Optional[float] = None  # vs eager, the region alone; None: not measured (a CPU)


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
    timing_note: Optional[str] = None

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"
