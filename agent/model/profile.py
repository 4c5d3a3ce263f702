"""Where the model's time goes: torch.profiler after warm-up, the eager model and its regions.

The eager model is profiled as the user runs it (its total is the time the regions' shares are read
against). The regions are timed on the captured graph run node by node, each node inside a profiler
range named after its region: a region's time is the self time of the ops inside its ranges (device
time on a GPU, CPU self time on a CPU), so the interpreter's own Python is never counted. Views and
parameter work that own no region are `glue`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agent.model.graph import Traced, run
from agent.model.partition import Region

PREFIX = "kscout_region:"


@dataclass(frozen=True)
class Profile:
    eager_us: float  # the eager model, one forward: sum of the ops' self time
    graph_us: float  # the captured graph, one forward, all regions and glue
    region_us: dict[str, float]
    glue_us: float
    clock: str  # "device" (CUDA) or "cpu"
    iterations: int

    def share(self, name: str) -> float:
        total = sum(self.region_us.values())
        return self.region_us.get(name, 0.0) / total if total > 0 else 0.0


def _self_us(event, clock: str) -> float:
    if clock == "device":
        return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)))
    return float(event.self_cpu_time_total)


def _activities(device: str) -> list:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def profile(traced: Traced, regions: list[Region], device: str = "cpu", warmup: int = 2, iters: int = 3) -> Profile:
    clock = "device" if device.startswith("cuda") else "cpu"
    owner = {n: r.name for r in regions for n in r.nodes}
    label = lambda n: PREFIX + owner[n] if n in owner else None  # noqa: E731
    model, inputs = traced.model, traced.inputs
    with torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
            run(traced, label)
        _sync(device)
        with torch.profiler.profile(activities=_activities(device)) as prof:
            for _ in range(iters):
                model(*inputs)
            _sync(device)
        eager = sum(_self_us(e, clock) for e in prof.events() if not e.name.startswith("ProfilerStep"))
        with torch.profiler.profile(activities=_activities(device)) as prof:
            for _ in range(iters):
                run(traced, label)
            _sync(device)
    region_us = {r.name: 0.0 for r in regions}
    glue = 0.0
    for e in prof.events():
        if e.name.startswith(PREFIX) or getattr(e, "device_type", None) not in (None, torch.autograd.DeviceType.CPU):
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith(PREFIX):
            parent = parent.cpu_parent
        us = _self_us(e, clock) / iters
        if parent is None:
            glue += us
        else:
            region_us[parent.name[len(PREFIX) :]] += us
    return Profile(
        eager_us=eager / iters,
        graph_us=sum(region_us.values()) + glue,
        region_us=region_us,
        glue_us=glue,
        clock=clock,
        iterations=iters,
    )
