"""Terminal output every kscout command shares: one console rule, one JSON rule, text that fits.

Tables must read at 80 columns, on a terminal or through a pipe: ids are shortened to what still
names them, long paths lose their middle rather than their end, and a cell that must be cut is cut
with "…", never folded in the middle of a word. `--json` prints one compact object on one line.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Optional

ID_CHARS = 12  # candidate ids (sha256 hex) as shown in tables; any unique prefix is accepted back


def console(stderr: bool = False):
    """A terminal gets its own width; a pipe or file gets $COLUMNS, else 80 (rich's rule)."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def print_json(obj: Any) -> None:
    """Exactly one JSON object, on one line, on stdout."""
    sys.stdout.write(json.dumps(obj, default=str, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def short(cid: Optional[str], n: int = ID_CHARS) -> str:
    return cid[:n] if cid else "-"


def ellipsize_middle(text: str, width: int) -> str:
    """'/very/long/path/to/the/file.py' -> '/very/lo…the/file.py': the start and the end both stay."""
    if width < 3 or len(text) <= width:
        return text
    keep = width - 1
    head = keep // 2
    return text[:head] + "…" + text[len(text) - (keep - head) :]


def unique_prefixes(ids: Iterable[str], minimum: int = 8) -> dict[str, str]:
    """The shortest prefix (at least `minimum` characters) of each id that no other id starts with."""
    ids = sorted(set(ids))
    out = {}
    for i, this in enumerate(ids):
        n = minimum
        for other in (ids[i - 1] if i else None, ids[i + 1] if i + 1 < len(ids) else None):
            if other is None:
                continue
            common = 0
            while common < min(len(this), len(other)) and this[common] == other[common]:
                common += 1
            n = max(n, common + 1)
        out[this] = this[: min(n, len(this))]
    return out


def human(value: Optional[str]) -> str:
    """'evaluation_budget' -> 'evaluation budget': reads as words, and wraps between them."""
    return value.replace("_", " ") if value else "-"


def table(*columns: str, title: Optional[str] = None, **kw):
    """A rich table in the one style of kscout: no outer box (every column counts at 80 characters)."""
    from rich import box
    from rich.table import Table

    t = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        title_justify="left",
        **kw,
    )
    for name in columns:  # a word too long for its column is cut with "…", never folded mid-word
        t.add_column(name, overflow="ellipsis")
    return t


def kv_table():
    from rich.table import Table

    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="ellipsis")
    return t


def none_line(what: str, why: Optional[str] = None):
    """What an empty section prints instead of headers with no rows."""
    from rich.text import Text

    return Text(f"{what}: none" + (f" ({why})" if why else ""))


def indented(text: str, spaces: int = 2):
    """Plain text whose wrapped lines keep the indent of the first (a detail under a heading line)."""
    from rich.padding import Padding
    from rich.text import Text

    return Padding(Text(text), (0, 0, 0, spaces))
