"""Turn a file's bytes into blocks (headings, paragraphs, code and tables), whatever its format.

Every format lands on `knowledge.blocks.Block`, so chunking, heading paths and anchors are written
once. Markdown (with YAML/MyST front matter and MyST directive fences), reStructuredText (through
docutils, see knowledge/rst.py), HTML (tables stay tables, navigation is dropped) and PDF (text with
guessed headings). Each failure is an `IngestError` whose message is the reason the ingest summary
shows next to the file name.
"""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, NamedTuple, Optional

from knowledge.blocks import Block, markdown_table, slug
from knowledge.errors import FrontMatterError, IngestError, NoTextError
from knowledge.frontmatter import FrontMatter, split_front_matter
from knowledge.includes import IncludeResolver, expand_rst, literal_language, myst_options, select_lines

MARKDOWN_SUFFIXES = {".md", ".markdown", ".mdown", ".myst"}
RST_SUFFIXES = {".rst", ".rest"}
TEXT_SUFFIXES = {".txt", ".text"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
PDF_SUFFIXES = {".pdf"}
SUPPORTED_SUFFIXES = MARKDOWN_SUFFIXES | RST_SUFFIXES | TEXT_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES
# docutils builds a full document tree: a multi-megabyte generated .rst would take minutes. Past this
# size the file is read as plain paragraphs and the ingest summary says so.
MAX_RST_BYTES = 4 * 1024 * 1024

__all__ = ["Block", "ParsedDoc", "parse_bytes", "markdown_blocks", "SUPPORTED_SUFFIXES", "detect_format"]


class ParsedDoc(NamedTuple):
    format: str  # "markdown" | "rst" | "text" | "html" | "pdf"
    title: Optional[str]  # from the format itself (<title>, PDF metadata, RST title, first # heading)
    header: Optional[FrontMatter]
    blocks: list[Block]
    notes: tuple[str, ...] = ()


def detect_format(path: Path, data: bytes) -> str:
    """By content first where the content is unambiguous (a PDF is a PDF whatever its name)."""
    if data.lstrip()[:5] == b"%PDF-":
        return "pdf"
    suffix = path.suffix.lower()
    if suffix in PDF_SUFFIXES:
        return "pdf"
    if b"\x00" in data[:8192]:
        raise IngestError("binary file (NUL bytes), not text, Markdown, reStructuredText, HTML or PDF")
    if suffix in HTML_SUFFIXES:
        return "html"
    if suffix in MARKDOWN_SUFFIXES:
        return "markdown"
    if suffix in RST_SUFFIXES:
        return "rst"
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


def parse_bytes(path: Path, data: bytes, includes: Optional[IncludeResolver] = None) -> ParsedDoc:
    """The page's blocks. With `includes`, its RST and MyST includes inside the tree are followed
    (knowledge/includes.py); without, they are dropped like a toctree.

    Raises NoTextError for a page with no text of its own, IngestError for a file that is broken."""
    if not data.strip():
        raise IngestError("empty file")
    fmt = detect_format(path, data)
    dropped: list[str] = []  # directives that held no prose: they say what a page without text was
    if fmt == "pdf":
        doc = _parse_pdf(data)
    else:
        text = _decode(data)
        if fmt == "markdown":
            header, body = split_front_matter(text)
            include = _myst_includer(path, includes, dropped) if includes is not None else None
            blocks = markdown_blocks(body, include=include, dropped=dropped)
            doc = ParsedDoc("markdown", _first_h1(blocks), header, blocks, header.notes if header else ())
        elif fmt == "rst":
            if includes is not None:
                text = expand_rst(text, path, includes)
            if len(text) > MAX_RST_BYTES:
                note = (
                    f"reStructuredText of {len(text) / 1e6:.1f} MB is over the {MAX_RST_BYTES // 2**20} MB "
                    "docutils limit: read as plain paragraphs"
                )
                doc = ParsedDoc("text", None, None, _paragraph_blocks(text), (note,))
            else:
                from knowledge.rst import parse_rst

                title, blocks, names = parse_rst(text)
                dropped += names
                doc = ParsedDoc("rst", title, None, blocks)
        elif fmt == "html":
            doc = _parse_html(text)
        else:
            doc = ParsedDoc("text", None, None, _paragraph_blocks(text))
    if includes is not None and includes.notes:
        doc = doc._replace(notes=doc.notes + tuple(includes.notes))
    if not any(b.level == 0 and b.text.strip() for b in doc.blocks):
        raise NoTextError(_no_text_reason(doc, dropped), doc.notes)
    return doc


def _no_text_reason(doc: ParsedDoc, dropped: list[str]) -> str:
    """What a page without prose holds instead: "no text of its own (toctree only)"."""
    names = list(dict.fromkeys(dropped))
    if names:
        return f"no text of its own ({', '.join(names)} only)"
    held = (["header"] if doc.header else []) + (["headings"] if any(b.level for b in doc.blocks) else [])
    return f"no text of its own ({' and '.join(held)} only)" if held else "no text of its own"


def _myst_includer(path: Path, resolver: IncludeResolver, dropped: list[str]):
    """The `include` callback of `markdown_blocks` for one file: the blocks of a MyST `{include}`,
    its headings nested under `level` (the section holding the include) unless :heading-offset: says."""

    def include(target: str, options: dict[str, str], level: int) -> list[Block]:
        with resolver.enter(path, target) as found:
            if found is None:
                return []
            text = select_lines(found.text, options)
            language = literal_language(options)
            if language is not None:
                code = text.strip("\n")
                return [Block(0, f"```{language}\n{code}\n```", "code")] if code.strip() else []
            if "rst" in options.get("parser", "") or "restructuredtext" in options.get("parser", ""):
                from knowledge.rst import parse_rst

                _title, blocks, names = parse_rst(expand_rst(text, found.path, resolver))
                dropped.extend(names)
            else:
                try:
                    _header, text = split_front_matter(text)
                except FrontMatterError:
                    pass  # an included file's header is not this page's: its lines are text
                blocks = markdown_blocks(text, include=_myst_includer(found.path, resolver, dropped), dropped=dropped)
        levels = [b.level for b in blocks if b.level]
        try:
            offset = int(options["heading-offset"]) if "heading-offset" in options else None
        except ValueError:
            offset = None
        if offset is None:
            offset = max(0, level + 1 - min(levels)) if levels else 0
        return [b._replace(level=min(6, b.level + offset)) if b.level else b for b in blocks]

    return include


def _first_h1(blocks: list[Block]) -> Optional[str]:
    return next((b.text for b in blocks if b.level == 1), None)


def _paragraph_blocks(text: str) -> list[Block]:
    paras = re.split(r"\n\s*\n", text)
    return [Block(0, p.strip("\n")) for p in paras if p.strip()]


# -- Markdown (CommonMark headings, fences and pipe tables; MyST directives, roles and labels) ---------

_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,}|:{3,})\s*(.*)$")
_MYST_DIRECTIVE = re.compile(r"^\{([\w:.+-]+)\}\s*(.*)$")
_MYST_LABEL = re.compile(r"^\s*\(([\w:.+-]+)\)=\s*$")
_MYST_ROLE = re.compile(r"\{[\w:.+-]+\}`([^`]*)`")
_OPTION_LINE = re.compile(r"^\s*:[\w-]+:(\s.*)?$")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_MYST_CODE = {"code-block", "code", "code-cell", "sourcecode"}
_MYST_DROPPED = {
    "toctree",
    "literalinclude",
    "image",
    "figure",
    "raw",
    "index",
    "mermaid",
    "glossary",
    "bibliography",
}
_ADMONITIONS = {
    "note": "Note",
    "warning": "Warning",
    "tip": "Tip",
    "important": "Important",
    "caution": "Caution",
    "attention": "Attention",
    "danger": "Danger",
    "hint": "Hint",
    "seealso": "See also",
}


