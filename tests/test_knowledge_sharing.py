"""Sharing knowledge across stores: bundles (Parquet + manifest), idempotent merges that never
overwrite, provenance that says whose a measurement is, and several stores on one Chroma server."""

from __future__ import annotations

import json
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
    assert "mi300-lab" in out and "(theirs)" in out


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
