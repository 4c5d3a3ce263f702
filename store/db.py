"""The DuckDB file, shared safely between processes.

DuckDB lets one process at a time open a file for writing, and a process that keeps the file open
blocks every other kernelscout session. So no connection outlives an operation: each operation takes
an exclusive `fcntl.flock` on `store.lock` beside the database, opens DuckDB, runs one short
transaction, closes DuckDB (which checkpoints the WAL) and releases the lock. Two agent sessions
therefore interleave their writes instead of failing, and a crash mid-operation leaves at most an
uncommitted transaction that DuckDB rolls back on the next open. Opening and closing cost 20-100 ms (more
on a loaded machine), small beside an evaluation; `locked()` is reentrant, so a caller that batches
work holds one connection, and `exclusive()` takes the lock alone for work on Chroma's files.

A process outside kernelscout (a `duckdb` shell) does not take the flock: when DuckDB itself reports
its file lock we retry with backoff until the lock timeout, then raise a `StoreError` naming the file.
Readers take the same exclusive lock: reads are short, and one rule is easier to trust than two.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb

from store.errors import StoreError, one_line

DEFAULT_LOCK_TIMEOUT_S = 60.0


class Database:
    def __init__(self, path: Path, lock_path: Path, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S):
        self.path = Path(path)
        self.lock_path = Path(lock_path)
        self.lock_timeout_s = lock_timeout_s
        self._thread_lock = threading.RLock()
        self._lock_depth = 0
        self._con_depth = 0
        self._con: duckdb.DuckDBPyConnection | None = None
        self._lock_fd: int | None = None
        self._in_transaction = False

    # -- locking -------------------------------------------------------------------------------
    def _acquire_file_lock(self, deadline: float) -> int:
        # A fresh descriptor per acquisition: flock belongs to the open file description, which a
        # forked child would otherwise share (and "hold" the parent's lock).
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open the store lock {self.lock_path}: {exc.strerror}") from exc
        delay = 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise StoreError(
                        f"store {self.path} is busy: another process held {self.lock_path} "
                        f"for more than {self.lock_timeout_s:g} s"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)

    def _connect(self, deadline: float) -> duckdb.DuckDBPyConnection:
        if self.path.exists() and not self.path.is_file():
            raise StoreError(f"store file {self.path} is not a regular file")
        delay = 0.01
        while True:
            try:
                return duckdb.connect(str(self.path))
            except duckdb.IOException as exc:
                text = str(exc)
                if "lock" in text.lower() and time.monotonic() < deadline:
                    time.sleep(delay)  # a process outside kernelscout has the file open
                    delay = min(delay * 2, 0.5)
                    continue
                if "lock" in text.lower():
                    raise StoreError(f"store {self.path} is locked by another program: {one_line(text)}") from exc
                raise StoreError(f"cannot open store {self.path}: {one_line(text)}") from exc
            except duckdb.Error as exc:
                raise StoreError(f"store {self.path} is unreadable or corrupt: {one_line(str(exc))}") from exc

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the inter-process lock without opening DuckDB (for work on files beside it)."""
        with self._thread_lock:
            if self._lock_depth == 0:
                self._lock_fd = self._acquire_file_lock(time.monotonic() + self.lock_timeout_s)
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    fd, self._lock_fd = self._lock_fd, None
                    if fd is not None:
                        fcntl.flock(fd, fcntl.LOCK_UN)
                        os.close(fd)

    @contextmanager
    def locked(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Hold the inter-process lock and an open connection; nested uses share them.

        A damaged file (truncated, overwritten) may open and only fail when a query reaches the missing
        block: that failure becomes a StoreError naming the file, so the CLI prints one line.
        """
        with self.exclusive():
            if self._con is None:
                self._con = self._connect(time.monotonic() + self.lock_timeout_s)
            self._con_depth += 1
            try:
                yield self._con
            except duckdb.Error as exc:
                if is_corruption(exc):
                    raise StoreError(
                        f"store {self.path} is unreadable or corrupt: {one_line(str(exc))} "
                        "(restore it from a backup, or move it aside to start a new store)"
                    ) from exc
                raise
            finally:
                self._con_depth -= 1
                if self._con_depth == 0:
                    con, self._con = self._con, None
                    con.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One atomic unit under the lock; a nested call joins the outer transaction."""
        with self.locked() as con:
            if self._in_transaction:
                yield con
                return
            con.execute("BEGIN TRANSACTION")
            self._in_transaction = True
            try:
                yield con
            except BaseException:
                self._in_transaction = False
                con.execute("ROLLBACK")
                raise
            self._in_transaction = False
            try:
                con.execute("COMMIT")
            except duckdb.Error as exc:
                raise StoreError(f"store {self.path}: commit failed: {one_line(str(exc))}") from exc

    # -- small helpers ---------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.locked() as con:
            return fetch_dicts(con, sql, params)


_CORRUPTION_MARKERS = (
    "corrupt database file",
    "could not read enough bytes",
    "checksum",
    "not a valid duckdb",
    "failed to read",
    "database file is damaged",
)


def is_corruption(exc: BaseException) -> bool:
    """DuckDB reports a damaged file through several exception types; its messages say which it is."""
    text = str(exc).lower()
    return any(marker in text for marker in _CORRUPTION_MARKERS)


def fetch_dicts(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> list[dict]:
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def insert(con: duckdb.DuckDBPyConnection, table: str, row: dict[str, Any]) -> None:
    cols = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    con.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(row.values()))


def where_equal(**equal: Any) -> tuple[str, list]:
    """` WHERE a = ? AND b = ?` for the filters that were given (None means no filter)."""
    given = {k: v for k, v in equal.items() if v is not None}
    if not given:
        return "", []
    return " WHERE " + " AND ".join(f"{k} = ?" for k in given), list(given.values())
