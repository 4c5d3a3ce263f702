"""Ctrl-C and SIGTERM during a search: finish the bookkeeping, mark the run, say how to go on, exit 3.

The session writes a candidate before evaluating it and an evaluation row marks it done, so stopping
between two writes loses nothing that `kscout resume` cannot redo. What an interrupt must still do
is say so: the run is marked `interrupted` (not left `running` forever), and the user is told the
command that continues it.

`RunInterrupted` is what the CLI maps to exit code 3. Once the session raises its own typed
interrupt (after recording the run as interrupted itself), `guarded_session` only needs to
translate that exception; until then it catches KeyboardInterrupt and marks the run here.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Callable, Iterator, Optional

from evaluation.errors import KscoutError

EXIT_INTERRUPTED = 3


class RunInterrupted(KscoutError):
    """A search stopped by Ctrl-C or SIGTERM; the run can be resumed."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, run_id: Optional[str], signal_name: str = "SIGINT"):
        self.run_id = run_id
        self.signal_name = signal_name
        where = f"run {run_id} marked interrupted" if run_id else "before the run was created"
        super().__init__(f"interrupted ({signal_name}): {where}")

    def hint(self) -> Optional[str]:
        return f"resume with: kscout resume {self.run_id}" if self.run_id else None


class _Terminated(KeyboardInterrupt):
    """SIGTERM, delivered the way Ctrl-C is so one path handles both."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises in the main thread like Ctrl-C instead of killing the process."""

    def raise_terminated(signum, frame):
        raise _Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, raise_terminated)
    except ValueError:  # not the main thread: leave the default
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _session_interrupted() -> type:
    from agent.search.session import Interrupted

    return Interrupted


def mark_interrupted(open_store: Callable, run_id: str) -> None:
    """Record the run as interrupted, unless it finished after all (the interrupt came too late)."""
    from store.records import RunStatus

    with open_store() as st:
        run = st.get_run(run_id)
        if run.status is RunStatus.running:
            st.finish_run(
                run_id, status=RunStatus.interrupted, stop_reason="interrupted", best_candidate_id=run.best_candidate_id
            )


def guarded_session(open_store: Callable, run: Callable[[], str], current_run: Callable[[], Optional[str]]) -> str:
    """Run a session (`run()` returns the run id); an interrupt becomes a marked run and RunInterrupted.

    `current_run()` names the run once the session has created it (the CLI learns it from the
    session's first event). A second Ctrl-C while the run is being marked is not allowed to leave it
    unmarked: SIGINT is ignored for those few milliseconds.
    """
    try:
        with sigterm_as_interrupt():
            return run()
    except _session_interrupted() as exc:  # the session recorded the run itself, after cancelling its executor
        name = "SIGTERM" if isinstance(exc.__context__, _Terminated) else "SIGINT"
        raise RunInterrupted(exc.run_id, name) from None
    except KeyboardInterrupt as exc:  # before the session existed, or outside its loop
        name = "SIGTERM" if isinstance(exc, _Terminated) else "SIGINT"
        run_id = current_run()
        if run_id is not None:
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                mark_interrupted(open_store, run_id)
            finally:
                signal.signal(signal.SIGINT, previous)
        raise RunInterrupted(run_id, name) from None
