"""The context builder the agent calls: sections, sources, arch/vendor preference, budget, seed hints.

Works on a copy of the session's hwdocs store (conftest `hwdocs_store_template`) with real runs,
candidates, outcomes and failure patterns written through the store API.
"""

from __future__ import annotations

import json
import shutil

import pytest
from test_knowledge_retrieve import outcome

from evaluation.records import ProblemInfo, ShapeCase, Tolerance, source_sha256
from knowledge.context import build_context, estimate_tokens
from store import Store
from store.records import CandidateRecord, RunRecord, StopRule

LAYERNORM = ProblemInfo(
    problem_id="p-layernorm",
    name="layernorm",
    op_family="layernorm",
    source_path="layernorm.py",
    source_sha256="0" * 64,
    builtin=True,
    shape_cases=(ShapeCase(case_id="M=8,N=256|float32", params={"M": 8, "N": 256}, dtype="float32"),),
    dtypes=("float32",),
    tolerances={"float32": Tolerance(atol=1e-4, rtol=1e-4)},
)

KNOBS = {
    "fast": {"rows_per_program": 4, "num_warps": 8},
    "slow": {"rows_per_program": 1, "num_warps": 4},
    "faster": {"rows_per_program": 8, "num_warps": 8, "single_pass": True},
    "amd": {"rows_per_program": 2, "num_warps": 16},
}


def _source(name: str) -> str:
    return f"# candidate {name}\nimport triton\n"


@pytest.fixture(scope="module")
def home(hwdocs_store_template, tmp_path_factory):
    home = tmp_path_factory.mktemp("context") / "home"
    shutil.copytree(hwdocs_store_template, home)
    with Store.open(home) as store:
        store.create_run(
            RunRecord(
                run_id="run-1",
                problem_id="p-layernorm",
                problem_name="layernorm",
                op_family="layernorm",
                device="cuda",
                arch="sm_90",
                env_id="env",
                proposer="template",
                seed=0,
                stop_rule=StopRule(max_evaluations=10),
                started_at="2026-11-01T00:00:00+00:00",
            )
        )
        for name, knobs in KNOBS.items():
            store.add_candidate(
                CandidateRecord(
                    candidate_id=source_sha256(_source(name)),
                    run_id="run-1",
                    generation=0,
                    proposer="template",
                    knobs_json=json.dumps(knobs),
                    source=_source(name),
                    created_at="2026-11-01T00:00:00+00:00",
                )
            )
        cid = {name: source_sha256(_source(name)) for name in KNOBS}
        for o in [
            outcome("h100-fast", "layernorm", "NVIDIA H100 80GB HBM3", "sm_90", 1.9, candidate_id=cid["fast"]),
            outcome(
                "h200-faster",
                "layernorm",
                "NVIDIA H200",
                "sm_90",
                2.6,
                candidate_id=cid["faster"],
                transformation="single_pass=true",
            ),
            outcome("h100-slow", "layernorm", "NVIDIA H100 80GB HBM3", "sm_90", 0.8, candidate_id=cid["slow"]),
            outcome("h100-cpu-like", "layernorm", "NVIDIA H100 80GB HBM3", "sm_90", None, candidate_id=cid["slow"]),
            outcome("a100-ln", "layernorm", "NVIDIA A100-SXM4-80GB", "sm_80", 1.4, candidate_id=cid["fast"]),
            outcome("mi300x-ln", "layernorm", "AMD Instinct MI300X", "gfx942", 3.5, candidate_id=cid["amd"]),
            outcome("h200-softmax", "softmax", "NVIDIA H200", "sm_90", 4.0, candidate_id=cid["fast"]),
        ]:
            store.add_outcome(o)
        for _ in range(3):
            store.record_failure(
                "layernorm",
                "sm_90",
                "correctness",
                "MismatchError",
                "max abs error 0.25 at index (3, 17) on case M=8,N=256",
                cid["slow"],
            )
        store.record_failure("softmax", "sm_90", "compile", "CompilationError", "BLOCK too large", cid["slow"])
    return home


@pytest.fixture(scope="module")
def store(home):
    with Store.open(home) as store:
        yield store


@pytest.fixture(scope="module")
def full(store):
    return build_context(store, LAYERNORM, "NVIDIA H200", "sm_90", token_budget=2000)


