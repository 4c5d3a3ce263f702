"""The one representation every input format is parsed into, and the helpers the parsers share.

`Block(level, text, kind, anchor)`: a heading (level 1-6, kind "heading", with the anchor its rendered
page gives it), or body text at level 0 whose kind is "text", "code" or "table". A table's text is a
Markdown table whose first two lines are its header and separator, so the chunker can repeat the header
on every piece it cuts a long table into.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Sequence


class Block(NamedTuple):
    level: int  # 1..6 heading, 0 body
    text: str
    kind: str = "text"  # "heading" | "text" | "code" | "table"
    anchor: Optional[str] = None


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; short rows are padded so every row has the header's columns."""
    width = max([len(header)] + [len(r) for r in rows])
    head = list(header) + [""] * (width - len(header))
    lines = ["| " + " | ".join(_cell(c) for c in head) + " |", "|" + " --- |" * width]
    for row in rows:
        cells = list(row) + [""] * (width - len(row))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def slug(title: str) -> Optional[str]:
    """The anchor GitHub, MyST and most Markdown sites give a heading: lower case, punctuation
    dropped, spaces to hyphens ("Memory & L2 cache" -> "memory--l2-cache")."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    text = text.replace(" ", "-")
    return text or None
