"""Provenance of a search: environments, problems, runs, candidates, evaluations and LLM calls."""

from __future__ import annotations

import uuid
from typing import Optional

from evaluation.records import EvalResult, Fingerprint, ProblemInfo, source_sha256
from store import rows as R
from store.core import StoreCore
from store.db import Database, fetch_dicts, insert, where_equal
from store.errors import StoreError
from store.records import CandidateRecord, LLMCall, RunRecord, RunStatus, utc_now

EVALUATION_KINDS = ("search", "remeasure", "revalidate")

_CANDIDATE_SELECT = "SELECT c.*, s.source FROM candidates c JOIN candidate_sources s USING (candidate_id)"


class RunsMixin(StoreCore):
    db: Database  # the mixins are parts of `Store`, which also provides `_resolve`

    # -- environments and problems -----------------------------------------------------------------
    def record_environment(self, fp: Fingerprint) -> str:
        with self.db.transaction() as con:
            _insert_environment(con, fp)
        return fp.key()

    def get_environment(self, env_id: str) -> Fingerprint:
        found = self.db.query("SELECT fingerprint_json FROM environments WHERE env_id = ?", [env_id])
        if not found:
            raise StoreError(f"unknown environment {env_id!r}")
        return Fingerprint.model_validate(R.loads(found[0]["fingerprint_json"]))

    def record_problem(self, problem: ProblemInfo) -> str:
        """Problems are identified by content, so recording one twice keeps the first row."""
        with self.db.transaction() as con:
            if not con.execute("SELECT 1 FROM problems WHERE problem_id = ?", [problem.problem_id]).fetchone():
                insert(con, "problems", R.problem_row(problem))
        return problem.problem_id

    def get_problem(self, problem_id: str) -> ProblemInfo:
        found = self.db.query("SELECT info_json FROM problems WHERE problem_id = ?", [problem_id])
        if not found:
            raise StoreError(f"unknown problem {problem_id!r}")
        return ProblemInfo.model_validate(R.loads(found[0]["info_json"]))

    # -- runs ----------------------------------------------------------------------------------------
    def create_run(self, run: RunRecord) -> None:
        with self.db.transaction() as con:
            if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run.run_id]).fetchone():
                raise StoreError(f"run {run.run_id} already exists")
            insert(con, "runs", R.run_row(run))

    def finish_run(self, run_id: str, *, status: RunStatus, stop_reason: str, best_candidate_id: Optional[str]) -> None:
        try:
            status = RunStatus(status)
        except ValueError:
            raise StoreError(
                f"unknown run status {status!r}; expected {', '.join(s.value for s in RunStatus)}"
            ) from None
        with self.db.transaction() as con:
            if not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
                raise StoreError(f"unknown run {run_id!r}")
            if (
                best_candidate_id is not None
                and not con.execute(
                    "SELECT 1 FROM candidates WHERE run_id = ? AND candidate_id = ?",
                    [run_id, best_candidate_id],
                ).fetchone()
            ):
                raise StoreError(f"candidate {best_candidate_id[:12]} is not part of run {run_id}")
            con.execute(
                "UPDATE runs SET status = ?, stop_reason = ?, best_candidate_id = ?, finished_at = ? WHERE run_id = ?",
                [status.value, stop_reason, best_candidate_id, utc_now(), run_id],
            )

    def resolve_run_id(self, prefix: str) -> str:
        return self._resolve("runs", "run_id", prefix, "run")

    def get_run(self, run_id: str) -> RunRecord:
        with self.db.locked():
            full = self.resolve_run_id(run_id)
            return R.run_from_row(self.db.query("SELECT * FROM runs WHERE run_id = ?", [full])[0])

    def list_runs(self, limit: int = 50) -> list[RunRecord]:
        """Newest first."""
        found = self.db.query("SELECT * FROM runs ORDER BY started_at DESC, run_id LIMIT ?", [limit])
        return [R.run_from_row(r) for r in found]

    # -- candidates ----------------------------------------------------------------------------------
    def add_candidate(self, c: CandidateRecord) -> bool:
        if c.candidate_id != source_sha256(c.source):
            raise StoreError(
                f"candidate id {c.candidate_id[:12]} is not the sha256 of its source ({source_sha256(c.source)[:12]})"
            )
        with self.db.transaction() as con:
            if not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [c.run_id]).fetchone():
                raise StoreError(f"unknown run {c.run_id!r}: create the run before its candidates")
            if con.execute(
                "SELECT 1 FROM candidates WHERE run_id = ? AND candidate_id = ?",
                [c.run_id, c.candidate_id],
            ).fetchone():
                return False
            con.execute(
                "INSERT OR IGNORE INTO candidate_sources VALUES (?, ?, ?)",
                [c.candidate_id, c.source, c.created_at],
            )
            insert(con, "candidates", R.candidate_row(c))
        return True

    def resolve_candidate_id(self, prefix: str) -> str:
        return self._resolve("candidate_sources", "candidate_id", prefix, "candidate")

    def get_candidate(self, candidate_id: str, run_id: Optional[str] = None) -> CandidateRecord:
        """Without a run, the row of the first run that proposed this source."""
        with self.db.locked() as con:
            full = self.resolve_candidate_id(candidate_id)
            if run_id is None:
                found = fetch_dicts(con, f"{_CANDIDATE_SELECT} WHERE candidate_id = ? ORDER BY seq LIMIT 1", [full])
            else:
                run = self.resolve_run_id(run_id)
                found = fetch_dicts(con, f"{_CANDIDATE_SELECT} WHERE candidate_id = ? AND run_id = ?", [full, run])
                if not found:
                    raise StoreError(f"candidate {full[:12]} is not part of run {run}")
        return R.candidate_from_row(found[0])

    def candidates(self, run_id: str) -> list[CandidateRecord]:
        found = self.db.query(f"{_CANDIDATE_SELECT} WHERE run_id = ? ORDER BY seq", [run_id])
        return [R.candidate_from_row(r) for r in found]

    # -- evaluations ---------------------------------------------------------------------------------
    def add_evaluation(self, run_id: str, candidate_id: str, result: EvalResult, *, kind: str = "search") -> str:
        if kind not in EVALUATION_KINDS:
            raise StoreError(f"unknown evaluation kind {kind!r}; expected {', '.join(EVALUATION_KINDS)}")
        if result.candidate_sha256 != candidate_id:
            raise StoreError(f"evaluation is of candidate {result.candidate_sha256[:12]}, not {candidate_id[:12]}")
        eval_id = uuid.uuid4().hex
        main, shapes, timings = R.evaluation_rows(eval_id, run_id, candidate_id, kind, result, utc_now())
        with self.db.transaction() as con:
            if not con.execute(
                "SELECT 1 FROM candidates WHERE run_id = ? AND candidate_id = ?", [run_id, candidate_id]
            ).fetchone():
                raise StoreError(f"candidate {candidate_id[:12]} is not part of run {run_id!r}")
            _insert_environment(con, result.fingerprint)
            insert(con, "evaluations", main)
            for row in shapes:
                insert(con, "evaluation_shapes", row)
            for row in timings:
                insert(con, "evaluation_timings", row)
        return eval_id

    def evaluations(
        self, run_id: Optional[str] = None, candidate_id: Optional[str] = None, kind: Optional[str] = None
    ) -> list[tuple[str, str, str, EvalResult]]:
        """Oldest first."""
        where, params = where_equal(run_id=run_id, candidate_id=candidate_id, kind=kind)
        found = self.db.query(
            f"SELECT eval_id, run_id, candidate_id, result_json FROM evaluations{where} ORDER BY seq",
            params,
        )
        return [(r["eval_id"], r["run_id"], r["candidate_id"], R.evaluation_from_row(r)) for r in found]

    def get_evaluation(self, eval_id: str) -> EvalResult:
        found = self.db.query("SELECT result_json FROM evaluations WHERE eval_id = ?", [eval_id])
        if not found:
            raise StoreError(f"unknown evaluation {eval_id!r}")
        return R.evaluation_from_row(found[0])

    # -- llm calls -----------------------------------------------------------------------------------
    def record_llm_call(self, call: LLMCall) -> None:
        with self.db.transaction() as con:
            if con.execute("SELECT 1 FROM llm_calls WHERE call_id = ?", [call.call_id]).fetchone():
                raise StoreError(f"llm call {call.call_id} is already recorded")
            insert(con, "llm_calls", R.record_row(call))

    def llm_calls(self, run_id: Optional[str] = None) -> list[LLMCall]:
        """Oldest first; all calls when no run is given."""
        where, params = where_equal(run_id=run_id)
        found = self.db.query(f"SELECT * FROM llm_calls{where} ORDER BY seq", params)
        return [R.llm_call_from_row(r) for r in found]


def _insert_environment(con, fp: Fingerprint) -> None:
    if not con.execute("SELECT 1 FROM environments WHERE env_id = ?", [fp.key()]).fetchone():
        insert(con, "environments", R.environment_row(fp))
