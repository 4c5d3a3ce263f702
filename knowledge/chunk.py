"""Cut a parsed document into chunks that follow its headings.

A chunk is one section (or a piece of a long one) with its heading path and the anchor of its section.
Its text starts with a context line, "<document title> > <section> > <subsection>", because a paragraph
such as "4.8 TB/s of HBM3e" says nothing about which device it describes: the line lets both the vector
and the BM25 index tie it to its document. Long sections split at paragraph boundaries near
`max_chars`; a paragraph longer than that splits at line, then sentence, then hard boundaries.

Tables are cut by rows, never through one, and every piece starts with the table's header row: a spec
table row "| MI300X | 304 | 192 GB |" means nothing without "| GPU | CUs | memory |" above it. Table
pieces are kept smaller than prose (`TABLE_MAX_CHARS`) so the rows of a piece stay within what the
embedding model reads (its first 128 word pieces).
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Sequence

from knowledge.blocks import Block

MAX_CHARS = 1200
TABLE_MAX_CHARS = 700


class ChunkDraft(NamedTuple):
    heading_path: tuple[str, ...]
    text: str  # context line + body, what is indexed and shown
    body: str
    anchor: Optional[str] = None


def context_line(title: str, heading_path: Sequence[str]) -> str:
    parts = [title] + [h for h in heading_path if h.lower() not in title.lower()]
    return " > ".join(p for p in parts if p)


def _split_long(paragraph: str, max_chars: int) -> list[str]:
    if len(paragraph) <= max_chars:
        return [paragraph]
    for sep in (r"\n", r"(?<=[.!?])\s+"):
        pieces = [p for p in re.split(sep, paragraph) if p.strip()]
        if len(pieces) > 1:
            return _pack(pieces, max_chars, joiner="\n" if sep == r"\n" else " ")
    return [paragraph[i : i + max_chars] for i in range(0, len(paragraph), max_chars)]


def _pack(pieces: list[str], max_chars: int, joiner: str) -> list[str]:
    out: list[str] = []
    cur = ""
    for piece in pieces:
        for part in _split_long(piece, max_chars) if len(piece) > max_chars else [piece]:
            if cur and len(cur) + len(joiner) + len(part) > max_chars:
                out.append(cur)
                cur = part
            else:
                cur = f"{cur}{joiner}{part}" if cur else part
    if cur:
        out.append(cur)
    return out


def split_table(table: str, max_chars: int = TABLE_MAX_CHARS) -> list[str]:
    """Pieces of a Markdown table, each with the header and separator lines on top."""
    lines = table.split("\n")
    head, rows = lines[:2], lines[2:]
    if len(table) <= max_chars or not rows:
        return [table]
    pieces: list[str] = []
    cur: list[str] = []
    size = len(head[0]) + len(head[1]) + 2
    for row in rows:
        if cur and size + len(row) + 1 > max_chars:
            pieces.append("\n".join(head + cur))
            cur, size = [], len(head[0]) + len(head[1]) + 2
        cur.append(row)
        size += len(row) + 1
    if cur:
        pieces.append("\n".join(head + cur))
    return pieces


def _units(blocks: Sequence[Block], max_chars: int) -> list[str]:
    """Body blocks as packable units: a long table becomes header-led pieces, a long paragraph its parts."""
    units: list[str] = []
    for block in blocks:
        if block.kind == "table":
            units.extend(split_table(block.text, min(max_chars, TABLE_MAX_CHARS)))
        else:
            units.append(block.text)
    return units


def _pack_units(units: list[str], max_chars: int) -> list[str]:
    """Join units with blank lines up to max_chars; a table piece is never merged past its limit or
    split (it already fits), a long prose unit splits at lines and sentences."""
    out: list[str] = []
    cur = ""
    for unit in units:
        parts = [unit] if unit.startswith("| ") or len(unit) <= max_chars else _split_long(unit, max_chars)
        for part in parts:
            if cur and len(cur) + 2 + len(part) > max_chars:
                out.append(cur)
                cur = part
            else:
                cur = f"{cur}\n\n{part}" if cur else part
    if cur:
        out.append(cur)
    return out


def chunk_blocks(blocks: Sequence[Block], *, title: str, max_chars: int = MAX_CHARS) -> list[ChunkDraft]:
    sections: list[tuple[tuple[str, ...], Optional[str], list[Block]]] = []
    stack: list[tuple[int, str]] = []
    current: list[Block] = []
    for block in blocks:
        if block.level:
            stack = [s for s in stack if s[0] < block.level] + [(block.level, block.text)]
            current = []
            sections.append((tuple(t for _, t in stack), block.anchor, current))
        else:
            if not sections:
                sections.append(((), None, current))
            current.append(block)
    drafts: list[ChunkDraft] = []
    for path, anchor, body_blocks in sections:
        if not body_blocks:
            continue
        head = context_line(title, path)
        for body in _pack_units(_units(body_blocks, max_chars), max_chars):
            drafts.append(ChunkDraft(path, f"{head}\n\n{body}", body, anchor))
    return drafts
