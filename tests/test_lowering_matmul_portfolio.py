"""On a GPU the lowering's seed reaches Hopper GEMM tiles at once: after the default, a portfolio of
tensor-core (tf32x3) and large exact-fp32 tiles, fitted to the shipped M, N, K (clamped to small
outputs, split over K when few output tiles meet a long K). On the CPU the seed is as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from lowering_cases import CASES, assert_close, problem_info, ref, run_lowered

from agent.proposers.base import Action, ProposeRequest
from agent.proposers.lowering import lower_source, space
from agent.proposers.lowering.propose import (
    PORTFOLIO,
    SMEM_LIMIT_BYTES,
    LoweringSearch,
    _normal,
    _smem_bytes,
    for_device,
)

DEV = Path(
    os.environ.get("KSCOUT_KERNELBENCH_DEV", Path(__file__).resolve().parents[1] / ".." / "shared" / "kernelbench-dev")
)
LEVEL1 = DEV / "level1"


def gemm(m: int, k: int, n: int, epilogue: str = "torch.matmul(a, b)") -> str:
    return ref(
        f"def forward(self, a, b):\n    return {epilogue}\n",
        "[torch.randn(M, K), torch.randn(K, N)]",
        consts=f"M = {m}\nK = {k}\nN = {n}\n",
    )


def _seed(tmp_path, name: str, source: str, device: str = "cuda", n: int = 8, path: str | None = None):
    problem = problem_info(tmp_path, name, source)
    lowered = lower_source(source, path or problem.source_path)
    request = ProposeRequest(
        problem=problem,
        device=device,
        arch="sm_90" if device == "cuda" else "cpu",
        device_name="NVIDIA H100 80GB HBM3" if device == "cuda" else "cpu",
        action=Action.seed,
        n=n,
    )
    return lowered, LoweringSearch(lowered).propose(request)


def _matmuls(proposal) -> list[dict]:
    return [g for g in proposal.knobs["groups"] if g["kind"] == "matmul"]


def _is_tensor_core_tile(proposal) -> bool:
    groups = _matmuls(proposal)
    return bool(groups) and all(g["precision"] == "tf32x3" and max(g["block_m"], g["block_n"]) >= 128 for g in groups)


def _check_first_batch(lowered, proposals) -> None:
    assert proposals[0].knobs == _normal(lowered, lowered.default_config())
    assert proposals[0].transformation_tags[:1] == ("seed",) and "portfolio" not in proposals[0].transformation_tags
    assert sum(_is_tensor_core_tile(p) for p in proposals) >= 4, [_matmuls(p) for p in proposals]
    for p in proposals:
        for g in p.knobs["groups"]:
            space.validate_group(g["kind"], g)
    keys = [json.dumps(p.knobs, sort_keys=True) for p in proposals]
    assert len(set(keys)) == len(keys)


def test_a_gpu_seed_puts_tensor_core_tiles_right_after_the_default(tmp_path):
    lowered, result = _seed(tmp_path, "gemm", gemm(1024, 2048, 768))
    assert result.errors == () and len(result.proposals) == 8
    _check_first_batch(lowered, result.proposals)
    first = result.proposals[1]
    assert first.transformation_tags[:2] == ("seed", "portfolio")
    assert first.rationale.startswith("seed portfolio: 128x128x32 tiles, 8 warps, 3 stages, tf32x3: ")
    assert _matmuls(first) == [
        {
            "kind": "matmul",
            "block_m": 128,
            "block_n": 128,
            "block_k": 32,
            "group_m": 8,
            "num_warps": 8,
            "num_stages": 3,
            "split_k": 1,
            "precision": "tf32x3",
            "engine": "triton",
        }
    ]
    assert 'input_precision="tf32x3"' in first.source and "num_warps=8, num_stages=3" in first.source


def test_the_whole_portfolio_comes_before_single_moves_and_holds_exact_fp32_tiles(tmp_path):
    _, result = _seed(tmp_path, "gemm", gemm(1024, 2048, 768), n=len(PORTFOLIO) + 2)
    tags = [p.transformation_tags for p in result.proposals]
    assert [("portfolio" in t) for t in tags] == [False] + [True] * len(PORTFOLIO) + [False]
    assert result.proposals[-1].rationale.startswith("seed variant, ")
    ieee = [g for p in result.proposals[1:-1] for g in _matmuls(p) if g["precision"] == "ieee"]
    assert ieee and all(max(g["block_m"], g["block_n"]) >= 128 for g in ieee)


def test_every_portfolio_tile_fits_hopper_shared_memory():
    assert len(PORTFOLIO) >= 8
    for t in PORTFOLIO:
        assert _smem_bytes(t.block_m, t.block_n, t.block_k, t.num_stages) <= SMEM_LIMIT_BYTES, t
        space.validate_group("matmul", t.knobs(), partial=True)
    # the tutorial's fp16 tile 128x256x64 in 3 stages: 288 KB of fp32 operands, more than an SM has
    assert _smem_bytes(128, 256, 64, 3) == 294_912 > SMEM_LIMIT_BYTES
    assert (128, 256, 64, 3) not in {(t.block_m, t.block_n, t.block_k, t.num_stages) for t in PORTFOLIO}


def test_every_matmul_group_of_the_graph_gets_the_tile_and_the_others_keep_theirs(tmp_path):
    lowered, result = _seed(tmp_path, "sdpa", CASES["sdpa"], n=4)
    base = _normal(lowered, lowered.default_config())
    tiled = result.proposals[1]
    assert [g["kind"] for g in tiled.knobs["groups"]] == ["matmul", "row", "matmul"]
    assert tiled.knobs["groups"][1] == base["groups"][1]
    assert all(g["precision"] == "tf32x3" and g["num_warps"] == 8 for g in _matmuls(tiled))


def test_tiles_are_clamped_to_a_small_output_and_each_configuration_comes_once(tmp_path):
    _, result = _seed(tmp_path, "small", gemm(32, 16, 8), n=40)
    portfolio = [p for p in result.proposals if "portfolio" in p.transformation_tags]
    tiles = [_matmuls(p)[0] for p in portfolio]
    assert tiles and all(g["block_m"] == 32 and g["block_n"] == 16 for g in tiles)
    assert "clamped to 32x16 for M=32, N=8" in portfolio[0].rationale
    # 128x128x32 w8 s3 and 128x256x32 w8 s3 are one configuration once clamped; so are the two w4 s4 tiles
    points = {(g["block_k"], g["num_warps"], g["num_stages"], g["precision"]) for g in tiles}
    assert len(points) == len(tiles) < len(PORTFOLIO)
    assert all(g["split_k"] == 1 for g in tiles)  # K = 16: nothing to split


def test_few_output_tiles_over_a_long_k_get_split_k_variants_early(tmp_path):
    # 512 x 512 is 16 tiles of 128 x 128 on 132 SMs, and K = 4096 >= 8 * 512; the default does not split
    lowered, result = _seed(tmp_path, "long_k", gemm(512, 4096, 512), n=8)
    assert lowered.default_config()["groups"][0]["split_k"] == 1
    split = [p for p in result.proposals if any(g["split_k"] > 1 for g in _matmuls(p))]
    assert split and all("portfolio" in p.transformation_tags for p in split)
    first = split[0]
    assert result.proposals.index(first) == 2  # right after the first portfolio tile
    assert _matmuls(first)[0] | {"split_k": 1} == _matmuls(result.proposals[1])[0]
    assert _matmuls(first)[0]["split_k"] == 16  # 16 tiles x 16 = 256 programs
    assert "16 output tile(s) with K=4096 split 16 ways for 256 programs" in first.rationale
    assert first.source.count("@triton.jit") == 2  # the partial contraction, then the reduction over chunks
    _check_first_batch(lowered, result.proposals)


def test_many_output_tiles_get_no_split(tmp_path):
    _, result = _seed(tmp_path, "many_tiles", gemm(2048, 8192, 4096), n=14)
    assert all(g["split_k"] == 1 for p in result.proposals for g in _matmuls(p))


def test_the_cpu_seed_is_the_default_then_single_moves_as_before(tmp_path):
    source = gemm(64, 48, 40, "torch.relu(torch.matmul(a, b)) * 2.0")
    lowered = lower_source(source, str(tmp_path / "cpu_gemm.py"))
    base = for_device(lowered.default_config(), "cpu")
    moves = space.knob_moves(base) + space.schedule_moves(base)
    expected = [_normal(lowered, base)] + [_normal(lowered, m.apply(base)) for m in moves]
    _, result = _seed(tmp_path, "cpu_gemm", source, device="cpu", n=len(expected), path=str(tmp_path / "cpu_gemm.py"))
    assert [p.knobs for p in result.proposals] == expected
    assert not any("portfolio" in p.transformation_tags for p in result.proposals)


def test_a_graph_without_a_contraction_gets_no_portfolio(tmp_path):
    _, result = _seed(tmp_path, "softmax", CASES["softmax_dim1"], n=6)
    assert not any("portfolio" in p.transformation_tags for p in result.proposals)


@pytest.mark.parametrize(
    "name",
    [
        "2_Standard_matrix_multiplication_.py",
        "17_Matmul_with_transposed_B.py",
        "6_Matmul_with_large_K_dimension_.py",
    ],
)
def test_kernelbench_gemms_are_seeded_with_tensor_core_tiles(tmp_path, name):
    path = LEVEL1 / name
    if not path.is_file():
        pytest.skip(f"needs {path} (the KernelBench dev problems)")
    lowered, result = _seed(tmp_path, name.removesuffix(".py"), path.read_text(), n=10, path=str(path))
    assert result.errors == ()
    _check_first_batch(lowered, result.proposals[:8])
    split = [g["split_k"] for p in result.proposals for g in _matmuls(p)]
    if name.startswith("6_"):  # 256 x 256 from K = 524288: every tile is split (the default's 32 ways)
        assert all(s > 1 for s in split)
    else:
        assert set(split) == {1}


def test_a_tf32x3_portfolio_candidate_and_its_split_k_variant_compute_the_product(tmp_path):
    """Rendered for the GPU, run here under the Triton interpreter at a tiny shape: 16 x 16 from K = 4096
    splits 16 ways."""
    source = gemm(16, 4096, 16, "torch.relu(torch.matmul(a, b)) + 1.0")
    path = str(tmp_path / "tiny_long_k.py")
    _, result = _seed(tmp_path, "tiny_long_k", source, n=3, path=path)
    tiled, split = result.proposals[1], result.proposals[2]
    assert _matmuls(tiled)[0]["precision"] == "tf32x3" and _matmuls(split)[0]["split_k"] == 16
    for candidate in (tiled, split):
        _, out, expected, flagged = run_lowered(source, path=path, candidate=candidate.source)
        assert flagged == {}
        assert_close(out, expected, atol=1e-3, rtol=1e-4)
