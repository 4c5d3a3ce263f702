"""Typed errors of the knowledge package. The CLI turns them into one line; libraries only raise.

A failing file inside an ingest job is not an exception that ends the job: `ingest` catches
`IngestError` per file and reports it by name, so the rest of the job still lands.
"""

from evaluation.errors import KscoutError


class KnowledgeError(KscoutError):
    """Root of the knowledge package's errors."""


class IngestError(KnowledgeError):
    """One file could not be turned into a document: missing, unreadable, empty, binary, corrupt."""


class NoTextError(IngestError):
    """A page with no text of its own (only a toctree, an include, generated API directives): the job
    skips it rather than failing, because nothing is wrong with it. `notes` are the page's notes so
    far (an include outside the tree), which the job still reports."""

    def __init__(self, reason: str, notes: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.notes = notes


class FrontMatterError(IngestError):
    """A provenance header that is malformed, names an unknown key or lacks a required one."""


class RetrievalError(KnowledgeError):
    """A question or filter that cannot be answered (empty question, unknown --op, bad --k)."""