def _myst_role_text(match: re.Match) -> str:
    text = match.group(1)
    target = re.match(r"^(.*?)\s*<([^<>]+)>$", text, re.DOTALL)
    return target.group(1) if target and target.group(1) else text


def _split_row(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)]


def _as_table(lines: list[str]) -> Optional[str]:
    """A pipe table (header, separator, rows) in the shared Markdown form, or None if it is not one."""
    if len(lines) < 2 or "|" not in lines[0] or not _TABLE_SEP.match(lines[1]):
        return None
    return markdown_table(_split_row(lines[0]), [_split_row(line) for line in lines[2:] if line.strip()])


MystInclude = Callable[[str, dict, int], list[Block]]  # (target, options, level of its section) -> blocks


def markdown_blocks(
    body: str, include: Optional[MystInclude] = None, dropped: Optional[list[str]] = None
) -> list[Block]:
    """Headings (#..######) with their anchors, paragraphs, code and tables.

    A fenced code block stays whole and its '#' lines are code. A MyST directive fence is transparent
    (its content is parsed as Markdown, its label becomes a line of text) unless it holds code, which
    stays a code block, or only wires pages together (toctree), which is dropped. An `{include}` is
    replaced by the blocks `include` returns, or dropped when there is no `include`. Each dropped
    directive's name is appended to `dropped`.
    """
    body = _HTML_COMMENT.sub("", body)
    blocks: list[Block] = []
    para: list[str] = []
    used_anchors: dict[str, int] = {}
    pending_label: Optional[str] = None
    # Open fences, innermost last: (fence text, "code" | "drop" | "open" | "include", collected lines,
    # language or include target).
    stack: list[tuple[str, str, list[str], str]] = []

    def section_level() -> int:
        return next((b.level for b in reversed(blocks) if b.level), 0)

    def flush() -> None:
        lines = [line for line in para]
        para.clear()
        if not any(line.strip() for line in lines):
            return
        if lines[0].lstrip().startswith("<table"):
            blocks.extend(b for b in _parse_html("\n".join(lines)).blocks if b.level == 0)
            return
        table = _as_table([line for line in lines if line.strip()])
        if table is not None:
            blocks.append(Block(0, table, "table"))
        else:
            blocks.append(Block(0, _MYST_ROLE.sub(_myst_role_text, "\n".join(lines).strip("\n")), "text"))

    def anchor_for(title: str) -> Optional[str]:
        nonlocal pending_label
        if pending_label:
            label, pending_label = pending_label, None
            return label
        base = slug(_MYST_ROLE.sub(_myst_role_text, title))
        if base is None:
            return None
        n = used_anchors.get(base, 0)
        used_anchors[base] = n + 1
        return base if n == 0 else f"{base}-{n}"

    for line in body.split("\n"):
        fm = _FENCE.match(line)
        if stack and stack[-1][1] in ("code", "drop", "include"):
            fence, mode, code, lang = stack[-1]
            if fm and fm.group(2)[0] == fence[0] and len(fm.group(2)) >= len(fence) and not fm.group(3).strip():
                stack.pop()
                if mode == "include":
                    got = include(lang, myst_options(code), section_level()) if include is not None else []
                    if not got and dropped is not None:
                        dropped.append("include")
                    blocks.extend(got)
                elif mode == "code":
                    while code and _OPTION_LINE.match(code[0]):
                        code.pop(0)
                    text = "\n".join(code).strip("\n")
                    if text.strip():
                        blocks.append(Block(0, f"```{lang}\n{text}\n```", "code"))
            elif mode in ("code", "include"):
                code.append(line)
            continue
        if fm:
            fence, info = fm.group(2), fm.group(3).strip()
            if (
                stack
                and stack[-1][1] == "open"
                and not info
                and fence[0] == stack[-1][0][0]
                and len(fence) >= len(stack[-1][0])
            ):
                flush()
                stack.pop()  # closing a MyST container
                continue
            directive = _MYST_DIRECTIVE.match(info)
            flush()
            if directive:
                name, arg = directive.group(1), directive.group(2).strip()
                if name in _MYST_CODE:
                    stack.append((fence, "code", [], arg))
                elif name == "include":
                    stack.append((fence, "include", [], arg))
                elif name in _MYST_DROPPED or name.startswith(("doxygen", "auto")):
                    stack.append((fence, "drop", [], ""))
                    if dropped is not None:
                        dropped.append(name)
                else:
                    stack.append((fence, "open", [], ""))
                    label = _ADMONITIONS.get(name)
                    if label or arg:
                        blocks.append(Block(0, f"{label} {arg}:".replace(" :", ":") if label else arg, "text"))
            elif fence[0] == ":":
                para.append(line)  # a bare ::: line that opens nothing
            else:
                stack.append((fence, "code", [], info.split()[0] if info else ""))
            continue
        if stack and stack[-1][1] == "open" and not para and _OPTION_LINE.match(line):
            continue  # a MyST directive's :option: lines
        label = _MYST_LABEL.match(line)
        if label:
            flush()
            pending_label = label.group(1)
            continue
        hm = _HEADING.match(line)
        if hm and hm.group(2):
            flush()
            title = _MYST_ROLE.sub(_myst_role_text, hm.group(2).strip())
            blocks.append(Block(len(hm.group(1)), title, "heading", anchor_for(hm.group(2).strip())))
        elif not line.strip():
            flush()
        else:
            para.append(line)
    flush()
    for fence, mode, code, lang in reversed(stack):  # an unclosed code fence keeps its code
        if mode == "code" and any(c.strip() for c in code):
            blocks.append(Block(0, f"```{lang}\n" + "\n".join(code).strip("\n") + "\n```", "code"))
    return blocks


