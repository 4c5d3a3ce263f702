"""What searches learned: outcomes, failure patterns (both embedded) and the promotion history.

`outcomes()` needs no index at scale: with 1,000,000 outcome rows (120 MB file) a filtered query
(op_family, arch, device_name; newest 100) took 25-55 ms on 2 busy cores, 15-20 ms of which is opening
the file. DuckDB's zone maps and vectorized scan do the work; an ART index would help only point
lookups, and every index is rebuilt in memory when the file opens.
"""

from __future__ import annotations

import enum
import json
from typing import Optional, Sequence

from store import rows as R
from store.core import StoreCore
from store.db import Database, fetch_dicts, insert, where_equal
from store.errors import StoreError
from store.failures import embedding_text, failure_signature, message_shape
from store.records import FailurePattern, OutcomeRecord, PromotionEvent, utc_now


def outcome_metadata(o: OutcomeRecord) -> dict:
    return {
        "op_family": o.op_family,
        "arch": o.arch,
        "device": o.device_name,
        "dtype": o.dtype,
        "status": o.status,
        "baseline": o.baseline,
        "problem_id": o.problem_id,
        "transformation": o.transformation,
        "speedup": o.speedup,
    }


def failure_metadata(p: FailurePattern) -> dict:
    return {"op_family": p.op_family, "arch": p.arch, "stage": p.stage, "error_class": p.error_class}


