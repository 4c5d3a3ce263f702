"""Outcome answers say what was measured: a correctness-only pass is not a failure, significance is read
from the speedup interval (below, across or above 1.0), and "how to avoid X" is a how-to question.

The store here is a real DuckDB file with KSCOUT_VECTORS=off and one small Markdown page, so `ask`
answers from BM25 in well under a second and never loads the embedding model or the shipped docs.
"""

from __future__ import annotations

import pytest
from rich.console import Console

from knowledge.ingest import IngestOptions, ingest_paths
from knowledge.render import render_answer
from knowledge.retrieve import ask
from store import Store
from store.records import OutcomeRecord


def outcome(
    outcome_id: str,
    status: str,
    speedup=None,
    low=None,
    high=None,
    *,
    device: str = "NVIDIA H200",
    arch: str = "sm_90",
    created_at: str = "2026-11-01T00:00:00+00:00",
) -> OutcomeRecord:
    return OutcomeRecord(
        outcome_id=outcome_id,
        op_family="layernorm",
        problem_id="p-layernorm",
        device_name=device,
        arch=arch,
        shape_bucket="M=4096..8191,N=4096..8191",
        dtype="bfloat16",
        transformation=f"t-{outcome_id}",
        candidate_id=f"c-{outcome_id}",
        baseline="eager",
        speedup=speedup,
        speedup_low=low,
        speedup_high=high,
        status=status,
        triton_version="3.4.0",
        torch_version="2.8.0",
        evidence_eval_ids=(f"ev-{outcome_id}",),
        summary=f"{outcome_id}: {status}",
        created_at=created_at,
    )


# Six CPU candidates that passed every check (speed not measured), newer than everything else: before,
# they filled a "what failed" answer's top 5 and pushed the one real slowdown out.
CPU_PASSES = [
    outcome(f"cpu-{i}", "correctness_only", device="cpu", arch="cpu", created_at=f"2026-11-0{i + 2}T00:00:00+00:00")
    for i in range(6)
]
OUTCOMES = CPU_PASSES + [
    outcome("h200-slow", "passed", 0.92, 0.90, 0.95),  # the interval lies wholly below 1: a slowdown
    outcome("h200-noise", "passed", 0.99, 0.95, 1.03),
    outcome("h200-fast", "passed", 1.80, 1.71, 1.89),
    outcome("mi300-rejected", "rejected", device="AMD Instinct MI300X", arch="gfx942"),
    outcome("mi300-crashed", "crashed", device="AMD Instinct MI300X", arch="gfx942"),
    outcome("mi300-incorrect", "incorrect", device="AMD Instinct MI300X", arch="gfx942"),
    outcome("mi300-compile", "compile_error", device="AMD Instinct MI300X", arch="gfx942"),
]


