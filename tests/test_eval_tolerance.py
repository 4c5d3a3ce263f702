"""Tolerance policies (strict, kernelbench) and approximations reported as such."""

from __future__ import annotations

import json
from pathlib import Path

from agent.cli import main
from evaluation import evaluate, load_problem
from evaluation.approximations import TANH_GELU, annotate, detect, label
from evaluation.records import EvalResult, Fingerprint, ShapeResult, Status

DATA = Path(__file__).parent / "data" / "tolerance"
PROBLEM, CANDIDATE = DATA / "gelu_problem.py", DATA / "tanh_gelu.py"
SMALL = {"batch_size": 16, "dim": 1000}


def _result(max_abs: float, atol: float = 1e-4) -> EvalResult:
    fp = Fingerprint(
        device_kind="cpu",
        device_name="cpu",
        arch="cpu",
        triton_version="x",
        torch_version="x",
        python_version="x",
        kernelscout_version="x",
    )
    shape = ShapeResult(
        case_id="c",
        params={},
        dtype="float32",
        passed=False,
        trials=1,
        seeds=(0,),
        atol=atol,
        rtol=1e-4,
        max_abs_error=max_abs,
        message="mismatch",
    )
    return EvalResult(
        status=Status.incorrect,
        error_class="ValueMismatch",
        message="1 of 1 cases failed",
        candidate_sha256="0",
        problem_id="p",
        problem_name="gelu",
        device="cpu",
        shape_results=(shape,),
        fingerprint=fp,
        started_at="t",
        duration_s=0.0,
    )


def test_tanh_gelu_is_detected_only_against_an_exact_gelu_reference():
    candidate = CANDIDATE.read_text()
    assert detect(candidate, PROBLEM.read_text()) == (TANH_GELU,)
    assert detect(candidate, "return F.gelu(x, approximate='tanh')") == ()
    assert detect("y = x * tl.sigmoid(x)", PROBLEM.read_text()) == ()


def test_a_failure_within_the_approximations_own_deviation_is_labelled_and_a_larger_one_is_not():
    info = load_problem(str(PROBLEM), "cpu", SMALL)
    within = label(_result(4.5e-4), CANDIDATE.read_text(), info)
    assert within.error_class == "Approximation" and within.status is Status.incorrect
    assert "tanh-GELU for exact GELU" in within.message and "--tolerance kernelbench" in within.message
    beyond = label(_result(5e-2), CANDIDATE.read_text(), info)
    assert beyond.error_class == "ValueMismatch" and beyond.approximations == (
        "tanh-GELU for exact GELU (deviates by up to 0.00047)",
    )


def test_strict_refuses_tanh_gelu_as_an_approximation_and_kernelbench_admits_it_saying_so():
    source = CANDIDATE.read_text()
    strict = load_problem(str(PROBLEM), "cpu", SMALL)
    judged = annotate(evaluate(source, strict, device="cpu", trials=2, seed=1), source, strict)
    assert judged.status is Status.incorrect and judged.error_class == "Approximation", judged.message
    assert judged.tolerance_policy == "strict"
    loose = load_problem(str(PROBLEM), "cpu", SMALL, tolerance="kernelbench")
    passed = annotate(evaluate(source, loose, device="cpu", trials=2, seed=1), source, loose)
    assert passed.status is Status.passed and passed.tolerance_policy == "kernelbench"
    assert passed.approximations == ("tanh-GELU for exact GELU (deviates by up to 0.00047)",)


def test_eval_cli_takes_the_tolerance_policy(capsys):
    try:
        main(
            [
                "eval",
                str(CANDIDATE),
                "--problem",
                str(PROBLEM),
                "--device",
                "cpu",
                "--trials",
                "1",
                "--set",
                "batch_size=4",
                "--set",
                "dim=100",
                "--tolerance",
                "kernelbench",
                "--json",
            ]
        )
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "passed" and result["tolerance_policy"] == "kernelbench"
    assert result["approximations"] == ["tanh-GELU for exact GELU (deviates by up to 0.00047)"]
