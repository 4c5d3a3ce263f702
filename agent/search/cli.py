"""`kscout optimize`, `resume`, `runs`, `show`: thin commands over agent.search.session and .summary.

Progress goes to stderr (a live bar on a terminal, one plain line per event otherwise, which is what a
log or a supervising process reads); stdout carries the result, and with `--json` exactly one object.

The end of a run (optimize and resume): the summary, the best kernel written to a file whose path is
printed, and an exit code a script can trust: 0 a passing kernel was found, 1 none was, 2 bad input,
3 interrupted (Ctrl-C or SIGTERM; the run is marked and `kscout resume RUN` continues it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from agent.search.session import SessionEvent
from agent.term import console, print_json

if TYPE_CHECKING:
    from agent.search.summary import RunSummary

EXIT_NO_KERNEL = 1

StoreOpt = typer.Option(None, "--store", help="store folder (default $KSCOUT_HOME)")
JsonOpt = typer.Option(False, "--json", help="print one JSON object (one line) instead of text")
NoHybridOpt = typer.Option(
    False, "--no-hybrid", help="rank without hybrids (PyTorch compute in forward beside the Triton kernels)"
)


def _open_store(store_dir: Optional[Path]):
    from store import Store

    return Store.open(home=store_dir)


class _ProgressView:
    """Turns session events into a live bar (terminal) or plain stderr lines (pipes, logs, tests).

    It also learns the run id from the session's first event, which is when the CLI claims the run
    for this process (so a kill -9 shows as `stale`) and knows what to mark if interrupted.
    """

    def __init__(self, err, on_started=None):
        self.console = err
        self.live = err.is_terminal
        self.on_started = on_started
        self.run_id: Optional[str] = None
        self._progress = None
        self._task = None

    def __enter__(self):
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def __call__(self, e: SessionEvent) -> None:
        if self.run_id is None:
            self.run_id = e.run_id
            if self.on_started is not None:
                self.on_started(e.run_id)
        best = f"{e.best_speedup:.3g}x" if e.best_speedup is not None else "not measured"
        fails = ", ".join(f"{k} {v}" for k, v in sorted(e.failures_by_kind.items())) or "none"
        if self._progress is not None:
            if self._task is None:
                self._task = self._progress.add_task("", total=e.budget)
            self._progress.update(self._task, completed=e.evaluations, description=f"best {best} | failures: {fails}")
            if e.kind in ("evaluated", "proposal_error", "remeasured", "finished"):
                self._progress.console.print(f"[{e.evaluations}/{e.budget}] {e.message}", markup=False, highlight=False)
            return
        self.console.print(
            f"[{e.kind} {e.evaluations}/{e.budget}] {e.message} | best {best} | failures: {fails}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _run_session(store_dir: Optional[Path], go) -> str:
    """Run `go(store, on_event)` (a session start or resume) with progress, ownership and interrupts."""
    from agent.search.interrupts import guarded_session
    from agent.search.liveness import claim

    view = _ProgressView(console(stderr=True))

    def run() -> str:
        from knowledge.cli import ensure_shipped_docs

        with _open_store(store_dir) as st:
            ensure_shipped_docs(st)  # a new store's first search: the docs load under a visible bar
            view.on_started = lambda run_id: claim(st, run_id)
            with view:
                return go(st, view)

    return guarded_session(lambda: _open_store(store_dir), run, lambda: view.run_id)


def _finish(store_dir: Optional[Path], run_id: str, as_json: bool, out: Optional[Path]) -> int:
    """Summary, kernel file and exit code of a run that ended (optimize, resume)."""
    from agent.search import kernelfile
    from agent.search.summary import summarize
    from agent.search.views import render_show

    with _open_store(store_dir) as st:
        summary = summarize(st, run_id)
        kernel = summary.in_hand
        source = st.get_candidate(kernel.candidate_id, run_id=run_id).source if kernel else None
    path = kernelfile.write(summary, kernel, source, out) if kernel else None
    if as_json:
        print_json({**summary.model_dump(mode="json"), "kernel_file": str(path) if path else None})
    else:
        con = console()
        render_show(con, summary)
        con.print(
            f"kernel: {path}" if path else "kernel: none (no candidate passed)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return 0 if path else EXIT_NO_KERNEL


def _exit(code: int) -> None:
    if code:
        raise SystemExit(code)  # typer.Exit would only be returned by the standalone_mode=False app


ExecutorOpt = typer.Option(
    "local", "--executor", help="where candidates run: local | ray (pip install 'kernelscout[ray]')"
)
RayAddressOpt = typer.Option(
    None,
    "--ray-address",
    help="Ray cluster to use (default $RAY_ADDRESS, else a local cluster started for this command)",
)
RayResourceOpt = typer.Option(
    None,
    "--ray-resource",
    help="custom Ray resource every task requests, e.g. H200: routes the search to nodes that declare it",
)
SandboxOpt = typer.Option(
    None,
    "--sandbox",
    help="auto | required | off: run candidates in an OS sandbox (bubblewrap; default $KSCOUT_SANDBOX, else auto)",
)


def register(app: typer.Typer) -> None:
    app.command()(optimize)
    app.command()(resume)
    app.command()(runs)
    app.command()(show)
    _register_many(app)


def optimize(
    problem: str = typer.Argument(..., metavar="PROBLEM", help="built-in problem name or a KernelBench-style file"),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
    proposer: str = typer.Option("template", help="template (offline) | llm"),
    model: Optional[str] = typer.Option(None, help="litellm model string, e.g. openai/NAME"),
    api_base: Optional[str] = typer.Option(None, help="OpenAI-compatible server URL (vLLM)"),
    budget: Optional[int] = typer.Option(None, help="evaluations (default: 64 on a GPU, 20 on a CPU)"),
    minutes: Optional[float] = typer.Option(None, help="time budget (default: 5 on a GPU, none on a CPU)"),
    target_speedup: Optional[float] = typer.Option(None, help="stop at this measured, significant speedup"),
    stall: Optional[int] = typer.Option(30, help="stop after this many evaluations without improvement"),
    seed: int = typer.Option(0, help="random seed of the proposer"),
    max_cost: Optional[float] = typer.Option(None, help="stop when LLM spend reaches this many USD"),
    batch: Optional[int] = typer.Option(
        None, help="candidates per step: checked in parallel, then timed together (default: 8 on a GPU, 1 on a CPU)"
    ),
    workers: Optional[int] = typer.Option(
        None,
        help="correctness checks in parallel, timings never overlap anything (default: --batch on a GPU, 1 on a CPU)",
    ),
    compile_every: bool = typer.Option(
        False,
        "--compile-every",
        help="time torch.compile with every batch, not only with the seed and the final re-measure",
    ),
    trials: int = typer.Option(2, help="correctness trials per shape"),
    time_case: Optional[List[str]] = typer.Option(
        None, "--time-case", help="time only this case id, e.g. 'M=4096,N=4096|bfloat16' (repeatable)"
    ),
    dtype: Optional[List[str]] = typer.Option(
        None, "--dtype", help="prove and time only this declared dtype, e.g. bfloat16 (repeatable; default all)"
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="write the best kernel here (default ./kscout-best/PROBLEM-RUN.py)"
    ),
    tolerance: str = typer.Option("strict", help="strict (default) | kernelbench (atol = rtol = 1e-2)"),
    no_hybrid: bool = NoHybridOpt,
    executor: str = ExecutorOpt,
    ray_address: Optional[str] = RayAddressOpt,
    ray_resource: Optional[str] = RayResourceOpt,
    sandbox: Optional[str] = SandboxOpt,
    store: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
):
    """Search for a fast, correct Triton kernel for PROBLEM; write the best one to a file.

    Exit codes: 0 a passing kernel was found (its file is printed), 1 none was, 2 bad input,
    3 interrupted (resume with `kscout resume RUN`).
    """
    from agent.search.session import SessionConfig, SessionError, search_defaults, start

    defaults = search_defaults(device)  # a real search where the device can afford one
    if budget is None and minutes is None and batch is None and workers is None:
        minutes = defaults["minutes"]
    budget = defaults["budget"] if budget is None else budget
    batch = defaults["batch"] if batch is None else batch
    if workers is None:  # on a GPU a batch is checked side by side; on a CPU one at a time
        workers = batch if defaults["workers"] > 1 else 1
    if proposer not in ("template", "llm"):
        raise SessionError(f"--proposer must be template or llm (got {proposer!r})")
    if tolerance not in ("strict", "kernelbench"):
        raise SessionError(f"--tolerance must be strict or kernelbench (got {tolerance!r})")
    config = SessionConfig(
        problem=problem,
        device=device,
        proposer=proposer,
        model=model,
        api_base=api_base,
        budget=budget,
        minutes=minutes,
        target_speedup=target_speedup,
        stall=stall,
        seed=seed,
        max_cost_usd=max_cost,
        batch=batch,
        workers=workers,
        compile_every=compile_every,
        trials=trials,
        time_cases=tuple(time_case or ()),
        dtypes=tuple(dtype or ()),
        tolerance=tolerance,
        no_hybrid=no_hybrid,
        executor=executor,
        ray_resource=ray_resource,
        sandbox=sandbox,
    ).check()
    if executor == "local":  # the first batch's workers warm up while the store opens (evaluation/pool.py)
        from evaluation.pool import prestart

        prestart(device, sandbox, workers + 1)
    run_id = _run_session(store, lambda st, view: start(config, st, on_event=view, ray_address=ray_address))
    _exit(_finish(store, run_id, as_json, out))


def resume(
    run: str = typer.Argument(..., metavar="RUN", help="run id (or a unique prefix)"),
    out: Optional[Path] = typer.Option(
        None, "--out", help="write the best kernel here (default ./kscout-best/PROBLEM-RUN.py)"
    ),
    executor: Optional[str] = typer.Option(
        None, "--executor", help="local | ray (default: the executor the run started with)"
    ),
    ray_address: Optional[str] = RayAddressOpt,
    store: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
):
    """Continue a run that was interrupted, crashed or was killed (stale), without re-evaluating
    finished candidates. Exit codes as for optimize."""
    from agent.search.liveness import owner_alive
    from agent.search.session import SessionError
    from agent.search.session import resume as resume_run

    with _open_store(store) as st:
        run_id = st.get_run(run).run_id
        owner = st.run_owners([run_id]).get(run_id)
        if st.get_run(run_id).status.value == "running" and owner is not None and owner_alive(owner):
            raise SessionError(
                f"run {run_id} is still running (pid {owner.pid} on {owner.host}); "
                f"stop it first (Ctrl-C or kill {owner.pid})"
            )
    run_id = _run_session(
        store, lambda st, view: resume_run(run_id, st, on_event=view, executor_name=executor, ray_address=ray_address)
    )
    _exit(_finish(store, run_id, as_json, out))


def runs(
    limit: int = typer.Option(20, help="newest first"),
    store: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
):
    """List search runs; `stale`: marked running, but its process is gone (resume it)."""
    from agent.search.liveness import run_state
    from agent.term import ellipsize_middle, human, none_line, table, unique_prefixes

    with _open_store(store) as st:
        found = st.list_runs(limit=limit)
        owners = st.run_owners([r.run_id for r in found])
        every_id = [r.run_id for r in st.list_runs(limit=1_000_000)]
    states = {r.run_id: run_state(r, owners.get(r.run_id)) for r in found}
    if as_json:
        print_json({"runs": [{**r.model_dump(mode="json"), "state": states[r.run_id]} for r in found]})
        return
    con = console()
    if not found:
        con.print(none_line("runs"))
        return
    ids = unique_prefixes(every_id, minimum=15)
    t = table("run", "problem", "device", "proposer", "state", "stop reason")
    t.columns[0].no_wrap = True
    for r in found:
        who = r.proposer + (f" {ellipsize_middle(r.model, 14)}" if r.model else "")
        t.add_row(
            ids[r.run_id], ellipsize_middle(r.problem_name, 18), r.arch, who, states[r.run_id], human(r.stop_reason)
        )
    con.print(t)
    if "stale" in states.values():
        con.print("stale: the process running it is gone; `kscout resume RUN` continues it", highlight=False)


def show(
    run: str = typer.Argument(..., metavar="RUN", help="run id (or a unique prefix)"),
    candidate: Optional[str] = typer.Argument(
        None, metavar="CANDIDATE", help="with --source: this candidate (default: the best)"
    ),
    source: bool = typer.Option(False, "--source", help="print the kernel's source (with its header) to stdout"),
    no_hybrid: bool = NoHybridOpt,
    store: Optional[Path] = StoreOpt,
    as_json: bool = JsonOpt,
):
    """The search tree of a run, its best kernel against eager and torch.compile, and why it stopped.

    `kscout show RUN --source [CANDIDATE] > kernel.py` writes a kernel ready to evaluate or use.
    """
    from agent.search.summary import summarize
    from agent.search.views import render_show
    from evaluation.errors import KscoutError

    if candidate is not None and not source:
        raise KscoutError("a CANDIDATE after the run id is only read with --source")
    if source:
        _print_source(store, run, candidate)
        return
    with _open_store(store) as st:
        summary = summarize(st, run, no_hybrid=no_hybrid)
    if as_json:
        print_json(summary.model_dump(mode="json"))
    else:
        render_show(console(), summary)


def _print_source(store_dir: Optional[Path], run: str, candidate: Optional[str]) -> None:
    import sys

    from agent.search import kernelfile
    from agent.search.summary import kernel_view, summarize
    from evaluation.errors import KscoutError

    with _open_store(store_dir) as st:
        if candidate is None:
            summary = summarize(st, run)
            if summary.in_hand is None:
                raise KscoutError(
                    f"run {summary.run_id} has no passing candidate; name one: "
                    f"kscout show {summary.run_id} --source CANDIDATE"
                )
            kernel, src = summary.in_hand, st.get_candidate(summary.in_hand.candidate_id, run_id=summary.run_id).source
        else:
            kernel, summary, src = kernel_view(st, run, candidate)
    sys.stdout.write(kernelfile.render(summary, kernel, src, None))


# -- optimize-many: one search per problem at once, one progress view, one table -------------------------
class _ManyView:
    """One bar per search (terminal) or one plain line per event, prefixed with the problem."""

    def __init__(self, con, problems: list[str]):
        self.console, self.problems = con, problems
        self._progress = None
        self._tasks: dict[int, object] = {}

    def __enter__(self):
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def __call__(self, i: int, e: SessionEvent) -> None:
        name = self.problems[i]
        best = f"{e.best_speedup:.3g}x" if e.best_speedup is not None else "not measured"
        if self._progress is None:
            self.console.print(
                f"[{name} {e.kind} {e.evaluations}/{e.budget}] {e.message} | best {best}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            return
        if i not in self._tasks:
            self._tasks[i] = self._progress.add_task("", total=e.budget)
        self._progress.update(self._tasks[i], completed=e.evaluations, description=f"{name}: best {best}")
        if e.kind in ("proposal_error", "remeasured", "finished"):
            self._progress.console.print(f"{name}: {e.message}", markup=False, highlight=False)


def _many_table(rows: list[tuple[object, Optional["RunSummary"]]]):
    from agent.term import human, table

    t = table("problem", "run", "state", "evals", "best vs eager", title="optimize-many")
    for outcome, s in rows:
        if s is None:
            t.add_row(outcome.problem, "-", outcome.state, "-", human(outcome.reason))
            continue
        best = s.best
        eager = next((a for a in best.verdict.across if a.baseline == "eager"), None) if best and best.verdict else None
        speed = (
            f"{eager.geomean.ratio:.3g}x [{eager.geomean.low:.3g}, {eager.geomean.high:.3g}]"
            if eager
            else "not timed"
            if not s.timed
            else "none"
        )
        t.add_row(
            outcome.problem, s.run_id[:15], outcome.state, f"{s.evaluations}/{s.stop_rule.max_evaluations}", speed
        )
    return t


def _register_many(app: typer.Typer) -> None:
    @app.command("optimize-many")
    def optimize_many(
        problems: Optional[List[str]] = typer.Argument(None, help="built-in problem names or KernelBench-style files"),
        manifest: Optional[Path] = typer.Option(
            None, "--manifest", help="TOML file with a shared table, a defaults table and one search table per search"
        ),
        concurrency: Optional[int] = typer.Option(None, help="searches at once (default: all with ray, 2 local)"),
        minutes: Optional[float] = typer.Option(None, help="time budget shared by all searches (wall clock)"),
        max_cost: Optional[float] = typer.Option(None, help="LLM spend ceiling in USD shared by all searches"),
        device: str = typer.Option("auto", help="auto | cpu | cuda"),
        proposer: str = typer.Option("template", help="template (offline) | llm"),
        model: Optional[str] = typer.Option(None, help="litellm model string, e.g. openai/NAME"),
        api_base: Optional[str] = typer.Option(None, help="OpenAI-compatible server URL (vLLM)"),
        budget: int = typer.Option(20, help="evaluations per search"),
        target_speedup: Optional[float] = typer.Option(None, help="stop a search at this measured speedup"),
        stall: Optional[int] = typer.Option(30, help="stop a search after this many evaluations without improvement"),
        seed: int = typer.Option(0, help="random seed of the proposer"),
        batch: int = typer.Option(1, help="candidates per step of each search"),
        workers: int = typer.Option(1, help="checks in parallel per device"),
        trials: int = typer.Option(2, help="correctness trials per shape"),
        dtype: Optional[List[str]] = typer.Option(None, "--dtype", help="prove and time only this dtype (repeatable)"),
        tolerance: str = typer.Option("strict", help="strict (default) | kernelbench (atol = rtol = 1e-2)"),
        no_hybrid: bool = NoHybridOpt,
        executor: str = ExecutorOpt,
        ray_address: Optional[str] = RayAddressOpt,
        ray_resource: Optional[str] = RayResourceOpt,
        store: Optional[Path] = StoreOpt,
        as_json: bool = JsonOpt,
    ):
        """One search per problem, all at once on the executor, under a shared time and cost budget."""
        from agent.search.many import Shared, load_manifest, plan, run_many
        from agent.search.session import Interrupted, SessionError
        from agent.search.summary import summarize

        if proposer not in ("template", "llm"):
            raise SessionError(f"--proposer must be template or llm (got {proposer!r})")
        if tolerance not in ("strict", "kernelbench"):
            raise SessionError(f"--tolerance must be strict or kernelbench (got {tolerance!r})")
        loaded = load_manifest(manifest) if manifest else None
        base = dict(
            device=device,
            proposer=proposer,
            model=model,
            api_base=api_base,
            budget=budget,
            target_speedup=target_speedup,
            stall=stall,
            seed=seed,
            batch=batch,
            workers=workers,
            trials=trials,
            dtypes=tuple(dtype or ()),
            tolerance=tolerance,
            no_hybrid=no_hybrid,
            executor=executor,
            ray_resource=ray_resource,
        )
        configs = plan(list(problems or ()), base, loaded)
        given = dict(minutes=minutes, max_cost_usd=max_cost, concurrency=concurrency)
        shared = Shared(
            **{**(loaded.shared.model_dump() if loaded else {}), **{k: v for k, v in given.items() if v is not None}}
        )
        names = [c.problem for c in configs]
        with _open_store(store) as st, _ManyView(console(stderr=True), names) as view:
            result = run_many(configs, st, shared=shared, ray_address=ray_address, on_event=view)
        with _open_store(store) as st:
            rows = [
                (o, summarize(st, o.run_id, no_hybrid=c.no_hybrid) if o.run_id else None)
                for o, c in zip(result.outcomes, configs)
            ]
        if as_json:
            print_json(
                {
                    "searches": [
                        dict(o.model_dump(mode="json"), summary=s.model_dump(mode="json") if s else None)
                        for o, s in rows
                    ],
                    "elapsed_s": result.elapsed_s,
                    "cost_usd": result.cost_usd,
                }
            )
        else:
            console().print(_many_table(rows))
        if result.interrupted_runs:
            raise Interrupted(*result.interrupted_runs)
        if any(o.state == "failed" for o in result.outcomes):
            _exit(1)
