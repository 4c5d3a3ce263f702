"""Sharing knowledge across stores: bundles (Parquet + manifest), idempotent merges that never
overwrite, provenance that says whose a measurement is, and several stores on one Chroma server."""

from __future__ import annotations

import contextlib
import hashlib
import json
import stat
from pathlib import Path

import duckdb
import pytest
from test_knowledge_retrieve import outcome
from test_store_vectors import chroma_server  # noqa: F401 - the module-scoped `chroma run` fixture

from agent.cli import main as kscout
from knowledge.ingest import IngestOptions, ingest_paths
from knowledge.retrieve import ask
from knowledge.sharing import export_bundle, import_bundle
from store import Store, StoreError
from store.errors import BundleRefused
from store.sharing import signed_payload
from store.signing import Keyring, parse_public_key

LN_NOTES = """---
title: MI300X layer norm notes
kind: guidance
sources: [https://example.org/mi300x-ln]
---
# MI300X layer norm notes
## Rows
One row per workgroup with num_warps=8 for rows over 4096 elements.
"""

H100_NOTES = "# H100 notes\n## Shared memory\nThe H100 has up to 228 KB of shared memory per SM.\n"


def _team_store(home: Path, docs: Path, text: str, name: str, **options) -> Store:
    docs.mkdir(parents=True, exist_ok=True)
    (docs / name).write_text(text)
    store = Store.open(home)
    ingest_paths(store, [docs / name], IngestOptions(**options))
    return store


@pytest.fixture
def mi300_bundle(tmp_path, monkeypatch) -> Path:
    """An MI300 team's store with their measurements and a note, exported as a bundle."""
    monkeypatch.setenv("KSCOUT_TEAM", "mi300-lab")
    with _team_store(
        tmp_path / "mi300-home", tmp_path / "mi300-docs", LN_NOTES, "ln.md", vendor="amd", devices=("MI300X",)
    ) as theirs:
        theirs.add_outcome(
            outcome(
                "ln-mi300x-fast", "layernorm", "AMD Instinct MI300X", "gfx942", 2.2, transformation="rows_per_program=2"
            )
        )
        theirs.add_outcome(
            outcome("ln-mi300x-bad", "layernorm", "AMD Instinct MI300X", "gfx942", None, status="incorrect")
        )
        theirs.record_failure("layernorm", "gfx942", "correctness", "MismatchError", "max abs error 0.5", "c1")
        export_bundle(theirs, tmp_path / "bundle")
    return tmp_path / "bundle"


def test_export_writes_parquet_tables_and_a_manifest_with_hashes(mi300_bundle):
    manifest = json.loads((mi300_bundle / "manifest.json").read_text())
    assert manifest["format"] == "kernelscout-knowledge-bundle" and manifest["format_version"] == 2
    assert manifest["origin"]["team"] == "mi300-lab" and manifest["origin"]["user_name"]
    assert set(manifest["tables"]) == {"documents", "chunks", "outcomes", "failure_patterns", "embeddings"}
    rows = {name: t["rows"] for name, t in manifest["tables"].items()}
    assert rows["documents"] == 1 and rows["outcomes"] == 2 and rows["failure_patterns"] == 1
    assert rows["embeddings"] == rows["chunks"] + 3  # every chunk, outcome summary and failure
    con = duckdb.connect()
    got = con.execute(
        f"SELECT outcome_id, device_name, triton_version, origin_team, origin_store "
        f"FROM read_parquet('{mi300_bundle / 'outcomes.parquet'}') ORDER BY 1"
    ).fetchall()
    assert [r[:4] for r in got] == [
        ("ln-mi300x-bad", "AMD Instinct MI300X", "3.4.0", "mi300-lab"),
        ("ln-mi300x-fast", "AMD Instinct MI300X", "3.4.0", "mi300-lab"),
    ]


