"""Library folders of a corpus (knowledge.collections) and what naming one does to an answer, the heading
cover, and the leader rule that must not evict a better passage (issue 27, item 2)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from knowledge.bm25 import BM25Index
from knowledge.collections import derive, folders, named
from knowledge.ingest import IngestOptions, ingest_paths
from knowledge.retrieve import _select, ask
from store import Store

BASE = "https://github.com/acme/gpulibs/blob/0123456789abcdef0123/docs/"


def doc(doc_id: str, path: str, builtin: bool = False):
    return SimpleNamespace(document_id=doc_id, source=f"/src/{path}", source_url=BASE + path, builtin=builtin)


def chunk(doc_id: str, text: str):
    return SimpleNamespace(document_id=doc_id, text=text)


def corpus_parts():
    documents = {
        "cub1": doc("cub1", "cub/tuning.rst"),
        "cub2": doc("cub2", "cub/determinism.rst"),
        "thr1": doc("thr1", "thrust/iterators.rst"),
        "thr2": doc("thr2", "thrust/vectors.rst"),
        "ref1": doc("ref1", "cub/reference/a.rst"),
        "ref2": doc("ref2", "thrust/reference/b.rst"),
        "ck1": doc("ck1", "composable_kernel/intro.rst"),
        "ck2": doc("ck2", "composable_kernel/gemm.rst"),
        "hw": doc("hw", "nvidia/h100.md"),
        "hw2": doc("hw2", "nvidia/h200.md"),
        "shipped": doc("shipped", "x/y.md", builtin=True),
    }
    chunks = [
        chunk("cub1", "Tune a CUB reduction with a policy selector. See the reference."),
        chunk("cub2", "CUB determinism levels: run_to_run and gpu_to_gpu. Reference tables follow."),
        chunk("thr1", "Thrust fancy iterators: counting and transform iterators."),
        chunk("thr2", "thrust::device_vector holds memory on the device."),
        chunk("ref1", "API reference of cub::DeviceReduce."),
        chunk("ref2", "API reference of thrust::reduce."),
        chunk("ck1", "Composable Kernel is a library of performance-portable kernels."),
        chunk("ck2", "GEMM in composable kernel with tile programming."),
        chunk("hw", "The reference numbers of the H100: see the CUDA guide for reference."),
        chunk("hw2", "H200 numbers."),
        chunk("shipped", "Row-wise kernels on the H100: one program per row."),
    ]
    bm25 = BM25Index([c.text for c in chunks])
    return documents, chunks, bm25


def vendor(name: str) -> bool:
    return name in ("nvidia", "amd", "rocm")


def test_folders_are_the_locations_directories_without_the_file_or_a_commit():
    assert folders(BASE + "cub/developer/device_scope.rst") == ["acme", "gpulibs", "blob", "docs", "cub", "developer"]
    assert folders("/home/me/docs/thrust/iterators.md") == ["home", "me", "docs", "thrust"]


def test_a_library_folder_is_a_collection_and_generic_boilerplate_or_vendor_folders_are_not():
    documents, chunks, bm25 = corpus_parts()
    found = derive(documents, chunks, bm25, vendor)
    assert set(found) == {"cub", "thrust", "composable_kernel"}
    assert found["cub"] == {"cub1", "cub2", "ref1"} and found["composable_kernel"] == {"ck1", "ck2"}
    # "reference": said everywhere (the hardware page says it twice), so not concentrated;
    # "docs", "acme", "blob": every document sits under them; "nvidia": a vendor; "x": the shipped page's


def test_a_folder_whose_name_no_text_says_is_a_sites_path_not_a_library():
    documents, chunks, bm25 = corpus_parts()
    documents["late1"] = doc("late1", "latest/a.md")
    documents["late2"] = doc("late2", "latest/b.md")
    chunks += [chunk("late1", "Alpha."), chunk("late2", "Beta.")]
    assert "latest" not in derive(documents, chunks, BM25Index([c.text for c in chunks]), vendor)


def test_a_question_names_a_collection_by_its_word_or_its_words_in_a_row():
    collections = {"cub": {"a"}, "thrust": {"b"}, "composable_kernel": {"c"}, "device_scope": {"d"}}
    assert named("how should I tune a reduction for Hopper in CUB", collections) == ("cub",)
    assert named("row-wise softmax in composable kernel on MI250", collections) == ("composable_kernel",)
    assert named("what are fancy iterators in Thrust and CUB", collections) == ("cub", "thrust")
    assert named("a kernel that is composable", collections) == ()
    assert named("the scope of a device", collections) == ()  # the words, but not in a row


def test_a_leader_never_evicts_a_chunk_of_its_document_that_scores_above_it():
    corpus = SimpleNamespace(chunks=[SimpleNamespace(document_id=d) for d in ("A", "A", "A", "B", "C")])
    # CUB's environment page: "Memory Resources" (row 0) answers, row 2 leads the lexical ranking
    ranked = [(2.06, 0), (2.03, 1), (1.95, 2), (1.5, 3), (1.4, 4)]
    assert [row for _, row in _select(corpus, ranked, 3, 2, {2})] == [0, 1, 3]


@pytest.fixture
def library_store(hwdocs_store_template, tmp_path):
    """The shipped hwdocs plus two small libraries as a user would ingest them (one folder each)."""
    home = tmp_path / "home"
    shutil.copytree(hwdocs_store_template, home)
    root = tmp_path / "vendor" / "docs"
    pages = {
        "rowlib/tuning.md": (
            "# Tuning rowlib reductions\n\n## Policy selectors\n\nA rowlib reduction is tuned with a policy "
            "selector per architecture: the newest picks 256 threads and four items per thread for each row "
            "reduction.\n"
        ),
        "rowlib/overview.md": "# rowlib overview\n\nrowlib is a header-only library of row reductions and scans.\n",
        "rowlib/determinism.md": (
            "# Determinism\n\nrowlib results can repeat bit for bit.\n\n## Determinism support matrix\n\n"
            "Every rowlib scan repeats run to run.\n"
        ),
        "othlib/intro.md": "# othlib\n\nothlib sorts keys on the device with a radix sort.\n",
        "othlib/merge.md": "# othlib merge\n\nothlib merges sorted ranges.\n",
    }
    for rel, text in pages.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    with Store.open(home) as store:
        ingest_paths(store, [root], IngestOptions(vendor="nvidia"))
        yield store


def first_source(result) -> str:
    return Path(result.documents[0].source).as_posix()


def test_naming_the_library_puts_its_page_before_a_shipped_page_tagged_with_the_device_and_op(library_store):
    asked = ask(library_store, "how should I tune a row reduction for Hopper in rowlib")
    sources = [Path(h.source).as_posix() for h in asked.documents]
    assert {s.rsplit("/", 2)[-2] for s in sources[:2]} == {"rowlib"}, sources  # the library's pages first
    assert any(s.endswith("rowlib/tuning.md") for s in sources[:2]), sources
    # The same question without the library's name: the shipped page tagged H100 (Hopper) and about
    # row-wise kernels comes first, since the library's page never names the device.
    plain = ask(library_store, "how should I tune a row reduction for Hopper")
    assert "rowlib" not in first_source(plain), [h.source for h in plain.documents]


def test_heading_cover_counts_the_idf_share_of_the_heading_the_question_says(library_store):
    from knowledge.index import corpus_for
    from knowledge.retrieve import _heading_cover

    corpus = corpus_for(library_store, library_store.documents())
    rows = np.array(
        [i for i, c in enumerate(corpus.chunks) if c.heading_path[-1:] == ("Policy selectors",)], dtype=np.int64
    )
    assert rows.size == 1
    assert _heading_cover(corpus, "which policy selectors exist", rows).tolist() == [1.0]
    assert _heading_cover(corpus, "what is a selector", rows)[0] == pytest.approx(
        corpus.bm25.term_idf("selector") / (corpus.bm25.term_idf("policy") + corpus.bm25.term_idf("selector"))
    )
    assert _heading_cover(corpus, "how fast is the H100", rows).tolist() == [0.0]


def test_heading_cover_gives_nothing_for_the_page_title_only_for_what_a_section_adds(library_store):
    """A question that names the page's topic says which page, not which section: the page's intro
    (its title's section) gets no heading cover, and a section is covered only by the words it adds."""
    from knowledge.index import corpus_for
    from knowledge.retrieve import _heading_cover

    corpus = corpus_for(library_store, library_store.documents())
    intro, matrix = (
        np.array([i for i, c in enumerate(corpus.chunks) if c.heading_path == path], dtype=np.int64)
        for path in (("Determinism",), ("Determinism", "Determinism support matrix"))
    )
    assert intro.size == 1 and matrix.size == 1
    question = "which rowlib scans support determinism"
    assert _heading_cover(corpus, question, intro).tolist() == [0.0]
    assert _heading_cover(corpus, question, matrix)[0] == pytest.approx(
        corpus.bm25.term_idf("support") / (corpus.bm25.term_idf("support") + corpus.bm25.term_idf("matrix"))
    )
    assert _heading_cover(corpus, "is rowlib deterministic", matrix).tolist() == [0.0]  # the title's word only
