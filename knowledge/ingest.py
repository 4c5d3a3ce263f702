"""Ingest jobs: files and folders (or the shipped hwdocs) into provenance-tagged documents and chunks.

A job never stops at a bad file: each file's failure (missing, not a regular file, unreadable, empty,
binary, corrupt PDF, bad header) is caught as an `IngestError` and reported by name with its reason,
and the good files still land. Store errors are not per-file problems and propagate.

Provenance precedence: the document's own header wins; command-line options only fill what it lacks
(a shipped header says what its authors checked; a flag is a guess about many files at once).

Provenance is never lost by a re-run. A document already in the store keeps its stored tags (vendor,
devices, version, URL, kind, origin) unless this job states them: an explicit flag, or a header whose
bytes are new (or `--force`). The same header read again states nothing new, so a `kscout retag` made
since it was first read stands. A vendor nobody states follows devices that changed (when they name
one vendor), and an origin nobody states follows a vendor that changed. Each change is kept, with the
old value, in the document's history (the store appends it; `kscout docs --json` shows it).

Identity is the file's real path: a file reached through a symlinked folder, or named twice on the
command line, is one document. A folder ingested with `--source-url BASE` gives each file its own URL,
so an answer cites the file, never the folder: BASE + its path inside the folder, kept as it is when
BASE browses sources (GitHub's or GitLab's `.../blob/REF/...`, raw.githubusercontent.com), with
.md/.rst/.txt turned into .html otherwise (a docs site, the way Sphinx and MyST publish them).
`--url-template` says it outright: `{path}` is the file's path inside the folder, `{stem}` the same
without its extension (`https://host/docs/{stem}.html`).

Pages are judged by what they hold. A page with no text of its own (a toctree, an automodule, an
include that is not followed) is skipped with that reason, not failed: the job exits 0 when nothing
is broken. Includes inside the tree are followed (knowledge/includes.py) and a file that another page
of the job includes is indexed there, not again on its own. Licence and build files (LICENSE*,
COPYING, NOTICE, CMakeLists.txt, Makefile, *.cmake, setup.py, pyproject.toml, ...) are read as text
of kind `housekeeping`, whatever their extension, so they never pass for hardware facts.

Re-ingesting the same bytes with other provenance (a new --device, a corrected --vendor) retags the
document without re-embedding anything; `force=True` parses and chunks the file again and re-embeds
only chunk text that the embeddings cache has never seen.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import string
import time
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Optional, Sequence

from knowledge.aliases import DEVICE_VENDOR, canonical_devices, normalize_devices
from knowledge.chunk import chunk_blocks
from knowledge.errors import IngestError, NoTextError
from knowledge.frontmatter import REQUIRED_KEYS, check_vendor
from knowledge.includes import IncludeResolver, included_files
from knowledge.parse import SUPPORTED_SUFFIXES, parse_bytes
from knowledge.records import FileResult, FileStatus, IngestReport, Record
from store.records import Chunk, ChunkKind, Document, DocumentOrigin, utc_now

MAX_FILE_BYTES = 64 * 1024 * 1024
# A 50 MB text file once became 47,000 chunks and ran for minutes before saving anything. Past this
# many chunks a document keeps its first ones and the ingest summary says how many were left out.
MAX_CHUNKS_PER_DOCUMENT = 2000
_PUBLISHED_AS_HTML = {".md", ".markdown", ".myst", ".rst", ".rest", ".txt"}
# Bases that show a repository's files as they are (GitHub and GitLab blob/tree/raw views, raw hosts).
_SOURCE_BROWSER = re.compile(
    r"^https?://(?:(?:www\.)?github\.com/[^/]+/[^/]+/(?:blob|tree|raw)/|raw\.githubusercontent\.com/|"
    r"[^/]+/.+/-/(?:blob|tree|raw)/|(?:www\.)?bitbucket\.org/[^/]+/[^/]+/(?:src|raw)/)",
    re.IGNORECASE,
)
URL_PLACEHOLDERS = ("path", "stem")  # --url-template: path inside the folder, with and without extension

# Licence and build files, by name: read as text of their own kind whatever their extension.
_LICENCE_NAME = re.compile(
    r"^(?:licen[cs]es?|copying|notices?|copyright|patents|third[-_]party[-_]notices?)(?:[._-].*)?$", re.IGNORECASE
)
_BUILD_NAMES = {
    "cmakelists.txt",
    "makefile",
    "gnumakefile",
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "manifest.in",
    "meson.build",
    "build",
    "build.bazel",
    "workspace",
    "workspace.bazel",
    "module.bazel",
    "sconstruct",
    "configure.ac",
    "dockerfile",
    "tox.ini",
    "conanfile.txt",
    "conanfile.py",
}
_BUILD_SUFFIXES = {".cmake", ".mk", ".bzl"}
_BUILD_NAME = re.compile(r"^(?:requirements|constraints)(?:[-_.][\w.-]*)?\.txt$", re.IGNORECASE)

OnFile = Callable[[int, int, FileResult], None]  # (files done, files total, the latest result)
OnChunks = Callable[[str, int, int], None]  # (file, chunks embedded, chunks to embed) within one file


class IngestOptions(Record):
    """What the command line says about every file of the job (used where a header is silent)."""

    vendor: Optional[str] = None
    devices: tuple[str, ...] = ()
    source_url: Optional[str] = None
    url_template: Optional[str] = None  # "https://host/docs/{stem}.html": see URL_PLACEHOLDERS
    doc_version: Optional[str] = None
    kind: Optional[ChunkKind] = None
    origin: Optional[DocumentOrigin] = None
    force: bool = False  # parse, chunk and write again even when the bytes are unchanged
    max_chunks: int = MAX_CHUNKS_PER_DOCUMENT


class _Item(NamedTuple):
    path: Path
    result: Optional[FileResult]  # set when the file is already decided (missing, skipped)
    relative: Optional[str] = None  # its path inside the folder that was named, for per-file URLs
    root: Optional[Path] = None  # the folder that was named (a named file's own folder): its tree


def housekeeping_file(name: str) -> bool:
    """A licence, notice or build file, by its name (LICENSE.txt, CMakeLists.txt, foo.cmake)."""
    lower = name.lower()
    return bool(
        _LICENCE_NAME.match(name)
        or lower in _BUILD_NAMES
        or os.path.splitext(lower)[1] in _BUILD_SUFFIXES
        or _BUILD_NAME.match(name)
    )


def discover(paths: Sequence[Path]) -> list[_Item]:
    """Files to read, in a stable order; folders recursively (symlinked folders too, each real folder
    once), hidden names skipped, every real file once however many ways it is reached."""
    items: list[_Item] = []
    seen: set[str] = set()

    def add(
        p: Path, result: Optional[FileResult] = None, relative: Optional[str] = None, root: Optional[Path] = None
    ) -> None:
        key = os.path.realpath(p) if os.path.exists(p) else os.path.abspath(p)
        if key not in seen:
            seen.add(key)
            items.append(_Item(p, result, relative, root if root is not None else p.parent))

    for p in paths:
        p = Path(p)
        if not os.path.lexists(p):
            add(p, FileResult(path=str(p), status=FileStatus.failed, reason="no such file or directory"))
        elif p.is_dir():
            walked: set[str] = set()
            for root, dirs, files in os.walk(p, followlinks=True):
                real = os.path.realpath(root)
                if real in walked:  # a link back up the tree, or two links to one folder
                    dirs[:] = []
                    continue
                walked.add(real)
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if name.startswith("."):
                        continue
                    f = Path(root) / name
                    relative = os.path.relpath(f, p)
                    if f.is_file() and f.suffix.lower() not in SUPPORTED_SUFFIXES and not housekeeping_file(name):
                        reason = f"unsupported file type {f.suffix or '(no extension)'}"
                        add(f, FileResult(path=str(f), status=FileStatus.skipped, reason=reason), relative, p)
                    else:
                        add(f, None, relative, p)  # a FIFO or a broken link fails by name when read
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
        kind = (
            "FIFO" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "device or special file"
        )
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


def file_url(base: str, relative: Optional[str]) -> str:
    """The URL of one file of a folder published at `base` (see the module doc)."""
    if relative is None:
        return base
    rel = Path(relative)
    if rel.suffix.lower() in _PUBLISHED_AS_HTML and not _SOURCE_BROWSER.match(base):
        rel = rel.with_suffix(".html")
    return base.rstrip("/") + "/" + rel.as_posix()


def check_url_template(template: str) -> str:
    """The template itself, or IngestError naming what is wrong with it."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise IngestError(f"--url-template {template!r}: {exc} (write a literal brace as {{{{ or }}}})") from None
    unknown = [f for f in fields if f not in URL_PLACEHOLDERS]
    if unknown:
        known = ", ".join("{" + p + "}" for p in URL_PLACEHOLDERS)
        raise IngestError(f"--url-template {template!r}: unknown placeholder {{{unknown[0]}}} (known: {known})")
    if not fields:
        raise IngestError(f"--url-template {template!r} names no {{path}} or {{stem}}: every file would get one URL")
    return template


