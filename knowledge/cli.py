"""`kscout ingest`, `ask`, `docs`, `reindex`: parse the options, call one library function, render.

`--json` prints exactly one JSON object on stdout; progress goes to stderr, so it never mixes in.
A failed file makes `ingest` exit 1 through SystemExit: `typer.Exit` would only be returned by
the `standalone_mode=False` app that agent/cli.py runs, and its code would be lost.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape as esc
from rich.table import Table

from knowledge.errors import KnowledgeError
from knowledge.ingest import IngestOptions, discover, ingest_builtin, ingest_files
from knowledge.records import FileStatus, IngestReport
from store.records import ChunkKind

PROGRESS_MIN_FILES = 5

StoreOpt = Annotated[Optional[Path], typer.Option("--store", help="Store folder (default: $KSCOUT_HOME).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]


def _open_store(home: Optional[Path]):
    from store import Store

    return Store.open(home)


def _emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")


def _with_progress(total: int, run):
    """Run `run(on_file)` under a rich progress bar on stderr when the job is long enough to want one."""
    if total < PROGRESS_MIN_FILES:
        return run(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("ingest"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=total)

        def on_file(done: int, _total: int, result) -> None:
            bar.update(task, completed=done, description=Path(result.path).name)

        return run(on_file)


def _report_table(report: IngestReport) -> Table:
    table = Table(title="ingest")
    for col in ("file", "status", "chunks", "reason"):
        table.add_column(col, overflow="fold")
    style = {FileStatus.failed: "red", FileStatus.skipped: "yellow", FileStatus.unchanged: "dim"}
    for f in report.files:
        table.add_row(esc(f.path), f"[{style.get(f.status, 'green')}]{f.status.value}[/]", str(f.chunks),
                      esc(f.reason or ""))
    return table


def ingest_cmd(
    paths: Annotated[Optional[list[Path]], typer.Argument(help="Files or folders (recursive).")] = None,
    vendor: Annotated[Optional[str], typer.Option(help="nvidia | amd | meta | intel | generic")] = None,
    device: Annotated[Optional[list[str]], typer.Option("--device", help="Device the documents describe (repeatable).")] = None,
    source_url: Annotated[Optional[str], typer.Option("--source-url")] = None,
    doc_version: Annotated[Optional[str], typer.Option("--doc-version")] = None,
    kind: Annotated[Optional[ChunkKind], typer.Option("--kind")] = None,
    builtin: Annotated[bool, typer.Option("--builtin", help="Load the shipped hwdocs.")] = False,
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest Markdown, text, HTML and PDF documents (a header in the file wins over these options)."""
    if not paths and not builtin:
        raise KnowledgeError("nothing to ingest: give one or more PATHs, or --builtin")
    options = IngestOptions(vendor=vendor, devices=tuple(device or ()), source_url=source_url,
                            doc_version=doc_version, kind=kind)
    with _open_store(store_dir) as store:
        reports = []
        if builtin:
            from knowledge.ingest import builtin_documents

            reports.append(_with_progress(len(builtin_documents()), lambda cb: ingest_builtin(store, cb)))
        if paths:
            items = discover(list(paths))
            reports.append(_with_progress(len(items), lambda cb: ingest_files(store, items, options, cb)))
    report = IngestReport(files=tuple(f for r in reports for f in r.files), duration_s=sum(r.duration_s for r in reports))
    if as_json:
        _emit_json({
            "files": [f.model_dump(mode="json") for f in report.files],
            "counts": {s.value: report.count(s) for s in FileStatus},
            "duration_s": report.duration_s,
        })
    else:
        console = Console()
        console.print(_report_table(report))
        counts = ", ".join(f"{report.count(s)} {s.value}" for s in FileStatus if report.count(s))
        console.print(f"{len(report.files)} file(s): {counts} in {report.duration_s:.1f} s")
    if report.failed:
        raise SystemExit(1)


