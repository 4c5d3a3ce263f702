"""Parsing every input format into headed blocks, the provenance header, and chunking by headings."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from knowledge.chunk import chunk_blocks
from knowledge.errors import FrontMatterError, IngestError
from knowledge.frontmatter import split_front_matter
from knowledge.parse import Block, parse_bytes
from store.records import ChunkKind


def make_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """A real PDF written by hand: one Helvetica text line per item, correct xref offsets."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objs.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, lines in enumerate(pages):
        ops = ["BT", "/F1 12 Tf", "14 TL", "72 720 Td"]
        ops += ["(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*" for line in lines]
        stream = "\n".join(ops + ["ET"]).encode()
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                    f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>".encode())
        objs.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    info = ""
    if title:
        objs.append(f"<< /Title ({title}) >>".encode())
        info = f" /Info {len(objs)} 0 R"
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R{info} >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


H200_MD = """---
title: NVIDIA H200 SXM (Hopper)
kind: hardware
vendor: nvidia
devices: [H200, H200 SXM, H200 NVL]
doc_version: 2026-12
written: 2026-12-02
sources: [https://www.nvidia.com/en-us/data-center/h200/, "Hopper whitepaper, 2022"]
---
# NVIDIA H200 SXM
Intro line.

## Memory hierarchy
141 GB of HBM3e at 4.8 TB/s.

```python
# a comment, not a heading
x = 1
```

### L2 cache
50 MB.

## Empty section
## Tuning
Use num_warps 8.
"""


def test_front_matter_reads_scalars_lists_and_quoted_items_with_commas():
    header, body = split_front_matter(H200_MD)
    assert header.title == "NVIDIA H200 SXM (Hopper)"
    assert header.kind is ChunkKind.hardware
    assert header.vendor == "nvidia"
    assert header.devices == ("H200", "H200 SXM", "H200 NVL")
    assert header.sources == ("https://www.nvidia.com/en-us/data-center/h200/", "Hopper whitepaper, 2022")
    assert header.written == "2026-12-02"
    assert body.lstrip().startswith("# NVIDIA H200 SXM")


@pytest.mark.parametrize(
    "header, message",
    [
        ("title: x\ndevcies: [H100]\n", "unknown key 'devcies'"),
        ("title: x\ntitle: y\n", "given twice"),
        ("kind: firmware\n", "kind must be hardware | constraint | guidance"),
        ("vendor: nvdia\n", "vendor must be one of"),
        ("devices: H100, H200\n", "must be a [list, of, values]"),
        ("written: 2 Dec 2026\n", "YYYY-MM-DD"),
        ("just some words\n", "expected 'key: value'"),
    ],
)
def test_front_matter_rejects_malformed_headers_with_the_reason(header, message):
    with pytest.raises(FrontMatterError, match=message.replace("[", r"\[").replace("|", r"\|")):
        split_front_matter(f"---\n{header}---\n# Body\ntext\n")


def test_front_matter_that_is_never_closed_is_an_error():
    with pytest.raises(FrontMatterError, match="never closed"):
        split_front_matter("---\ntitle: x\n# Body\ntext\n")


def test_markdown_without_header_is_plain_markdown():
    header, body = split_front_matter("# Title\n\ntext\n")
    assert header is None and body == "# Title\n\ntext\n"


def test_markdown_chunks_follow_headings_and_skip_code_fence_comments():
    doc = parse_bytes(Path("h200.md"), H200_MD.encode())
    chunks = chunk_blocks(doc.blocks, title=doc.header.title)
    assert [c.heading_path for c in chunks] == [
        ("NVIDIA H200 SXM",),
        ("NVIDIA H200 SXM", "Memory hierarchy"),
        ("NVIDIA H200 SXM", "Memory hierarchy", "L2 cache"),
        ("NVIDIA H200 SXM", "Tuning"),
    ]
    memory = chunks[1]
    assert "# a comment, not a heading" in memory.body and "x = 1" in memory.body
    # The context line ties an anonymous paragraph to its device; the H1 inside the title is not repeated.
    assert memory.text.startswith("NVIDIA H200 SXM (Hopper) > Memory hierarchy\n\n141 GB")


def test_long_sections_split_at_paragraph_boundaries_near_the_limit():
    paragraphs = [f"Paragraph {i}. " + "word " * 50 for i in range(10)]  # ~265 chars each
    blocks = [Block(2, "Long")] + [Block(0, p.strip()) for p in paragraphs]
    chunks = chunk_blocks(blocks, title="Doc", max_chars=1200)
    assert len(chunks) == 3
    assert all(len(c.body) <= 1200 for c in chunks)
    # Nothing lost or cut mid-paragraph: the bodies rejoin into the original paragraphs.
    rejoined = [p for c in chunks for p in c.body.split("\n\n")]
    assert rejoined == [p.strip() for p in paragraphs]
    assert all(c.heading_path == ("Long",) for c in chunks)


