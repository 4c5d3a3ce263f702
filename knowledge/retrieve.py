"""Hybrid retrieval: filters on what a question names, vectors and BM25 fused by reciprocal rank.

1. Parse the question for devices, ops, vendors and dtypes (knowledge.aliases).
2. Filter documents: one written for other devices (or, when asked by vendor, another vendor) cannot
   answer, so it is dropped; documents written for no device (guidance, constraints) always stay.
3. Rank the surviving chunks twice, by vector similarity (Chroma, the store's embedding model) and by
   BM25 (exact tokens such as "sm_90" or "num_warps"), and fuse the two rankings by reciprocal rank,
   plus a boost for chunks whose document names the asked device or op.
4. Outcomes: filtered in DuckDB by op and arch (through `store.outcomes`), then by device, vendor and
   dtype, and ranked passed-first, by speedup, then recency.

The BM25 index and the chunk table are cached per process, keyed by the set of documents (id,
sha256, ingested_at), so a warm `ask` does not reload 100,000 chunks; any ingest changes the key.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from typing import Iterable, Optional, Sequence

import numpy as np

from knowledge.aliases import (
    DEVICE_ARCH,
    canonical_devices,
    canonical_devices_known,
    document_devices,
    document_ops,
    normalize_op,
    op_with_relatives,
    parse_query,
    vendor_of_arch,
)
from knowledge.bm25 import BM25Index
from knowledge.errors import RetrievalError
from knowledge.records import AskResult, DocumentHit, QueryFacets
from store.records import Chunk, Document, OutcomeRecord

RRF_K = 60.0
DEVICE_BOOST = 1.0 / (RRF_K + 1.0)  # as much as a first place in one of the two rankings
OP_BOOST = 0.5 / (RRF_K + 1.0)
CANDIDATES_PER_RANKING = 50
SMALL_FILTER_DOCS = 32  # up to this many documents, let Chroma filter; beyond, over-fetch and filter here
OVERFETCH = 200


class Corpus:
    """Every chunk of the store with its document, and the BM25 index over their texts."""

    def __init__(self, documents: Sequence[Document], chunks: Sequence[Chunk]) -> None:
        self.documents = {d.document_id: d for d in documents}
        self.chunks = [c for c in chunks if c.document_id in self.documents]
        self.row_of = {c.chunk_id: i for i, c in enumerate(self.chunks)}
        doc_ids = list(self.documents)
        self.doc_ordinal = {d: i for i, d in enumerate(doc_ids)}
        self.chunk_doc = np.fromiter((self.doc_ordinal[c.document_id] for c in self.chunks), dtype=np.int64,
                                     count=len(self.chunks))
        self.bm25 = BM25Index([c.text for c in self.chunks])
        self.doc_devices = {d.document_id: document_devices(d.devices) for d in documents}
        self.doc_ops = {d.document_id: document_ops(d.op_families) for d in documents}
        self.extra_device_names = sorted(
            {name for d in documents for name in d.devices if not canonical_devices_known(name)}
        )

    def allowed_rows(self, doc_ids: Iterable[str]) -> np.ndarray:
        mask = np.zeros(len(self.doc_ordinal), dtype=bool)
        for d in doc_ids:
            mask[self.doc_ordinal[d]] = True
        return mask[self.chunk_doc]


_CACHE: dict[str, Corpus] = {}
_CACHE_LOCK = threading.Lock()


def _signature(documents: Sequence[Document]) -> str:
    h = hashlib.sha256()
    for d in sorted(documents, key=lambda d: d.document_id):
        h.update(f"{d.document_id}|{d.sha256}|{d.ingested_at}\n".encode())
    return h.hexdigest()


def corpus_for(store, documents: Optional[Sequence[Document]] = None) -> Corpus:
    documents = store.documents() if documents is None else documents
    key = _signature(documents)
    with _CACHE_LOCK:
        corpus = _CACHE.get(key)
        if corpus is None:
            corpus = Corpus(documents, store.chunks())
            _CACHE.clear()  # one store at a time per process is the common case; keep memory flat
            _CACHE[key] = corpus
    return corpus


def resolve_facets(question: str, corpus: Corpus, device: Optional[str] = None, op: Optional[str] = None) -> QueryFacets:
    """The question's facets, with an explicit --device/--op taking the place of parsed ones."""
    facets = parse_query(question, extra_devices=corpus.extra_device_names)
    update: dict = {}
    if device:
        devices = canonical_devices(device, corpus.extra_device_names, device_name=True) or (device.strip(),)
        update["devices"] = devices
        update["archs"] = tuple(dict.fromkeys(DEVICE_ARCH[d] for d in devices if d in DEVICE_ARCH))
    if op:
        update["ops"] = (normalize_op(op),)
    return facets.model_copy(update=update) if update else facets


