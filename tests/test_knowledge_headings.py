"""Section headings that name a question's identifiers (knowledge.headings) and what they do to a ranking
(knowledge.retrieve), on a small corpus built in the test: issue 27, the tcgen05.mma question."""

from __future__ import annotations

import math

import numpy as np
import pytest

import knowledge.retrieve as retrieve
from knowledge.bm25 import BM25Index
from knowledge.headings import candidates, identifiers, names_identifier
from knowledge.index import Corpus
from knowledge.records import QueryFacets
from store.records import Chunk, ChunkKind, Document

QUESTION = "how do I stage tiles with zq17"


def document(doc_id: str, title: str, devices: tuple[str, ...] = ()) -> Document:
    return Document(
        document_id=doc_id,
        source=f"/docs/{doc_id}.rst",
        title=title,
        vendor="nvidia",
        devices=devices,
        sha256="0" * 64,
        ingested_at="2026-12-06T00:00:00+00:00",
    )


def unit(cos: float) -> list[float]:
    """A vector at cosine `cos` from the question's (which is the first axis)."""
    return [cos, math.sqrt(1.0 - cos * cos), 0.0, 0.0]


def corpus_of(sections: list[tuple[str, tuple[str, ...], str, float]], devices: dict | None = None) -> Corpus:
    """(document id, heading path, body, cosine to the question) per chunk; a chunk's text starts with its
    heading path, as ingest writes it. `devices`: document id -> its device tags."""
    tags = devices or {}
    documents = {doc_id: document(doc_id, path[0], tuple(tags.get(doc_id, ()))) for doc_id, path, _, _ in sections}
    chunks = [
        Chunk(
            chunk_id=f"{doc_id}:{i}",
            document_id=doc_id,
            ordinal=i,
            heading_path=path,
            text=" > ".join(path) + "\n\n" + body,
            kind=ChunkKind.hardware,
            text_sha256=f"{i:064x}",
        )
        for i, (doc_id, path, body, _) in enumerate(sections)
    ]
    vectors = np.array([unit(cos) for *_, cos in sections], dtype=np.float32)
    bm25 = BM25Index([c.text for c in chunks])
    return Corpus(list(documents.values()), chunks, vectors, np.ones(len(chunks), dtype=bool), bm25, "test")


def reference_page_among_many_mentions() -> tuple[Corpus, int]:
    """The shape of the CCCL miss: 64 chunks near the question in meaning that never say its words (the
    vector ranking's list), 64 release notes that say "zq17" and "tiles" in passing (the lexical list),
    and the reference page whose heading names zq17, its text a code signature: moderately near on
    both, listed by neither."""
    sections = []
    for d in range(4):
        for j in range(16):
            sections.append(
                (f"near{d}", (f"Pipelining {d}", f"Loop {j}"), "Overlap loads with compute.", 0.95 - 0.01 * j)
            )
    for d in range(4):
        for j in range(16):
            body = f"Fixed zq17 tile staging in build {d}{j}; zq17 tiles are staged twice as zq17 stages them."
            sections.append((f"notes{d}", (f"Release notes {d}", f"Change {j}"), body, 0.1 + 0.01 * j))
    signature = (
        "```cuda\n// zq17.tile.shared.b32 [dst], [src];\n__device__ void zq17_tile(uint32_t dst, uint64_t src);\n```"
    )
    sections.append(("zq17_tile", ("zq17.tile", "zq17.tile.shared.b32"), signature, 0.6))
    sections.append(("zq17_fence", ("zq17.fence",), "```cuda\n// zq17.fence;\n```", 0.3))
    return corpus_of(sections), len(sections) - 2


def ranked_documents(corpus: Corpus, question: str = QUESTION, k: int = 5) -> list[str]:
    hits = retrieve.rank_chunks(None, corpus, question, QueryFacets(), k=k, query_vector=unit(1.0))
    return [h.document_id for h in hits]


def test_identifiers_are_the_questions_code_names_that_are_no_facet():
    assert identifiers("matrix multiply with tcgen05 tensor memory on Blackwell") == ("tcgen05",)
    assert identifiers("what is dispatch_compute_cap in the CUB dispatch layer") == ("dispatch_compute_cap",)
    assert identifiers("how many SMs and how much L2 does sm_100 have") == ("l2",)  # sm_100 is an arch
    assert identifiers("asynchronous bulk reduction of bf16 data into global memory on sm_90") == ()
    assert identifiers("MI300X FP8 peak TFLOPS") == ()  # a device and a data type: facets
    assert identifiers("what are fancy iterators in Thrust") == ()


