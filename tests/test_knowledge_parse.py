"""Parsing every input format into headed blocks, the provenance header, and chunking by headings."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from knowledge.chunk import chunk_blocks
from knowledge.errors import FrontMatterError, IngestError, NoTextError
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
        objs.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>".encode()
        )
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
        ("title: x\ntitle: y\n", "header line 3: key 'title' given twice"),
        ("kind: firmware\n", "kind must be hardware | constraint | guidance"),
        ("origin: somebody\n", "origin must be vendor | project | external"),
        ("devices: {H100: 1, H200: 2}\n", "devices must be a list of names, got a dict"),
        ("title: [a, b]\n", "title must be one value, got a list"),
        ("vendor: '!!'\n", "vendor name '!!' must be"),
        ("written: 2 Dec 2026\n", "YYYY-MM-DD"),
        ("just some words\n", "expected 'key: value' lines (a YAML mapping)"),
        ("title: [unclosed\n", "not valid YAML"),
    ],
)
def test_front_matter_rejects_malformed_headers_with_the_reason(header, message):
    with pytest.raises(FrontMatterError, match=re.escape(message)):
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
    assert headings == [(1, "MI300X"), (2, "LDS & registers"), (3, "Tuning"), (4, "Minor")]
    text = " ".join(b.text for b in doc.blocks)
    assert "Wavefront size is 64 lanes." in text and "64 KB LDS per CU" in text
    assert "secret" not in text and "color:red" not in text
    chunks = chunk_blocks(doc.blocks, title=doc.title)
    assert ("MI300X", "LDS & registers", "Tuning") in [c.heading_path for c in chunks]


def test_pdf_text_is_extracted_with_guessed_headings_and_page_sections():
    data = make_pdf(
        [
            ["Memory Hierarchy", "The L2 cache is 50 MB and shared by all SMs.", "Memory Bandwidth 3.35 TB/s"],
            ["plain text on page two without a heading.", "Tuning Triton Kernels", "Use num_warps 8."],
        ],
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
    ],
)
def test_files_that_hold_no_indexable_text_are_refused_with_a_reason(name, data, reason):
    with pytest.raises(IngestError, match=reason) as caught:
        parse_bytes(Path(name), data)
    assert not isinstance(caught.value, NoTextError)  # broken, not merely empty of prose: a failure


@pytest.mark.parametrize(
    "name, data, reason",
    [
        (
            "only-header.md",
            b"---\ntitle: x\nkind: hardware\nsources: [a]\n---\n# Just a title\n",
            "header and headings",
        ),
        ("index.rst", b"Setup\n=====\n\n.. toctree::\n   :maxdepth: 1\n\n   setup/getting\n", "toctree"),
        ("api.rst", b"API\n===\n\n.. automodule:: cuda.compute\n   :members:\n", "automodule"),
        ("gather.md", b"# Gather\n\n```{toctree}\n:glob:\napi/group__gather*\n```\n", "toctree"),
        ("license.md", b"# License\n\n```{include} ../LICENSE.md\n```\n", "include"),
    ],
)
def test_a_page_with_no_text_of_its_own_says_what_it_holds(name, data, reason):
    with pytest.raises(NoTextError) as caught:
        parse_bytes(Path(name), data)
    assert str(caught.value) == f"no text of its own ({reason} only)"


def test_plain_text_becomes_paragraphs_without_headings():
    doc = parse_bytes(Path("notes.txt"), b"first paragraph\nstill first\n\nsecond paragraph\n")
    assert doc.format == "text" and doc.title is None
    assert doc.blocks == [Block(0, "first paragraph\nstill first"), Block(0, "second paragraph")]


# -- front matter from documents written elsewhere -----------------------------------------------------

MYST_MD = """---
myst:
  html_meta:
    "description": "MI300 microarchitecture"
keywords: [CDNA 3, XCD]
devcies: [MI300X]
vendor: Advanced Micro Devices, Inc.
version: 6.10
---

(mi300-arch)=
# MI300 microarchitecture

```{note}
MI300A is the APU model.
```

## Compute units {ref}`see here <cu-label>`

Each XCD has 38 active CUs.

