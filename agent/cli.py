"""The `kscout` console script: gathers the commands each package offers and maps outcomes to exit codes.

Each package exposes `register(app)` in its own `cli.py`; this module only composes them and turns what
escapes a command into one line on stderr and an exit code. No logic lives here.

Exit codes, the same for every command:
  0  the command did what was asked (optimize/resume: a passing kernel was found)
  1  it ran, and the answer is "no": a run without a passing kernel, a candidate that failed `eval`,
     an ingest with failed files, a deployed kernel that failed `revalidate`
  2  bad input or configuration (a `KscoutError`): one line on stderr, never a traceback
  3  interrupted (Ctrl-C or SIGTERM); a search run is marked and `kscout resume RUN` continues it
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

from agent.search.interrupts import EXIT_INTERRUPTED, RunInterrupted  # noqa: E402
from evaluation.errors import KscoutError  # noqa: E402

EXIT_OK, EXIT_NO, EXIT_BAD_INPUT = 0, 1, 2
_TYPER_INTERRUPTED = 130  # what typer returns for a KeyboardInterrupt; no kscout command returns it

EXIT_CODES_HELP = (
    "Exit codes: 0 done (optimize: a passing kernel was found); 1 the answer is no (no passing kernel, "
    "a failed candidate, an ingest with failed files, a failed revalidation); 2 bad input or configuration; "
    "3 interrupted (resume with `kscout resume RUN`)."
)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="kscout",
        help="kernelscout: find fast, correct Triton kernels by measured search.",
        epilog=EXIT_CODES_HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # plain click help: flags read as flags (no "<bool>"), and it fits 80 columns
    )
    import importlib

    for module in ("evaluation.cli", "knowledge.cli", "agent.search.cli", "agent.lifecycle.cli", "agent.model.cli"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a package whose CLI is not written yet
            if exc.name != module:
                raise
            continue
        mod.register(app)
    return app


def _fail(message: str, code: int) -> None:
    print(message, file=sys.stderr)
    sys.exit(code)


# Warnings kscout itself issues that the CLI prints as one line of its own (not Python's "file:line:
# Category: text" and the source line under it, which reads like a crash). By class name, so that
# nothing is imported for them.
ONE_LINE_WARNINGS = frozenset({"UnsandboxedWarning"})


def _show_warning(default):
    def show(message, category, filename, lineno, file=None, line=None):
        if category.__name__ not in ONE_LINE_WARNINGS:
            return default(message, category, filename, lineno, file, line)
        print(f"kscout: warning: {' '.join(str(message).split())}", file=file or sys.stderr, flush=True)

    return show


def main(argv: list[str] | None = None) -> None:
    import warnings

    from evaluation.stacks import start_from_env

    start_from_env()  # KSCOUT_STACKS=FILE: where this process's threads spent their wall time

    previous = warnings.showwarning
    warnings.showwarning = _show_warning(previous)
    try:
        _main(argv)
    finally:
        warnings.showwarning = previous


def _main(argv: list[str] | None) -> None:
    app = build_app()
    try:
        rc = app(args=argv, prog_name="kscout", standalone_mode=False)
        if rc == _TYPER_INTERRUPTED:  # typer turns a KeyboardInterrupt outside a session into Exit(130)
            _fail("kscout: interrupted", EXIT_INTERRUPTED)
        if isinstance(rc, int) and rc:  # `raise typer.Exit(n)` is returned, not raised, here
            sys.exit(rc)
    except RunInterrupted as exc:
        hint = exc.hint()
        _fail(f"kscout: {exc}" + (f"\n{hint}" if hint else ""), EXIT_INTERRUPTED)
    except KscoutError as exc:
        _fail(f"kscout: error: {exc}", exc.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:  # outside a search session (eval, ingest, ...): nothing to mark
        _fail("kscout: interrupted", EXIT_INTERRUPTED)
    except Exception as exc:  # click usage errors carry their own exit codes
        import click

        try:  # typer vendors its own click: its usage errors are not click's classes
            from typer._click.exceptions import ClickException as _TyperClickException
        except ImportError:  # pragma: no cover - older typer uses click itself
            _TyperClickException = click.exceptions.ClickException
        if isinstance(exc, (click.exceptions.ClickException, _TyperClickException)):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort) or type(exc).__name__ == "Abort":  # EOF at a prompt
            _fail("kscout: aborted", EXIT_INTERRUPTED)
        raise


def console() -> None:
    """The `kscout` console script: `main`, then an exit without the interpreter's teardown.

    Tearing down an interpreter that loaded torch and Triton frees every module one by one: 0.8-1 s on
    this 2-core machine, more on a GPU machine with a CUDA context, after the command has printed its
    answer. What a normal exit does that matters is done here, in its order: the command's other
    (non-daemon) threads finish, idle thread pools included, the atexit handlers run (the warm pools end their workers, scratch
    folders go, logging flushes), the standard streams are flushed. In-process callers (tests) call
    `main`, which returns and raises as before."""
    import atexit
    import threading

    try:
        main()
        code: int = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:  # sys.exit("message"): printed, exit 1, as Python does
            print(exc.code, file=sys.stderr)
            code = 1
    # What the interpreter does first at exit: threading's own exit hooks (an idle ThreadPoolExecutor's
    # workers are told to end: joined without them, they wait on their queue for ever), then every
    # non-daemon thread joined. Private, as atexit's is; the join alone is the fallback.
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    else:  # pragma: no cover - every CPython kscout supports has it
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`kscout ... | head`): nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":
    console()
