"""The knowledge commands' tables at 80 columns, on a console of that width and through a pipe: a path,
a URL or an id is cut with "…", never folded mid-word, so a grep for a file name finds its line; `docs`
shows one line per document unless --long."""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from test_knowledge_ingest import run_cli

from knowledge.cli import _report_table
from knowledge.records import (
    AskResult,
    DocumentHit,
    FileResult,
    FileStatus,
    IngestReport,
    OutcomeHit,
    QueryFacets,
)
from knowledge.render import cut_path, fill, render_answer, unique_prefixes
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


def test_cut_path_keeps_the_file_name_whole_and_cuts_the_folders():
    assert cut_path(f"{LONG_DIR}/broken.pdf", 30) == "/data/vendor-docs/…/broken.pdf"
    assert cut_path("hwdocs/amd-mi300x.md", 16) == "…/amd-mi300x.md"  # a head of 1-3 characters says nothing
    assert cut_path("short.md", 30) == "short.md"


def test_cut_path_keeps_the_start_and_end_of_a_name_too_long_for_the_width():
    name = "layernorm-row-wise-kernels-on-the-mi300x-accelerator-family.md"
    assert cut_path(f"/docs/{name}", 24) == "layernorm-row-wi…mily.md"
    assert cut_path("#tuning-triton-kernels-on-mi300x", 24) == "#tuning-triton-k…-mi300x"


def test_fill_breaks_only_between_words_and_cuts_a_path_longer_than_a_line():
    lines = fill(["failed:", f"{LONG_DIR}/{'x' * 60}/broken.pdf:", "corrupt", "PDF"], 40, indent="    ")
    assert lines == ["failed:", "    /data/vendor-docs/nvidi…/broken.pdf:", "    corrupt PDF"]
    devices = fill(["A100 PCIE (1),", "H100 SXM (1),", "MI300X (1)"], 30, first="devices:")
    assert devices == ["devices: A100 PCIE (1),", "  H100 SXM (1), MI300X (1)"]


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


