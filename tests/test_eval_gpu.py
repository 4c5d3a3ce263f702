"""On a GPU: timing with baselines and the copy ceiling, compiler facts, remeasure. Skipped on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation import evaluate, load_problem, remeasure, time_many
from evaluation.records import Status

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).parent.parent
SEED = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()
CHEATS = Path(__file__).parent / "adversarial"


@pytest.fixture(scope="module")
def small_layernorm():
    """Every declared cuda width up to the edge cases', 256 rows: the whole cascade in seconds. The
    few-long-rows case (16 rows of 4M) is left out: with M=256 it would be 1G elements a tensor, and
    the one-block-per-row cheats cannot even compile a 4M-wide block."""
    info = load_problem("layernorm", "cuda", {"M": 256})
    cases = tuple(c for c in info.shape_cases if "long_rows" not in c.tags)
    assert len(cases) < len(info.shape_cases) and max(c.params["N"] for c in cases) <= 16384
    return info.model_copy(update={"shape_cases": cases})


def test_seed_on_cuda_is_timed_against_eager_and_compile_with_the_copy_ceiling(small_layernorm, kscout_home):
    result = evaluate(SEED, small_layernorm, device="cuda", trials=1)
    assert result.status is Status.passed, result.message
    timed = {c.case_id for c in small_layernorm.shape_cases if "timed" in c.tags}
    assert {t.case_id for t in result.timing} == timed
    assert result.ceiling_gbps and 500 < result.ceiling_gbps < 20000
    assert list((kscout_home / "cache").glob("copy-ceiling-*.json"))
    for t in result.timing:
        c = t.candidate
        assert c.method == "cuda_graph" and c.l2_flushed and c.n_samples >= 20
        assert 0 < c.latency_ms_min <= c.latency_ms_p20 <= c.latency_ms_p50 <= c.latency_ms_p80
        assert [b.name for b in t.baselines] == ["eager", "torch_compile"]
        assert {s.baseline for s in t.speedups} == {b.name for b in t.baselines if b.timing}
        assert t.bytes_moved > 0 and t.achieved_gbps > 0 and 0 < t.pct_of_ceiling < 150
    assert any(k.n_regs is not None and k.num_warps for k in result.kernels)


def test_unmasked_fixed_width_kernel_never_passes_on_cuda(small_layernorm):
    result = evaluate(
        (CHEATS / "cheat_fixed_width.py").read_text(), small_layernorm, device="cuda", trials=1, time_it=False
    )
    assert result.status in (Status.incorrect, Status.crashed)
    assert not any(r.passed for r in result.shape_results if r.params["N"] != 256)


ONE_WARP = SEED.replace("num_warps = min(max(block // 256, 1), 16)", "num_warps = 1")


def _fails_later():
    """The seed, but it raises when run from any folder but c0: its check runs it from c0, and the
    timing process of three siblings from c2, so it passes correctness and fails in timing. (It counted
    its calls once; the check's calls on a GPU outgrew the count.)"""
    assert "def forward(self, x" in SEED and "class ModelNew(nn.Module):" in SEED
    head, tail = SEED.split("    def forward(self, x", 1)
    signature, body = tail.split("\n", 1)
    guard = (
        "        if __file__.replace('\\\\', '/').split('/')[-2] != 'c0':\n"
        "            raise RuntimeError('worn out in the timing process')\n"
    )
    return head + "    def forward(self, x" + signature + "\n" + guard + body


def test_remeasure_interleaves_candidates_with_eager_and_compile(small_layernorm):
    result = remeasure(
        {"seed": SEED, "one_warp": ONE_WARP},
        small_layernorm,
        device="cuda",
        rounds=3,
        baselines=("eager", "torch_compile"),
    )
    assert result.note is None
    for cand in result.candidates:
        assert cand.error is None and cand.cases
        for case in cand.cases:
            assert len(case.candidate_p50s_ms) == len(case.baseline_p50s_ms) == len(case.compile_p50s_ms) == 3
            assert case.speedup_min <= case.speedup <= case.speedup_max
            assert case.significant == (case.speedup_min > 1.0)
            assert case.speedup_vs_compile_min <= case.speedup_vs_compile <= case.speedup_vs_compile_max
    seed, one = result.candidates
    assert [c.compile_p50s_ms for c in seed.cases] == [c.compile_p50s_ms for c in one.cases]  # one measurement


def test_remeasure_interleaves_max_autotune_when_asked_and_gives_its_ratio(small_layernorm):
    result = remeasure(
        {"seed": SEED}, small_layernorm, device="cuda", rounds=2, baselines=("eager", "torch_compile_max_autotune")
    )
    (cand,) = result.candidates
    assert cand.error is None and cand.cases
    for case in cand.cases:
        assert len(case.autotune_p50s_ms) == len(case.candidate_p50s_ms) == 2 and case.compile_p50s_ms == ()
        assert case.speedup_vs_autotune_min <= case.speedup_vs_autotune <= case.speedup_vs_autotune_max


def test_time_many_times_siblings_against_one_baseline_and_isolates_a_failure(small_layernorm):
    sources = [SEED, ONE_WARP, _fails_later()]
    checked = [evaluate(src, small_layernorm, device="cuda", trials=1, time_it=False) for src in sources]
    assert [c.status for c in checked] == [Status.passed] * 3
    timed = time_many(list(zip(sources, checked)), small_layernorm, device="cuda", baselines=("eager",))
    seed, one_warp, worn = timed
    assert seed.passed and one_warp.passed and seed.timing and one_warp.timing
    for a, b in zip(seed.timing, one_warp.timing):
        assert a.baselines == b.baselines and [x.name for x in a.baselines] == ["eager"]
        assert a.candidate != b.candidate
    assert seed.timing_note == "baselines timed: eager"
    assert worn.status is Status.crashed and worn.failed_stage.value == "timing"
    assert worn.error_class == "RuntimeError" and "worn out" in worn.message
    assert worn.shape_results == checked[2].shape_results  # correctness evidence kept


def test_rows_a_kernel_never_writes_read_as_nan_not_zero(small_layernorm):
    result = evaluate(
        (CHEATS / "cheat_partial_write.py").read_text(), small_layernorm, device="cuda", trials=1, time_it=False
    )
    assert result.status is Status.incorrect and result.error_class == "NonFinite"


# -- the red team's GPU tricks (issue 10): with the static check off, the run-time barriers must hold --

from evaluation import harness  # noqa: E402
from evaluation.records import Stage  # noqa: E402
from evaluation.static_check import StaticReport  # noqa: E402


@pytest.fixture
def unchecked(monkeypatch):
    monkeypatch.setattr(harness, "check_source", lambda source, module=None: StaticReport(None, True, ()))


def _cheat(stem: str) -> str:
    return (CHEATS / f"{stem}.py").read_text()


def test_doing_nothing_while_a_graph_is_captured_is_incorrect(small_layernorm, unchecked):
    result = evaluate(_cheat("cheat_idle_during_graph_capture"), small_layernorm, device="cuda", trials=1)
    assert (result.status, result.failed_stage) == (Status.incorrect, Stage.correctness), result.message
    assert "graph-captured" in result.message


@pytest.mark.parametrize("stem", ["cheat_honest_first_calls", "cheat_computes_outside_timed_call"])
def test_a_kernel_that_stops_working_when_timed_is_incorrect(small_layernorm, stem):
    """What the judge must do is refuse it with no speed; where it is caught first is its own business.
    On the H200 both cheats fail already at correctness, whose GPU half prepares each case exactly as
    for timing and judges the captured call on fresh inputs; were that to miss, the timing stage's
    checks of the first, last and fresh timed calls would catch it."""
    result = evaluate(_cheat(stem), small_layernorm, device="cuda", trials=1, baselines=("eager",))
    assert result.status is Status.incorrect and result.failed_stage in (Stage.correctness, Stage.timing)
    assert result.timing == () and not result.passed
    if result.failed_stage is Stage.correctness:
        assert "prepared (graph-captured) call" in result.message, result.message
    else:
        assert "timed call" in result.message, result.message


def test_a_patched_bench_sample_is_rejected_before_anything_is_timed(small_layernorm, unchecked):
    result = evaluate(_cheat("cheat_patches_bench_sample"), small_layernorm, device="cuda", trials=1)
    assert (result.status, result.error_class) == (Status.rejected, "PatchedHarness"), result.message


def test_a_global_hook_cannot_slow_the_eager_baseline(small_layernorm, unchecked):
    honest = evaluate(SEED, small_layernorm, device="cuda", trials=1, baselines=("eager",))
    hooked = evaluate(
        _cheat("cheat_slows_eager_baseline"), small_layernorm, device="cuda", trials=1, baselines=("eager",)
    )
    assert honest.passed and hooked.passed, hooked.message
    for h, c in zip(honest.timing, hooked.timing):
        eager_h, eager_c = h.baselines[0].timing.latency_ms_p50, c.baselines[0].timing.latency_ms_p50
        assert eager_c < 1.5 * eager_h  # the 200 ms sleep never reached the baselines' process
        assert c.speedups[0].ratio < 50


def test_the_profiler_sees_pytorch_work_the_dispatch_watch_was_blinded_to(small_layernorm, unchecked):
    result = evaluate(_cheat("cheat_dispatch_runtime_names"), small_layernorm, device="cuda", trials=1, time_it=False)
    assert (result.status, result.error_class) == (Status.rejected, "TorchCompute"), result.message
    assert "profiler" in result.message


def test_an_honest_seed_runs_only_its_own_triton_kernels_and_a_hybrid_is_labelled(small_layernorm):
    seed = evaluate(SEED, small_layernorm, device="cuda", trials=1, time_it=False)
    assert seed.passed and seed.hybrid_ops == () and seed.torch_epilogue == ()
    fixtures = Path(__file__).parent / "eval_fixtures"
    hybrid = evaluate(
        (fixtures / "conv_relu_hybrid.py").read_text(),
        load_problem(str(fixtures / "conv_relu.py"), "cuda"),
        device="cuda",
        trials=1,
        time_it=False,
    )
    assert hybrid.passed and hybrid.hybrid_ops == ("convolution",), hybrid.message


def test_max_autotune_is_a_baseline_with_a_time_cap(small_layernorm, monkeypatch):
    monkeypatch.setattr(harness, "MAX_AUTOTUNE_CAP_S", 1.0)  # far too short to compile: recorded, not fatal
    result = evaluate(SEED, small_layernorm, device="cuda", trials=1, baselines=("eager", "torch_compile_max_autotune"))
    assert result.passed, result.message
    for t in result.timing:
        autotune = [b for b in t.baselines if b.name == "torch_compile_max_autotune"][0]
        assert autotune.timing is None and "did not finish within 1 s" in autotune.error


class _SlowLane:
    def __init__(self) -> None:
        self.granted = 0

    def acquire(self, abandon) -> bool:
        if abandon.wait(1.0):  # the device is another check's for a second
            return False
        self.granted += 1
        return True

    def release(self) -> None:
        pass


def test_a_gated_check_compiles_its_kernels_before_it_waits_for_its_lane(small_layernorm):
    from evaluation import phases

    lane = _SlowLane()
    with phases.recording() as rows:
        result = evaluate(SEED, small_layernorm, device="cuda", trials=1, time_it=False, lane=lane)
    assert result.status is Status.passed, result.message
    (row,) = [r for r in rows if r["role"] == "correctness"]
    stamps, seconds = row["worker"]["stamps"], row["worker"]["seconds"]
    assert lane.granted == 1 and row["gate_s"] >= 0.9
    assert stamps["armed"] < stamps["compiled"] < stamps["proceed"]  # compiled, then waited, then the battery
    assert seconds["compile"] > 0.1  # Triton really compiled, in the pass before the lane


def test_the_attention_seed_passes_every_cuda_case_and_is_timed_against_sdpa_in_eager_and_compile(kscout_home):
    """The flash template on the device: every declared case in both dtypes (L=1, 4099 and a head dim of
    256 among them), and a ratio to SDPA's own kernels for the timed ones (any value: this is a test of
    what is measured, the peers benchmark reports how fast)."""
    info = load_problem("attention", "cuda")
    seed = (ROOT / "evaluation" / "seeds" / "attention.py").read_text()
    result = evaluate(seed, info, device="cuda", trials=1)
    assert result.status is Status.passed, result.message
    assert {r.dtype for r in result.shape_results} == {"float32", "bfloat16"}
    assert {t.case_id for t in result.timing} == {c.case_id for c in info.shape_cases if "timed" in c.tags}
    for t in result.timing:
        assert [b.name for b in t.baselines] == ["eager", "torch_compile"]
        assert all(s.ratio > 0 for s in t.speedups)
