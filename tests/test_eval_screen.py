"""The check's screen (issue 23): cases run smallest first, and once a case has failed the check stops
before the first case larger than SCREEN_ELEMENTS, since those would only confirm the verdict."""

from __future__ import annotations

import pytest

from evaluation import correctness, evaluate, load_problem
from evaluation.correctness import References, cheap_first, input_numel
from evaluation.records import Status

PROBLEM = """
import torch
import torch.nn as nn

DTYPES = ("float32",)
SHAPES = {"cpu": [{"n": 5000}, {"n": 10}, {"n": 200}]}


class Model(nn.Module):
    def forward(self, x):
        return x * 3.0


n = 10


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""

CANDIDATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _scale[(triton.cdiv(n, 1024),)](x, y, n, FACTOR, BLOCK=1024)
        return y
"""


@pytest.fixture
def problem(tmp_path):
    path = tmp_path / "triple.py"
    path.write_text(PROBLEM)
    return load_problem(str(path), "cpu")


def test_cases_are_ordered_by_input_size_and_ties_keep_their_declared_order(problem):
    refs = References(problem, "cpu", 1)
    cases = list(enumerate(problem.shape_cases))
    sizes = [input_numel(refs, c) for _, c in cases]
    assert sizes == [5000, 10, 200]
    assert [i for i, _ in cheap_first(refs, cases)] == [1, 2, 0]
    twice = cases + [(3, problem.shape_cases[1])]
    assert [i for i, _ in cheap_first(refs, twice)] == [1, 3, 2, 0]


def test_a_size_that_cannot_be_told_keeps_the_declared_order(problem, monkeypatch):
    refs = References(problem, "cpu", 1)
    monkeypatch.setattr(correctness, "input_numel", lambda refs, case: None)
    assert [i for i, _ in cheap_first(refs, list(enumerate(problem.shape_cases)))] == [0, 1, 2]


def test_a_wrong_kernel_stops_before_the_large_cases_and_says_so(problem, monkeypatch):
    monkeypatch.setattr(correctness, "SCREEN_ELEMENTS", 1000)
    wrong = evaluate(CANDIDATE.replace("FACTOR", "2.0"), problem, device="cpu", trials=1, seed=5)
    assert (wrong.status, wrong.error_class) == (Status.incorrect, "ValueMismatch"), wrong.message
    assert [r.case_id for r in wrong.shape_results] == ["n=10|float32", "n=200|float32"]  # n=5000 never ran
    assert "1 larger cases not run once a case had failed" in wrong.message


def test_a_correct_kernel_runs_every_case_and_results_keep_the_declared_order(problem, monkeypatch):
    monkeypatch.setattr(correctness, "SCREEN_ELEMENTS", 1000)
    right = evaluate(CANDIDATE.replace("FACTOR", "3.0"), problem, device="cpu", trials=1, seed=5)
    assert right.status is Status.passed, right.message
    assert [r.case_id for r in right.shape_results] == ["n=5000|float32", "n=10|float32", "n=200|float32"]