def _doc_filter(corpus: Corpus, facets: QueryFacets, kinds: Optional[set] = None,
                only_docs: Optional[set[str]] = None) -> tuple[set[str], set[str], set[str]]:
    """(allowed document ids, those matching the device, those matching the op)."""
    asked_devices = {d.upper() for d in facets.devices}
    asked_ops = {r for o in facets.ops for r in op_with_relatives(o)}
    allowed, dev_match, op_match = set(), set(), set()
    for doc_id, doc in corpus.documents.items():
        if only_docs is not None and doc_id not in only_docs:
            continue
        if kinds is not None and doc.kind not in kinds:
            continue
        devices = corpus.doc_devices[doc_id]
        if asked_devices and devices:
            if not devices & asked_devices:
                continue
            dev_match.add(doc_id)
        elif facets.vendors and not asked_devices and doc.vendor not in (None, "generic"):
            if doc.vendor not in facets.vendors:
                continue
            dev_match.add(doc_id)
        if asked_ops and corpus.doc_ops[doc_id] & asked_ops:
            op_match.add(doc_id)
        allowed.add(doc_id)
    return allowed, dev_match, op_match


def _where_documents(doc_ids: set[str]) -> dict:
    ids = sorted(doc_ids)
    return {"document_id": ids[0]} if len(ids) == 1 else {"document_id": {"$in": ids}}


def _vector_rows(store, corpus: Corpus, query: str, allowed: set[str], preferred: set[str], n: int,
                 k: int) -> list[int]:
    """Rows of the nearest chunks among allowed documents, nearest first.

    Chroma answers an unfiltered query over 100,000 vectors in a few ms, but a metadata filter naming
    many documents costs hundreds of ms. So: a filtered query only when the allowed documents are
    few; otherwise over-fetch unfiltered and filter here, and if the documents the question is really
    about (`preferred`: its device) are missing from that, ask for theirs alone. Both answers carry
    cosine distances, so they merge into one ranking.
    """
    if not corpus.chunks:
        return []
    if len(allowed) <= SMALL_FILTER_DOCS:
        hits = store.vector_search("chunks", query, n, where=_where_documents(allowed))
    else:
        hits = store.vector_search("chunks", query, max(n, OVERFETCH), where=None)
        found = {corpus.chunks[r].document_id for r in (corpus.row_of.get(i) for i, _ in hits) if r is not None}
        wanted = preferred & allowed
        if wanted and len(wanted & found) < min(len(wanted), k):
            hits = hits + store.vector_search("chunks", query, n, where=_where_documents(wanted))
    rows: list[int] = []
    seen: set[int] = set()
    for chunk_id, _distance in sorted(hits, key=lambda h: h[1]):
        row = corpus.row_of.get(chunk_id)
        if row is not None and row not in seen and corpus.chunks[row].document_id in allowed:
            seen.add(row)
            rows.append(row)
    return rows  # not cut to n: the device's own chunks may rank after every plain neighbour


