"""How `kscout ask` prints an answer: measurements as the intent wants them, then the documents; and
the tables every knowledge command shares.

Every line says where it comes from. An outcome measured by another team says whose it is and that it
was not re-measured here; two outcomes that tell one measurement two ways are both marked; a document
hit says its file (with the section's anchor), its vendor and version, and whether it is a vendor's
document or a note the project (or a team) wrote with its own measurements.

Tables read at 80 columns, on a terminal or through a pipe: prose wraps between words, and a path, a
URL or an id is never folded mid-word. A value too long for its column is cut with "…": a path or a
URL loses its folders and keeps its file name whole, an id keeps its prefix, so `grep broken.pdf`
finds its line. Lines printed outside a table (ingest's failures and notes, `docs --long`, the vendor
and device lists) are wrapped between words to the same width.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from rich import box
from rich.markup import escape as esc
from rich.table import Table

from knowledge.records import AskResult, DocumentHit
from store.records import DocumentOrigin


def table_of(title: str, *columns: str, no_wrap: Iterable[str] = ()) -> Table:
    """A kscout table: no outer box (every column counts at 80), every cell cut with "…" rather than
    folded; the columns named in `no_wrap` (paths, URLs, ids, statuses) keep one line per row."""
    t = Table(
        title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True, title_justify="left"
    )
    keep = set(no_wrap)
    for name in columns:
        t.add_column(name, overflow="ellipsis", no_wrap=name in keep)
    return t


def fit_widths(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, shrink: Sequence[int]) -> list[int]:
    """Column widths for one-line rows in `width` characters: each column as wide as its widest cell,
    then what does not fit taken from the `shrink` columns, widest first (a column keeps at least 8)."""
    from rich.cells import cell_len

    widths = [max([cell_len(h)] + [cell_len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    excess = sum(widths) + 2 * (len(widths) - 1) - width  # two characters between columns (table_of)
    while excess > 0:
        i = max(shrink, key=lambda c: widths[c])
        if widths[i] <= 8:
            break
        widths[i] -= 1
        excess -= 1
    return widths


def cut_path(text: str, width: int) -> str:
    """A path or URL cut to `width` with "…", its last part (the file name, with its anchor) kept whole
    where it fits, so `grep broken.pdf` still finds the line: '/data/vendor-d…/broken.pdf'. A name too
    long for the width keeps its start and its end ('layernorm-row-wi…mily.md')."""
    if width < 3 or len(text) <= width:
        return text
    cut = text.rfind("/", 0, len(text) - 1)
    name = text[cut:] if cut > 0 else ""  # with its leading slash
    if name and len(name) + 1 <= width:
        head = width - len(name) - 1
        return (text[:head] if head >= 4 else "") + "…" + name  # a head of 1-3 characters says nothing
    name = name[1:] if name else text
    keep = width - 1
    tail = keep // 3
    return name[: keep - tail] + "…" + name[len(name) - tail :]


def fill(units: Sequence[str], width: int, first: str = "", indent: str = "  ") -> list[str]:
    """`units` joined by spaces in lines of at most `width`, broken only between units: the first line
    starts with `first` (a label ending in a space takes the first unit on its line, cut to fit; one
    without takes it only if it fits), the others with `indent`. A unit longer than a whole line is cut
    with "…" (a path keeps its file name), never folded."""
    lines: list[str] = []
    line, placed = first, bool(first.strip()) and not first.endswith(" ")
    for unit in units:
        if placed and len(line) + 1 + len(unit) > width:
            lines.append(line)
            line, placed = indent, False
        sep = " " if line and not line.endswith(" ") else ""
        line += sep + cut_path(unit, width - len(line) - len(sep))
        placed = True
    lines.append(line)
    return lines


def unique_prefixes(ids: Iterable[str], minimum: int = 8) -> dict[str, str]:
    """The shortest prefix (at least `minimum` characters) of each id that no other id starts with:
    what `kscout retag` and `forget` accept back."""
    ordered = sorted(set(ids))
    out = {}
    for i, this in enumerate(ordered):
        n = minimum
        for other in ordered[max(0, i - 1) : i] + ordered[i + 1 : i + 2]:
            common = next((j for j, (a, b) in enumerate(zip(this, other)) if a != b), min(len(this), len(other)))
            n = max(n, common + 1)
        out[this] = this[: min(n, len(this))]
    return out


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


def _location(location: str, width: int) -> str:
    """A location is one word on one line where it fits; else its file (name kept) on one line and its
    '#anchor' on the next, each cut with "…" to the column, so the file name is never what is lost."""
    if len(location) <= width:
        return location
    path, _, anchor = location.partition("#")
    return cut_path(path, width) + (f"\n{cut_path('#' + anchor, width)}" if anchor else "")


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
        table = table_of("failure patterns", "stage / error", "seen", "message shape", "where", "whose")
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
        table = table_of(title, "tried", "result", "where", "when, versions", "measured by", "evidence")
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
    docs = table_of("documents", "#", "document > section", "excerpt", "source", no_wrap=("#",))
    location_width = max(24, console.width * 3 // 10)
    docs.columns[3].max_width = location_width
    for i, d in enumerate(result.documents, start=1):
        section = " > ".join(d.heading_path[1:] or d.heading_path)
        title = f"{esc(d.title)}\n[dim]> {esc(section)}[/]" if section else esc(d.title)
        facts = ", ".join(x for x in (_who(d), f"version {d.doc_version}" if d.doc_version else None) if x)
        docs.add_row(
            str(i), title, esc(d.excerpt), f"{esc(_location(d.location, location_width))}\n[dim]{esc(facts)}[/]"
        )
    console.print(docs if result.documents else "[dim]no documents matched[/]")
