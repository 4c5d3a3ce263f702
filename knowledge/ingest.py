"""Ingest jobs: files and folders (or the shipped hwdocs) into provenance-tagged documents and chunks.

A job never stops at a bad file: each file's failure (missing, not a regular file, unreadable, empty,
binary, corrupt PDF, bad header) is caught as an `IngestError` and reported by name with its reason,
and the good files still land. Store errors are not per-file problems and propagate.

Provenance precedence: the document's own header wins; command-line options only fill what it lacks
(a shipped header says what its authors checked; a flag is a guess about many files at once).
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Optional, Sequence

from knowledge.aliases import DEVICE_VENDOR, canonical_devices
from knowledge.chunk import chunk_blocks
from knowledge.errors import IngestError
from knowledge.frontmatter import REQUIRED_KEYS, check_vendor
from knowledge.parse import SUPPORTED_SUFFIXES, parse_bytes
from knowledge.records import FileResult, FileStatus, IngestReport, Record
from store.records import Chunk, ChunkKind, Document, utc_now

MAX_FILE_BYTES = 64 * 1024 * 1024

OnFile = Callable[[int, int, FileResult], None]  # (files done, files total, the latest result)


class IngestOptions(Record):
    """What the command line says about every file of the job (used where a header is silent)."""

    vendor: Optional[str] = None
    devices: tuple[str, ...] = ()
    source_url: Optional[str] = None
    doc_version: Optional[str] = None
    kind: Optional[ChunkKind] = None


class _Item(NamedTuple):
    path: Path
    result: Optional[FileResult]  # set when the file is already decided (missing, skipped)


def discover(paths: Sequence[Path]) -> list[_Item]:
    """Files to read, in a stable order; folders recursively, hidden names skipped."""
    items: list[_Item] = []
    seen: set[str] = set()

    def add(p: Path, result: Optional[FileResult] = None) -> None:
        key = os.path.abspath(p)
        if key not in seen:
            seen.add(key)
            items.append(_Item(p, result))

    for p in paths:
        if not os.path.lexists(p):
            add(p, FileResult(path=str(p), status=FileStatus.failed, reason="no such file or directory"))
        elif p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if name.startswith("."):
                        continue
                    f = Path(root) / name
                    regular = f.is_file()
                    if regular and f.suffix.lower() not in SUPPORTED_SUFFIXES:
                        reason = f"unsupported file type {f.suffix or '(no extension)'}"
                        add(f, FileResult(path=str(f), status=FileStatus.skipped, reason=reason))
                    else:
                        add(f)  # a FIFO or a broken link fails by name when read
        else:
            add(p)
    return items


def _read(path: Path) -> bytes:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise IngestError(f"broken symlink (target {os.readlink(path)} does not exist)") from None
        raise IngestError("no such file or directory") from None
    except OSError as exc:
        raise IngestError(f"cannot stat: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "FIFO" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "device or special file"
        raise IngestError(f"not a regular file ({kind})")
    if st.st_size > MAX_FILE_BYTES:
        raise IngestError(f"file too large ({st.st_size} bytes > {MAX_FILE_BYTES})")
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except PermissionError:
        raise IngestError("permission denied") from None
    except OSError as exc:
        raise IngestError(f"unreadable: {exc.strerror or exc}") from None


def document_id_for(identity: str) -> str:
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def _pick_url(sources: Iterable[str]) -> Optional[str]:
    sources = list(sources)
    return next((s for s in sources if s.startswith(("http://", "https://"))), sources[0] if sources else None)


def build_document(
    data: bytes,
    *,
    path: Path,
    source: str,
    identity: str,
    options: IngestOptions,
    builtin: bool = False,
) -> tuple[Document, list[Chunk]]:
    """Parse and chunk one file's bytes into the rows the store keeps. Raises IngestError."""
    parsed = parse_bytes(path, data)
    header = parsed.header
    if builtin:
        missing = header.missing_required() if header else list(REQUIRED_KEYS)
        if missing:
            raise IngestError(f"shipped document lacks required header keys: {', '.join(missing)}")
    title = (header.title if header else None) or parsed.title or path.stem
    devices = (header.devices if header else ()) or options.devices
    vendor = (header.vendor if header else None) or options.vendor
    if vendor is None and devices:
        vendors = {DEVICE_VENDOR.get(d) for name in devices for d in canonical_devices(name)}
        vendor = vendors.pop() if len(vendors) == 1 and None not in vendors else None
    kind = (header.kind if header else None) or options.kind or ChunkKind.hardware
    document_id = document_id_for(identity)
    doc = Document(
        document_id=document_id,
        source=source,
        title=title,
        vendor=vendor,
        devices=tuple(devices),
        doc_version=(header.doc_version if header else None) or options.doc_version,
        source_url=_pick_url(header.sources) if header and header.sources else options.source_url,
        sha256=hashlib.sha256(data).hexdigest(),
        kind=kind,
        op_families=header.op_families if header else (),
        builtin=builtin,
        ingested_at=utc_now(),
    )
    drafts = chunk_blocks(parsed.blocks, title=title)
    chunks = [
        Chunk(
            chunk_id=f"{document_id}:{i}",
            document_id=document_id,
            ordinal=i,
            heading_path=d.heading_path,
            text=d.text,
            kind=kind,
            text_sha256=hashlib.sha256(d.text.encode()).hexdigest(),
        )
        for i, d in enumerate(drafts)
    ]
    return doc, chunks


