"""Typed errors of the store. Library code raises these; only the CLI prints them as one line."""

from evaluation.errors import KscoutError


class StoreError(KscoutError):
    """An unknown or ambiguous id, a busy or unreadable store file, or input the store refuses."""


class VectorIndexError(StoreError):
    """Chroma could not be reached or refused a write.

    DuckDB is the source of truth, so when this is raised after a write the row is already committed;
    `Store.reindex()` (`kscout reindex`) rebuilds the vectors from it.
    """


def one_line(text: object) -> str:
    """Messages from DuckDB and Chroma span lines; ours are read on one."""
    return " ".join(str(text).split())
