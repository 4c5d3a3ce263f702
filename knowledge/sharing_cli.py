"""`kscout knowledge export`, `import`, `keys`, `trust`, `untrust` (see knowledge/sharing.py)."""

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

    from store.signing import parse_public_key

    rows = ", ".join(f"{t.rows} {name}" for name, t in manifest.tables.items())
    key_id = parse_public_key(manifest.signed_by).key_id
    Console().print(f"bundle {manifest.bundle_id} written to {out}, signed by this store's key {key_id}: {rows}")


def import_cmd(
    bundles: Annotated[list[Path], typer.Argument(help="Bundle folders written by `kscout knowledge export`.")],
    trust: Annotated[
        bool, typer.Option("--trust", help="Trust the key that signed each bundle, for this and later imports.")
    ] = False,
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Merge signed bundles into this store: importing twice adds nothing, a conflicting row is kept beside ours.

    Refused, with nothing written: a bundle whose signature, file hashes or row counts do not hold, and
    one signed by a key this store does not trust (see `kscout knowledge trust`)."""
    from knowledge.cli import _open_store
    from knowledge.sharing import import_bundle

    reports = []
    with _open_store(store_dir) as store:
        for b in bundles:
            report = import_bundle(store, b, trust=trust)
            reports.append(report)
            if not as_json:
                _print_import(report)
    if as_json:
        sys.stdout.write(json.dumps({"imports": [r.model_dump(mode="json") for r in reports]}) + "\n")


def _print_import(r) -> None:
    from rich.console import Console
    from rich.markup import escape

    parts = "; ".join(
        f"{name}: {c.added} added, {c.unchanged} already here, {c.conflicts} kept beside ours"
        for name, c in r.tables.items()
    )
    trusted = ", trusted now" if r.trusted_now else ""
    Console().print(escape(f"{r.bundle}: from {r.source_label}, signed by key {r.key_id}{trusted}; {parts}"))


def keys_cmd(store_dir: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Print this store's public key (for another team to trust) and the keys this store trusts."""
    from knowledge.cli import _open_store
    from knowledge.sharing import store_keys

    with _open_store(store_dir) as store:
        report = store_keys(store)
    if as_json:
        sys.stdout.write(json.dumps(report.model_dump(mode="json")) + "\n")
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    console.print(escape(f"this store's key {report.own_key_id}: {report.own_public_key}"))
    console.print("[dim]another team trusts it with: kscout knowledge trust <that key>[/]")
    if not report.trusted:
        console.print("[dim]no other keys trusted[/]")
    for t in report.trusted:
        label = f" ({t.label})" if t.label else ""
        console.print(escape(f"trusted {t.key_id}{label}: {t.public_key}, since {t.trusted_at[:19]} by {t.how}"))


def trust_cmd(
    key: Annotated[str, typer.Argument(help="A public key as `kscout knowledge keys` prints it, or a bundle folder.")],
    label: Annotated[Optional[str], typer.Option("--label", help="Whose key it is (default: a bundle's team).")] = None,
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Trust a key: bundles it signed are imported from now on. Compare its id with its owner's first."""
    from knowledge.cli import _open_store
    from knowledge.sharing import trust_key

    with _open_store(store_dir) as store:
        result = trust_key(store, key, label=label)
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json")) + "\n")
        return
    from rich.console import Console
    from rich.markup import escape

    who = f" ({result.label})" if result.label else ""
    text = {
        "trusted": "trusted",
        "already trusted": "already trusted",
        "own key": "is this store's own key, always trusted",
    }
    Console().print(escape(f"key {result.key_id}{who} {text[result.status]}"))


def untrust_cmd(
    key_id: Annotated[str, typer.Argument(help="The id (or a unique prefix) of a trusted key.")],
    store_dir: StoreOpt = None,
) -> None:
    """Stop trusting a key: bundles it signs are refused again (rows imported before stay, with their origin)."""
    from knowledge.cli import _open_store
    from knowledge.sharing import untrust_key

    with _open_store(store_dir) as store:
        gone = untrust_key(store, key_id)
    from rich.console import Console

    for t in gone:
        Console().print(f"key {t.key_id} no longer trusted")


def knowledge_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    app.command("export")(export_cmd)
    app.command("import")(import_cmd)
    app.command("keys")(keys_cmd)
    app.command("trust")(trust_cmd)
    app.command("untrust")(untrust_cmd)
    return app
