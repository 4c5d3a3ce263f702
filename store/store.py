"""`Store`: the one object the rest of kernelscout uses to remember and recall.

It composes the row families (runs.py, learned.py, documents.py) over one `Database` and owns the
plumbing they share: opening and migrating the file, embedding through the cache, writing vectors in
the same critical section as their rows, prefix lookups, vector search and `reindex()`.
See store/db.py for how two processes share one store and store/vectors.py for Chroma.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

import duckdb

from store import rows as R
from store.db import DEFAULT_LOCK_TIMEOUT_S, Database, fetch_dicts
from store.documents import DocumentsMixin, chunk_embedding_text, chunk_metadata
from store.embeddings import Embedded, Embedder, EmbeddingCache
from store.errors import StoreError, VectorIndexError, one_line
from store.failures import embedding_text
from store.home import CHROMA_DIRNAME, DB_FILENAME, LOCK_FILENAME, TOKEN_FILENAME, default_home
from store.learned import LearnedMixin, failure_metadata, outcome_metadata
from store.migrations import migrate
from store.owners import OwnersMixin
from store.runs import RunsMixin


class Store(RunsMixin, LearnedMixin, DocumentsMixin, OwnersMixin):
    def __init__(self, home: Path, db: Database, store_uid: str, chroma_url: Optional[str], embedder: Embedder):
        self.home = home
        self.db = db
        self.store_uid = store_uid
        self.chroma_url = chroma_url
        self.embedder = embedder
        self._cache = EmbeddingCache(db, embedder)
        self._vectors: Any = None
        self._closed = False
        self.vector_repair_error: Optional[str] = None  # set when open could not repay owed vectors
        self.damaged_chroma_moved_to: Optional[Path] = None  # set when reindex had to move Chroma aside
        # KSCOUT_VECTORS=off: a machine without Chroma or the embedding model (a GPU worker of a fleet)
        # keeps every DuckDB row and skips the vectors; retrieval falls back to SQL filters and BM25,
        # and `kscout reindex` on a full install adds the vectors later.
        self.vectors_enabled = os.environ.get("KSCOUT_VECTORS", "on").strip().lower() not in ("off", "0", "no")
        if not self.vectors_enabled:
            self._cache = _NoVectors(db, embedder)

    @classmethod
    def open(
        cls,
        home: Path | str | None = None,
        *,
        chroma_url: Optional[str] = None,
        embedder: Optional[Embedder] = None,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    ) -> "Store":
        home = Path(home).expanduser() if home is not None else default_home()
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the store folder {home}: {exc.strerror}") from exc
        db = Database(home / DB_FILENAME, home / LOCK_FILENAME, lock_timeout_s=lock_timeout_s)
        with db.locked() as con:
            try:
                migrate(con)
                uid_row = con.execute("SELECT value FROM _meta WHERE key = 'store_uid'").fetchone()
                owed_row = con.execute("SELECT count(*) FROM vector_pending").fetchone()
            except duckdb.Error as exc:
                raise StoreError(f"store {db.path} is unreadable or corrupt: {one_line(exc)}") from exc
            if uid_row is None or owed_row is None:
                raise StoreError(
                    f"store {db.path} has lost its identity row (_meta.store_uid): restore it from a backup"
                )
            uid, owed = uid_row[0], owed_row[0]
        url = chroma_url or os.environ.get("KSCOUT_CHROMA_URL") or None
        store = cls(home, db, uid, url, embedder or Embedder())
        if owed and store.vectors_enabled:
            # A process died between a DuckDB commit and its Chroma write: pay the vectors back now.
            # If Chroma cannot take them (a server down), the rows stay owed and the CLI says so.
            try:
                store.repair_vectors()
            except VectorIndexError as exc:
                store.vector_repair_error = str(exc)
        return store

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._vectors is not None:
            with self.db.exclusive():  # a local Chroma client may flush its index when it closes
                self._vectors.close()
            self._vectors = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def session(self):
        """Hold the store lock and one connection across several calls (a batch of writes).

        Other processes wait meanwhile: keep what runs inside short.
        """
        return self.db.locked()

    # -- plumbing shared by the row families ---------------------------------------------------------
    def _resolve(self, table: str, column: str, prefix: str, what: str) -> str:
        prefix = (prefix or "").strip()
        if not prefix:
            raise StoreError(f"empty {what} id")
        with self.db.locked() as con:
            found = [
                r[0]
                for r in con.execute(
                    f"SELECT DISTINCT {column} FROM {table} WHERE starts_with({column}, ?) ORDER BY 1 LIMIT 6",
                    [prefix],
                ).fetchall()
            ]
        if prefix in found:
            return prefix
        if not found:
            raise StoreError(f"no {what} matches {prefix!r}")
        if len(found) > 1:
            shown = ", ".join(f[:16] for f in found[:5]) + (", ..." if len(found) > 5 else "")
            raise StoreError(f"{what} id {prefix!r} is ambiguous: it matches {shown}")
        return found[0]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit vectors for `texts`, through the cache (no model call for text embedded before)."""
        return self._cache.embed(list(texts))

    def embed_query(self, text: str) -> Optional[list[float]]:
        """A search query's unit vector (memoized, never cached in the store); None when vectors are off."""
        if not self.vectors_enabled:
            return None
        return self._cache.embed_query(text)

    def cached_vectors(self, shas: Sequence[str]) -> dict[str, Any]:
        """Vectors the embeddings cache holds for these text hashes, as float32 arrays (no model call)."""
        import numpy as np

        wanted = sorted(set(shas))
        if not wanted:
            return {}
        with self.db.locked() as con:
            found = con.execute(
                "SELECT text_sha256, vector FROM embeddings WHERE model = ? AND text_sha256 IN "
                "(SELECT unnest(?::VARCHAR[]))",
                [self.embedder.model_name, wanted],
            ).fetchnumpy()
        return {sha: np.asarray(vec, dtype=np.float32) for sha, vec in zip(found["text_sha256"], found["vector"])}

    def origins_of(self, table: str, ids: Sequence[str]) -> dict[str, dict]:
        """Where imported rows came from (see store/sharing.py), keyed by row id; our own rows are absent."""
        if not ids:
            return {}
        with self.db.locked() as con:
            rows = fetch_dicts(
                con,
                "SELECT * FROM origins WHERE table_name = ? AND row_id IN (SELECT unnest(?::VARCHAR[]))",
                [table, list(ids)],
            )
        return {
            r.pop("row_id"): {k: v for k, v in r.items() if k != "table_name" and k != "kernelscout_version"}
            for r in rows
        }

    def _index(self):
        if self._closed:
            raise StoreError(f"store {self.home} is closed")
        if self._vectors is None:
            from store.vectors import VectorIndex  # imports chromadb (~1 s): only when vectors are used

            self._vectors = VectorIndex(
                prefix=self.store_uid,
                chroma_path=self.home / CHROMA_DIRNAME,
                token_path=self.home / TOKEN_FILENAME,
                url=self.chroma_url,
            )
        return self._vectors

    def _vector_write(self, collection: str, ids, vectors, metadatas) -> None:
        if not self.vectors_enabled:
            return
        try:
            self._index().upsert(collection, ids, vectors, metadatas)
        except VectorIndexError as exc:
            raise VectorIndexError(f"{exc} (rows are saved; `kscout reindex` restores the vectors)") from exc

    def _vector_delete(self, collection: str, ids) -> None:
        if not self.vectors_enabled:
            return
        try:
            self._index().delete(collection, ids)
        except VectorIndexError as exc:
            raise VectorIndexError(f"{exc} (rows are saved; `kscout reindex` restores the vectors)") from exc

    # -- vectors -------------------------------------------------------------------------------------
    def vector_search(
        self, collection: str, query: str, k: int, where: Optional[dict] = None
    ) -> list[tuple[str, float]]:
        """DuckDB ids with cosine distances (0 = same direction), nearest first."""
        if k <= 0:
            raise StoreError(f"k must be positive, got {k}")
        if not self.vectors_enabled:
            return []
        index = self._index()
        vector = self._cache.embed_query(query)
        with self.db.exclusive():  # Chroma's files, not DuckDB's: no connection needed
            return index.query(collection, vector, k, where)

    def vector_count(self, collection: str) -> int:
        if not self.vectors_enabled:
            return 0
        index = self._index()
        with self.db.exclusive():
            return index.count(collection)

    def reindex(self) -> dict[str, int]:
        """Rebuild every Chroma collection from DuckDB; embeddings come from the cache.

        Texts without a cached vector (a cache emptied by hand, a new model) are embedded first,
        outside the lock; the rebuild itself runs in one critical section so no write interleaves.
        """
        if not self.vectors_enabled:
            raise StoreError("vectors are off here (KSCOUT_VECTORS=off): reindex on a machine that has them")
        texts = [t for items in self._vector_sources().values() for _, t, _ in items]
        self.embed(texts)
        index = self._index()
        try:
            return self._rebuild_all(index)
        except VectorIndexError:
            if self.chroma_url is not None:
                raise
            # A damaged local folder (a malformed chroma.sqlite3) fails every call: move it aside and
            # build a new one from DuckDB, which holds everything the folder held.
            with self.db.exclusive():
                self.damaged_chroma_moved_to = index.discard_local_folder()
            return self._rebuild_all(index)

    def _rebuild_all(self, index) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self.db.locked():
            for name, items in self._vector_sources().items():
                vectors = self.embed([t for _, t, _ in items])
                counts[name] = index.rebuild(name, [i for i, _, _ in items], vectors, [m for _, _, m in items])
            with self.db.transaction() as con:
                con.execute("DELETE FROM vector_pending")  # every row's vectors were just written
        return counts

    def _vector_sources(self) -> dict[str, list[tuple[str, str, dict]]]:
        """(id, text to embed, metadata) for every row that has a vector, per collection."""
        with self.db.locked() as con:
            docs = {r["document_id"]: R.document_from_row(r) for r in fetch_dicts(con, "SELECT * FROM documents")}
            chunks = [
                R.chunk_from_row(r)
                for r in fetch_dicts(
                    con,
                    "SELECT c.* FROM chunks c JOIN documents d USING (document_id) ORDER BY d.seq, c.ordinal",
                )
            ]
            outcomes = [R.outcome_from_row(r) for r in fetch_dicts(con, "SELECT * FROM outcomes ORDER BY seq")]
            failures = [
                R.failure_from_row(r) for r in fetch_dicts(con, "SELECT * FROM failure_patterns ORDER BY first_seen")
            ]
        return {
            "chunks": [(c.chunk_id, chunk_embedding_text(c), chunk_metadata(docs[c.document_id], c)) for c in chunks],
            "outcomes": [(o.outcome_id, o.summary, outcome_metadata(o)) for o in outcomes],
            "failures": [
                (p.signature, embedding_text(p.error_class, p.stage, p.message_shape), failure_metadata(p))
                for p in failures
            ],
        }


class _NoVectors(EmbeddingCache):
    """The embeddings cache when vectors are off: nothing is embedded, nothing is cached."""

    def prepare(self, texts: Sequence[str], on_progress=None) -> Embedded:
        return Embedded([], [])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise StoreError("vectors are off here (KSCOUT_VECTORS=off): no embeddings")
