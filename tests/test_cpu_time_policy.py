"""The CPU's time policy: the interpreter's speed is never blamed on a kernel (issue 25, item 1).

On the CPU a plan gives the largest cases fewer random trials (stress trials kept) to fit the time
budget; a correct candidate that still runs out of interpreter time is `not_judged`, not `timed_out`,
and leaves no failure pattern; a candidate that makes no progress at all is still `timed_out`; and a
wrong output judged before the time ran out is `incorrect`, however the process ended.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation import evaluate, load_problem
from evaluation.correctness import CPU_ELEMENTS_PER_S, CPU_PLAN_SHARE, CorrectnessRun, cpu_trial_counts
from evaluation.records import Stage, Status

ROOT = Path(__file__).parent.parent
SEED = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()


def _elements(budget_s: float) -> float:
    return budget_s * CPU_PLAN_SHARE * CPU_ELEMENTS_PER_S


def test_every_case_gets_all_trials_when_the_budget_holds_them():
    counts = cpu_trial_counts({0: 100, 1: 1000, 2: 10}, {0: 2, 1: 2, 2: 0}, trials=3, budget_s=100.0)
    assert counts == {0: 3, 1: 3, 2: 3}


def test_the_largest_case_gives_up_random_trials_first_and_keeps_one():
    budget_s = 10.0
    big = int(_elements(budget_s) * 0.6)  # one trial of it fits, a second does not after the others
    counts = cpu_trial_counts({0: big, 1: 1000, 2: 2000}, {0: 0, 1: 0, 2: 0}, trials=4, budget_s=budget_s)
    assert counts == {0: 1, 1: 4, 2: 4}
    spent = big * counts[0] + 1000 * counts[1] + 2000 * counts[2]
    assert spent <= _elements(budget_s)


def test_stress_trials_count_against_the_budget_and_are_never_dropped():
    budget_s = 10.0
    each = int(_elements(budget_s) / 4)  # 1 random + 2 stress = 3 of 4 units; one more random fits
    counts = cpu_trial_counts({0: each}, {0: 2}, trials=5, budget_s=budget_s)
    assert counts == {0: 2}
    # over budget already with the minimum: the minimum stands (one random trial, every stress trial)
    assert cpu_trial_counts({0: each * 10}, {0: 2}, trials=5, budget_s=budget_s) == {0: 1}


def test_a_cpu_plan_keeps_the_stress_trials_of_a_case_whose_random_trials_were_cut():
    info = load_problem("layernorm", "cpu")
    full = CorrectnessRun(SEED, info, "cpu", 3, 11)
    tight = CorrectnessRun(SEED, info, "cpu", 3, 11, refs=full.refs, budget_s=0.001)
    for index, case in enumerate(info.shape_cases):
        planned, cut = full.plan(index, case), tight.plan(index, case)
        stress_full = [t for t in planned if t.stress]
        assert [t for t in cut if t.stress] == stress_full and stress_full
        assert [t.label for t in cut if not t.stress] == ["random"]  # one random trial left
    roomy = CorrectnessRun(SEED, info, "cpu", 3, 11, refs=full.refs, budget_s=1e6)
    assert [roomy.plan(i, c) for i, c in enumerate(info.shape_cases)] == [
        full.plan(i, c) for i, c in enumerate(info.shape_cases)
    ]


# A correct layernorm made slow on purpose: the same launch repeated (a one-line loop over the
# multi-line call), so each trial costs the interpreter a second or more while every output is right.
SLOW = SEED.replace(
    "        _layernorm_fwd[(x2.shape[0],)](",
    "        for _ in range(60): _layernorm_fwd[(x2.shape[0],)](",
)


@pytest.mark.slow
def test_a_correct_kernel_out_of_interpreter_time_is_not_judged_and_leaves_no_failure(tmp_path):
    from test_lifecycle_support import add_candidate, make_run

    from agent.search import writeback
    from evaluation import fingerprint
    from store import Store

    assert SLOW != SEED
    info = load_problem("layernorm", "cpu")
    result = evaluate(SLOW, info, device="cpu", trials=3, seed=5, timeout_s=30.0)
    assert result.status is Status.not_judged, (result.status, result.message)
    assert result.error_class == "InterpreterTime" and result.failed_stage is Stage.correctness
    assert "says nothing about the kernel" in result.message and "had passed" in result.message
    assert all(r.passed for r in result.shape_results)
    assert len(result.shape_results) < len(info.shape_cases)

    with Store.open(tmp_path / "store") as store:
        run = make_run(store, info, fingerprint("cpu"))
        cand = add_candidate(store, run, SLOW)
        writeback.record(store, run.run_id, cand, result, info, fingerprint("cpu"))
        assert store.failure_patterns() == []
        assert store.outcomes(op_family=info.op_family, limit=10) == []
        assert [e[3].status for e in store.evaluations(run.run_id)] == [Status.not_judged]


# Wrong at every width (the check runs its smallest case first, a width-1 row, where a wrong eps
# would not show), then hangs on its second call.
HANG_AFTER_A_WRONG_CASE = (
    SEED.replace("self.eps = 1e-5", "self.eps = 1e-5\n        self.calls = 0")
    .replace("(diff * rstd * w + b).to(", "(diff * rstd * w + b + 1.0).to(")
    .replace(
        "        n = x.shape[-1]\n",
        "        self.calls += 1\n        while self.calls > 1:\n            pass\n        n = x.shape[-1]\n",
        1,
    )
)


@pytest.mark.slow
def test_a_wrong_output_judged_before_a_hang_makes_the_candidate_incorrect():
    result = evaluate(HANG_AFTER_A_WRONG_CASE, "layernorm", device="cpu", trials=2, seed=3, timeout_s=20.0)
    assert HANG_AFTER_A_WRONG_CASE.count("self.calls") == 3
    assert result.status is Status.incorrect, (result.status, result.message)
    assert "judged before the process ran out of time" in result.message
    assert [r.passed for r in result.shape_results] == [False]
