"""The search index `ask` reads: every chunk's vector and its BM25 postings, saved beside the store.

Why not query Chroma from `ask`: importing chromadb and opening its folder costs about a second, more
than the whole budget of a one-line question from a fresh process. The vectors Chroma holds are the
embeddings cache's rows in DuckDB (same model, same text), so this index is built from DuckDB alone: a
(chunks x 384) float32 matrix searched exactly (a dot product: 3,000 chunks take well under a
millisecond, 100,000 a few ms), plus the BM25 arrays. It is saved under `<store>/cache/` as one .npz
(arrays, no pickle) and one JSON file (chunk ids, texts, headings), keyed by a signature of the store's
documents; any ingest, retag or forget changes the signature and the next `ask` rebuilds it. Chroma
stays what other tools and a shared server use, and the source of truth is still DuckDB.

Chunks whose text has no cached vector (KSCOUT_VECTORS=off, a cache emptied by hand) are searched by
BM25 only until a `kscout reindex` on a full install embeds them.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from knowledge.aliases import canonical_devices_known, document_devices, document_ops
from knowledge.bm25 import BM25Index
from store.records import Chunk, ChunkKind, Document

INDEX_VERSION = 2
CACHE_DIRNAME = "cache"
_NAME = "ask-index"


def signature(documents: Sequence[Document], model_name: str) -> str:
    h = hashlib.sha256(f"v{INDEX_VERSION}|{model_name}\n".encode())
    for d in sorted(documents, key=lambda d: d.document_id):
        h.update(f"{d.document_id}|{d.sha256}|{d.ingested_at}|{d.retagged_at}\n".encode())
    return h.hexdigest()


class Corpus:
    """Every chunk of the store with its document, its vector and the BM25 index over the texts."""

    def __init__(
        self,
        documents: Sequence[Document],
        chunks: Sequence[Chunk],
        vectors: np.ndarray,
        has_vector: np.ndarray,
        bm25: BM25Index,
        sig: str,
    ) -> None:
        self.signature = sig
        self.documents = {d.document_id: d for d in documents}
        self.chunks = [c for c in chunks if c.document_id in self.documents]
        self.row_of = {c.chunk_id: i for i, c in enumerate(self.chunks)}
        self.doc_ordinal = {d: i for i, d in enumerate(self.documents)}
        self.chunk_doc = np.fromiter(
            (self.doc_ordinal[c.document_id] for c in self.chunks), dtype=np.int64, count=len(self.chunks)
        )
        self.vectors = vectors
        self.has_vector = has_vector
        self.imported: dict = {}  # document id -> Provenance, for documents imported from another store
        self.bm25 = bm25
        self.doc_devices = {d.document_id: document_devices(d.devices) for d in documents}
        self.doc_ops = {d.document_id: document_ops(d.op_families) for d in documents}
        self.extra_device_names = sorted(
            {name for d in documents for name in d.devices if not canonical_devices_known(name)}
        )
        # The vendor of a device no alias knows ("MI355X", "n300"), from the documents that name it.
        self.device_vendor: dict[str, str] = {}
        for d in documents:
            if d.vendor and d.vendor != "generic":
                for name in d.devices:
                    if not canonical_devices_known(name):
                        self.device_vendor.setdefault(name.upper(), d.vendor)

    @property
    def collections(self) -> dict[str, frozenset[str]]:
        """Library folders of the corpus (knowledge.collections), derived once per corpus."""
        found = self.__dict__.get("_collections")
        if found is None:
            from knowledge.aliases import parse_query
            from knowledge.collections import derive

            found = derive(self.documents, self.chunks, self.bm25, lambda name: bool(parse_query(name).vendors))
            self.__dict__["_collections"] = found
        return found

    def allowed_rows(self, doc_ids) -> np.ndarray:
        mask = np.zeros(len(self.doc_ordinal), dtype=bool)
        for d in doc_ids:
            mask[self.doc_ordinal[d]] = True
        return mask[self.chunk_doc]


def _paths(store) -> tuple[Path, Path]:
    folder = Path(store.home) / CACHE_DIRNAME
    return folder / f"{_NAME}.npz", folder / f"{_NAME}.json"


def build(store, documents: Sequence[Document]) -> Corpus:
    """From DuckDB: chunks, their cached vectors, and a fresh BM25 index."""
    from store.documents import chunk_embedding_text
    from store.embeddings import text_sha256

    doc_ids = {d.document_id for d in documents}
    chunks = [c for c in store.chunks() if c.document_id in doc_ids]
    vectors = np.zeros((len(chunks), store.embedder.dim), dtype=np.float32)
    has_vector = np.zeros(len(chunks), dtype=bool)
    if store.vectors_enabled and chunks:
        shas = [text_sha256(chunk_embedding_text(c)) for c in chunks]
        found = store.cached_vectors(shas)
        for i, sha in enumerate(shas):
            v = found.get(sha)
            if v is not None:
                vectors[i] = v
                has_vector[i] = True
    bm25 = BM25Index([c.text for c in chunks])
    sig = signature(documents, store.embedder.model_name)
    return Corpus(documents, chunks, vectors, has_vector, bm25, sig)


def save(store, corpus: Corpus) -> None:
    """Write the index next to the store, atomically (a reader sees the old or the new, never half)."""
    npz, meta = _paths(store)
    npz.parent.mkdir(parents=True, exist_ok=True)
    tmp_npz = npz.with_name(f"{npz.name}.{os.getpid()}.tmp.npz")
    tmp_meta = meta.with_name(f"{meta.name}.{os.getpid()}.tmp")
    np.savez(tmp_npz, vectors=corpus.vectors, has_vector=corpus.has_vector, **corpus.bm25.arrays())
    tmp_meta.write_text(
        json.dumps(
            {
                "signature": corpus.signature,
                "terms": corpus.bm25.terms,
                "chunks": [
                    [
                        c.chunk_id,
                        c.document_id,
                        c.ordinal,
                        list(c.heading_path),
                        c.text,
                        c.kind.value,
                        c.text_sha256,
                        c.anchor,
                    ]
                    for c in corpus.chunks
                ],
            },
            ensure_ascii=False,
        )
    )
    os.replace(tmp_npz, npz)  # the signature lives in the JSON, written last: a torn pair never matches
    os.replace(tmp_meta, meta)


def load(store, documents: Sequence[Document], sig: str) -> Optional[Corpus]:
    """The saved index if it was built for exactly these documents, else None."""
    npz, meta = _paths(store)
    try:
        data = json.loads(meta.read_text())
        if data.get("signature") != sig:
            return None
        arrays = np.load(npz, allow_pickle=False)
        # Rows this module wrote from validated Chunks: rebuilt without validating again (which cost
        # ~80 ms for 3,000 chunks, a tenth of a fresh `kscout ask`).
        kinds = {k.value: k for k in ChunkKind}
        chunks = [
            Chunk.model_construct(
                chunk_id=r[0],
                document_id=r[1],
                ordinal=r[2],
                heading_path=tuple(r[3]),
                text=r[4],
                kind=kinds[r[5]],
                text_sha256=r[6],
                anchor=r[7],
            )
            for r in data["chunks"]
        ]
        if len(chunks) != arrays["vectors"].shape[0]:
            return None
        bm25 = BM25Index.from_arrays(len(chunks), data["terms"], arrays)
        return Corpus(documents, chunks, arrays["vectors"], arrays["has_vector"], bm25, sig)
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None  # missing, torn or from another version: rebuilt from DuckDB, which is the truth


_CACHE: dict[str, Corpus] = {}
_CACHE_LOCK = threading.Lock()


def corpus_for(store, documents: Optional[Sequence[Document]] = None) -> Corpus:
    """The index for the store's current documents: from this process's memory, the saved file, or
    built from DuckDB (and saved for the next process)."""
    documents = store.documents() if documents is None else documents
    sig = signature(documents, store.embedder.model_name)
    key = f"{Path(store.home).resolve()}|{sig}"
    with _CACHE_LOCK:
        corpus = _CACHE.get(key)
        if corpus is None:
            corpus = load(store, documents, sig)
            if corpus is None:
                corpus = build(store, documents)
                save(store, corpus)
            _CACHE.clear()  # one store at a time per process is the common case; keep memory flat
            _CACHE[key] = corpus
    return corpus


def search_vectors(
    corpus: Corpus, query_vector: Optional[Sequence[float]], allowed: Optional[np.ndarray], n: int
) -> list[tuple[int, float]]:
    """(row, cosine similarity) of the n nearest chunks among allowed rows that have a vector."""
    if query_vector is None or not len(corpus.chunks):
        return []
    q = np.asarray(query_vector, dtype=np.float32)
    sims = corpus.vectors @ q
    usable = corpus.has_vector if allowed is None else (corpus.has_vector & allowed)
    rows = np.flatnonzero(usable)
    if rows.size == 0:
        return []
    if rows.size > n:
        rows = rows[np.argpartition(-sims[rows], n - 1)[:n]]
    rows = rows[np.argsort(-sims[rows], kind="stable")]
    return [(int(r), float(sims[r])) for r in rows]
