"""The search loop on the CPU with real parts: the evaluator, a DuckDB + Chroma store, the template
proposer, the llm proposer through a real HTTP server, and the `kscout` console script.

Evaluations are the expensive part (a subprocess each, the Triton interpreter): every test keeps its
budget at a handful, uses one correctness trial, and starts from a store whose shipped hardware docs
were ingested once for the module.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai import SEED_SOURCE, FakeOpenAI, cheat, good_kernel, malformed, prose
from test_cli_end import default_signals

import evaluation
from agent.search.session import SessionConfig, resume, start
from agent.search.summary import summarize
from evaluation.records import source_sha256
from store import Store
from store.records import RunStatus

KSCOUT = str(Path(sys.executable).parent / "kscout")


@pytest.fixture(scope="module")
def warm_home(tmp_path_factory):
    """A store with the shipped hwdocs ingested (tens of seconds on 2 cores): copied, never reused."""
    from knowledge.retrieve import documents_or_builtin

    home = tmp_path_factory.mktemp("warm") / "home"
    with Store.open(home) as st:
        assert documents_or_builtin(st)
    return home


@pytest.fixture
def home(warm_home, tmp_path):
    dst = tmp_path / "home"
    shutil.copytree(warm_home, dst)
    return dst


def litellm():
    from agent.proposers.llm import _litellm

    return _litellm()


def st_source(home, run_id, candidate_id):
    with Store.open(home) as st:
        return st.get_candidate(candidate_id, run_id=run_id).source


def search_evals(st, run_id):
    return [(cid, r) for _, _, cid, r in st.evaluations(run_id=run_id, kind="search")]


def test_llm_session_records_calls_faults_dedupe_and_write_back(home):
    events = []
    with FakeOpenAI() as server, Store.open(home) as st:
        # seed (shipped) -> refine: prose, then the seed again (a duplicate) -> refine: a cheat -> repair: broken code
        server.enqueue(prose(), good_kernel(), cheat(), malformed(), good_kernel())
        # the fake server reports 100 prompt + 50 completion tokens per reply: the ceiling is hit after 4 calls
        per_call = sum(litellm().cost_per_token(model="gpt-4o-mini", prompt_tokens=100, completion_tokens=50))
        config = SessionConfig(
            problem="layernorm",
            device="cpu",
            proposer="llm",
            model="openai/gpt-4o-mini",
            api_base=server.url,
            budget=10,
            max_cost_usd=3.5 * per_call,
            trials=1,
            llm_backoff_s=0.01,
            llm_timeout_s=10,
        )

        def on_event(e):
            if e.kind == "started":  # the stop rule is in the store before anything is proposed
                events.append(("rule", st.get_run(e.run_id).stop_rule.max_evaluations))
            events.append((e.kind, e.message))

        run_id = start(config, st, on_event=on_event)
        run = st.get_run(run_id)
        evals = search_evals(st, run_id)
        cands = {c.candidate_id: c for c in st.candidates(run_id)}
        calls = st.llm_calls(run_id)
        failures = st.failure_patterns(op_family="layernorm", arch="cpu")
        outcomes = [o for o in st.outcomes(op_family="layernorm", arch="cpu") if o.candidate_id in cands]
        summary = summarize(st, run_id)

    assert events[0] == ("rule", 10)
    seed_id = source_sha256(SEED_SOURCE)
    assert [r.status.value for _, r in evals] == ["passed", "rejected", "compile_error"]
    assert [cid for cid, _ in evals][0] == seed_id
    assert len(cands) == 3  # the model's copy of the seed was a duplicate: written once, evaluated once
    assert any(kind == "duplicate" and seed_id[:12] in msg for kind, msg in events)

    # every call is on record, the failed one with its error, each with its template
    assert [c.error for c in calls] == ["no code in reply", None, None, None]
    assert [c.template_name for c in calls] == ["refine", "refine", "refine", "repair"]
    assert all(c.cost_usd and c.cost_usd > 0 for c in calls)
    assert summary.cost_usd == pytest.approx(sum(c.cost_usd for c in calls))

    # lineage and policy decisions travel with the candidates
    cheat_id, broken_id = [cid for cid, _ in evals][1:]
    assert (cands[cheat_id].parent_id, cands[cheat_id].policy_action, cands[cheat_id].generation) == (
        seed_id,
        "refine",
        1,
    )
    assert (cands[broken_id].parent_id, cands[broken_id].policy_action) == (cheat_id, "repair")
    assert cands[broken_id].prompt_template == "repair" and cands[broken_id].model == "openai/gpt-4o-mini"
    assert "is rejected" in cands[broken_id].policy_reason

    # failures became patterns; outcomes say correctness only, with no invented speed
    assert {"SyntaxError"} <= {f.error_class for f in failures}
    assert dict(evals)[cheat_id].error_class in {f.error_class for f in failures}
    # failure patterns are refreshed every step: the repair prompt already lists the cheat's
    repair_prompt = server.requests[3]["messages"][1]["content"]
    assert "## Failures seen since this search started" in repair_prompt
    section = repair_prompt[repair_prompt.index("## Failures seen since") :]
    rejected = dict(evals)[cheat_id]
    assert f"{rejected.failed_stage.value}/{rejected.error_class} seen 1x" in section, section[:600]
    assert "## Failures seen since" not in server.requests[0]["messages"][1]["content"]
    assert sorted(o.status for o in outcomes) == ["compile_error", "correctness_only", "rejected"]
    assert all(o.speedup is None and o.evidence_eval_ids for o in outcomes)

    # --max-cost stopped the search once the spend passed the ceiling, before the budget
    assert (run.status, run.stop_reason, run.best_candidate_id) == (RunStatus.finished, "cost_ceiling", seed_id)
    assert len(server.requests) == 4
    assert summary.best.status == "passed" and summary.best.speedup is None
    assert summary.failures_by_kind == {"rejected": 1, "compile_error": 1}


def test_a_second_run_reuses_stored_evaluations_without_spending_budget(home):
    seed_id = source_sha256(SEED_SOURCE)
    with Store.open(home) as st:
        first = start(SessionConfig(problem="layernorm", device="cpu", budget=1, trials=1), st)
        second = start(SessionConfig(problem="layernorm", device="cpu", budget=1, trials=1), st)
        evals1, evals2 = search_evals(st, first), search_evals(st, second)
        cands = st.candidates(second)
        summary = summarize(st, second)

    assert [cid for cid, _ in evals1] == [seed_id]
    # the seed's stored evaluation is reused (same result, not re-run) and does not count against the budget
    assert evals2[0][0] == seed_id and evals2[0][1].started_at == evals1[0][1].started_at
    assert (summary.evaluations, summary.evaluations_reused) == (1, 1)
    assert [n.reused for n in summary.nodes] == [True, False]
    child = cands[1]
    assert (child.parent_id, child.generation, child.policy_action) == (seed_id, 1, "refine")
    assert child.proposer == "template" and json.loads(child.knobs_json) and child.transformation_tags
    assert "nothing is timed here, so breadth" in child.policy_reason
    assert all(r.status.value == "passed" for _, r in evals2)
    assert summary.best.candidate_id == seed_id


def _read_until(proc, needle, timeout_s):
    lines, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"never saw {needle!r}; stderr so far:\n{''.join(lines)}")


def test_resume_after_kill9_evaluates_every_candidate_exactly_once(home):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.Popen(
        [
            KSCOUT,
            "optimize",
            "layernorm",
            "--device",
            "cpu",
            "--budget",
            "3",
            "--batch",
            "2",
            "--trials",
            "1",
            "--store",
            str(home),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lines = _read_until(proc, "[evaluated 2/3]", timeout_s=240)
        proc.send_signal(signal.SIGKILL)  # while the third candidate (written, not evaluated) is running
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    run_id = next(line for line in lines if line.startswith("[started")).split("run ", 1)[1].split(":")[0]

    with Store.open(home) as st:
        before = st.get_run(run_id)
        assert before.status is RunStatus.running
        assert (len(st.candidates(run_id)), len(search_evals(st, run_id))) == (3, 2)
        evaluated_on_resume = []
        resume(run_id, st, on_event=lambda e: e.kind == "evaluated" and evaluated_on_resume.append(e.candidate_id))
        run = st.get_run(run_id)
        cands = [c.candidate_id for c in st.candidates(run_id)]
        evals = [cid for cid, _ in search_evals(st, run_id)]

    assert len(evaluated_on_resume) == 1 and evaluated_on_resume[0] == cands[2]
    assert sorted(evals) == sorted(cands) and len(evals) == len(set(evals)) == 3
    assert (run.status, run.stop_reason) == (RunStatus.finished, "evaluation_budget")


def test_kscout_optimize_json_end_to_end(home, capsys):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [KSCOUT, "optimize", "layernorm", "--budget", "4", "--json", "--trials", "1", "--store", str(home)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=home.parent,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)  # exactly one JSON object on stdout
    assert done.stdout.count("\n") == 1
    assert out["stop_reason"] == "evaluation_budget" and out["evaluations"] == 4
    assert out["best"]["status"] == "passed" and out["best"]["verdict"]["measured"] is False
    assert [(n["baseline"], n["speed"]) for n in out["best"]["verdict"]["not_measured"]] == [
        ("eager", "not measured"),
        ("torch_compile", "not measured"),
    ]
    assert len(out["best"]["candidate_id"]) == 64 and len(out["nodes"]) == 4
    assert out["timed"] is False and out["note"].startswith("correctness only")
    assert "[evaluated 4/4]" in done.stderr  # progress went to stderr

    from agent.cli import main

    main(["show", out["run_id"][:12], "--store", str(home), "--json"])
    shown = json.loads(capsys.readouterr().out)
    kernel_file = home.parent / out.pop("kernel_file")  # the best kernel, written where optimize ran
    assert shown == out and kernel_file.read_text().endswith(
        st_source(home, out["run_id"], out["best"]["candidate_id"])
    )
    main(["runs", "--store", str(home), "--json"])
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]] == [out["run_id"]]


def test_backfill_redoes_outcomes_and_failures_lost_between_two_writes(home):
    """A kill after the evaluation row but before its derived rows: resume writes them, once."""
    from agent.search import writeback
    from evaluation.records import Stage, Status
    from store.records import CandidateRecord, RunRecord, utc_now

    problem = evaluation.load_problem("layernorm", device="cpu")
    fp = evaluation.fingerprint("cpu")
    source = "class ModelNew:  # never run: the result below is what the evaluator would have said\n    pass\n"
    cid = source_sha256(source)
    result = evaluation.EvalResult(
        status=Status.crashed,
        failed_stage=Stage.correctness,
        error_class="SIGSEGV",
        message="the candidate's process died by signal 11",
        candidate_sha256=cid,
        problem_id=problem.problem_id,
        problem_name=problem.name,
        device="cpu",
        fingerprint=fp,
        started_at=utc_now(),
        duration_s=0.5,
    )
    with Store.open(home) as st:
        env_id = st.record_environment(fp)
        st.record_problem(problem)
        st.create_run(
            RunRecord(
                run_id="r-backfill",
                problem_id=problem.problem_id,
                problem_name=problem.name,
                op_family=problem.op_family,
                device="cpu",
                arch="cpu",
                env_id=env_id,
                proposer="template",
                seed=0,
                stop_rule=SessionConfig(problem="layernorm").stop_rule(),
                started_at=utc_now(),
            )
        )
        cand = CandidateRecord(
            candidate_id=cid,
            run_id="r-backfill",
            generation=0,
            proposer="template",
            policy_action="seed",
            source=source,
            created_at=utc_now(),
        )
        st.add_candidate(cand)
        eval_id = st.add_evaluation("r-backfill", cid, result, kind="search")  # ... and the process dies here
        args = (st, "r-backfill", {cid: cand}, [(eval_id, cid, result)], problem, fp, {})
        assert writeback.backfill(*args) == 1
        assert writeback.backfill(*args) == 0  # idempotent: the outcome now names the evaluation
        outcomes = [o for o in st.outcomes(op_family="layernorm", arch="cpu") if o.candidate_id == cid]
        failures = [f for f in st.failure_patterns(op_family="layernorm", arch="cpu") if f.error_class == "SIGSEGV"]
    assert [(o.status, o.evidence_eval_ids) for o in outcomes] == [("crashed", (eval_id,))]
    assert [(f.count, f.stage, f.example_candidate_id) for f in failures] == [(1, "correctness", cid)]


class _Interrupt(Exception):
    pass


def test_time_case_is_stored_with_the_run_and_resume_times_the_same_case(home, capsys):
    from agent.cli import main

    case = "M=7,N=97|bfloat16"
    picked = evaluation.load_problem("layernorm", device="cpu", timed=[case])
    main(
        [
            "optimize",
            "layernorm",
            "--device",
            "cpu",
            "--budget",
            "1",
            "--trials",
            "1",
            "--time-case",
            case,
            "--store",
            str(home),
            "--json",
            "--out",
            str(home.parent / "best.py"),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert out["problem_id"] == picked.problem_id != evaluation.load_problem("layernorm", device="cpu").problem_id

    def stop_after_first(e):  # a crash after the first evaluation landed: the run stays unfinished
        if e.kind == "evaluated":
            raise _Interrupt

    with Store.open(home) as st:
        assert SessionConfig.model_validate_json(st.get_run(out["run_id"]).config_json).time_cases == (case,)
        with pytest.raises(_Interrupt):
            start(
                SessionConfig(problem="layernorm", device="cpu", budget=2, trials=1, time_cases=(case,)),
                st,
                on_event=stop_after_first,
            )
        run_id = st.list_runs(limit=1)[0].run_id
        crashed = st.get_run(run_id)  # an error inside the session is written before it propagates
        assert (crashed.status, crashed.stop_reason) == (RunStatus.failed, "error: _Interrupt")
        resume(run_id, st)  # would refuse if it loaded the problem with the declared timed cases
        run = st.get_run(run_id)
    assert run.problem_id == picked.problem_id and run.status is RunStatus.finished


def test_dtype_option_proves_only_that_dtype_and_is_kept_for_resume(home, capsys):
    from agent.cli import main

    main(
        [
            "optimize",
            "layernorm",
            "--device",
            "cpu",
            "--budget",
            "1",
            "--trials",
            "1",
            "--dtype",
            "bfloat16",
            "--store",
            str(home),
            "--json",
            "--out",
            str(home.parent / "best.py"),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert out["problem_id"] == evaluation.load_problem("layernorm", device="cpu", dtypes=["bfloat16"]).problem_id
    with Store.open(home) as st:
        assert SessionConfig.model_validate_json(st.get_run(out["run_id"]).config_json).dtypes == ("bfloat16",)
        ((_, _, _, result),) = st.evaluations(run_id=out["run_id"])
    assert result.status.value == "passed"
    every = evaluation.load_problem("layernorm", device="cpu").shape_cases
    assert {c.dtype for c in every} == {"float32", "bfloat16"}
    assert sorted(s.case_id for s in result.shape_results) == sorted(
        c.case_id for c in every if c.dtype == "bfloat16" and "launch_only" not in c.tags
    )


def test_an_unknown_time_case_stops_optimize_before_any_run(tmp_path, capsys):
    from agent.cli import main

    with pytest.raises(SystemExit) as done:
        main(["optimize", "layernorm", "--device", "cpu", "--time-case", "M=1|float32", "--store", str(tmp_path)])
    assert done.value.code == 2
    assert "unknown case id 'M=1|float32' for --time-case" in capsys.readouterr().err
    with Store.open(tmp_path) as st:
        assert st.list_runs() == []


class RecordingExecutor:
    """The real local executor, noting which baselines each batch asked the timing for."""

    def __init__(self):
        from agent.search.executors import LocalExecutor

        self.inner = LocalExecutor("cpu", 2, trials=1)
        self.name, self.device = "recording", self.inner.device
        self.batches: list[tuple[int, tuple[str, ...]]] = []

    def environment(self):
        return self.inner.environment()

    def evaluate_batch(self, sources, problem, *, baselines):
        self.batches.append((len(sources), tuple(baselines)))
        return self.inner.evaluate_batch(sources, problem, baselines=baselines)

    def remeasure(self, sources, problem, *, rounds, baselines):
        return self.inner.remeasure(sources, problem, rounds=rounds, baselines=baselines)

    def cancel(self):
        self.inner.cancel()

    def close(self):
        self.inner.close()


@pytest.mark.parametrize("compile_every", [False, True])
def test_torch_compile_is_timed_with_the_seed_and_only_on_request_with_later_batches(home, compile_every):
    ex = RecordingExecutor()
    config = SessionConfig(
        problem="layernorm", device="cpu", budget=3, batch=2, workers=2, trials=1, compile_every=compile_every
    )
    with Store.open(home) as st:
        run_id = start(config, st, executor=ex)
        passed = [r.passed for _, r in search_evals(st, run_id)]
    ex.close()
    later = ("eager", "torch_compile") if compile_every else ("eager",)
    assert ex.batches == [(1, ("eager", "torch_compile")), (2, later)]
    assert passed == [True, True, True]


@pytest.mark.slow
def test_ctrl_c_records_the_run_interrupted_exits_3_and_resume_finishes_it(home):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.Popen(
        [KSCOUT, "optimize", "layernorm", "--device", "cpu", "--budget", "3", "--trials", "1", "--store", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=default_signals,  # Ctrl-C must reach it, whatever this process's SIGINT is set to
    )
    try:
        lines = _read_until(proc, "[evaluated 1/3]", timeout_s=240)
        proc.send_signal(signal.SIGINT)  # while the second candidate's worker runs
        t0 = time.monotonic()
        _, rest = proc.communicate(timeout=60)
        stopped_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    run_id = next(line for line in lines if line.startswith("[started")).split("run ", 1)[1].split(":")[0]

    assert proc.returncode == 3, rest
    assert f"kscout resume {run_id}" in rest
    assert stopped_s < 30  # the running worker was killed, not waited out
    with Store.open(home) as st:
        run = st.get_run(run_id)
        done_before = [cid for cid, _ in search_evals(st, run_id)]
        assert (run.status, run.stop_reason) == (RunStatus.interrupted, "interrupted")
        assert 1 <= len(done_before) <= 2 and all(r.passed for _, r in search_evals(st, run_id))
        evaluated_on_resume = []
        resume(run_id, st, on_event=lambda e: e.kind == "evaluated" and evaluated_on_resume.append(e.candidate_id))
        run = st.get_run(run_id)
        evals = [cid for cid, _ in search_evals(st, run_id)]
    assert not set(evaluated_on_resume) & set(done_before)
    assert len(evals) == len(set(evals)) == 3 and evals[: len(done_before)] == done_before
    assert (run.status, run.stop_reason) == (RunStatus.finished, "evaluation_budget")
