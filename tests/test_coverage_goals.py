"""The speed issue's goal table from a coverage CSV (agent/search/goals.py): which problems belong to which
set, and a set met only when every member passed, was timed and reached the geomean and the floor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.search import goals
from agent.search.coverage import NOT_MEASURED, _write_csv, read_csv


def row(level, problem, category, status="passed", vs_compile=1.0):
    return dict(level=level, problem=problem, category=category, status=status, speedup_vs_torch_compile=vs_compile)


def written(tmp_path: Path, rows: list[dict]) -> list[dict]:
    """The rows as the coverage benchmark writes them and reads them back (strings, 'not measured')."""
    path = tmp_path / "coverage.csv"
    _write_csv(path, rows)
    return read_csv(path)


def by_name(results) -> dict:
    return {s.name: s for s in results}


def test_each_problem_lands_in_the_set_its_file_name_says_and_the_matrix_scalar_product_in_none():
    rows = [
        row("1", "2_Standard_matrix_multiplication_", "gemm"),
        row("1", "5_Matrix_scalar_multiplication", "gemm"),  # an elementwise product, not a contraction
        row("2", "76_Gemm_Add_ReLU", "gemm"),
        row("2", "63_Gemm_ReLU_Divide", "gemm"),
        row("2", "6_Conv3d_Softmax_MaxPool_MaxPool", "conv"),
        row("1", "48_Mean_reduction_over_a_dimension", "other"),
        row("1", "52_Argmin_over_a_dimension", "other"),
        row("1", "34_InstanceNorm", "other"),
        row("1", "37_FrobeniusNorm_", "other"),  # over every element: not a non-last-dim reduction
        row("1", "19_ReLU", "other"),
    ]
    sets = by_name(goals.judge(rows))
    assert [s.problems for s in sets.values()] == [1, 2, 1, 3]
    assert sets["level-1 reductions over a non-last dim"].problems == 3


def test_a_set_above_its_geomean_and_floor_is_met(tmp_path):
    rows = written(
        tmp_path,
        [row("2", "76_Gemm_Add_ReLU", "gemm", vs_compile=1.5), row("2", "63_Gemm_ReLU_Divide", "gemm", vs_compile=1.0)],
    )
    s = by_name(goals.judge(rows))["level-2 GEMM + epilogue"]
    assert s.verdict == "met"
    assert s.geomean == pytest.approx((1.5 * 1.0) ** 0.5, rel=1e-3)
    assert (s.worst, s.worst_ratio) == ("63_Gemm_ReLU_Divide", pytest.approx(1.0))
    assert s.goal == "geomean >= 1.2, none below 0.9"


def test_a_fast_geomean_with_one_problem_below_the_floor_is_not_met_and_names_it(tmp_path):
    rows = written(
        tmp_path,
        [
            row("1", "2_Standard_matrix_multiplication_", "gemm", vs_compile=1.6),
            row("1", "17_Matmul_with_transposed_B", "gemm", vs_compile=0.7),
        ],
    )
    s = by_name(goals.judge(rows))["level-1 matmul"]
    assert s.geomean == pytest.approx((1.6 * 0.7) ** 0.5, rel=1e-3) and s.geomean > 1.0
    assert s.verdict == "not met: 17_Matmul_with_transposed_B at 0.7 < 0.8"


def test_a_problem_that_did_not_pass_is_a_miss_not_left_out_of_the_set(tmp_path):
    rows = written(
        tmp_path,
        [
            row("2", "6_Conv3d_Softmax_MaxPool_MaxPool", "conv", vs_compile=1.4),
            row("2", "24_Conv3d_Min_Softmax", "conv", status="failed", vs_compile="-"),
        ],
    )
    s = by_name(goals.judge(rows))["level-2 convolution + epilogue"]
    assert (s.problems, s.passed, s.timed) == (2, 1, 1)
    assert s.geomean == pytest.approx(1.4)  # above the goal on the one that passed, and still:
    assert s.verdict == "not met: 1 of 2 did not pass"
    assert s.missed == ("24_Conv3d_Min_Softmax",)


def test_a_cpu_csv_is_not_measured_and_a_set_without_problems_says_so(tmp_path):
    rows = written(tmp_path, [row("1", "48_Mean_reduction_over_a_dimension", "other", vs_compile=NOT_MEASURED)])
    sets = by_name(goals.judge(rows))
    assert sets["level-1 reductions over a non-last dim"].verdict == "not measured"
    assert sets["level-1 reductions over a non-last dim"].geomean is None
    assert sets["level-1 matmul"].verdict == "no problems"


def test_the_command_prints_the_table_and_json_and_refuses_a_missing_or_foreign_file(tmp_path, capsys):
    path = tmp_path / "coverage.csv"
    _write_csv(path, [row("1", "17_Matmul_with_transposed_B", "gemm", vs_compile=0.84)])
    assert goals.main([str(path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| set | problems | passed | timed | geomean x compile")
    assert "| level-1 matmul | 1 | 1 | 1 | 0.84 | 17_Matmul_with_transposed_B 0.84 |" in table[2]
    assert table[2].endswith("| not met: geomean 0.84 < 1 |")
    assert goals.main([str(path), "--json"]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["name"] == "level-1 matmul" and first["worst_ratio"] == pytest.approx(0.84)
    assert goals.main([str(tmp_path / "absent.csv")]) == 2
    assert "cannot read" in capsys.readouterr().err
    foreign = tmp_path / "other.csv"
    foreign.write_text("a,b\n1,2\n")
    assert goals.main([str(foreign)]) == 2
    assert "is not a coverage CSV (missing category, level, problem" in capsys.readouterr().err
