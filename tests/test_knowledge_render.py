"""The knowledge commands' tables at 80 columns, on a console of that width and through a pipe: a path,
a URL or an id is cut with "…", never folded mid-word, so a grep for a file name finds its line; `docs`
shows one line per document unless --long."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from test_knowledge_ingest import run_cli

from knowledge.cli import _report_table
from knowledge.records import AskResult, DocumentHit, FileResult, FileStatus, IngestReport, QueryFacets
from knowledge.render import cut_middle, render_answer, unique_prefixes
from store.records import ChunkKind

LONG_DIR = "/data/vendor-docs/nvidia/cutlass-3.6.0/media/docs/cpp/cute/generated/appendix"


def render(renderable, width: int = 80) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(renderable)
    return buf.getvalue()


def lines_with_any(out: str, pieces) -> list[str]:
    return [line for line in out.splitlines() if any(p in line for p in pieces)]


@pytest.fixture(autouse=True)
def rows_only(monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")


def test_cut_middle_keeps_the_start_and_the_file_name():
    assert cut_middle(f"{LONG_DIR}/broken.pdf", 30) == "/data/ven…/appendix/broken.pdf"
    assert cut_middle("short.md", 30) == "short.md"


def test_ingest_table_at_80_columns_cuts_a_long_path_in_its_middle_and_folds_nothing():
    report = IngestReport(
        files=(
            FileResult(path=f"{LONG_DIR}/broken.pdf", status=FileStatus.failed, reason="corrupt PDF (KeyError: /Root)"),
            FileResult(
                path=f"{LONG_DIR}/index.rst", status=FileStatus.skipped, reason="no text of its own (toctree only)"
            ),
            FileResult(path="docs/ok.md", status=FileStatus.added, chunks=12),
        ),
        duration_s=0.1,
    )
    out = render(_report_table(report, 80))
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert len(lines) == 3 + 3  # title, header, rule, then one line per file
    (broken,) = lines_with_any(out, ["broken"])
    assert re.search(r"/data/\S*…\S*/broken\.pdf\s+failed\s+0\s+corrupt PDF", broken)
    # No piece of the long folder on a line of its own: nothing was folded onto a second line.
    assert len(lines_with_any(out, ["vendor", "nvidia", "cutlass", "media", "cute", "generated", "appendix"])) == 2


def test_ingest_through_a_pipe_at_80_columns_keeps_each_failure_whole_on_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    deep = tmp_path / "a-rather-long-folder-name" / "another-long-sub-folder" / "and-one-more"
    deep.mkdir(parents=True)
    (deep / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage")
    (deep / "fine.md").write_text("# Fine\n\nA sentence.\n")

    code, out, _ = run_cli(["ingest", str(tmp_path), "--store", str(tmp_path / "home")], capsys)

    assert code == 1
    table = out.split("failed: ")[0]
    assert max(len(line) for line in table.splitlines()) <= 80
    grep = [line for line in out.splitlines() if "broken.pdf" in line]
    assert len(grep) == 2  # its table row (cut in the middle) and its whole failure line
    assert grep[1].startswith(f"failed: {deep / 'broken.pdf'}: corrupt PDF")
    assert not any(line.strip().startswith(("pdf", "df ", "and-one-more")) for line in out.splitlines())


def _hit(i: int, location: str) -> DocumentHit:
    return DocumentHit(
        chunk_id=f"{i}",
        document_id=f"doc{i}",
        title="CuTe layout algebra",
        heading_path=("CuTe layout algebra", "Composition"),
        kind=ChunkKind.hardware,
        text="x",
        source="/x",
        score=1.0,
        excerpt="The composition of two layouts is a layout whose shape follows the second one.",
        location=location,
        vendor="nvidia",
    )


def test_ask_documents_at_80_columns_cut_a_long_url_with_an_ellipsis_and_keep_its_anchor():
    url = "https://github.com/NVIDIA/cutlass/blob/5a24e1b6b3b1d6c1a1f3/media/docs/cpp/cute/02_layout_algebra.md"
    result = AskResult(
        facets=QueryFacets(),
        intent="fact",
        outcomes=(),
        documents=(_hit(1, f"{url}#composition"),),
    )
    buf = io.StringIO()
    render_answer(Console(file=buf, width=80, color_system=None), result)
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80
    (line,) = lines_with_any(out, ["https://", "layout_algebra", "#composition", "5a24e1"])
    assert re.search(r"\shttps:/\S*…\S*\.md#composition$", line.rstrip())
    # Prose wraps between words: every word of the excerpt is whole on some line.
    words = set(" ".join(out.split()).split())
    assert {"composition", "layouts", "whose", "second"} <= {w.strip(".") for w in words}


def test_docs_shows_one_line_per_document_and_long_shows_every_field(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    docs = tmp_path / "a-docs-folder-with-a-long-name" / "and-a-deep-sub-folder"
    docs.mkdir(parents=True)
    for name in ("alpha", "beta", "gamma"):
        (docs / f"{name}-programming-guide-for-the-accelerator.md").write_text(f"# {name.title()} guide\n\nText.\n")
    home = str(tmp_path / "home")
    assert run_cli(["ingest", str(docs), "--store", home, "--vendor", "nvidia", "--device", "H100"], capsys)[0] == 0

    code, out, _ = run_cli(["docs", "--store", home], capsys)
    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if "programming" in line or "guide" in line.lower()]
    assert [row.split()[1] for row in rows] == ["Alpha", "Beta", "Gamma"]
    assert all("nvidia H100" in row and "hardware" in row and "…" in row for row in rows)
    assert len(lines) == 3 + 3 + 2  # title, header, rule; one line a document; vendors, devices

    code, out, _ = run_cli(["docs", "--long", "--store", home], capsys)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    assert out.count("sha256 ") == 3 and out.count("ingested") == 1


def test_unique_prefixes_are_eight_characters_unless_two_ids_share_them():
    ids = ["a5e0bed595c3ff0c", "a5e0bed5f0000000", "4a27ecd3d001e610"]
    assert unique_prefixes(ids) == {
        "a5e0bed595c3ff0c": "a5e0bed59",
        "a5e0bed5f0000000": "a5e0bed5f",
        "4a27ecd3d001e610": "4a27ecd3",
    }


def test_a_path_that_fits_is_shown_whole():
    report = IngestReport(
        files=(FileResult(path="docs/broken.pdf", status=FileStatus.failed, reason="x"),), duration_s=0
    )
    assert re.search(r"^docs/broken\.pdf\s+failed", render(_report_table(report, 80)), re.MULTILINE)
