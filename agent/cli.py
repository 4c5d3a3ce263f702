"""The `kscout` console script: gathers the commands each package offers and renders errors.

Each package exposes `register(app)` in its own `cli.py`; this module only composes them and turns a
`KscoutError` into one line on stderr with exit code 2. No logic lives here.
"""

from __future__ import annotations

import os
import sys

# Offline by default: litellm must not fetch its cost map, the embedding model must not touch the hub.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import typer  # noqa: E402

from evaluation.errors import KscoutError  # noqa: E402


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="kscout",
        help="kernelscout: find fast, correct Triton kernels by measured search.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    import importlib

    for module in ("evaluation.cli", "knowledge.cli", "agent.search.cli", "agent.lifecycle.cli"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a package whose CLI is not written yet
            if exc.name != module:
                raise
            continue
        mod.register(app)
    return app


def main(argv: list[str] | None = None) -> None:
    app = build_app()
    try:
        rc = app(args=argv, prog_name="kscout", standalone_mode=False)
        if isinstance(rc, int) and rc:  # `raise typer.Exit(n)` is returned, not raised, here
            sys.exit(rc)
    except KscoutError as exc:
        print(f"kscout: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    except Exception as exc:  # click usage errors carry their own exit codes
        import click

        try:  # typer vendors its own click: its usage errors are not click's classes
            from typer._click.exceptions import ClickException as _TyperClickException
        except ImportError:  # pragma: no cover - older typer uses click itself
            _TyperClickException = click.exceptions.ClickException
        if isinstance(exc, (click.exceptions.ClickException, _TyperClickException)):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            print("Aborted.", file=sys.stderr)
            sys.exit(130)
        raise


if __name__ == "__main__":
    main()
