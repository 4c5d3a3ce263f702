"""The coverage benchmark (python -m agent.coverage): its bookkeeping, and a CI subset of the
KernelBench dev set searched through the real session and evaluator under the interpreter.

The dev set is read from $KSCOUT_KERNELBENCH_DEV (default: ../shared/kernelbench-dev beside the repo);
tests that need it are skipped where it is absent."""

import json
import os
import textwrap
from pathlib import Path

import pytest

from agent.search.coverage import category, level_of, literal_sizes, markdown_table, run_coverage, summary_line

DEV = Path(
    os.environ.get("KSCOUT_KERNELBENCH_DEV", Path(__file__).resolve().parents[1] / ".." / "shared" / "kernelbench-dev")
)
needs_dev = pytest.mark.skipif(not (DEV / "level1").is_dir(), reason=f"no KernelBench dev set at {DEV}")

# one or two problems of each schedule kind, all with plain int size constants (CPU-sized cases)
CI_SUBSET = [
    "level1/19_ReLU.py",  # pointwise
    "level1/26_GELU_.py",  # pointwise (erf)
    "level1/12_Matmul_with_diagonal_matrices_.py",  # pointwise with broadcasting
    "level1/48_Mean_reduction_over_a_dimension.py",  # reduction over a middle dim
    "level1/52_Argmin_over_a_dimension.py",  # arg-reduction
    "level1/34_InstanceNorm.py",  # row (normalisation over spatial dims)
    "level1/39_L2Norm_.py",  # row (norm over dim 1)
    "level1/89_cumsum.py",  # scan
    "level1/10_3D_tensor_matrix_multiplication.py",  # matmul (3-D times 2-D)
    "level1/15_Matmul_for_lower_triangular_matrices.py",  # matmul with a fused tril epilogue
    "level1/97_ScaledDotProductAttention.py",  # flash attention (the attention family template)
    "level2/84_Gemm_BatchNorm_Scaling_Softmax.py",  # GEMM + softmax rows
    "level2/80_Gemm_Max_Subtract_GELU.py",  # GEMM + reductions + epilogue
]


def _row(level, category_, status, x_eager="not measured", x_compile="not measured", compile_interval=("-", "-")):
    return dict(
        level=level,
        problem="p",
        category=category_,
        status=status,
        schedule="s",
        evaluations=1,
        first_pass=1,
        speedup_vs_eager=x_eager,
        speedup_vs_torch_compile=x_compile,
        torch_compile_low=compile_interval[0],
        torch_compile_high=compile_interval[1],
        seconds=1.0,
        run_id="r",
        detail="",
    )


def test_problems_are_classified_by_level_and_contraction_kind():
    assert category(Path("level2/30_Gemm_GroupNorm_Hardtanh.py")) == "gemm"
    assert category(Path("level2/17_Conv2d_InstanceNorm_Divide.py")) == "conv"
    assert category(Path("level1/4_Matrix_vector_multiplication_.py")) == "gemm"
    assert category(Path("level1/19_ReLU.py")) == "other"
    assert level_of(Path("/x/kernelbench-dev/level2/9_Matmul.py")) == "2"


def test_the_summary_counts_the_targets_and_takes_geomeans_over_passed_problems():
    rows = [
        _row("1", "other", "passed", 2.0, 1.0, (0.9, 1.1)),
        _row("1", "gemm", "passed", 8.0, 4.0, (3.5, 4.4)),
        _row("1", "conv", "unsupported"),
        _row("1", "other", "failed"),
        _row("2", "gemm", "passed", 1.0, 0.25),
        _row("2", "conv", "harness_error"),
    ]
    line = summary_line(rows)
    assert "6 problems: 1 failed, 1 harness_error, 3 passed, 1 unsupported" in line
    assert "level-1 without convolutions passed 2/3 (67%)" in line
    assert "level-2 GEMM passed 1/1 (100%)" in line
    assert "geomean x eager 2.52" in line and "geomean x torch.compile 1 (1 above 1, 1 significantly)" in line
    table = markdown_table(rows)
    assert "| 4 [3.5, 4.4] |" in table and "| 1 [0.9, 1.1] |" in table
    cpu = summary_line([_row("1", "other", "passed")])
    assert "speed not measured on this device" in cpu