def template_url(template: str, relative: str) -> str:
    """`template` filled for one file: {path} its path inside the folder, {stem} without extension."""
    rel = Path(relative)
    return template.format(path=rel.as_posix(), stem=rel.with_suffix("").as_posix())


def _url_for(options: IngestOptions, path: Path, relative: Optional[str]) -> Optional[str]:
    if options.url_template:
        return template_url(options.url_template, relative or path.name)
    if options.source_url:
        return file_url(options.source_url, relative)
    return None


def build_document(
    data: bytes,
    *,
    path: Path,
    source: str,
    identity: str,
    options: IngestOptions,
    builtin: bool = False,
    relative: Optional[str] = None,
    stored: Optional[Document] = None,
    includes: Optional[IncludeResolver] = None,
) -> tuple[Document, list[Chunk], tuple[str, ...]]:
    """Parse and chunk one file's bytes into the rows the store keeps, and notes for the summary.

    `stored` is this document as the store has it, if it has it: its tags stand where this job states
    none (see the module doc). `includes` follows the page's includes inside its tree. Raises
    IngestError (NoTextError for a page with nothing of its own to index)."""
    parsed = parse_bytes(path, data, includes)
    header = parsed.header
    notes = list(parsed.notes)
    if builtin:
        missing = header.missing_required() if header else list(REQUIRED_KEYS)
        if missing:
            raise IngestError(f"shipped document lacks required header keys: {', '.join(missing)}")
        if header.origin is not DocumentOrigin.project:
            raise IngestError("shipped document must say 'origin: project' (the project wrote it)")
    sha256 = hashlib.sha256(data).hexdigest()
    read_files = includes.read_files if includes is not None else []
    if read_files:  # an edit to an included file is an edit to this page
        sha256 = hashlib.sha256("\n".join([sha256] + [h for _, h in read_files]).encode()).hexdigest()
    # A header states its tags afresh only with new bytes (or --force): read again, it says nothing new.
    fresh_header = stored is None or stored.sha256 != sha256 or options.force

    def pick(field: str, from_header, from_flag, default=None):
        if from_header:
            return from_header if fresh_header else getattr(stored, field)  # a header silences a flag
        if from_flag:
            return from_flag
        return getattr(stored, field) if stored is not None else default

    title = (header.title if header else None) or parsed.title or path.stem
    devices = tuple(pick("devices", header.devices if header else (), normalize_devices(options.devices), ()))
    devices_changed = stored is not None and devices != stored.devices
    vendor = pick("vendor", header.vendor if header else None, options.vendor)
    stated_vendor = (header.vendor if header else None) or options.vendor
    if devices and not stated_vendor and (stored is None or devices_changed):
        vendors = {DEVICE_VENDOR.get(d) for name in devices for d in canonical_devices(name)}
        if len(vendors) == 1 and None not in vendors:
            vendor = vendors.pop()  # inferred from the devices this job states
    # A licence or build file says what it is by its name, as firmly as a header would: a folder's
    # --kind is a guess about the pages around it.
    own_kind = (header.kind if header else None) or (ChunkKind.housekeeping if housekeeping_file(path.name) else None)
    kind = pick("kind", own_kind, options.kind, ChunkKind.hardware)
    derived_origin = DocumentOrigin.vendor if vendor not in (None, "generic") else DocumentOrigin.external
    origin = pick("origin", header.origin if header else None, options.origin, derived_origin)
    stated_origin = (header.origin if header else None) or options.origin
    if (
        stored is not None
        and not stated_origin
        and vendor != stored.vendor
        and stored.origin in (DocumentOrigin.vendor, DocumentOrigin.external)
    ):
        origin = derived_origin  # an origin nobody stated follows the vendor that changed
    metadata = dict(header.metadata) if header else {}
    if header and header.measurements:
        metadata["measurements"] = header.measurements
    if header and header.written:
        metadata["written"] = header.written
    if read_files:
        metadata["includes"] = [name for name, _ in read_files]
    if origin is DocumentOrigin.project:
        # A project note is cited as itself; the pages it drew on are what it cites, not its address.
        source_url = pick("source_url", None, _url_for(options, path, relative) if not builtin else None)
        if header and header.sources:
            metadata["cites"] = list(header.sources)
    else:
        source_url = pick(
            "source_url",
            _pick_url(header.sources) if header and header.sources else None,
            _url_for(options, path, relative),
        )
    document_id = document_id_for(identity)
    doc = Document(
        document_id=document_id,
        source=source,
        title=title,
        vendor=vendor,
        devices=devices,
        doc_version=pick("doc_version", header.doc_version if header else None, options.doc_version),
        source_url=source_url,
        sha256=sha256,
        kind=kind,
        op_families=header.op_families if header else (),
        builtin=builtin,
        ingested_at=utc_now(),
        origin=origin,
        metadata_json=json.dumps(metadata, sort_keys=True, ensure_ascii=False),
    )
    drafts = chunk_blocks(parsed.blocks, title=title)
    if len(drafts) > options.max_chunks:
        notes.append(
            f"capped at {options.max_chunks} chunks: the first {options.max_chunks} of "
            f"{len(drafts)} are kept (raise --max-chunks, or split the file)"
        )
        drafts = drafts[: options.max_chunks]
    chunks = [
        Chunk(
            chunk_id=f"{document_id}:{i}",
            document_id=document_id,
            ordinal=i,
            heading_path=d.heading_path,
            text=d.text,
            kind=kind,
            text_sha256=hashlib.sha256(d.text.encode()).hexdigest(),
            anchor=d.anchor,
        )
        for i, d in enumerate(drafts)
    ]
    return doc, chunks, tuple(notes)


