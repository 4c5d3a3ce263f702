"""The approval gate: each kind of missing evidence is refused on its own, complete evidence deploys."""

from __future__ import annotations

import json

import pytest
from test_lifecycle_support import (
    KNOBS,
    add_candidate,
    cpu_fp,
    gpu_candidate,
    gpu_fp,
    make_run,
    result,
    shape_results,
    timing,
    variant,
)

import evaluation
from agent.cli import main
from agent.lifecycle.evidence import PromotionEvidence
from agent.lifecycle.gate import PromotionRefused
from agent.lifecycle.registry import promote
from evaluation.records import Status
from store import Store
from store.records import PromotionState


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "store") as s:
        yield s


@pytest.fixture(scope="module")
def problem():
    return evaluation.load_problem("layernorm", device="cuda")


def refusal(store, candidate_id: str) -> list[str]:
    with pytest.raises(PromotionRefused) as info:
        promote(store, candidate_id, approved_by="alice")
    assert store.promotion_history() == [], "a refused promotion must write nothing"
    return list(info.value.missing)


def test_promotes_complete_evidence_as_approved_then_deployed_events(store, problem):
    c = gpu_candidate(store, problem, variant(1))
    approved, deployed = promote(store, c.candidate_id[:10], approved_by="alice", note="ship it")

    events = store.promotion_history(op_family="layernorm", arch="sm_90")
    assert [e.state for e in events] == [PromotionState.approved, PromotionState.deployed]
    assert [e.event_id for e in events] == [approved.event_id, deployed.event_id]
    assert {e.actor for e in events} == {"alice"} and events[1].note == "ship it"
    assert events[1].candidate_id == c.candidate_id and events[1].previous_candidate_id is None

    ev = PromotionEvidence.model_validate_json(events[1].evidence_json)
    search = store.evaluations(candidate_id=c.candidate_id, kind="search")
    remeasure = store.evaluations(candidate_id=c.candidate_id, kind="remeasure")
    assert ev.correctness_eval_id == search[0][0] and ev.remeasure_eval_id == remeasure[0][0]
    assert (ev.speedup, ev.speedup_low, ev.speedup_high) == pytest.approx((1.4, 1.3, 1.5))
    for name in ("M", "N"):  # the range is that of the declared (and proven) cases
        declared = [case.params[name] for case in problem.shape_cases]
        assert (ev.assumptions.shape_range[name].min, ev.assumptions.shape_range[name].max) == (
            min(declared),
            max(declared),
        )
    assert 4099 in [case.params["N"] for case in problem.shape_cases]
    assert ev.assumptions.shape_range["N"].multiple_of == 1  # an odd N was proven: no alignment assumed
    assert ev.assumptions.dtypes == ("bfloat16", "float32")
    assert ev.assumptions.knobs == json.loads(KNOBS)
    assert ev.env == gpu_fp() and ev.env.driver_version == "575.57.08"
    assert set(ev.shape_cases_passed) == {case.case_id for case in problem.shape_cases}


def test_second_promotion_records_the_live_kernel_as_previous_known_good(store, problem):
    first = gpu_candidate(store, problem, variant(1))
    second = gpu_candidate(store, problem, variant(2))
    promote(store, first.candidate_id, approved_by="alice")
    _approved, deployed = promote(store, second.candidate_id, approved_by="bob")
    assert deployed.previous_candidate_id == first.candidate_id
    assert deployed.actor == "bob"


def test_a_source_also_searched_on_the_cpu_is_promoted_from_its_gpu_run(store, problem):
    cpu_problem = evaluation.load_problem("layernorm", device="cpu")
    cpu_run = make_run(store, cpu_problem, cpu_fp())  # the same source, first seen in a CPU run
    on_cpu = add_candidate(store, cpu_run, variant(1))
    store.add_evaluation(cpu_run.run_id, on_cpu.candidate_id, result(cpu_problem, variant(1), cpu_fp()))
    c = gpu_candidate(store, problem, variant(1))
    _a, deployed = promote(store, c.candidate_id, approved_by="alice")
    assert deployed.arch == "sm_90"
    assert PromotionEvidence.model_validate_json(deployed.evidence_json).run_id == c.run_id
    with pytest.raises(PromotionRefused, match="CPU-only result can never be promoted"):
        promote(store, c.candidate_id, approved_by="alice", arch="cpu")
    with pytest.raises(Exception, match="was never evaluated on gfx942"):
        promote(store, c.candidate_id, approved_by="alice", arch="gfx942")


