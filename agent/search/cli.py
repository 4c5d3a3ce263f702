"""`kscout optimize`, `resume`, `runs`, `show`: thin commands over agent.search.session.

Progress goes to stderr (a live bar on a terminal, one plain line per event otherwise, which is what a
log or a supervising process reads); stdout carries the result, and with `--json` exactly one object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.tree import Tree as RichTree

from agent.search.session import RunSummary, SessionConfig, SessionEvent

_STATUS_STYLE = {"passed": "green", None: "dim"}


def _open_store(store_dir: Optional[Path]):
    from store import Store

    return Store.open(home=store_dir)


class _ProgressView:
    """Turns session events into a live bar (terminal) or plain stderr lines (pipes, logs, tests)."""

    def __init__(self, console: Console):
        self.console = console
        self.live = console.is_terminal
        self._progress = None
        self._task = None

    def __enter__(self):
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=self.console, transient=True)
            self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def __call__(self, e: SessionEvent) -> None:
        best = f"{e.best_speedup:.3g}x" if e.best_speedup is not None else "not measured"
        fails = ", ".join(f"{k} {v}" for k, v in sorted(e.failures_by_kind.items())) or "none"
        if self._progress is not None:
            if self._task is None:
                self._task = self._progress.add_task("", total=e.budget)
            self._progress.update(self._task, completed=e.evaluations,
                                  description=f"best {best} | failures: {fails}")
            if e.kind in ("evaluated", "proposal_error", "remeasured", "finished"):
                self._progress.console.print(f"[{e.evaluations}/{e.budget}] {e.message}", markup=False,
                                             highlight=False)
            return
        self.console.print(f"[{e.kind} {e.evaluations}/{e.budget}] {e.message} | best {best} | failures: {fails}",
                           markup=False, highlight=False, soft_wrap=True)


def render_tree(summary: RunSummary) -> RichTree:
    ids = {n.candidate_id for n in summary.nodes}
    root = RichTree(f"run {summary.run_id}: {summary.problem_name} on {summary.device_name} ({summary.arch})")
    branches = {}
    for n in summary.nodes:
        status = n.status or "pending"
        style = _STATUS_STYLE.get(n.status, "red")
        speed = f" {n.speedup:.3g}x" if n.speedup is not None else ""
        star = " [bold yellow]* best[/]" if n.candidate_id == summary.best.candidate_id else ""
        tags = f" [dim]{'+'.join(n.tags)}[/]" if n.tags else ""
        reused = " [dim](reused)[/]" if n.reused else ""
        label = f"{n.candidate_id[:12]} [cyan]{n.action or '-'}[/] [{style}]{status}[/]{speed}{tags}{reused}{star}"
        parent = branches.get(n.parent_id) if n.parent_id in ids else None
        branches[n.candidate_id] = (parent or root).add(label)
    return root


def render_summary(console: Console, summary: RunSummary) -> None:
    console.print(render_tree(summary))
    table = Table(show_header=False, box=None)
    b = summary.best
    best = "none" if b.candidate_id is None else f"{b.candidate_id[:12]} ({b.status})"
    if b.speedup is not None:
        best += f" {b.speedup:.3g}x [{b.speedup_low:.3g}, {b.speedup_high:.3g}] vs eager"
    rule = summary.stop_rule
    for key, value in (
        ("stop reason", summary.stop_reason or summary.status),
        ("evaluations", f"{summary.evaluations} of {rule.max_evaluations}"
                        + (f" (+{summary.evaluations_reused} reused)" if summary.evaluations_reused else "")),
        ("failures", ", ".join(f"{k} {v}" for k, v in sorted(summary.failures_by_kind.items())) or "none"),
        ("best", best),
        ("cost", f"${summary.cost_usd:.4f}" if summary.proposer == "llm" else "-"),
        ("note", summary.note),
    ):
        table.add_row(f"[bold]{key}[/]", value)
    console.print(table)


def _finish(store, run_id: str, as_json: bool) -> None:
    from agent.search.session import summarize

    summary = summarize(store, run_id)
    if as_json:
        sys.stdout.write(json.dumps(summary.model_dump(mode="json")) + "\n")
    else:
        render_summary(Console(), summary)


def register(app: typer.Typer) -> None:
    @app.command()
    def optimize(
        problem: str = typer.Argument(..., help="built-in problem name or a KernelBench-style file"),
        device: str = typer.Option("auto", help="auto | cpu | cuda"),
        proposer: str = typer.Option("template", help="template (offline) | llm"),
        model: Optional[str] = typer.Option(None, help="litellm model string, e.g. openai/NAME"),
        api_base: Optional[str] = typer.Option(None, help="OpenAI-compatible server URL (vLLM)"),
        budget: int = typer.Option(20, help="evaluations"),
        minutes: Optional[float] = typer.Option(None, help="time budget"),
        target_speedup: Optional[float] = typer.Option(None, help="stop at this measured, significant speedup"),
        stall: Optional[int] = typer.Option(30, help="stop after this many evaluations without improvement"),
        seed: int = typer.Option(0, help="random seed of the proposer"),
        max_cost: Optional[float] = typer.Option(None, help="stop when LLM spend reaches this many USD"),
        batch: int = typer.Option(1, help="candidates per step: checked in parallel, then timed together in one process"),
        workers: int = typer.Option(1, help="correctness checks in parallel (timings never overlap anything)"),
        compile_every: bool = typer.Option(False, "--compile-every", help="time torch.compile with every batch, not "
                                                                           "only with the seed and the final re-measure"),
        trials: int = typer.Option(2, help="correctness trials per shape"),
        time_case: Optional[List[str]] = typer.Option(
            None, "--time-case", help="time only this case id, e.g. 'M=4096,N=4096|bfloat16' (repeatable)"),
        dtype: Optional[List[str]] = typer.Option(
            None, "--dtype", help="prove and time only this declared dtype, e.g. bfloat16 (repeatable; default all)"),
        tolerance: str = typer.Option("strict", help="strict (default) | kernelbench (atol = rtol = 1e-2)"),
        store: Optional[Path] = typer.Option(None, help="store folder (default $KSCOUT_HOME)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    ):
        """Search for a fast, correct Triton kernel for PROBLEM."""
        from agent.search.session import SessionError, start

        if proposer not in ("template", "llm"):
            raise SessionError(f"--proposer must be template or llm (got {proposer!r})")
        if tolerance not in ("strict", "kernelbench"):
            raise SessionError(f"--tolerance must be strict or kernelbench (got {tolerance!r})")
        config = SessionConfig(problem=problem, device=device, proposer=proposer, model=model, api_base=api_base,
                               budget=budget, minutes=minutes, target_speedup=target_speedup, stall=stall,
                               seed=seed, max_cost_usd=max_cost, batch=batch, workers=workers, compile_every=compile_every,
                               trials=trials, time_cases=tuple(time_case or ()), dtypes=tuple(dtype or ()),
                               tolerance=tolerance).check()
        err = Console(stderr=True)
        with _open_store(store) as st, _ProgressView(err) as view:
            run_id = start(config, st, on_event=view)
        with _open_store(store) as st:
            _finish(st, run_id, as_json)

    @app.command()
    def resume(
        run: str = typer.Argument(..., help="run id (or a unique prefix)"),
        store: Optional[Path] = typer.Option(None, help="store folder (default $KSCOUT_HOME)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    ):
        """Continue a run that crashed or was killed, without re-evaluating finished candidates."""
        from agent.search.session import resume as resume_run

        err = Console(stderr=True)
        with _open_store(store) as st, _ProgressView(err) as view:
            run_id = resume_run(run, st, on_event=view)
        with _open_store(store) as st:
            _finish(st, run_id, as_json)

    @app.command()
    def runs(
        limit: int = typer.Option(20, help="newest first"),
        store: Optional[Path] = typer.Option(None, help="store folder (default $KSCOUT_HOME)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    ):
        """List search runs."""
        with _open_store(store) as st:
            found = st.list_runs(limit=limit)
        if as_json:
            sys.stdout.write(json.dumps({"runs": [r.model_dump(mode="json") for r in found]}) + "\n")
            return
        table = Table()
        table.add_column("run", no_wrap=True)
        for name in ("problem", "device", "proposer", "status", "stop reason", "started"):
            table.add_column(name)
        for r in found:
            table.add_row(r.run_id, r.problem_name, r.arch, r.proposer + (f" ({r.model})" if r.model else ""),
                          r.status.value, r.stop_reason or "-", r.started_at[:16].replace("T", " "))
        Console().print(table)

    @app.command()
    def show(
        run: str = typer.Argument(..., help="run id (or a unique prefix)"),
        store: Optional[Path] = typer.Option(None, help="store folder (default $KSCOUT_HOME)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    ):
        """The search tree of a run, its best candidate and why it stopped."""
        with _open_store(store) as st:
            _finish(st, run, as_json)
