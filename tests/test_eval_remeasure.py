"""The re-measure's two processes (candidates sandboxed, baselines apart), alternated by the parent
round by round, run through the interpreter with the host clock: what is tested is the protocol and
that a candidate wrong on fresh inputs gets an error instead of numbers, not a speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation import harness, load_problem

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_remeasure_alternates_two_processes_and_refuses_a_candidate_wrong_on_fresh_inputs(monkeypatch):
    monkeypatch.setattr(harness, "HOST_TIMING", True)
    seed = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()
    cheat = (ROOT / "tests" / "adversarial" / "cheat_computes_outside_timed_call.py").read_text()
    info = load_problem("layernorm", "cpu", {"M": 2, "N": 16}, timed=["M=2,N=16|float32"])
    result = harness.remeasure({"seed": seed, "cheat": cheat}, info, device="cpu", rounds=2, samples_per_round=3)
    good, bad = result.candidates
    assert result.note is None and result.isolation in ("bwrap", "none")
    assert good.error is None and len(good.cases) == 1
    case = good.cases[0]
    assert case.method == "host_clock" and len(case.candidate_p50s_ms) == len(case.baseline_p50s_ms) == 2
    assert bad.cases == () and "the timed call re-run on fresh inputs" in bad.error