```{code-block} python
:caption: example
x = 1  # a comment, not a heading
```

:::{tip}
Use one process per GCD.
:::

| Level | MI300X |
| --- | --- |
| LDS per CU | 64 KB |

```{toctree}
:hidden:
other-page
```
"""


def test_any_front_matter_keys_are_kept_as_metadata_and_provenance_keys_are_read():
    header, body = split_front_matter(MYST_MD)
    assert header.metadata["myst"] == {"html_meta": {"description": "MI300 microarchitecture"}}
    assert header.metadata["keywords"] == ["CDNA 3", "XCD"]
    assert header.vendor == "amd"  # normalised, company suffix and all
    assert header.doc_version == "6.10"  # as written, not the float 6.1
    assert header.devices == ()  # the misspelt key is not read as devices...
    assert header.metadata["devcies"] == ["MI300X"]  # ...but kept, and the ingest summary says so
    assert header.notes == ("front-matter key 'devcies' kept as metadata; did you mean 'devices'?",)


def test_myst_directives_labels_and_roles_leave_no_markup_in_the_text():
    doc = parse_bytes(Path("mi300.md"), MYST_MD.encode())
    text = "\n".join(b.text for b in doc.blocks)
    for markup in ("```{", ":::", "{ref}", "(mi300-arch)=", ":caption:", ":hidden:", "other-page"):
        assert markup not in text
    assert "Note:" in text and "MI300A is the APU model." in text and "Tip:" in text
    headings = [(b.level, b.text, b.anchor) for b in doc.blocks if b.level]
    assert headings == [
        (1, "MI300 microarchitecture", "mi300-arch"),
        (2, "Compute units see here", "compute-units-see-here"),
    ]
    code = [b for b in doc.blocks if b.kind == "code"]
    assert len(code) == 1 and code[0].text == "```python\nx = 1  # a comment, not a heading\n```"
    table = next(b for b in doc.blocks if b.kind == "table")
    assert table.text == "| Level | MI300X |\n| --- | --- |\n| LDS per CU | 64 KB |"


# -- reStructuredText through docutils ------------------------------------------------------------------

RST = """.. _top-label:

.. meta::
   :description: tuning

*************************
Optimizing on MI300X
*************************

Intro with :ref:`the arch page <mi300-arch>`, :cpp:func:`hipMalloc` and |undefined|.

.. contents:: On this page
   :local:

Kernel knobs
============

.. list-table:: Knobs
   :header-rows: 1

   * - Knob
     - Start
   * - ``waves_per_eu``
     - 2
   * - ``kpack``
     - 2

.. note::

   Deeper pipelines lower occupancy.

.. code-block:: python
   :linenos:

   grid = (n_rows,)

.. tab-set::

   .. tab-item:: HIP runtime

      ``HIP_FORCE_DEV_KERNARG=1`` saves 2 to 3 microseconds.

.. versionadded:: 6.2
   The ``kpack`` knob.

Sub section
-----------

- first item
- second item

.. toctree::
   :hidden:

   workload

