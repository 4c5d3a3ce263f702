"""`kscout promote | deployed | rollback | history | revalidate | export | report`: thin commands.

Each command opens the store, calls one library function, renders. `--json` prints exactly one JSON
object on stdout. Refusals are `KscoutError`s, which agent/cli.py prints as one line (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

StoreOpt = typer.Option(None, "--store", help="store folder (default: $KSCOUT_HOME or the user data dir)")
JsonOpt = typer.Option(False, "--json", help="print one JSON object instead of tables")
NoHybridOpt = typer.Option(
    False, "--no-hybrid", help="leave out hybrids (PyTorch compute in forward beside the Triton kernels)"
)


def _open(store_dir: Optional[Path]):
    from store import Store

    return Store.open(store_dir)


def _console():
    from agent.term import console

    return console()


def short(cid):
    from agent.term import short as _short

    return _short(cid)


def none_line(what, why=None):
    from agent.term import none_line as _none

    return _none(what, why)


def term_table(*columns, title=None):
    from agent.term import table

    return table(*columns, title=title)


def _print_json(obj) -> None:
    from agent.term import print_json

    print_json(obj)


def promote_cmd(
    candidate: str = typer.Argument(..., help="candidate id (or a unique prefix)"),
    approved_by: str = typer.Option(..., "--approved-by", help="who approves the deployment"),
    note: str = typer.Option("", "--note"),
    device: Optional[str] = typer.Option(
        None, "--device", help="device arch, when the candidate was evaluated on several"
    ),
    allow_unsandboxed: bool = typer.Option(
        False, "--allow-unsandboxed", help="accept evidence gathered without the OS sandbox (recorded in the note)"
    ),
    no_hybrid: bool = NoHybridOpt,
    store_dir: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Deploy a candidate for its (op, device arch), if its evidence is complete."""
    from agent.lifecycle.registry import promote

    with _open(store_dir) as store:
        approved, deployed = promote(
            store,
            candidate,
            approved_by=approved_by,
            note=note,
            arch=device,
            allow_unsandboxed=allow_unsandboxed,
            no_hybrid=no_hybrid,
        )
    if as_json:
        _print_json({"approved": approved.model_dump(mode="json"), "deployed": deployed.model_dump(mode="json")})
        return
    prev = deployed.previous_candidate_id[:12] if deployed.previous_candidate_id else "the reference"
    _console().print(
        f"deployed {deployed.candidate_id[:12]} for {deployed.op_family} on {deployed.arch}, approved by "
        f"{deployed.actor}; rollback returns to {prev}"
    )


