"""Several processes on one store: nothing is lost, nothing is corrupted, a busy store says so."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

import duckdb
import pytest
from test_store_factories import TESTS_DIR, outcome, run, writer_summary

from store import Store, StoreError
from store.home import DB_FILENAME, LOCK_FILENAME

WRITER = str(TESTS_DIR / "test_store_factories.py")


def _writers(home, specs: list[tuple[str, int, int]]) -> list[subprocess.Popen]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return [
        subprocess.Popen(
            [sys.executable, WRITER, str(home), tag, str(n), str(k)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag, n, k in specs
    ]


def _wait(procs: list[subprocess.Popen], timeout_s: float = 240) -> list[str]:
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout_s)
        assert p.returncode == 0, err[-2000:]
        outs.append(out)
    return outs


def test_three_processes_writing_candidates_and_evaluations_at_once_lose_no_row(tmp_path):
    home = tmp_path / "home"
    Store.open(home).close()
    n = 6
    _wait(_writers(home, [("a", n, 0), ("b", n, 0), ("c", n, 0)]))

    con = duckdb.connect(str(home / DB_FILENAME), read_only=True)  # the file opens cleanly
    try:
        per_run = dict(
            con.execute("SELECT run_id, count(*) FROM candidates GROUP BY run_id ORDER BY run_id").fetchall()
        )
        evals = dict(con.execute("SELECT run_id, count(*) FROM evaluations GROUP BY run_id ORDER BY run_id").fetchall())
        timings = con.execute("SELECT count(*) FROM evaluation_timings").fetchone()[0]
        seqs = [r[0] for r in con.execute("SELECT seq FROM candidates").fetchall()]
    finally:
        con.close()
    assert per_run == {"run-a": n, "run-b": n, "run-c": n}
    assert evals == {"run-a": n, "run-b": n, "run-c": n}
    assert timings == 3 * n * 2
    assert len(set(seqs)) == 3 * n
    with Store.open(home) as store:
        for tag in "abc":
            cands = store.candidates(f"run-{tag}")
            assert [c.generation for c in cands] == list(range(n))  # each writer's order is kept
            assert all(r.passed for _, _, _, r in store.evaluations(run_id=f"run-{tag}"))


def test_vectors_written_by_other_processes_are_searchable_from_a_store_opened_before(tmp_path):
    home = tmp_path / "home"
    with Store.open(home) as store:
        mine = outcome(0, summary="parent: the seed kernel, one row per program")
        store.add_outcome(mine)  # this process now holds a loaded Chroma index
        assert store.vector_count("outcomes") == 1
        # Cache the writers' texts here, so they need no model (the import alone costs 7 s each).
        store.embed([writer_summary(tag, i) for tag in "xy" for i in range(3)])
        outs = _wait(_writers(home, [("x", 1, 3), ("y", 1, 3)]))
        assert [o.strip().splitlines()[-1] for o in outs] == ["model_calls=0", "model_calls=0"]

        assert store.vector_count("outcomes") == 7
        ids = {o.outcome_id for o in store.outcomes()}
        hits = store.vector_search("outcomes", "persistent grid on H200", k=10)
        assert {i for i, _ in hits} == ids
        store.add_outcome(outcome(9, summary="parent again: two rows per program"))
    with Store.open(home) as later:
        assert later.vector_count("outcomes") == 8


def test_a_store_held_by_another_process_past_the_timeout_raises_busy(tmp_path):
    home = tmp_path / "home"
    store = Store.open(home, lock_timeout_s=0.3)
    store.create_run(run("r1"))
    holder = os.open(home / LOCK_FILENAME, os.O_RDWR)  # a separate lock, as another process holds
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="busy"):
            store.get_run("r1")
        assert time.monotonic() - started >= 0.3
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
    assert store.get_run("r1").run_id == "r1"
    store.close()


def test_a_program_outside_kernelscout_holding_the_file_is_waited_for(tmp_path):
    home = tmp_path / "home"
    Store.open(home).close()
    hold = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('open', flush=True); "
            "time.sleep(1.0); c.close()",
            str(home / DB_FILENAME),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert hold.stdout.readline().strip() == "open"
    with Store.open(home, lock_timeout_s=20) as store:
        store.create_run(run("after-the-shell"))
        assert store.get_run("after").run_id == "after-the-shell"
    assert hold.wait(timeout=20) == 0


def test_session_holds_one_connection_across_calls(tmp_path):
    with Store.open(tmp_path / "home") as store:
        with store.session() as con:
            store.create_run(run("batched"))
            store.create_run(run("batched-2"))
            assert store.db._con is con  # the calls joined the session's connection
        assert store.db._con is None  # and it is closed afterwards, so other processes can write
        assert {r.run_id for r in store.list_runs()} == {"batched", "batched-2"}
