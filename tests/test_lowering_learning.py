"""What the store learns from lowered candidates: outcomes keyed by schedule kind as well as op family,
and hints from one graph's winners seeding another graph's groups of the same kind."""

import json

import pytest

from agent.proposers.base import Action, ProposeRequest
from agent.proposers.lowering import lower_source
from agent.proposers.lowering.propose import LoweringSearch, schedule_kind
from agent.search.writeback import outcomes_for
from evaluation.records import EvalResult, Fingerprint, ProblemInfo, ShapeCase, Status, Tolerance, source_sha256
from store import Store
from store.records import CandidateRecord, OutcomeRecord, RunRecord, StopRule

ROW_WIN = {
    "schedule": "lowering",
    "fuse": {"epilogue": True, "rows": True, "siblings": True},
    "groups": [
        {
            "kind": "matmul",
            "block_m": 128,
            "block_n": 64,
            "block_k": 32,
            "group_m": 8,
            "num_warps": 8,
            "num_stages": 3,
            "precision": "ieee",
        },
        {"kind": "row", "rows": 4, "single_max": 8192, "rblock": 1024, "num_warps": 8},
    ],
}

SOFTMAX_DIM1 = """
import torch
import torch.nn as nn

N = 32

class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)

def get_inputs():
    return [torch.randn(N, N, N)]

def get_init_inputs():
    return []
"""


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    with Store.open(tmp_path / "home") as st:
        st.create_run(
            RunRecord(
                run_id="r",
                problem_id="p",
                problem_name="x",
                op_family="unknown",
                device="cuda",
                arch="sm_90",
                env_id="env",
                proposer="template",
                seed=0,
                stop_rule=StopRule(max_evaluations=1),
                started_at="2026-11-01T00:00:00+00:00",
            )
        )
        yield st


def _candidate(st, name: str, knobs: dict, template: str) -> str:
    source = f"# {name}\nimport triton\n"
    cid = source_sha256(source)
    st.add_candidate(
        CandidateRecord(
            candidate_id=cid,
            run_id="r",
            generation=0,
            proposer="template",
            prompt_template=template,
            knobs_json=json.dumps(knobs),
            source=source,
            created_at="2026-11-01T00:00:00+00:00",
        )
    )
    return cid


def _outcome(st, oid: str, cid: str, *, op: str, arch: str, kind, speedup, status="passed"):
    st.add_outcome(
        OutcomeRecord(
            outcome_id=oid,
            op_family=op,
            problem_id="p",
            device_name="NVIDIA H200",
            arch=arch,
            shape_bucket="b",
            dtype="bfloat16",
            transformation="t",
            candidate_id=cid,
            baseline="eager",
            speedup=speedup,
            status=status,
            triton_version="3.6",
            torch_version="2.11",
            summary=f"{oid}.",
            created_at="2026-11-01T00:00:00+00:00",
            schedule_kind=kind,
        )
    )


def test_outcomes_can_be_filtered_by_one_kind_of_a_multi_kernel_schedule(store):
    cid = _candidate(store, "a", ROW_WIN, "lowering/matmul+row.j2")
    _outcome(store, "o1", cid, op="unknown", arch="sm_90", kind="matmul+row", speedup=1.5)
    _outcome(store, "o2", cid, op="layernorm", arch="sm_90", kind="row", speedup=1.2)
    _outcome(store, "o3", cid, op="unknown", arch="sm_90", kind="pointwise", speedup=2.0)
    _outcome(store, "o4", cid, op="unknown", arch="sm_90", kind=None, speedup=2.0)
    assert sorted(o.outcome_id for o in store.outcomes(schedule_kind="row")) == ["o1", "o2"]
    assert [o.outcome_id for o in store.outcomes(schedule_kind="row", op_family="layernorm")] == ["o2"]
    assert store.outcomes(schedule_kind="scan") == []


