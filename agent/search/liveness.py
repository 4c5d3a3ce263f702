"""Is a run's process still there? The difference between `running` and `stale` in `kscout runs`.

A run's row says `running` from its creation to its end; a process killed with kill -9 cannot change
that. The process that runs a run claims it in the store (pid, host and a mark of the process's own
start), and a reader on the same host checks that this pid is still that process. A recycled pid
fails the check through the mark (boot id and start time, Linux); on another host nothing can be
checked from here, so such a run is shown as running there, never guessed stale.
"""

from __future__ import annotations

import os
import socket
from typing import Optional

from store.records import RunRecord, RunStatus

STALE = "stale"


def process_mark(pid: int) -> Optional[str]:
    """ "<boot id>:<start time in clock ticks>" of a live process, or None where /proc does not say."""
    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    # Field 22 (starttime) counted after the command name, which may itself hold spaces and parentheses.
    fields = stat[stat.rindex(")") + 2 :].split()
    return f"{boot}:{fields[19]}"


def this_process() -> tuple[int, str, Optional[str]]:
    pid = os.getpid()
    return pid, socket.gethostname(), process_mark(pid)


def owner_alive(owner) -> Optional[bool]:
    """True/False for an owner on this host; None for one on another host (not checkable here)."""
    if owner.host != socket.gethostname():
        return None
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user holds that pid: not ours any more
        return False
    if owner.process_mark is None:
        return True
    return process_mark(owner.pid) == owner.process_mark


def run_state(run: RunRecord, owner) -> str:
    """What `kscout runs` shows: the stored status, or `stale` for a running run whose process is gone.

    A run nobody claimed (written by an API caller that does not claim, or by an older kscout) keeps
    its stored status: nothing says it is dead.
    """
    if run.status is not RunStatus.running or owner is None:
        return run.status.value
    return STALE if owner_alive(owner) is False else run.status.value


def claim(store, run_id: str):
    """Record this process as the run's owner (what makes a later kill -9 visible as `stale`)."""
    pid, host, mark = this_process()
    return store.claim_run(run_id, pid=pid, host=host, process_mark=mark)
