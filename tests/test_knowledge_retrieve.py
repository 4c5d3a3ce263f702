"""Hybrid retrieval over the real shipped hwdocs with the real embedding model, and `kscout ask`.

Embedding every shipped document costs tens of seconds on two cores, so it happens once per test
session (conftest's `hwdocs_store_template`, built by the first `ask` on an empty store) and this
module works on its own copy of that store folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent.cli import main as kscout
from knowledge.errors import RetrievalError
from knowledge.ingest import IngestOptions, ingest_paths
from knowledge.retrieve import ask, rank_outcomes
from store import Store
from store.records import DocumentOrigin, OutcomeRecord

QUESTIONS = Path(__file__).parent / "data" / "retrieval_questions.jsonl"
HWDOCS = Path(__file__).resolve().parents[1] / "hwdocs"


def copy_of(template: Path, tmp_path_factory, name: str) -> Path:
    target = tmp_path_factory.mktemp(name) / "home"
    shutil.copytree(template, target)
    return target


def outcome(
    outcome_id: str,
    op: str,
    device: str,
    arch: str,
    speedup,
    *,
    status: str = "passed",
    dtype: str = "bfloat16",
    created_at: str = "2026-11-01T00:00:00+00:00",
    candidate_id: str = "c0",
    transformation: str = "rows_per_program=4",
) -> OutcomeRecord:
    return OutcomeRecord(
        outcome_id=outcome_id,
        op_family=op,
        problem_id="p-" + op,
        device_name=device,
        arch=arch,
        shape_bucket="M>=4096,N=4096..8191",
        dtype=dtype,
        transformation=transformation,
        candidate_id=candidate_id,
        baseline="eager",
        speedup=speedup,
        speedup_low=None if speedup is None else speedup * 0.95,
        speedup_high=None if speedup is None else speedup * 1.05,
        latency_ms_p50=0.1,
        status=status,
        triton_version="3.4.0",
        torch_version="2.8.0",
        evidence_eval_ids=(f"ev-{outcome_id}",),
        summary=f"{transformation} for {op} on {device}: {speedup}x",
        created_at=created_at,
    )


OUTCOMES = [
    outcome("ln-mi300x-a", "layernorm", "AMD Instinct MI300X", "gfx942", 1.8),
    outcome("ln-mi300x-b", "layernorm", "AMD Instinct MI300X", "gfx942", 2.4, transformation="single_pass=true"),
    outcome("ln-mi300x-old", "layernorm", "AMD Instinct MI300X", "gfx942", 2.4, created_at="2026-01-01T00:00:00+00:00"),
    outcome("ln-mi300x-fail", "layernorm", "AMD Instinct MI300X", "gfx942", None, status="incorrect"),
    outcome("ln-h100", "layernorm", "NVIDIA H100 80GB HBM3", "sm_90", 3.0),
    outcome("ln-h200", "layernorm", "NVIDIA H200", "sm_90", 2.0, dtype="float32"),
    outcome("sm-mi300x", "softmax", "AMD Instinct MI300X", "gfx942", 1.5),
]


@pytest.fixture(scope="module")
def home(hwdocs_store_template, tmp_path_factory) -> Path:
    home = copy_of(hwdocs_store_template, tmp_path_factory, "retrieve")
    with Store.open(home) as store:
        for o in OUTCOMES:
            store.add_outcome(o)
    return home


@pytest.fixture
def own_home(hwdocs_store_template, tmp_path_factory) -> Path:
    """The module's store for one test that adds to it (the module's own is shared, in any order)."""
    home = copy_of(hwdocs_store_template, tmp_path_factory, "retrieve-own")
    with Store.open(home) as store:
        for o in OUTCOMES:
            store.add_outcome(o)
    return home


@pytest.fixture(scope="module")
def store(home):
    with Store.open(home) as store:
        yield store


def test_first_ask_on_an_empty_store_loads_every_shipped_document(store):
    documents = store.documents()
    shipped = sorted(p.name for p in HWDOCS.glob("*.md"))
    assert sorted(Path(d.source).name for d in documents) == shipped
    # The shipped notes are the project's own: never cited under the vendor URLs they draw on.
    assert all(d.builtin and d.source_url is None and d.origin is DocumentOrigin.project for d in documents)
    assert all(json.loads(d.metadata_json)["cites"] for d in documents)
    assert all(store.chunks(d.document_id) for d in documents)


def _questions() -> list[dict]:
    """A handful of the shipped question set: the first question for each of eight documents."""
    wanted = [
        "nvidia-h200",
        "amd-mi300x",
        "meta-mtia",
        "x86-server-cpu",
        "constraint-softmax-logsumexp",
        "constraint-tolerances-by-dtype",
        "triton-matmul-tuning",
        "constraint-normalization-variance",
    ]
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    return [next(r for r in rows if r["expected"] == stem) for stem in wanted]


@pytest.mark.parametrize("row", _questions(), ids=lambda r: r["expected"])
def test_plain_questions_retrieve_their_document_in_the_top_three(store, row):
    result = ask(store, row["question"], k=6)
    stems = list(dict.fromkeys(Path(d.source).stem for d in result.documents))
    assert row["expected"] in stems[:3], (row["question"], stems)


def test_question_about_one_device_never_returns_another_devices_document(store):
    result = ask(store, "how much memory bandwidth and L2 cache does the MI300 have", k=8)
    assert result.facets.devices == ("MI300X", "MI300A")
    stems = [Path(d.source).stem for d in result.documents]
    assert stems[0] == "amd-mi300x"
    assert not {"nvidia-h100", "nvidia-h200", "nvidia-a100", "nvidia-b200", "amd-mi250x"} & set(stems)
    assert all(d.matched_device for d in result.documents if d.devices)


def test_exact_token_questions_rank_by_bm25_as_well_as_vectors(store):
    result = ask(store, "wavefront size on gfx942", k=3)
    top = result.documents[0]
    assert Path(top.source).stem == "amd-mi300x"
    assert top.bm25_rank is not None and top.vector_rank is not None
    assert "64" in top.text


def test_ask_finds_outcomes_for_the_parsed_device_and_op_best_first(store):
    result = ask(store, "what worked on MI300 for layernorm", k=5)
    assert result.intent == "worked"
    assert [o.outcome_id for o in result.outcomes] == ["ln-mi300x-b", "ln-mi300x-old", "ln-mi300x-a"]
    only_h200 = ask(store, "fastest LN on the H200", k=5)
    assert [o.outcome_id for o in only_h200.outcomes] == ["ln-h200"]
    bf16_hopper = ask(store, "Hopper layer norm in bf16", k=5)
    assert [o.outcome_id for o in bf16_hopper.outcomes] == ["ln-h100"]
    amd = ask(store, "what worked on AMD for layernorm and softmax", k=10)
    assert {o.outcome_id for o in amd.outcomes} == {"ln-mi300x-a", "ln-mi300x-b", "ln-mi300x-old", "sm-mi300x"}


def test_device_and_op_options_override_the_question(store):
    result = ask(store, "what worked", device="h100", op="LN", k=5)
    assert result.facets.devices == ("H100",) and result.facets.ops == ("layernorm",)
    assert [o.outcome_id for o in result.outcomes] == ["ln-h100"]
    assert all(Path(d.source).stem == "nvidia-h100" for d in result.documents if d.devices)


def test_rank_outcomes_puts_passed_then_speedup_then_recency():
    ranked = rank_outcomes(OUTCOMES)
    assert [o.outcome_id for o in ranked][:4] == ["ln-h100", "ln-mi300x-b", "ln-mi300x-old", "ln-h200"]
    assert ranked[-1].outcome_id == "ln-mi300x-fail"


def test_ask_json_prints_one_object_with_intent_outcomes_and_documents(home, capsys):
    kscout(["ask", "what worked on MI300 for layernorm", "--k", "3", "--json", "--store", str(home)])
    out = capsys.readouterr().out
    obj = json.loads(out)
    assert set(obj) == {
        "intent",
        "facets",
        "outcomes",
        "outcome_provenance",
        "outcome_verdicts",
        "outcome_conflicts",
        "failure_patterns",
        "documents",
    }
    assert obj["intent"] == "worked" and obj["failure_patterns"] == [] and obj["outcome_provenance"] == {}
    assert obj["outcome_conflicts"] == {}
    assert [o["outcome_id"] for o in obj["outcomes"]] == ["ln-mi300x-b", "ln-mi300x-old", "ln-mi300x-a"]
    assert obj["outcome_verdicts"] == {
        i: "significant speedup" for i in ("ln-mi300x-b", "ln-mi300x-old", "ln-mi300x-a")
    }
    first = obj["outcomes"][0]
    for key in (
        "transformation",
        "speedup",
        "speedup_low",
        "baseline",
        "shape_bucket",
        "dtype",
        "device_name",
        "triton_version",
        "torch_version",
        "created_at",
        "evidence_eval_ids",
    ):
        assert key in first
    assert first["evidence_eval_ids"] == ["ev-ln-mi300x-b"]
    assert len(obj["documents"]) == 3
    doc = obj["documents"][0]
    assert Path(doc["source"]).stem == "amd-mi300x"
    for key in ("title", "heading_path", "doc_version", "text", "excerpt", "location"):
        assert doc[key]
    assert doc["origin"] == "project" and doc["location"].startswith("hwdocs/amd-mi300x.md#")


def test_ask_without_json_prints_the_outcomes_then_the_documents_with_their_provenance(home, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "260")  # a wide terminal, so cells do not fold mid-word
    kscout(["ask", "what worked on MI300 for layernorm", "--k", "2", "--store", str(home)])
    out = capsys.readouterr().out
    outcomes, _, documents = out.partition("documents")
    assert "what worked (significant speedups only)" in outcomes
    assert "single_pass=true" in outcomes and "2.40x [2.28, 2.52] vs eager: significant speedup" in outcomes
    assert "layernorm on AMD Instinct MI300X (gfx942), bfloat16" in outcomes and "ev-ln-mi300x-b" in outcomes
    assert "this store" in outcomes
    assert "AMD Instinct MI300X and MI300A" in documents and "hwdocs/amd-mi300x.md#" in documents
    assert "project note" in documents and "https://" not in documents


def test_empty_question_and_bad_k_are_one_line_errors(store, home, capsys):
    with pytest.raises(RetrievalError, match="the question is empty"):
        ask(store, "   ")
    with pytest.raises(SystemExit) as exc:
        kscout(["ask", "softmax", "--k", "0", "--store", str(home)])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == "kscout: error: --k must be at least 1, got 0"


def test_docs_json_lists_provenance_and_reindex_restores_vectors(home, capsys):
    kscout(["docs", "--json", "--store", str(home)])
    docs = json.loads(capsys.readouterr().out)["documents"]
    assert len(docs) == len(list(HWDOCS.glob("*.md")))
    assert all(d["sha256"] and d["ingested_at"] and d["source"].startswith("hwdocs/") for d in docs)
    kscout(["reindex", "--json", "--store", str(home)])
    counts = json.loads(capsys.readouterr().out)["counts"]
    with Store.open(home) as store:
        assert counts["chunks"] == len(store.chunks()) and counts["outcomes"] == len(OUTCOMES)


def test_user_documents_for_unknown_devices_match_by_name(hwdocs_store_template, tmp_path_factory, tmp_path):
    home = copy_of(hwdocs_store_template, tmp_path_factory, "mi355x")
    (tmp_path / "mi355x.md").write_text("# MI355X\n## LDS\nThe MI355X has 160 KB of LDS per compute unit.\n")
    with Store.open(home) as store:
        report = ingest_paths(store, [tmp_path / "mi355x.md"], IngestOptions(devices=("MI355X",), vendor="amd"))
        assert report.files[0].status.value == "added"
        result = ask(store, "how much LDS per CU on the MI355X", k=3)
        assert result.facets.devices == ("MI355X",)
        assert Path(result.documents[0].source).name == "mi355x.md"


def test_failed_returns_failure_patterns_and_failed_or_slower_outcomes_first(own_home):
    with Store.open(own_home) as store:
        store.add_outcome(outcome("ln-mi300x-slow", "layernorm", "AMD Instinct MI300X", "gfx942", 0.92))
        for _ in range(2):
            store.record_failure(
                "layernorm", "gfx942", "correctness", "MismatchError", "max abs error 0.5 at row 7", "c0"
            )
        store.record_failure("softmax", "gfx942", "compile", "CompilationError", "BLOCK too large", "c0")
        failed = ask(store, "what failed for layernorm on MI300X", k=5)
        worked = ask(store, "what worked on MI300 for layernorm", k=5)
    assert failed.intent == "failed"
    assert [f.op_family for f in failed.failures] == ["layernorm"] and failed.failures[0].count == 2
    assert [o.outcome_id for o in failed.outcomes] == ["ln-mi300x-fail", "ln-mi300x-slow"]
    assert "ln-mi300x-slow" not in {o.outcome_id for o in worked.outcomes}  # a 0.92x is not what worked
    assert worked.failures == ()


def test_worked_lists_only_speedups_whose_interval_excludes_one(own_home):
    noisy = outcome("ln-h100-noisy", "layernorm", "NVIDIA H100 80GB HBM3", "sm_90", 1.02)  # [0.97, 1.07]
    with Store.open(own_home) as store:
        store.add_outcome(noisy)
        result = ask(store, "what worked for layernorm on H100", k=5)
    assert [o.outcome_id for o in result.outcomes] == ["ln-h100"]
    assert all(h.significant for h in result.outcome_hits)


def test_a_question_that_names_no_op_or_kernel_gets_no_outcomes(store):
    for question in ("what is TMA", "how much HBM does the MI300X have", "what worked on AMD"):
        assert ask(store, question, k=5).outcomes == (), question


def test_rank_chunks_keeps_the_first_of_each_ranking_and_caps_chunks_per_document(store):
    from knowledge import retrieve
    from knowledge.index import corpus_for, search_vectors

    corpus = corpus_for(store)
    for question in (
        "num_warps for rmsnorm on H200",
        "HIP_FORCE_DEV_KERNARG",
        "wavefront size on gfx942",
        "how does Welford's algorithm keep the variance stable",
    ):
        facets = retrieve.resolve_facets(question, corpus)
        allowed, _, _ = retrieve._doc_filter(corpus, facets)
        mask = corpus.allowed_rows(allowed)
        hits = retrieve.rank_chunks(store, corpus, question, facets, k=4)
        ids = {h.chunk_id for h in hits}
        vec = search_vectors(corpus, store.embed_query(question), mask, 1)
        bm = corpus.bm25.top(question, 1, mask)
        per_doc = {}
        for h in hits:
            per_doc[h.document_id] = per_doc.get(h.document_id, 0) + 1
        for row, _ in vec + bm:  # each leader is shown, or its document is, at the cap, by better passages
            leader = corpus.chunks[row]
            shown_instead = per_doc.get(leader.document_id, 0) >= retrieve.MAX_PER_DOCUMENT
            assert leader.chunk_id in ids or shown_instead, question
        assert max(per_doc.values()) <= retrieve.MAX_PER_DOCUMENT
    # With only one document able to answer, the cap does not leave the answer short.
    h200 = next(d for d, doc in corpus.documents.items() if doc.source.endswith("nvidia-h200.md"))
    facets = retrieve.resolve_facets("H200 memory", corpus)
    only = retrieve.rank_chunks(store, corpus, "H200 memory", facets, k=5, only_docs={h200})
    assert len(only) == 5 and {h.document_id for h in only} == {h200}


def test_a_device_boost_breaks_ties_but_never_beats_relevance(store):
    from knowledge import retrieve

    # A device and no op: no passage is lifted by both facets, so the small boost alone applies.
    result = ask(store, "how to keep exp from overflowing with max subtraction on the MI300X", k=4)
    stems = [Path(d.source).stem for d in result.documents]
    assert not {"nvidia-h100", "nvidia-h200", "amd-mi250x"} & set(stems)
    for upper, lower in zip(result.documents, result.documents[1:]):
        boost = lambda h: retrieve.DEVICE_BOOST * h.matched_device + retrieve.OP_BOOST * h.matched_op  # noqa: E731
        # what lifted a chunk above another is at most the boost: relevance decides beyond that margin
        assert (upper.score - boost(upper)) >= (lower.score - boost(lower)) - retrieve.MAX_BOOST


@pytest.mark.parametrize(
    "question",
    ["what worked on MI300 for layernorm", "num_warps for rmsnorm on H200", "softmax tuning on the A100"],
)
def test_passages_about_the_op_and_the_device_come_before_passages_about_one(store, question):
    hits = ask(store, question, k=6).documents
    both = [h.matched_device and h.matched_op for h in hits]
    assert both[0], [(Path(h.source).stem, h.heading_path[-1]) for h in hits]
    assert both == sorted(both, reverse=True)  # no single-facet passage above a two-facet one


def test_what_worked_on_mi300_for_layernorm_leads_with_the_mi300_row_wise_section(store):
    # The section never says "layernorm": a norm is a row-wise kernel (aliases.OP_SCHEDULE).
    hit = ask(store, "what worked on MI300 for layernorm", k=5).documents[0]
    assert (Path(hit.source).stem, hit.heading_path[-1]) == ("amd-mi300x", "Row-wise kernels")


def test_schedule_kinds_name_row_wise_and_contraction_passages():
    from knowledge.aliases import schedule_kinds

    assert schedule_kinds("Tuning Triton kernels on MI300X > Row-wise kernels") == {"rowwise"}
    assert schedule_kinds("LayerNorm numerics") == {"rowwise"}
    assert schedule_kinds("MFMA throughput > Matmul") == {"contraction"}
    assert schedule_kinds("SwiGLU gate") == {"pointwise"}
    assert schedule_kinds("Identity and variants") == frozenset()


def test_the_excerpt_shows_the_sentence_that_matched_with_its_number(store):
    hit = ask(store, "how much shared memory per SM does an H100 have", k=3).documents[0]
    assert Path(hit.source).stem == "nvidia-h100"
    assert "228 KB" in hit.excerpt and len(hit.excerpt) <= 330
    project = ask(store, "launch overhead of a Triton kernel on the H200", k=5)
    h200 = next(d for d in project.documents if Path(d.source).stem == "nvidia-h200")
    assert h200.origin is DocumentOrigin.project and "H200 machine" in h200.measurements


# -- with third-party-style vendor documents beside the shipped ones ---------------------------------


@pytest.fixture(scope="module")
def mixed(hwdocs_store_template, tmp_path_factory):
    from knowledge.bench import ingest_vendor_docs

    home = copy_of(hwdocs_store_template, tmp_path_factory, "mixed")
    with Store.open(home) as store:
        reports = ingest_vendor_docs(store)
        assert not [f for r in reports for f in r.files if f.status.value == "failed"]
        for o in OUTCOMES:
            store.add_outcome(o)
        yield store


def test_vendor_hits_show_their_file_url_anchor_vendor_and_version(mixed):
    hit = ask(mixed, "what does waves_per_eu do in a Triton kernel on MI300X", k=3).documents[0]
    assert hit.location == (
        "https://rocm.docs.amd.com/en/latest/how-to/tuning-guides/mi300x-triton.html#kernel-configuration-knobs"
    )
    assert (hit.vendor, hit.origin, hit.title) == ("amd", DocumentOrigin.vendor, "Optimizing Triton kernels on MI300X")
    assert "waves_per_eu" in hit.excerpt and "| Knob |" in hit.excerpt  # the table row under its header


def test_untagged_amd_documents_do_not_answer_nvidia_questions(mixed):
    result = ask(mixed, "how much shared memory per thread block on the H100", k=6)
    hopper = [
        d for d in result.documents[:3] if d.location.startswith("https://docs.nvidia.com/cuda/hopper-tuning.html#")
    ]
    assert hopper and "227 KB" in hopper[0].excerpt
    assert all(d.vendor != "amd" for d in result.documents)  # ROCm and HIP pages name no device, yet stay out


def test_mi300_layernorm_question_leads_with_the_row_wise_section_among_vendor_mi300_pages(mixed):
    result = ask(mixed, "what worked on MI300 for layernorm", k=5)
    assert [o.outcome_id for o in result.outcomes][:1] == ["ln-mi300x-b"]
    first = result.documents[0]
    assert (Path(first.source).stem, first.heading_path[-1]) == ("amd-mi300x", "Row-wise kernels")
    # a layernorm passage from outside the MI300 pages stays in the answer beside them
    assert any(d.matched_op and "mi300" not in d.source.lower() for d in result.documents[1:5])


@pytest.mark.slow
def test_both_question_sets_meet_their_recall_and_mrr_targets(mixed):
    from knowledge.bench import QUESTIONS, VENDOR_QUESTIONS, evaluate

    for path in (QUESTIONS, VENDOR_QUESTIONS):
        questions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out = evaluate(mixed, questions)
        assert out["recall_at_5"] >= 0.95 and out["mrr"] >= 0.85, (path.name, out["_misses"])


def test_kscout_ask_in_a_fresh_process_imports_no_torch_no_chromadb_no_docutils(home):
    import os
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from agent.cli import main\n"
        "main(['ask', 'how much shared memory per SM does an H100 have', '--store', sys.argv[1], '--json'])\n"
        "heavy = ['torch', 'sentence_transformers', 'transformers', 'chromadb', 'docutils', 'scipy']\n"
        "print(json.dumps({m: m in sys.modules for m in heavy}), file=sys.stderr)\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", script, str(home)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(root)),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["documents"]
    assert json.loads(out.stderr.strip().splitlines()[-1]) == dict.fromkeys(
        ["torch", "sentence_transformers", "transformers", "chromadb", "docutils", "scipy"], False
    )


def test_a_leader_from_a_document_at_the_cap_replaces_that_documents_weaker_chunk_only():
    from types import SimpleNamespace

    from knowledge.retrieve import _select

    docs = {0: "a", 1: "a", 2: "b", 3: "c", 4: "a"}
    corpus = SimpleNamespace(chunks={row: SimpleNamespace(document_id=d) for row, d in docs.items()})
    ranked = [(0.9, 0), (0.7, 2), (0.6, 3), (0.55, 4), (0.5, 1)]  # row 4 (document a) leads another ranking
    chosen = _select(corpus, ranked, k=4, cap=2, leaders={0, 4})
    assert [row for _, row in chosen] == [0, 2, 3, 4]  # a's weaker chunk (row 1) gave way, b and c stay
    # where a's chunk at the cap scores above the leader, a is shown already: the leader stays out
    ranked = [(0.9, 0), (0.8, 1), (0.7, 2), (0.6, 3), (0.5, 4)]
    chosen = _select(corpus, ranked, k=4, cap=2, leaders={0, 4})
    assert [row for _, row in chosen] == [0, 1, 2, 3]
    # a leader from a document under the cap still takes the weakest place overall
    chosen = _select(corpus, [(0.9, 0), (0.7, 2), (0.6, 3), (0.55, 1), (0.5, 4)], k=3, cap=2, leaders={4})
    assert [row for _, row in chosen] == [0, 2, 4]


def test_the_cap_per_document_gives_way_to_passages_as_good_as_the_best():
    from types import SimpleNamespace

    from knowledge.retrieve import CAP_MARGIN, _select

    docs = {0: "a", 1: "a", 2: "a", 3: "b", 4: "c"}
    corpus = SimpleNamespace(chunks={row: SimpleNamespace(document_id=d) for row, d in docs.items()})
    close = [(0.9, 0), (0.9 - CAP_MARGIN / 2, 1), (0.9 - CAP_MARGIN, 2), (0.5, 3), (0.4, 4)]
    assert [row for _, row in _select(corpus, close, k=4, cap=2, leaders=set())] == [0, 1, 2, 3]
    # a third chunk of the same document that is clearly behind the best still gives way
    far = [(0.9, 0), (0.85, 1), (0.6, 2), (0.5, 3), (0.4, 4)]
    assert [row for _, row in _select(corpus, far, k=4, cap=2, leaders=set())] == [0, 1, 3, 4]


# -- the question set over real third-party docs (../shared/thirdparty-docs, never copied here) --------


@pytest.fixture(scope="module")
def thirdparty(hwdocs_store_template, tmp_path_factory):
    from knowledge.bench import THIRDPARTY_DOCS, ingest_thirdparty_docs

    if not THIRDPARTY_DOCS.is_dir():
        pytest.skip(f"third-party docs not present at {THIRDPARTY_DOCS} (a clone without ../shared)")
    home = copy_of(hwdocs_store_template, tmp_path_factory, "thirdparty")
    with Store.open(home) as store:
        reports = ingest_thirdparty_docs(store)
        assert not [f for r in reports for f in r.files if f.status.value == "failed"]
        yield store


@pytest.fixture(scope="module")
def thirdparty_scores(thirdparty):
    from knowledge.bench import THIRDPARTY_QUESTIONS, evaluate, load_questions

    return evaluate(thirdparty, load_questions(THIRDPARTY_QUESTIONS))


def test_the_thirdparty_question_set_names_passages_that_exist():
    from types import SimpleNamespace

    from knowledge.bench import THIRDPARTY_QUESTIONS, load_questions, passage_matches

    questions = load_questions(THIRDPARTY_QUESTIONS)
    assert len(questions) >= 40
    assert sum(q.get("kind") == "op-device" for q in questions) >= 8
    assert sum(bool(q.get("outcome")) for q in questions) >= 4
    assert all(q.get("heading") or q.get("quote") for q in questions)  # each names a passage, not a file
    hit = SimpleNamespace(
        source="/x/thirdparty-docs/cccl/docs/cccl/tma.rst",
        heading_path=("Tensor Memory Accelerator (TMA)",),
        text="available on  Hopper (SM90)",
    )
    assert passage_matches({"expected": "cccl/docs/cccl/tma", "quote": "Available on Hopper"}, hit)
    assert not passage_matches({"expected": "cccl/docs/cccl/tma", "heading": "Other"}, hit)


@pytest.mark.slow
def test_thirdparty_questions_hold_the_measured_ranking(thirdparty_scores):
    out = thirdparty_scores
    # Measured 2026-12-06, latest (knowledge.headings: sections whose heading names an identifier of the
    # question join the candidates and count as about it; "matrix multiply with tcgen05 tensor memory on
    # Blackwell" found its tcgen05.mma page, at rank 2): hit@1 0.86, recall@5 0.98, MRR 0.917. Before
    # (knowledge.facets: a section mentions what any of its chunks says, a question naming two
    # architectures wants both, a page tagged with nearly every op is about none; the chunk naming the
    # facets leads its section): 0.86, 0.96, 0.907. Earlier that day (a page's title words give a section
    # no heading cover): 0.86, 0.94, 0.897; before: 0.82, 0.94, 0.873 (three chunks a document; one
    # question relabelled to the section that has its answer), 0.80, 0.90, 0.847 (library collections,
    # heading cover, the leader rule), 0.64, 0.78, 0.70 (2026-12-05) and 0.58, 0.70, 0.63. The floors
    # leave one question of slack below the latest.
    assert out["hit_at_1"] >= 0.84 and out["mrr"] >= 0.9 and out["recall_at_5"] >= 0.96, out["_misses"]
    assert out["outcome_first"] == 1.0, out["_outcome_misses"]


@pytest.mark.slow
def test_thirdparty_questions_meet_the_issue_goals(thirdparty_scores):
    """Issue 27, item 2: hit@1 at least 0.85, MRR at least 0.9, every op-and-device question's passage in
    the top 3. Met 2026-12-06 (0.86, 0.917, 9 of 9) once headings that name the question's identifiers
    brought in the tcgen05.mma page (knowledge.headings); it had been a strict xfail at 8 of 9."""
    out = thirdparty_scores
    assert out["hit_at_1"] >= 0.85 and out["mrr"] >= 0.9
    assert out["op_device_in_top_3"] == 1.0, out["_top3_misses"]
