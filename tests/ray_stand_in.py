"""A stand-in evaluator for the Ray executor's tests: the functions of `evaluation` an executor calls.

Ray tasks import it by name on the nodes (the tests put tests/ on the nodes' PYTHONPATH). It runs no
candidate code: each call sleeps a little and says in the result's message where and when it ran, so
a test can check placement and overlap on a fake GPU. A source starting with "bad" fails its check;
one starting with "sleepN:" takes N seconds.
Where $KSCOUT_STAND_IN_DIR is set, a check writes a file there when it starts (a test waits for one
to kill the node running it).
"""

from __future__ import annotations

import json
import os
import time
import uuid

from evaluation.records import (
    Baseline,
    EvalResult,
    Fingerprint,
    RemeasureResult,
    Speedup,
    Status,
    TimedCase,
    TimingStats,
    source_sha256,
)

CHECK_S = float(os.environ.get("KSCOUT_STAND_IN_CHECK_S", "0.3"))
FP = {
    "cpu": Fingerprint(
        device_kind="cpu",
        device_name="cpu (stand-in)",
        arch="cpu",
        triton_version="3.9",
        torch_version="2.13",
        python_version="3.11",
        kernelscout_version="0.1.0",
    ),
    "cuda": Fingerprint(
        device_kind="cuda",
        device_name="NVIDIA H200 (stand-in)",
        arch="sm_90",
        triton_version="3.6",
        torch_version="2.11",
        python_version="3.12",
        kernelscout_version="0.1.0",
    ),
}
STATS = TimingStats(
    latency_ms_p20=0.9,
    latency_ms_p50=1.0,
    latency_ms_p80=1.1,
    latency_ms_min=0.9,
    latency_ms_mean=1.0,
    n_samples=10,
    n_warmup=2,
    l2_flushed=True,
    method="cuda_graph",
)


def resolve_device(device: str) -> str:
    return "cpu" if device == "auto" else device


def fingerprint(device: str) -> Fingerprint:
    return FP[device]


def _where(kind: str, t0: float, **extra) -> str:
    import ray

    return json.dumps(
        {
            "kind": kind,
            "node": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "start": t0,
            "end": time.time(),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
            **extra,
        }
    )


def evaluate(source, problem, *, device, timeout_s, trials, time_it=True):
    assert not time_it
    t0 = time.time()
    marks = os.environ.get("KSCOUT_STAND_IN_DIR")
    if marks:
        import ray

        # written under a temporary name and renamed: a test polling the folder never reads a half-written
        # mark (it read an empty one once, as CI's JSONDecodeError)
        name = os.path.join(marks, uuid.uuid4().hex)
        with open(name + ".part", "w") as f:
            json.dump({"source": source, "node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}, f)
        os.replace(name + ".part", name + ".json")
    pause = float(source.split(":")[0][len("sleep") :]) if source.startswith("sleep") else CHECK_S
    time.sleep(pause)  # "sleep4:name" takes 4 s: long enough to kill its node meanwhile
    bad = source.startswith("bad")
    return EvalResult(
        status=Status.incorrect if bad else Status.passed,
        candidate_sha256=source_sha256(source),
        problem_id=problem.problem_id,
        problem_name=problem.name,
        device=device,
        message=_where("check", t0),
        fingerprint=FP[device],
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=CHECK_S,
    )


def time_many(items, problem, *, device, timeout_s, baselines):
    t0 = time.time()
    time.sleep(0.3)
    names = [src for src, _ in items]
    case = TimedCase(
        case_id="c0",
        params={"N": 8},
        dtype="float32",
        candidate=STATS,
        baselines=tuple(Baseline(name=b, timing=STATS) for b in baselines),
        speedups=tuple(
            Speedup(baseline=b, ratio=1.5, ratio_low=1.2, ratio_high=1.8, significant=True) for b in baselines
        ),
    )
    return [
        r.model_copy(
            update={"timing": (case,), "message": _where("time", t0, batch=names, check=json.loads(r.message))}
        )
        if r.passed
        else r
        for _, r in items
    ]


def remeasure(sources, problem, *, device, rounds, baselines):
    t0 = time.time()
    return RemeasureResult(
        problem_id=problem.problem_id,
        problem_name=problem.name,
        device=device,
        rounds=rounds,
        candidates=(),
        note=_where("remeasure", t0, names=sorted(sources)),
        fingerprint=FP[device],
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=0.0,
    )
