"""Correcting and removing documents: `kscout retag` and `kscout forget`.

A retag changes only the tags it names, and each change is kept, with the old value, in the document's
history (a later ingest that states no tags leaves the retagged values as they are).

A document is named the way an engineer remembers it: its id (or a unique prefix, as `kscout docs`
prints it), the path of the file that was ingested, or the file's name when only one document has it.
"""

from __future__ import annotations

import os
from typing import Optional

from knowledge.aliases import normalize_devices
from knowledge.errors import KnowledgeError
from knowledge.frontmatter import check_vendor
from knowledge.records import Record
from store.records import ChunkKind, Document, DocumentOrigin


class RetagChanges(Record):
    """What to change; None leaves a field as it is (devices=() clears the list)."""

    vendor: Optional[str] = None
    devices: Optional[tuple[str, ...]] = None
    source_url: Optional[str] = None
    doc_version: Optional[str] = None
    kind: Optional[ChunkKind] = None
    origin: Optional[DocumentOrigin] = None

    def is_empty(self) -> bool:
        return all(getattr(self, f) is None for f in type(self).model_fields)


def resolve_document(store, ref: str) -> Document:
    """The one document `ref` names (id prefix, ingested path, or file name). KnowledgeError if none or many."""
    ref = ref.strip()
    if not ref:
        raise KnowledgeError("empty document name")
    documents = store.documents()
    real = os.path.realpath(ref) if os.path.exists(ref) else None
    for test in (
        lambda d: d.document_id == ref,
        lambda d: real is not None and d.source == real,
        lambda d: d.source == ref,
        lambda d: d.document_id.startswith(ref),
        lambda d: os.path.basename(d.source) == ref,
    ):
        found = [d for d in documents if test(d)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            shown = ", ".join(f"{d.document_id} ({d.source})" for d in found[:4])
            raise KnowledgeError(f"{ref!r} names {len(found)} documents: {shown}; give the id")
    raise KnowledgeError(f"no document matches {ref!r} (see `kscout docs`)")


def retag(store, ref: str, changes: RetagChanges) -> tuple[Document, str]:
    """Apply `changes` to one document without reading its file again; returns it and the store's status."""
    if changes.is_empty():
        raise KnowledgeError(
            "nothing to change: give --vendor, --device, --no-devices, --source-url, --doc-version, --kind or --origin"
        )
    doc = resolve_document(store, ref)
    update: dict = {}
    if changes.vendor is not None:
        update["vendor"] = check_vendor(changes.vendor)
    if changes.devices is not None:
        try:
            update["devices"] = normalize_devices(changes.devices)
        except ValueError as exc:
            raise KnowledgeError(str(exc)) from None
    for field in ("source_url", "doc_version", "kind", "origin"):
        value = getattr(changes, field)
        if value is not None:
            update[field] = value
    new = doc.model_copy(update=update)
    status = store.upsert_document(new, store.chunks(doc.document_id), cause="retag")  # kept in its history
    return store.get_document(doc.document_id), status


def forget(store, ref: str) -> tuple[Document, int]:
    doc = resolve_document(store, ref)
    return doc, store.forget_document(doc.document_id)
