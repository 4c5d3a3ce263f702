"""Documents and their chunks, written by knowledge's ingest; chunk vectors follow their rows.

A document's tags (`TAG_FIELDS`) change only when a writer says so; every change after the first
ingest is appended to `document_history` with the old value, the new one and its cause, in the same
transaction as the row it changes.
"""

from __future__ import annotations

import enum
import json
from typing import Any, Callable, Optional

from store import rows as R
from store.core import StoreCore
from store.db import Database, fetch_dicts, insert
from store.embeddings import text_sha256
from store.errors import StoreError
from store.records import Chunk, Document, DocumentChange, utc_now


def chunk_embedding_text(chunk: Chunk) -> str:
    """The heading path is part of what a chunk is about ("H200 > Memory > L2"), so it is embedded."""
    heading = " > ".join(h for h in chunk.heading_path if h)
    return f"{heading}\n{chunk.text}" if heading else chunk.text


def chunk_metadata(doc: Document, chunk: Chunk) -> dict:
    return {
        "document_id": doc.document_id,
        "kind": chunk.kind.value,
        "vendor": doc.vendor,
        "devices": list(doc.devices),
        "all_devices": not doc.devices,
        "op_families": list(doc.op_families),
        "doc_version": doc.doc_version,
        "builtin": doc.builtin,
        "origin": doc.origin.value,
        "ordinal": chunk.ordinal,
    }


# What a retag may change without the text changing; everything else about a document is its bytes.
PROVENANCE_FIELDS = (
    "source",
    "title",
    "vendor",
    "devices",
    "doc_version",
    "source_url",
    "kind",
    "op_families",
    "builtin",
    "origin",
    "metadata_json",
)


# The tags a document's history records: what an ingest flag, a header or `kscout retag` sets.
TAG_FIELDS = ("vendor", "devices", "doc_version", "source_url", "kind", "origin", "op_families")


def _json_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def _record_changes(con, before: Document, after: Document, cause: str) -> None:
    """Append one history row per tag that differs between the stored row and the one written."""
    now = utc_now()
    for field in TAG_FIELDS:
        old, new = _json_value(getattr(before, field)), _json_value(getattr(after, field))
        if old != new:
            con.execute(
                "INSERT INTO document_history (document_id, field, old_json, new_json, cause, changed_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [after.document_id, field, json.dumps(old), json.dumps(new), cause, now],
            )


def _insert_chunks(con, chunks: list[Chunk]) -> None:
    """All of a document's chunks in one statement (row by row, DuckDB takes ~3 ms a row)."""
    if not chunks:
        return
    rows = [R.record_row(c) for c in chunks]
    cols = list(rows[0])
    types = {"ordinal": "INTEGER[]", "heading_path": "VARCHAR[][]"}
    select = ", ".join(f"unnest(?::{types.get(c, 'VARCHAR[]')})" for c in cols)
    con.execute(f"INSERT INTO chunks ({', '.join(cols)}) SELECT {select}", [[r[c] for r in rows] for c in cols])