def rank_chunks(store, corpus: Corpus, query: str, facets: QueryFacets, *, k: int,
                kinds: Optional[set] = None, only_docs: Optional[set[str]] = None,
                max_per_document: int = 2) -> list[DocumentHit]:
    allowed, dev_match, op_match = _doc_filter(corpus, facets, kinds, only_docs)
    if not allowed:
        return []
    n = max(CANDIDATES_PER_RANKING, 4 * k)
    vec_rows = _vector_rows(store, corpus, query, allowed, dev_match, n, k)
    mask = corpus.allowed_rows(allowed) if len(allowed) < len(corpus.documents) else None
    bm_rows = [row for row, _ in corpus.bm25.top(query, n, mask)]
    vec_rank = {row: i + 1 for i, row in enumerate(vec_rows)}
    bm_rank = {row: i + 1 for i, row in enumerate(bm_rows)}
    scored = []
    for row in set(vec_rank) | set(bm_rank):
        doc_id = corpus.chunks[row].document_id
        score = sum(1.0 / (RRF_K + r[row]) for r in (vec_rank, bm_rank) if row in r)
        score += DEVICE_BOOST * (doc_id in dev_match) + OP_BOOST * (doc_id in op_match)
        scored.append((score, row))
    scored.sort(key=lambda t: (-t[0], t[1]))
    hits: list[DocumentHit] = []
    per_doc: dict[str, int] = {}
    for score, row in scored:
        chunk = corpus.chunks[row]
        if per_doc.get(chunk.document_id, 0) >= max_per_document:
            continue
        per_doc[chunk.document_id] = per_doc.get(chunk.document_id, 0) + 1
        doc = corpus.documents[chunk.document_id]
        hits.append(DocumentHit(
            chunk_id=chunk.chunk_id, document_id=doc.document_id, title=doc.title,
            heading_path=chunk.heading_path, kind=chunk.kind, text=chunk.text, source=doc.source,
            source_url=doc.source_url, doc_version=doc.doc_version, vendor=doc.vendor, devices=doc.devices,
            score=score, vector_rank=vec_rank.get(row), bm25_rank=bm_rank.get(row),
            matched_device=doc.document_id in dev_match, matched_op=doc.document_id in op_match,
        ))
        if len(hits) == k:
            break
    return hits


def _outcome_devices_match(o: OutcomeRecord, asked: set[str]) -> bool:
    named = {d.upper() for d in canonical_devices(o.device_name, device_name=True)}
    return bool(named & asked) if named else True


def rank_outcomes(outcomes: Iterable[OutcomeRecord]) -> list[OutcomeRecord]:
    """Passed first, then the largest measured speedup, then the newest (unmeasured ones last)."""
    unique = {o.outcome_id: o for o in outcomes}
    return sorted(unique.values(), key=lambda o: (o.status == "passed", o.speedup is not None,
                                                  o.speedup or 0.0, o.created_at), reverse=True)


def search_outcomes(store, facets: QueryFacets, *, k: int, fetch: int = 200) -> list[OutcomeRecord]:
    asked_devices = {d.upper() for d in facets.devices}
    found: list[OutcomeRecord] = []
    for op in facets.ops or (None,):
        for arch in facets.archs or (None,):
            found.extend(store.outcomes(op_family=op, arch=arch, limit=fetch))
    if asked_devices:
        found = [o for o in found if _outcome_devices_match(o, asked_devices)]
        if not facets.archs:  # devices the alias table does not know: match by name only
            found = [o for o in found if any(d in o.device_name.upper() for d in asked_devices)]
    elif facets.vendors:
        found = [o for o in found if vendor_of_arch(o.arch) in facets.vendors]
    if facets.dtypes:
        found = [o for o in found if o.dtype in facets.dtypes]
    return rank_outcomes(found)[:k]


def one_connection(store):
    """Hold one DuckDB connection for the few reads of one answer (each open costs ~20-30 ms)."""
    session = getattr(store, "session", None)
    return session() if session is not None else contextlib.nullcontext()


def documents_or_builtin(store) -> list[Document]:
    """The store's documents; a store with none gets the shipped hwdocs first (a new $KSCOUT_HOME)."""
    documents = store.documents()
    if not documents:
        from knowledge.ingest import ingest_builtin

        ingest_builtin(store)
        documents = store.documents()
    return documents


def ask(store, question: str, *, device: Optional[str] = None, op: Optional[str] = None, k: int = 5) -> AskResult:
    """The outcomes and document chunks that answer `question` (loads the shipped hwdocs if empty)."""
    if not question or not question.strip():
        raise RetrievalError("the question is empty")
    if k < 1:
        raise RetrievalError(f"--k must be at least 1, got {k}")
    corpus = corpus_for(store, documents_or_builtin(store))
    facets = resolve_facets(question, corpus, device, op)
    with one_connection(store):
        documents = rank_chunks(store, corpus, question, facets, k=k)
        outcomes = search_outcomes(store, facets, k=k)
    return AskResult(facets=facets, outcomes=tuple(outcomes), documents=tuple(documents))