def test_refuses_a_missing_declared_shape_case(store, problem):
    gone = next(case.case_id for case in problem.shape_cases if "edge" in case.tags)
    c = gpu_candidate(
        store,
        problem,
        variant(1),
        correctness=result(problem, variant(1), gpu_fp(), shapes=shape_results(problem, drop=(gone,))),
    )
    assert refusal(store, c.candidate_id) == [f"correctness: declared shape case {gone} not passed on sm_90"]


def test_refuses_a_declared_dtype_never_verified(store, problem):
    assert "bfloat16" in problem.dtypes and "float32" in problem.dtypes
    shapes = shape_results(problem, drop_dtype="bfloat16")
    c = gpu_candidate(store, problem, variant(1), correctness=result(problem, variant(1), gpu_fp(), shapes=shapes))
    missing = refusal(store, c.candidate_id)
    bf16_cases = [case.case_id for case in problem.shape_cases if case.dtype == "bfloat16"]
    assert missing == [f"correctness: declared shape case {cid} not passed on sm_90" for cid in bf16_cases] + [
        "correctness: declared dtype bfloat16 never verified on sm_90"
    ]


def test_refuses_a_candidate_whose_correctness_failed(store, problem):
    shapes = shape_results(problem, fail=(problem.shape_cases[0].case_id,))
    bad = result(problem, variant(1), gpu_fp(), status=Status.incorrect, shapes=shapes)
    c = gpu_candidate(store, problem, variant(1), correctness=bad)
    missing = refusal(store, c.candidate_id)
    assert missing[0] == "correctness: no passing evaluation of this candidate on sm_90 (latest: incorrect)"
    assert "assumptions: no proven shape range (no passed shape case with size constants)" in missing


def test_refuses_without_an_interleaved_remeasure(store, problem):
    # a search evaluation with a fine speedup is not enough: only the re-measure counts
    searched = result(problem, variant(1), gpu_fp(), timed=timing(problem, 1.5, 1.4, 1.6))
    c = gpu_candidate(store, problem, variant(1), correctness=searched, remeasure=None)
    assert refusal(store, c.candidate_id) == ["timing: no interleaved re-measure (kind 'remeasure') on sm_90"]


def test_refuses_a_speedup_inside_the_noise(store, problem):
    noisy = result(problem, variant(1), gpu_fp(), shapes=(), timed=timing(problem, 1.03, 0.97, 1.09))
    c = gpu_candidate(store, problem, variant(1), remeasure=noisy)
    assert refusal(store, c.candidate_id) == ["timing: speedup over eager 1.030x [0.970, 1.090] is within the noise"]


def test_refuses_a_geomean_win_that_hides_a_case_slower_than_eager(store, problem):
    cases = list(timing(problem, 1.6, 1.5, 1.7))
    slow = cases[1].speedups[0].model_copy(update={"ratio": 0.8, "ratio_low": 0.75, "ratio_high": 0.85})
    cases[1] = cases[1].model_copy(update={"speedups": (slow,)})
    c = gpu_candidate(
        store, problem, variant(1), remeasure=result(problem, variant(1), gpu_fp(), shapes=(), timed=cases)
    )
    assert refusal(store, c.candidate_id) == [
        f"timing: case {cases[1].case_id} is slower than eager outside the noise (0.800x [0.750, 0.850])"
    ]