class DocumentsMixin(StoreCore):
    db: Database  # the mixins are parts of `Store`, which provides `_cache` and `_vector_write`

    def upsert_document(
        self,
        doc: Document,
        chunks: list[Chunk],
        *,
        force: bool = False,
        on_progress: Optional[Callable[[int, int], None]] = None,
        cause: str = "ingest",
    ) -> str:
        """Write a document and its chunks; returns what happened:

        "added"; "replaced" (new bytes, or `force`: old chunks and vectors go, unchanged chunk text is
        not re-embedded); "unchanged" (same bytes and provenance: nothing written); "retagged" (same
        bytes, new provenance: the row and the vectors' metadata change, no model call); "repaired"
        (same bytes, but the vectors of an earlier write never reached Chroma: written now).

        The DuckDB rows and a `vector_pending` row commit together; the pending row goes once Chroma
        confirms the vectors, so a crash between the two is found again (see `repair_vectors`).

        A change to a stored document's tags is appended to its history under `cause` ("ingest",
        "retag"); see `document_history`.
        """
        return self.upsert_documents([(doc, chunks)], force=force, on_progress=on_progress, cause=cause)[0]

    def upsert_documents(
        self,
        items: list[tuple[Document, list[Chunk]]],
        *,
        force: bool = False,
        on_progress: Optional[Callable[[int, int], None]] = None,
        cause: str = "ingest",
    ) -> list[str]:
        """`upsert_document` for several documents at once (an ingest job's batch): one trip through
        the lock to check them, one model call for all their new text, one transaction and one Chroma
        write for all of them. Opening DuckDB costs 20-100 ms and a Chroma write tens more, which per
        file was as much as embedding a small page."""
        for doc, chunks in items:
            ids = [c.chunk_id for c in chunks]
            if len(set(ids)) != len(ids):
                raise StoreError(f"document {doc.source}: chunk ids repeat")
            strangers = [c.chunk_id for c in chunks if c.document_id != doc.document_id]
            if strangers:
                raise StoreError(
                    f"document {doc.source}: chunk {strangers[0]} belongs to document "
                    f"{next(c.document_id for c in chunks if c.chunk_id == strangers[0])}, "
                    f"not {doc.document_id}"
                )
        if len({doc.document_id for doc, _ in items}) != len(items):
            raise StoreError("a batch names one document twice")
        statuses: list[Optional[str]] = [None] * len(items)
        to_write: list[int] = []
        texts: list[str] = []
        with self.db.locked():  # one trip through the lock for every check and the cache lookup
            for i, (doc, chunks) in enumerate(items):
                before = self._document_or_none(doc.document_id)
                if before is not None and before.sha256 == doc.sha256 and not force:
                    changed = [f for f in PROVENANCE_FIELDS if getattr(before, f) != getattr(doc, f)]
                    if not changed and not self._vectors_owed(doc.document_id):
                        statuses[i] = "unchanged"
                    else:
                        statuses[i] = self._retag(before, doc, changed, cause)
                    continue
                to_write.append(i)
                texts += [chunk_embedding_text(c) for c in chunks]
            if not to_write:
                return statuses  # type: ignore[return-value]
            self._cache.cached([text_sha256(t) for t in texts])
        embedded = self._cache.prepare(texts, on_progress)  # the model runs unlocked: it is the slow part
        vectors = iter(embedded.vectors)
        written: list[tuple[Document, list[Chunk], list]] = []
        stale: list[str] = []
        with self.db.locked():
            with self.db.transaction() as con:
                for i in to_write:
                    doc, chunks = items[i]
                    mine = [next(vectors) for _ in chunks] if embedded.vectors else []
                    found = fetch_dicts(con, "SELECT * FROM documents WHERE document_id = ?", [doc.document_id])
                    row_before = R.document_from_row(found[0]) if found else None
                    old_ids = [
                        r[0]
                        for r in con.execute(
                            "SELECT chunk_id FROM chunks WHERE document_id = ?", [doc.document_id]
                        ).fetchall()
                    ]
                    con.execute("DELETE FROM chunks WHERE document_id = ?", [doc.document_id])
                    row = R.record_row(doc)
                    if row_before is None:
                        insert(con, "documents", row)
                    else:
                        row.pop("document_id")
                        sets = ", ".join(f"{k} = ?" for k in row)
                        con.execute(
                            f"UPDATE documents SET {sets} WHERE document_id = ?", [*row.values(), doc.document_id]
                        )
                    _insert_chunks(con, chunks)
                    if row_before is not None:
                        _record_changes(con, row_before, doc, cause)
                    self._owe_vectors(con, doc.document_id)
                    stale += sorted(set(old_ids) - {c.chunk_id for c in chunks})
                    statuses[i] = "added" if row_before is None else "replaced"
                    written.append((doc, chunks, mine))
                self._cache.save(con, embedded)
            self._vector_delete("chunks", stale)
            self._write_vectors_of(written)
        return statuses  # type: ignore[return-value]

    def _write_vectors_of(self, written: list[tuple[Document, list[Chunk], list]]) -> None:
        """One Chroma write for several documents, then their pending rows go in one statement."""
        ids, vectors, metas = [], [], []
        for doc, chunks, vecs in written:
            ids += [c.chunk_id for c in chunks]
            vectors += list(vecs)
            metas += [chunk_metadata(doc, c) for c in chunks]
        self._vector_write("chunks", ids, vectors, metas)
        if self.vectors_enabled:
            with self.db.transaction() as con:
                con.execute(
                    "DELETE FROM vector_pending WHERE collection = 'chunks' AND row_id IN "
                    "(SELECT unnest(?::VARCHAR[]))",
                    [[doc.document_id for doc, _, _ in written]],
                )

    def _retag(self, before: Document, doc: Document, changed: list[str], cause: str = "ingest") -> str:
        """Same bytes: keep chunks and first-ingest time, take the new provenance (each changed tag
        recorded in the history), rewrite the vectors (from the embeddings cache) so their metadata
        filters match. The caller holds the lock."""
        chunks = self.chunks(doc.document_id)
        if changed:
            updated = before.model_copy(update={f: getattr(doc, f) for f in changed} | {"retagged_at": utc_now()})
            if "kind" in changed:
                chunks = [c.model_copy(update={"kind": doc.kind}) for c in chunks]
            with self.db.transaction() as con:
                row = R.record_row(updated)
                row.pop("document_id")
                sets = ", ".join(f"{k} = ?" for k in row)
                con.execute(f"UPDATE documents SET {sets} WHERE document_id = ?", [*row.values(), doc.document_id])
                con.execute("UPDATE chunks SET kind = ? WHERE document_id = ?", [doc.kind.value, doc.document_id])
                _record_changes(con, before, updated, cause)
                self._owe_vectors(con, doc.document_id)
            doc = updated
        embedded = self._cache.prepare([chunk_embedding_text(c) for c in chunks])
        if embedded.new_rows:  # a cache emptied by hand: keep what the model just computed
            with self.db.transaction() as con:
                self._cache.save(con, embedded)
        self._write_document_vectors(doc, chunks, embedded.vectors)
        return "retagged" if changed else "repaired"

    def _write_document_vectors(self, doc: Document, chunks: list[Chunk], vectors) -> None:
        self._write_vectors_of([(doc, chunks, vectors)])

    @staticmethod
    def _owe_vectors(con, document_id: str) -> None:
        con.execute("INSERT OR REPLACE INTO vector_pending VALUES ('chunks', ?, ?)", [document_id, utc_now()])

    def _vectors_owed(self, document_id: str) -> bool:
        if not self.vectors_enabled:
            return False  # owed to a machine that has vectors; nothing this one can do
        found = self.db.query("SELECT 1 FROM vector_pending WHERE collection = 'chunks' AND row_id = ?", [document_id])
        return bool(found)

    def pending_vector_documents(self) -> list[str]:
        """Documents whose rows committed but whose vectors Chroma never confirmed (a crash between)."""
        return [
            r["row_id"]
            for r in self.db.query(
                "SELECT row_id FROM vector_pending WHERE collection = 'chunks' ORDER BY since, row_id"
            )
        ]

    def repair_vectors(self) -> list[str]:
        """Write the vectors every pending document is owed (from the embeddings cache); returns them.

        A pending row whose document was forgotten meanwhile is simply dropped.
        """
        if not self.vectors_enabled:
            return []
        repaired: list[str] = []
        with self.db.locked():
            for document_id in self.pending_vector_documents():
                doc = self._document_or_none(document_id)
                if doc is None:
                    with self.db.transaction() as con:
                        con.execute(
                            "DELETE FROM vector_pending WHERE collection = 'chunks' AND row_id = ?", [document_id]
                        )
                    continue
                self._retag(doc, doc, [])
                repaired.append(document_id)
        return repaired

    def forget_document(self, document_id: str) -> int:
        """Remove a document, its chunks and their vectors; returns the number of chunks removed."""
        with self.db.locked():
            if self._document_or_none(document_id) is None:
                raise StoreError(f"unknown document {document_id!r}")
            with self.db.transaction() as con:
                ids = [
                    r[0]
                    for r in con.execute("SELECT chunk_id FROM chunks WHERE document_id = ?", [document_id]).fetchall()
                ]
                con.execute("DELETE FROM chunks WHERE document_id = ?", [document_id])
                con.execute("DELETE FROM documents WHERE document_id = ?", [document_id])
                con.execute("DELETE FROM document_history WHERE document_id = ?", [document_id])
                con.execute("DELETE FROM origins WHERE table_name = 'documents' AND row_id = ?", [document_id])
                con.execute("DELETE FROM vector_pending WHERE collection = 'chunks' AND row_id = ?", [document_id])
            # If Chroma fails here the rows are already gone; the VectorIndexError says `kscout reindex`
            # (which rebuilds every collection from DuckDB) removes the leftover vectors.
            self._vector_delete("chunks", ids)
        return len(ids)

    def document_history(self, document_ids: Optional[list[str]] = None) -> dict[str, list[DocumentChange]]:
        """Each document's tag changes after its first ingest, oldest first (documents that never
        changed are absent). All documents when `document_ids` is None."""
        where, params = "", []
        if document_ids is not None:
            where, params = " WHERE document_id IN (SELECT unnest(?::VARCHAR[]))", [list(document_ids)]
        found = self.db.query(f"SELECT * FROM document_history{where} ORDER BY seq", params)
        history: dict[str, list[DocumentChange]] = {}
        for r in found:
            history.setdefault(r["document_id"], []).append(
                DocumentChange(
                    document_id=r["document_id"],
                    field=r["field"],
                    old=json.loads(r["old_json"]),
                    new=json.loads(r["new_json"]),
                    cause=r["cause"],
                    changed_at=r["changed_at"],
                )
            )
        return history

    def _document_or_none(self, document_id: str) -> Optional[Document]:
        found = self.db.query("SELECT * FROM documents WHERE document_id = ?", [document_id])
        return R.document_from_row(found[0]) if found else None

    def _document_sha(self, document_id: str) -> Optional[str]:
        found = self.db.query("SELECT sha256 FROM documents WHERE document_id = ?", [document_id])
        return found[0]["sha256"] if found else None

    def documents(self) -> list[Document]:
        """In the order they were first ingested."""
        return [R.document_from_row(r) for r in self.db.query("SELECT * FROM documents ORDER BY seq")]

    def chunk_counts(self) -> dict[str, int]:
        """How many chunks each document has (a document with none is absent)."""
        found = self.db.query("SELECT document_id, count(*) AS n FROM chunks GROUP BY document_id")
        return {r["document_id"]: int(r["n"]) for r in found}

    def get_document(self, document_id: str) -> Document:
        found = self.db.query("SELECT * FROM documents WHERE document_id = ?", [document_id])
        if not found:
            raise StoreError(f"unknown document {document_id!r}")
        return R.document_from_row(found[0])

    def chunks(self, document_id: Optional[str] = None) -> list[Chunk]:
        """Ordered by document (ingest order), then position in the document."""
        where = " WHERE c.document_id = ?" if document_id is not None else ""
        params = [document_id] if document_id is not None else []
        found = self.db.query(
            f"SELECT c.* FROM chunks c JOIN documents d USING (document_id){where} ORDER BY d.seq, c.ordinal",
            params,
        )
        return [R.chunk_from_row(r) for r in found]

    def get_chunks(self, chunk_ids: list[str]) -> list[Chunk]:
        """The chunks a vector search returned, in the order asked (unknown ids are left out)."""
        if not chunk_ids:
            return []
        with self.db.locked() as con:
            found = fetch_dicts(
                con,
                "SELECT * FROM chunks WHERE chunk_id IN (SELECT unnest(?::VARCHAR[]))",
                [list(chunk_ids)],
            )
        by_id = {r["chunk_id"]: R.chunk_from_row(r) for r in found}
        return [by_id[i] for i in chunk_ids if i in by_id]
