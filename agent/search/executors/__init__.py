"""Where candidate code runs: executors chosen by name from one table.

`local` (the default) runs worker processes on this machine and needs nothing more; `ray` runs them as
tasks on a Ray cluster (`pip install 'kernelscout[ray]'`). Every executor has the same face
(`base.Executor`): `environment()`, `evaluate_batch()`, `remeasure()`, `cancel()`, `close()`. Agent
code reaches the evaluator only through one of them.
"""

from __future__ import annotations

import importlib
from typing import Optional

from agent.search.executors.base import (  # noqa: F401
    BatchExecutor,
    Cancelled,
    Executor,
    ExecutorError,
    SharedExclusiveLock,
)
from agent.search.executors.local import LocalExecutor  # noqa: F401

DEFAULT_EXECUTOR = "local"
EXECUTORS: dict[str, str] = {
    "local": "agent.search.executors.local:LocalExecutor",
    "ray": "agent.search.executors.ray:RayExecutor",
}


def executor_class(name: str) -> type:
    if name not in EXECUTORS:
        raise ExecutorError(f"unknown executor {name!r}; use one of: {', '.join(EXECUTORS)}")
    module, cls = EXECUTORS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_executor(
    name: str = DEFAULT_EXECUTOR,
    *,
    device: str = "auto",
    workers: int = 1,
    timeout_s: float = 300.0,
    trials: int = 2,
    ray_address: Optional[str] = None,
    ray_resource: Optional[str] = None,
    sandbox: Optional[str] = None,
) -> Executor:
    """The executor `name`, bound to `device` ("auto" | "cpu" | "cuda").

    `ray_address` (else $RAY_ADDRESS; else a local cluster started for this process) and `ray_resource`
    (a custom resource every task requests, e.g. "H200", which routes a search to that hardware) are
    the Ray executor's own and an error with any other."""
    cls = executor_class(name)
    if name != "ray":
        if ray_address or ray_resource:
            raise ExecutorError("--ray-address and --ray-resource need --executor ray")
        return cls(device, workers, timeout_s=timeout_s, trials=trials, sandbox=sandbox)
    return cls(
        device, workers, timeout_s=timeout_s, trials=trials, address=ray_address, resource=ray_resource, sandbox=sandbox
    )
