"""`kscout knowledge export OUT` and `kscout knowledge import BUNDLE...` (see knowledge/sharing.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

StoreOpt = Annotated[Optional[Path], typer.Option("--store", help="Store folder (default: $KSCOUT_HOME).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]


def export_cmd(
    out: Annotated[Path, typer.Argument(help="A new folder to write the bundle into.")],
    team: Annotated[Optional[str], typer.Option("--team", help="Who measured this (default: $KSCOUT_TEAM).")] = None,
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write this store's documents, outcomes and failure patterns as a versioned bundle (Parquet + manifest)."""
    from knowledge.cli import _open_store
    from knowledge.sharing import export_bundle

    with _open_store(store_dir) as store:
        manifest = export_bundle(store, out, team=team)
    if as_json:
        sys.stdout.write(json.dumps(manifest.model_dump(mode="json")) + "\n")
        return
    from rich.console import Console

    rows = ", ".join(f"{t.rows} {name}" for name, t in manifest.tables.items())
    Console().print(f"bundle {manifest.bundle_id} written to {out}: {rows}")


def import_cmd(
    bundles: Annotated[list[Path], typer.Argument(help="Bundle folders written by `kscout knowledge export`.")],
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Merge bundles into this store: importing twice adds nothing, a conflicting row is kept beside ours."""
    from knowledge.cli import _open_store
    from knowledge.sharing import import_bundle

    with _open_store(store_dir) as store:
        reports = [import_bundle(store, b) for b in bundles]
    if as_json:
        sys.stdout.write(json.dumps({"imports": [r.model_dump(mode="json") for r in reports]}) + "\n")
        return
    from rich.console import Console

    console = Console()
    for r in reports:
        parts = ", ".join(
            f"{name}: {c.added} added, {c.unchanged} already here, {c.conflicts} kept beside ours"
            for name, c in r.tables.items()
        )
        console.print(f"{r.bundle}: from {r.source_label}; {parts}")


def knowledge_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    app.command("export")(export_cmd)
    app.command("import")(import_cmd)
    return app