# Files are parsed one by one and written in batches: one lock trip, one model call and one Chroma
# write per batch instead of per file (each of those costs tens of ms; a small page embeds in less).
BATCH_FILES = 16
BATCH_CHUNKS = 256


class _Batch:
    """Parsed files waiting to be written, and files already decided, in discovery order."""

    def __init__(self, store, force: bool, on_file: Optional[OnFile], on_chunks: Optional[OnChunks], total: int):
        self.store, self.force, self.on_file, self.on_chunks, self.total = store, force, on_file, on_chunks, total
        self.entries: list[tuple[str, object]] = []  # (name, FileResult or (doc, chunks, notes))
        self.results: list[FileResult] = []
        # The documents as stored when the job began (one read): their tags stand where the job states none.
        self.stored: dict[str, Document] = {d.document_id: d for d in store.documents()}

    def add(self, name: str, data_fn: Callable[[], bytes], *, identity: str, includes_fn=lambda: None, **kw) -> None:
        try:
            stored = self.stored.get(document_id_for(identity))
            entry = build_document(data_fn(), identity=identity, stored=stored, includes=includes_fn(), **kw)
        except NoTextError as exc:  # nothing is wrong with a page that only links others
            entry = FileResult(path=name, status=FileStatus.skipped, reason=str(exc), notes=exc.notes)
        except IngestError as exc:
            entry = FileResult(path=name, status=FileStatus.failed, reason=str(exc))
        self.entries.append((name, entry))
        pending = [e for _, e in self.entries if not isinstance(e, FileResult)]
        if len(pending) >= BATCH_FILES or sum(len(e[1]) for e in pending) >= BATCH_CHUNKS:
            self.flush()

    def decided(self, result: FileResult) -> None:
        self.entries.append((result.path, result))

    def flush(self) -> None:
        if not self.entries:
            return
        parsed = [(name, e) for name, e in self.entries if not isinstance(e, FileResult)]
        statuses: dict[int, str] = {}
        if parsed:
            label = parsed[0][0] if len(parsed) == 1 else f"{len(parsed)} files"
            progress = (lambda done, total: self.on_chunks(label, done, total)) if self.on_chunks else None
            got = self.store.upsert_documents([(e[0], e[1]) for _, e in parsed], force=self.force, on_progress=progress)
            statuses = {id(e): status for (_, e), status in zip(parsed, got)}
        for name, e in self.entries:
            if isinstance(e, FileResult):
                result = e
            else:
                doc, chunks, notes = e
                result = FileResult(
                    path=name,
                    status=FileStatus(statuses[id(e)]),
                    chunks=len(chunks),
                    document_id=doc.document_id,
                    title=doc.title,
                    notes=notes,
                )
            self.results.append(result)
            if self.on_file:
                self.on_file(len(self.results), self.total, result)
        self.entries = []


