"""The knowledge a proposer sees before writing a kernel, trimmed to a token budget.

Four sections: what past runs measured on this op (same arch first, then the same vendor), failure
patterns to avoid, hardware facts for the device, and correctness constraints for the op family.
Items are taken round-robin across the sections, so a tight budget keeps the best item of each
section rather than all of the first one. Tokens are estimated as characters / 4 over the rendered
text, and `render()` never exceeds the budget. Every item says where it came from, so a prompt (and
the engineer reading a run report) can tell a datasheet number from a measurement.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal, Optional

from pydantic import Field

from evaluation.records import ProblemInfo
from knowledge.aliases import DEVICE_ARCH, canonical_devices, op_with_relatives, vendor_of_arch
from knowledge.errors import RetrievalError
from knowledge.records import DocumentHit, QueryFacets, Record
from knowledge.retrieve import corpus_for, documents_or_builtin, one_connection, rank_chunks, rank_outcomes
from store.records import ChunkKind, DocumentOrigin, FailurePattern, OutcomeRecord

Section = Literal["outcome", "failure", "hardware", "constraint"]
_TITLES: dict[str, str] = {
    "outcome": "Past outcomes on this op",
    "failure": "Failure patterns to avoid",
    "hardware": "Hardware facts",
    "constraint": "Correctness constraints",
}
_ORDER: tuple[str, ...] = ("outcome", "failure", "hardware", "constraint")
MIN_TRUNCATED_CHARS = 200


class ContextItem(Record):
    section: Section
    text: str
    source: str  # "<title> (<url>)" or "outcome <id> on <device>"
    ref_id: str  # chunk id, outcome id or failure signature


class KnowledgeContext(Record):
    op_family: str
    device_name: str
    arch: str
    devices: tuple[str, ...]  # canonical devices the device name resolved to
    token_budget: int
    items: tuple[ContextItem, ...]
    dropped: int = 0  # items retrieved but left out for the budget
    hints: tuple[dict[str, Any], ...] = Field(default=())

    def render(self) -> str:
        return _render(self.items, self.op_family, self.device_name, self.arch)

    def estimated_tokens(self) -> int:
        return estimate_tokens(self.render())

    def seed_hints(self) -> list[dict]:
        """Knob settings of the best measured outcomes on this op and arch, best first."""
        return [dict(h) for h in self.hints]


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _render(items, op_family: str, device_name: str, arch: str) -> str:
    if not items:
        return ""  # nothing known (or no room for anything): no header that promises knowledge
    lines = [f"Knowledge for {op_family} on {device_name} ({arch}):"]
    for section in _ORDER:
        chosen = [i for i in items if i.section == section]
        if not chosen:
            continue
        lines.append(f"\n## {_TITLES[section]}")
        for item in chosen:
            lines.append(f"- [{item.source}] {item.text}")
    return "\n".join(lines)


def _doc_source(hit: DocumentHit) -> str:
    """A vendor page is cited by its URL; a project note as a project note, so a prompt (and a reader
    of the report) never takes the project's own summary or measurement for a vendor's statement."""
    if hit.origin is DocumentOrigin.project:
        return f"{hit.title}, project note {hit.location}"
    return f"{hit.title}, {hit.location}"


def _doc_text(hit: DocumentHit) -> str:
    # The chunk's first line repeats title and headings; the source tag already names the document.
    head, _, body = hit.text.partition("\n\n")
    section = " > ".join(hit.heading_path[1:] or hit.heading_path)
    return (f"({section}) " if section else "") + " ".join((body or head).split())


def _fmt(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _outcome_item(o: OutcomeRecord) -> ContextItem:
    if o.speedup is None:
        result = "speedup not measured"
    else:
        result = f"{_fmt(o.speedup)}x vs {o.baseline} [{_fmt(o.speedup_low)}, {_fmt(o.speedup_high)}]"
    text = (
        f"{o.transformation} ({o.status}, {o.dtype}, {o.shape_bucket}): {result}; "
        f"triton {o.triton_version}. {o.summary}"
    )
    return ContextItem(
        section="outcome", text=text, source=f"outcome {o.outcome_id} on {o.device_name}", ref_id=o.outcome_id
    )


def _failure_item(f: FailurePattern) -> ContextItem:
    text = f"{f.stage}/{f.error_class} seen {f.count}x: {f.message_shape}"
    return ContextItem(
        section="failure", text=text, source=f"failure pattern {f.signature[:12]} on {f.arch}", ref_id=f.signature
    )


def _truncate(item: ContextItem, max_text_chars: int) -> Optional[ContextItem]:
    if max_text_chars < MIN_TRUNCATED_CHARS:
        return None
    cut = item.text[: max_text_chars - 2]
    stop = max(cut.rfind(". "), cut.rfind("; "))
    cut = cut[: stop + 1] if stop > max_text_chars // 2 else cut.rsplit(" ", 1)[0]
    return item.model_copy(update={"text": cut + " …"})


def _fit(pools: dict[str, list[ContextItem]], budget_chars: int, op: str, device: str, arch: str):
    """Round-robin over sections; an item that does not fit is skipped (a chunk may be shortened)."""
    chosen: list[ContextItem] = []
    queues = {s: list(pools.get(s, [])) for s in _ORDER}
    dropped = 0
    while any(queues.values()):
        for section in _ORDER:
            if not queues[section]:
                continue
            item = queues[section].pop(0)
            trial = chosen + [item]
            size = len(_render(trial, op, device, arch))
            if size <= budget_chars:
                chosen = trial
                continue
            if section in ("hardware", "constraint"):
                short = _truncate(item, len(item.text) - (size - budget_chars))
                if short and len(_render(chosen + [short], op, device, arch)) <= budget_chars:
                    chosen.append(short)
                    continue
            dropped += 1
    return chosen, dropped


def _best_hints(store, outcomes: list[OutcomeRecord], limit: int = 3) -> tuple[dict, ...]:
    from store import StoreError

    hints: list[dict] = []
    for o in outcomes:
        if o.status != "passed" or o.speedup is None or o.speedup <= 1.0:
            continue
        try:
            knobs = json.loads(store.get_candidate(o.candidate_id).knobs_json or "{}")
        except (StoreError, ValueError):
            continue  # an outcome whose candidate lives in another store, or knobs that are not JSON
        if isinstance(knobs, dict) and knobs and knobs not in hints:
            hints.append(knobs)
        if len(hints) == limit:
            break
    return tuple(hints)


def build_context(
    store, problem: ProblemInfo, device_name: str, arch: str, token_budget: int = 2000
) -> KnowledgeContext:
    if token_budget < 0:
        raise RetrievalError(f"token_budget must be >= 0, got {token_budget}")
    op = problem.op_family
    corpus = corpus_for(store, documents_or_builtin(store))
    devices = canonical_devices(device_name, corpus.extra_device_names, device_name=True)
    if not devices:
        devices = tuple(d for d, a in DEVICE_ARCH.items() if a == arch)
    facets = QueryFacets(devices=devices, ops=(op,))
    device_label = devices[0] if devices else device_name

    hw_docs = {
        d
        for d, doc in corpus.documents.items()
        if doc.kind is ChunkKind.hardware and corpus.doc_devices[d] & {x.upper() for x in devices}
    }
    hardware = (
        rank_chunks(
            store,
            corpus,
            f"tuning Triton {op} kernels on {device_label}: memory bandwidth, block sizes, num_warps",
            facets,
            k=6,
            only_docs=hw_docs,
            max_per_document=6,
        )
        if hw_docs
        else []
    )

    related = set(op_with_relatives(op))
    constraint_docs = {
        d for d, doc in corpus.documents.items() if doc.kind is ChunkKind.constraint and corpus.doc_ops[d] & related
    }
    constraints = (
        rank_chunks(
            store,
            corpus,
            f"{op} numerics and correctness",
            QueryFacets(ops=(op,)),
            k=6,
            only_docs=constraint_docs,
            max_per_document=3,
        )
        if constraint_docs
        else []
    )

    with one_connection(store):
        same_arch = rank_outcomes(store.outcomes(op_family=op, arch=arch, limit=100))
        vendor = vendor_of_arch(arch)
        same_vendor = (
            []
            if vendor is None
            else rank_outcomes(
                o
                for o in store.outcomes(op_family=op, limit=500)
                if o.arch != arch and vendor_of_arch(o.arch) == vendor
            )
        )
        failures = store.failure_patterns(op_family=op, arch=arch, limit=10)
        hints = _best_hints(store, same_arch)

    pools = {
        "outcome": [_outcome_item(o) for o in same_arch[:8] + same_vendor[:4]],
        "failure": [_failure_item(f) for f in failures],
        "hardware": [
            ContextItem(section="hardware", text=_doc_text(h), source=_doc_source(h), ref_id=h.chunk_id)
            for h in hardware
        ],
        "constraint": [
            ContextItem(section="constraint", text=_doc_text(h), source=_doc_source(h), ref_id=h.chunk_id)
            for h in constraints
        ],
    }
    items, dropped = _fit(pools, token_budget * 4, op, device_name, arch)
    return KnowledgeContext(
        op_family=op,
        device_name=device_name,
        arch=arch,
        devices=devices,
        token_budget=token_budget,
        items=tuple(items),
        dropped=dropped,
        hints=hints,
    )
