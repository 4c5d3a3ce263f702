"""Records the knowledge package hands to the CLI and the agent.

Documents and chunks themselves are `store.records` types (knowledge imports store, never the
reverse); these are the results of ingest jobs and retrieval, frozen like every cross-module record.
"""

from __future__ import annotations

import enum
from typing import Optional

from pydantic import BaseModel, ConfigDict

from store.records import ChunkKind, DocumentOrigin, FailurePattern, OutcomeRecord


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
    retagged = "retagged"  # same bytes, corrected provenance: rows and vector metadata, no re-embedding
    repaired = "repaired"  # same bytes, but its vectors had never reached Chroma (a crash): written now
    failed = "failed"
    # Nothing wrong, nothing to index: a format we do not read (an image, a .py), a page with no text
    # of its own (toctree only), or a file another page of the job includes (indexed there).
    skipped = "skipped"


class FileResult(Record):
    path: str
    status: FileStatus
    chunks: int = 0
    reason: Optional[str] = None  # why it failed or was skipped, one line
    document_id: Optional[str] = None
    title: Optional[str] = None
    notes: tuple[str, ...] = ()  # kept, but worth a look: a capped chunk count, a misspelt header key


class IngestReport(Record):
    files: tuple[FileResult, ...]
    duration_s: float

    @property
    def failed(self) -> tuple[FileResult, ...]:
        return tuple(f for f in self.files if f.status is FileStatus.failed)

    def count(self, status: FileStatus) -> int:
        return sum(1 for f in self.files if f.status is status)


class Provenance(Record):
    """Where an imported row came from: the store, team, person and machine that measured or wrote it."""

    origin_store: str
    team: Optional[str] = None
    user_name: Optional[str] = None
    host: Optional[str] = None
    bundle_id: str
    exported_at: str
    imported_at: str
    original_id: str
    conflicts_with: Optional[str] = None  # our row with the same id and other content, kept beside it

    def label(self) -> str:
        who = "@".join(x for x in (self.user_name, self.host) if x)
        team = self.team or f"store {self.origin_store[:8]}"
        return f"{team} ({who})" if who else team


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
    excerpt: str = ""  # the sentences that matched, numbers included, never cut mid-number
    location: str = ""  # the file (path or URL) with the section's anchor: where a reader goes to check
    origin: DocumentOrigin = DocumentOrigin.vendor
    measurements: Optional[str] = None  # for a project note: what its authors measured themselves
    imported_from: Optional[Provenance] = None


class OutcomeHit(Record):
    """A past measurement in an answer, with whose it is when it came from another store."""

    outcome: OutcomeRecord
    significant: bool  # a passed outcome whose speedup interval excludes 1, on either side
    # What was measured, as printed: "significant speedup" | "significant slowdown" | "within noise" |
    # "correct, not timed" | "timed, no interval" | "failed: <status>" (knowledge.retrieve.outcome_verdict)
    verdict: str = ""
    imported_from: Optional[Provenance] = None
    # Other outcomes in the answer that cite one of this one's evaluation ids with other numbers (status,
    # speedup, interval or latency): the same measurement told two ways. Both are shown; neither is chosen.
    conflicts_with: tuple[str, ...] = ()

    @property
    def measured_here(self) -> bool:
        """False for another team's row: no evaluation of this store backs it (revalidate re-measures
        deployed kernels, whose candidates live here; a bundle carries no candidates to re-measure)."""
        return self.imported_from is None


class FailureHit(Record):
    failure: FailurePattern
    imported_from: Optional[Provenance] = None


class AskResult(Record):
    facets: QueryFacets
    intent: str  # worked | failed | how-to | fact (knowledge.intent)
    outcomes: tuple[OutcomeRecord, ...]
    documents: tuple[DocumentHit, ...]
    failures: tuple[FailurePattern, ...] = ()
    outcome_hits: tuple[OutcomeHit, ...] = ()  # the outcomes again, with significance and provenance
    failure_hits: tuple[FailureHit, ...] = ()

    def to_json_obj(self) -> dict:
        """The `ask --json` object; `outcomes` and `documents` keep the shape scripts relied on."""
        return {
            "intent": self.intent,
            "facets": self.facets.model_dump(mode="json"),
            "outcomes": [o.model_dump(mode="json") for o in self.outcomes],
            "outcome_provenance": {
                h.outcome.outcome_id: {**h.imported_from.model_dump(mode="json"), "measured_here": h.measured_here}
                for h in self.outcome_hits
                if h.imported_from
            },
            "outcome_verdicts": {h.outcome.outcome_id: h.verdict for h in self.outcome_hits},
            "outcome_conflicts": {
                h.outcome.outcome_id: list(h.conflicts_with) for h in self.outcome_hits if h.conflicts_with
            },
            "failure_patterns": [f.model_dump(mode="json") for f in self.failures],
            "documents": [d.model_dump(mode="json") for d in self.documents],
        }
