"""Store faults the red team found (issue 10, item 6): damaged files give one line, a damaged Chroma
folder is rebuilt, a 50 MB file shows progress and is capped. (The crash between the DuckDB commit and
the Chroma write, and symlinked folders, are in tests/test_knowledge_ingest.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from knowledge.ingest import IngestOptions, ingest_builtin, ingest_paths
from knowledge.records import FileStatus
from store import Store
from store.home import DB_FILENAME

ROOT = Path(__file__).resolve().parents[1]


def _kscout(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from agent.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
    )


@pytest.fixture(scope="module")
def rows_only_store(tmp_path_factory) -> Path:
    """A store holding the shipped documents' rows (vectors off: no model needed to make it)."""
    home = tmp_path_factory.mktemp("faults") / "home"
    previous = os.environ.get("KSCOUT_VECTORS")
    os.environ["KSCOUT_VECTORS"] = "off"
    try:
        with Store.open(home) as store:
            ingest_builtin(store)
    finally:
        if previous is None:
            os.environ.pop("KSCOUT_VECTORS")
        else:
            os.environ["KSCOUT_VECTORS"] = previous
    return home


@pytest.mark.parametrize("fraction", [0.0, 0.003, 0.3, 0.5, 0.7])
def test_a_truncated_duckdb_file_gives_one_line_not_a_traceback(rows_only_store, tmp_path, fraction):
    home = tmp_path / "home"
    shutil.copytree(rows_only_store, home)
    db = home / DB_FILENAME
    with open(db, "r+b") as fh:
        fh.truncate(int(db.stat().st_size * fraction) // 4096 * 4096 + (7 if fraction == 0.003 else 0))
    failed = 0
    for args in (["docs"], ["ask", "how much shared memory per SM does an H100 have"]):
        out = _kscout(*args, "--store", str(home), env={"KSCOUT_VECTORS": "off"})
        if out.returncode == 0:
            continue  # the damage missed every block this command reads
        failed += 1
        assert out.returncode == 2, out.stderr[-1500:]
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-1500:]
        assert lines[0].startswith("kscout: error: ") and str(db) in lines[0]
    assert failed or fraction > 0.5  # up to half the file gone, the damage is always met


def test_a_corrupted_block_in_the_middle_is_reported_in_one_line(rows_only_store, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(rows_only_store, home)
    db = home / DB_FILENAME
    size = db.stat().st_size
    with open(db, "r+b") as fh:  # zero out the data blocks past the headers, keep the file's length
        fh.seek(size // 3 // 4096 * 4096)
        fh.write(b"\0" * (size // 3))
    out = _kscout("ask", "what is TMA", "--store", str(home), env={"KSCOUT_VECTORS": "off"})
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-1500:]
    assert "unreadable or corrupt" in out.stderr


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_reindex_rebuilds_a_chroma_folder_whose_sqlite_file_is_damaged(tmp_path, damage):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "h200.md").write_text("# H200\n## Memory\nThe H200 has 141 GB of HBM3e at 4.8 TB/s.\n")
    home = tmp_path / "home"
    with Store.open(home) as store:
        ingest_paths(store, [docs])
        store.add_outcome(__import__("test_knowledge_retrieve").outcome("o1", "layernorm", "NVIDIA H200", "sm_90", 1.5))
    sqlite = home / "chroma" / "chroma.sqlite3"
    with open(sqlite, "r+b") as fh:
        if damage == "garbage":
            fh.write(b"not a database " * 400)
        else:
            fh.truncate(1000)
    out = _kscout("reindex", "--store", str(home), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["counts"] == {"chunks": 1, "outcomes": 1, "failures": 0}
    moved = Path(result["damaged_chroma_moved_to"])
    assert moved.parent == home and moved.name.startswith("chroma.damaged-") and (moved / "chroma.sqlite3").exists()
    with Store.open(home) as store:
        assert store.vector_count("chunks") == 1
        assert store.vector_search("chunks", "HBM3e bandwidth", k=1)[0][0] == store.chunks()[0].chunk_id


@pytest.mark.slow
def test_a_50_mb_file_reports_chunk_progress_and_is_capped_with_a_message(tmp_path):
    big = tmp_path / "big.md"
    line = "A line of a generated log that someone ingested by mistake, with numbers 123 456.\n"
    with open(big, "w") as fh:
        fh.write("# Big\n")
        for i in range(30_000):
            fh.write(f"## Part {i}\n" + line * 20 + "\n")
    assert big.stat().st_size > 48_000_000
    progress = []
    with Store.open(tmp_path / "home") as store:
        report = ingest_paths(
            store,
            [big],
            IngestOptions(max_chunks=96),
            on_chunks=lambda name, done, total: progress.append((done, total)),
        )
        result = report.files[0]
        assert (result.status, result.chunks) == (FileStatus.added, 96)
        assert result.notes == (
            "capped at 96 chunks: the first 96 of 60000 are kept (raise --max-chunks, or split the file)",
        )
        assert progress[0][1] == 96 and progress[-1] == (96, 96)
        assert len(store.chunks()) == 96