def ask_cmd(
    question: Annotated[str, typer.Argument(help="A question in plain language.")],
    device: Annotated[Optional[str], typer.Option(help="Restrict to a device (aliases understood).")] = None,
    op: Annotated[Optional[str], typer.Option(help="Restrict to an op family (aliases understood).")] = None,
    k: Annotated[int, typer.Option("--k", help="How many outcomes and chunks.")] = 5,
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What past runs measured and what the documents say, for one question."""
    from knowledge.retrieve import ask

    with _open_store(store_dir) as store:
        result = ask(store, question, device=device, op=op, k=k)
    if as_json:
        _emit_json(result.to_json_obj())
        return
    console = Console()
    f = result.facets
    console.print(esc(f"devices={list(f.devices)} ops={list(f.ops)} vendors={list(f.vendors)} dtypes={list(f.dtypes)}"),
                  style="dim")
    out = Table(title="outcomes")
    for col in ("tried", "result", "where", "when", "evidence"):
        out.add_column(col, overflow="fold")
    for o in result.outcomes:
        speed = "not measured" if o.speedup is None else f"{o.speedup:.2f}x"
        if o.speedup_low is not None and o.speedup_high is not None:
            speed += f" [{o.speedup_low:.2f}, {o.speedup_high:.2f}]"
        result_text = f"{speed} vs {o.baseline}, {o.status}"
        where = f"{o.op_family} on {o.device_name} ({o.arch}), {o.dtype}, {o.shape_bucket}"
        when = f"{o.created_at[:10]}, triton {o.triton_version}, torch {o.torch_version}" + (
            f", driver {o.driver_version}" if o.driver_version else "")
        out.add_row(*(esc(x) for x in (o.transformation, result_text, where, when, ", ".join(o.evidence_eval_ids))))
    console.print(out if result.outcomes else "[dim]no outcomes recorded for this question[/]")
    docs = Table(title="documents")
    for col in ("#", "document > section", "excerpt", "source"):
        docs.add_column(col, overflow="fold")
    for i, d in enumerate(result.documents, start=1):
        body = d.text.partition("\n\n")[2] or d.text
        excerpt = " ".join(body.split())
        excerpt = excerpt if len(excerpt) <= 240 else excerpt[:239] + "…"
        section = " > ".join(d.heading_path[1:] or d.heading_path)
        source = (d.source_url or d.source) + (f" ({d.doc_version})" if d.doc_version else "")
        title = f"{esc(d.title)}\n[dim]> {esc(section)}[/]" if section else esc(d.title)
        docs.add_row(str(i), title, esc(excerpt), esc(source))
    console.print(docs if result.documents else "[dim]no documents matched[/]")


def docs_cmd(store_dir: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The ingested documents and their provenance."""
    with _open_store(store_dir) as store:
        documents = store.documents()
    documents = sorted(documents, key=lambda d: (not d.builtin, d.title.lower()))
    if as_json:
        _emit_json({"documents": [d.model_dump(mode="json") for d in documents]})
        return
    table = Table(title=f"{len(documents)} document(s)")
    for col in ("document", "kind, vendor, version", "devices", "url, sha256, ingested"):
        table.add_column(col, overflow="fold")
    for d in documents:
        facts = ", ".join(x for x in (d.kind.value, d.vendor, d.doc_version) if x)
        prov = "\n".join(x for x in (d.source_url, f"sha256 {d.sha256[:12]}", d.ingested_at[:19]) if x)
        table.add_row(f"{esc(d.title)}\n[dim]{esc(d.source)}[/]", esc(facts), esc(", ".join(d.devices)), esc(prov))
    Console().print(table)


def reindex_cmd(store_dir: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Rebuild the vector index (Chroma) from the DuckDB rows."""
    with _open_store(store_dir) as store:
        counts = store.reindex()
    if as_json:
        _emit_json({"counts": counts})
        return
    table = Table(title="reindexed")
    table.add_column("collection")
    table.add_column("vectors", justify="right")
    for name, n in counts.items():
        table.add_row(esc(name), str(n))
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest_cmd)
    app.command("ask")(ask_cmd)
    app.command("docs")(docs_cmd)
    app.command("reindex")(reindex_cmd)