def test_ingest_through_a_pipe_at_80_columns_fits_every_line_and_keeps_broken_pdf_whole(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    deep = tmp_path / "a-rather-long-folder-name" / "another-long-sub-folder" / "and-one-more"
    deep.mkdir(parents=True)
    (deep / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage")
    (deep / "fine.md").write_text("# Fine\n\nA sentence.\n")

    code, out, _ = run_cli(["ingest", str(tmp_path), "--store", str(tmp_path / "home")], capsys)

    assert code == 1
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    grep = [line for line in lines if "broken.pdf" in line]
    assert len(grep) == 2  # its table row and its failure line, the name whole on each
    assert re.search(r"…/broken\.pdf\s+failed\s+0\s+corrupt PDF", grep[0])
    assert grep[1].startswith("failed: /") and grep[1].endswith("/broken.pdf:")
    # The reason follows in full, wrapped between words onto indented lines.
    after = lines[lines.index(grep[1]) + 1 :]
    reason = " ".join(
        line.strip() for line in after[: next(i for i, x in enumerate(after) if not x.startswith("    "))]
    )
    assert reason.startswith("corrupt PDF (PdfStreamError") and reason.endswith(")")
    assert not any(line.strip().startswith(("pdf", "df ", "and-one-more")) for line in lines)


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


def test_ask_source_at_80_columns_keeps_the_file_name_on_one_line_and_the_anchor_on_the_next():
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
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    (line,) = lines_with_any(out, ["https://", "layout_algebra", "5a24e1", "cute"])
    assert line.rstrip().endswith(" …/02_layout_algebra.md")
    assert lines[lines.index(line) + 1].rstrip().endswith(" #composition")
    # Prose wraps between words: every word of the excerpt is whole on some line.
    words = set(" ".join(out.split()).split())
    assert {"composition", "layouts", "whose", "second"} <= {w.strip(".") for w in words}


def test_ask_outcomes_at_80_columns_cut_a_long_evidence_id_to_its_prefix():
    from test_knowledge_outcomes import outcome

    evidence = "ev-0123456789abcdef0123456789abcdef0123456789abcdef"
    o = outcome("h200-slow", "passed", 0.92, 0.90, 0.95).model_copy(update={"evidence_eval_ids": (evidence,)})
    result = AskResult(
        facets=QueryFacets(),
        intent="failed",
        outcomes=(o,),
        documents=(),
        outcome_hits=(OutcomeHit(outcome=o, significant=True, verdict="significant slowdown"),),
    )
    out = render(result_printer(result))
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    (line,) = lines_with_any(out, ["ev-0123"])
    assert re.search(r"\sev-01234567\w*…$", line.rstrip())
    assert not any(line.strip().startswith(("abcdef", "89ab")) for line in lines)


class result_printer:
    """An answer as a rich renderable, so `render` prints it at a given width."""

    def __init__(self, result: AskResult):
        self.result = result

    def __rich_console__(self, console, options):
        render_answer(console, self.result)
        return []


def _ingest_long_names(tmp_path: Path, capsys) -> tuple[str, Path]:
    """A store with three documents: deep paths, a long URL, a file name longer than any column."""
    docs = tmp_path / "a-docs-folder-with-a-long-name" / "and-a-deep-sub-folder" / "and-one-more"
    docs.mkdir(parents=True)
    for name in ("alpha", "beta"):
        (docs / f"{name}-guide.md").write_text(f"# {name.title()} guide\n\n## One\n\nText.\n\n## Two\n\nMore.\n")
    (docs / f"{LONG_NAME}.md").write_text("# Gamma guide\n\nText.\n")
    home = str(tmp_path / "home")
    code, _, _ = run_cli(
        [
            "ingest",
            str(docs),
            "--store",
            home,
            "--vendor",
            "nvidia",
            "--device",
            "H100",
            "--device",
            "H100 SXM",
            "--device",
            "H200",
            "--doc-version",
            "12.4",
        ],
        capsys,
    )
    assert code == 0
    return home, docs


LONG_NAME = "gamma-programming-guide-for-the-accelerator-with-a-very-long-file-name"
URL = "https://github.com/NVIDIA/a-repository-with-a-long-name/blob/0123456789abcdef0123456789abcdef01234567/docs"


def test_docs_at_80_columns_shows_one_line_per_document_with_its_name_whole_or_cut(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    home, docs = _ingest_long_names(tmp_path, capsys)
    documents = json.loads(run_cli(["docs", "--json", "--store", home], capsys)[1])["documents"]
    ids = {d["title"]: d["document_id"] for d in documents}

    code, out, _ = run_cli(["docs", "--store", home], capsys)

    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert len(lines) == 3 + 3 + 2  # title, header, rule; one line a document; vendors, devices
    assert lines[1].split() == ["id", "document", "kind", "chunks", "vendor,", "devices", "source"]
    rows = dict(zip(["Alpha guide", "Beta guide", "Gamma guide"], lines[3:6]))
    for title, row in rows.items():
        assert row.startswith(ids[title][:8] + "  " + title)
        assert re.search(r"\shardware\s+\d+\s+nvidia H100 \+2\s", row)  # the first device and how many more
    assert re.search(r"\s2\s+nvidia", rows["Alpha guide"])  # its two sections
    assert rows["Alpha guide"].endswith("…/alpha-guide.md")  # the file name whole, its folders cut
    assert rows["Beta guide"].endswith("…/beta-guide.md")
    # A name longer than the column keeps its start and its end, around "…", on its one line.
    gamma = rows["Gamma guide"].split()[-1]
    assert "…" in gamma and LONG_NAME.startswith(gamma.split("…")[0]) and gamma.endswith(".md")
    assert not any(line.strip().startswith(("guide.md", "and-one-more", "long-file-name")) for line in lines)
    # The compact view leaves out the full id, the hash, the version and the ingest time.
    assert ids["Alpha guide"] not in out and "12.4" not in out and "sha256" not in out


def test_docs_long_at_80_columns_shows_every_field_the_compact_view_leaves_out(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    home, docs = _ingest_long_names(tmp_path, capsys)
    alpha = docs / "alpha-guide.md"
    assert (
        run_cli(["retag", "alpha-guide.md", "--source-url", f"{URL}/alpha-guide.md", "--store", home], capsys)[0] == 0
    )
    (doc,) = [
        d
        for d in json.loads(run_cli(["docs", "--json", "--store", home], capsys)[1])["documents"]
        if d["title"] == "Alpha guide"
    ]

    code, out, _ = run_cli(["docs", "--long", "--store", home], capsys)

    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    record = lines[lines.index("Alpha guide") + 1 : lines.index("Beta guide") - 1]
    joined = "\n".join(record).replace("\n" + " " * 12, " ").splitlines()  # a long field wraps between words
    fields = {line.split()[0]: line.split(None, 1)[1] for line in joined}
    assert fields["id"] == doc["document_id"]
    assert fields["sha256"] == hashlib.sha256(alpha.read_bytes()).hexdigest()
    assert fields["version"] == "12.4" and fields["vendor"] == "nvidia" and fields["kind"] == "hardware"
    assert fields["origin"] == "vendor" and fields["chunks"] == "2"
    assert fields["devices"] == "H100, H100 SXM, H200"
    assert fields["ingested"] == doc["ingested_at"][:19] and fields["retagged"] == doc["retagged_at"][:19]
    assert fields["source"].endswith("…/alpha-guide.md") or fields["source"] == str(alpha)
    assert fields["url"].startswith("https://github.com/NVIDIA/") and fields["url"].endswith("…/alpha-guide.md")
    assert fields["changed"].startswith('source_url null -> "https://github.com/')
    assert fields["changed"].endswith(f"(retag, {doc['retagged_at'][:10]})")


def test_docs_footer_wraps_between_devices_and_never_inside_a_name(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    home, _ = _ingest_long_names(tmp_path, capsys)

    out = run_cli(["docs", "--store", home], capsys)[1]

    footer = out[out.index("devices:") :].splitlines()
    assert max(len(line) for line in footer) <= 40
    assert footer == ["devices: H100 (3), H100 SXM (3),", "  H200 (3)"]


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
