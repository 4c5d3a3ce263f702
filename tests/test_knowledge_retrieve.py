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
from store.records import OutcomeRecord

QUESTIONS = Path(__file__).parent / "data" / "retrieval_questions.jsonl"
HWDOCS = Path(__file__).resolve().parents[1] / "hwdocs"


def copy_of(template: Path, tmp_path_factory, name: str) -> Path:
    target = tmp_path_factory.mktemp(name) / "home"
    shutil.copytree(template, target)
    return target


def outcome(outcome_id: str, op: str, device: str, arch: str, speedup, *, status: str = "passed",
            dtype: str = "bfloat16", created_at: str = "2026-11-01T00:00:00+00:00",
            candidate_id: str = "c0", transformation: str = "rows_per_program=4") -> OutcomeRecord:
    return OutcomeRecord(
        outcome_id=outcome_id, op_family=op, problem_id="p-" + op, device_name=device, arch=arch,
        shape_bucket="M>=4096,N=4096..8191", dtype=dtype, transformation=transformation,
        candidate_id=candidate_id, baseline="eager", speedup=speedup,
        speedup_low=None if speedup is None else speedup * 0.95,
        speedup_high=None if speedup is None else speedup * 1.05, latency_ms_p50=0.1, status=status,
        triton_version="3.4.0", torch_version="2.8.0", evidence_eval_ids=(f"ev-{outcome_id}",),
        summary=f"{transformation} for {op} on {device}: {speedup}x", created_at=created_at,
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


@pytest.fixture(scope="module")
def store(home):
    with Store.open(home) as store:
        yield store


def test_first_ask_on_an_empty_store_loads_every_shipped_document(store):
    documents = store.documents()
    shipped = sorted(p.name for p in HWDOCS.glob("*.md"))
    assert sorted(Path(d.source).name for d in documents) == shipped
    assert all(d.builtin and d.source_url and d.source_url.startswith("http") for d in documents)
    assert all(store.chunks(d.document_id) for d in documents)


def _questions() -> list[dict]:
    """A handful of the shipped question set: the first question for each of eight documents."""
    wanted = ["nvidia-h200", "amd-mi300x", "meta-mtia", "x86-server-cpu", "constraint-softmax-logsumexp",
              "constraint-tolerances-by-dtype", "triton-matmul-tuning", "constraint-normalization-variance"]
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
    assert [o.outcome_id for o in result.outcomes] == ["ln-mi300x-b", "ln-mi300x-old", "ln-mi300x-a", "ln-mi300x-fail"]
    only_h200 = ask(store, "fastest LN on the H200", k=5)
    assert [o.outcome_id for o in only_h200.outcomes] == ["ln-h200"]
    bf16_hopper = ask(store, "Hopper layer norm in bf16", k=5)
    assert [o.outcome_id for o in bf16_hopper.outcomes] == ["ln-h100"]
    amd = ask(store, "what worked on AMD", k=10)
    assert {o.outcome_id for o in amd.outcomes} == {o.outcome_id for o in OUTCOMES if o.arch == "gfx942"}


def test_device_and_op_options_override_the_question(store):
    result = ask(store, "what worked", device="h100", op="LN", k=5)
    assert result.facets.devices == ("H100",) and result.facets.ops == ("layernorm",)
    assert [o.outcome_id for o in result.outcomes] == ["ln-h100"]
    assert all(Path(d.source).stem == "nvidia-h100" for d in result.documents if d.devices)


def test_rank_outcomes_puts_passed_then_speedup_then_recency():
    ranked = rank_outcomes(OUTCOMES)
    assert [o.outcome_id for o in ranked][:4] == ["ln-h100", "ln-mi300x-b", "ln-mi300x-old", "ln-h200"]
    assert ranked[-1].outcome_id == "ln-mi300x-fail"


def test_ask_json_prints_exactly_outcomes_and_documents(home, capsys):
    kscout(["ask", "what worked on MI300 for layernorm", "--k", "3", "--json", "--store", str(home)])
    out = capsys.readouterr().out
    obj = json.loads(out)
    assert set(obj) == {"outcomes", "documents"}
    assert [o["outcome_id"] for o in obj["outcomes"]] == ["ln-mi300x-b", "ln-mi300x-old", "ln-mi300x-a"]
    first = obj["outcomes"][0]
    for key in ("transformation", "speedup", "speedup_low", "baseline", "shape_bucket", "dtype", "device_name",
                "triton_version", "torch_version", "created_at", "evidence_eval_ids"):
        assert key in first
    assert first["evidence_eval_ids"] == ["ev-ln-mi300x-b"]
    assert len(obj["documents"]) == 3
    doc = obj["documents"][0]
    assert Path(doc["source"]).stem == "amd-mi300x"
    for key in ("title", "heading_path", "source_url", "doc_version", "text"):
        assert doc[key]


def test_ask_without_json_prints_two_tables(home, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")  # a wide terminal, so cells do not fold mid-word
    kscout(["ask", "what worked on MI300 for layernorm", "--k", "2", "--store", str(home)])
    out = capsys.readouterr().out
    outcomes, _, documents = out.partition("documents")
    assert "single_pass=true" in outcomes and "2.40x [2.28, 2.52] vs eager, passed" in outcomes
    assert "layernorm on AMD Instinct MI300X (gfx942), bfloat16" in outcomes and "ev-ln-mi300x-b" in outcomes
    assert "AMD Instinct MI300X and MI300A" in documents and "https://" in documents


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


def test_large_corpora_filter_after_an_unfiltered_vector_query_and_fetch_the_device_apart(store, monkeypatch):
    import knowledge.retrieve as retrieve

    question = "numerically stable softmax with max subtraction on the MI300X"
    corpus = retrieve.corpus_for(store)
    stem_of = {d: Path(doc.source).stem for d, doc in corpus.documents.items()}
    unfiltered = store.vector_search("chunks", question, 8)
    assert "amd-mi300x" not in {stem_of[cid.split(":")[0]] for cid, _ in unfiltered}  # not in the plain top 8

    # As if the store held thousands of documents: no metadata filter, over-fetch 8 and filter here.
    monkeypatch.setattr(retrieve, "SMALL_FILTER_DOCS", 0)
    monkeypatch.setattr(retrieve, "OVERFETCH", 8)
    facets = retrieve.resolve_facets(question, corpus)
    allowed, dev_match, _ = retrieve._doc_filter(corpus, facets)
    rows = retrieve._vector_rows(store, corpus, question, allowed, dev_match, 8, 2)
    stems = [stem_of[corpus.chunks[r].document_id] for r in rows]
    assert "amd-mi300x" in stems  # fetched by the second, device-only query
    assert stems.index("amd-mi300x") >= 1 and stems[0] == "constraint-softmax-logsumexp"
    assert not {"nvidia-h100", "nvidia-h200", "amd-mi250x", "nvidia-b200"} & set(stems)
    result = ask(store, question, k=4)
    assert not {"nvidia-h100", "nvidia-h200", "amd-mi250x"} & {Path(d.source).stem for d in result.documents}
