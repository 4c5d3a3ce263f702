"""Cut a parsed document into chunks that follow its headings.

A chunk is one section (or a piece of a long one) with its heading path. Its text starts with a
context line, "<document title> > <section> > <subsection>", because a paragraph such as "4.8 TB/s of
HBM3e" says nothing about which device it describes: the line lets both the vector and the BM25 index
tie it to its document. Long sections split at paragraph boundaries near `max_chars`; a paragraph
longer than that splits at line, then sentence, then hard boundaries.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Sequence

from knowledge.parse import Block

MAX_CHARS = 1200


class ChunkDraft(NamedTuple):
    heading_path: tuple[str, ...]
    text: str  # context line + body, what is indexed and shown
    body: str


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


def chunk_blocks(blocks: Sequence[Block], *, title: str, max_chars: int = MAX_CHARS) -> list[ChunkDraft]:
    sections: list[tuple[tuple[str, ...], list[str]]] = []
    stack: list[tuple[int, str]] = []
    current: list[str] = []
    for block in blocks:
        if block.level:
            stack = [s for s in stack if s[0] < block.level] + [(block.level, block.text)]
            current = []
            sections.append((tuple(t for _, t in stack), current))
        else:
            if not sections:
                sections.append(((), current))
            current.append(block.text)
    drafts: list[ChunkDraft] = []
    for path, paragraphs in sections:
        if not paragraphs:
            continue
        head = context_line(title, path)
        for body in _pack(paragraphs, max_chars, joiner="\n\n"):
            drafts.append(ChunkDraft(path, f"{head}\n\n{body}", body))
    return drafts
