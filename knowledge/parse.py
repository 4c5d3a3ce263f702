"""Turn a file's bytes into blocks (headings and paragraphs), whatever its format.

Every format lands on the same small representation, `Block(level, text)` with level 1-3 for a heading
and 0 for a paragraph, so chunking and heading paths are written once. Markdown headings beyond ###
and everything else are paragraph text. Each failure is an `IngestError` whose message is the reason
the ingest summary shows next to the file name.
"""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple, Optional

from knowledge.errors import IngestError
from knowledge.frontmatter import FrontMatter, split_front_matter

MARKDOWN_SUFFIXES = {".md", ".markdown", ".mdown"}
TEXT_SUFFIXES = {".txt", ".text", ".rst"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
PDF_SUFFIXES = {".pdf"}
SUPPORTED_SUFFIXES = MARKDOWN_SUFFIXES | TEXT_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES


class Block(NamedTuple):
    level: int  # 1..3 heading, 0 paragraph
    text: str


class ParsedDoc(NamedTuple):
    format: str  # "markdown" | "text" | "html" | "pdf"
    title: Optional[str]  # from the format itself (<title>, PDF metadata, first # heading)
    header: Optional[FrontMatter]
    blocks: list[Block]


def detect_format(path: Path, data: bytes) -> str:
    """By content first where the content is unambiguous (a PDF is a PDF whatever its name)."""
    if data.lstrip()[:5] == b"%PDF-":
        return "pdf"
    suffix = path.suffix.lower()
    if suffix in PDF_SUFFIXES:
        return "pdf"
    if b"\x00" in data[:8192]:
        raise IngestError("binary file (NUL bytes), not text, Markdown, HTML or PDF")
    if suffix in HTML_SUFFIXES:
        return "html"
    if suffix in MARKDOWN_SUFFIXES:
        return "markdown"
    if suffix in TEXT_SUFFIXES:
        return "text"
    head = data[:512].lstrip().lower()
    if head.startswith(b"<!doctype html") or head.startswith(b"<html"):
        return "html"
    return "text"


def _decode(data: bytes) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise IngestError(f"not UTF-8 text (undecodable byte at offset {exc.start}); binary file?") from None
    controls = sum(1 for ch in text[:8192] if ord(ch) < 32 and ch not in "\n\r\t\f")
    if controls > 0.05 * min(len(text), 8192):
        raise IngestError("binary file (control characters), not text")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def parse_bytes(path: Path, data: bytes) -> ParsedDoc:
    if not data.strip():
        raise IngestError("empty file")
    fmt = detect_format(path, data)
    if fmt == "pdf":
        doc = _parse_pdf(data)
    else:
        text = _decode(data)
        if fmt == "markdown":
            header, body = split_front_matter(text)
            blocks = markdown_blocks(body)
            doc = ParsedDoc("markdown", _first_h1(blocks), header, blocks)
        elif fmt == "html":
            doc = _parse_html(text)
        else:
            doc = ParsedDoc("text", None, None, _paragraph_blocks(text))
    if not any(b.level == 0 and b.text.strip() for b in doc.blocks):
        raise IngestError("no text to index" + (" after the header" if doc.header else ""))
    return doc


def _first_h1(blocks: list[Block]) -> Optional[str]:
    return next((b.text for b in blocks if b.level == 1), None)


def _paragraph_blocks(text: str) -> list[Block]:
    paras = re.split(r"\n\s*\n", text)
    return [Block(0, p.strip("\n")) for p in paras if p.strip()]


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_blocks(body: str) -> list[Block]:
    """Headings (# to ###) and paragraphs; a fenced code block stays whole and its '#' lines are code."""
    blocks: list[Block] = []
    para: list[str] = []
    fence: Optional[str] = None

    def flush() -> None:
        if any(line.strip() for line in para):
            blocks.append(Block(0, "\n".join(para).strip("\n")))
        para.clear()

    for line in body.split("\n"):
        fm = _FENCE.match(line)
        if fence:
            para.append(line)
            if fm and fm.group(1) == fence:
                fence = None
                flush()
            continue
        if fm:
            flush()
            fence = fm.group(1)
            para.append(line)
            continue
        hm = _HEADING.match(line)
        if hm and len(hm.group(1)) <= 3 and hm.group(2):
            flush()
            blocks.append(Block(len(hm.group(1)), hm.group(2).strip()))
        elif not line.strip():
            flush()
        else:
            para.append(line)
    flush()
    return blocks


class _HTMLToBlocks(HTMLParser):
    """Keeps visible text; h1-h3 become headings, block elements end a paragraph."""

    _SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    _BREAK = {"p", "div", "section", "article", "li", "ul", "ol", "table", "tr", "br", "pre", "blockquote",
              "h4", "h5", "h6", "dt", "dd", "header", "footer", "main", "nav", "hr", "figure", "figcaption"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self.title: Optional[str] = None
        self._buf: list[str] = []
        self._skip_depth = 0
        self._heading: Optional[int] = None
        self._in_title = False
        self._title_buf: list[str] = []

    def _flush(self) -> None:
        text = re.sub(r"[ \t\r\f\v]+", " ", "".join(self._buf))
        text = "\n".join(line.strip() for line in text.split("\n") if line.strip())
        if text:
            self.blocks.append(Block(self._heading or 0, " ".join(text.split()) if self._heading else text))
        self._buf = []

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "title":
            self._in_title = True
        if tag in self._SKIP:
            self._skip_depth += 1
            return
        if tag in ("h1", "h2", "h3"):
            self._flush()
            self._heading = int(tag[1])
        elif tag in self._BREAK:
            self._flush() if tag != "br" else self._buf.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in self._SKIP:
            self._skip_depth = max(0, self._skip_depth - 1)
            return
        if tag in ("h1", "h2", "h3") and self._heading:
            self._flush()
            self._heading = None
        elif tag in self._BREAK and tag != "br":
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title_buf.append(data)
        if self._skip_depth:
            return
        self._buf.append(data)

    def close(self) -> None:
        super().close()
        self._flush()
        title = " ".join("".join(self._title_buf).split())
        self.title = title or None


def _parse_html(text: str) -> ParsedDoc:
    parser = _HTMLToBlocks()
    parser.feed(text)
    parser.close()
    return ParsedDoc("html", parser.title or _first_h1(parser.blocks), None, parser.blocks)


def _looks_like_heading(line: str) -> bool:
    """A short title-case line without final punctuation: how PDF section titles usually extract."""
    words = line.split()
    if not (1 <= len(words) <= 8) or len(line) > 70 or line[-1] in ".,;:)" or not line[0].isalpha():
        return False
    if any(re.fullmatch(r"[\d.,/%x×+-]+", w) for w in words):
        return False  # a table row of a datasheet ("Memory Bandwidth 3.35 TB/s"), not a title
    alpha = [w for w in words if w[0].isalpha()]
    if not alpha:
        return False
    small = {"a", "an", "and", "as", "at", "by", "for", "in", "of", "on", "or", "the", "to", "vs", "with"}
    capitalised = sum(1 for w in alpha if w[0].isupper() or w.lower() in small)
    return capitalised == len(alpha) and alpha[0][0].isupper()


def _parse_pdf(data: bytes) -> ParsedDoc:
    import logging

    import pypdf

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings about damaged files are our reason
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
        meta_title = (reader.metadata.title if reader.metadata else None) or None
    except Exception as exc:  # noqa: BLE001 - a damaged PDF raises anything from KeyError to RecursionError
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise IngestError(f"corrupt PDF ({type(exc).__name__}: {first})") from None
    if not any(p.strip() for p in pages):
        raise IngestError(f"PDF has no extractable text ({len(pages)} page(s); scanned images?)")
    blocks: list[Block] = []
    for number, page in enumerate(pages, start=1):
        page_blocks: list[Block] = []
        para: list[str] = []
        for raw in page.replace("\r", "\n").split("\n"):
            line = raw.strip()
            if not line:
                if para:
                    page_blocks.append(Block(0, " ".join(para)))
                    para = []
            elif _looks_like_heading(line):
                if para:
                    page_blocks.append(Block(0, " ".join(para)))
                    para = []
                page_blocks.append(Block(2, line))
            else:
                para.append(line)
        if para:
            page_blocks.append(Block(0, " ".join(para)))
        if not page_blocks:
            continue
        if page_blocks[0].level == 0:
            # Text before any guessed heading belongs to this page rather than the last page's section.
            page_blocks.insert(0, Block(2, f"Page {number}"))
        blocks.extend(page_blocks)
    return ParsedDoc("pdf", str(meta_title).strip() if meta_title else None, None, blocks)
