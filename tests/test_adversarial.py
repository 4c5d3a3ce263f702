"""Every cheat in tests/adversarial/ goes through evaluate() and comes back with its exact verdict.

Each file there is a candidate source (one file a cheat; read as text, never imported here), for the
built-in problem its row names (layernorm unless said otherwise). A new cheat needs a row in CASES: a
file without one fails test_every_cheat_file_has_an_expected_verdict.

Two verdicts per cheat where two barriers stand in its way:
- `verdict`: the whole evaluator, as a search runs it (static check, sandbox where it can be made,
  worker checks, the parent's judgement);
- `unchecked`: the same with the static check switched off, so the next barrier has to hold on its
  own: the OS sandbox (`sandbox=True`, skipped where none can be made), the worker's run-time checks
  or the parent's comparison. Most of these are marked slow; one per kind of barrier runs by default.

`timed` cheats also go through the timing stage, with the host clock through the interpreter (a test
of what the timing stage checks, not a speed). GPU-only tricks (graph-capture phase detection,
profiler accounting) get their GPU verdicts in tests/test_eval_gpu.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from evaluation import evaluate, harness, load_problem
from evaluation.isolation import probe_sandbox
from evaluation.records import Stage, Status
from evaluation.static_check import StaticReport

CHEATS = Path(__file__).parent / "adversarial"
ROOT = Path(__file__).resolve().parent.parent
SANDBOX = probe_sandbox("cpu")
S, ST = Status, Stage
Verdict = tuple  # (Status, Stage | None, error_class | None | a tuple of accepted classes); None: any


@dataclass(frozen=True)
class Cheat:
    verdict: Verdict
    problem: str = "layernorm"
    tiny: bool = False  # M=2, N=16: the shape set does not matter to this cheat
    timed: bool = False
    unchecked: Optional[Verdict] = None
    sandbox: bool = False  # the unchecked run needs the OS sandbox
    fast_unchecked: bool = False  # the one unchecked run of its kind in the default suite
    slow: bool = False


static = lambda rule: (S.rejected, ST.static_check, rule)  # noqa: E731
CASES: dict[str, Cheat] = {
    # wrong answers
    "cheat_zeros": Cheat((S.incorrect, ST.correctness, "ValueMismatch")),
    "cheat_constant": Cheat((S.incorrect, ST.correctness, "ValueMismatch"), slow=True),
    # the unwritten half reads NaN where the poisoned memory is reused (NonFinite) and zeros where glibc
    # serves a fresh mapping (ValueMismatch): CPU poisoning is best effort, the refusal is not
    "cheat_partial_write": Cheat((S.incorrect, ST.correctness, ("NonFinite", "ValueMismatch"))),
    "cheat_caches_first_answer": Cheat((S.incorrect, ST.correctness, "ValueMismatch")),
    "cheat_fixed_width": Cheat((S.incorrect, ST.correctness, None)),
    "cheat_mutates_input": Cheat((S.rejected, ST.correctness, "MutatedInput")),
    "cheat_returns_input": Cheat((S.rejected, ST.correctness, "OutputAliasesInput")),
    # PyTorch or NumPy does the work
    "cheat_token_kernel": Cheat((S.rejected, ST.correctness, "TorchCompute"), tiny=True),
    "cheat_no_triton": Cheat((S.rejected, ST.correctness, "NoTritonLaunch"), tiny=True),
    "cheat_numpy_math": Cheat(static("ForbiddenImport")),
    "cheat_tolist_math": Cheat(static("HostCompute")),
    "cheat_helper_thread": Cheat(static("DynamicAccess")),
    "cheat_disables_dispatch": Cheat(static("DispatchEscape")),
    "cheat_dispatch_runtime_names": Cheat(static("DynamicAccess")),
    "cheat_clears_watch_counter": Cheat(static("DispatchEscape")),
    "cheat_widens_allow_list": Cheat(
        static("DynamicAccess"),
        tiny=True,
        unchecked=(S.rejected, ST.correctness, "PatchedHarness"),
        fast_unchecked=True,
    ),
    "cheat_patches_protocol_package": Cheat(
        static("DynamicAccess"), tiny=True, unchecked=(S.rejected, ST.compile, "PatchedHarness")
    ),
    "cheat_tensor_subclass": Cheat(
        static("TensorSubclass"),
        tiny=True,
        unchecked=(S.rejected, ST.correctness, "TensorSubclass"),
        fast_unchecked=True,
    ),
    "cheat_epilogue_does_the_work": Cheat((S.rejected, ST.correctness, "TorchCompute"), problem="row_sum", tiny=True),
    "cheat_epilogue_sums_an_input_copy": Cheat(
        (S.rejected, ST.correctness, "TorchCompute"), problem="row_sum", tiny=True, slow=True
    ),
    # the work rule (issue 25): PyTorch may compute beside Triton (a labelled hybrid), not in its place
    "cheat_triton_output_unused": Cheat((S.rejected, ST.correctness, "TorchCompute"), problem="softmax", tiny=True),
    "cheat_triton_copies_torch_result": Cheat(
        (S.rejected, ST.correctness, "TorchCompute"), problem="softmax", tiny=True
    ),
    "cheat_touches_torch_result": Cheat((S.rejected, ST.correctness, "TorchCompute"), problem="softmax", tiny=True),
    # the evaluator's own functions
    "cheat_patches_allclose": Cheat(static("MonkeyPatch")),
    "cheat_patches_timer": Cheat(static("MonkeyPatch")),
    "cheat_patches_via_importlib": Cheat(
        static("DynamicAccess"), tiny=True, unchecked=(S.rejected, ST.compile, "PatchedHarness")
    ),
    "cheat_patches_unwatched": Cheat(
        static("DynamicAccess"),
        tiny=True,
        unchecked=(S.incorrect, ST.correctness, "ValueMismatch"),
        fast_unchecked=True,
    ),
    "cheat_side_stream": Cheat(static("CudaStream")),
    # forged verdicts
    "cheat_forges_status": Cheat(static("FileAccess"), tiny=True, unchecked=(S.crashed, ST.correctness, "Exit0")),
    "cheat_plants_pickle": Cheat(static("ForbiddenImport"), tiny=True, unchecked=(S.crashed, ST.correctness, "Exit0")),
    "cheat_forges_verdict_from_stack": Cheat(
        static("FrameIntrospection"), tiny=True, unchecked=(S.crashed, ST.correctness, "Exit0"), fast_unchecked=True
    ),
    # timing that checks what it timed
    "cheat_honest_first_calls": Cheat((S.incorrect, ST.timing, "ValueMismatch"), tiny=True, timed=True),
    "cheat_computes_outside_timed_call": Cheat(
        (S.incorrect, ST.timing, "ValueMismatch"), tiny=True, timed=True, slow=True
    ),
    "cheat_honest_unless_timing_name": Cheat((S.passed, None, None), tiny=True, timed=True, slow=True),
    "cheat_idle_during_graph_capture": Cheat(static("PhaseDetection")),
    "cheat_patches_bench_sample": Cheat(
        static("DynamicAccess"), tiny=True, timed=True, unchecked=(S.rejected, ST.compile, "PatchedHarness")
    ),
    "cheat_slows_eager_baseline": Cheat(
        static("GlobalHook"), tiny=True, timed=True, unchecked=(S.passed, None, None), fast_unchecked=True
    ),
    # secrets
    "cheat_reads_parent_environ": Cheat(
        static("FileAccess"), tiny=True, unchecked=(S.crashed, ST.correctness, None), sandbox=True, fast_unchecked=True
    ),
    "cheat_prints_secrets": Cheat((S.crashed, ST.correctness, "RuntimeError"), tiny=True),
    # the store and the evaluator itself
    "cheat_forges_store_document": Cheat(
        static("FileAccess"), tiny=True, unchecked=(S.crashed, ST.correctness, None), sandbox=True
    ),
    "cheat_corrupts_store": Cheat(
        static("FileAccess"), tiny=True, unchecked=(S.crashed, ST.correctness, None), sandbox=True, fast_unchecked=True
    ),
    "cheat_appends_to_compare": Cheat(
        static("FileAccess"), tiny=True, unchecked=(S.crashed, ST.correctness, None), sandbox=True
    ),
    # processes
    "cheat_never_returns": Cheat((S.timed_out, ST.correctness, "Timeout"), tiny=True),
    "cheat_sigkill": Cheat((S.crashed, ST.correctness, "SIGKILL")),
    "cheat_os_exit": Cheat((S.crashed, ST.correctness, "Exit0"), tiny=True),
    "cheat_sys_exit": Cheat((S.crashed, ST.correctness, "Exit0"), tiny=True),
    "cheat_raises": Cheat((S.crashed, ST.correctness, "RuntimeError"), tiny=True),
    "cheat_setsid_grandchild": Cheat(
        static("ProcessSpawn"),
        tiny=True,
        unchecked=(S.incorrect, ST.correctness, "ValueMismatch"),
        sandbox=True,
        fast_unchecked=True,
    ),
    "cheat_kills_parent": Cheat(
        static("ParentSignal"), tiny=True, unchecked=(S.incorrect, ST.correctness, "ValueMismatch"), sandbox=True
    ),
    "cheat_stops_parent": Cheat(
        static("ParentSignal"), tiny=True, unchecked=(S.incorrect, ST.correctness, "ValueMismatch"), sandbox=True
    ),
    "cheat_memory_bomb": Cheat((S.crashed, ST.correctness, "RuntimeError"), tiny=True),
    "cheat_file_bomb": Cheat(
        static("FileAccess"), tiny=True, unchecked=(S.crashed, ST.correctness, "OSError"), sandbox=True
    ),
    "cheat_fork_bomb": Cheat(
        static("ProcessSpawn"), tiny=True, unchecked=(S.crashed, ST.correctness, "BlockingIOError"), sandbox=True
    ),
    # inputs that find real bugs
    "cheat_softmax_no_max": Cheat((S.incorrect, ST.correctness, "NonFinite"), problem="softmax", tiny=True),
    "cheat_logsumexp_no_max": Cheat(
        (S.incorrect, ST.correctness, "NonFinite"), problem="log_softmax", tiny=True, slow=True
    ),
    "cheat_wrong_layout": Cheat((S.incorrect, ST.correctness, "LayoutMismatch"), tiny=True),
    "cheat_wrong_past_8_rows": Cheat((S.incorrect, ST.correctness, "NonFinite")),
    "cheat_wrong_past_1024_cols": Cheat((S.incorrect, ST.correctness, None)),
    # syntax and compilation
    "cheat_syntax_error": Cheat((S.compile_error, ST.static_check, "SyntaxError")),
    "cheat_triton_compile_error": Cheat((S.compile_error, ST.compile, "InterpreterError"), tiny=True),
    "cheat_no_model_new": Cheat((S.compile_error, ST.static_check, "MissingModelNew")),
}
TIMEOUT_S = {"cheat_never_returns": 6.0}
PICKLE_MARKER = Path("/tmp/kscout-adversarial-pickle-ran")
SECRET = "sk-test-" + "s3cr3t" * 5


def _problem(cheat: Cheat):
    return load_problem(cheat.problem, "cpu", {"M": 2, "N": 16} if cheat.tiny else None)


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A store folder a cheat may aim at, a secret in kscout's environment, a marker for grandchildren."""
    home = tmp_path / "kscout-home"
    (home / "chroma").mkdir(parents=True)
    (home / "kscout.duckdb").write_bytes(b"DUCK" + bytes(range(256)) * 4)
    (home / "chroma" / "chroma.sqlite3").write_bytes(b"vectors")
    monkeypatch.setenv("KSCOUT_HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("KSCOUT_WORKER_FILE_MB", "8")
    monkeypatch.setenv("KSCOUT_WORKER_NPROC", "48")
    marker = f"{time.time_ns() % 10**9}.25"
    snapshot = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    return dict(home=home, marker=marker, snapshot=snapshot)


def _source(stem: str, world) -> str:
    return (
        (CHEATS / f"{stem}.py")
        .read_text()
        .replace("__KSCOUT_HOME__", str(world["home"]))
        .replace("__MARKER__", world["marker"])
    )


def _run(stem: str, cheat: Cheat, world, monkeypatch, *, sandbox: str = "auto"):
    PICKLE_MARKER.unlink(missing_ok=True)
    if cheat.timed:
        monkeypatch.setattr(harness, "HOST_TIMING", True)
    started = time.monotonic()
    result = evaluate(
        _source(stem, world),
        _problem(cheat),
        device="cpu",
        trials=1,
        seed=1234,
        timeout_s=TIMEOUT_S.get(stem, 60.0),
        baselines=("eager",),
        sandbox=sandbox,
    )
    world["wall_s"] = time.monotonic() - started
    return result


def _assert_verdict(result, verdict: Verdict) -> None:
    status, stage, error_class = verdict
    assert (result.status, result.failed_stage) == (status, stage), result.message
    if isinstance(error_class, tuple):
        assert result.error_class in error_class, result.message
    elif error_class is not None:
        assert result.error_class == error_class, result.message
    if status is not Status.passed:
        assert result.message
    if status in (Status.crashed, Status.timed_out):
        assert "Traceback" not in (result.message or "")


def test_every_cheat_file_has_an_expected_verdict():
    assert sorted(p.stem for p in CHEATS.glob("cheat_*.py")) == sorted(CASES)


def _params():
    for stem, cheat in sorted(CASES.items()):
        yield pytest.param(stem, marks=[pytest.mark.slow] if cheat.slow else [], id=stem)


@pytest.mark.parametrize("stem", list(_params()))
def test_cheat_gets_its_exact_verdict(stem, world, monkeypatch):
    cheat = CASES[stem]
    _skip_without_the_case_it_needs(stem, cheat)
    result = _run(stem, cheat, world, monkeypatch)
    _assert_verdict(result, cheat.verdict)
    _check_details(stem, result, world)


def _unchecked_params():
    for stem, cheat in sorted(CASES.items()):
        if cheat.unchecked is not None:
            yield pytest.param(stem, marks=[] if cheat.fast_unchecked else [pytest.mark.slow], id=stem)


@pytest.mark.parametrize("stem", list(_unchecked_params()))
def test_without_the_static_check_the_next_barrier_holds(stem, world, monkeypatch):
    cheat = CASES[stem]
    if cheat.sandbox and not SANDBOX.ok:
        pytest.skip(f"needs the OS sandbox, and none can be made here: {SANDBOX.reason}")
    monkeypatch.setattr(harness, "check_source", lambda source, module=None: StaticReport(None, True, ()))
    result = _run(stem, cheat, world, monkeypatch, sandbox="required" if cheat.sandbox else "auto")
    _assert_verdict(result, cheat.unchecked)
    _check_details(stem, result, world)


def _skip_without_the_case_it_needs(stem: str, cheat: Cheat) -> None:
    """Cases past the block sizes (issue 10 item 5) come with the shape-set work of another branch."""
    cases = _problem(cheat).shape_cases
    if stem == "cheat_wrong_past_8_rows" and max(c.params["M"] for c in cases) <= 8:
        pytest.skip("the CPU shape set has no case past 8 rows yet (the shapes branch adds one past 64)")
    if stem == "cheat_wrong_past_1024_cols" and max(c.params["N"] for c in cases) <= 1024:
        pytest.skip("the CPU shape set has no case past 1024 columns yet (the shapes branch adds one past 4096)")


def _failed(result) -> set[str]:
    return {r.case_id for r in result.shape_results if not r.passed}


def _case_ids(where=lambda params: True) -> set[str]:
    return {c.case_id for c in load_problem("layernorm", "cpu").shape_cases if where(c.params)}


def _no_secret(result) -> None:
    for text in (result.message or "", result.stderr_tail):
        assert SECRET not in text


def _check_details(stem: str, result, world) -> None:
    """What each verdict must also say, beyond its status."""
    _no_secret(result)
    assert result.isolation in ("bwrap", "none")
    if stem == "cheat_fixed_width":
        # Tuned to N=256: right there (both dtypes), wrong on every other width. N=1 is the exception
        # that proves the rule: a one-wide layernorm is `bias` whatever the garbage variance.
        assert _failed(result) >= _case_ids(lambda p: p["N"] not in (1, 256))
        assert _case_ids(lambda p: p["N"] == 256) <= {r.case_id for r in result.shape_results if r.passed}
    elif stem in ("cheat_zeros", "cheat_constant"):
        assert _failed(result) == _case_ids()
    elif stem == "cheat_caches_first_answer":
        # trial 0 is honest; the replay is caught by the next trial's fresh inputs, except where the
        # answer does not depend on the input at all (N=1: every row normalizes to the bias)
        assert _failed(result) == _case_ids(lambda p: p["N"] > 1)
        assert all(r.message.startswith("trial 1 (large_logits") for r in result.shape_results if not r.passed)
    elif stem == "cheat_partial_write":
        assert _failed(result) == _case_ids(lambda p: p["M"] > 1)  # one row: half of it rounds up to all
    elif stem == "cheat_token_kernel":
        assert "aten.native_layer_norm" in result.message
    elif stem == "cheat_mutates_input":
        # the check runs the smallest case first (correctness.cheap_first)
        assert result.message == "forward modified input(s) [0] on M=3,N=1|float32 trial 0"
    elif stem in ("cheat_patches_via_importlib",) and result.error_class == "PatchedHarness":
        assert result.message == "the candidate replaced torch.allclose"
    elif stem == "cheat_patches_protocol_package" and result.error_class == "PatchedHarness":
        assert "evaluation.protocol.package" in result.message
    elif stem == "cheat_patches_bench_sample" and result.error_class == "PatchedHarness":
        assert "evaluation.timing.Bench.sample" in result.message
    elif stem == "cheat_widens_allow_list" and result.error_class == "PatchedHarness":
        assert "evaluation.guards.ALLOWED_OPS" in result.message
    elif stem == "cheat_sigkill":
        assert "SIGKILL (signal 9)" in result.message and "M=3,N=1|float32" in result.message
    elif stem == "cheat_never_returns":
        assert "6 s limit" in result.message
    elif stem == "cheat_raises":
        assert result.message.endswith("RuntimeError: the candidate gave up")
    elif stem == "cheat_triton_compile_error":
        assert "arange's range must be a power of 2" in result.message
    elif (
        stem in ("cheat_forges_status", "cheat_plants_pickle", "cheat_forges_verdict_from_stack")
        and result.status is Status.crashed
    ):
        assert "without reporting" in result.message  # what it wrote into scratch was never read
        assert not PICKLE_MARKER.exists()
    elif stem == "cheat_side_stream":
        assert result.message.startswith("line 7: use of torch.cuda.Stream")
    elif stem in ("cheat_honest_first_calls", "cheat_computes_outside_timed_call"):
        assert result.shape_results and all(r.passed for r in result.shape_results)  # correctness passed
        assert "timed call" in result.message and result.timing == ()
    elif stem in ("cheat_honest_unless_timing_name", "cheat_slows_eager_baseline") and result.passed:
        assert result.timing and all(t.baselines[0].name == "eager" for t in result.timing)
        # the hook in this candidate's process cannot reach the baselines' process
        assert all(t.baselines[0].timing.latency_ms_p50 < 100.0 for t in result.timing)
    elif stem in ("cheat_prints_secrets",):
        assert "[redacted]" in result.stderr_tail and "sk-proj-QQQQ" not in result.stderr_tail + result.message
        assert "OPENAI_API_KEY=" not in result.stderr_tail.replace("OPENAI_API_KEY=[redacted]", "")
    elif stem in ("cheat_forges_store_document", "cheat_corrupts_store"):
        home, cache = world["home"], world["home"] / "cache"
        after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
        # the evaluator (the parent, outside the sandbox) may keep its stress plans in the home's
        # cache; every such file is a plan it wrote, and nothing else in the home has changed
        kept = {p: b for p, b in after.items() if cache not in p.parents}
        assert kept == world["snapshot"]
        for path, data in after.items():
            if cache in path.parents:
                assert path.parent == cache / "stress-plans" and json.loads(data)["plan"], path
    elif stem == "cheat_appends_to_compare":
        compare = ROOT / "evaluation" / "compare.py"
        assert hashlib.sha256(compare.read_bytes()).hexdigest() == _COMPARE_SHA
    elif stem == "cheat_setsid_grandchild" and result.status is Status.incorrect:
        time.sleep(0.3)
        assert not [
            pid
            for pid in filter(str.isdigit, os.listdir("/proc"))
            if _cmdline(pid).endswith(f"sleep {world['marker']}")
        ]
    elif stem == "cheat_stops_parent" and result.status is Status.incorrect:
        assert world["wall_s"] < 60.0  # the parent's clock never stopped
    elif stem == "cheat_softmax_no_max" or stem == "cheat_logsumexp_no_max":
        assert all("large_" in r.message for r in result.shape_results if not r.passed)
    elif stem == "cheat_wrong_layout":
        assert "strides" in result.message and "LAYOUT_FREE" in result.message


_COMPARE_SHA = hashlib.sha256((ROOT / "evaluation" / "compare.py").read_bytes()).hexdigest()


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


# Through warm workers (evaluation/pool.py): the process was started, limited, sandboxed and warmed up
# before the request existed, and the cheat arrives with the request. Each barrier must hold the same.
THROUGH_WARM = (
    "cheat_zeros",
    "cheat_reads_parent_environ",
    "cheat_kills_parent",
    "cheat_never_returns",
    "cheat_os_exit",
)


@pytest.mark.parametrize("stem", THROUGH_WARM)
def test_through_a_warm_worker_a_cheat_gets_the_same_verdict(stem, world, monkeypatch):
    from evaluation import pool

    cheat = CASES[stem]
    verdict, sandbox = cheat.verdict, "auto"
    if cheat.unchecked is not None:  # the barrier behind the static check is the one to test here
        if cheat.sandbox and not SANDBOX.ok:
            pytest.skip(f"needs the OS sandbox, and none can be made here: {SANDBOX.reason}")
        monkeypatch.setattr(harness, "check_source", lambda source, module=None: StaticReport(None, True, ()))
        verdict, sandbox = cheat.unchecked, "required" if cheat.sandbox else "auto"
    monkeypatch.setenv("KSCOUT_WARM_WORKERS", "1")
    pool.close_all()
    try:
        isolation = harness.resolve_sandbox(sandbox, "cpu")
        warm = pool.pool("cpu", isolation, harness.scratch_root())
        warm.fill()
        time.sleep(1.0)  # let it warm up past the point where the request would arrive
        result = _run(stem, cheat, world, monkeypatch, sandbox=sandbox)
        assert warm.handed == 1  # the candidate ran in the warm worker, not in a fresh process
    finally:
        pool.close_all()
    _assert_verdict(result, verdict)
    _check_details(stem, result, world)
