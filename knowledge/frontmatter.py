"""The front matter of a Markdown document: a YAML block between two `---` lines on top.

Any keys are accepted. Documents written elsewhere carry their own (MyST's `myst:` block, `description`,
`keywords`, ...): those are kept as metadata, never refused. The provenance keys this project reads
(title, kind, vendor, devices, op_families, doc_version, written, sources, origin, measurements) are
validated, because a bad value there silently changes what retrieval filters on. A key that looks like a
misspelt provenance key (`devcies`) is kept as metadata and reported as a note, so the ingest summary
shows it instead of the device filter quietly disappearing.

YAML is read with PyYAML's BaseLoader: every scalar stays the string that was written ("6.10" stays
"6.10", a date stays "2026-12-02"), and a key given twice is an error rather than the last one winning.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

from knowledge.aliases import normalize_devices, normalize_vendor
from knowledge.errors import FrontMatterError
from store.records import ChunkKind, DocumentOrigin

_LIST_KEYS = ("devices", "op_families", "sources")
_SCALAR_KEYS = ("title", "kind", "vendor", "doc_version", "written", "origin", "measurements")
KNOWN_KEYS = _SCALAR_KEYS + _LIST_KEYS
REQUIRED_KEYS = ("title", "kind", "sources")
# Other spellings of our keys that documents written elsewhere use.
_KEY_ALIASES = {
    "device": "devices",
    "ops": "op_families",
    "op_family": "op_families",
    "version": "doc_version",
    "source": "sources",
    "source_url": "sources",
    "url": "sources",
}


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
    origin: Optional[DocumentOrigin] = None
    measurements: Optional[str] = None  # what the authors measured themselves, in one line
    metadata: dict[str, Any] = {}  # every other key, as written
    notes: tuple[str, ...] = ()  # things an ingest summary should show (a likely misspelt key)

    def missing_required(self) -> list[str]:
        return [k for k in REQUIRED_KEYS if not getattr(self, k)]

    def metadata_json(self) -> str:
        return json.dumps(self.metadata, sort_keys=True, ensure_ascii=False)


def _loader():
    import yaml

    class _StrictStrings(yaml.BaseLoader):
        """Scalars as written; a repeated key is an error (YAML itself would keep the last one)."""

    def _mapping(loader, node, deep=False):
        seen: dict = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in seen:
                line = key_node.start_mark.line + 2  # +1 for 1-based, +1 for the opening '---'
                raise FrontMatterError(f"header line {line}: key {key!r} given twice")
            seen[key] = loader.construct_object(value_node, deep=True)
        return seen

    _StrictStrings.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
    return yaml, _StrictStrings


def split_front_matter(text: str) -> tuple[Optional[FrontMatter], str]:
    """(header or None, the body after it). Raises FrontMatterError for a malformed header."""
    text = text.lstrip("\ufeff")
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        return None, text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        raise FrontMatterError("header opened with '---' on line 1 is never closed by a '---' line") from None
    raw = "\n".join(lines[1:end])
    body = "\n".join(lines[end + 1 :])
    if not raw.strip():
        return FrontMatter(), body
    yaml, loader = _loader()
    try:
        values = yaml.load(raw, Loader=loader)  # noqa: S506 - BaseLoader builds only str/list/dict
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"header line {mark.line + 2}: " if mark is not None else "header: "
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise FrontMatterError(f"{where}not valid YAML ({problem}); expected 'key: value' lines") from None
    if not isinstance(values, dict):
        raise FrontMatterError(
            f"header: expected 'key: value' lines (a YAML mapping), got {type(values).__name__} {str(values)[:60]!r}"
        )
    return _validated(values), body


def _as_list(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list):
        items = []
        for v in value:
            if isinstance(v, dict) and len(v) == 1:
                # "[Smith et al. MTIA: first silicon]": YAML reads an item holding ": " as a one-key
                # mapping; the author wrote text, so it is read back as the text.
                ((k, val),) = v.items()
                v = f"{k}: {val}" if val not in (None, "") else str(k)
            elif isinstance(v, (dict, list)):
                raise FrontMatterError(f"header: {key} must be a list of names, got a nested {type(v).__name__}")
            items.append(str(v).strip())
    else:
        raise FrontMatterError(f"header: {key} must be a list of names, got a {type(value).__name__}")
    return tuple(i for i in items if i)


def _as_scalar(key: str, value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise FrontMatterError(f"header: {key} must be one value, got a {type(value).__name__}")
    return str(value).strip()


def _validated(values: dict) -> FrontMatter:
    fields: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in values.items():
        key_text = str(key).strip()
        name = key_text.lower()
        name = _KEY_ALIASES.get(name, name)
        if name in KNOWN_KEYS and name not in fields:
            fields[name] = _as_list(name, value) if name in _LIST_KEYS else _as_scalar(name, value)
            continue
        metadata[key_text] = value
        close = difflib.get_close_matches(name, KNOWN_KEYS, n=1, cutoff=0.8)
        if close and close[0] not in values:
            notes.append(f"front-matter key {key_text!r} kept as metadata; did you mean {close[0]!r}?")
    kind = fields.get("kind")
    if kind is not None and kind not in {k.value for k in ChunkKind}:
        allowed = " | ".join(k.value for k in ChunkKind)
        raise FrontMatterError(f"header: kind must be {allowed}, got {kind!r}")
    origin = fields.get("origin")
    if origin is not None and origin not in {o.value for o in DocumentOrigin}:
        allowed = " | ".join(o.value for o in DocumentOrigin)
        raise FrontMatterError(f"header: origin must be {allowed}, got {origin!r}")
    if fields.get("vendor") is not None:
        fields["vendor"] = check_vendor(fields["vendor"])
    if fields.get("devices"):
        try:
            fields["devices"] = normalize_devices(fields["devices"])
        except ValueError as exc:
            raise FrontMatterError(f"header: {exc}") from None
    written = fields.get("written")
    if written is not None:
        try:
            _dt.date.fromisoformat(written)
        except ValueError:
            raise FrontMatterError(f"header: written must be a date YYYY-MM-DD, got {written!r}") from None
    for key in ("title", "doc_version", "measurements"):
        if key in fields and not fields[key]:
            raise FrontMatterError(f"header: {key} is empty")
    return FrontMatter(**fields, metadata=metadata, notes=tuple(notes))


def check_vendor(vendor: str) -> str:
    """Any vendor name, normalised (case, spacing, company suffixes, known aliases)."""
    try:
        return normalize_vendor(vendor)
    except ValueError as exc:
        raise FrontMatterError(str(exc)) from None