def ingest_files(
    store,
    items: Sequence[_Item],
    options: IngestOptions,
    on_file: Optional[OnFile] = None,
    on_chunks: Optional[OnChunks] = None,
) -> IngestReport:
    started = time.perf_counter()
    if options.vendor:
        options = options.model_copy(update={"vendor": check_vendor(options.vendor)})
    if options.devices:
        try:
            options = options.model_copy(update={"devices": normalize_devices(options.devices)})
        except ValueError as exc:
            raise IngestError(str(exc)) from None
    if options.url_template:
        options = options.model_copy(update={"url_template": check_url_template(options.url_template)})
    included = included_files([(i.path, i.root or i.path.parent) for i in items if i.result is None], _read)
    batch = _Batch(store, options.force, on_file, on_chunks, len(items))
    for item in items:
        if item.result is not None:
            batch.decided(item.result)
            continue
        path = item.path
        resolved = os.path.realpath(path)
        if resolved in included:
            reason = f"included by {included[resolved]} (indexed there)"
            batch.decided(FileResult(path=str(path), status=FileStatus.skipped, reason=reason))
            continue
        root = item.root or path.parent
        batch.add(
            str(path),
            lambda p=path: _read(p),
            path=path,
            source=resolved,
            identity=f"file:{resolved}",
            options=options,
            relative=item.relative,
            includes_fn=lambda p=path, r=root: IncludeResolver(r, _read, page=p),
        )
    batch.flush()
    return IngestReport(files=tuple(batch.results), duration_s=time.perf_counter() - started)


