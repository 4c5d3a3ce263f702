"""`kscout eval`, `kscout problems` and `python -m evaluation.bench`, through their real entry points."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from agent.cli import main
from evaluation import bench

ROOT = Path(__file__).parent.parent
SEED = ROOT / "evaluation" / "seeds" / "layernorm.py"
CHEATS = Path(__file__).parent / "adversarial"


def _kscout(argv, capsys) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_json_prints_one_object_and_exits_0_when_the_candidate_passes(capsys):
    code, out, err = _kscout(
        ["eval", str(SEED), "--problem", "layernorm", "--device", "cpu", "--trials", "1", "--set", "M=2", "--json"],
        capsys,
    )
    assert code == 0, err
    result = json.loads(out)
    assert out.strip().count("\n") == 0
    assert result["status"] == "passed" and result["failed_stage"] is None
    assert {r["params"]["M"] for r in result["shape_results"]} == {2}
    assert all(r["passed"] for r in result["shape_results"])
    assert result["timing"] == [] and result["timing_note"].startswith("not measured")
    assert result["fingerprint"]["device_kind"] == "cpu"


def test_eval_time_case_reaches_the_problem_the_candidate_is_judged_against(capsys):
    from evaluation import load_problem

    code, out, err = _kscout(
        [
            "eval",
            str(SEED),
            "--problem",
            "layernorm",
            "--device",
            "cpu",
            "--trials",
            "1",
            "--set",
            "M=2",
            "--time-case",
            "M=2,N=97|bfloat16",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    result = json.loads(out)
    picked = load_problem("layernorm", "cpu", {"M": 2}, timed=["M=2,N=97|bfloat16"])
    assert result["problem_id"] == picked.problem_id != load_problem("layernorm", "cpu", {"M": 2}).problem_id


def test_eval_exits_1_with_a_table_and_status_line_when_the_candidate_fails(capsys):
    code, out, _ = _kscout(["eval", str(CHEATS / "cheat_no_triton.py"), "-p", "layernorm", "--device", "cpu"], capsys)
    assert code == 1
    assert "status: rejected at correctness (NoTritonLaunch): forward launched no Triton kernel" in out


def test_eval_json_of_a_failing_candidate_still_prints_exactly_one_object(capsys):
    code, out, _ = _kscout(["eval", str(CHEATS / "cheat_syntax_error.py"), "-p", "layernorm", "--json"], capsys)
    assert code == 1
    assert json.loads(out)["status"] == "compile_error"


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["eval", "/nonexistent/cand.py", "-p", "layernorm"], "cannot read candidate /nonexistent/cand.py"),
        (["eval", str(CHEATS / "cheat_no_model_new.py"), "-p", "layernorm"], "defines no ModelNew"),
        (["eval", str(SEED), "-p", "nosuchproblem"], "unknown problem 'nosuchproblem'; built-in problems:"),
        (["eval", str(SEED), "-p", str(SEED)], "defines no `Model`"),
        (["eval", str(SEED), "-p", "layernorm", "--set", "N"], "malformed --set 'N'"),
        (["eval", str(SEED), "-p", "layernorm", "--set", "N=big"], "'big' is not an integer"),
        (["eval", str(SEED), "-p", "layernorm", "--set", "K=4"], "unknown constant 'K'"),
        (["eval", str(SEED), "-p", "layernorm", "--device", "tpu"], "unknown device 'tpu'"),
        (
            ["eval", str(SEED), "-p", "layernorm", "--device", "cpu", "--time-case", "M=9,N=9|float32"],
            "unknown case id 'M=9,N=9|float32' for --time-case; valid ids: M=8,N=256|float32",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_traceback(argv, needle, capsys):
    code, out, err = _kscout(argv, capsys)
    assert code == 2 and out == ""
    assert err.startswith("kscout: error: ") and needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_problems_lists_the_builtins_as_a_table_and_as_json(capsys):
    code, out, _ = _kscout(["problems"], capsys)
    assert code == 0 and "layernorm" in out and "cross_entropy" in out
    code, out, _ = _kscout(["problems", "--device", "cuda", "--json"], capsys)
    listed = {p["name"]: p for p in json.loads(out)["problems"]}
    assert code == 0 and listed["layernorm"]["op_family"] == "layernorm"
    assert "M=8192,N=8192|float32" in [c["case_id"] for c in listed["layernorm"]["shape_cases"]]


def test_bench_on_the_cpu_checks_correctness_and_says_timing_was_not_measured(tmp_path, capsys):
    out_csv = tmp_path / "results.csv"
    assert bench.main(["--problems", "layernorm", "--device", "cpu", "--out", str(out_csv)]) == 0
    printed = capsys.readouterr().out
    assert "timing: not measured on this device (cpu, Triton interpreter)" in printed
    rows = list(csv.DictReader(out_csv.open()))
    assert list(rows[0]) == list(bench.CSV_FIELDS)
    assert {(r["kernel"], r["provider"], r["metric"], r["unit"], r["p50"]) for r in rows} == {
        ("layernorm_seed", "triton_seed", "correct", "bool", "1")
    }
    assert len(rows) == len({r["shape"] + r["dtype"] for r in rows}) >= 8


def test_bench_refuses_an_unknown_problem_name(capsys):
    assert bench.main(["--problems", "nosuch", "--device", "cpu"]) == 2
    assert "no seeded built-in problem named nosuch" in capsys.readouterr().err


# A result recorded on an H200 (tests/test_eval_gpu.py's machine): the timing paths render on the CPU too.
H200 = Path(__file__).parent / "eval_fixtures" / "h200_layernorm_seed.json"


def test_a_recorded_gpu_result_renders_its_timings_and_speedups(capsys):
    from evaluation.cli import render_result
    from evaluation.records import EvalResult

    result = EvalResult.model_validate_json(H200.read_text())
    render_result(result)
    out = capsys.readouterr().out
    assert "layernorm on NVIDIA H200" in out and "status: passed" in out
    t = result.timing[0]
    assert f"{t.candidate.latency_ms_p50:.4f}" in out
    assert f"{t.speedups[0].ratio:.2f}" in out


def test_bench_rows_of_a_gpu_result_are_tidy_latency_and_bandwidth_measurements():
    from evaluation.records import EvalResult

    result = EvalResult.model_validate_json(H200.read_text())
    rows = bench._rows(result, 1, "2026-12-02T00:00:00+00:00")
    assert {r["provider"] for r in rows} == {"triton_seed", "eager", "torch_compile"}
    assert {(r["metric"], r["unit"]) for r in rows} == {("latency_run1", "ms"), ("bandwidth_run1", "GB/s")}
    first = result.timing[0]
    latency = next(r for r in rows if r["provider"] == "triton_seed" and r["metric"] == "latency_run1")
    assert (latency["p20"], latency["p50"], latency["p80"]) == (
        first.candidate.latency_ms_p20,
        first.candidate.latency_ms_p50,
        first.candidate.latency_ms_p80,
    )
    bandwidth = next(r for r in rows if r["metric"] == "bandwidth_run1")
    assert abs(bandwidth["p50"] - first.achieved_gbps) < 1e-6 * first.achieved_gbps
    assert all(r["gpu"] == "NVIDIA H200" for r in rows)
    assert len(rows) == 4 * len(result.timing)  # candidate, eager, compile latency + candidate bandwidth