# -- HTML ------------------------------------------------------------------------------------------


class _HTMLToBlocks(HTMLParser):
    """Visible text of a page: h1-h6 become headings (with their id), tables stay tables with their
    header row, <pre> keeps its lines, navigation and page chrome are dropped. When the page marks its
    content (<main>, <article>, role="main"), only that content is kept."""

    _SKIP = {
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "head",
        "nav",
        "aside",
        "footer",
        "form",
        "button",
        "select",
    }
    _BREAK = {
        "p",
        "div",
        "section",
        "article",
        "li",
        "ul",
        "ol",
        "br",
        "blockquote",
        "dt",
        "dd",
        "header",
        "main",
        "hr",
        "figure",
        "figcaption",
        "dl",
    }
    _HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[Block, bool]] = []  # (block, inside the page's main content)
        self.title: Optional[str] = None
        self._buf: list[str] = []
        self._skip_depth = 0
        self._heading: Optional[tuple[int, Optional[str]]] = None
        self._in_title = False
        self._title_buf: list[str] = []
        self._pre = 0
        self._main_depth = 0
        self._stack: list[tuple[str, bool]] = []  # open elements: (tag, opened a main region)
        self._last_id: Optional[str] = None
        # tables: a stack so a table inside a cell becomes that cell's text
        self._tables: list[dict] = []

    # -- helpers
    def _emit(self, block: Block) -> None:
        self.blocks.append((block, self._main_depth > 0))

    def _flush(self) -> None:
        if self._pre:
            return  # a <pre> keeps its lines until it closes
        raw = "".join(self._buf)
        self._buf = []
        text = re.sub(r"[ \t\r\f\v]+", " ", raw)
        text = "\n".join(line.strip() for line in text.split("\n") if line.strip())
        if not text:
            return
        if self._heading:
            level, anchor = self._heading
            self._emit(Block(level, " ".join(text.split()).rstrip("¶#").strip(), "heading", anchor))
        else:
            self._emit(Block(0, text, "text"))

    # -- parser callbacks
    def handle_starttag(self, tag: str, attrs) -> None:
        attrs = dict(attrs)
        if tag == "title":
            self._in_title = True
        if self._skip_depth or tag in self._SKIP or attrs.get("role") in ("navigation", "search"):
            if tag not in ("br", "hr", "img", "input", "meta", "link"):
                self._skip_depth += 1
            return
        opens_main = tag in ("main", "article") or attrs.get("role") == "main"
        if tag not in ("br", "hr", "img", "input", "meta", "link", "wbr", "col"):
            self._stack.append((tag, opens_main))
            self._main_depth += opens_main
        if attrs.get("id"):
            self._last_id = attrs["id"]
        if self._tables:
            table = self._tables[-1]
            if tag == "table":
                self._tables.append({"rows": [], "row": None, "cell": None, "head_rows": 0, "in_head": False})
            elif tag == "thead":
                table["in_head"] = True
            elif tag == "tr":
                table["row"] = []
                table["row_is_head"] = table["in_head"]
            elif tag in ("td", "th"):
                table["cell"] = []
                if tag == "th" and table.get("row") == [] and not table["rows"]:
                    table["row_is_head"] = True
            elif tag == "br" and table.get("cell") is not None:
                table["cell"].append(" ")
            return
        if tag == "table":
            self._flush()
            self._tables.append({"rows": [], "row": None, "cell": None, "head_rows": 0, "in_head": False})
        elif tag in self._HEADINGS:
            self._flush()
            self._heading = (self._HEADINGS[tag], attrs.get("id") or self._last_id)
        elif tag == "pre":
            self._flush()
            self._pre += 1
        elif tag in self._BREAK:
            self._flush() if tag != "br" else self._buf.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if self._skip_depth:
            if tag not in ("br", "hr", "img", "input", "meta", "link"):
                self._skip_depth -= 1
            return
        if self._stack and any(t == tag for t, _ in self._stack):
            while self._stack:
                t, opened = self._stack.pop()
                self._main_depth -= opened
                if t == tag:
                    break
        if self._tables:
            table = self._tables[-1]
            if tag in ("td", "th") and table["cell"] is not None and table["row"] is not None:
                table["row"].append(" ".join("".join(table["cell"]).split()))
                table["cell"] = None
            elif tag == "tr" and table["row"] is not None:
                if any(c for c in table["row"]):
                    table["rows"].append(table["row"])
                    if table.get("row_is_head") and len(table["rows"]) == table["head_rows"] + 1:
                        table["head_rows"] += 1
                table["row"] = None
            elif tag == "thead":
                table["in_head"] = False
            elif tag == "table":
                done = self._tables.pop()
                text = _table_text(done)
                if self._tables:  # a nested table is text of the outer cell
                    outer = self._tables[-1]
                    if outer["cell"] is not None:
                        outer["cell"].append(" " + " ".join(text.split()) + " ")
                elif text:
                    self._emit(Block(0, text, "table"))
            return
        if tag in self._HEADINGS and self._heading:
            self._flush()
            self._heading = None
        elif tag == "pre" and self._pre:
            self._pre -= 1
            code = "".join(self._buf).strip("\n")
            self._buf = []
            if code.strip():
                self._emit(Block(0, f"```\n{code}\n```", "code"))
        elif tag in self._BREAK and tag != "br":
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title_buf.append(data)
        if self._skip_depth:
            return
        if self._tables:
            table = self._tables[-1]
            if table["cell"] is not None:
                table["cell"].append(data)
            return
        self._buf.append(data)

    def close(self) -> None:
        super().close()
        self._flush()
        title = " ".join("".join(self._title_buf).split())
        # "GPU hardware specifications — ROCm Documentation": the part after the dash names the site.
        title = re.split(r"\s+(?:—|–|\|)\s+", title)[0].strip() if title else title
        self.title = title or None

    def content_blocks(self) -> list[Block]:
        if any(in_main for _, in_main in self.blocks):
            return [b for b, in_main in self.blocks if in_main]
        return [b for b, _ in self.blocks]


def _table_text(table: dict) -> str:
    rows = table["rows"]
    if not rows:
        return ""
    head_rows = max(1, table["head_rows"])
    header = rows[head_rows - 1]
    return markdown_table(header, rows[head_rows:])


def _parse_html(text: str) -> ParsedDoc:
    parser = _HTMLToBlocks()
    parser.feed(text)
    parser.close()
    blocks = parser.content_blocks()
    return ParsedDoc("html", parser.title or _first_h1(blocks), None, blocks)


# -- PDF -------------------------------------------------------------------------------------------


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
                page_blocks.append(Block(2, line, "heading", f"page={number}"))
            else:
                para.append(line)
        if para:
            page_blocks.append(Block(0, " ".join(para)))
        if not page_blocks:
            continue
        if page_blocks[0].level == 0:
            # Text before any guessed heading belongs to this page rather than the last page's section.
            page_blocks.insert(0, Block(2, f"Page {number}", "heading", f"page={number}"))
        blocks.extend(page_blocks)
    return ParsedDoc("pdf", str(meta_title).strip() if meta_title else None, None, blocks)