@pytest.fixture
def store(kscout_home, tmp_path, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    page = tmp_path / "docs" / "layernorm.md"
    page.parent.mkdir()
    page.write_text("# Layernorm notes\n## Rows\nOne row per program keeps the reduction in registers.\n")
    with Store.open(kscout_home) as store:
        ingest_paths(store, [page], IngestOptions())
        for o in OUTCOMES:
            store.add_outcome(o)
        yield store


def test_what_failed_lists_real_failures_then_slowdowns_never_correctness_only_passes(store):
    result = ask(store, "what failed for layernorm", k=5)
    assert result.intent == "failed"
    # Correctness failures, crashes and refusals first, then the significant slowdown; no CPU pass.
    assert [o.outcome_id for o in result.outcomes] == [
        "mi300-incorrect",
        "mi300-compile",
        "mi300-crashed",
        "mi300-rejected",
        "h200-slow",
    ]


def test_what_failed_on_a_device_keeps_its_slowdown_and_drops_noise_and_wins(store):
    result = ask(store, "what failed for layernorm on H200", k=5)
    assert [o.outcome_id for o in result.outcomes] == ["h200-slow"]


def test_each_outcome_in_an_answer_is_labelled_as_measured(store):
    result = ask(store, "layernorm outcomes", k=20)
    verdicts = {h.outcome.outcome_id: h.verdict for h in result.outcome_hits}
    assert verdicts == {
        **{o.outcome_id: "correct, not timed" for o in CPU_PASSES},
        "h200-slow": "significant slowdown",
        "h200-noise": "within noise",
        "h200-fast": "significant speedup",
        "mi300-rejected": "failed: rejected",
        "mi300-crashed": "failed: crashed",
        "mi300-incorrect": "failed: incorrect",
        "mi300-compile": "failed: compile_error",
    }
    significant = {h.outcome.outcome_id for h in result.outcome_hits if h.significant}
    assert significant == {"h200-slow", "h200-fast"}  # the interval excludes 1.0, on either side


def test_a_slowdown_whose_interval_excludes_one_is_printed_as_a_significant_slowdown(store):
    result = ask(store, "what failed for layernorm on H200", k=5)
    console = Console(record=True, width=250)
    render_answer(console, result)
    text = console.export_text()
    assert "0.92x [0.90, 0.95] vs eager: significant slowdown" in text
    assert "not significant" not in text
    assert "failures, then significant slowdowns" in text


def test_ask_json_carries_each_outcomes_verdict(store):
    obj = ask(store, "what failed for layernorm on H200", k=5).to_json_obj()
    assert obj["outcome_verdicts"] == {"h200-slow": "significant slowdown"}


@pytest.mark.parametrize(
    "low, high, verdict",
    [
        (0.90, 0.95, "significant slowdown"),  # wholly below 1
        (0.80, 1.00, "within noise"),  # touches 1: does not exclude it
        (0.97, 1.07, "within noise"),  # across 1
        (1.00, 1.20, "within noise"),
        (1.71, 1.89, "significant speedup"),  # wholly above 1
        (None, None, None),  # no interval: nothing to read
        (0.90, None, None),
    ],
)
def test_speed_verdict_reads_significance_from_the_interval(low, high, verdict):
    from store.records import speed_verdict

    got = speed_verdict(low, high)
    assert (got.value if got is not None else None) == verdict


# -- intent -----------------------------------------------------------------------------------------

INTENTS = [
    # how-to: a remedy for a failure is asked for, not the failures themselves
    ("how to avoid bank conflicts", "how-to"),
    ("How do I avoid bank conflicts in shared memory on the H100?", "how-to"),
    ("how can I prevent register spills in my matmul", "how-to"),
    ("how to reduce bank conflicts for softmax", "how-to"),
    ("how do I fix a NaN in layernorm", "how-to"),
    ("how to fix incorrect results in rmsnorm on MI300X", "how-to"),
    ("how can we minimize register spills on the MI300X", "how-to"),
    ("how do I eliminate LDS bank conflicts", "how-to"),
    ("how to get rid of slow tails in softmax", "how-to"),
    ("ways to avoid bank conflicts on MI300", "how-to"),
    ("tips for avoiding register spills in layernorm", "how-to"),
    ("how should I debug a crash in my softmax kernel", "how-to"),
    ("avoid bank conflicts in a transpose kernel", "how-to"),
    ("how to work around compile errors with tl.dot on MI300X", "how-to"),
    ("how do I tune num_warps for softmax", "how-to"),
    ("how to write a layernorm kernel in Triton", "how-to"),
    ("how should I choose BLOCK_SIZE for rmsnorm", "how-to"),
    ("recommended num_stages for matmul on H100", "how-to"),
    ("best practices for softmax on MI300X", "how-to"),
    # failed: the question asks what went wrong
    ("what failed for layernorm", "failed"),
    ("what broke for softmax on MI300X", "failed"),
    ("regressions for layernorm on H200", "failed"),
    ("which softmax candidates were slower than eager", "failed"),
    ("why is my softmax slower on MI300", "failed"),
    ("what didn't work for rmsnorm", "failed"),
    ("what went wrong with layernorm on H100", "failed"),
    ("layernorm crashes on MI300X", "failed"),
    ("compile errors for softmax on the H200", "failed"),
    ("which layernorm kernels gave incorrect results", "failed"),
    ("pitfalls of softmax on MI300X", "failed"),
    ("softmax timed out on MI300X", "failed"),
    ("what failed when we tried to avoid bank conflicts in softmax", "failed"),
    ("any slowdowns for rmsnorm on H200", "failed"),
    ("why does layernorm fail on MI300X", "failed"),
    # worked
    ("what worked on MI300 for layernorm", "worked"),
    ("fastest LN on the H200", "worked"),
    ("best speedups for softmax on H100", "worked"),
    ("which transformations helped rmsnorm on MI300X", "worked"),
    ("what improved layernorm on H200", "worked"),
    # facts
    ("what is TMA", "fact"),
    ("how much HBM does the H200 have", "fact"),
    ("how many CUs does the MI300X have", "fact"),
    ("what is an LDS bank conflict", "fact"),
]


@pytest.mark.parametrize("question, intent", INTENTS)
def test_question_intent_table(question, intent):
    from knowledge.intent import classify

    assert classify(question).value == intent


def test_the_intent_table_has_at_least_forty_phrasings():
    assert len(INTENTS) >= 40 and len({q for q, _ in INTENTS}) == len(INTENTS)