def _store_one(store, name: str, data_fn: Callable[[], bytes], **kw) -> FileResult:
    try:
        doc, chunks = build_document(data_fn(), **kw)
    except IngestError as exc:
        return FileResult(path=name, status=FileStatus.failed, reason=str(exc))
    status = store.upsert_document(doc, chunks)
    return FileResult(path=name, status=FileStatus(status), chunks=len(chunks), document_id=doc.document_id,
                      title=doc.title)


def ingest_files(store, items: Sequence[_Item], options: IngestOptions, on_file: Optional[OnFile] = None) -> IngestReport:
    started = time.perf_counter()
    if options.vendor:
        options = options.model_copy(update={"vendor": check_vendor(options.vendor)})
    results: list[FileResult] = []
    for item in items:
        if item.result is not None:
            result = item.result
        else:
            path = item.path
            resolved = os.path.abspath(path)
            result = _store_one(store, str(path), lambda p=path: _read(p), path=path, source=resolved,
                                identity=f"file:{resolved}", options=options)
        results.append(result)
        if on_file:
            on_file(len(results), len(items), result)
    return IngestReport(files=tuple(results), duration_s=time.perf_counter() - started)


def ingest_paths(store, paths: Sequence[Path], options: IngestOptions = IngestOptions(),
                 on_file: Optional[OnFile] = None) -> IngestReport:
    return ingest_files(store, discover([Path(p) for p in paths]), options, on_file)


def builtin_documents() -> list:
    """The shipped hwdocs as importlib.resources traversables, so an installed wheel finds them too."""
    from importlib import resources

    root = resources.files("hwdocs")
    return sorted((e for e in root.iterdir() if e.name.endswith(".md") and not e.name.startswith(".")),
                  key=lambda e: e.name)


def ingest_builtin(store, on_file: Optional[OnFile] = None) -> IngestReport:
    started = time.perf_counter()
    entries = builtin_documents()
    results: list[FileResult] = []
    for entry in entries:
        source = f"hwdocs/{entry.name}"
        result = _store_one(store, source, entry.read_bytes, path=Path(entry.name), source=source,
                            identity=f"builtin:{source}", options=IngestOptions(), builtin=True)
        results.append(result)
        if on_file:
            on_file(len(results), len(entries), result)
    return IngestReport(files=tuple(results), duration_s=time.perf_counter() - started)
