"""How `kscout ask` prints an answer: measurements as the intent wants them, then the documents.

Every line says where it comes from. An outcome measured by another team says whose it is and that it
was not re-measured here; two outcomes that tell one measurement two ways are both marked; a document
hit says its file (with the section's anchor), its vendor and version, and whether it is a vendor's
document or a note the project (or a team) wrote with its own measurements.
"""

from __future__ import annotations

from rich.markup import escape as esc
from rich.table import Table

from knowledge.records import AskResult, DocumentHit
from store.records import DocumentOrigin


def _speed(o) -> str:
    if o.speedup is None:
        return "not measured"
    text = f"{o.speedup:.2f}x"
    if o.speedup_low is not None and o.speedup_high is not None:
        text += f" [{o.speedup_low:.2f}, {o.speedup_high:.2f}]"
    return text


def _who(doc: DocumentHit) -> str:
    if doc.imported_from is not None:
        return f"imported from {doc.imported_from.label()}"
    if doc.origin is DocumentOrigin.project:
        own = f"; own measurements: {doc.measurements}" if doc.measurements else ""
        return f"project note{own}"
    if doc.origin is DocumentOrigin.vendor:
        return f"vendor document ({doc.vendor})" if doc.vendor else "vendor document"
    return "external document"


def render_answer(console, result: AskResult) -> None:
    f = result.facets
    console.print(
        esc(
            f"intent={result.intent} devices={list(f.devices)} ops={list(f.ops)} "
            f"vendors={list(f.vendors)} dtypes={list(f.dtypes)}"
        ),
        style="dim",
    )
    if result.failure_hits:
        table = Table(title="failure patterns")
        for col in ("stage / error", "seen", "message shape", "where", "whose"):
            table.add_column(col, overflow="fold")
        for h in result.failure_hits:
            p = h.failure
            whose = h.imported_from.label() if h.imported_from else "this store"
            table.add_row(
                esc(f"{p.stage} / {p.error_class}"),
                f"{p.count}x, last {p.last_seen[:10]}",
                esc(p.message_shape),
                esc(f"{p.op_family} on {p.arch}"),
                esc(whose),
            )
        console.print(table)
    if result.outcome_hits:
        title = {
            "worked": "what worked (significant speedups only)",
            "failed": "failures, then significant slowdowns",
        }.get(result.intent, "outcomes")
        if any(h.conflicts_with for h in result.outcome_hits):  # shown whatever the intent would keep
            also = "and the rows that disagree with them"
            title = f"{title[:-1]}, {also})" if title.endswith(")") else f"{title} ({also})"
        table = Table(title=title)
        for col in ("tried", "result", "where", "when, versions", "measured by", "evidence"):
            table.add_column(col, overflow="fold")
        for h in result.outcome_hits:
            o = h.outcome
            # Status and speed are separate facts: a failure or an untimed pass says so; a timed
            # result says what its interval says (a 0.92x [0.90, 0.95] is a significant slowdown).
            result_text = f"{_speed(o)} vs {o.baseline}: {h.verdict}" if o.speedup is not None else h.verdict
            where = f"{o.op_family} on {o.device_name} ({o.arch}), {o.dtype}, {o.shape_bucket}"
            when = f"{o.created_at[:10]}, triton {o.triton_version}, torch {o.torch_version}" + (
                f", driver {o.driver_version}" if o.driver_version else ""
            )
            who = f"{h.imported_from.label()} (theirs, not re-measured here)" if h.imported_from else "this store"
            cells = [esc(x) for x in (o.transformation, result_text, where, when, who, ", ".join(o.evidence_eval_ids))]
            if h.conflicts_with:
                cells[1] += (
                    f"\n[bold red]CONFLICTING[/] with {esc(', '.join(h.conflicts_with))}: same evidence, other numbers"
                )
            table.add_row(*cells)
        console.print(table)
    elif f.ops:
        console.print(
            f"[dim]no {'significant speedups' if result.intent == 'worked' else 'outcomes'} recorded "
            f"for this question[/]"
        )
    docs = Table(title="documents")
    for col in ("#", "document > section", "excerpt", "source"):
        docs.add_column(col, overflow="fold")
    for i, d in enumerate(result.documents, start=1):
        section = " > ".join(d.heading_path[1:] or d.heading_path)
        title = f"{esc(d.title)}\n[dim]> {esc(section)}[/]" if section else esc(d.title)
        facts = ", ".join(x for x in (_who(d), f"version {d.doc_version}" if d.doc_version else None) if x)
        docs.add_row(str(i), title, esc(d.excerpt), f"{esc(d.location)}\n[dim]{esc(facts)}[/]")
    console.print(docs if result.documents else "[dim]no documents matched[/]")
