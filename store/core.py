"""What the store's parts share: the collaborators `Store` provides to its mixins, typed in one place.

`Store` is assembled from mixins (runs, learned rows, documents, run owners), each a file of its own;
they all reach the database, the embedding cache and the vector index through the attributes and
methods declared here, so a type checker sees one contract rather than attributes that appear only
once `Store.__init__` has run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from store.db import Database
    from store.embeddings import EmbeddingCache


class StoreCore:
    db: Database
    _cache: EmbeddingCache
    vectors_enabled: bool  # False with KSCOUT_VECTORS=off: rows are kept, vectors skipped

    def _resolve(self, table: str, column: str, prefix: str, what: str) -> str:
        """The one id in `table.column` that starts with `prefix` (Store raises on none or several)."""
        raise NotImplementedError

    def _vector_write(self, collection: str, ids: Sequence[str], vectors: Any, metadatas: Any) -> None:
        raise NotImplementedError

    def _vector_delete(self, collection: str, ids: Sequence[str]) -> None:
        raise NotImplementedError
