"""Row types of the store that no other package produces on its own.

Evaluation results and fingerprints are `evaluation.records` types (evaluation imports nothing of ours,
so importing them here makes no cycle). Documents and chunks are defined here rather than in
`knowledge`, because `knowledge` imports `store` and the arrow must stay one-way.
All records are frozen and refuse unknown fields; times are ISO-8601 UTC strings.
"""

from __future__ import annotations

import datetime as _dt
import enum
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict


class Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


class ChunkKind(str, enum.Enum):
    hardware = "hardware"
    constraint = "constraint"
    guidance = "guidance"
    # Licence, notice and build files (LICENSE, NOTICE, CMakeLists.txt, Makefile, pyproject.toml):
    # searchable, but never a hardware fact, so an answer about a device does not cite them.
    housekeeping = "housekeeping"


class DocumentOrigin(str, enum.Enum):
    """Who wrote a document, which decides how an answer may cite it."""

    vendor = "vendor"  # a vendor's own documentation (datasheets, programming guides)
    project = "project"  # written by this project or a team, carrying its own measurements
    external = "external"  # anything else: papers, blog posts, third-party notes


class Document(Row):
    document_id: str  # sha256 of the source path/url identity, first 16 hex
    source: str  # file path or URL it came from
    title: str
    vendor: Optional[str] = None
    devices: tuple[str, ...] = ()
    doc_version: Optional[str] = None
    source_url: Optional[str] = None  # where a reader finds this very file (never a folder's URL)
    sha256: str  # of the document's bytes (and of the files it includes, in order, when it includes any)
    kind: ChunkKind = ChunkKind.hardware
    op_families: tuple[str, ...] = ()
    builtin: bool = False
    ingested_at: str
    origin: DocumentOrigin = DocumentOrigin.vendor
    metadata_json: str = "{}"  # every front-matter key as given (MyST, YAML), and what the note cites
    retagged_at: Optional[str] = None  # when provenance last changed without the text changing


class DocumentChange(Row):
    """One change to one tag of a document after its first ingest, oldest first in a history."""

    document_id: str
    field: str  # vendor | devices | doc_version | source_url | kind | origin | op_families
    old: Any = None  # the value before, as JSON has it (a list for devices, a string for kind)
    new: Any = None
    cause: str  # "ingest" (an explicit flag or a changed header) | "retag"
    changed_at: str


class Chunk(Row):
    chunk_id: str  # document_id + ":" + ordinal
    document_id: str
    ordinal: int
    heading_path: tuple[str, ...]
    text: str
    kind: ChunkKind
    text_sha256: str
    anchor: Optional[str] = None  # the section's id in the rendered page ("memory-hierarchy")


class StopRule(Row):
    """Fixed and recorded before a search starts; nothing changes it during the run."""

    max_evaluations: int
    max_minutes: Optional[float] = None
    target_speedup: Optional[float] = None
    stall_limit: Optional[int] = None  # evaluations without improvement
    max_cost_usd: Optional[float] = None


class RunStatus(str, enum.Enum):
    running = "running"
    finished = "finished"
    failed = "failed"
    interrupted = "interrupted"


class RunRecord(Row):
    run_id: str
    problem_id: str
    problem_name: str
    op_family: str
    device: str  # "cpu" | "cuda"
    arch: str
    env_id: str
    proposer: str  # "template" | "llm"
    model: Optional[str] = None
    seed: int
    stop_rule: StopRule
    status: RunStatus = RunStatus.running
    stop_reason: Optional[str] = None
    best_candidate_id: Optional[str] = None
    started_at: str
    finished_at: Optional[str] = None
    config_json: str = "{}"  # the full resolved options of the session, for reproduction


class CandidateRecord(Row):
    candidate_id: str  # sha256 of the source (content hash)
    run_id: str
    parent_id: Optional[str] = None
    generation: int
    proposer: str
    model: Optional[str] = None
    prompt_template: Optional[str] = None
    prompt_sha256: Optional[str] = None
    rationale: str = ""
    transformation_tags: tuple[str, ...] = ()
    knobs_json: str = "{}"  # template proposer's configuration, as JSON
    policy_action: Optional[str] = None  # "seed" | "refine" | "sibling" | "restart"
    policy_reason: Optional[str] = None
    source: str
    created_at: str


class OutcomeRecord(Row):
    """What one transformation did for an op on a device and shape bucket, with its evidence."""

    outcome_id: str
    op_family: str
    problem_id: str
    device_name: str
    arch: str
    shape_bucket: str  # e.g. "M>=4096,N=4096..8191"
    dtype: str
    transformation: str  # e.g. "rows_per_program=4" or an llm rationale tag
    candidate_id: str
    parent_id: Optional[str] = None
    baseline: str  # "eager" | "torch_compile" | "parent" | "seed"
    speedup: Optional[float] = None  # None where not measured (CPU)
    speedup_low: Optional[float] = None
    speedup_high: Optional[float] = None
    latency_ms_p50: Optional[float] = None
    status: str
    triton_version: str
    torch_version: str
    driver_version: Optional[str] = None
    evidence_eval_ids: tuple[str, ...] = ()
    summary: str  # one sentence, what is embedded
    created_at: str
    schedule_kind: Optional[str] = None  # "matmul+row": the kernels' schedule kinds, in launch order


class SpeedVerdict(str, enum.Enum):
    """What a speedup interval says about 1.0 (the value is how answers print it)."""

    faster = "significant speedup"  # the interval lies wholly above 1
    slower = "significant slowdown"  # wholly below 1
    noise = "within noise"  # it contains 1 (an end at exactly 1 counts as containing it)


def speed_verdict(low: Optional[float], high: Optional[float]) -> Optional[SpeedVerdict]:
    """Significance read from the interval alone, as the search's verdict reads it (`Ratio.significant`:
    low > 1 or high < 1); None where the interval is not known."""
    if low is None or high is None:
        return None
    if low > 1.0:
        return SpeedVerdict.faster
    if high < 1.0:
        return SpeedVerdict.slower
    return SpeedVerdict.noise


class FailurePattern(Row):
    signature: str  # sha of (op_family, device arch, stage, error class, normalized message)
    op_family: str
    arch: str
    stage: str
    error_class: str
    message_shape: str  # message with numbers and names normalized
    count: int
    example_candidate_id: str
    example_message: str
    first_seen: str
    last_seen: str


class LLMCall(Row):
    call_id: str
    run_id: Optional[str] = None
    model: str
    resolved_model: Optional[str] = None
    template_name: str
    template_sha256: str
    rendered_prompt: str
    response_text: Optional[str] = None
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    cost_usd: Optional[float] = None
    duration_ms: float
    error: Optional[str] = None  # "RateLimitError: ...", "timeout", "no code in reply"
    attempt: int = 1
    created_at: str


class PromotionState(str, enum.Enum):
    proposed = "proposed"
    approved = "approved"
    deployed = "deployed"
    rolled_back = "rolled_back"
    flagged = "flagged"  # revalidation failed or regressed


class PromotionEvent(Row):
    """Append-only history of what is live per (op, device arch)."""

    event_id: str
    op_family: str
    problem_id: str
    arch: str
    candidate_id: Optional[str]  # None = back to the reference
    state: PromotionState
    actor: str  # approver, or who rolled back
    note: str = ""
    evidence_json: str = "{}"
    previous_candidate_id: Optional[str] = None
    created_at: str
