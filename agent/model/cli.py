"""`kscout optimize-model MODEL.py`: a thin command over agent.model.flow.

Exit codes: 0 the assembled model passed its end-to-end judge; 1 it did not; 2 bad input (a missing
or malformed model file, a forward that does not trace); 3 interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agent.term import console, print_json


def register(app: typer.Typer) -> None:
    app.command("optimize-model")(optimize_model)


def optimize_model(
    model: Path = typer.Argument(..., metavar="MODEL.py", help="a KernelBench-format file: Model, get_inputs"),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
    budget: int = typer.Option(8, help="evaluations for the whole model, split by the regions' time shares"),
    min_share: float = typer.Option(0.05, help="search only regions with at least this share of the time"),
    minutes: Optional[float] = typer.Option(None, help="wall-clock budget of all region searches"),
    stall: Optional[int] = typer.Option(30, help="stop a region's search after this many without improvement"),
    trials: int = typer.Option(1, help="correctness trials per shape"),
    tolerance: str = typer.Option("kernelbench", help="the end-to-end judge: kernelbench (1e-2) | strict"),
    no_hybrid: bool = typer.Option(
        False, "--no-hybrid", help="regions never take a kernel with PyTorch compute beside its Triton kernels"
    ),
    max_autotune: bool = typer.Option(
        False,
        "--max-autotune",
        help="also time max-autotune of the whole model in the final re-measure (a GPU; minutes of autotuning)",
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="folder for region problems and the assembled model"),
    store: Optional[Path] = typer.Option(None, "--store", help="store folder (default $KSCOUT_HOME)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (one line) instead of text"),
):
    """Profile MODEL, cut it into regions, search the hot ones, assemble one ModelNew and judge it.

    Exit codes: 0 the assembled model passed end to end, 1 it did not, 2 bad input, 3 interrupted.
    """
    from agent.model.flow import optimize_model as run
    from evaluation import resolve_device
    from evaluation.errors import ProblemError
    from store import Store

    if not model.is_file():
        raise ProblemError(f"model file not found: {model}")
    if tolerance not in ("kernelbench", "strict"):
        raise ProblemError(f"--tolerance must be kernelbench or strict (got {tolerance!r})")
    if budget < 1 or not 0.0 <= min_share < 1.0:
        raise ProblemError("--budget must be at least 1 and --min-share in [0, 1)")
    dev = resolve_device(device)
    work = out or Path("kscout-model") / model.stem
    with Store.open(home=store) as st:
        report = run(
            str(model.resolve()),
            st,
            work=work.resolve(),
            device=dev,
            budget=budget,
            min_share=min_share,
            stall=stall,
            minutes=minutes,
            tolerance=tolerance,
            trials=trials,
            no_hybrid=no_hybrid,
            autotune=max_autotune,
        )
    if as_json:
        print_json({**report.model_dump(mode="json"), "vs_user_choice": report.vs_user_choice})
    else:
        render(report)
    if not report.passed:
        raise SystemExit(1)


def render(report) -> None:
    from agent.term import table

    con = console()
    t = table(
        "region", "kind", "ops", "share before", "state", "kernel / schedule", "judged", "x region", title=report.model
    )
    for r in report.regions:
        kernel = f"{r.kernel[:12]} {r.schedule or ''}".strip() if r.kernel else "reference ops"
        speed = f"{r.speedup:.3g}x" if r.speedup is not None else "not measured" if r.kernel else "-"
        speed += f" vs {r.library}" if r.library and r.speedup is not None else ""
        state = r.state + (f" (with {r.same_as})" if r.same_as else "")
        state += f": {r.reason}" if r.reason else ""
        t.add_row(
            r.name, r.kind, ", ".join(dict.fromkeys(r.ops)), f"{r.share:.1%}", state, kernel, r.judged or "-", speed
        )
    con.print(t)
    if report.speedup is None:
        note = report.timing_note or ""
        speed = f"speed {note}" if note.startswith("not measured") else "speed not measured on this device"
        speed += f" ({note})" if note and not note.startswith("not measured") else ""
    else:
        interval = f" [{report.speedup_low:.3g}, {report.speedup_high:.3g}]" if report.speedup_low else ""
        compiled = f", {report.compile_speedup:.3g}x vs torch.compile" if report.compile_speedup else ""
        compiled += f", {report.autotune_speedup:.3g}x vs max-autotune" if report.autotune_speedup else ""
        how = "interleaved re-measure" if report.speedup_source == "remeasure" else "the judge's timing"
        speed = f"{report.speedup:.3g}x vs eager{interval}{compiled} ({how})"
        speed += f"; {report.vs_user_choice:.3g}x vs the faster of the two" if report.compile_speedup else ""
    msg = f" ({report.verdict_message})" if report.verdict_message else ""
    con.print(
        f"model: {report.verdict} end to end under {report.model_tolerance}{msg}; {speed}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    if report.assembled_path:
        con.print(f"assembled: {report.assembled_path}", highlight=False, markup=False, soft_wrap=True)
    if report.report_path:
        con.print(f"report: {report.report_path}", highlight=False, markup=False, soft_wrap=True)
    if report.candidate_id:
        con.print(
            f"stored: run {report.run_id}, candidate {report.candidate_id[:12]}"
            + (
                f"; promote it as one: kscout promote {report.candidate_id[:12]} --approved-by NAME"
                if report.passed
                else ""
            ),
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    con.print(f"tolerance policy: {report.tolerance_policy}", highlight=False, markup=False, soft_wrap=True)
