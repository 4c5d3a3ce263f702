"""Which process runs a run now: a row per run, replaced by each process that starts or resumes it.

A run's status says `running` from the moment it is created until it finishes; a process killed with
kill -9 (or a machine that lost power) cannot say otherwise. The owner row lets a reader tell the two
apart: the agent checks whether that pid on that host is still the process that claimed the run
(`process_mark`: the boot id and the process's start time where the OS gives them, so a recycled pid
is not mistaken for the owner). The store records; it decides nothing about liveness.
"""

from __future__ import annotations

from typing import Optional

from store import rows as R
from store.core import StoreCore
from store.db import Database, insert
from store.errors import StoreError
from store.records import Row, RunStatus, utc_now


class RunOwner(Row):
    run_id: str
    pid: int
    host: str
    process_mark: Optional[str] = None  # "<boot id>:<start time>" on Linux; None where unknown
    claimed_at: str


class OwnersMixin(StoreCore):
    db: Database

    def claim_run(self, run_id: str, *, pid: int, host: str, process_mark: Optional[str]) -> RunOwner:
        """Record this process as the run's owner; a run that was interrupted or failed is running again."""
        owner = RunOwner(run_id=run_id, pid=pid, host=host, process_mark=process_mark, claimed_at=utc_now())
        with self.db.transaction() as con:
            found = con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if not found:
                raise StoreError(f"unknown run {run_id!r}")
            if found[0] == RunStatus.finished.value:
                raise StoreError(f"run {run_id} already finished; nothing to claim")
            con.execute("DELETE FROM run_owners WHERE run_id = ?", [run_id])
            insert(con, "run_owners", R.record_row(owner))
            con.execute(
                "UPDATE runs SET status = ?, finished_at = NULL WHERE run_id = ?", [RunStatus.running.value, run_id]
            )
        return owner

    def run_owners(self, run_ids: Optional[list[str]] = None) -> dict[str, RunOwner]:
        """The latest claim of each run (all runs when `run_ids` is None)."""
        if run_ids is not None and not run_ids:
            return {}
        sql, params = "SELECT * FROM run_owners", []
        if run_ids is not None:
            sql += f" WHERE run_id IN ({', '.join('?' for _ in run_ids)})"
            params = list(run_ids)
        return {r["run_id"]: R.from_row(RunOwner, r) for r in self.db.query(sql, params)}