def test_refuses_a_model_artifact_slower_than_torch_compile_of_the_whole_model(store, problem):
    from evaluation.records import Speedup

    def with_compile(ratio, low, high):
        comp = Speedup(baseline="torch_compile", ratio=ratio, ratio_low=low, ratio_high=high, significant=True)
        return tuple(t.model_copy(update={"speedups": (*t.speedups, comp)}) for t in timing(problem, 1.4, 1.3, 1.5))

    model = problem.model_copy(update={"op_family": "model:layernormnet"})
    slow = result(model, variant(1), gpu_fp(), shapes=(), timed=with_compile(0.8, 0.75, 0.85))
    c = gpu_candidate(store, model, variant(1), remeasure=slow)
    assert refusal(store, c.candidate_id) == [
        "timing: the assembled model is slower than torch.compile of the whole model outside the noise "
        "(0.800x [0.750, 0.850]): compiling the model is the faster choice"
    ]
    # the same numbers for an operator's kernel: torch.compile is not its bar, eager is
    kernel = gpu_candidate(
        store, problem, variant(2), remeasure=result(problem, variant(2), gpu_fp(), shapes=(), timed=slow.timing)
    )
    assert promote(store, kernel.candidate_id, approved_by="alice")[1].state is PromotionState.deployed
    # a model within the noise of torch.compile is not refused for it
    level = result(model, variant(3), gpu_fp(), shapes=(), timed=with_compile(1.0, 0.95, 1.05))
    c3 = gpu_candidate(store, model, variant(3), remeasure=level)
    assert promote(store, c3.candidate_id, approved_by="alice")[1].state is PromotionState.deployed


def test_refuses_a_remeasure_with_no_eager_baseline(store, problem):
    cases = tuple(t.model_copy(update={"baselines": (), "speedups": ()}) for t in timing(problem, 1.4, 1.3, 1.5))
    c = gpu_candidate(
        store, problem, variant(1), remeasure=result(problem, variant(1), gpu_fp(), shapes=(), timed=cases)
    )
    assert refusal(store, c.candidate_id) == ["timing: the latest re-measure lacks a recorded eager baseline"]


def test_refuses_a_cpu_only_result_and_says_the_cpu_measures_no_speed(store):
    problem = evaluation.load_problem("layernorm", device="cpu")
    run = make_run(store, problem, cpu_fp())
    c = add_candidate(store, run, variant(1))
    store.add_evaluation(
        run.run_id,
        c.candidate_id,
        result(problem, variant(1), cpu_fp(), note="not measured on this device (cpu)"),
    )
    missing = refusal(store, c.candidate_id)
    assert missing[0].startswith("timing: a CPU-only result can never be promoted")
    assert "Triton interpreter measures no speed" in missing[0]
    assert "environment: the correctness evaluation recorded no driver version (cpu (triton interpreter))" in missing


def test_refuses_when_no_knobs_or_block_sizes_are_stated(store, problem):
    # every size is computed inside the kernel: nothing at the launch says what it assumes
    bare = (
        "import torch, triton, triton.language as tl\n"
        "@triton.jit\n"
        "def _k(X, Y, N):\n"
        "    cols = tl.arange(0, 1024)\n"
        "    tl.store(Y + cols, tl.load(X + cols, mask=cols < N), mask=cols < N)\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n"
        "        _k[(1,)](x, y, x.numel())\n"
        "        return y\n"
    )
    c = gpu_candidate(store, problem, bare, knobs="{}")
    assert refusal(store, c.candidate_id) == [
        "assumptions: no knobs or block sizes stated (empty knobs_json, none at the launch)"
    ]


def test_knobs_fall_back_to_the_launch_arguments_in_the_source(store, problem):
    c = gpu_candidate(store, problem, variant(1), knobs="{}")
    _a, deployed = promote(store, c.candidate_id, approved_by="alice")
    ev = PromotionEvidence.model_validate_json(deployed.evidence_json)
    assert ev.assumptions.knobs == {"BLOCK_N": "block", "ONE_BLOCK": "one_block", "num_warps": "num_warps"}
    assert ev.assumptions.knobs_source == "launch arguments in the source"


def test_refuses_an_environment_without_driver_and_cuda_versions(store, problem):
    fp = gpu_fp(driver_version=None, cuda_version=None)
    run = make_run(store, problem, fp)
    c = gpu_candidate(
        store,
        problem,
        variant(1),
        run=run,
        correctness=result(problem, variant(1), fp),
        remeasure=result(problem, variant(1), fp, shapes=(), timed=timing(problem, 1.4, 1.3, 1.5)),
    )
    assert refusal(store, c.candidate_id) == [
        "environment: the correctness evaluation recorded no driver version (NVIDIA H200)",
        "environment: the correctness evaluation recorded no CUDA/ROCm version (NVIDIA H200)",
    ]


