"""Documents and their chunks, written by knowledge's ingest; chunk vectors follow their rows."""

from __future__ import annotations

from typing import Optional

from store import rows as R
from store.db import Database, fetch_dicts, insert
from store.embeddings import text_sha256
from store.errors import StoreError
from store.records import Chunk, Document


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
        "ordinal": chunk.ordinal,
    }


class DocumentsMixin:
    db: Database  # the mixins are parts of `Store`, which provides `_cache` and `_vector_write`

    def upsert_document(self, doc: Document, chunks: list[Chunk]) -> str:
        """"added", "unchanged" (same bytes: nothing written) or "replaced" (old chunks and vectors go)."""
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
        texts = [chunk_embedding_text(c) for c in chunks]
        with self.db.locked():  # one trip through the lock for the check and the cache lookup
            if self._document_sha(doc.document_id) == doc.sha256:
                return "unchanged"
            self._cache.cached([text_sha256(t) for t in texts])
        embedded = self._cache.prepare(texts)  # the model runs unlocked: it is the slow part
        with self.db.locked():
            with self.db.transaction() as con:
                before = con.execute(
                    "SELECT sha256 FROM documents WHERE document_id = ?", [doc.document_id]
                ).fetchone()
                if before is not None and before[0] == doc.sha256:
                    return "unchanged"  # another process ingested the same bytes meanwhile
                old_ids = [
                    r[0]
                    for r in con.execute(
                        "SELECT chunk_id FROM chunks WHERE document_id = ?", [doc.document_id]
                    ).fetchall()
                ]
                con.execute("DELETE FROM chunks WHERE document_id = ?", [doc.document_id])
                row = R.record_row(doc)
                if before is None:
                    insert(con, "documents", row)
                else:
                    row.pop("document_id")
                    sets = ", ".join(f"{k} = ?" for k in row)
                    con.execute(
                        f"UPDATE documents SET {sets} WHERE document_id = ?",
                        [*row.values(), doc.document_id],
                    )
                for chunk in chunks:
                    insert(con, "chunks", R.record_row(chunk))
                self._cache.save(con, embedded)
            stale = sorted(set(old_ids) - set(ids))
            self._vector_delete("chunks", stale)
            self._vector_write("chunks", ids, embedded.vectors, [chunk_metadata(doc, c) for c in chunks])
        return "added" if before is None else "replaced"

    def _document_sha(self, document_id: str) -> Optional[str]:
        found = self.db.query("SELECT sha256 FROM documents WHERE document_id = ?", [document_id])
        return found[0]["sha256"] if found else None

    def documents(self) -> list[Document]:
        """In the order they were first ingested."""
        return [R.document_from_row(r) for r in self.db.query("SELECT * FROM documents ORDER BY seq")]

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
            "SELECT c.* FROM chunks c JOIN documents d USING (document_id)"
            f"{where} ORDER BY d.seq, c.ordinal",
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
