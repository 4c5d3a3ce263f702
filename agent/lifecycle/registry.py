"""The deployment registry: which kernel is live per (op, arch), as a fold over an append-only log.

The registry is never stored as a mutable row: `fold_history` replays the `PromotionEvent` log, which
is what makes rollback instant (one appended row) and the past auditable (nothing is updated or
deleted). Every write here appends events under the store lock; `promote` appends only what the gate
in `agent.lifecycle.gate` approved.
"""

from __future__ import annotations

import uuid
from typing import Optional, Sequence

from agent.lifecycle.evidence import PromotionEvidence, Record
from agent.lifecycle.gate import LifecycleError, evidence_for
from store.records import PromotionEvent, PromotionState, utc_now


class DeployedEntry(Record):
    """What is live for one (op, arch) after replaying its history."""

    op: str
    arch: str
    candidate_id: Optional[str]  # None = the reference
    since: str
    approved_by: Optional[str]
    changed_by: str
    evidence: Optional[PromotionEvidence]
    flagged: bool  # the live kernel was flagged by a revalidation after it was deployed
    rollback_target: Optional[str]  # the previous known-good kernel (None = the reference)
    known_good: tuple[str, ...]  # deployed kernels not rolled back, oldest first


class RollbackNote(Record):
    reason: str
    rolled_back_from: str
    restored: Optional[str]  # None = the reference


class FlagNote(Record):
    verdict: str  # "failed" | "regressed"
    reason: str
    eval_id: Optional[str]


def fold_history(events: Sequence[PromotionEvent]) -> dict[tuple[str, str], DeployedEntry]:
    """Replay events (oldest first) into what is live per (op, arch)."""
    by_key: dict[tuple[str, str], list[PromotionEvent]] = {}
    for e in events:
        by_key.setdefault((e.op_family, e.arch), []).append(e)
    return {key: _fold_one(key, evs) for key, evs in by_key.items()}


def _fold_one(key: tuple[str, str], events: list[PromotionEvent]) -> DeployedEntry:
    stack: list[str] = []  # deployments still standing, oldest first
    flagged: set[str] = set()
    deployed: dict[str, PromotionEvent] = {}
    live: Optional[str] = None
    since, changed_by = events[0].created_at, events[0].actor
    for e in events:
        cid = e.candidate_id
        if e.state is PromotionState.deployed and cid is not None:
            stack = [c for c in stack if c != cid] + [cid]
            flagged.discard(cid)
            deployed[cid] = e
            live, since, changed_by = cid, e.created_at, e.actor
        elif e.state is PromotionState.rolled_back:
            stack = stack[: stack.index(cid) + 1] if cid in stack else []
            live, since, changed_by = cid, e.created_at, e.actor
        elif e.state is PromotionState.flagged and cid is not None:
            flagged.add(cid)
    below = [c for c in stack if c != live and c not in flagged]
    evidence = None
    if live is not None and live in deployed:
        evidence = PromotionEvidence.model_validate_json(deployed[live].evidence_json)
    return DeployedEntry(
        op=key[0],
        arch=key[1],
        candidate_id=live,
        since=since,
        approved_by=deployed[live].actor if live in deployed else None,
        changed_by=changed_by,
        evidence=evidence,
        flagged=live in flagged,
        rollback_target=below[-1] if below else None,
        known_good=tuple(c for c in stack if c not in flagged),
    )


def _event(
    entry_op: str,
    problem_id: str,
    arch: str,
    candidate_id: Optional[str],
    state: PromotionState,
    actor: str,
    note: str,
    evidence_json: str,
    previous: Optional[str],
) -> PromotionEvent:
    return PromotionEvent(
        event_id=uuid.uuid4().hex,
        op_family=entry_op,
        problem_id=problem_id,
        arch=arch,
        candidate_id=candidate_id,
        state=state,
        actor=actor,
        note=note,
        evidence_json=evidence_json,
        previous_candidate_id=previous,
        created_at=utc_now(),
    )


def _require_name(name: str, flag: str) -> str:
    if not name or not name.strip():
        raise LifecycleError(f"{flag} must name a person")
    return name.strip()


def promote(
    store,
    candidate_ref: str,
    *,
    approved_by: str,
    note: str = "",
    arch: Optional[str] = None,
    allow_unsandboxed: bool = False,
    no_hybrid: bool = False,
) -> tuple[PromotionEvent, PromotionEvent]:
    """Record `approved` then `deployed` for a candidate whose evidence is complete.

    `allow_unsandboxed`: the approver accepts evidence gathered without the OS sandbox; the events'
    note says so. `no_hybrid`: refuse a hybrid (PyTorch compute in forward, issue 25).

    The store lock is held throughout, so a concurrent promotion or rollback cannot slip between
    reading what is live (the previous known-good) and appending the two events.
    """
    approver = _require_name(approved_by, "--approved-by")
    with store.session():
        evidence = evidence_for(store, candidate_ref, arch, allow_unsandboxed=allow_unsandboxed, no_hybrid=no_hybrid)
        if allow_unsandboxed:
            note = (note + " " if note else "") + f"[unsandboxed evidence accepted by {approver}]"
        key = (evidence.op, evidence.arch)
        entry = fold_history(store.promotion_history(op_family=key[0], arch=key[1])).get(key)
        good = [c for c in entry.known_good if c != evidence.candidate_id] if entry else []
        payload = evidence.model_dump_json()
        approved, deployed = (
            _event(
                evidence.op,
                evidence.problem_id,
                evidence.arch,
                evidence.candidate_id,
                state,
                approver,
                note,
                payload,
                good[-1] if good else None,
            )
            for state in (PromotionState.approved, PromotionState.deployed)
        )
        store.add_promotion_event(approved)
        store.add_promotion_event(deployed)
    return approved, deployed


def deployed_entries(store, arch: Optional[str] = None) -> list[DeployedEntry]:
    entries = fold_history(store.promotion_history(arch=arch))
    return [entries[k] for k in sorted(entries)]


def history(store, op: str, arch: str) -> list[PromotionEvent]:
    events = store.promotion_history(op_family=op, arch=arch)
    if not events:
        raise LifecycleError(f"no promotion history for {op} on {arch}")
    return events


def rollback(store, op: str, arch: str, *, by: str, reason: str = "") -> PromotionEvent:
    """Return at once to the previous known-good kernel, or to the reference when there is none."""
    actor = _require_name(by, "--by")
    with store.session():
        entry = fold_history(history(store, op, arch))[(op, arch)]
        if entry.candidate_id is None:
            raise LifecycleError(f"nothing to roll back for {op} on {arch}: the reference is already live")
        note = RollbackNote(reason=reason, rolled_back_from=entry.candidate_id, restored=entry.rollback_target)
        problem_id = entry.evidence.problem_id if entry.evidence else ""
        event = _event(
            op,
            problem_id,
            arch,
            entry.rollback_target,
            PromotionState.rolled_back,
            actor,
            reason,
            note.model_dump_json(),
            entry.candidate_id,
        )
        store.add_promotion_event(event)
    return event


def flag(store, entry: DeployedEntry, note: FlagNote, *, by: str) -> PromotionEvent:
    assert entry.candidate_id is not None
    problem_id = entry.evidence.problem_id if entry.evidence else ""
    event = _event(
        entry.op,
        problem_id,
        entry.arch,
        entry.candidate_id,
        PromotionState.flagged,
        by,
        note.reason,
        note.model_dump_json(),
        entry.rollback_target,
    )
    store.add_promotion_event(event)
    return event