def deployed_cmd(
    device: Optional[str] = typer.Option(None, "--device", help="only this device arch"),
    store_dir: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """What is live per (op, device arch), since when, approved by whom, and how fresh its evidence is."""
    from agent.lifecycle.hostenv import probe_environment
    from agent.lifecycle.registry import deployed_entries
    from agent.lifecycle.revalidate import freshness

    current = probe_environment()  # not evaluation.fingerprint(): listing must not wait for torch
    with _open(store_dir) as store:
        rows = []
        for e in deployed_entries(store, device):
            revals = (
                [r for *_x, r in store.evaluations(candidate_id=e.candidate_id, kind="revalidate")]
                if e.candidate_id
                else []
            )
            rows.append((e, freshness(e, current, revals)))
    if as_json:
        _print_json(
            {
                "current_env": current.model_dump(mode="json"),
                "deployed": [{**e.model_dump(mode="json"), "freshness": f} for e, f in rows],
            }
        )
        return
    from agent.term import indented

    con = _console()
    if not rows:
        con.print(none_line("deployed kernels", f"on {device}" if device else None), highlight=False)
        return
    for e, f in rows:  # one block per entry: reads at any width, where a 9-column table did not
        ev = e.evidence
        live = short(e.candidate_id) if e.candidate_id else "the reference"
        head = f"{e.op} on {e.arch}: {live}{' (flagged)' if e.flagged else ''} since {_when(e.since)}"
        head += f", approved by {e.approved_by}" if e.approved_by else ""
        con.print(head, markup=False, highlight=False)
        if ev is not None:
            speed = (
                f"{ev.speedup:#.3g}x [{ev.speedup_low:#.3g}, {ev.speedup_high:#.3g}] vs eager"
                if ev.speedup
                else "speed not measured"
            )
            shape = ", ".join(f"{k} {r.min}..{r.max}" for k, r in ev.assumptions.shape_range.items()) or "-"
            con.print(indented(f"{speed}; proven for {shape}; {', '.join(ev.assumptions.dtypes)}"))
        con.print(indented(f"evidence: {f}"))


def _when(iso: str) -> str:
    """'2026-12-02T23:21:34.749+00:00' -> '2026-12-02 23:21:34' (UTC, as stored)."""
    return iso[:19].replace("T", " ") if iso else "-"


def rollback_cmd(
    op: str = typer.Argument(...),
    device: str = typer.Option(..., "--device", help="device arch, e.g. sm_90"),
    by: str = typer.Option(..., "--by", help="who rolls back"),
    reason: str = typer.Option("", "--reason"),
    store_dir: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Return at once to the previous known-good kernel (or the reference)."""
    from agent.lifecycle.registry import rollback

    with _open(store_dir) as store:
        event = rollback(store, op, device, by=by, reason=reason)
    if as_json:
        _print_json(event.model_dump(mode="json"))
        return
    now = event.candidate_id[:12] if event.candidate_id else "the reference"
    _console().print(f"rolled back {op} on {device} from {event.previous_candidate_id[:12]} to {now}")


def history_cmd(
    op: str = typer.Argument(...),
    device: str = typer.Option(..., "--device", help="device arch"),
    store_dir: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The append-only promotion history of one (op, device arch)."""
    from agent.lifecycle.registry import history

    with _open(store_dir) as store:
        events = history(store, op, device)
    if as_json:
        _print_json({"events": [e.model_dump(mode="json") for e in events]})
        return
    table = term_table(
        "when (UTC)", "state", "candidate", "by", "previous", "note", title=f"history of {op} on {device}"
    )
    for e in events:
        table.add_row(
            _when(e.created_at),
            e.state.value,
            short(e.candidate_id) if e.candidate_id else "reference",
            e.actor,
            short(e.previous_candidate_id) if e.previous_candidate_id else "-",
            e.note,
        )
    _console().print(table)


def revalidate_cmd(
    device: Optional[str] = typer.Option(None, "--device", help="only this device arch"),
    rollback_on_fail: bool = typer.Option(False, "--rollback-on-fail"),
    by: str = typer.Option("kscout revalidate", "--by", help="actor recorded on flags and rollbacks"),
    store_dir: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Re-run correctness and timing of deployed kernels here; exit 1 when one failed or regressed."""
    from agent.lifecycle.revalidate import revalidate

    with _open(store_dir) as store:
        outcomes = revalidate(store, arch=device, rollback_on_fail=rollback_on_fail, by=by)
    bad = [o for o in outcomes if o.verdict in ("failed", "regressed")]
    if as_json:
        _print_json({"revalidations": [o.model_dump(mode="json") for o in outcomes], "flagged": len(bad)})
    else:
        if not outcomes:
            _console().print(none_line("deployed kernels to revalidate"), highlight=False)
        else:
            table = term_table("op", "arch", "candidate", "verdict", "reason", "rolled back to", title="revalidation")
            for o in outcomes:
                to = (short(o.rolled_back_to) if o.rolled_back_to else "reference") if o.rolled_back else "-"
                table.add_row(o.op, o.arch, short(o.candidate_id), o.verdict, o.reason, to)
            _console().print(table)
    if bad:
        raise typer.Exit(1)  # so a nightly job fails when a deployed kernel did


def export_cmd(
    out_dir: Path = typer.Argument(..., help="folder to write the package into"),
    name: str = typer.Option("kscout_kernels", "--name", help="Python package name"),
    force: bool = typer.Option(False, "--force", help="replace an existing package of that name"),
    store_dir: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write an importable package of the deployed kernels, with a manifest of their evidence."""
    from agent.lifecycle.export import export_package

    with _open(store_dir) as store:
        manifest = export_package(store, out_dir, name=name, force=force)
    if as_json:
        _print_json(manifest)
        return
    ops = ", ".join(f"{op} ({', '.join(s['kernels'])})" for op, s in manifest["ops"].items())
    _console().print(f"wrote {out_dir / name}: {ops}")


def report_cmd(
    run: str = typer.Argument(..., metavar="RUN", help="run id (or a unique prefix)"),
    html: Optional[Path] = typer.Option(None, "--html", help="write a self-contained HTML page here"),
    no_hybrid: bool = NoHybridOpt,
    store_dir: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Summarize a run: tables here, or a self-contained HTML page with --html."""
    from agent.model.keep import stored_report
    from agent.search.summary import summarize

    with _open(store_dir) as store:
        summary = summarize(store, run, no_hybrid=no_hybrid)
        k = summary.in_hand
        source = store.get_candidate(k.candidate_id, run_id=summary.run_id).source if k else None
        model = stored_report(store.get_run(summary.run_id))  # a run of `kscout optimize-model`
    if html is not None:
        from agent.search.report import render_html

        section = None
        if model is not None:
            from agent.model.page import section as model_section

            section = model_section(model)
        html.write_text(render_html(summary, source, section))
    if as_json:
        extra = {"model_report": model.model_dump(mode="json")} if model else {}
        _print_json({**summary.model_dump(mode="json"), **extra, "html": str(html) if html else None})
        return
    if html is not None:
        _console().print(f"wrote {html}", markup=False, highlight=False, soft_wrap=True)
        return
    from agent.search.views import render_report

    render_report(_console(), summary)
    if model is not None:
        from agent.model.cli import render

        render(model)


def register(app: typer.Typer) -> None:
    app.command("promote")(promote_cmd)
    app.command("deployed")(deployed_cmd)
    app.command("rollback")(rollback_cmd)
    app.command("history")(history_cmd)
    app.command("revalidate")(revalidate_cmd)
    app.command("export")(export_cmd)
    app.command("report")(report_cmd)