def test_importing_an_mi300_teams_bundle_answers_from_their_measurements_and_says_so(
    tmp_path, mi300_bundle, capsys, monkeypatch
):
    monkeypatch.delenv("KSCOUT_TEAM")
    with _team_store(tmp_path / "home", tmp_path / "docs", H100_NOTES, "h100.md") as ours:
        calls = ours.embedder.texts_encoded
        first = import_bundle(ours, mi300_bundle, trust=True)
        assert ours.embedder.texts_encoded == calls  # the bundle carried its vectors
        assert {t: (c.added, c.unchanged, c.conflicts) for t, c in first.tables.items() if t != "embeddings"} == {
            "documents": (1, 0, 0),
            "chunks": (1, 0, 0),
            "outcomes": (2, 0, 0),
            "failure_patterns": (1, 0, 0),
        }
        again = import_bundle(ours, mi300_bundle)
        assert all(c.added == 0 and c.conflicts == 0 for c in again.tables.values())
        assert len(ours.outcomes()) == 2 and len(ours.documents()) == 2 and len(ours.failure_patterns()) == 1
        assert ours.vector_count("outcomes") == 2 and ours.vector_count("chunks") == 2

        answer = ask(ours, "what worked on MI300 for layernorm", k=5)
        assert [h.outcome.outcome_id for h in answer.outcome_hits] == ["ln-mi300x-fast"]
        theirs = answer.outcome_hits[0].imported_from
        assert theirs.team == "mi300-lab" and theirs.host and theirs.original_id == "ln-mi300x-fast"
        assert answer.outcome_hits[0].outcome.device_name == "AMD Instinct MI300X"
        note = next(d for d in answer.documents if d.title == "MI300X layer norm notes")
        assert note.imported_from.team == "mi300-lab" and note.devices == ("MI300X",) and note.vendor == "amd"
        failed = ask(ours, "what failed for layernorm on MI300X", k=5)
        assert failed.failure_hits[0].imported_from.team == "mi300-lab"
    monkeypatch.setenv("COLUMNS", "250")
    kscout(["ask", "what worked on MI300 for layernorm", "--store", str(tmp_path / "home")])
    out = capsys.readouterr().out
    assert "mi300-lab" in out and "(theirs, not re-measured here)" in out


def test_a_conflicting_row_is_kept_beside_ours_never_overwritten(tmp_path, mi300_bundle):
    mine = outcome("ln-mi300x-fast", "layernorm", "AMD Instinct MI300X", "gfx942", 1.3)  # same id, our number
    with _team_store(tmp_path / "home", tmp_path / "docs", H100_NOTES, "h100.md") as ours:
        ours.add_outcome(mine)
        report = import_bundle(ours, mi300_bundle, trust=True)
        assert report.tables["outcomes"].conflicts == 1 and report.tables["outcomes"].added == 1
        assert ours.get_outcome("ln-mi300x-fast") == mine  # ours untouched
        beside = [o for o in ours.outcomes() if o.outcome_id.startswith("ln-mi300x-fast~")]
        assert len(beside) == 1 and beside[0].speedup == 2.2
        origin = ours.origins_of("outcomes", [beside[0].outcome_id])[beside[0].outcome_id]
        assert origin["conflicts_with"] == "ln-mi300x-fast" and origin["team"] == "mi300-lab"
        assert import_bundle(ours, mi300_bundle).tables["outcomes"].added == 0  # still idempotent


