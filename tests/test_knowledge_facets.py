"""Passage facets (knowledge.facets) and the rule that lets the chunk naming them lead its section
(knowledge.retrieve), on a small corpus of plain records: issue 27, the op-and-device questions."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from knowledge.aliases import document_devices, document_ops, parse_query
from knowledge.facets import (
    ABOUT,
    MENTIONS,
    NONE,
    PassageFacets,
    architecture_groups,
    generic_op_tags,
    passage_facets,
)
from knowledge.retrieve import _mentions_lead_their_section

ALL_OPS = ["layernorm", "rmsnorm", "add_rmsnorm", "softmax", "log_softmax", "cross_entropy", "row_sum", "matmul"]
ROWWISE = ["layernorm", "rmsnorm", "add_rmsnorm", "softmax", "log_softmax", "cross_entropy", "row_sum"]


def chunk(doc_id: str, path: tuple[str, ...], text: str):
    return SimpleNamespace(document_id=doc_id, heading_path=path, text=text)


def corpus_of(chunks, devices=None, ops=None):
    """What passage_facets reads of a corpus: chunks, each document's device and op tags, caches."""
    doc_ids = {c.document_id for c in chunks}
    devices, ops = devices or {}, ops or {}
    return SimpleNamespace(
        chunks=chunks,
        doc_devices={d: document_devices(devices.get(d, ())) for d in doc_ids},
        doc_ops={d: document_ops(ops.get(d, ())) for d in doc_ids},
        extra_device_names=[],
    )


CHUNKS = [
    # a library page: one section split in two chunks, each naming one facet
    chunk("lib", ("Determinism", "Guarantees"), "The same bits whether it runs on an Ampere or a Hopper GPU."),
    chunk("lib", ("Determinism", "Guarantees"), "The bitwise result may change as reduction structures evolve."),
    chunk("lib", ("Determinism", "Requesting"), "Pass the requirement through the environment."),
    # a shipped device page tagged H100, about row-wise kernels by its heading
    chunk("h100", ("NVIDIA H100", "Row-wise kernels"), "Aim for 80-90% of the copy ceiling."),
    chunk("h100", ("NVIDIA H100", "Compute"), "Twice the A100's tensor throughput per SM for a reduction."),
    # a constraint page tagged with nearly every op family
    chunk("acc", ("Accumulation precision", "Kahan summation"), "Tree reductions are enough on the H100."),
    chunk("acc", ("Accumulation precision", "Reduction order"), "The order of a reduction changes bits."),
]
CORPUS_TAGS = {"devices": {"h100": ["H100"]}, "ops": {"acc": ALL_OPS}}


def facets_for(question: str, corpus) -> list[PassageFacets]:
    facets = parse_query(question)
    asked = {d.upper() for d in facets.devices}
    dev_match = {d for d, tags in corpus.doc_devices.items() if tags & asked}
    op_match = {d for d, tags in corpus.doc_ops.items() if tags & set(facets.ops)}
    return passage_facets(corpus, facets, np.arange(len(corpus.chunks)), dev_match, op_match)


def test_devices_are_grouped_by_architecture():
    assert architecture_groups(parse_query("reductions on an Ampere and a Hopper GPU")) == [
        frozenset({"H100", "H200"}),
        frozenset({"A100"}),
    ]
    assert architecture_groups(parse_query("reductions on Hopper")) == [frozenset({"H100", "H200"})]
    assert architecture_groups(parse_query("reductions on the MI300")) == [frozenset({"MI300X", "MI300A"})]
    assert architecture_groups(parse_query("what is a reduction")) == []


def test_op_tags_on_nearly_every_family_single_out_none():
    assert generic_op_tags(document_ops(ALL_OPS))  # 8 of the 11 families
    assert not generic_op_tags(document_ops(ROWWISE))  # 7 of 11, all of one schedule kind
    assert not generic_op_tags(document_ops(["matmul", "gemm", "linear"]))


def test_a_section_mentions_what_any_of_its_chunks_says_and_each_chunk_counts_what_it_says_itself():
    corpus = corpus_of(CHUNKS, **CORPUS_TAGS)
    got = facets_for("are reductions bitwise identical on an Ampere and a Hopper GPU", corpus)
    # both chunks of "Guarantees" mention both facets; each says one of them itself
    assert got[0] == PassageFacets(MENTIONS, MENTIONS, 1)
    assert got[1] == PassageFacets(MENTIONS, MENTIONS, 1)
    assert got[2] == PassageFacets(NONE, NONE, 0)  # another section of the same page inherits nothing


def test_a_page_about_one_of_two_asked_architectures_is_about_them_only_as_much_as_it_names_the_other():
    corpus = corpus_of(CHUNKS, **CORPUS_TAGS)
    both = facets_for("are reductions bitwise identical on an Ampere and a Hopper GPU", corpus)
    assert both[3] == PassageFacets(NONE, ABOUT, 0)  # tagged H100, never names an Ampere part
    assert both[4] == PassageFacets(MENTIONS, MENTIONS, 2)  # names the A100 in its own text
    hopper = facets_for("are reductions bitwise identical on a Hopper GPU", corpus)
    assert hopper[3] == PassageFacets(ABOUT, ABOUT, 0)
    assert hopper[4] == PassageFacets(ABOUT, MENTIONS, 1)  # the device by its tags: nothing to own


def test_a_page_tagged_with_every_op_is_about_the_op_only_where_its_heading_names_it():
    corpus = corpus_of(CHUNKS, **CORPUS_TAGS)
    got = facets_for("reduction order on the H100", corpus)
    assert got[5] == PassageFacets(MENTIONS, MENTIONS, 2)  # "Kahan summation": its text says reductions
    assert got[6] == PassageFacets(NONE, ABOUT, 0)  # "Reduction order": the heading names the op
    specific = corpus_of(CHUNKS, devices={"h100": ["H100"]}, ops={"acc": ["row_sum"]})
    assert facets_for("reduction order on the H100", specific)[5] == PassageFacets(MENTIONS, ABOUT, 1)


def test_the_chunk_that_says_the_facets_itself_takes_its_sections_best_place():
    chunks = [
        chunk("ck", ("Tutorial", "Run examples"), "Build the GEMM examples with CMake and run them."),
        chunk("ck", ("Tutorial", "Run examples"), "Set GPU_TARGETS to gfx90a for an MI250X."),
        chunk("ck", ("Tutorial", "Build"), "Clone the repository."),
        chunk("ck", ("Tutorial", "Run examples"), "Results are printed per kernel."),
    ]
    corpus = SimpleNamespace(chunks=chunks)
    rows = np.arange(4)
    score = np.array([2.8, 2.6, 1.9, 2.7])
    lifted = np.array([True, True, False, False])
    out = _mentions_lead_their_section(corpus, rows, score, [1, 2, 0, 2], lifted)
    # rows 0 and 1 share "Run examples" and are lifted: row 1 names both itself and takes 2.8
    assert out.tolist() == [2.6, 2.8, 1.9, 2.7]  # row 3 was not lifted: it keeps its own score
    # chunks that say as much as each other keep their own scores
    assert _mentions_lead_their_section(corpus, rows, score, [1, 1, 0, 2], lifted).tolist() == score.tolist()