def ingest_paths(
    store,
    paths: Sequence[Path],
    options: IngestOptions = IngestOptions(),
    on_file: Optional[OnFile] = None,
    on_chunks: Optional[OnChunks] = None,
) -> IngestReport:
    return ingest_files(store, discover([Path(p) for p in paths]), options, on_file, on_chunks)


def builtin_documents() -> list:
    """The shipped hwdocs as importlib.resources traversables, so an installed wheel finds them too."""
    from importlib import resources

    root = resources.files("hwdocs")
    return sorted(
        (e for e in root.iterdir() if e.name.endswith(".md") and not e.name.startswith(".")), key=lambda e: e.name
    )


def ingest_builtin(
    store, on_file: Optional[OnFile] = None, on_chunks: Optional[OnChunks] = None, force: bool = False
) -> IngestReport:
    started = time.perf_counter()
    entries = builtin_documents()
    batch = _Batch(store, force, on_file, on_chunks, len(entries))
    for entry in entries:
        source = f"hwdocs/{entry.name}"
        batch.add(
            source,
            entry.read_bytes,
            path=Path(entry.name),
            source=source,
            identity=f"builtin:{source}",
            options=IngestOptions(force=force),
            builtin=True,
        )
    batch.flush()
    return IngestReport(files=tuple(batch.results), duration_s=time.perf_counter() - started)
