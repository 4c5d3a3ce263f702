"""The provenance header of a Markdown document: `key: value` lines between two `---` lines on top.

A deliberately tiny format (not YAML): one key a line, list values in square brackets, comma
separated, an item quoted ("...") when it holds a comma. Unknown or repeated keys are errors rather
than ignored, because a misspelt `devcies:` would otherwise silently drop the device filter that
retrieval depends on.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Optional

from pydantic import BaseModel, ConfigDict

from knowledge.errors import FrontMatterError
from store.records import ChunkKind

VENDORS = ("nvidia", "amd", "meta", "intel", "generic")
_LIST_KEYS = ("devices", "op_families", "sources")
_SCALAR_KEYS = ("title", "kind", "vendor", "doc_version", "written")
REQUIRED_KEYS = ("title", "kind", "sources")
_KEY_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$")


class FrontMatter(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    title: Optional[str] = None
    kind: Optional[ChunkKind] = None
    vendor: Optional[str] = None
    devices: tuple[str, ...] = ()
    op_families: tuple[str, ...] = ()
    doc_version: Optional[str] = None
    written: Optional[str] = None  # YYYY-MM-DD
    sources: tuple[str, ...] = ()

    def missing_required(self) -> list[str]:
        return [k for k in REQUIRED_KEYS if not getattr(self, k)]


def _split_list(raw: str, key: str, line_no: int) -> tuple[str, ...]:
    if not (raw.startswith("[") and raw.endswith("]")):
        raise FrontMatterError(f"header line {line_no}: {key} must be a [list, of, values], got {raw!r}")
    items, buf, quote = [], [], None
    for ch in raw[1:-1]:
        if quote:
            if ch == quote:
                quote = None
            else:
                buf.append(ch)
        elif ch in "\"'" and not "".join(buf).strip():
            quote = ch
        elif ch == ",":
            items.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
    if quote:
        raise FrontMatterError(f"header line {line_no}: unclosed quote in {key}")
    items.append("".join(buf).strip())
    return tuple(i for i in items if i)


def _scalar(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1]
    return raw


def split_front_matter(text: str) -> tuple[Optional[FrontMatter], str]:
    """(header or None, the body after it). Raises FrontMatterError for a malformed header."""
    text = text.lstrip("\ufeff")
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        return None, text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise FrontMatterError("header opened with '---' on line 1 is never closed by a '---' line") from None
    values: dict[str, object] = {}
    for i in range(1, end):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            continue
        m = _KEY_LINE.match(line)
        if not m:
            raise FrontMatterError(f"header line {i + 1}: expected 'key: value', got {line!r}")
        key, raw = m.group(1).lower(), m.group(2).strip()
        if key not in _LIST_KEYS and key not in _SCALAR_KEYS:
            known = ", ".join(_SCALAR_KEYS + _LIST_KEYS)
            raise FrontMatterError(f"header line {i + 1}: unknown key {key!r} (known: {known})")
        if key in values:
            raise FrontMatterError(f"header line {i + 1}: key {key!r} given twice")
        values[key] = _split_list(raw, key, i + 1) if key in _LIST_KEYS else _scalar(raw)
    header = _validated(values)
    return header, "\n".join(lines[end + 1 :])


def _validated(values: dict[str, object]) -> FrontMatter:
    kind = values.get("kind")
    if kind is not None and kind not in {k.value for k in ChunkKind}:
        allowed = " | ".join(k.value for k in ChunkKind)
        raise FrontMatterError(f"header: kind must be {allowed}, got {kind!r}")
    vendor = values.get("vendor")
    if vendor is not None:
        values["vendor"] = check_vendor(str(vendor))
    written = values.get("written")
    if written is not None:
        try:
            _dt.date.fromisoformat(str(written))
        except ValueError:
            raise FrontMatterError(f"header: written must be a date YYYY-MM-DD, got {written!r}") from None
    for key in ("title", "doc_version"):
        if key in values and not values[key]:
            raise FrontMatterError(f"header: {key} is empty")
    return FrontMatter(**values)


def check_vendor(vendor: str) -> str:
    v = vendor.strip().lower()
    if v not in VENDORS:
        raise FrontMatterError(f"vendor must be one of {', '.join(VENDORS)}, got {vendor!r}")
    return v