def test_a_paragraph_longer_than_the_limit_splits_at_sentences():
    sentence = "The tile is sixty four wide and it fits. "
    blocks = [Block(0, (sentence * 80).strip())]
    chunks = chunk_blocks(blocks, title="Doc", max_chars=500)
    assert len(chunks) >= 6 and all(len(c.body) <= 500 for c in chunks)
    assert all(c.body.endswith("fits.") for c in chunks)


def test_html_keeps_headings_and_text_and_drops_scripts_and_styles():
    html = b"""<!doctype html><html><head><title>MI300X notes</title><style>p{color:red}</style></head>
    <body><nav>Home</nav><h1>MI300X</h1><p>Wavefront size is <b>64</b> lanes.</p>
    <script>var secret = "should not appear";</script>
    <h2>LDS &amp; registers</h2><ul><li>64 KB LDS per CU</li><li>512 VGPRs</li></ul>
    <h3>Tuning</h3><p>Use BLOCK 256.</p><h4>Minor</h4><p>detail</p></body></html>"""
    doc = parse_bytes(Path("notes.html"), html)
    assert doc.format == "html" and doc.title == "MI300X notes"
    headings = [(b.level, b.text) for b in doc.blocks if b.level]
    assert headings == [(1, "MI300X"), (2, "LDS & registers"), (3, "Tuning")]
    text = " ".join(b.text for b in doc.blocks)
    assert "Wavefront size is 64 lanes." in text and "64 KB LDS per CU" in text
    assert "secret" not in text and "color:red" not in text
    chunks = chunk_blocks(doc.blocks, title=doc.title)
    assert ("MI300X", "LDS & registers", "Tuning") in [c.heading_path for c in chunks]


def test_pdf_text_is_extracted_with_guessed_headings_and_page_sections():
    data = make_pdf(
        [["Memory Hierarchy", "The L2 cache is 50 MB and shared by all SMs.", "Memory Bandwidth 3.35 TB/s"],
         ["plain text on page two without a heading.", "Tuning Triton Kernels", "Use num_warps 8."]],
        title="Fake Datasheet",
    )
    doc = parse_bytes(Path("sheet.pdf"), data)
    assert doc.format == "pdf" and doc.title == "Fake Datasheet"
    chunks = chunk_blocks(doc.blocks, title=doc.title)
    assert [(c.heading_path, c.body) for c in chunks] == [
        (("Memory Hierarchy",), "The L2 cache is 50 MB and shared by all SMs. Memory Bandwidth 3.35 TB/s"),
        (("Page 2",), "plain text on page two without a heading."),
        (("Tuning Triton Kernels",), "Use num_warps 8."),
    ]


def test_pdf_detected_by_content_even_without_pdf_suffix():
    doc = parse_bytes(Path("download.bin"), make_pdf([["Hello from a misnamed file."]]))
    assert doc.format == "pdf"


def test_blank_pdf_is_reported_as_having_no_text():
    import pypdf

    writer = pypdf.PdfWriter()
    writer.add_blank_page(612, 792)
    buf = io.BytesIO()
    writer.write(buf)
    with pytest.raises(IngestError, match=r"no extractable text \(1 page"):
        parse_bytes(Path("blank.pdf"), buf.getvalue())


@pytest.mark.parametrize("data", [b"%PDF-1.4\nthis is not a pdf body\n", make_pdf([["x y z"]])[:200]])
def test_corrupt_pdf_is_an_ingest_error_naming_it(data):
    with pytest.raises(IngestError, match="corrupt PDF"):
        parse_bytes(Path("broken.pdf"), data)


@pytest.mark.parametrize(
    "name, data, reason",
    [
        ("empty.md", b"", "empty file"),
        ("blank.txt", b"  \n\n\t\n", "empty file"),
        ("blob.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
        ("latin.txt", "caf\xe9 cr\xe8me".encode("latin-1"), "not UTF-8"),
        ("only-header.md", b"---\ntitle: x\nkind: hardware\nsources: [a]\n---\n# Just a title\n", "no text to index after the header"),
    ],
)
def test_files_that_hold_no_indexable_text_are_refused_with_a_reason(name, data, reason):
    with pytest.raises(IngestError, match=reason):
        parse_bytes(Path(name), data)


def test_plain_text_becomes_paragraphs_without_headings():
    doc = parse_bytes(Path("notes.txt"), b"first paragraph\nstill first\n\nsecond paragraph\n")
    assert doc.format == "text" and doc.title is None
    assert doc.blocks == [Block(0, "first paragraph\nstill first"), Block(0, "second paragraph")]
