"""Schema migrations: named functions in a registry, each committed together with its bookkeeping row.

A migration is never edited once released; a change to the schema is a new function `mNNN_what(con)`.
`migrate()` runs when a store opens (under the store lock) and applies, in order, every registered
migration whose name is not yet in `_migrations`; the DDL and the `_migrations` row share one
transaction, so a crash leaves either both or neither. A store that names a migration this code does
not know was written by a newer kernelscout and is refused rather than guessed at.

Conventions: times are ISO-8601 UTC strings (VARCHAR, exactly as the records carry them); floats are
DOUBLE and never rounded; tuples are VARCHAR[]; nested records are JSON text in `*_json` columns;
`seq` columns (from a sequence) give insertion order across processes.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

import duckdb

from store.errors import StoreError
from store.records import utc_now

Migration = Callable[[duckdb.DuckDBPyConnection], None]
_NAME = re.compile(r"^m(\d{3})_[a-z0-9_]+$")


class MigrationRegistry:
    """An ordered set of migrations; names are unique and their numbers strictly increase."""

    def __init__(self) -> None:
        self._items: list[tuple[str, Migration]] = []

    def register(self, fn: Migration) -> Migration:
        name = fn.__name__
        if not _NAME.match(name):
            raise ValueError(f"migration name {name!r} must look like m001_what")
        if any(existing == name for existing, _ in self._items):
            raise ValueError(f"migration {name!r} is registered twice")
        if self._items and name <= self._items[-1][0]:
            raise ValueError(f"migration {name!r} must sort after {self._items[-1][0]!r}")
        self._items.append((name, fn))
        return fn

    def __iter__(self):
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def names(self) -> list[str]:
        return [name for name, _ in self._items]

    def upto(self, last: str) -> list[tuple[str, Migration]]:
        """The prefix of the registry ending at `last` (an "older" schema, for upgrade tests)."""
        names = self.names()
        if last not in names:
            raise ValueError(f"unknown migration {last!r}")
        return self._items[: names.index(last) + 1]


MIGRATIONS = MigrationRegistry()


def migrate(con: duckdb.DuckDBPyConnection, migrations: Iterable[tuple[str, Migration]] | None = None) -> list[str]:
    """Apply pending migrations in order; return the names applied now."""
    items = list(MIGRATIONS if migrations is None else migrations)
    con.execute("CREATE TABLE IF NOT EXISTS _migrations (name VARCHAR PRIMARY KEY, applied_at VARCHAR NOT NULL)")
    applied = {row[0] for row in con.execute("SELECT name FROM _migrations").fetchall()}
    unknown = sorted(applied - set(MIGRATIONS.names()))
    if unknown:
        raise StoreError(f"store was written by a newer kernelscout (unknown migrations: {', '.join(unknown)})")
    done: list[str] = []
    for name, fn in items:
        if name in applied:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            fn(con)
            con.execute("INSERT INTO _migrations VALUES (?, ?)", [name, utc_now()])
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
        done.append(name)
    return done


@MIGRATIONS.register
def m001_initial(con: duckdb.DuckDBPyConnection) -> None:
    """Everything a search writes and reads back: provenance, candidates, evaluations, knowledge."""
    con.execute(
        """
        CREATE TABLE _meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);
        CREATE SEQUENCE candidates_seq;
        CREATE SEQUENCE evaluations_seq;
        CREATE SEQUENCE outcomes_seq;
        CREATE SEQUENCE documents_seq;

        CREATE TABLE environments (
            env_id VARCHAR PRIMARY KEY,
            device_kind VARCHAR NOT NULL,
            device_name VARCHAR NOT NULL,
            arch VARCHAR NOT NULL,
            driver_version VARCHAR,
            cuda_version VARCHAR,
            hip_version VARCHAR,
            triton_version VARCHAR NOT NULL,
            torch_version VARCHAR NOT NULL,
            python_version VARCHAR NOT NULL,
            kernelscout_version VARCHAR NOT NULL,
            triton_interpret BOOLEAN NOT NULL,
            fingerprint_json VARCHAR NOT NULL,
            first_seen VARCHAR NOT NULL
        );

        CREATE TABLE problems (
            problem_id VARCHAR PRIMARY KEY,
            name VARCHAR NOT NULL,
            op_family VARCHAR NOT NULL,
            source_path VARCHAR NOT NULL,
            source_sha256 VARCHAR NOT NULL,
            builtin BOOLEAN NOT NULL,
            description VARCHAR NOT NULL,
            dtypes VARCHAR[] NOT NULL,
            shape_cases_json VARCHAR NOT NULL,
            tolerances_json VARCHAR NOT NULL,
            has_byte_model BOOLEAN NOT NULL,
            has_flop_model BOOLEAN NOT NULL,
            seed_path VARCHAR,
            info_json VARCHAR NOT NULL,
            first_seen VARCHAR NOT NULL
        );

        CREATE TABLE documents (
            seq BIGINT NOT NULL DEFAULT nextval('documents_seq'),
            document_id VARCHAR PRIMARY KEY,
            source VARCHAR NOT NULL,
            title VARCHAR NOT NULL,
            vendor VARCHAR,
            devices VARCHAR[] NOT NULL,
            doc_version VARCHAR,
            source_url VARCHAR,
            sha256 VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            op_families VARCHAR[] NOT NULL,
            builtin BOOLEAN NOT NULL,
            ingested_at VARCHAR NOT NULL
        );

        CREATE TABLE chunks (
            chunk_id VARCHAR PRIMARY KEY,
            document_id VARCHAR NOT NULL,
            ordinal INTEGER NOT NULL,
            heading_path VARCHAR[] NOT NULL,
            text VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            text_sha256 VARCHAR NOT NULL
        );

        CREATE TABLE runs (
            run_id VARCHAR PRIMARY KEY,
            problem_id VARCHAR NOT NULL,
            problem_name VARCHAR NOT NULL,
            op_family VARCHAR NOT NULL,
            device VARCHAR NOT NULL,
            arch VARCHAR NOT NULL,
            env_id VARCHAR NOT NULL,
            proposer VARCHAR NOT NULL,
            model VARCHAR,
            seed BIGINT NOT NULL,
            max_evaluations INTEGER NOT NULL,
            max_minutes DOUBLE,
            target_speedup DOUBLE,
            stall_limit INTEGER,
            max_cost_usd DOUBLE,
            stop_rule_json VARCHAR NOT NULL,
            status VARCHAR NOT NULL,
            stop_reason VARCHAR,
            best_candidate_id VARCHAR,
            started_at VARCHAR NOT NULL,
            finished_at VARCHAR,
            config_json VARCHAR NOT NULL
        );

        -- Content rows: one per distinct source, shared by every run that proposed it.
        CREATE TABLE candidate_sources (
            candidate_id VARCHAR PRIMARY KEY,
            source VARCHAR NOT NULL,
            first_seen VARCHAR NOT NULL
        );

        -- Event rows: a candidate as one run proposed it, with its lineage.
        CREATE TABLE candidates (
            seq BIGINT NOT NULL DEFAULT nextval('candidates_seq'),
            run_id VARCHAR NOT NULL,
            candidate_id VARCHAR NOT NULL,
            parent_id VARCHAR,
            generation INTEGER NOT NULL,
            proposer VARCHAR NOT NULL,
            model VARCHAR,
            prompt_template VARCHAR,
            prompt_sha256 VARCHAR,
            rationale VARCHAR NOT NULL,
            transformation_tags VARCHAR[] NOT NULL,
            knobs_json VARCHAR NOT NULL,
            policy_action VARCHAR,
            policy_reason VARCHAR,
            created_at VARCHAR NOT NULL,
            PRIMARY KEY (run_id, candidate_id)
        );

        CREATE TABLE evaluations (
            seq BIGINT NOT NULL DEFAULT nextval('evaluations_seq'),
            eval_id VARCHAR PRIMARY KEY,
            run_id VARCHAR NOT NULL,
            candidate_id VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            env_id VARCHAR NOT NULL,
            problem_id VARCHAR NOT NULL,
            device VARCHAR NOT NULL,
            status VARCHAR NOT NULL,
            failed_stage VARCHAR,
            error_class VARCHAR,
            message VARCHAR,
            stderr_tail VARCHAR NOT NULL,
            n_shapes INTEGER NOT NULL,
            n_shapes_failed INTEGER NOT NULL,
            max_abs_error DOUBLE,
            max_rel_error DOUBLE,
            n_timed_cases INTEGER NOT NULL,
            speedup_vs_eager DOUBLE,
            speedup_vs_eager_low DOUBLE,
            speedup_vs_eager_high DOUBLE,
            speedup_vs_compile DOUBLE,
            speedup_vs_compile_low DOUBLE,
            speedup_vs_compile_high DOUBLE,
            timing_note VARCHAR,
            ceiling_gbps DOUBLE,
            triton_launches INTEGER NOT NULL,
            kernels_json VARCHAR NOT NULL,
            started_at VARCHAR NOT NULL,
            duration_s DOUBLE NOT NULL,
            recorded_at VARCHAR NOT NULL,
            result_json VARCHAR NOT NULL
        );

        -- Per-shape correctness of one evaluation (the worst trial of each case).
        CREATE TABLE evaluation_shapes (
            eval_id VARCHAR NOT NULL,
            ordinal INTEGER NOT NULL,
            case_id VARCHAR NOT NULL,
            dtype VARCHAR NOT NULL,
            passed BOOLEAN NOT NULL,
            trials INTEGER NOT NULL,
            atol DOUBLE NOT NULL,
            rtol DOUBLE NOT NULL,
            max_abs_error DOUBLE,
            max_rel_error DOUBLE,
            mismatch_count BIGINT NOT NULL,
            numel BIGINT NOT NULL,
            message VARCHAR
        );

        -- Per-case timing distributions of one evaluation, with the baselines of the same session.
        CREATE TABLE evaluation_timings (
            eval_id VARCHAR NOT NULL,
            ordinal INTEGER NOT NULL,
            case_id VARCHAR NOT NULL,
            dtype VARCHAR NOT NULL,
            latency_ms_p20 DOUBLE NOT NULL,
            latency_ms_p50 DOUBLE NOT NULL,
            latency_ms_p80 DOUBLE NOT NULL,
            latency_ms_min DOUBLE NOT NULL,
            latency_ms_mean DOUBLE NOT NULL,
            n_samples INTEGER NOT NULL,
            n_warmup INTEGER NOT NULL,
            l2_flushed BOOLEAN NOT NULL,
            method VARCHAR NOT NULL,
            eager_latency_ms_p50 DOUBLE,
            compile_latency_ms_p50 DOUBLE,
            speedup_vs_eager DOUBLE,
            speedup_vs_eager_low DOUBLE,
            speedup_vs_eager_high DOUBLE,
            speedup_vs_compile DOUBLE,
            speedup_vs_compile_low DOUBLE,
            speedup_vs_compile_high DOUBLE,
            bytes_moved BIGINT,
            flops BIGINT,
            achieved_gbps DOUBLE,
            achieved_tflops DOUBLE,
            pct_of_ceiling DOUBLE,
            baselines_json VARCHAR NOT NULL
        );

        CREATE TABLE outcomes (
            seq BIGINT NOT NULL DEFAULT nextval('outcomes_seq'),
            outcome_id VARCHAR PRIMARY KEY,
            op_family VARCHAR NOT NULL,
            problem_id VARCHAR NOT NULL,
            device_name VARCHAR NOT NULL,
            arch VARCHAR NOT NULL,
            shape_bucket VARCHAR NOT NULL,
            dtype VARCHAR NOT NULL,
            transformation VARCHAR NOT NULL,
            candidate_id VARCHAR NOT NULL,
            parent_id VARCHAR,
            baseline VARCHAR NOT NULL,
            speedup DOUBLE,
            speedup_low DOUBLE,
            speedup_high DOUBLE,
            latency_ms_p50 DOUBLE,
            status VARCHAR NOT NULL,
            triton_version VARCHAR NOT NULL,
            torch_version VARCHAR NOT NULL,
            driver_version VARCHAR,
            evidence_eval_ids VARCHAR[] NOT NULL,
            summary VARCHAR NOT NULL,
            created_at VARCHAR NOT NULL
        );

        CREATE TABLE failure_patterns (
            signature VARCHAR PRIMARY KEY,
            op_family VARCHAR NOT NULL,
            arch VARCHAR NOT NULL,
            stage VARCHAR NOT NULL,
            error_class VARCHAR NOT NULL,
            message_shape VARCHAR NOT NULL,
            count BIGINT NOT NULL,
            example_candidate_id VARCHAR NOT NULL,
            example_message VARCHAR NOT NULL,
            first_seen VARCHAR NOT NULL,
            last_seen VARCHAR NOT NULL
        );

        -- Embeddings cache: unchanged text is never embedded twice by the same model.
        CREATE TABLE embeddings (
            model VARCHAR NOT NULL,
            text_sha256 VARCHAR NOT NULL,
            dim INTEGER NOT NULL,
            vector FLOAT[] NOT NULL,
            created_at VARCHAR NOT NULL,
            PRIMARY KEY (model, text_sha256)
        );
        """
    )
    import uuid

    # The store's own id names its Chroma collections, so two stores can share one Chroma server.
    con.execute("INSERT INTO _meta VALUES ('store_uid', ?), ('created_at', ?)", [uuid.uuid4().hex, utc_now()])


@MIGRATIONS.register
def m002_llm_calls_and_promotions(con: duckdb.DuckDBPyConnection) -> None:
    """The cost ledger of the llm proposer and the append-only history of what is live where."""
    con.execute(
        """
        CREATE SEQUENCE llm_calls_seq;
        CREATE SEQUENCE promotions_seq;

        CREATE TABLE llm_calls (
            seq BIGINT NOT NULL DEFAULT nextval('llm_calls_seq'),
            call_id VARCHAR PRIMARY KEY,
            run_id VARCHAR,
            model VARCHAR NOT NULL,
            resolved_model VARCHAR,
            template_name VARCHAR NOT NULL,
            template_sha256 VARCHAR NOT NULL,
            rendered_prompt VARCHAR NOT NULL,
            response_text VARCHAR,
            prompt_tokens BIGINT,
            completion_tokens BIGINT,
            cost_usd DOUBLE,
            duration_ms DOUBLE NOT NULL,
            error VARCHAR,
            attempt INTEGER NOT NULL,
            created_at VARCHAR NOT NULL
        );

        CREATE TABLE promotions (
            seq BIGINT NOT NULL DEFAULT nextval('promotions_seq'),
            event_id VARCHAR PRIMARY KEY,
            op_family VARCHAR NOT NULL,
            problem_id VARCHAR NOT NULL,
            arch VARCHAR NOT NULL,
            candidate_id VARCHAR,
            state VARCHAR NOT NULL,
            actor VARCHAR NOT NULL,
            note VARCHAR NOT NULL,
            evidence_json VARCHAR NOT NULL,
            previous_candidate_id VARCHAR,
            created_at VARCHAR NOT NULL
        );
        """
    )


@MIGRATIONS.register
def m003_lookup_indexes(con: duckdb.DuckDBPyConnection) -> None:
    """Point lookups the loop makes on every step (evaluations of a run or a candidate)."""
    con.execute(
        """
        CREATE INDEX evaluations_run_idx ON evaluations (run_id);
        CREATE INDEX evaluations_candidate_idx ON evaluations (candidate_id);
        CREATE INDEX candidates_candidate_idx ON candidates (candidate_id);
        CREATE INDEX llm_calls_run_idx ON llm_calls (run_id);
        """
    )


@MIGRATIONS.register
def m004_run_owners(con: duckdb.DuckDBPyConnection) -> None:
    """The process that runs a run now (pid, host, its start mark), so `kscout runs` can tell a live run
    from one whose process was killed (stale) without a heartbeat."""
    con.execute(
        """
        CREATE TABLE run_owners (
            run_id VARCHAR PRIMARY KEY,
            pid INTEGER NOT NULL,
            host VARCHAR NOT NULL,
            process_mark VARCHAR,
            claimed_at VARCHAR NOT NULL
        );
        """
    )


# -- knowledge: provenance people can trust, vectors that survive a crash, rows from other teams ----


@MIGRATIONS.register
def m005_knowledge_provenance(con: duckdb.DuckDBPyConnection) -> None:
    """Who wrote a document and its front matter; section anchors; vectors owed; imported rows' origin.

    `vector_pending` holds the rows whose DuckDB commit happened but whose Chroma write has not been
    confirmed: a crash between the two leaves the row here, and the next open or ingest writes the
    vectors from the embeddings cache. `origins` says where an imported row came from (the exporting
    store, its team, user and host, the bundle) and, for a row that conflicted with one of ours, the id
    it was kept beside; rows of this store have no entry.
    """
    con.execute(
        """
        ALTER TABLE documents ADD COLUMN origin VARCHAR;
        ALTER TABLE documents ADD COLUMN metadata_json VARCHAR;
        ALTER TABLE documents ADD COLUMN retagged_at VARCHAR;
        UPDATE documents SET origin = CASE WHEN builtin THEN 'project' ELSE 'vendor' END,
                             metadata_json = '{}';
        ALTER TABLE chunks ADD COLUMN anchor VARCHAR;

        CREATE TABLE vector_pending (
            collection VARCHAR NOT NULL,
            row_id VARCHAR NOT NULL,
            since VARCHAR NOT NULL,
            PRIMARY KEY (collection, row_id)
        );

        CREATE TABLE origins (
            table_name VARCHAR NOT NULL,
            row_id VARCHAR NOT NULL,
            original_id VARCHAR NOT NULL,
            origin_store VARCHAR NOT NULL,
            team VARCHAR,
            user_name VARCHAR,
            host VARCHAR,
            kernelscout_version VARCHAR,
            bundle_id VARCHAR NOT NULL,
            exported_at VARCHAR NOT NULL,
            imported_at VARCHAR NOT NULL,
            conflicts_with VARCHAR,
            PRIMARY KEY (table_name, row_id)
        );
        """
    )


@MIGRATIONS.register
def m006_outcome_schedule_kind(con: duckdb.DuckDBPyConnection) -> None:
    """Outcomes keyed by schedule kind as well as op family ("matmul+row"), so what a row kernel
    learned on one graph seeds the row kernels of another (NULL for outcomes written before)."""
    con.execute("ALTER TABLE outcomes ADD COLUMN schedule_kind VARCHAR")


@MIGRATIONS.register
def m007_document_history(con: duckdb.DuckDBPyConnection) -> None:
    """Every change to a document's tags (vendor, devices, version, URL, kind, origin, ops) after its
    first ingest, with the old value and what changed it ("ingest" with an explicit flag, a new header,
    or "retag"). Values are JSON text; rows are appended, never edited, and go when the document is
    forgotten."""
    con.execute(
        """
        CREATE SEQUENCE document_history_seq;
        CREATE TABLE document_history (
            seq BIGINT NOT NULL DEFAULT nextval('document_history_seq'),
            document_id VARCHAR NOT NULL,
            field VARCHAR NOT NULL,
            old_json VARCHAR NOT NULL,
            new_json VARCHAR NOT NULL,
            cause VARCHAR NOT NULL,
            changed_at VARCHAR NOT NULL
        );
        CREATE INDEX document_history_document_idx ON document_history (document_id);
        """
    )
