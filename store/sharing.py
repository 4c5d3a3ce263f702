"""Knowledge bundles: one store's documents, outcomes and failure patterns, for another store to merge.

A bundle is a folder: one Parquet file per table (written by DuckDB's COPY, read back by
`read_parquet`) and `manifest.json` naming the format version, the exporting store, team, user and
host, the embedding model, each file's row count and sha256, the exporting store's public key
(`signed_by`) and an Ed25519 `signature` over all of that (store/signing.py holds the keys).

Import refuses (`BundleRefused`, before anything is written) a bundle whose signature does not verify,
whose files differ from the signed hashes or hold other row counts than signed (rows are counted as
read, from private copies of the files, so what is checked is what is merged), or whose key this store
does not trust (`UntrustedKey`; `trust=True` trusts it for this and later imports). It merges in one
DuckDB transaction:

- Idempotent: a row already here with the same content adds nothing, so importing twice adds nothing.
- Never overwritten: a row whose id is taken here by different content is kept beside ours under
  `<id>~<first 8 of its store id>`, and its `origins` entry names the row it conflicts with.
- Provenance travels: every exported row carries the store, team, user and host it first came from
  (an imported row keeps its original origin when exported again), and import writes that into
  `origins`. The rows themselves keep their device, arch, compiler and library versions unchanged.
- Our own rows coming back (through another team's bundle) are skipped: this store is their source.

Embeddings travel too (they are keyed by model and text hash), so imported text is not embedded again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict

from store.db import fetch_dicts
from store.documents import chunk_embedding_text
from store.embeddings import text_sha256
from store.errors import BundleRefused, SigningError, StoreError, UntrustedKey
from store.failures import embedding_text
from store.records import utc_now
from store.signing import Keyring, PublicKey, parse_public_key

FORMAT = "kernelscout-knowledge-bundle"
FORMAT_VERSION = 2  # 2: the manifest is signed; version 1 carried hashes that anyone could rewrite
# Prefixed to the signed bytes, so a bundle signature can never be taken for a signature of anything else.
SIGNING_CONTEXT = b"kernelscout knowledge bundle manifest v2\n"
TABLES = ("documents", "chunks", "outcomes", "failure_patterns", "embeddings")
# Keys of the rows that carry provenance; chunks follow their document, embeddings are content-addressed.
_KEYS = {"documents": "document_id", "outcomes": "outcome_id", "failure_patterns": "signature"}
_ORIGIN_COLUMNS = (
    "origin_store",
    "origin_team",
    "origin_user",
    "origin_host",
    "origin_bundle",
    "origin_exported_at",
    "original_id",
)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BundleOrigin(_Record):
    store: str
    team: Optional[str] = None
    user_name: Optional[str] = None
    host: Optional[str] = None


class BundleTable(_Record):
    file: str
    rows: int
    sha256: str


class BundleManifest(_Record):
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    bundle_id: str
    created_at: str
    kernelscout_version: str
    origin: BundleOrigin
    embedding_model: str
    tables: dict[str, BundleTable]
    signed_by: str  # the exporting store's public key, "ed25519:<base64>" (store/signing.py)
    signature: str  # base64 Ed25519 over `signed_payload` of every other field of the manifest


class TableCounts(_Record):
    added: int = 0
    unchanged: int = 0  # already here with the same content (or our own row coming back)
    conflicts: int = 0  # same id, other content: kept beside ours


class ImportReport(_Record):
    bundle: str
    bundle_id: str
    source_label: str
    key_id: str  # the key that signed the bundle
    trusted_now: bool = False  # the import trusted that key (`trust=True`, a key not trusted before)
    tables: dict[str, TableCounts]
    added_documents: tuple[str, ...] = ()
    added_outcomes: tuple[str, ...] = ()
    added_failures: tuple[str, ...] = ()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _columns(con, table: str) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position", [table]
        ).fetchall()
    ]


def _kernelscout_version() -> str:
    try:
        from importlib.metadata import version

        return version("kernelscout")
    except Exception:  # noqa: BLE001 - running from a checkout that is not installed
        return "0.1.0+checkout"


def export_bundle(store, out: Path, origin: BundleOrigin) -> BundleManifest:
    """Write the bundle into `out`, a folder that must not exist yet (or be empty)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise StoreError(f"bundle folder {out} already exists and is not empty")
    bundle_id = uuid.uuid4().hex
    created = utc_now()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".kscout-bundle-", dir=out.parent))
    try:
        with store.db.locked() as con:
            wanted = _embedding_shas(con)
            con.execute("CREATE OR REPLACE TEMP TABLE _bundle_shas (sha VARCHAR)")
            con.executemany("INSERT INTO _bundle_shas VALUES (?)", [[s] for s in sorted(wanted)])
            tables: dict[str, BundleTable] = {}
            for table in TABLES:
                path = staging / f"{table}.parquet"
                con.execute(
                    f"COPY ({_export_query(con, table, origin, bundle_id, created)}) TO {_literal(path)} "
                    "(FORMAT parquet)"
                )
                rows = con.execute(f"SELECT count(*) FROM read_parquet({_literal(path)})").fetchone()[0]
                tables[table] = BundleTable(file=path.name, rows=rows, sha256=_sha256_file(path))
            con.execute("DROP TABLE _bundle_shas")
        keyring = Keyring.of(store)
        unsigned = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "bundle_id": bundle_id,
            "created_at": created,
            "kernelscout_version": _kernelscout_version(),
            "origin": origin.model_dump(mode="json"),
            "embedding_model": store.embedder.model_name,
            "tables": {name: t.model_dump(mode="json") for name, t in tables.items()},
            "signed_by": keyring.own_public().text,
        }
        key, signature = keyring.sign(signed_payload(unsigned))
        manifest = BundleManifest.model_validate({**unsigned, "signed_by": key.text, "signature": signature})
        (staging / "manifest.json").write_text(json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n")
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def _embedding_shas(con) -> set[str]:
    """Hashes of every text this store embeds: chunks (with headings), outcome summaries, failures."""
    from store import rows as R

    shas = {text_sha256(chunk_embedding_text(R.chunk_from_row(r))) for r in fetch_dicts(con, "SELECT * FROM chunks")}
    shas |= {text_sha256(r[0]) for r in con.execute("SELECT summary FROM outcomes").fetchall()}
    shas |= {
        text_sha256(embedding_text(r[0], r[1], r[2]))
        for r in con.execute("SELECT error_class, stage, message_shape FROM failure_patterns").fetchall()
    }
    return shas


def _export_query(con, table: str, origin: BundleOrigin, bundle_id: str, created: str) -> str:
    def q(value: Optional[str]) -> str:
        return "NULL" if value is None else "'" + value.replace("'", "''") + "'"

    if table == "embeddings":
        return "SELECT e.* FROM embeddings e JOIN _bundle_shas s ON e.text_sha256 = s.sha"
    columns = [c for c in _columns(con, table) if c != "seq"]
    cols = ", ".join(f"t.{c}" for c in columns)
    if table == "chunks":
        return f"SELECT {cols} FROM chunks t"
    key = _KEYS[table]
    # A row imported earlier keeps the origin it came with; our own rows get this store's.
    return (
        f"SELECT {cols}, "
        f"coalesce(o.origin_store, {q(origin.store)}) AS origin_store, "
        f"CASE WHEN o.row_id IS NULL THEN {q(origin.team)} ELSE o.team END AS origin_team, "
        f"CASE WHEN o.row_id IS NULL THEN {q(origin.user_name)} ELSE o.user_name END AS origin_user, "
        f"CASE WHEN o.row_id IS NULL THEN {q(origin.host)} ELSE o.host END AS origin_host, "
        f"coalesce(o.bundle_id, {q(bundle_id)}) AS origin_bundle, "
        f"coalesce(o.exported_at, {q(created)}) AS origin_exported_at, "
        f"coalesce(o.original_id, t.{key}) AS original_id "
        f"FROM {table} t LEFT JOIN origins o ON o.table_name = '{table}' AND o.row_id = t.{key}"
        + (" ORDER BY t.seq" if "seq" in _columns(con, table) else "")
    )


def signed_payload(manifest: dict) -> bytes:
    """The bytes a bundle signature covers: every manifest field but the signature itself (format and
    version, bundle id, origin, signing key, and each table's file, row count and sha256), as JSON with
    sorted keys and no spaces, after SIGNING_CONTEXT."""
    body = {k: v for k, v in manifest.items() if k != "signature"}
    return SIGNING_CONTEXT + json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def read_manifest(bundle: Path) -> tuple[BundleManifest, PublicKey]:
    """The manifest and the key that signed it, once its signature verifies (its files are not read)."""
    bundle = Path(bundle)
    path = bundle / "manifest.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BundleRefused(f"{bundle} is not a knowledge bundle (no manifest.json)") from None
    except (OSError, ValueError) as exc:
        raise BundleRefused(f"bundle manifest {path} is unreadable: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else None
        raise BundleRefused(f"{bundle} is not a {FORMAT} (format {got!r})")
    if data.get("format_version") == 1:
        raise BundleRefused(
            f"bundle {bundle} is unsigned (format version 1, from a kernelscout before bundles were signed); "
            "ask for it to be exported again"
        )
    if data.get("format_version") != FORMAT_VERSION:
        raise BundleRefused(
            f"bundle {bundle} has format version {data.get('format_version')}; this kernelscout reads "
            f"version {FORMAT_VERSION}"
        )
    try:
        manifest = BundleManifest.model_validate(data)
    except ValueError as exc:
        raise BundleRefused(f"bundle manifest {path} is malformed: {str(exc).splitlines()[0]}") from None
    try:
        key = parse_public_key(manifest.signed_by)
    except SigningError as exc:
        raise BundleRefused(
            f"bundle {bundle} refused: its signing key is unusable ({exc}); nothing was imported"
        ) from None
    if not key.verify(signed_payload(data), manifest.signature):
        raise BundleRefused(
            f"bundle {bundle} refused: its manifest's signature does not verify (the manifest was edited "
            f"after key {key.key_id} signed it); nothing was imported"
        )
    missing = [t for t in TABLES if t not in manifest.tables]
    if missing:
        raise BundleRefused(f"bundle {bundle} lacks tables: {', '.join(missing)}")
    return manifest, key


def _read_verified(bundle: Path, manifest: BundleManifest, private: Path) -> dict[str, list[dict]]:
    """Every table's rows, read from private copies of the files once each copy matches its signed
    sha256 and row count (a file changed under us after the check cannot reach the merge)."""
    import duckdb

    copies: dict[str, Path] = {}
    for name in TABLES:
        table = manifest.tables[name]
        file = bundle / table.file
        if Path(table.file).name != table.file or not file.is_file():
            raise BundleRefused(f"bundle {bundle}: table file {table.file!r} is missing; nothing was imported")
        copies[name] = private / f"{name}.parquet"
        shutil.copyfile(file, copies[name])
        if _sha256_file(copies[name]) != table.sha256:
            raise BundleRefused(
                f"bundle {bundle} refused: {table.file} does not match its sha256 in the signed manifest "
                "(damaged or edited); nothing was imported"
            )
    con = duckdb.connect()
    try:
        rows = {name: fetch_dicts(con, f"SELECT * FROM read_parquet({_literal(copies[name])})") for name in TABLES}
    except duckdb.Error as exc:
        raise BundleRefused(f"bundle {bundle} refused: a table file is unreadable: {exc}") from None
    finally:
        con.close()
    for name in TABLES:
        signed = manifest.tables[name].rows
        if len(rows[name]) != signed:
            raise BundleRefused(
                f"bundle {bundle} refused: {manifest.tables[name].file} holds {len(rows[name])} rows, its signed "
                f"manifest says {signed}; nothing was imported"
            )
    return rows


def _untrusted(bundle: Path, manifest: BundleManifest, key: PublicKey) -> UntrustedKey:
    who = manifest.origin.team or f"store {manifest.origin.store[:8]}"
    return UntrustedKey(
        f"bundle {bundle} refused: it is signed by key {key.key_id} ({who}), which this store does not trust. "
        f"If {who}'s `kscout knowledge keys` shows that id, trust it with `kscout knowledge trust {bundle}` "
        "or import with --trust; nothing was imported",
        key.key_id,
    )


def import_bundle(store, bundle: Path, *, trust: bool = False) -> ImportReport:
    """Merge a bundle (see the module doc); `trust` trusts its key for this and later imports.
    Vectors for the new rows are written by the caller."""
    bundle = Path(bundle)
    manifest, key = read_manifest(bundle)
    with tempfile.TemporaryDirectory(prefix="kscout-import-") as private:
        incoming = _read_verified(bundle, manifest, Path(private))
    keyring = Keyring.of(store)
    trusted_before = keyring.is_trusted(key)
    if not trust and not trusted_before:
        raise _untrusted(bundle, manifest, key)
    now = utc_now()
    counts: dict[str, dict[str, int]] = {t: {"added": 0, "unchanged": 0, "conflicts": 0} for t in TABLES}
    added: dict[str, list[str]] = {t: [] for t in _KEYS}
    chunks_of: dict[str, int] = {}
    for chunk in incoming["chunks"]:
        chunks_of[chunk["document_id"]] = chunks_of.get(chunk["document_id"], 0) + 1
    with store.db.locked() as con, store.db.transaction():
        for table in ("documents", "outcomes", "failure_patterns"):
            columns = [c for c in _columns(con, table) if c != "seq"]
            key_column = _KEYS[table]
            for row in incoming[table]:
                origin = {c: row.pop(c, None) for c in _ORIGIN_COLUMNS}
                body = {c: row.get(c) for c in columns}
                # A document's chunks travel with it and are counted as it is.
                n_chunks = chunks_of.get(row[key_column], 0) if table == "documents" else 0
                if origin["origin_store"] == store.store_uid:
                    counts[table]["unchanged"] += 1  # ours, coming back: this store is its source
                    counts["chunks"]["unchanged"] += n_chunks
                    continue
                target, conflict = _place(con, table, key_column, body, origin["origin_store"])
                if target is None:
                    counts[table]["unchanged"] += 1
                    counts["chunks"]["unchanged"] += n_chunks
                    continue
                if table == "documents":
                    _insert_document(con, body, target, incoming["chunks"])
                else:
                    body[key_column] = target
                    _insert(con, table, body)
                con.execute(
                    "INSERT OR REPLACE INTO origins VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        table,
                        target,
                        origin["original_id"] or row[key_column],
                        origin["origin_store"],
                        origin["origin_team"],
                        origin["origin_user"],
                        origin["origin_host"],
                        manifest.kernelscout_version,
                        origin["origin_bundle"] or manifest.bundle_id,
                        origin["origin_exported_at"] or manifest.created_at,
                        now,
                        conflict,
                    ],
                )
                counts[table]["conflicts" if conflict else "added"] += 1
                counts["chunks"]["conflicts" if conflict else "added"] += n_chunks
                added[table].append(target)
        if manifest.embedding_model == store.embedder.model_name:
            for row in incoming["embeddings"]:
                done = con.execute(
                    "INSERT OR IGNORE INTO embeddings VALUES (?, ?, ?, ?, ?)",
                    [row["model"], row["text_sha256"], row["dim"], list(row["vector"]), row["created_at"]],
                ).fetchone()
                counts["embeddings"]["added" if done and done[0] else "unchanged"] += 1
        for doc_id in added["documents"]:
            con.execute("INSERT OR REPLACE INTO vector_pending VALUES ('chunks', ?, ?)", [doc_id, now])
    trusted_now = False
    if trust and not trusted_before:  # only once the merge is committed: a refused import trusts nothing
        _, trusted_now = keyring.trust(
            key, label=manifest.origin.team, how=f"import --trust of bundle {manifest.bundle_id}"
        )
    label = manifest.origin.team or f"store {manifest.origin.store[:8]}"
    who = "@".join(x for x in (manifest.origin.user_name, manifest.origin.host) if x)
    return ImportReport(
        bundle=str(bundle),
        bundle_id=manifest.bundle_id,
        source_label=f"{label} ({who})" if who else label,
        key_id=key.key_id,
        trusted_now=trusted_now,
        tables={t: TableCounts(**c) for t, c in counts.items()},
        added_documents=tuple(added["documents"]),
        added_outcomes=tuple(added["outcomes"]),
        added_failures=tuple(added["failure_patterns"]),
    )


def _same(con, table: str, key: str, row_id: str, body: dict) -> Optional[bool]:
    """None if no row has this id here; else whether its content equals `body` (ids and times of
    ingest aside for documents, whose bytes and provenance are what matter)."""
    found = fetch_dicts(con, f"SELECT * FROM {table} WHERE {key} = ?", [row_id])
    if not found:
        return None
    ours = found[0]
    skip = {"seq", key} | ({"ingested_at", "retagged_at"} if table == "documents" else set())
    return all(_norm(ours.get(c)) == _norm(v) for c, v in body.items() if c not in skip)


def _norm(value):
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return value


def _place(con, table: str, key: str, body: dict, origin_store: str) -> tuple[Optional[str], Optional[str]]:
    """(id to insert under or None if already here, the id of our row it conflicts with or None)."""
    row_id = body[key]
    same = _same(con, table, key, row_id, body)
    if same is None:
        return row_id, None
    if same:
        return None, None
    beside = f"{row_id}~{(origin_store or 'unknown')[:8]}"
    again = _same(con, table, key, beside, body)
    if again is None:
        return beside, row_id
    return (None, None) if again else (f"{beside}~{uuid.uuid4().hex[:6]}", row_id)


def _insert(con, table: str, row: dict) -> None:
    cols = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    con.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", [_plain(v) for v in row.values()])


def _plain(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _insert_document(con, body: dict, target: str, chunks: list[dict]) -> None:
    original = body["document_id"]
    body = dict(body, document_id=target)
    _insert(con, "documents", body)
    for chunk in chunks:
        if chunk["document_id"] != original:
            continue
        row = dict(chunk, document_id=target, chunk_id=f"{target}:{chunk['ordinal']}")
        _insert(con, "chunks", row)


def write_imported_vectors(store, report: ImportReport) -> None:
    """Chroma vectors for the rows an import added, from the embeddings cache (the bundle carried the
    vectors; text it lacked is embedded now). Documents go through the owed-vectors path, so a crash
    here is repaired on the next open like any other."""
    from store import rows as R
    from store.learned import failure_metadata, outcome_metadata

    if not store.vectors_enabled:
        return
    store.repair_vectors()
    with store.db.locked() as con:
        outcomes = (
            [
                R.outcome_from_row(r)
                for r in fetch_dicts(
                    con,
                    "SELECT * FROM outcomes WHERE outcome_id IN (SELECT unnest(?::VARCHAR[]))",
                    [list(report.added_outcomes)],
                )
            ]
            if report.added_outcomes
            else []
        )
        failures = (
            [
                R.failure_from_row(r)
                for r in fetch_dicts(
                    con,
                    "SELECT * FROM failure_patterns WHERE signature IN (SELECT unnest(?::VARCHAR[]))",
                    [list(report.added_failures)],
                )
            ]
            if report.added_failures
            else []
        )
    for collection, ids, texts, metas in (
        (
            "outcomes",
            [o.outcome_id for o in outcomes],
            [o.summary for o in outcomes],
            [outcome_metadata(o) for o in outcomes],
        ),
        (
            "failures",
            [f.signature for f in failures],
            [embedding_text(f.error_class, f.stage, f.message_shape) for f in failures],
            [failure_metadata(f) for f in failures],
        ),
    ):
        if ids:
            vectors = store.embed(texts)
            with store.db.locked():
                store._vector_write(collection, ids, vectors, metas)
