"""On a GPU: timing with baselines and the copy ceiling, compiler facts, remeasure. Skipped on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation import evaluate, load_problem, remeasure
from evaluation.records import Status

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).parent.parent
SEED = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()
CHEATS = Path(__file__).parent / "adversarial"


@pytest.fixture(scope="module")
def small_layernorm():
    # Every declared cuda width, 256 rows: the whole cascade in seconds rather than minutes.
    return load_problem("layernorm", "cuda", {"M": 256})


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
    result = evaluate((CHEATS / "cheat_fixed_width.py").read_text(), small_layernorm, device="cuda", trials=1,
                      time_it=False)
    assert result.status in (Status.incorrect, Status.crashed)
    assert not any(r.passed for r in result.shape_results if r.params["N"] != 256)


def test_remeasure_interleaves_candidates_with_the_baseline(small_layernorm):
    one_warp = SEED.replace("num_warps = min(max(block // 256, 1), 16)", "num_warps = 1")
    result = remeasure({"seed": SEED, "one_warp": one_warp}, small_layernorm, device="cuda", rounds=3)
    assert result.note is None
    for cand in result.candidates:
        assert cand.error is None and cand.cases
        for case in cand.cases:
            assert len(case.candidate_p50s_ms) == len(case.baseline_p50s_ms) == 3
            assert case.speedup_min <= case.speedup <= case.speedup_max
            assert case.significant == (case.speedup_min > 1.0)


def test_rows_a_kernel_never_writes_read_as_nan_not_zero(small_layernorm):
    result = evaluate((CHEATS / "cheat_partial_write.py").read_text(), small_layernorm, device="cuda", trials=1,
                      time_it=False)
    assert result.status is Status.incorrect and result.error_class == "NonFinite"
