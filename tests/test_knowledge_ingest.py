"""Ingest jobs against a real store (DuckDB file, Chroma folder, the real embedding model).

Documents here are small and written in the test, so each ingest embeds a handful of short chunks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_knowledge_parse import make_pdf

from agent.cli import main as kscout
from knowledge.errors import IngestError
from knowledge.ingest import IngestOptions, build_document, ingest_paths
from knowledge.records import FileStatus
from store import Store
from store.records import ChunkKind, DocumentOrigin

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
            ("layernorm.md", FileStatus.added),
            ("softmax.md", FileStatus.added),
        ]
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
        (docs / "layernorm.md").write_text(
            LAYERNORM_MD.replace("zanzibar", "quixotic").replace(
                "## Third section\nA third paragraph about masks on the tail of a row.\n", ""
            )
        )

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
    (docs / "page.html").write_text(
        "<html><head><title>HTML page</title></head><body><h1>Tiles</h1>"
        "<p>Use 128x128 tiles.</p><script>alert(1)</script></body></html>"
    )
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
    assert set(by_name) == {
        "layernorm.md",
        "softmax.md",
        "page.html",
        "datasheet.pdf",
        "corrupt.pdf",
        "empty.md",
        "blob.txt",
        "dangling.md",
        "pipe.md",
        "image.png",
        "no-such-dir",
    }
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
    assert report["counts"] == {
        "added": 4,
        "unchanged": 0,
        "replaced": 0,
        "retagged": 0,
        "repaired": 0,
        "failed": 6,
        "skipped": 1,
    }

    with Store.open(tmp_path / "home") as store:
        titles = {d.title: d for d in store.documents()}
        assert set(titles) == {"Test notes on layer norm", "Softmax notes", "HTML page", "datasheet"}
        html_chunks = store.chunks(titles["HTML page"].document_id)
        assert [(c.heading_path, "128x128" in c.text, "alert" in c.text) for c in html_chunks] == [
            (("Tiles",), True, False)
        ]
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
    options = IngestOptions(
        vendor="nvidia",
        devices=("MI355X",),
        source_url="https://example.org/mi355x",
        doc_version="v2",
        kind=ChunkKind.guidance,
    )
    doc, chunks, notes = build_document(
        path.read_bytes(), path=path, source=str(path), identity="file:x", options=options
    )
    assert (doc.title, doc.vendor, doc.kind) == ("MI355X notes", "amd", ChunkKind.hardware)  # from the header
    assert doc.devices == ("MI355X",) and doc.source_url == "https://example.org/mi355x" and doc.doc_version == "v2"
    assert [c.kind for c in chunks] == [ChunkKind.hardware]
    assert chunks[0].chunk_id == f"{doc.document_id}:0"
    assert notes == () and doc.origin is DocumentOrigin.vendor


def test_vendor_is_inferred_from_known_devices_when_nobody_says_it(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("Some notes about tiles.\n")
    doc, _, _ = build_document(
        path.read_bytes(),
        path=path,
        source=str(path),
        identity="file:y",
        options=IngestOptions(devices=("H100 SXM", "H200")),
    )
    assert doc.vendor == "nvidia" and doc.title == "notes"


def test_shipped_document_without_required_header_keys_is_refused(tmp_path):
    data = b"---\ntitle: x\nkind: hardware\n---\n# X\n## A\ntext\n"
    with pytest.raises(IngestError, match="lacks required header keys: sources"):
        build_document(
            data, path=Path("x.md"), source="hwdocs/x.md", identity="builtin:x", options=IngestOptions(), builtin=True
        )


def test_ingest_without_paths_or_builtin_is_a_one_line_error(tmp_path, capsys):
    code, out, err = run_cli(["ingest", "--store", str(tmp_path / "home")], capsys)
    assert code == 2 and out == ""
    assert err.strip() == "kscout: error: nothing to ingest: give one or more PATHs, or --builtin"


def test_a_malformed_vendor_flag_is_refused_before_anything_is_written(tmp_path, docs, capsys):
    code, _, err = run_cli(["ingest", str(docs), "--vendor", "!!", "--store", str(tmp_path / "home")], capsys)
    assert code == 2 and "vendor name '!!' must be 1-64 letters" in err
    with Store.open(tmp_path / "home") as store:
        assert store.documents() == []


def test_new_vendors_and_devices_are_accepted_normalised_and_listed_by_docs(tmp_path, docs, capsys):
    home = str(tmp_path / "home")
    code, _, _ = run_cli(
        [
            "ingest",
            str(docs / "sub"),
            "--vendor",
            "Tenstorrent  Inc.",
            "--device",
            "n300",
            "--device",
            "N300",
            "--device",
            "wormhole  n150",
            "--store",
            home,
            "--json",
        ],
        capsys,
    )
    assert code == 0
    run_cli(
        [
            "ingest",
            str(docs / "layernorm.md"),
            "--vendor",
            "Advanced Micro Devices, Inc.",
            "--device",
            "mi355x",
            "--store",
            home,
            "--json",
        ],
        capsys,
    )
    code, out, _ = run_cli(["docs", "--json", "--store", home], capsys)
    listing = json.loads(out)
    assert listing["vendors"] == {"amd": 1, "tenstorrent": 1}
    assert listing["devices"] == {"MI355X": 1, "N300": 1, "wormhole n150": 1}
    by_vendor = {d["vendor"]: d for d in listing["documents"]}
    assert by_vendor["tenstorrent"]["devices"] == ["N300", "wormhole n150"]
    run_cli(["docs", "--store", home], capsys)  # the table form names them too
    code, out, _ = run_cli(["docs", "--store", home], capsys)
    assert "vendors: amd (1), tenstorrent (1)" in out and "MI355X (1)" in out


# -- identity, provenance corrections, forgetting, big files, crashes ---------------------------------


def test_a_file_reached_through_a_symlinked_folder_is_ingested_once(tmp_path, docs):
    (tmp_path / "alias").symlink_to(docs, target_is_directory=True)
    (docs / "sub" / "loop").symlink_to(docs, target_is_directory=True)  # a link back up the tree
    with Store.open(tmp_path / "home") as store:
        report = ingest_paths(store, [docs, tmp_path / "alias", tmp_path / "alias" / "layernorm.md"])
        assert sorted(Path(f.path).name for f in report.files) == ["layernorm.md", "softmax.md"]
        again = ingest_paths(store, [tmp_path / "alias"])
        assert [f.status for f in again.files] == [FileStatus.unchanged, FileStatus.unchanged]
        assert len(store.documents()) == 2
        assert {d.source for d in store.documents()} == {
            str((docs / "layernorm.md").resolve()),
            str((docs / "sub" / "softmax.md").resolve()),
        }


def test_a_folder_ingested_with_a_url_gives_each_file_its_own_url_and_anchor(tmp_path, docs):
    from knowledge.retrieve import ask

    with Store.open(tmp_path / "home") as store:
        ingest_paths(store, [docs], IngestOptions(source_url="https://docs.example.org/latest/"))
        urls = {Path(d.source).name: d.source_url for d in store.documents()}
        assert urls == {
            "layernorm.md": "https://example.org/ln-notes",  # its own header names its page
            "softmax.md": "https://docs.example.org/latest/sub/softmax.html",
        }
        hit = ask(store, "subtract the running maximum before exponentiating", k=1).documents[0]
        assert hit.location == "https://docs.example.org/latest/sub/softmax.html#max-subtraction"


def test_reingesting_with_new_tags_retags_without_embedding_again(tmp_path, docs):
    with Store.open(tmp_path / "home") as store:
        ingest_paths(store, [docs], IngestOptions(vendor="amd"))
        calls = store.embedder.model_calls
        chunks = store.chunks()
        report = ingest_paths(
            store, [docs / "sub"], IngestOptions(vendor="amd", devices=("MI300X",), doc_version="6.2")
        )
        assert [f.status for f in report.files] == [FileStatus.retagged]
        assert store.embedder.model_calls == calls  # vectors came from the cache
        assert store.chunks() == chunks
        softmax = next(d for d in store.documents() if d.title == "Softmax notes")
        assert (softmax.devices, softmax.doc_version, softmax.vendor) == (("MI300X",), "6.2", "amd")
        assert softmax.retagged_at is not None
        found = store.vector_search("chunks", "running maximum", k=5, where={"devices": {"$contains": "MI300X"}})
        assert [i for i, _ in found] == [c.chunk_id for c in store.chunks(softmax.document_id)]


def test_force_reparses_and_reembeds_only_text_the_cache_has_never_seen(tmp_path, docs):
    with Store.open(tmp_path / "home") as store:
        ingest_paths(store, [docs])
        before = store.embedder.texts_encoded
        report = ingest_paths(store, [docs], IngestOptions(force=True))
        assert [f.status for f in report.files] == [FileStatus.replaced, FileStatus.replaced]
        assert store.embedder.texts_encoded == before


def test_retag_and_forget_commands_correct_and_remove_documents(tmp_path, docs, capsys):
    home = str(tmp_path / "home")
    run_cli(["ingest", str(docs), "--store", home, "--json"], capsys)
    code, out, _ = run_cli(
        ["retag", "softmax.md", "--vendor", "NVIDIA", "--device", "h100 sxm", "--store", home, "--json"], capsys
    )
    assert code == 0
    retagged = json.loads(out)["documents"][0]
    assert retagged["status"] == "retagged" and retagged["document"]["devices"] == ["H100 SXM"]
    assert retagged["document"]["vendor"] == "nvidia"
    code, _, err = run_cli(["forget", "nothing-like-this", "--store", home], capsys)
    assert code == 2 and "no document matches 'nothing-like-this'" in err
    code, out, _ = run_cli(["forget", str(docs / "layernorm.md"), "--store", home, "--json"], capsys)
    assert json.loads(out)["forgotten"][0]["chunks"] == 3
    with Store.open(home) as store:
        assert [d.title for d in store.documents()] == ["Softmax notes"]
        assert len(store.chunks()) == 1 and store.vector_count("chunks") == 1


def test_a_huge_file_shows_chunk_progress_and_is_capped_with_a_message(tmp_path):
    from knowledge.ingest import ingest_paths as ingest

    big = tmp_path / "big.md"
    big.write_text(
        "# Big\n" + "".join(f"## Part {i}\nParagraph {i} of a very long generated file.\n" for i in range(400))
    )
    progress = []
    with Store.open(tmp_path / "home") as store:
        report = ingest(
            store,
            [big],
            IngestOptions(max_chunks=150),
            on_chunks=lambda name, done, total: progress.append((done, total)),
        )
        f = report.files[0]
        assert (f.status, f.chunks) == (FileStatus.added, 150)
        assert f.notes == (
            "capped at 150 chunks: the first 150 of 400 are kept (raise --max-chunks, or split the file)",
        )
        assert progress[-1] == (150, 150) and len(progress) >= 4
        assert len(store.chunks()) == 150


CRASH = r"""
import os, sys
from store import Store
import store.store as S
from knowledge.ingest import ingest_paths