def test_schedule_hints_are_the_best_wins_of_that_kind_on_this_arch_across_op_families(store):
    slow = {**ROW_WIN, "groups": [ROW_WIN["groups"][1] | {"rows": 1}]}
    best, other, failed, amd = (
        _candidate(store, n, k, "lowering/x.j2")
        for n, k in (("best", ROW_WIN), ("slow", slow), ("failed", slow | {"fuse": {}}), ("amd", slow))
    )
    _outcome(store, "win", best, op="unknown", arch="sm_90", kind="matmul+row", speedup=2.5)
    _outcome(store, "win-small", other, op="rmsnorm", arch="sm_90", kind="row", speedup=1.3)
    _outcome(store, "loss", failed, op="unknown", arch="sm_90", kind="row", speedup=0.7)
    _outcome(store, "other-arch", amd, op="unknown", arch="gfx942", kind="row", speedup=3.0)
    _outcome(store, "failed", failed, op="unknown", arch="sm_90", kind="row", speedup=None, status="incorrect")
    assert store.schedule_hints(["row"], "sm_90") == [ROW_WIN, slow]
    assert store.schedule_hints(["scan"], "sm_90") == []


def _problem(tmp_path) -> ProblemInfo:
    path = tmp_path / "softmax_dim1.py"
    path.write_text(SOFTMAX_DIM1)
    return ProblemInfo(
        problem_id="p1",
        name="softmax_dim1",
        op_family="unknown",
        source_path=str(path),
        source_sha256="s",
        builtin=False,
        source=SOFTMAX_DIM1,
        shape_cases=(ShapeCase(case_id="N=32|float32", params={"N": 32}, dtype="float32"),),
        dtypes=("float32",),
        tolerances={"float32": Tolerance(atol=1e-4, rtol=1e-4)},
    )


def test_a_softmax_over_dim_1_is_seeded_by_the_row_knobs_another_graph_won_with(tmp_path):
    problem = _problem(tmp_path)
    lowered = lower_source(problem.source, problem.source_path)
    search = LoweringSearch(lowered)
    assert search.kinds() == ("row",)
    request = ProposeRequest(
        problem=problem, device="cuda", arch="sm_90", device_name="NVIDIA H200", action=Action.seed, n=2
    )
    result = search.propose(request, extra_hints=(ROW_WIN,))
    first = result.proposals[0]
    # the matmul group of the hint had no match here; the hint predates the cache_hints and order knobs,
    # which keep this graph's defaults
    assert first.knobs["groups"] == [ROW_WIN["groups"][1] | {"cache_hints": False, "order": "xr"}]
    assert "schedule_hint" in first.transformation_tags
    assert result.proposals[1].knobs == lowered.default_config()


def test_writeback_keys_outcomes_by_the_candidates_schedule_kind(tmp_path):
    fp = Fingerprint(
        device_kind="cpu",
        device_name="cpu",
        arch="cpu",
        triton_version="3.9",
        torch_version="2.13",
        python_version="3.11",
        kernelscout_version="0.1.0",
    )
    problem = _problem(tmp_path)
    result = EvalResult(
        status=Status.passed,
        candidate_sha256="c",
        problem_id="p1",
        problem_name="x",
        device="cpu",
        fingerprint=fp,
        started_at="2026-11-01T00:00:00+00:00",
        duration_s=1.0,
    )
    lowered = CandidateRecord(
        candidate_id="c",
        run_id="r",
        generation=0,
        proposer="template",
        prompt_template="lowering/matmul+row.j2",
        knobs_json=json.dumps(ROW_WIN),
        source="x",
        created_at="2026-11-01T00:00:00+00:00",
    )
    family = lowered.model_copy(update={"prompt_template": "rowwise.j2", "knobs_json": '{"rows_per_program": 2}'})
    llm = lowered.model_copy(update={"prompt_template": "refine", "knobs_json": "{}", "proposer": "llm"})
    assert [o.schedule_kind for o in outcomes_for(lowered, result, "e1", problem, fp)] == ["matmul+row"]
    assert [o.schedule_kind for o in outcomes_for(family, result, "e2", problem, fp)] == ["row"]
    assert [o.schedule_kind for o in outcomes_for(llm, result, "e3", problem, fp)] == [None]
    assert schedule_kind(ROW_WIN, None) == "matmul+row"
