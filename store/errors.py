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


class SigningError(StoreError):
    """A key that cannot be read or used: malformed key text, a signing key file others can read."""


class BundleRefused(StoreError):
    """A knowledge bundle that import will not merge: its signature, hashes or row counts do not hold,
    or its key is not trusted here. Raised before anything is written to the store."""


class UntrustedKey(BundleRefused):
    """A bundle signed correctly, by a key this store has not trusted."""

    def __init__(self, message: str, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id
