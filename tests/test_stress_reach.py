"""Stress trials reach every floating input that feeds an exp or a log, scalar losses included
(issue 25, item 4): a mean cross-entropy whose logsumexp skips the row max must fail, whether its
logits are drawn with both signs (torch.randn) or never negative (torch.rand)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evaluation import evaluate, load_problem
from evaluation.correctness import References, stress_trials
from evaluation.inputs import make_inputs, restates
from evaluation.records import Status

FIXTURES = Path(__file__).parent / "eval_fixtures"
STABLE = (FIXTURES / "ce_mean_epilogue.py").read_text()
UNSTABLE = STABLE.replace(
    "    m = tl.max(x, axis=0)\n", "    m = 0.0  # no max subtraction: exp(x) overflows past ~88\n"
)

PROBLEM = """
import torch
import torch.nn as nn

DTYPES = ("float32",)
SHAPES = {"cpu": [{"batch_size": 64, "num_classes": 10}, {"batch_size": 3, "num_classes": 257}]}

class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.nn.functional.cross_entropy(predictions, targets)


batch_size = 64
num_classes = 10


def get_inputs():
    return [torch.DRAW(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
"""


@pytest.fixture(params=["randn", "rand"])
def problem(request, tmp_path):
    path = tmp_path / f"ce_{request.param}.py"
    path.write_text(PROBLEM.replace("DRAW", request.param))
    return load_problem(str(path), "cpu")


@pytest.mark.slow
def test_the_unstable_logsumexp_is_refused_and_the_stable_one_passes(problem):
    assert UNSTABLE != STABLE
    bad = evaluate(UNSTABLE, problem, device="cpu", trials=1, seed=4)
    assert bad.status is Status.incorrect, bad.message
    assert "NaN/Inf values where the reference is finite" in bad.message
    good = evaluate(STABLE, problem, device="cpu", trials=1, seed=4)
    assert good.status is Status.passed, good.message


def test_never_negative_logits_get_a_magnified_stress_trial(tmp_path):
    path = tmp_path / "ce_rand.py"
    path.write_text(PROBLEM.replace("DRAW", "rand"))
    info = load_problem(str(path), "cpu")
    refs = References(info, "cpu", 1)
    for case in info.shape_cases:
        kinds = {t.label: t.scale for t in stress_trials(refs, case, 100)}
        assert kinds.get("magnified", 0) >= 100.0, (case.case_id, kinds)  # past exp's fp32 overflow at ~88
        assert "large_logits" not in kinds  # rand has one sign: the signed kind leaves it alone


def test_the_magnified_kind_restates_only_inputs_that_are_never_negative():
    pos, signed = torch.rand(8), torch.randn(64)
    assert restates(pos, 1e3, True, "magnified") and not restates(signed, 1e3, True, "magnified")
    assert not restates(pos, 1e3, True, "large_logits") and restates(signed, 1e3, True, "large_logits")

    class M:
        @staticmethod
        def get_inputs():
            return [torch.rand(4, 5), torch.randn(4, 5)]

    plain = make_inputs(M, "float32", 3, 0, "cpu", scale=1.0, shift=0.0, stress=True, kind="magnified")
    big = make_inputs(M, "float32", 3, 0, "cpu", scale=1e3, shift=0.0, stress=True, kind="magnified")
    assert torch.equal(big[0], plain[0] * 1e3) and torch.equal(big[1], plain[1])


def test_a_stress_plan_is_kept_on_disk_for_the_next_process_and_a_bad_file_is_planned_again(
    tmp_path, monkeypatch, kscout_home
):
    from evaluation import correctness

    path = tmp_path / "ce_rand.py"
    path.write_text(PROBLEM.replace("DRAW", "rand"))
    info = load_problem(str(path), "cpu")
    case = info.shape_cases[0]
    monkeypatch.setattr(correctness, "_STRESS_PLANS", {})
    planned = [t.label for t in stress_trials(References(info, "cpu", 1), case, 100)]
    plan_file = correctness._plan_file(References(info, "cpu", 1), case)
    assert plan_file.is_file() and plan_file.is_relative_to(kscout_home)

    def no_planning(*_):
        raise AssertionError("planned again although the plan was on disk")

    monkeypatch.setattr(correctness, "_STRESS_PLANS", {})  # a new process: only the disk remembers
    monkeypatch.setattr(References, "torch_handles", no_planning)
    assert [t.label for t in stress_trials(References(info, "cpu", 1), case, 100)] == planned

    for bad in ('{"plan": [["magnified", 12345.0]]}', "not json"):  # off today's ladder, unreadable
        plan_file.write_text(bad)
        monkeypatch.setattr(correctness, "_STRESS_PLANS", {})
        calls = []
        monkeypatch.setattr(References, "torch_handles", lambda self, c, t: calls.append(t) or True)
        stress_trials(References(info, "cpu", 1), case, 100)
        assert calls, bad  # planned again