class LearnedMixin(StoreCore):
    db: Database  # the mixins are parts of `Store`, which provides `_cache` and `_vector_write`

    # -- outcomes ------------------------------------------------------------------------------------
    def add_outcome(self, o: OutcomeRecord) -> None:
        """Adding the same outcome again is a no-op; a different one under a used id is refused."""
        embedded = self._cache.prepare([o.summary])
        with self.db.locked():
            with self.db.transaction() as con:
                found = fetch_dicts(con, "SELECT * FROM outcomes WHERE outcome_id = ?", [o.outcome_id])
                if found:
                    if R.dumps(R.outcome_from_row(found[0])) == R.dumps(o):
                        return
                    raise StoreError(f"outcome {o.outcome_id} already exists with other content")
                insert(con, "outcomes", R.record_row(o))
                self._cache.save(con, embedded)
            self._vector_write("outcomes", [o.outcome_id], embedded.vectors, [outcome_metadata(o)])

    def outcomes(
        self,
        op_family: Optional[str] = None,
        arch: Optional[str] = None,
        device_name: Optional[str] = None,
        limit: int = 100,
        schedule_kind: Optional[str] = None,
    ) -> list[OutcomeRecord]:
        """Newest first. `schedule_kind` matches outcomes whose schedule includes that kind ("row"
        matches "matmul+row"), whatever their op family."""
        where, params = where_equal(op_family=op_family, arch=arch, device_name=device_name)
        if schedule_kind is not None:
            where += (" AND " if where else " WHERE ") + "list_contains(string_split(schedule_kind, '+'), ?)"
            params.append(schedule_kind)
        found = self.db.query(f"SELECT * FROM outcomes{where} ORDER BY seq DESC LIMIT ?", [*params, limit])
        return [R.outcome_from_row(r) for r in found]

    def model_families(self) -> list[str]:
        """The op families of whole-model outcomes (`kscout optimize-model`: "model:minigptblock")."""
        found = self.db.query(
            "SELECT DISTINCT op_family FROM outcomes WHERE starts_with(op_family, 'model:') ORDER BY op_family"
        )
        return [r["op_family"] for r in found]

    def schedule_hints(self, kinds: Sequence[str], arch: str, limit: int = 3) -> list[dict]:
        """Knobs of the best measured wins (passed, faster than eager) whose schedule shares a kind with
        `kinds`, on this arch, across op families: what a row kernel of one graph learned seeds the row
        kernels of another. Best first, one per candidate."""
        wanted = [k for k in dict.fromkeys(kinds) if k]
        if not wanted:
            return []
        marks = ", ".join("?" for _ in wanted)
        found = self.db.query(
            "SELECT o.candidate_id, max(o.speedup) AS best, any_value(c.knobs_json) AS knobs_json "
            "FROM outcomes o JOIN candidates c ON c.candidate_id = o.candidate_id "
            "WHERE o.arch = ? AND o.status = 'passed' AND o.speedup > 1.0 AND o.schedule_kind IS NOT NULL "
            f"AND len(list_intersect(string_split(o.schedule_kind, '+'), [{marks}])) > 0 "
            "GROUP BY o.candidate_id ORDER BY best DESC, o.candidate_id LIMIT ?",
            [arch, *wanted, limit],
        )
        hints = []
        for row in found:
            try:
                knobs = json.loads(row["knobs_json"] or "{}")
            except ValueError:
                continue  # knobs that are not JSON teach nothing
            if isinstance(knobs, dict) and knobs and knobs not in hints:
                hints.append(knobs)
        return hints

    def get_outcome(self, outcome_id: str) -> OutcomeRecord:
        found = self.db.query("SELECT * FROM outcomes WHERE outcome_id = ?", [outcome_id])
        if not found:
            raise StoreError(f"unknown outcome {outcome_id!r}")
        return R.outcome_from_row(found[0])

    def outcomes_citing(self, eval_ids: Sequence[str]) -> list[OutcomeRecord]:
        """Outcomes whose evidence includes any of these evaluation ids, oldest first: rows that speak
        about the same measurement (one of ours and a team's imported copy, say)."""
        wanted = sorted(set(eval_ids))
        if not wanted:
            return []
        found = self.db.query(
            "SELECT * FROM outcomes WHERE list_has_any(evidence_eval_ids, ?::VARCHAR[]) ORDER BY seq", [wanted]
        )
        return [R.outcome_from_row(r) for r in found]

    # -- failure patterns ----------------------------------------------------------------------------
    def record_failure(
        self, op_family: str, arch: str, stage: str, error_class: str, message: str, candidate_id: str
    ) -> FailurePattern:
        """Count one more occurrence of a failure; the first occurrence stays as the example."""
        stage = stage.value if isinstance(stage, enum.Enum) else str(stage)
        shape = message_shape(message)
        signature = failure_signature(op_family, arch, stage, error_class, shape)
        embedded = self._cache.prepare([embedding_text(error_class, stage, shape)])
        now = utc_now()
        with self.db.locked():
            with self.db.transaction() as con:
                seen = con.execute("SELECT 1 FROM failure_patterns WHERE signature = ?", [signature]).fetchone()
                if seen:
                    con.execute(
                        "UPDATE failure_patterns SET count = count + 1, last_seen = ? WHERE signature = ?",
                        [now, signature],
                    )
                else:
                    pattern = FailurePattern(
                        signature=signature,
                        op_family=op_family,
                        arch=arch,
                        stage=stage,
                        error_class=error_class,
                        message_shape=shape,
                        count=1,
                        example_candidate_id=candidate_id,
                        example_message=message or "",
                        first_seen=now,
                        last_seen=now,
                    )
                    insert(con, "failure_patterns", R.record_row(pattern))
                    self._cache.save(con, embedded)
                row = fetch_dicts(con, "SELECT * FROM failure_patterns WHERE signature = ?", [signature])
            pattern = R.failure_from_row(row[0])
            if not seen:
                self._vector_write("failures", [signature], embedded.vectors, [failure_metadata(pattern)])
        return pattern

    def failure_patterns(
        self, op_family: Optional[str] = None, arch: Optional[str] = None, limit: int = 20
    ) -> list[FailurePattern]:
        """Most frequent first."""
        where, params = where_equal(op_family=op_family, arch=arch)
        found = self.db.query(
            f"SELECT * FROM failure_patterns{where} ORDER BY count DESC, last_seen DESC, signature LIMIT ?",
            [*params, limit],
        )
        return [R.failure_from_row(r) for r in found]

    # -- promotions (append-only: there is no update or delete) --------------------------------------
    def add_promotion_event(self, e: PromotionEvent) -> None:
        with self.db.transaction() as con:
            if con.execute("SELECT 1 FROM promotions WHERE event_id = ?", [e.event_id]).fetchone():
                raise StoreError(f"promotion event {e.event_id} already exists (history is append-only)")
            insert(con, "promotions", R.record_row(e))

    def promotion_history(self, op_family: Optional[str] = None, arch: Optional[str] = None) -> list[PromotionEvent]:
        """Oldest first."""
        where, params = where_equal(op_family=op_family, arch=arch)
        found = self.db.query(f"SELECT * FROM promotions{where} ORDER BY seq", params)
        return [R.promotion_from_row(r) for r in found]
