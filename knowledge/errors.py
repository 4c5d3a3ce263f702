"""Typed errors of the knowledge package. The CLI turns them into one line; libraries only raise.

A failing file inside an ingest job is not an exception that ends the job: `ingest` catches
`IngestError` per file and reports it by name, so the rest of the job still lands.
"""

from evaluation.errors import KscoutError


class KnowledgeError(KscoutError):
    """Root of the knowledge package's errors."""


class IngestError(KnowledgeError):
    """One file could not be turned into a document: missing, unreadable, empty, binary, corrupt."""


class FrontMatterError(IngestError):
    """A provenance header that is malformed, names an unknown key or lacks a required one."""


class RetrievalError(KnowledgeError):
    """A question or filter that cannot be answered (empty question, unknown --op, bad --k)."""
