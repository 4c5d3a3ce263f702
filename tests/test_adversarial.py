"""Every cheat in tests/adversarial/ goes through evaluate() and comes back with its exact verdict.

Each file there is a candidate source for the built-in layernorm problem (one file a cheat; they are
read as text, never imported here). A new cheat needs a row in CASES: a file without one fails
test_every_cheat_file_has_an_expected_verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation import evaluate, load_problem
from evaluation.records import Stage, Status

CHEATS = Path(__file__).parent / "adversarial"

# file stem -> (status, failed stage, error_class); None = any
CASES = {
    "cheat_zeros": (Status.incorrect, Stage.correctness, "ValueMismatch"),
    "cheat_constant": (Status.incorrect, Stage.correctness, "ValueMismatch"),
    "cheat_partial_write": (Status.incorrect, Stage.correctness, "NonFinite"),
    "cheat_token_kernel": (Status.rejected, Stage.correctness, "TorchCompute"),
    "cheat_no_triton": (Status.rejected, Stage.correctness, "NoTritonLaunch"),
    "cheat_mutates_input": (Status.rejected, Stage.correctness, "MutatedInput"),
    "cheat_returns_input": (Status.rejected, Stage.correctness, "OutputAliasesInput"),
    "cheat_caches_first_answer": (Status.incorrect, Stage.correctness, "ValueMismatch"),
    "cheat_fixed_width": (Status.incorrect, Stage.correctness, None),
    "cheat_side_stream": (Status.rejected, Stage.static_check, "CudaStream"),
    "cheat_patches_allclose": (Status.rejected, Stage.static_check, "MonkeyPatch"),
    "cheat_patches_timer": (Status.rejected, Stage.static_check, "MonkeyPatch"),
    "cheat_disables_dispatch": (Status.rejected, Stage.static_check, "DispatchEscape"),
    "cheat_patches_via_importlib": (Status.rejected, Stage.compile, "PatchedHarness"),
    "cheat_patches_unwatched": (Status.incorrect, Stage.correctness, "ValueMismatch"),
    "cheat_never_returns": (Status.timed_out, Stage.correctness, "Timeout"),
    "cheat_sigkill": (Status.crashed, Stage.correctness, "SIGKILL"),
    "cheat_os_exit": (Status.crashed, Stage.correctness, "Exit0"),
    "cheat_sys_exit": (Status.crashed, Stage.correctness, "Exit0"),
    "cheat_forges_status": (Status.crashed, Stage.correctness, "Exit0"),  # the files it wrote are never read
    "cheat_plants_pickle": (Status.crashed, Stage.correctness, "Exit0"),
    "cheat_raises": (Status.crashed, Stage.correctness, "RuntimeError"),
    "cheat_syntax_error": (Status.compile_error, Stage.static_check, "SyntaxError"),
    "cheat_triton_compile_error": (Status.compile_error, Stage.compile, "InterpreterError"),
    "cheat_no_model_new": (Status.compile_error, Stage.static_check, "MissingModelNew"),
}
TIMEOUT_S = {"cheat_never_returns": 6.0}


@pytest.fixture(scope="module")
def layernorm():
    return load_problem("layernorm", "cpu")


PICKLE_MARKER = Path("/tmp/kscout-adversarial-pickle-ran")


def _run(stem, problem):
    source = (CHEATS / f"{stem}.py").read_text()
    PICKLE_MARKER.unlink(missing_ok=True)
    return evaluate(source, problem, device="cpu", trials=2, timeout_s=TIMEOUT_S.get(stem, 60.0), seed=1234)


def test_every_cheat_file_has_an_expected_verdict():
    assert sorted(p.stem for p in CHEATS.glob("cheat_*.py")) == sorted(CASES)


@pytest.mark.parametrize("stem", sorted(CASES))
def test_cheat_gets_its_exact_verdict(stem, layernorm):
    status, stage, error_class = CASES[stem]
    result = _run(stem, layernorm)
    assert (result.status, result.failed_stage) == (status, stage), result.message
    if error_class is not None:
        assert result.error_class == error_class, result.message
    assert not result.passed and result.message
    if status in (Status.crashed, Status.timed_out):
        assert "Traceback" not in (result.message or "")
    _check_details(stem, result)


def _failed(result) -> set[str]:
    return {r.case_id for r in result.shape_results if not r.passed}


def _case_ids(where=lambda params: True) -> set[str]:
    return {c.case_id for c in load_problem("layernorm", "cpu").shape_cases if where(c.params)}


def _check_details(stem, result):
    """What each verdict must also say, beyond its status."""
    assert len(_case_ids()) >= 8
    if stem == "cheat_fixed_width":
        # Tuned to N=256: right there (both dtypes), wrong on every other width. N=1 is the exception
        # that proves the rule: a one-wide layernorm is `bias` whatever the garbage variance.
        assert _failed(result) >= _case_ids(lambda p: p["N"] not in (1, 256))
        assert _case_ids(lambda p: p["N"] == 256) <= {r.case_id for r in result.shape_results if r.passed}
    elif stem in ("cheat_zeros", "cheat_constant", "cheat_patches_unwatched"):
        assert _failed(result) == _case_ids()
    elif stem == "cheat_caches_first_answer":
        # trial 0 is honest; the replay is caught by trial 1's fresh inputs, except where the answer
        # does not depend on the input at all (N=1: every row normalizes to the bias)
        assert _failed(result) == _case_ids(lambda p: p["N"] > 1)
        assert all(r.message.startswith("trial 1 (") for r in result.shape_results if not r.passed)
    elif stem == "cheat_partial_write":
        assert _failed(result) == _case_ids(lambda p: p["M"] > 1)  # one row: half of it rounds up to all
    elif stem == "cheat_token_kernel":
        assert "aten.native_layer_norm" in result.message
    elif stem == "cheat_mutates_input":
        assert result.message == "forward modified input(s) [0] on M=8,N=256|float32 trial 0"
    elif stem == "cheat_patches_via_importlib":
        assert result.message == "the candidate replaced torch.allclose"
    elif stem == "cheat_sigkill":
        assert "SIGKILL (signal 9)" in result.message and "M=8,N=256|float32" in result.message
    elif stem == "cheat_never_returns":
        assert "6 s limit" in result.message
    elif stem == "cheat_raises":
        assert result.message.endswith("RuntimeError: the candidate gave up")
    elif stem == "cheat_triton_compile_error":
        assert "arange's range must be a power of 2" in result.message
    elif stem in ("cheat_forges_status", "cheat_plants_pickle"):
        assert "without reporting" in result.message
        assert not PICKLE_MARKER.exists()  # the parent never unpickled it
    elif stem == "cheat_side_stream":
        assert result.message.startswith("line 7: use of torch.cuda.Stream")
