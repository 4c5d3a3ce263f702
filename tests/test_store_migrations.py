"""The store file: where it lives, how its schema is created and upgraded, and what a bad file does."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from test_store_factories import candidate, run

from store import Store, StoreError
from store.home import DB_FILENAME, default_home
from store.migrations import MIGRATIONS, MigrationRegistry, migrate


def _columns(con, table: str) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table],
        ).fetchall()
    ]


def test_blank_store_gets_the_exact_columns_of_its_key_tables(tmp_path):
    Store.open(tmp_path).close()
    con = duckdb.connect(str(tmp_path / DB_FILENAME))
    try:
        assert _columns(con, "_migrations") == ["name", "applied_at"]
        assert _columns(con, "candidates") == [
            "seq",
            "run_id",
            "candidate_id",
            "parent_id",
            "generation",
            "proposer",
            "model",
            "prompt_template",
            "prompt_sha256",
            "rationale",
            "transformation_tags",
            "knobs_json",
            "policy_action",
            "policy_reason",
            "created_at",
        ]
        assert _columns(con, "candidate_sources") == ["candidate_id", "source", "first_seen"]
        assert _columns(con, "evaluations") == [
            "seq",
            "eval_id",
            "run_id",
            "candidate_id",
            "kind",
            "env_id",
            "problem_id",
            "device",
            "status",
            "failed_stage",
            "error_class",
            "message",
            "stderr_tail",
            "n_shapes",
            "n_shapes_failed",
            "max_abs_error",
            "max_rel_error",
            "n_timed_cases",
            "speedup_vs_eager",
            "speedup_vs_eager_low",
            "speedup_vs_eager_high",
            "speedup_vs_compile",
            "speedup_vs_compile_low",
            "speedup_vs_compile_high",
            "timing_note",
            "ceiling_gbps",
            "triton_launches",
            "kernels_json",
            "started_at",
            "duration_s",
            "recorded_at",
            "result_json",
        ]
        assert _columns(con, "evaluation_timings")[:13] == [
            "eval_id",
            "ordinal",
            "case_id",
            "dtype",
            "latency_ms_p20",
            "latency_ms_p50",
            "latency_ms_p80",
            "latency_ms_min",
            "latency_ms_mean",
            "n_samples",
            "n_warmup",
            "l2_flushed",
            "method",
        ]
        assert _columns(con, "outcomes") == [
            "seq",
            "outcome_id",
            "op_family",
            "problem_id",
            "device_name",
            "arch",
            "shape_bucket",
            "dtype",
            "transformation",
            "candidate_id",
            "parent_id",
            "baseline",
            "speedup",
            "speedup_low",
            "speedup_high",
            "latency_ms_p50",
            "status",
            "triton_version",
            "torch_version",
            "driver_version",
            "evidence_eval_ids",
            "summary",
            "created_at",
            "schedule_kind",
        ]
        assert _columns(con, "promotions") == [
            "seq",
            "event_id",
            "op_family",
            "problem_id",
            "arch",
            "candidate_id",
            "state",
            "actor",
            "note",
            "evidence_json",
            "previous_candidate_id",
            "created_at",
        ]
        assert _columns(con, "embeddings") == ["model", "text_sha256", "dim", "vector", "created_at"]
        types = dict(
            con.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'evaluation_timings'"
            ).fetchall()
        )
        assert types["latency_ms_p50"] == "DOUBLE"  # full precision, never a rounded decimal
        applied = [r[0] for r in con.execute("SELECT name FROM _migrations ORDER BY name").fetchall()]
        assert applied == MIGRATIONS.names()
    finally:
        con.close()


def test_reopening_a_current_store_applies_nothing(tmp_path):
    Store.open(tmp_path).close()
    con = duckdb.connect(str(tmp_path / DB_FILENAME))
    try:
        assert migrate(con) == []
        assert con.execute("SELECT count(*) FROM _migrations").fetchone()[0] == len(MIGRATIONS)
    finally:
        con.close()


def test_opening_an_older_store_applies_the_newer_migrations_and_keeps_its_rows(tmp_path):
    from store.db import insert
    from store.rows import run_row

    older = run("3fa2c0ffee")
    con = duckdb.connect(str(tmp_path / DB_FILENAME))
    assert migrate(con, MIGRATIONS.upto("m001_initial")) == ["m001_initial"]
    insert(con, "runs", run_row(older))
    assert "llm_calls" not in {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    con.close()

    with Store.open(tmp_path) as store:
        assert store.get_run("3fa2") == older
        # the tables m002 added work at once
        c = candidate(older.run_id)
        assert store.add_candidate(c) is True
        assert store.promotion_history() == []
        assert store.llm_calls() == []
        applied = store.db.query("SELECT name FROM _migrations ORDER BY name")
    assert [r["name"] for r in applied] == MIGRATIONS.names()


def test_a_failing_migration_leaves_neither_its_tables_nor_its_bookkeeping_row():
    registry = MigrationRegistry()

    @registry.register
    def m001_initial(con):  # noqa: F811 - the same name as the real one, in a private registry
        con.execute("CREATE TABLE half_done (x INTEGER)")
        raise RuntimeError("disk full")

    con = duckdb.connect(":memory:")
    with pytest.raises(RuntimeError, match="disk full"):
        migrate(con, registry)
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    assert "half_done" not in tables
    assert con.execute("SELECT count(*) FROM _migrations").fetchone()[0] == 0


def test_registry_refuses_a_repeated_or_out_of_order_name():
    registry = MigrationRegistry()

    def m002_b(con):
        pass

    registry.register(m002_b)
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(m002_b)

    def m001_a(con):
        pass

    with pytest.raises(ValueError, match="must sort after"):
        registry.register(m001_a)

    def add_column(con):
        pass

    with pytest.raises(ValueError, match="m001_what"):
        registry.register(add_column)
    assert registry.names() == ["m002_b"]


def test_store_from_a_newer_kernelscout_is_refused(tmp_path):
    Store.open(tmp_path).close()
    con = duckdb.connect(str(tmp_path / DB_FILENAME))
    con.execute("INSERT INTO _migrations VALUES ('m999_future', '2030-01-01T00:00:00+00:00')")
    con.close()
    with pytest.raises(StoreError, match="newer kernelscout.*m999_future"):
        Store.open(tmp_path)


def test_corrupt_store_file_raises_a_store_error_naming_the_file(tmp_path):
    (tmp_path / DB_FILENAME).write_bytes(b"this is not a database\n" * 500)
    with pytest.raises(StoreError) as info:
        Store.open(tmp_path)
    assert str(tmp_path / DB_FILENAME) in str(info.value)
    assert "\n" not in str(info.value)
    assert (tmp_path / DB_FILENAME).read_bytes().startswith(b"this is not a database")  # left as it was


def test_store_path_that_is_a_folder_raises_a_store_error(tmp_path):
    (tmp_path / DB_FILENAME).mkdir()
    with pytest.raises(StoreError, match="not a regular file"):
        Store.open(tmp_path)


def test_home_is_kscout_home_then_xdg_data_home_then_local_share(kscout_home, monkeypatch, tmp_path):
    assert default_home() == kscout_home
    with Store.open() as store:
        assert store.home == kscout_home
    assert (kscout_home / DB_FILENAME).is_file()

    monkeypatch.delenv("KSCOUT_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_home() == tmp_path / "xdg" / "kernelscout"

    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert default_home() == Path(tmp_path / "user" / ".local" / "share" / "kernelscout")
