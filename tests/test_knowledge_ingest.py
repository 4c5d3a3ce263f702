"""Ingest jobs against a real store (DuckDB file, Chroma folder, the real embedding model).

Documents here are small and written in the test, so each ingest embeds a handful of short chunks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent.cli import main as kscout
from knowledge.errors import IngestError
from knowledge.ingest import IngestOptions, build_document, ingest_paths
from knowledge.records import FileStatus
from store import Store
from store.records import ChunkKind
from test_knowledge_parse import make_pdf

LAYERNORM_MD = """---
title: Test notes on layer norm
kind: guidance
sources: [https://example.org/ln-notes]
---
# Layer norm notes
## Zanzibar section
The zanzibar heuristic keeps one row per program for rows under 4096 elements.

## Second section
Welford updates keep the variance non-negative.

## Third section
A third paragraph about masks on the tail of a row.
"""

SOFTMAX_MD = """# Softmax notes
## Max subtraction
Subtract the running maximum before exponentiating so exp never overflows.
"""


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        kscout(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "layernorm.md").write_text(LAYERNORM_MD)
    (folder / "sub" / "softmax.md").write_text(SOFTMAX_MD)
    return folder


def test_reingesting_an_unchanged_folder_adds_nothing(tmp_path, docs):
    with Store.open(tmp_path / "home") as store:
        first = ingest_paths(store, [docs])
        assert [(Path(f.path).name, f.status) for f in first.files] == [
            ("layernorm.md", FileStatus.added), ("softmax.md", FileStatus.added)]
        assert [f.chunks for f in first.files] == [3, 1]
        chunks_before = store.chunks()
        docs_before = store.documents()

        second = ingest_paths(store, [docs])
        assert [f.status for f in second.files] == [FileStatus.unchanged, FileStatus.unchanged]
        assert store.chunks() == chunks_before
        assert store.documents() == docs_before  # same ingested_at: nothing was rewritten
        assert store.vector_count("chunks") == 4


def test_a_changed_file_replaces_its_old_chunks_and_they_leave_search(tmp_path, docs):
    with Store.open(tmp_path / "home") as store:
        ingest_paths(store, [docs])
        old_ids = {c.chunk_id for c in store.chunks() if "zanzibar" in c.text}
        assert len(old_ids) == 1
        (docs / "layernorm.md").write_text(LAYERNORM_MD.replace("zanzibar", "quixotic").replace(
            "## Third section\nA third paragraph about masks on the tail of a row.\n", ""))

        report = ingest_paths(store, [docs / "layernorm.md"])
        assert [(f.status, f.chunks) for f in report.files] == [(FileStatus.replaced, 2)]
        texts = [c.text for c in store.chunks()]
        assert not any("zanzibar" in t for t in texts)
        assert sum("quixotic" in t for t in texts) == 1
        assert not any("third paragraph" in t for t in texts)
        # Vector search no longer knows the old text or the dropped third chunk.
        hits = store.vector_search("chunks", "zanzibar heuristic one row per program", k=10)
        by_id = {c.chunk_id: c for c in store.chunks()}
        assert {i for i, _ in hits} <= set(by_id)
        assert len(hits) == 3
        from knowledge.retrieve import ask

        answer = ask(store, "zanzibar heuristic", k=5)
        assert not any("zanzibar" in d.text for d in answer.documents)
        assert any("quixotic" in d.text for d in answer.documents)


def test_bad_files_are_reported_by_name_while_good_files_land(tmp_path, docs, capsys):
    (docs / "page.html").write_text("<html><head><title>HTML page</title></head><body><h1>Tiles</h1>"
                                    "<p>Use 128x128 tiles.</p><script>alert(1)</script></body></html>")
    (docs / "datasheet.pdf").write_bytes(make_pdf([["Memory Hierarchy", "The L2 cache is 50 MB."]]))
    (docs / "corrupt.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage")
    (docs / "empty.md").write_text("")
    (docs / "blob.txt").write_bytes(bytes(range(256)) * 4)
    (docs / "dangling.md").symlink_to(tmp_path / "does-not-exist.md")
    os.mkfifo(docs / "pipe.md")
    (docs / ".hidden.md").write_text("# hidden\nnever read\n")
    (docs / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    missing = tmp_path / "no-such-dir"

    code, out, err = run_cli(["ingest", str(docs), str(missing), "--store", str(tmp_path / "home"), "--json"], capsys)

    assert code == 1
    report = json.loads(out)
    by_name = {Path(f["path"]).name: f for f in report["files"]}
    assert set(by_name) == {"layernorm.md", "softmax.md", "page.html", "datasheet.pdf", "corrupt.pdf", "empty.md",
                            "blob.txt", "dangling.md", "pipe.md", "image.png", "no-such-dir"}
    for good in ("layernorm.md", "softmax.md", "page.html", "datasheet.pdf"):
        assert by_name[good]["status"] == "added" and by_name[good]["chunks"] >= 1
    reasons = {name: by_name[name]["reason"] for name in by_name if by_name[name]["status"] == "failed"}
    assert reasons["corrupt.pdf"].startswith("corrupt PDF")
    assert reasons["empty.md"] == "empty file"
    assert "binary file" in reasons["blob.txt"]
    assert reasons["dangling.md"].startswith("broken symlink")
    assert reasons["pipe.md"] == "not a regular file (FIFO)"
    assert reasons["no-such-dir"] == "no such file or directory"
    assert by_name["image.png"]["status"] == "skipped"
    assert report["counts"] == {"added": 4, "unchanged": 0, "replaced": 0, "failed": 6, "skipped": 1}

    with Store.open(tmp_path / "home") as store:
        titles = {d.title: d for d in store.documents()}
        assert set(titles) == {"Test notes on layer norm", "Softmax notes", "HTML page", "datasheet"}
        html_chunks = store.chunks(titles["HTML page"].document_id)
        assert [(c.heading_path, "128x128" in c.text, "alert" in c.text) for c in html_chunks] == [
            (("Tiles",), True, False)]
        pdf_chunks = store.chunks(titles["datasheet"].document_id)
        assert [c.heading_path for c in pdf_chunks] == [("Memory Hierarchy",)]


def test_ingest_summary_table_names_failed_files_and_exits_1(tmp_path, docs, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    (docs / "[bold]empty.md").write_text("   \n")  # a name that is also rich markup is shown as it is
    code, out, _ = run_cli(["ingest", str(docs), "--store", str(tmp_path / "home")], capsys)
    assert code == 1
    line = next(line for line in out.splitlines() if "empty.md" in line)
    assert "[bold]empty.md" in line and "failed" in line and "empty file" in line
    assert "3 file(s): 2 added, 1 failed" in out


def test_header_wins_and_command_line_options_fill_what_it_lacks(tmp_path):
    path = tmp_path / "mi355x.md"
    path.write_text("---\ntitle: MI355X notes\nkind: hardware\nvendor: amd\n---\n# MI355X\n## LDS\n160 KB of LDS.\n")
    options = IngestOptions(vendor="nvidia", devices=("MI355X",), source_url="https://example.org/mi355x",
                            doc_version="v2", kind=ChunkKind.guidance)
    doc, chunks = build_document(path.read_bytes(), path=path, source=str(path), identity="file:x", options=options)
    assert (doc.title, doc.vendor, doc.kind) == ("MI355X notes", "amd", ChunkKind.hardware)  # from the header
    assert doc.devices == ("MI355X",) and doc.source_url == "https://example.org/mi355x" and doc.doc_version == "v2"
    assert [c.kind for c in chunks] == [ChunkKind.hardware]
    assert chunks[0].chunk_id == f"{doc.document_id}:0"


def test_vendor_is_inferred_from_known_devices_when_nobody_says_it(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("Some notes about tiles.\n")
    doc, _ = build_document(path.read_bytes(), path=path, source=str(path), identity="file:y",
                            options=IngestOptions(devices=("H100 SXM", "H200")))
    assert doc.vendor == "nvidia" and doc.title == "notes"


def test_shipped_document_without_required_header_keys_is_refused(tmp_path):
    data = b"---\ntitle: x\nkind: hardware\n---\n# X\n## A\ntext\n"
    with pytest.raises(IngestError, match="lacks required header keys: sources"):
        build_document(data, path=Path("x.md"), source="hwdocs/x.md", identity="builtin:x",
                       options=IngestOptions(), builtin=True)


def test_ingest_without_paths_or_builtin_is_a_one_line_error(tmp_path, capsys):
    code, out, err = run_cli(["ingest", "--store", str(tmp_path / "home")], capsys)
    assert code == 2 and out == ""
    assert err.strip() == "kscout: error: nothing to ingest: give one or more PATHs, or --builtin"


def test_unknown_vendor_flag_is_refused_before_anything_is_written(tmp_path, docs, capsys):
    code, _, err = run_cli(["ingest", str(docs), "--vendor", "nvdia", "--store", str(tmp_path / "home")], capsys)
    assert code == 2 and "vendor must be one of nvidia, amd, meta, intel, generic" in err
    with Store.open(tmp_path / "home") as store:
        assert store.documents() == []
