"""The evaluation-throughput bench (agent/search/executors/throughput.py): its phase split from the
workers' and the parent's reports, and one real run on the CPU."""

from __future__ import annotations

import json

import pytest

from agent.search.executors import throughput


def _row(role, warm, *, exited, wall, stamps, seconds, inputs=0.0, judge=0.0, wait=None, candidates=1, gate=None):
    return dict(
        role=role,
        warm=warm,
        candidates=candidates,
        cases=2,
        parent_inputs_s=inputs,
        parent_judge_s=judge,
        parent_wait_s=wait,
        planted=0,
        gate_s=gate,
        spawned_at=None,
        exited_at=exited,
        wall_s=wall,
        worker=dict(stamps=stamps, seconds=seconds),
    )


def test_the_split_charges_a_cold_start_and_only_the_wait_for_a_warm_one():
    cold = _row(
        "correctness",
        False,
        exited=130.0,
        wall=30.0,  # request at 100
        stamps={"process": 101.0, "started": 104.0, "armed": 106.0, "finished": 129.0},
        seconds={"compile": 2.0, "correctness": 5.0, "profiler": 1.0, "timing": 0.0},
        inputs=0.5,
        judge=3.0,
        gate=4.0,  # compiled, then 4 s at its barrier until a GPU lane was free
    )
    warm = _row(
        "timing",
        True,
        exited=220.0,
        wall=20.0,  # request at 200, warm since 150
        stamps={"process": 140.0, "started": 145.0, "warm": 150.0, "armed": 200.5, "finished": 219.0},
        seconds={"compile": 0.5, "correctness": 1.0, "timing": 4.0, "prepare": 1.0},
        judge=2.0,
        wait=1.5,  # of the parent's 2 s on this worker's outputs, 1.5 s waited for a judging slot
    )
    late = _row(  # taken before it finished warming up: the wait is its start cost
        "correctness",
        True,
        exited=330.0,
        wall=30.0,
        stamps={"process": 296.0, "started": 299.0, "warm": 304.0, "armed": 304.2},
        seconds={},
    )
    baselines = _row("baselines", False, exited=60.0, wall=12.0, stamps={}, seconds={}, candidates=0, gate=7.0)
    split = throughput.split([cold, warm, late, baselines])
    assert split == pytest.approx(
        dict(
            start=1.0 + 0.0 + 4.0,
            imports=5.0 + 0.5 + 0.2,
            compile=2.5,
            references=3.5 + 0.5,
            judge_wait=1.5,
            lane_wait=4.0,  # the baselines' 7 s at their gate are part of their wall, counted once
            correctness=6.0 + 1.0,
            timing=5.0,
            baselines=12.0,
        )
    )


def test_siblings_are_distinct_candidates_of_the_same_kernels():
    out = throughput.siblings("SRC", 3, "warm")
    assert len(set(out)) == 3 and all(s.startswith("SRC\n") for s in out)


@pytest.mark.slow
def test_the_bench_runs_both_configurations_on_a_cpu_and_writes_its_rows(tmp_path, capsys):
    out = tmp_path / "tp.json"
    args = ["--device", "cpu", "--n", "1", "--batch", "1", "--trials", "1", "--configs", "cold,warm,files,shared"]
    args += ["--lanes", "1"]  # on a CPU the workers alone bound the checks: the label stays the config's
    assert throughput.main([*args, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    results = {r["config"]: r for r in data["results"]}
    assert set(results) == {"cold", "warm", "files", "shared"}
    assert all(r["evaluations"] == r["passed"] == 1 for r in results.values()), results
    assert all(r["lanes"] == 1 and r["steady_per_eval_s"] is None for r in results.values())  # one batch only
    assert results["warm"]["warm_processes"] == results["warm"]["processes"] == 1
    assert results["cold"]["warm_processes"] == 0
    assert results["warm"]["phases"]["correctness"] > 0 and results["cold"]["phases"]["imports"] > 0
    checks = [row for row in results["warm"]["rows"] if row["role"] == "correctness"]
    assert checks and all(row["parent_wait_s"] >= 0 and row["parent_compare_s"] > 0 for row in checks)
    assert data["floor"]["correct"] is True
    printed = capsys.readouterr().out
    assert "evaluations per GPU-hour" in printed and "floor (one warm process" in printed
