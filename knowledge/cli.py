"""`kscout ingest`, `ask`, `docs`, `reindex`, `retag`, `forget`, `knowledge export|import`.

Each command parses its options, calls one library function and renders. `--json` prints exactly one
JSON object on stdout; progress goes to stderr, so it never mixes in. A failed file makes `ingest` exit
1 through SystemExit: `typer.Exit` would only be returned by the `standalone_mode=False` app that
agent/cli.py runs, and its code would be lost.

This module imports nothing heavy at import time (no torch, no chromadb, no docutils): `kscout ask`
in a fresh process should spend its time answering, not importing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from knowledge.errors import KnowledgeError
from knowledge.records import FileStatus, IngestReport
from store.records import ChunkKind, DocumentOrigin

PROGRESS_MIN_FILES = 5
PROGRESS_MIN_CHUNKS = 64

StoreOpt = Annotated[Optional[Path], typer.Option("--store", help="Store folder (default: $KSCOUT_HOME).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _open_store(home: Optional[Path]):
    from store import Store

    store = Store.open(home)
    if store.vector_repair_error:
        _console(stderr=True).print(
            f"[yellow]warning:[/] vectors owed since a crash could not be written yet: "
            f"{_esc(store.vector_repair_error)}"
        )
    return store


def _emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")


class _IngestProgress:
    """A progress bar on stderr: files done, and the chunks of a file being embedded when it is big
    (a 50 MB file is one file of thousands of chunks; without the second bar it looks hung)."""

    def __init__(self, total_files: int, label: str = "ingest", always: bool = False) -> None:
        self.total_files = total_files
        self.label = label
        self.enabled = always or total_files >= PROGRESS_MIN_FILES
        self._bar = None
        self._files = None
        self._chunks = None

    def __enter__(self) -> "_IngestProgress":
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(
            TextColumn("{task.fields[label]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=_console(stderr=True),
            transient=True,
        )
        self._bar.__enter__()
        if self.enabled:
            self._files = self._bar.add_task("", total=self.total_files, label=self.label)
        return self

    def __exit__(self, *exc) -> None:
        self._bar.__exit__(*exc)

    def loading_model(self, store) -> None:
        """The first embedding in a process loads torch and the model: say so rather than sit still."""
        if self._files is not None:
            self._bar.update(self._files, description="loading the embedding model")
        store.embedder.load()
        if self._files is not None:
            self._bar.update(self._files, description="")

    def on_file(self, done: int, _total: int, result) -> None:
        if self._files is not None:
            self._bar.update(self._files, completed=done, description=Path(result.path).name)
        if self._chunks is not None:
            self._bar.remove_task(self._chunks)
            self._chunks = None

    def on_chunks(self, name: str, done: int, total: int) -> None:
        if total < PROGRESS_MIN_CHUNKS:
            return
        if self._chunks is None:
            self._chunks = self._bar.add_task(Path(name).name, total=total, label="  chunks")
        self._bar.update(self._chunks, completed=done)


def _report_table(report: IngestReport, width: int):
    """One line per file; a path too long for its column loses its middle, so its file name stays."""
    from knowledge.render import cut_path, fit_widths, table_of

    headers = ("file", "status", "chunks", "reason or note")
    rows = [
        (f.path, f.status.value, str(f.chunks), "; ".join(([f.reason] if f.reason else []) + list(f.notes)))
        for f in report.files
    ]
    widths = fit_widths(headers, rows, width, shrink=(0, 3))
    table = table_of("ingest", *headers, no_wrap=headers)
    for column, w in zip(table.columns, widths):
        column.width = w
    table.columns[2].justify = "right"
    style = {FileStatus.failed: "red", FileStatus.skipped: "yellow", FileStatus.unchanged: "dim"}
    for f, (path, status, chunks, why) in zip(report.files, rows):
        table.add_row(
            _esc(cut_path(path, widths[0])), f"[{style.get(f.status, 'green')}]{status}[/]", chunks, _esc(why)
        )
    return table


def _report_lines(report: IngestReport, width: int) -> list[str]:
    """Each failure and each note in full below the table (its cell may have been cut), in lines of at
    most `width`, broken between words: the path (its file name whole) on the first line, so
    `grep broken.pdf` finds the failure; `--json` has every path whole."""
    from knowledge.render import cut_path, fill

    lines = []
    for f in report.files:
        said = ([("failed", f.reason or "")] if f.status is FileStatus.failed else []) + [("note", n) for n in f.notes]
        for label, text in said:
            head = f"{label}: {cut_path(f.path, width - len(label) - 3)}:"
            lines += fill(text.split(), width, first=head, indent="    ")
    return lines


def _refresh_index(store, files=None) -> None:
    """Leave the search index `ask` reads built, so the next question starts warm (knowledge/index.py)."""
    changed = {FileStatus.added, FileStatus.replaced, FileStatus.retagged, FileStatus.repaired}
    if files is None or any(f.status in changed for f in files):
        from knowledge.index import corpus_for

        corpus_for(store)


def _needs_model(store, count: int) -> bool:
    return store.vectors_enabled and count > 0


def ingest_cmd(
    paths: Annotated[Optional[list[Path]], typer.Argument(help="Files or folders (recursive).")] = None,
    vendor: Annotated[Optional[str], typer.Option(help="Any vendor name (normalised: 'AMD Inc.' -> amd).")] = None,
    device: Annotated[
        Optional[list[str]], typer.Option("--device", help="Device the documents describe (repeatable).")
    ] = None,
    source_url: Annotated[
        Optional[str],
        typer.Option(
            "--source-url",
            help="The file's URL, or the URL a folder is published at (each file gets its own: a GitHub "
            ".../blob/REF/... base keeps the file's extension, any other base gets .html for .md/.rst/.txt).",
        ),
    ] = None,
    url_template: Annotated[
        Optional[str],
        typer.Option(
            "--url-template",
            help="Each file's URL from a template: {path} is its path inside the folder, {stem} the same "
            "without extension ('https://host/docs/{stem}.html').",
        ),
    ] = None,
    doc_version: Annotated[Optional[str], typer.Option("--doc-version")] = None,
    kind: Annotated[Optional[ChunkKind], typer.Option("--kind")] = None,
    origin: Annotated[
        Optional[DocumentOrigin],
        typer.Option("--origin", help="vendor | project (your team's own notes and measurements) | external"),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Parse and write again even when the bytes are unchanged (unchanged text is not re-embedded).",
        ),
    ] = False,
    max_chunks: Annotated[int, typer.Option("--max-chunks", help="Keep at most this many chunks of one file.")] = 2000,
    builtin: Annotated[bool, typer.Option("--builtin", help="Load the shipped hwdocs.")] = False,
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest Markdown, reStructuredText, text, HTML and PDF documents (a header in the file wins)."""
    from knowledge.ingest import IngestOptions, builtin_documents, discover, ingest_builtin, ingest_files

    if not paths and not builtin:
        raise KnowledgeError("nothing to ingest: give one or more PATHs, or --builtin")
    if max_chunks < 1:
        raise KnowledgeError(f"--max-chunks must be at least 1, got {max_chunks}")
    if source_url and url_template:
        raise KnowledgeError("give --source-url or --url-template, not both")
    if url_template:  # refuse a bad template before anything is read or written
        from knowledge.ingest import check_url_template

        check_url_template(url_template)
    missing = [str(p) for p in paths or () if not p.exists() and not p.is_symlink()]
    if paths and len(missing) == len(paths) and not builtin:  # nothing to read at all: bad input, exit 2
        raise KnowledgeError(f"no such file or folder: {', '.join(missing)}")
    options = IngestOptions(
        vendor=vendor,
        devices=tuple(device or ()),
        source_url=source_url,
        url_template=url_template,
        doc_version=doc_version,
        kind=kind,
        origin=origin,
        force=force,
        max_chunks=max_chunks,
    )
    if options.vendor:  # refuse a bad name before anything is read or written
        from knowledge.frontmatter import check_vendor

        options = options.model_copy(update={"vendor": check_vendor(options.vendor)})
    reports = []
    with _open_store(store_dir) as store:
        jobs = []
        if builtin:
            jobs.append((len(builtin_documents()), lambda f, c: ingest_builtin(store, f, c, force=force)))
        if paths:
            items = discover(list(paths))
            jobs.append((len(items), lambda f, c, items=items: ingest_files(store, items, options, f, c)))
        total = sum(n for n, _ in jobs)
        with _IngestProgress(total) as progress:
            if progress.enabled and _needs_model(store, total):
                progress.loading_model(store)
            for _, job in jobs:
                reports.append(job(progress.on_file, progress.on_chunks))
        _refresh_index(store, [f for r in reports for f in r.files])
    report = IngestReport(
        files=tuple(f for r in reports for f in r.files), duration_s=sum(r.duration_s for r in reports)
    )
    if as_json:
        _emit_json(
            {
                "files": [f.model_dump(mode="json") for f in report.files],
                "counts": {s.value: report.count(s) for s in FileStatus},
                "duration_s": report.duration_s,
            }
        )
    else:
        console = _console()
        console.print(_report_table(report, console.width))
        for line in _report_lines(report, console.width):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        counts = ", ".join(f"{report.count(s)} {s.value}" for s in FileStatus if report.count(s))
        console.print(f"{len(report.files)} file(s): {counts} in {report.duration_s:.1f} s")
    if report.failed:
        raise SystemExit(1)


