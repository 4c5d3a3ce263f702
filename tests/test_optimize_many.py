"""`kscout optimize-many`: one search per problem at once, on one executor, under a shared deadline and a
shared cost ceiling; Ctrl-C leaves every running search interrupted and resumable.

Searches run on the CPU with the real evaluator and the template proposer; KSCOUT_VECTORS=off keeps
the knowledge base out of the way (it is not under test here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.search.executors import LocalExecutor
from agent.search.many import Shared, executor_key, load_manifest, plan, run_many
from agent.search.session import Interrupted, SessionConfig, SessionError, SharedSpend, resume, start
from store import Store
from store.records import RunStatus

BASE = dict(device="cpu", budget=1, trials=1)


@pytest.fixture(autouse=True)
def no_vectors(monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "many.toml"
    path.write_text(text)
    return path


def test_a_manifest_gives_each_search_the_command_options_then_its_defaults_then_its_own(tmp_path):
    manifest = load_manifest(
        write(
            tmp_path,
            """
[shared]
minutes = 30
concurrency = 3

[defaults]
budget = 16
dtypes = ["bfloat16"]

[[search]]
problem = "softmax"

[[search]]
problem = "rmsnorm"
budget = 32
ray_resource = "H200"
executor = "ray"
""",
        )
    )
    configs = plan(["layernorm"], dict(BASE, seed=7), manifest)
    assert manifest.shared == Shared(minutes=30, concurrency=3)
    assert [(c.problem, c.budget, c.dtypes, c.seed) for c in configs] == [
        ("layernorm", 1, (), 7),
        ("softmax", 16, ("bfloat16",), 7),
        ("rmsnorm", 32, ("bfloat16",), 7),
    ]
    assert (configs[2].executor, configs[2].ray_resource) == ("ray", "H200")
    assert executor_key(configs[0]) == executor_key(configs[1]) != executor_key(configs[2])


@pytest.mark.parametrize(
    "text,error",
    [
        ("[[search]]\nproblem = 'softmax'\nbudgett = 3\n", r"search 1 \(softmax\): budgett: Extra inputs"),
        ("[[search]]\nproblem = 'softmax'\nminutes = 3\n", "minutes is shared by all searches"),
        ("[sharde]\nminutes = 3\n", "manifest .*: sharde: Extra inputs"),
        ("[shared]\nminutes = 3\n", "names no"),
        (
            "[[search]]\nproblem = 'softmax'\n[[search]]\nproblem = 'rmsnorm'\nworkers = 4\n",
            "searches on the local executor share one executor",
        ),
        ("[[search]\n", "cannot read manifest"),
    ],
)
def test_a_bad_manifest_is_refused_with_its_place(tmp_path, text, error):
    with pytest.raises(SessionError, match=error):
        plan([], BASE, load_manifest(write(tmp_path, text)))


def test_no_problems_and_no_manifest_is_refused(tmp_path):
    with pytest.raises(SessionError, match="needs problems, or --manifest"):
        plan([], BASE)
    with pytest.raises(SessionError, match="manifest not found"):
        load_manifest(tmp_path / "absent.toml")


def test_the_stop_rule_reads_the_shared_spend_not_the_runs_own(tmp_path):
    with Store.open(tmp_path / "home") as st:
        run_id = start(
            SessionConfig(problem="softmax", max_cost_usd=0.5, **BASE), st, shared_spend=SharedSpend(spent_usd=0.75)
        )  # spent by the other searches
        run = st.get_run(run_id)
        assert st.evaluations(run_id=run_id) == []
    assert (run.status, run.stop_reason, run.stop_rule.max_cost_usd) == (RunStatus.finished, "cost_ceiling", 0.5)


def test_a_spent_deadline_stops_the_running_search_and_never_starts_the_next(tmp_path):
    configs = plan(["softmax", "layernorm"], BASE)
    with Store.open(tmp_path / "home") as st:
        result = run_many(configs, st, shared=Shared(minutes=1e-6, concurrency=1))
        runs = [st.get_run(o.run_id) for o in result.outcomes if o.run_id]
    states = [(o.problem, o.state) for o in result.outcomes]
    assert states in (
        [("softmax", "finished"), ("layernorm", "not_started")],
        [("softmax", "not_started"), ("layernorm", "not_started")],
    )
    assert all(r.stop_reason == "time_budget" and r.stop_rule.max_minutes <= 1e-6 for r in runs)
    assert result.outcomes[1].reason == "the shared time budget was spent before it started"


@pytest.mark.slow
def test_optimize_many_runs_each_problem_to_its_own_finished_run(tmp_path, capsys):
    from agent.cli import main

    home = tmp_path / "home"
    main(
        [
            "optimize-many",
            "softmax",
            "layernorm",
            "--device",
            "cpu",
            "--budget",
            "1",
            "--trials",
            "1",
            "--minutes",
            "30",
            "--store",
            str(home),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    searches = out["searches"]
    assert [(s["problem"], s["state"]) for s in searches] == [("softmax", "finished"), ("layernorm", "finished")]
    assert all(s["summary"]["evaluations"] == 1 and s["summary"]["best"]["status"] == "passed" for s in searches)
    assert len({s["run_id"] for s in searches}) == 2
    with Store.open(home) as st:
        rules = [st.get_run(s["run_id"]).stop_rule for s in searches]
    assert all(0 < r.max_minutes <= 30 for r in rules)  # each run's time budget is what the set had left


@pytest.mark.slow
def test_ctrl_c_interrupts_every_running_search_and_each_resumes(tmp_path):
    configs = plan(["softmax", "layernorm"], dict(BASE, budget=3))
    ex = LocalExecutor("cpu", 1, trials=1)

    def cancel_on_first_evaluation(i, e):  # what Ctrl-C in the driver does: cancel the executors
        if e.kind == "evaluated":
            ex.cancel()

    with Store.open(tmp_path / "home") as st:
        result = run_many(
            configs,
            st,
            shared=Shared(concurrency=2),
            on_event=cancel_on_first_evaluation,
            executors={executor_key(configs[0]): ex},
        )
        ex.close()
        assert [o.state for o in result.outcomes] == ["interrupted", "interrupted"]
        runs = [st.get_run(r) for r in result.interrupted_runs]
        assert [(r.status, r.stop_reason) for r in runs] == [(RunStatus.interrupted, "interrupted")] * 2
        for run_id in result.interrupted_runs:
            resume(run_id, st)
        finished = [st.get_run(r) for r in result.interrupted_runs]
        counts = [len(st.evaluations(run_id=r, kind="search")) for r in result.interrupted_runs]
    assert [(r.status, r.stop_reason) for r in finished] == [(RunStatus.finished, "evaluation_budget")] * 2
    assert counts == [3, 3]
    a, b = result.interrupted_runs
    assert str(Interrupted(a, b)).endswith(f"continue with `kscout resume {a}; kscout resume {b}`")
    assert Interrupted(a).exit_code == 3


def test_an_executor_that_cannot_start_fails_only_the_searches_that_need_it(tmp_path):
    cpu = SessionConfig(problem="softmax", **BASE)
    gpu = SessionConfig(problem="layernorm", device="cuda", budget=1, trials=1)  # no GPU on this machine
    ex = LocalExecutor("cpu", 1, trials=1)
    with Store.open(tmp_path / "home") as st:
        result = run_many([gpu, cpu], st, executors={executor_key(cpu): ex})
    ex.close()
    assert [(o.problem, o.state, o.run_id is None) for o in result.outcomes] == [
        ("layernorm", "failed", True),
        ("softmax", "finished", False),
    ]
    assert result.outcomes[0].reason.startswith("DeviceError: --device cuda asked for")