def test_a_bundle_reexported_keeps_the_original_origin_and_our_rows_are_not_reimported(
    tmp_path, mi300_bundle, monkeypatch
):
    monkeypatch.setenv("KSCOUT_TEAM", "h100-lab")
    with _team_store(tmp_path / "home", tmp_path / "docs", H100_NOTES, "h100.md") as ours:
        import_bundle(ours, mi300_bundle, trust=True)
        export_bundle(ours, tmp_path / "second")
    con = duckdb.connect()
    teams = dict(
        con.execute(
            f"SELECT outcome_id, origin_team FROM read_parquet('{tmp_path / 'second' / 'outcomes.parquet'}')"
        ).fetchall()
    )
    assert teams == {"ln-mi300x-fast": "mi300-lab", "ln-mi300x-bad": "mi300-lab"}
    with Store.open(tmp_path / "mi300-home") as theirs:  # their own rows come back: nothing is added
        report = import_bundle(theirs, tmp_path / "second", trust=True)
        assert report.tables["outcomes"].added == 0 and report.tables["documents"].added == 1  # our h100 note


def test_a_damaged_or_foreign_bundle_is_refused_before_anything_is_imported(tmp_path, mi300_bundle):
    with _team_store(tmp_path / "home", tmp_path / "docs", H100_NOTES, "h100.md") as ours:
        data = (mi300_bundle / "outcomes.parquet").read_bytes()
        (mi300_bundle / "outcomes.parquet").write_bytes(data[:-20] + b"\0" * 20)
        with pytest.raises(StoreError, match="does not match its sha256"):
            import_bundle(ours, mi300_bundle)
        with pytest.raises(StoreError, match="not a knowledge bundle"):
            import_bundle(ours, tmp_path / "docs")
        assert ours.outcomes() == [] and len(ours.documents()) == 1
        with pytest.raises(StoreError, match="already exists and is not empty"):
            export_bundle(ours, tmp_path / "docs")


def test_export_and_import_commands_print_what_they_did(tmp_path, mi300_bundle, capsys):
    home = tmp_path / "home"
    _team_store(home, tmp_path / "docs", H100_NOTES, "h100.md").close()
    kscout(["knowledge", "import", str(mi300_bundle), "--trust", "--store", str(home), "--json"])
    obj = json.loads(capsys.readouterr().out)
    assert obj["imports"][0]["tables"]["outcomes"]["added"] == 2
    kscout(["knowledge", "export", str(tmp_path / "out"), "--store", str(home), "--team", "h100-lab", "--json"])
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["origin"]["team"] == "h100-lab" and manifest["tables"]["outcomes"]["rows"] == 2


def test_two_stores_on_one_chroma_server_never_mix_up_ids(tmp_path, chroma_server):  # noqa: F811
    same_path = tmp_path / "shared-docs"
    same_path.mkdir()
    note = same_path / "notes.md"
    with (
        Store.open(tmp_path / "one", chroma_url=chroma_server) as one,
        Store.open(tmp_path / "two", chroma_url=chroma_server) as two,
    ):
        note.write_text("# Notes\n## Tiles\nUse 128x128 tiles on the H100.\n")
        ingest_paths(one, [note])
        note.write_text("# Notes\n## Waves\nUse waves_per_eu=2 on the MI300X.\n")
        ingest_paths(two, [note])
        doc_one, doc_two = one.documents()[0], two.documents()[0]
        assert doc_one.document_id == doc_two.document_id  # the same path: the same DuckDB id in both
        one.add_outcome(outcome("o-1", "layernorm", "NVIDIA H100", "sm_90", 1.5))
        two.add_outcome(outcome("o-1", "layernorm", "AMD Instinct MI300X", "gfx942", 2.5))
        for store, word in ((one, "128x128"), (two, "waves_per_eu")):
            hits = store.vector_search("chunks", "tile size", k=5)
            assert [i for i, _ in hits] == [c.chunk_id for c in store.chunks()]
            assert word in store.get_chunks([hits[0][0]])[0].text
        assert one.vector_search("outcomes", "layernorm", k=5, where={"arch": "gfx942"}) == []
        assert two.vector_search("outcomes", "layernorm", k=5, where={"arch": "gfx942"})[0][0] == "o-1"
        one.forget_document(doc_one.document_id)
        assert one.vector_count("chunks") == 0 and two.vector_count("chunks") == 1
        assert two.reindex() == {"chunks": 1, "outcomes": 1, "failures": 0}
        assert one.vector_count("outcomes") == 1