def ensure_shipped_docs(store) -> None:
    """A new store gets the shipped hwdocs before its first answer, under a progress bar on stderr
    (embedding them takes tens of seconds on 2 cores; silence looked like a hang). Commands that
    answer from the store (ask here; `optimize` builds prompt context) call this first."""
    if store.documents():
        return
    from knowledge.ingest import builtin_documents
    from knowledge.retrieve import load_builtin_if_empty

    with _IngestProgress(
        len(builtin_documents()), label="first use: loading the shipped docs", always=True
    ) as progress:
        if store.vectors_enabled:
            progress.loading_model(store)
        load_builtin_if_empty(store, progress.on_file, progress.on_chunks)


def ask_cmd(
    question: Annotated[str, typer.Argument(help="A question in plain language.")],
    device: Annotated[Optional[str], typer.Option(help="Restrict to a device (aliases understood).")] = None,
    op: Annotated[Optional[str], typer.Option(help="Restrict to an op family (aliases understood).")] = None,
    k: Annotated[int, typer.Option("--k", help="How many outcomes and chunks.")] = 5,
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What past runs measured and what the documents say, for one question."""
    from knowledge.render import render_answer
    from knowledge.retrieve import ask

    with _open_store(store_dir) as store, store.session():  # one DuckDB open for the whole answer
        ensure_shipped_docs(store)
        result = ask(store, question, device=device, op=op, k=k)
    if as_json:
        _emit_json(result.to_json_obj())
        return
    render_answer(_console(), result)


def docs_cmd(
    long: Annotated[
        bool, typer.Option("--long", help="Every field of each document, with its latest tag changes.")
    ] = False,
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The ingested documents, one line each (--long: their provenance, with each tag change and its
    old value), and the vendors and devices they cover."""
    from knowledge.retrieve import catalogue

    with _open_store(store_dir) as store:
        documents = store.documents()
        history = store.document_history()
        chunks = {} if as_json else store.chunk_counts()
    documents = sorted(documents, key=lambda d: (not d.builtin, d.title.lower()))
    vendors, devices = catalogue(documents)
    if as_json:
        _emit_json(
            {
                "documents": [
                    d.model_dump(mode="json")
                    | {
                        "history": [
                            h.model_dump(mode="json", exclude={"document_id"}) for h in history.get(d.document_id, [])
                        ]
                    }
                    for d in documents
                ],
                "vendors": vendors,
                "devices": devices,
            }
        )
        return
    from knowledge.render import fill

    console = _console()
    if long:
        lines = _docs_long(documents, history, chunks, console.width)
    else:
        console.print(_docs_compact(documents, chunks, console.width))
        lines = []
    # A device name ("A100 PCIE (1)") is never split across two lines.
    for label, counts in (("vendors", vendors), ("devices", devices)):
        items = [f"{v} ({n})," for v, n in counts.items()] or ["none,"]
        items[-1] = items[-1][:-1]
        lines += fill(items, console.width, first=f"{label}:", indent="  ")
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _docs_compact(documents, chunks: dict[str, int], width: int):
    """One line per document: the id `retag`/`forget` accept, title, kind, chunks, vendor and devices
    (the first and how many more), and where it came from (its file name kept)."""
    from knowledge.render import cut_path, fit_widths, table_of, unique_prefixes

    headers = ("id", "document", "kind", "chunks", "vendor, devices", "source")
    ids = unique_prefixes(d.document_id for d in documents)
    rows = [
        (
            ids[d.document_id],
            d.title,
            d.kind.value,
            str(chunks.get(d.document_id, 0)),
            " ".join(x for x in (d.vendor, d.devices[0] if d.devices else None) if x)
            + (f" +{len(d.devices) - 1}" if len(d.devices) > 1 else "")
            or "-",
            d.source_url or d.source,
        )
        for d in documents
    ]
    widths = fit_widths(headers, rows, width, shrink=(1, 4, 5))
    table = table_of(f"{len(documents)} document(s)", *headers, no_wrap=headers)
    for column, w in zip(table.columns, widths):
        column.width = w
    table.columns[3].justify = "right"
    for row in rows:
        table.add_row(*(_esc(x) for x in row[:5]), _esc(cut_path(row[5], widths[5])))
    return table


def _docs_long(documents, history, chunks: dict[str, int], width: int) -> list[str]:
    """Every field of each document, one per line under its title, and its latest tag changes (`--json`
    has them all and the front matter): a record per document rather than a table, so a path or URL
    gets the whole width and is cut (its file name kept) only when longer than that."""
    from knowledge.render import fill

    indent = " " * 12
    lines = [f"{len(documents)} document(s)"]
    for d in documents:
        changes = history.get(d.document_id, [])[-3:]
        fields = [
            ("id", [d.document_id]),
            ("source", [d.source]),
            ("url", [d.source_url] if d.source_url else []),
            ("kind", [d.kind.value]),
            ("origin", [d.origin.value] + (["(shipped)"] if d.builtin else [])),
            ("vendor", [d.vendor] if d.vendor else []),
            ("version", [d.doc_version] if d.doc_version else []),
            ("devices", [f"{x}," for x in d.devices[:-1]] + list(d.devices[-1:])),
            ("ops", [f"{x}," for x in d.op_families[:-1]] + list(d.op_families[-1:])),
            ("chunks", [str(chunks.get(d.document_id, 0))]),
            ("sha256", [d.sha256]),
            ("ingested", [d.ingested_at[:19]]),
            ("retagged", [d.retagged_at[:19]] if d.retagged_at else []),
        ]
        for h in changes:
            old, new = json.dumps(h.old), json.dumps(h.new)
            fields.append(("changed", [h.field, old, "->", new, f"({h.cause},", f"{h.changed_at[:10]})"]))
        lines.append("")
        lines += fill(d.title.split(), width, indent="  ")
        for name, units in fields:
            if units:
                lines += fill(units, width, first=f"  {name:<9} ", indent=indent)
    lines.append("")
    return lines


def reindex_cmd(store_dir: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Rebuild the vector index (Chroma) from the DuckDB rows (a damaged Chroma folder is moved aside)."""
    from rich.table import Table

    with _open_store(store_dir) as store:
        counts = store.reindex()
        moved = store.damaged_chroma_moved_to
    if as_json:
        _emit_json({"counts": counts, "damaged_chroma_moved_to": str(moved) if moved else None})
        return
    console = _console()
    if moved:
        console.print(f"[yellow]the Chroma folder was damaged; moved aside to {_esc(str(moved))} and rebuilt[/]")
    table = Table(title="reindexed")
    table.add_column("collection")
    table.add_column("vectors", justify="right")
    for name, n in counts.items():
        table.add_row(_esc(name), str(n))
    console.print(table)


def retag_cmd(
    documents: Annotated[list[str], typer.Argument(help="Document ids (a unique prefix), file paths or file names.")],
    vendor: Annotated[Optional[str], typer.Option(help="The vendor (any name, normalised).")] = None,
    device: Annotated[
        Optional[list[str]], typer.Option("--device", help="Devices (repeatable); replaces the list.")
    ] = None,
    no_devices: Annotated[
        bool, typer.Option("--no-devices", help="The documents name no device (apply to all).")
    ] = False,
    source_url: Annotated[Optional[str], typer.Option("--source-url")] = None,
    doc_version: Annotated[Optional[str], typer.Option("--doc-version")] = None,
    kind: Annotated[Optional[ChunkKind], typer.Option("--kind")] = None,
    origin: Annotated[Optional[DocumentOrigin], typer.Option("--origin")] = None,
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Correct documents' provenance in place: rows and vector metadata change, nothing is re-embedded."""
    from knowledge.manage import RetagChanges, retag

    changes = RetagChanges(
        vendor=vendor,
        devices=tuple(device) if device else (() if no_devices else None),
        source_url=source_url,
        doc_version=doc_version,
        kind=kind,
        origin=origin,
    )
    with _open_store(store_dir) as store:
        results = [retag(store, ref, changes) for ref in documents]
        _refresh_index(store)
    if as_json:
        _emit_json(
            {
                "documents": [
                    {"document_id": d.document_id, "status": s, "document": d.model_dump(mode="json")}
                    for d, s in results
                ]
            }
        )
        return
    for d, status in results:
        _console().print(
            f"{status}: {_esc(d.title)} ({d.document_id}) vendor={d.vendor} devices={list(d.devices)} "
            f"version={d.doc_version} origin={d.origin.value}"
        )


def forget_cmd(
    documents: Annotated[list[str], typer.Argument(help="Document ids (a unique prefix), file paths or file names.")],
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove documents, their chunks and their vectors from the store."""
    from knowledge.manage import forget

    with _open_store(store_dir) as store:
        removed = [forget(store, ref) for ref in documents]
        _refresh_index(store)
    if as_json:
        _emit_json({"forgotten": [{"document_id": d.document_id, "source": d.source, "chunks": n} for d, n in removed]})
        return
    for d, n in removed:
        _console().print(f"forgot {_esc(d.title)} ({d.document_id}, {_esc(d.source)}): {n} chunk(s) and their vectors")


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest_cmd)
    app.command("ask")(ask_cmd)
    app.command("docs")(docs_cmd)
    app.command("reindex")(reindex_cmd)
    app.command("retag")(retag_cmd)
    app.command("forget")(forget_cmd)
    from knowledge.sharing_cli import knowledge_app

    app.add_typer(
        knowledge_app(),
        name="knowledge",
        help="Share knowledge between stores: export and import signed bundles, and the keys they trust.",
    )
