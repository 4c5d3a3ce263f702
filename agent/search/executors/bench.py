"""What an executor adds to each evaluation: `python -m agent.search.executors.bench --executor ray`.

Evaluates the problem's shipped seed N times through the executor (each copy differs by a comment,
so nothing is cached by content), one batch of one at a time (the latency a search step sees), then
all N as one batch (the throughput with --workers checks at once and one shared timing). Prints one
JSON object: start-up, environment, per-evaluation seconds of both, and the statuses. Run it once per
executor on the same machine; the difference per evaluation is the executor's overhead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional


def measure(
    executor: str,
    problem: str,
    n: int,
    device: str,
    workers: int,
    trials: int,
    ray_address: Optional[str] = None,
    dtype: Optional[str] = None,
) -> dict:
    from agent.search.executors import make_executor
    from evaluation.problem import load_problem

    t0 = time.monotonic()
    ex = make_executor(executor, device=device, workers=workers, trials=trials, ray_address=ray_address)
    started_s = time.monotonic() - t0
    try:
        t = time.monotonic()
        fp = ex.environment()
        environment_s = time.monotonic() - t
        info = load_problem(problem, device=fp.device_kind, dtypes=[dtype] if dtype else None)
        if not info.seed_source:
            raise SystemExit(f"problem {problem!r} ships no seed kernel to evaluate")
        sources = [info.seed_source + f"\n# copy {executor} {i} {time.time_ns()}\n" for i in range(n)]
        one_by_one, statuses = [], []
        for src in sources:
            t = time.monotonic()
            ((_, result),) = ex.evaluate_batch([src], info)
            one_by_one.append(time.monotonic() - t)
            statuses.append(result.status.value)
        t = time.monotonic()
        batch = [r.status.value for _, r in ex.evaluate_batch(sources, info)]
        batch_s = time.monotonic() - t
    finally:
        ex.close()
    return {
        "executor": executor,
        "problem": problem,
        "device": fp.device_name,
        "n": n,
        "workers": workers,
        "trials": trials,
        "start_s": started_s,
        "environment_s": environment_s,
        "single_eval_s_mean": sum(one_by_one) / n,
        "single_eval_s_min": min(one_by_one),
        "single_eval_s": one_by_one,
        "batch_s": batch_s,
        "batch_s_per_eval": batch_s / n,
        "statuses": sorted(set(statuses + batch)),
    }


def main(argv: Optional[list[str]] = None) -> int:
    for key, value in (("HF_HUB_OFFLINE", "1"), ("LITELLM_LOCAL_MODEL_COST_MAP", "True")):
        os.environ.setdefault(key, value)
    parser = argparse.ArgumentParser(prog="python -m agent.search.executors.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--executor", default="local")
    parser.add_argument("--problem", default="softmax")
    parser.add_argument("--n", type=int, default=10, help="evaluations, one by one and then as one batch")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--dtype", default=None, help="prove and time only this dtype (e.g. bfloat16)")
    parser.add_argument("--ray-address", default=None)
    args = parser.parse_args(argv)
    out = measure(
        args.executor, args.problem, args.n, args.device, args.workers, args.trials, args.ray_address, args.dtype
    )
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