def test_literal_sizes_folds_expression_and_tuple_constants(tmp_path):
    src = tmp_path / "level1" / "7_thing.py"
    src.parent.mkdir()
    src.write_text(
        textwrap.dedent("""
        import torch
        M = 1024 * 2
        shape = (32768, 3)
        height = width = 64
        K = 5
        def get_inputs():
            return [torch.rand(M, *shape)]
        """)
    )
    out = literal_sizes(src, tmp_path / "copies")
    assert out == tmp_path / "copies" / "level1" / "7_thing.py"
    text = out.read_text()
    assert "M = 2048" in text and "shape_0 = 32768" in text and "shape_1 = 3" in text
    assert "shape = (shape_0, shape_1)" in text and "K = 5" in text
    assert "height = 64" in text and "width = 64" in text
    plain = tmp_path / "level1" / "8_plain.py"
    plain.write_text("N = 4\n")
    assert literal_sizes(plain, tmp_path / "copies") == plain  # nothing to fold: the file itself


@needs_dev
def test_relu_reaches_a_passed_candidate_through_the_real_search(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    rows = run_coverage([DEV / "level1" / "19_ReLU.py"], budget=1, device="cpu", out=tmp_path, trials=1, quiet=True)
    assert [(r["status"], r["schedule"], r["evaluations"], r["first_pass"]) for r in rows] == [
        ("passed", "pointwise", 1, 1)
    ]
    assert (tmp_path / "coverage.csv").read_text().count("\n") == 2


def test_coverage_searches_in_the_batches_optimize_uses_unless_told_and_refuses_a_zero_batch(capsys, monkeypatch):
    from agent.search.coverage import _batch, main

    assert (_batch(None, "cuda"), _batch(None, "cpu"), _batch(3, "cuda")) == (8, 1, 3)
    monkeypatch.delenv("KSCOUT_VECTORS", raising=False)
    for flag in ("--batch", "--budget"):
        with pytest.raises(SystemExit) as ended:
            main(["nowhere", flag, "0"])
        assert ended.value.code == 2 and f"{flag} must be at least 1 (got 0)" in capsys.readouterr().err
    assert "KSCOUT_VECTORS" not in os.environ  # a refused command sets none of its defaults


@needs_dev
def test_a_coverage_search_told_a_batch_checks_that_many_candidates_a_step(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    rows = run_coverage(
        [DEV / "level1" / "19_ReLU.py"], budget=2, device="cpu", out=tmp_path, trials=1, quiet=True, batch=2
    )
    assert [(r["status"], r["evaluations"]) for r in rows] == [("passed", 2)]
    from store import Store

    (home,) = [d for d in tmp_path.iterdir() if d.name.startswith("store-")]
    with Store.open(home) as st:
        run = st.get_run(rows[0]["run_id"])
    config = json.loads(run.config_json)
    assert (config["batch"], config["workers"]) == (2, 2)


@needs_dev
def test_concurrent_searches_overlap_and_keep_one_row_per_file_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    broken = tmp_path / "level1" / "99_Broken.py"
    broken.parent.mkdir()
    broken.write_text("import torch\n\nclass Model(torch.nn.Module):\n    pass\n")  # no get_inputs
    files = [DEV / "level1" / "19_ReLU.py", broken, DEV / "level1" / "26_GELU_.py"]
    out = tmp_path / "out"
    rows = run_coverage(files, budget=1, device="cpu", out=out, trials=1, quiet=True, concurrency=2)
    assert [(r["problem"], r["status"]) for r in rows] == [
        ("19_ReLU", "passed"),
        ("99_Broken", "harness_error"),
        ("26_GELU_", "passed"),
    ]
    assert "get_inputs" in rows[1]["detail"]
    assert (out / "coverage.csv").read_text().count("\n") == 4
    from store import Store

    (home,) = [d for d in out.iterdir() if d.name.startswith("store-")]
    with Store.open(home) as st:
        relu, gelu = (st.get_run(rows[i]["run_id"]) for i in (0, 2))
    assert relu.started_at < gelu.finished_at and gelu.started_at < relu.finished_at  # the two searches overlapped


@needs_dev
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_ci_subset_of_every_schedule_kind_passes_in_interpreter_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    # Per-evaluation limit well above the interpreter's cost: 97_ScaledDotProductAttention's 14 derived cases
    # (one a 1537x1537 attention matrix) take 258 s here and ran past 300 s on a loaded CI machine.
    rows = run_coverage(
        [DEV / p for p in CI_SUBSET], budget=1, device="cpu", out=tmp_path, trials=1, quiet=True, timeout_s=900.0
    )
    failed = [(r["problem"], r["status"], r["detail"][:200]) for r in rows if r["status"] != "passed"]
    assert failed == []
    kinds = {k for r in rows for k in r["schedule"].split("+")}
    assert {"pointwise", "reduction", "row", "scan", "matmul"} <= kinds