def test_refuses_correctness_and_timing_from_different_environments(store, problem):
    newer = gpu_fp(triton_version="3.5.0")
    c = gpu_candidate(
        store,
        problem,
        variant(1),
        remeasure=result(problem, variant(1), newer, shapes=(), timed=timing(problem, 1.4, 1.3, 1.5)),
    )
    assert refusal(store, c.candidate_id) == ["environment: correctness and timing ran on different environments"]


def test_refuses_evidence_from_a_run_on_another_shape_set(store, problem):
    narrowed = evaluation.load_problem("layernorm", device="cuda", overrides={"N": 4096})
    run = make_run(store, narrowed, gpu_fp())  # the run searched a different shape set than declared now
    c = gpu_candidate(store, problem, variant(1), run=run)
    missing = refusal(store, c.candidate_id)
    assert missing[0].startswith(f"problem: run {run.run_id[:12]} searched problem id {narrowed.problem_id}")


def test_promote_cli_lists_missing_items_one_per_line_and_exits_2(tmp_path, problem, capsys):
    with Store.open(tmp_path / "store") as s:
        c = gpu_candidate(s, problem, variant(1), remeasure=None)
    with pytest.raises(SystemExit) as exit_info:
        main(["promote", c.candidate_id[:12], "--approved-by", "alice", "--store", str(tmp_path / "store")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(
        f"kscout: error: candidate {c.candidate_id[:12]} cannot be promoted for layernorm on sm_90"
    )
    assert err[1:] == ["  - timing: no interleaved re-measure (kind 'remeasure') on sm_90"]


def test_promote_cli_json_prints_one_object_with_both_events(tmp_path, problem, capsys):
    with Store.open(tmp_path / "store") as s:
        c = gpu_candidate(s, problem, variant(1))
    main(["promote", c.candidate_id, "--approved-by", "alice", "--store", str(tmp_path / "store"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["approved"]["state"] == "approved" and out["deployed"]["state"] == "deployed"
    assert out["deployed"]["candidate_id"] == c.candidate_id


def test_promote_requires_a_named_approver(store, problem):
    c = gpu_candidate(store, problem, variant(1))
    with pytest.raises(Exception, match="--approved-by must name a person"):
        promote(store, c.candidate_id, approved_by="  ")


def test_refuses_evidence_gathered_without_the_sandbox_unless_the_approver_accepts_it(store, problem):
    unsandboxed = result(problem, variant(1), gpu_fp(), isolation="none")
    legacy = result(problem, variant(1), gpu_fp(), shapes=(), timed=timing(problem, 1.4, 1.3, 1.5), isolation=None)
    c = gpu_candidate(store, problem, variant(1), correctness=unsandboxed, remeasure=legacy)
    missing = refusal(store, c.candidate_id)
    assert [m.split(" evaluation ")[0] for m in missing] == ["isolation: the correctness", "isolation: the re-measure"]
    assert "(isolation: none)" in missing[0] and "(isolation: not recorded)" in missing[1]
    assert all(m.endswith("promote with --allow-unsandboxed to accept it explicitly") for m in missing)
    _approved, deployed = promote(store, c.candidate_id, approved_by="alice", note="lab box", allow_unsandboxed=True)
    assert deployed.note == "lab box [unsandboxed evidence accepted by alice]"


def test_promote_cli_takes_the_explicit_unsandboxed_override(tmp_path, problem, capsys):
    with Store.open(tmp_path / "store") as s:
        c = gpu_candidate(s, problem, variant(1), correctness=result(problem, variant(1), gpu_fp(), isolation="none"))
    args = ["promote", c.candidate_id, "--approved-by", "alice", "--store", str(tmp_path / "store"), "--json"]
    with pytest.raises(SystemExit):
        main(args)
    assert "ran without an OS sandbox" in capsys.readouterr().err
    main(args + ["--allow-unsandboxed"])
    assert json.loads(capsys.readouterr().out)["deployed"]["note"] == "[unsandboxed evidence accepted by alice]"
