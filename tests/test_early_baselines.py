"""A search's first baselines compile beside its checks and are timed only once the candidates' samples
are taken: the baseline process waits at a gate (isolation.Gate; harness._start_early_baselines)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from evaluation import evaluate, harness, load_problem, phases, time_many
from evaluation.context import SearchContext
from evaluation.isolation import Gate, wait_for_gates
from evaluation.records import Status

ROOT = Path(__file__).parent.parent
SEED = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()


def test_wait_for_gates_returns_once_every_closed_gate_is_ready_and_forgets_opened_ones():
    busy = Gate()
    assert wait_for_gates(0.05) is False  # a gated worker still compiling
    threading.Timer(0.2, busy.ready.set).start()
    t0 = time.monotonic()
    assert wait_for_gates(5.0) is True and time.monotonic() - t0 >= 0.15
    opened = Gate()
    opened.open()  # let through: no longer waited for, ready or not
    assert wait_for_gates(0.05) is True
    busy.open()
    gone = Gate()
    gone.cancel()
    assert gone.is_open and gone.cancelled and wait_for_gates(0.05) is True


def _small_layernorm():
    small = load_problem("layernorm", "cpu", overrides={"M": 2})
    return load_problem("layernorm", "cpu", overrides={"M": 2}, timed=[small.shape_cases[0].case_id])


@pytest.mark.slow  # a real check, a baseline process and a timing process: about 15 s on the 2-core machine
def test_the_first_baselines_start_beside_the_check_and_sample_only_after_the_candidate(monkeypatch):
    monkeypatch.setattr(harness, "HOST_TIMING", True)  # the timing stage on the CPU clock
    info = _small_layernorm()
    with phases.recording() as rows, SearchContext(seed=1234) as ctx:
        checked = evaluate(SEED, info, device="cpu", trials=2, time_it=False, baselines=("eager",), context=ctx)
        assert checked.status is Status.passed, checked.message
        early = ctx.early_baselines(info, "cpu")
        assert early is not None
        assert early.gate.ready.wait(120) and not early.gate.is_open  # compiled, waiting for the timing
        timed = time_many([(SEED, checked)], info, device="cpu", baselines=("eager",), trials=2, context=ctx)
        again = evaluate(SEED, info, device="cpu", trials=2, time_it=False, baselines=("eager",), context=ctx)
        assert ctx.early_baselines(info, "cpu") is early  # started once per search
    assert timed[0].status is Status.passed, timed[0].message
    (case,) = timed[0].timing
    assert [(b.name, b.timing is not None, b.error) for b in case.baselines] == [("eager", True, None)]
    assert again.status is Status.passed
    by_role = {}
    for row in rows:
        by_role.setdefault(row["role"], []).append(row["worker"]["stamps"])
    (baseline,), (timing,) = by_role["baselines"], by_role["timing"]
    first_check = min(s["request"] for s in by_role["correctness"])
    assert baseline["request"] < timing["request"]  # started before the timing, beside the check
    assert baseline["request"] - first_check < 30
    assert baseline["proceed"] >= timing["finished"]  # its samples only after the candidate's


@pytest.mark.slow  # a real check and a baseline process: about 10 s on the 2-core machine
def test_a_search_closed_before_any_timing_ends_its_waiting_baseline_process(monkeypatch):
    monkeypatch.setattr(harness, "HOST_TIMING", True)
    info = _small_layernorm()
    ctx = SearchContext(seed=99)
    evaluate(SEED, info, device="cpu", trials=1, time_it=False, baselines=("eager",), context=ctx)
    early = ctx.early_baselines(info, "cpu")
    assert early is not None and early.gate.ready.wait(120)
    t0 = time.monotonic()
    ctx.close()
    assert time.monotonic() - t0 < 10
    assert early.gate.cancelled and not early._thread.is_alive()
    measured, _ = early.result()  # nothing was sampled: each baseline says why
    assert all(b.timing is None and "died" in (b.error or "") for by in measured.values() for b in by.values())
    assert ctx.early_baselines(info, "cpu") is None