def test_a_heading_names_an_identifier_a_body_only_mentions():
    corpus, page = reference_page_among_many_mentions()
    notes = next(i for i, c in enumerate(corpus.chunks) if c.document_id == "notes0")
    named = names_identifier(corpus, np.array([page, notes, page + 1]), ("zq17",))
    assert named.tolist() == [True, False, True]
    assert not names_identifier(corpus, np.array([page]), ()).any()


def test_the_sections_a_heading_names_join_nearest_first_unless_listed_already():
    corpus, page = reference_page_among_many_mentions()
    allowed = np.ones(len(corpus.chunks), dtype=bool)
    near = lambda rows: corpus.vectors[rows] @ np.array(unit(1.0), dtype=np.float32)  # noqa: E731
    assert candidates(corpus, ("zq17",), allowed, near, set(), 1) == [page]
    assert candidates(corpus, ("zq17",), allowed, near, {page}, 1) == [page + 1]
    assert candidates(corpus, ("zq17",), allowed, near, set(), 5) == [page, page + 1]
    allowed[page] = False  # a document the question's facets filtered out stays out
    assert candidates(corpus, ("zq17",), allowed, near, set(), 5) == [page + 1]


def test_a_page_whose_heading_names_the_identifier_enters_the_top_three_over_many_body_mentions(monkeypatch):
    corpus, _ = reference_page_among_many_mentions()
    shown = ranked_documents(corpus)
    assert "zq17_tile" in shown[:3], shown
    # neither ranking lists it: without the headings' candidates it is not shown at all
    monkeypatch.setattr(retrieve, "HEADING_CANDIDATES", 0)
    assert "zq17_tile" not in ranked_documents(corpus)


def test_a_heading_candidate_changes_no_other_candidates_relevance(monkeypatch):
    """Relevance is scaled over the two rankings' candidates: what the headings add (below their lowest
    cosine) moves no other passage's score."""
    corpus, _ = reference_page_among_many_mentions()

    def scores() -> dict[str, float]:
        hits = retrieve.rank_chunks(None, corpus, QUESTION, QueryFacets(), k=10, query_vector=unit(1.0))
        return {h.chunk_id: h.score for h in hits if not h.document_id.startswith("zq17")}

    joined = scores()
    monkeypatch.setattr(retrieve, "HEADING_CANDIDATES", 0)
    alone = scores()
    common = set(joined) & set(alone)
    assert len(common) >= 8
    assert {c: joined[c] for c in common} == {c: alone[c] for c in common}


def test_in_an_op_and_device_question_a_heading_that_names_the_identifier_is_one_more_thing_it_is_about(
    monkeypatch,
):
    """The tcgen05.mma case in small: a device page (tagged H100, mentioning the instruction and the
    matrix multiply in its text) against the instruction's reference page (about the op by its heading
    "zq17.mma", naming the device only in its signature's "SM_90a"). Each is about one facet and
    mentions the other; the reference page's heading also names what the question names."""
    sections = [
        ("h100", ("NVIDIA H100", "Features"), "zq17 issues the matrix multiply for the whole CTA.", 0.9),
        ("h100", ("NVIDIA H100", "Memory"), "Operands of a matrix multiply come from shared memory.", 0.7),
        ("zq17_mma", ("zq17.mma", "zq17.mma.f16"), "```cuda\n// zq17.mma.f16 [d], a, b; // SM_90a\n```", 0.75),
    ]
    sections += [(f"other{i}", (f"Other {i}",), "Unrelated text about launch bounds.", 0.2) for i in range(6)]
    corpus = corpus_of(sections, {"h100": ["H100"]})
    question = "matrix multiply with zq17 on H100"
    facets = retrieve.resolve_facets(question, corpus)
    assert facets.devices and facets.ops and identifiers(question) == ("zq17",)

    def scores() -> dict[str, float]:
        hits = retrieve.rank_chunks(None, corpus, question, facets, k=3, query_vector=unit(1.0))
        return {f"{h.document_id}#{h.heading_path[-1]}": h.score for h in hits}

    named = scores()
    monkeypatch.setattr(retrieve, "names_identifier", lambda corpus, rows, idents: np.zeros(rows.size, dtype=bool))
    plain = scores()
    page = "zq17_mma#zq17.mma.f16"
    assert named[page] - plain[page] == pytest.approx(retrieve.IDENTIFIER_WEIGHT + retrieve.ABOUT_BONUS)
    assert max(named, key=named.__getitem__) == page, named
    assert max(plain, key=plain.__getitem__) == "h100#Features", plain