def test_context_holds_every_section_with_sources(full):
    sections = {i.section for i in full.items}
    assert sections == {"outcome", "failure", "hardware", "constraint"}
    assert full.devices == ("H200",)
    for item in full.items:
        if item.section in ("hardware", "constraint"):
            # the shipped notes are the project's, cited as such with the file and section, never a vendor URL
            assert ", project note hwdocs/" in item.source and "#" in item.source and "https://" not in item.source
    hardware_titles = {i.source.split(", project note")[0] for i in full.items if i.section == "hardware"}
    assert hardware_titles == {"NVIDIA H200 SXM and H200 NVL (Hopper, sm_90)"}
    constraint_titles = {i.source.split(", project note")[0] for i in full.items if i.section == "constraint"}
    assert any("LayerNorm and RMSNorm numerics" in t for t in constraint_titles)
    failure = next(i for i in full.items if i.section == "failure")
    assert "correctness/MismatchError seen 3x" in failure.text and failure.source.startswith("failure pattern ")


def test_outcomes_come_from_this_op_same_arch_first_then_same_vendor(full):
    sources = [i.source for i in full.items if i.section == "outcome"]
    assert sources[:4] == [
        "outcome h200-faster on NVIDIA H200",
        "outcome h100-fast on NVIDIA H100 80GB HBM3",
        "outcome h100-slow on NVIDIA H100 80GB HBM3",
        "outcome h100-cpu-like on NVIDIA H100 80GB HBM3",
    ]
    assert sources[4:] == ["outcome a100-ln on NVIDIA A100-SXM4-80GB"]  # nvidia, other arch; never the MI300X
    assert "2.6x vs eager [2.47, 2.73]" in next(i.text for i in full.items if i.ref_id == "h200-faster")


@pytest.mark.parametrize("budget", [150, 400, 1000, 2000])
def test_rendered_context_never_exceeds_its_token_budget(store, budget):
    ctx = build_context(store, LAYERNORM, "NVIDIA H200", "sm_90", token_budget=budget)
    text = ctx.render()
    assert estimate_tokens(text) <= budget
    assert ctx.estimated_tokens() == estimate_tokens(text)
    assert len(ctx.items) >= 2  # a tight budget still keeps the best of several sections
    assert text.startswith("Knowledge for layernorm on NVIDIA H200 (sm_90):")


def test_a_budget_too_small_for_anything_renders_nothing(store):
    ctx = build_context(store, LAYERNORM, "NVIDIA H200", "sm_90", token_budget=5)
    assert ctx.items == () and ctx.render() == "" and ctx.dropped > 0


def test_a_bigger_budget_adds_items_and_a_small_one_drops_them(store, full):
    small = build_context(store, LAYERNORM, "NVIDIA H200", "sm_90", token_budget=300)
    assert len(small.items) < len(full.items)
    assert small.dropped > full.dropped
    # Round-robin keeps the top item of every section it has room for, in the same order.
    assert small.items[0].ref_id == full.items[0].ref_id == "h200-faster"


def test_seed_hints_are_knobs_of_the_best_measured_outcomes_on_this_arch(full):
    # Sorted by speedup; unmeasured and slower-than-baseline outcomes are no hints; other archs neither.
    assert full.seed_hints() == [KNOBS["faster"], KNOBS["fast"]]
    hints = full.seed_hints()
    hints[0]["num_warps"] = 1  # a caller's copy: the context itself stays as built
    assert full.seed_hints()[0]["num_warps"] == 8


def test_amd_device_gets_its_own_hardware_and_outcomes(store):
    ctx = build_context(store, LAYERNORM, "AMD Instinct MI300X", "gfx942", token_budget=1500)
    assert ctx.devices == ("MI300X",)
    assert {i.source.split(",")[0] for i in ctx.items if i.section == "hardware"} == {
        "AMD Instinct MI300X and MI300A (CDNA 3"
    }
    assert [i.ref_id for i in ctx.items if i.section == "outcome"] == ["mi300x-ln"]
    assert ctx.seed_hints() == [KNOBS["amd"]]
    assert not [i for i in ctx.items if i.section == "failure"]


def test_cpu_device_has_no_outcomes_but_still_gets_constraints(store):
    ctx = build_context(store, LAYERNORM, "cpu (triton interpreter)", "cpu", token_budget=800)
    assert ctx.devices == ("x86 CPU",)
    assert not [i for i in ctx.items if i.section == "outcome"] and ctx.seed_hints() == []
    assert [i for i in ctx.items if i.section == "constraint"]