def die(self, collection, ids, vectors, metadatas):
    os._exit(9)  # the process dies after DuckDB committed, before Chroma has the vectors

S.Store._vector_write = die
with Store.open(sys.argv[1]) as store:
    ingest_paths(store, [sys.argv[2]])
"""


def test_a_crash_between_the_duckdb_commit_and_chroma_is_repaired_on_the_next_open(tmp_path, docs):
    import subprocess
    import sys

    home = tmp_path / "home"
    proc = subprocess.run(
        [sys.executable, "-c", CRASH, str(home), str(docs / "layernorm.md")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 9, proc.stderr[-2000:]
    with Store.open(
        home,
    ) as store:  # opening repays the vectors it finds owed
        assert store.pending_vector_documents() == []
        assert store.vector_count("chunks") == 3
        assert ingest_paths(store, [docs / "layernorm.md"]).files[0].status is FileStatus.unchanged


def test_a_document_owed_vectors_is_repaired_by_ingest_not_called_unchanged(tmp_path, docs, monkeypatch):
    from store.errors import VectorIndexError

    with Store.open(tmp_path / "home") as store:

        def fail(*args, **kwargs):
            raise VectorIndexError("Chroma is down")

        monkeypatch.setattr(store, "_vector_write", fail)
        with pytest.raises(VectorIndexError):
            ingest_paths(store, [docs / "layernorm.md"])
        monkeypatch.undo()
        assert len(store.pending_vector_documents()) == 1 and store.vector_count("chunks") == 0
        report = ingest_paths(store, [docs / "layernorm.md"])
        assert report.files[0].status is FileStatus.repaired
        assert store.pending_vector_documents() == [] and store.vector_count("chunks") == 3


# -- pages judged by content, licence and build files, per-file URLs ----------------------------------

THIRDPARTY = Path("/work/shared/thirdparty-docs")
needs_thirdparty = pytest.mark.skipif(
    not (THIRDPARTY / "cccl" / "docs").is_dir(), reason=f"vendor docs for testing are not at {THIRDPARTY}"
)


def test_a_toctree_only_page_is_skipped_and_the_job_exits_0(tmp_path, docs, capsys, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    (docs / "index.rst").write_text("Guides\n======\n\n.. toctree::\n   :maxdepth: 1\n\n   layernorm\n   sub/softmax\n")
    (docs / "api.md").write_text("# API\n\n```{automodule} kernels.layernorm\n:members:\n```\n")

    code, out, _ = run_cli(["ingest", str(docs), "--store", str(tmp_path / "home"), "--json"], capsys)

    assert code == 0
    report = json.loads(out)
    by_name = {Path(f["path"]).name: (f["status"], f["reason"]) for f in report["files"]}
    assert by_name["index.rst"] == ("skipped", "no text of its own (toctree only)")
    assert by_name["api.md"] == ("skipped", "no text of its own (automodule only)")
    assert report["counts"]["failed"] == 0 and report["counts"]["added"] == 2


def test_a_corrupt_pdf_beside_a_toctree_page_still_fails_the_job(tmp_path, docs, capsys, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    (docs / "index.rst").write_text("Guides\n======\n\n.. toctree::\n\n   layernorm\n")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage")
    code, out, _ = run_cli(["ingest", str(docs), "--store", str(tmp_path / "home"), "--json"], capsys)
    assert code == 1
    statuses = {Path(f["path"]).name: f["status"] for f in json.loads(out)["files"]}
    assert (statuses["index.rst"], statuses["broken.pdf"]) == ("skipped", "failed")


def test_licence_and_build_files_get_their_own_kind_and_stay_out_of_hardware_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    repo = tmp_path / "repo"
    (repo / "cmake").mkdir(parents=True)
    memory = "The H100 has 50 MB of L2 cache shared by all SMs."
    (repo / "LICENSE").write_text(f"MIT License\n\nPermission is granted to use this software. {memory}\n")
    (repo / "NOTICE.md").write_text(f"# Notice\n\n{memory}\n")
    (repo / "CMakeLists.txt").write_text(f"# {memory}\nproject(kernels CUDA)\n")
    (repo / "Makefile").write_text(f"# {memory}\nall:\n\tnvcc -arch=sm_90 k.cu\n")
    (repo / "cmake" / "cuda.cmake").write_text(f"# {memory}\n")
    (repo / "pyproject.toml").write_text(f'[project]\nname = "kernels"\ndescription = "{memory}"\n')
    (repo / "memory.md").write_text(f"# H100 memory\n\n{memory}\n")
    from knowledge.retrieve import ask

    with Store.open(tmp_path / "home") as store:
        report = ingest_paths(store, [repo], IngestOptions(kind=ChunkKind.hardware))
        assert all(f.status is FileStatus.added for f in report.files), report.files
        kinds = {Path(d.source).name: d.kind for d in store.documents()}
        assert kinds == {
            "CMakeLists.txt": ChunkKind.housekeeping,
            "LICENSE": ChunkKind.housekeeping,
            "Makefile": ChunkKind.housekeeping,
            "NOTICE.md": ChunkKind.housekeeping,
            "cuda.cmake": ChunkKind.housekeeping,
            "memory.md": ChunkKind.hardware,
            "pyproject.toml": ChunkKind.housekeeping,
        }
        assert {c.kind for c in store.chunks() if "project(kernels" in c.text} == {ChunkKind.housekeeping}
        hardware = ask(store, "how much L2 cache does the H100 have", k=5).documents
        assert [h.title for h in hardware] == ["H100 memory"]
        licence = ask(store, "which license grants permission to use this software", k=5).documents
        assert licence[0].title == "LICENSE"


@pytest.mark.parametrize(
    "base, relative, url",
    [
        (
            "https://github.com/NVIDIA/cccl/blob/571f2fc/docs/",
            "cub/api/CMakeLists.txt",
            "https://github.com/NVIDIA/cccl/blob/571f2fc/docs/cub/api/CMakeLists.txt",
        ),
        (
            "https://github.com/NVIDIA/cccl/blob/571f2fc/docs",
            "cub/index.rst",
            "https://github.com/NVIDIA/cccl/blob/571f2fc/docs/cub/index.rst",
        ),
        (
            "https://gitlab.com/org/kernels/-/blob/main/docs/",
            "guide.md",
            "https://gitlab.com/org/kernels/-/blob/main/docs/guide.md",
        ),
        ("https://nvidia.github.io/cccl/", "cub/index.rst", "https://nvidia.github.io/cccl/cub/index.html"),
        (
            "https://rocm.docs.amd.com/projects/hip/en/latest/",
            "license.md",
            "https://rocm.docs.amd.com/projects/hip/en/latest/license.html",
        ),
        ("https://docs.example.org/", "sheets/h100.pdf", "https://docs.example.org/sheets/h100.pdf"),
    ],
)
def test_a_per_file_url_keeps_the_extension_on_a_source_browser_and_gets_html_on_a_docs_site(base, relative, url):
    from knowledge.ingest import file_url

    assert file_url(base, relative) == url


def test_a_url_template_fills_path_and_stem_for_each_file(tmp_path, docs, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    template = "https://host/docs/{stem}.html?src={path}"
    with Store.open(tmp_path / "home") as store:
        ingest_paths(store, [docs / "sub"], IngestOptions(url_template=template))
        ingest_paths(store, [docs / "layernorm.md"], IngestOptions(url_template="https://host/single/{path}"))
        urls = {Path(d.source).name: d.source_url for d in store.documents()}
    assert urls == {
        "softmax.md": "https://host/docs/softmax.html?src=softmax.md",
        "layernorm.md": "https://example.org/ln-notes",  # its own header names its page
    }


@pytest.mark.parametrize(
    "args, message",
    [
        (["--url-template", "https://host/{name}"], "unknown placeholder {name} (known: {path}, {stem})"),
        (["--url-template", "https://host/docs/"], "names no {path} or {stem}"),
        (["--url-template", "https://host/{path}", "--source-url", "https://host/"], "not both"),
    ],
)
def test_a_bad_url_template_is_refused_before_anything_is_read(tmp_path, docs, capsys, args, message):
    home = tmp_path / "home"
    code, _, err = run_cli(["ingest", str(docs), "--store", str(home), *args], capsys)
    assert code == 2 and message in err
    assert not home.exists() or not Store.open(home).documents()


@needs_thirdparty
def test_composable_kernel_docs_ingest_without_a_failure_and_name_the_licence_include(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    root = THIRDPARTY / "composable_kernel" / "docs"
    with Store.open(tmp_path / "home") as store:
        report = ingest_paths(store, [root])
    by_name = {Path(f.path).name: f for f in report.files}
    assert report.failed == ()
    licence = by_name["license.rst"]
    assert (licence.status, licence.reason) == (FileStatus.skipped, "no text of its own (include only)")
    assert licence.notes == (
        f"include ../LICENSE is outside the ingested tree ({THIRDPARTY / 'composable_kernel' / 'LICENSE'}): not read",
    )


@pytest.mark.slow  # about 30 s on 2 cores: 450 pages through docutils
@needs_thirdparty
def test_the_vendor_docs_ingest_with_zero_failed_and_includes_followed(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")
    base = "https://github.com/NVIDIA/cccl/blob/571f2fc3bc53cd710e306ad43d58995c1fe4219f/docs/"
    with Store.open(tmp_path / "home") as store:
        cccl = ingest_paths(store, [THIRDPARTY / "cccl" / "docs"], IngestOptions(source_url=base))
        ck = ingest_paths(store, [THIRDPARTY / "composable_kernel" / "docs"])
        assert cccl.failed == () and ck.failed == ()
        reasons = {f.reason for f in cccl.files + ck.files if f.status is FileStatus.skipped}
        assert "no text of its own (toctree only)" in reasons
        fence = next(d for d in store.documents() if d.source.endswith("ptx/instructions/fence.rst"))
        assert fence.source_url == base + "libcudacxx/ptx/instructions/fence.rst"
        paths = {c.heading_path for c in store.chunks(fence.document_id)}
        assert ("fence", "fence", "fence.sc.cta") in paths  # from generated/fence.rst, under its section
        sources = {Path(d.source).name for d in store.documents()}
        assert "fence_proxy_alias.rst" not in sources  # included, so indexed in fence.rst only
        assert not any(d.source_url.endswith(".html") for d in store.documents() if d.source_url)
