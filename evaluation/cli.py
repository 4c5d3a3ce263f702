"""`kscout eval` and `kscout problems`: parse, call one library function, render.

Exit codes: 0 passed, 1 the candidate failed, 2 bad input (raised as KscoutError; agent/cli.py prints
the one line), 3 not judged (the CPU's interpreter ran out of time while every judged output was right). `--json` prints exactly one JSON object on stdout.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import List, Optional

import typer

from evaluation.errors import CandidateError, KscoutError, ProblemError
from evaluation.problem_file import SLOT
from evaluation.records import Status


def parse_sets(pairs: list[str] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or SLOT.match(name.strip()) is None:  # NAME, or NAME[i] for an item of a tuple constant
            raise ProblemError(f"malformed --set {pair!r}; expected NAME=INTEGER, e.g. --set dim=4099")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise ProblemError(f"malformed --set {pair!r}: {value!r} is not an integer") from None
    return out


def read_candidate(path: Path) -> str:
    from evaluation.static_check import check_source

    try:
        source = path.read_text()
    except OSError as exc:
        raise CandidateError(f"cannot read candidate {path}: {exc.strerror}") from None
    report = check_source(source)
    if report.syntax_error is None and not report.has_model_new:
        raise CandidateError(f"candidate {path} defines no ModelNew (KernelBench contract: class ModelNew(nn.Module))")
    return source


def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def make_console():
    """A terminal gets its own width; a pipe or file gets $COLUMNS, else 80 (rich's rule), like every
    kscout command: the tables below are laid out to read at 80 columns."""
    from rich.console import Console

    return Console(highlight=False)


def _table(*columns: str, title: str):
    from rich import box
    from rich.table import Table

    table = Table(
        title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True, title_justify="left"
    )
    for col in columns:  # a cell too long for its column is cut with "…", never folded mid-word
        table.add_column(col, overflow="ellipsis")
    return table


def render_result(result) -> None:
    console = make_console()
    timed = {t.case_id: t for t in result.timing}
    cols = ["case", "ok", "max abs err", "max rel err"]
    if timed:
        cols += ["p50 ms", "spread %", "GB/s", "x eager", "x compile"]
    table = _table(*cols, title=f"{result.problem_name} on {result.fingerprint.device_name}")
    for r in result.shape_results:
        row = [r.case_id, "yes" if r.passed else "[red]NO[/red]", _fmt(r.max_abs_error), _fmt(r.max_rel_error)]
        if timed:
            t = timed.get(r.case_id)
            ratio = {s.baseline: s for s in t.speedups} if t else {}
            c = t.candidate if t else None
            row += [
                _fmt(c.latency_ms_p50, ".4g") if c else "",
                _fmt(100.0 * (c.latency_ms_p80 - c.latency_ms_p20) / c.latency_ms_p50, ".1f") if c else "",
                _fmt(t.achieved_gbps, ".0f") if t else "",
                *(
                    f"{ratio[b].ratio:.2f}{'' if ratio[b].significant else '?'}" if b in ratio else "-"
                    for b in ("eager", "torch_compile")
                ),
            ]
        table.add_row(*row)
    console.print(table)
    status = result.status.value
    where = f" at {result.failed_stage.value}" if result.failed_stage else ""
    line = f"status: {status}{where}"
    if result.error_class:
        line += f" ({result.error_class})"
    if result.message:
        line += f": {result.message}"
    console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.isolation != "bwrap":
        console.print("isolation: none (the candidate ran without an OS sandbox)", markup=False, highlight=False)
    for r in result.shape_results:
        if not r.passed and r.message:
            console.print(f"  {r.case_id}: {r.message}", markup=False, highlight=False, soft_wrap=True)
    if timed:
        console.print(
            "spread: (p80 - p20) / p50; speedups marked ? are not significant: their p20-p80 interval includes 1.0",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if result.timing_note:
        console.print(f"timing: {result.timing_note}", markup=False, highlight=False, soft_wrap=True)
    judged = f"judged under the {result.tolerance_policy} tolerance policy"
    if result.emulated_device:
        judged += f", on the CPU emulating {result.emulated_device}"
    console.print(judged, markup=False, highlight=False, soft_wrap=True)
    for approximation in result.approximations:
        console.print(f"approximation: {approximation}", markup=False, highlight=False, soft_wrap=True)
    if result.stderr_tail and not result.passed:
        console.print("stderr (tail):\n" + result.stderr_tail[-1500:], markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_cmd(
        candidate: Path = typer.Argument(..., help="Python file defining ModelNew"),
        problem: str = typer.Option(..., "--problem", "-p", help="built-in name or KernelBench-style file"),
        device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
        sets: Optional[List[str]] = typer.Option(None, "--set", help="pin a size constant: NAME=VALUE"),
        timeout: float = typer.Option(120.0, "--timeout", help="wall-clock limit per worker, seconds"),
        trials: int = typer.Option(3, "--trials", min=1, help="fresh random inputs per case"),
        time_cases: Optional[List[str]] = typer.Option(
            None, "--time-case", help="time only this case id, e.g. 'M=4096,N=4096|bfloat16' (repeatable)"
        ),
        dtypes: Optional[List[str]] = typer.Option(
            None, "--dtype", help="judge only this declared dtype, e.g. bfloat16 (repeatable; default all)"
        ),
        tolerance: str = typer.Option(
            "strict", "--tolerance", help="strict (default: 1e-4 in float32) | kernelbench (atol = rtol = 1e-2)"
        ),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object (one line)"),
        sandbox: str = typer.Option(
            "auto", "--sandbox", help="auto | required | off: run the candidate in an OS sandbox (bubblewrap)"
        ),
        phases_file: Optional[Path] = typer.Option(
            None,
            "--phases",
            help="write where the time went here: one JSON row per process (its stamps and phase seconds, "
            "the parent's reference and judging seconds)",
        ),
    ) -> None:
        """Evaluate a candidate kernel: static check, compile, correctness on every case, timing.

        Exit codes: 0 the candidate passed, 1 it failed (a verdict, not an error), 2 bad input, 3 not
        judged (on the CPU, the interpreter ran out of --timeout while every judged output was right).
        """
        command_started = time.time()
        overrides = parse_sets(sets)
        source = read_candidate(candidate)
        if phases_file is not None and not phases_file.parent.is_dir():  # said before minutes of evaluation
            raise KscoutError(f"--phases: no folder {phases_file.parent} to write {phases_file.name} in")
        from evaluation.pool import prestart

        # on `--device cuda`: the check's, the timing's and the baselines' workers warm up now, and no more
        prestart(device, sandbox, 2, only=True)
        from evaluation.approximations import annotate
        from evaluation.fingerprint import resolve_device
        from evaluation.harness import evaluate
        from evaluation.problem import load_problem

        dev = resolve_device(device)
        info = load_problem(problem, dev, overrides, timed=time_cases, dtypes=dtypes or None, tolerance=tolerance)
        from evaluation import phases

        with phases.recording() as rows:
            evaluate_started = time.time()
            result = evaluate(source, info, device=dev, timeout_s=timeout, trials=trials, sandbox=sandbox)
        # the command's own row: its set-up before evaluate, and when it was done (its exit follows)
        rows.append(dict(role="command", started_at=command_started, evaluate_at=evaluate_started, done_at=time.time()))
        if phases_file is not None:
            try:
                phases_file.write_text(json.dumps(rows, indent=1))
            except OSError as exc:
                raise KscoutError(f"cannot write the phase rows to {phases_file}: {exc}") from exc
        result = annotate(result, source, info)  # the policy that judged it, approximations (idempotent)
        if as_json:
            typer.echo(result.model_dump_json())
        else:
            render_result(result)
        if result.status is Status.not_judged:
            raise SystemExit(3)
        if not result.passed:
            raise SystemExit(1)

    @app.command("problems")
    def problems_cmd(
        device: str = typer.Option("cpu", "--device", help="which shape set to list: cpu | cuda"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object (one line)"),
    ) -> None:
        """List the built-in problems."""
        from evaluation.problem import list_problems

        if device not in ("cpu", "cuda"):
            raise ProblemError(f"--device must be cpu or cuda for a shape set, not {device!r}")
        problems = list_problems(device)
        if as_json:
            typer.echo(
                json.dumps(
                    {"device": device, "problems": [p.model_dump(mode="json") for p in problems]}, separators=(",", ":")
                )
            )
            return
        table = _table("name", "family", "dtypes", "cases", "seed", title=f"built-in problems ({device} shape sets)")
        for p in problems:
            table.add_row(
                p.name, p.op_family, ", ".join(p.dtypes), str(len(p.shape_cases)), "yes" if p.seed_path else "no"
            )
        make_console().print(table)