# -- signed bundles: what import refuses, and trust ---------------------------------------------------


def _manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def _write_manifest(bundle: Path, manifest: dict) -> None:
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _key_id(bundle: Path) -> str:
    return parse_public_key(_manifest(bundle)["signed_by"]).key_id


def _forge_speedup(bundle: Path, speedup: float = 3.0) -> None:
    """What a forger does: edit the outcome's numbers in the Parquet file, rewrite its sha256."""
    path = bundle / "outcomes.parquet"
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{path}')")
    con.execute(
        "UPDATE t SET speedup = ?, speedup_low = ?, speedup_high = ? WHERE outcome_id = 'ln-mi300x-fast'",
        [speedup, speedup - 0.1, speedup + 0.1],
    )
    con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
    con.close()
    manifest = _manifest(bundle)
    manifest["tables"]["outcomes"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    _write_manifest(bundle, manifest)


def _resign(bundle: Path, keyring: Keyring, **edits) -> None:
    """A manifest edited and signed again by `keyring`'s key (a forger's own key, or a lying signer)."""
    manifest = _manifest(bundle)
    manifest.update(edits)
    key, manifest["signature"] = keyring.sign(signed_payload({**manifest, "signed_by": keyring.own_public().text}))
    manifest["signed_by"] = key.text
    _write_manifest(bundle, manifest)


def _snapshot(home: Path) -> dict:
    """Every table's rows, the trusted keys and the vector counts: what a refused import must not change."""
    with Store.open(home) as store, store.db.locked() as con:
        tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables ORDER BY 1").fetchall()]
        rows = {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}
        vectors = {c: store.vector_count(c) for c in ("chunks", "outcomes", "failures")}
        return {"rows": rows, "trusted": Keyring.of(store).trusted(), "vectors": vectors}


@pytest.fixture
def our_home(tmp_path) -> Path:
    home = tmp_path / "home"
    _team_store(home, tmp_path / "docs", H100_NOTES, "h100.md").close()
    return home


def _import_cli(capsys, *args) -> tuple[int, str, str]:
    try:
        kscout(["knowledge", "import", *map(str, args)])
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_export_signs_the_manifest_with_the_stores_own_key_which_stays_in_the_store(tmp_path, mi300_bundle):
    manifest = _manifest(mi300_bundle)
    with Store.open(tmp_path / "mi300-home") as theirs:
        own = Keyring.of(theirs).own_public()
        key_file = Keyring.of(theirs).key_path
    assert manifest["signed_by"] == own.text
    assert own.verify(signed_payload(manifest), manifest["signature"])
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert sorted(p.name for p in mi300_bundle.iterdir()) == [
        "chunks.parquet",
        "documents.parquet",
        "embeddings.parquet",
        "failure_patterns.parquet",
        "manifest.json",
        "outcomes.parquet",
    ]
    assert key_file.read_bytes() not in b"".join(p.read_bytes() for p in mi300_bundle.iterdir())


def test_a_bundle_from_a_key_this_store_does_not_trust_is_refused_with_exit_2_naming_the_key(
    mi300_bundle, our_home, capsys
):
    before = _snapshot(our_home)
    code, out, err = _import_cli(capsys, mi300_bundle, "--store", our_home)
    key_id = _key_id(mi300_bundle)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"signed by key {key_id} (mi300-lab)" in err
    assert "does not trust" in err and f"kscout knowledge trust {mi300_bundle}" in err and "--trust" in err
    assert _snapshot(our_home) == before


def test_import_with_trust_merges_and_trusts_the_key_for_later_imports(mi300_bundle, our_home, capsys):
    code, out, _ = _import_cli(capsys, mi300_bundle, "--trust", "--store", our_home)
    key_id = _key_id(mi300_bundle)
    assert code == 0 and f"signed by key {key_id}, trusted now" in out and "outcomes: 2 added" in out
    kscout(["knowledge", "keys", "--store", str(our_home), "--json"])
    keys = json.loads(capsys.readouterr().out)
    assert [(t["key_id"], t["label"]) for t in keys["trusted"]] == [(key_id, "mi300-lab")]
    assert keys["trusted"][0]["how"].startswith("import --trust of bundle ")
    code, out, _ = _import_cli(capsys, mi300_bundle, "--store", our_home)  # trusted now: no --trust needed
    assert code == 0 and "trusted now" not in out and "outcomes: 0 added, 2 already here" in out


def test_trusting_the_public_key_another_store_prints_lets_its_bundles_in(tmp_path, mi300_bundle, our_home, capsys):
    kscout(["knowledge", "keys", "--store", str(tmp_path / "mi300-home"), "--json"])
    theirs = json.loads(capsys.readouterr().out)
    assert theirs["own_key_id"] == _key_id(mi300_bundle) and theirs["trusted"] == []
    kscout(["knowledge", "trust", theirs["own_public_key"], "--label", "mi300-lab", "--store", str(our_home)])
    assert capsys.readouterr().out.strip() == f"key {theirs['own_key_id']} (mi300-lab) trusted"
    code, out, _ = _import_cli(capsys, mi300_bundle, "--store", our_home)
    assert code == 0 and "outcomes: 2 added" in out
    kscout(["knowledge", "keys", "--store", str(our_home)])
    listed = capsys.readouterr().out
    assert f"trusted {theirs['own_key_id']} (mi300-lab)" in listed and "this store's key " in listed
    kscout(["knowledge", "untrust", theirs["own_key_id"], "--store", str(our_home)])
    assert capsys.readouterr().out.strip() == f"key {theirs['own_key_id']} no longer trusted"
    code, _, err = _import_cli(capsys, mi300_bundle, "--store", our_home)
    assert code == 2 and "does not trust" in err


def test_a_store_imports_its_own_bundle_without_being_told_to_trust_it(tmp_path, mi300_bundle):
    with Store.open(tmp_path / "mi300-home") as theirs:
        report = import_bundle(theirs, mi300_bundle)
        assert report.tables["outcomes"].unchanged == 2 and not report.trusted_now
        assert Keyring.of(theirs).trusted() == []  # its own key is never listed


def test_an_edited_parquet_with_its_sha256_rewritten_is_refused_and_its_number_never_served(
    mi300_bundle, our_home, capsys
):
    _forge_speedup(mi300_bundle, 3.0)
    before = _snapshot(our_home)
    code, _, err = _import_cli(capsys, mi300_bundle, "--trust", "--store", our_home)
    assert code == 2 and err.count("\n") == 1
    assert "signature does not verify" in err and "nothing was imported" in err
    assert _snapshot(our_home) == before  # not even the key was trusted
    with Store.open(our_home) as ours:
        assert ours.outcomes() == [] and ask(ours, "what worked on MI300 for layernorm").outcome_hits == ()


def test_a_forgery_signed_again_by_the_forgers_own_key_is_refused_as_untrusted(
    tmp_path, mi300_bundle, our_home, capsys
):
    forger = Keyring(tmp_path / "forger" / "keys", contextlib.nullcontext)
    _forge_speedup(mi300_bundle, 3.0)
    _resign(mi300_bundle, forger)
    with Store.open(tmp_path / "mi300-home") as theirs:  # the real team's key is trusted here
        kscout(["knowledge", "trust", Keyring.of(theirs).own_public().text, "--store", str(our_home)])
    capsys.readouterr()
    before = _snapshot(our_home)
    code, _, err = _import_cli(capsys, mi300_bundle, "--store", our_home)
    assert code == 2 and f"signed by key {forger.own_public().key_id} (mi300-lab)" in err
    assert "does not trust" in err and _snapshot(our_home) == before


def test_a_manifest_whose_origin_team_was_edited_is_refused(mi300_bundle, our_home, capsys):
    manifest = _manifest(mi300_bundle)
    manifest["origin"]["team"] = "h100-lab"
    _write_manifest(mi300_bundle, manifest)
    before = _snapshot(our_home)
    code, _, err = _import_cli(capsys, mi300_bundle, "--trust", "--store", our_home)
    assert code == 2 and "signature does not verify" in err and _key_id(mi300_bundle) in err
    assert _snapshot(our_home) == before


@pytest.mark.parametrize("field", ["bundle_id", "format_version"])
def test_a_manifest_whose_bundle_id_or_version_was_edited_is_refused(mi300_bundle, our_home, field):
    manifest = _manifest(mi300_bundle)
    manifest[field] = "0" * 32 if field == "bundle_id" else 1
    _write_manifest(mi300_bundle, manifest)
    with Store.open(our_home) as ours:
        want = "signature does not verify" if field == "bundle_id" else "unsigned .*format version 1"
        with pytest.raises(BundleRefused, match=want):
            import_bundle(ours, mi300_bundle, trust=True)


def test_row_counts_are_signed_and_checked_against_the_rows_actually_read(tmp_path, mi300_bundle, our_home):
    original = _manifest(mi300_bundle)
    lying = json.loads(json.dumps(original))
    lying["tables"]["outcomes"]["rows"] = 3
    _write_manifest(mi300_bundle, lying)  # the count edited, not signed again
    with Store.open(our_home) as ours:
        with pytest.raises(BundleRefused, match="signature does not verify"):
            import_bundle(ours, mi300_bundle, trust=True)
    # Signed with the wrong count by the exporting store's own key: the rows read decide.
    _write_manifest(mi300_bundle, original)
    tables = json.loads(json.dumps(original["tables"]))
    tables["outcomes"]["rows"] = 3
    _resign(mi300_bundle, Keyring(tmp_path / "mi300-home" / "keys", contextlib.nullcontext), tables=tables)
    before = _snapshot(our_home)
    with Store.open(our_home) as ours:
        with pytest.raises(BundleRefused, match="outcomes.parquet holds 2 rows, its signed manifest says 3"):
            import_bundle(ours, mi300_bundle, trust=True)
    assert _snapshot(our_home) == before


def test_the_import_summary_counts_chunks_not_documents(tmp_path, monkeypatch, our_home):
    sections = "".join(f"## Section {i}\n" + f"Paragraph {i} about tiles and warps. " * 40 + "\n" for i in range(6))
    with _team_store(tmp_path / "t-home", tmp_path / "t-docs", "# Big notes\n" + sections, "big.md") as theirs:
        chunks = len(theirs.chunks())
        export_bundle(theirs, tmp_path / "big")
    assert chunks >= 3
    with Store.open(our_home) as ours:
        report = import_bundle(ours, tmp_path / "big", trust=True)
        assert (report.tables["documents"].added, report.tables["chunks"].added) == (1, chunks)
        again = import_bundle(ours, tmp_path / "big")
        assert (again.tables["documents"].unchanged, again.tables["chunks"].unchanged) == (1, chunks)


# -- what `ask` serves from imported rows ---------------------------------------------------------------


def test_an_imported_outcome_is_served_as_theirs_not_re_measured_here(tmp_path, mi300_bundle, capsys, monkeypatch):
    with _team_store(tmp_path / "home", tmp_path / "docs", H100_NOTES, "h100.md") as ours:
        ours.add_outcome(outcome("ln-mi300x-ours", "layernorm", "AMD Instinct MI300X", "gfx942", 1.5))
        import_bundle(ours, mi300_bundle, trust=True)
        answer = ask(ours, "what worked on MI300 for layernorm", k=5)
        assert {h.outcome.outcome_id: h.measured_here for h in answer.outcome_hits} == {
            "ln-mi300x-fast": False,
            "ln-mi300x-ours": True,
        }
        provenance = answer.to_json_obj()["outcome_provenance"]
        assert list(provenance) == ["ln-mi300x-fast"] and provenance["ln-mi300x-fast"]["measured_here"] is False
    monkeypatch.setenv("COLUMNS", "250")
    kscout(["ask", "what worked on MI300 for layernorm", "--store", str(tmp_path / "home")])
    lines = capsys.readouterr().out.splitlines()
    theirs = next(line for line in lines if "2.20x" in line)
    mine = next(line for line in lines if "1.50x" in line)
    assert "mi300-lab" in theirs and "(theirs, not re-measured here)" in theirs
    assert "this store" in mine and "theirs" not in mine


def test_two_rows_that_disagree_about_one_evaluation_are_both_shown_marked_conflicting(
    tmp_path, mi300_bundle, capsys, monkeypatch
):
    # Our row measured 0.90x (a slowdown) under the evaluation their bundle's row cites as 2.20x.
    mine = outcome("ln-mi300x-fast", "layernorm", "AMD Instinct MI300X", "gfx942", 0.9)
    with _team_store(tmp_path / "home", tmp_path / "docs", H100_NOTES, "h100.md") as ours:
        ours.add_outcome(mine)
        import_bundle(ours, mi300_bundle, trust=True)
        beside = next(o.outcome_id for o in ours.outcomes() if o.outcome_id.startswith("ln-mi300x-fast~"))
        answer = ask(ours, "what worked on MI300 for layernorm", k=5)
        shown = {h.outcome.outcome_id: (h.outcome.speedup, h.conflicts_with) for h in answer.outcome_hits}
        # "what worked" keeps only speedups; the slowdown that disagrees is shown beside it anyway.
        assert shown == {beside: (2.2, ("ln-mi300x-fast",)), "ln-mi300x-fast": (0.9, (beside,))}
        assert answer.to_json_obj()["outcome_conflicts"] == {beside: ["ln-mi300x-fast"], "ln-mi300x-fast": [beside]}
        agreeing = ask(ours, "what failed for layernorm on MI300X", k=5)
        assert [h.conflicts_with for h in agreeing.outcome_hits if h.outcome.outcome_id == "ln-mi300x-bad"] == [()]
    monkeypatch.setenv("COLUMNS", "250")
    kscout(["ask", "what worked on MI300 for layernorm", "--store", str(tmp_path / "home")])
    out = capsys.readouterr().out
    assert "what worked (significant speedups only, and the rows that disagree with them)" in out
    assert out.count("CONFLICTING") == 2 and "CONFLICTING with ln-mi300x-fast:" in out
    assert f"CONFLICTING with {beside}:" in out and "2.20x" in out and "0.90x" in out


def test_trust_takes_a_bundle_whose_signature_verifies_and_says_when_a_key_is_the_stores_own(
    tmp_path, mi300_bundle, our_home, capsys
):
    key_id = _key_id(mi300_bundle)
    kscout(["knowledge", "trust", str(mi300_bundle), "--store", str(our_home)])
    assert capsys.readouterr().out.strip() == f"key {key_id} (mi300-lab) trusted"
    kscout(["knowledge", "trust", str(mi300_bundle), "--store", str(our_home)])
    assert capsys.readouterr().out.strip() == f"key {key_id} (mi300-lab) already trusted"
    kscout(["knowledge", "trust", str(mi300_bundle), "--store", str(tmp_path / "mi300-home")])
    assert capsys.readouterr().out.strip() == f"key {key_id} is this store's own key, always trusted"
    with pytest.raises(SystemExit) as exc:
        kscout(["knowledge", "trust", "ed25519:short", "--store", str(our_home)])
    assert exc.value.code == 2 and "not valid base64" in capsys.readouterr().err
