"""Records the knowledge package hands to the CLI and the agent.

Documents and chunks themselves are `store.records` types (knowledge imports store, never the
reverse); these are the results of ingest jobs and retrieval, frozen like every cross-module record.
"""

from __future__ import annotations

import enum
from typing import Optional

from pydantic import BaseModel, ConfigDict

from store.records import ChunkKind, OutcomeRecord


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class QueryFacets(Record):
    """What a question names, each value canonical (see knowledge.aliases)."""

    devices: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    vendors: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    archs: tuple[str, ...] = ()


class FileStatus(str, enum.Enum):
    added = "added"
    unchanged = "unchanged"
    replaced = "replaced"
    failed = "failed"
    skipped = "skipped"  # found while walking a folder, but not a format we read (an image, a .py)


class FileResult(Record):
    path: str
    status: FileStatus
    chunks: int = 0
    reason: Optional[str] = None  # why it failed or was skipped, one line
    document_id: Optional[str] = None
    title: Optional[str] = None


class IngestReport(Record):
    files: tuple[FileResult, ...]
    duration_s: float

    @property
    def failed(self) -> tuple[FileResult, ...]:
        return tuple(f for f in self.files if f.status is FileStatus.failed)

    def count(self, status: FileStatus) -> int:
        return sum(1 for f in self.files if f.status is status)


class DocumentHit(Record):
    """One retrieved chunk with the provenance of its document and why it ranked where it did."""

    chunk_id: str
    document_id: str
    title: str
    heading_path: tuple[str, ...]
    kind: ChunkKind
    text: str
    source: str
    source_url: Optional[str] = None
    doc_version: Optional[str] = None
    vendor: Optional[str] = None
    devices: tuple[str, ...] = ()
    score: float
    vector_rank: Optional[int] = None  # 1-based rank among vector neighbours, None if not among them
    bm25_rank: Optional[int] = None
    matched_device: bool = False
    matched_op: bool = False


class AskResult(Record):
    facets: QueryFacets
    outcomes: tuple[OutcomeRecord, ...]
    documents: tuple[DocumentHit, ...]

    def to_json_obj(self) -> dict:
        """The `ask --json` object: exactly these two keys, so scripts can rely on the shape."""
        return {
            "outcomes": [o.model_dump(mode="json") for o in self.outcomes],
            "documents": [d.model_dump(mode="json") for d in self.documents],
        }