.. doxygenfunction:: hipMalloc
"""


def test_rst_becomes_titled_sections_tables_and_code_without_directive_syntax():
    doc = parse_bytes(Path("tuning.rst"), RST.encode())
    assert doc.format == "rst" and doc.title == "Optimizing on MI300X"
    headings = [(b.level, b.text, b.anchor) for b in doc.blocks if b.level]
    assert headings == [
        (1, "Optimizing on MI300X", "optimizing-on-mi300x"),
        (2, "Kernel knobs", "kernel-knobs"),
        (3, "Sub section", "sub-section"),
    ]
    text = "\n".join(b.text for b in doc.blocks)
    for markup in (
        ".. ",
        "::",
        ":ref:",
        ":cpp:func:",
        "``kpack",
        "``HIP",
        ":linenos:",
        ":header-rows:",
        "workload",
        "On this page",
        "|undefined|",
    ):
        assert markup not in text, markup
    assert "Intro with the arch page, hipMalloc and undefined." in text
    table = next(b for b in doc.blocks if b.kind == "table")
    assert table.text.split("\n") == ["| Knob | Start |", "| --- | --- |", "| waves_per_eu | 2 |", "| kpack | 2 |"]
    assert "Note: Deeper pipelines lower occupancy." in text
    assert next(b for b in doc.blocks if b.kind == "code").text == "```python\ngrid = (n_rows,)\n```"
    assert "HIP runtime" in text and "HIP_FORCE_DEV_KERNARG=1 saves 2 to 3 microseconds." in text
    assert "New in version 6.2: The kpack knob." in text
    assert "- first item\n- second item" in text
    chunks = chunk_blocks(doc.blocks, title=doc.title)
    assert [(c.heading_path, c.anchor) for c in chunks] == [
        (("Optimizing on MI300X",), "optimizing-on-mi300x"),
        (("Optimizing on MI300X", "Kernel knobs"), "kernel-knobs"),
        (("Optimizing on MI300X", "Kernel knobs", "Sub section"), "sub-section"),
    ]


def test_broken_rst_still_parses_to_text_without_raising():
    doc = parse_bytes(
        Path("broken.rst"),
        b"Title\n=====\n\n.. list-table::\n   :header-rows: 1\n\n   * - a\n  - b\n\nText `unclosed.\n",
    )
    assert doc.title == "Title"
    assert any("Text" in b.text for b in doc.blocks if b.level == 0)


# -- HTML tables, pages with navigation ---------------------------------------------------------------

SPEC_PAGE = b"""<!doctype html><html><head><title>GPU specs \xe2\x80\x94 Site Docs</title></head><body>
<nav><a>Home</a><a>Install</a></nav><aside>sidebar links</aside>
<main><section id="specs"><h1>GPU specs<a class="headerlink" href="#specs">#</a></h1>
<p>Intro.</p>
<table><thead><tr><th>Model</th><th>CUs</th><th>Memory</th></tr></thead>
<tbody><tr><td>MI300X</td><td>304</td><td>192 GB</td></tr><tr><td>MI250X</td><td>220</td><td>128 GB</td></tr></tbody></table>
<h2 id="raw">Raw</h2><pre>rocminfo | grep CU
  indented line</pre>
</section></main><footer>copyright</footer></body></html>"""


def test_html_tables_stay_tables_with_their_header_and_page_chrome_is_dropped():
    doc = parse_bytes(Path("specs.html"), SPEC_PAGE)
    assert doc.title == "GPU specs"  # the site's name after the dash is dropped
    text = "\n".join(b.text for b in doc.blocks)
    assert "Home" not in text and "sidebar" not in text and "copyright" not in text
    table = next(b for b in doc.blocks if b.kind == "table")
    assert table.text.split("\n") == [
        "| Model | CUs | Memory |",
        "| --- | --- | --- |",
        "| MI300X | 304 | 192 GB |",
        "| MI250X | 220 | 128 GB |",
    ]
    assert [(b.level, b.text, b.anchor) for b in doc.blocks if b.level] == [
        (1, "GPU specs", "specs"),
        (2, "Raw", "raw"),
    ]
    code = next(b for b in doc.blocks if b.kind == "code")
    assert code.text == "```\nrocminfo | grep CU\n  indented line\n```"


def test_a_long_table_is_chunked_by_rows_and_every_piece_keeps_the_header():
    header = "| GPU | CUs | memory | bandwidth |\n| --- | --- | --- | --- |"
    rows = [f"| MI{300 + i}X | {200 + i} | {64 + i} GB HBM3 | {3 + i / 10:.1f} TB/s |" for i in range(60)]
    blocks = [
        Block(1, "Specs", "heading", "specs"),
        Block(0, "Intro text.", "text"),
        Block(0, header + "\n" + "\n".join(rows), "table"),
    ]
    chunks = chunk_blocks(blocks, title="Specs")
    table_chunks = [c for c in chunks if "| GPU |" in c.body]
    assert len(table_chunks) > 3
    seen = []
    for c in table_chunks:
        lines = [line for line in c.body.split("\n") if line.startswith("| ")]
        assert lines[0] == "| GPU | CUs | memory | bandwidth |"  # the header on top of every piece
        seen += [line for line in lines[2:]]
    assert seen == rows  # every row once, none cut in half
    assert all(c.anchor == "specs" for c in chunks)
