"""Where an evaluation's time goes, for the throughput bench (`python -m evaluation.bench --throughput`).

While `recording()` is active, the harness appends one row per worker process it ran: its role
(check, timing, baselines, remeasure), whether it came warm from the pool, the parent's wall-clock
stamps (spawned, request sent, exited), the worker's own stamps and seconds per kind of work
(`protocol.Phases`), and the seconds the parent spent judging its outputs. Nothing is recorded
otherwise, and nothing here feeds a verdict.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional

_LOCK = threading.Lock()
_ROWS: Optional[list[dict[str, Any]]] = None


@contextmanager
def recording() -> Iterator[list[dict[str, Any]]]:
    global _ROWS
    rows: list[dict[str, Any]] = []
    with _LOCK:
        _ROWS = rows
    try:
        yield rows
    finally:
        with _LOCK:
            _ROWS = None


def active() -> bool:
    return _ROWS is not None


def record(row: dict[str, Any]) -> None:
    with _LOCK:
        if _ROWS is not None:
            _ROWS.append(row)
