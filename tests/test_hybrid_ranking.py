"""Hybrids in the agent (issue 25, item 2): `show`/`report` label a hybrid with its PyTorch ops and
their share of device time; `--no-hybrid` leaves hybrids out of a ranking (the views, the search's
pick) and out of a promotion. GPU evaluations are written as the evaluator's records, as an H200 run
would carry them; the store is real."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from rich.console import Console
from test_lifecycle_support import gpu_candidate, gpu_fp, make_run, result, timing, variant

import evaluation
from agent.cli import main
from agent.lifecycle.evidence import PromotionEvidence
from agent.lifecycle.gate import PromotionRefused
from agent.lifecycle.registry import promote
from agent.search.session import Session, SessionConfig
from agent.search.summary import summarize
from agent.search.views import render_report, summary_rows
from evaluation.records import source_sha256
from store import Store
from store.records import CandidateRecord, RunStatus, utc_now

HYBRID = dict(hybrid_ops=("sum",), hybrid_device_fraction=0.25)


@pytest.fixture(scope="module")
def problem():
    return evaluation.load_problem("layernorm", device="cuda")


@pytest.fixture
def run_with_a_hybrid_best(tmp_path, problem):
    """seed 1.1x, a plain kernel 1.3x, a hybrid 1.6x (the run's pick)."""
    fp = gpu_fp()
    sources = {"seed": variant(0), "plain": variant(1), "hybrid": variant(2)}
    speed = {"seed": 1.1, "plain": 1.3, "hybrid": 1.6}
    with Store.open(tmp_path / "store") as st:
        run = make_run(st, problem, fp)
        for name, src in sources.items():
            cid = source_sha256(src)
            st.add_candidate(
                CandidateRecord(
                    candidate_id=cid,
                    run_id=run.run_id,
                    generation=0,
                    proposer="seed" if name == "seed" else "template",
                    source=src,
                    created_at=utc_now(),
                )
            )
            r = result(problem, src, fp, timed=timing(problem, speed[name], speed[name] - 0.05, speed[name] + 0.05))
            st.add_evaluation(run.run_id, cid, r.model_copy(update=HYBRID) if name == "hybrid" else r)
        st.finish_run(
            run.run_id,
            status=RunStatus.finished,
            stop_reason="evaluation_budget",
            best_candidate_id=source_sha256(sources["hybrid"]),
        )
    return tmp_path / "store", run.run_id, {name: source_sha256(src) for name, src in sources.items()}


def test_show_and_report_label_a_hybrid_with_its_ops_and_share_of_device_time(run_with_a_hybrid_best):
    home, run_id, ids = run_with_a_hybrid_best
    with Store.open(home) as st:
        summary = summarize(st, run_id)
    assert summary.best is not None and summary.best.candidate_id == ids["hybrid"]
    assert (summary.best.hybrid_ops, summary.best.hybrid_device_fraction) == (("sum",), 0.25)
    assert ("hybrid", "PyTorch computes sum in forward (25% of device time)") in summary_rows(summary)
    assert [n.hybrid for n in summary.nodes if n.candidate_id == ids["hybrid"]] == [True]
    out = io.StringIO()
    render_report(Console(file=out, width=80), summary)
    assert f"{ids['hybrid'][:12]} (best) (hybrid)" in out.getvalue()


def test_no_hybrid_leaves_hybrids_out_of_the_ranking_and_says_so(run_with_a_hybrid_best):
    home, run_id, ids = run_with_a_hybrid_best
    with Store.open(home) as st:
        summary = summarize(st, run_id, no_hybrid=True)
    assert summary.best is None and summary.hybrids_left_out == (ids["hybrid"],)
    assert [k.candidate_id for k in summary.kernels] == [ids["plain"], ids["seed"]]
    assert summary.in_hand is not None and summary.in_hand.candidate_id == ids["plain"]
    assert summary.passed == 3  # still judged and counted: left out of the ranking only
    left = dict(summary_rows(summary))["left out"]
    assert left == f"1 passing hybrid(s), --no-hybrid: {ids['hybrid'][:12]}"


def test_show_takes_no_hybrid_on_the_command_line(run_with_a_hybrid_best, capsys):
    home, run_id, ids = run_with_a_hybrid_best
    main(["show", run_id, "--no-hybrid", "--json", "--store", str(home)])
    shown = json.loads(capsys.readouterr().out)
    assert shown["hybrids_left_out"] == [ids["hybrid"]] and shown["best"] is None


def test_optimize_many_takes_no_hybrid_into_every_search_and_its_summaries(run_with_a_hybrid_best, monkeypatch, capsys):
    """The searches themselves are stood in for (a finished run with a hybrid best): what is checked is
    that the flag reaches each search's configuration and each summary the command prints."""
    from agent.search import many

    home, run_id, ids = run_with_a_hybrid_best
    seen = []

    def searches(configs, store, **_):
        seen.extend(configs)
        outcomes = tuple(many.SearchOutcome(problem=c.problem, run_id=run_id, state="finished") for c in configs)
        return many.ManyResult(outcomes=outcomes, elapsed_s=0.0, cost_usd=0.0)

    monkeypatch.setattr(many, "run_many", searches)
    main(["optimize-many", "layernorm", "softmax", "--no-hybrid", "--device", "cpu", "--json", "--store", str(home)])
    printed = json.loads(capsys.readouterr().out)
    assert [c.no_hybrid for c in seen] == [True, True]
    assert [s["summary"]["hybrids_left_out"] for s in printed["searches"]] == [[ids["hybrid"]]] * 2
    assert all(s["summary"]["best"] is None for s in printed["searches"])


def test_the_search_never_picks_a_hybrid_under_no_hybrid(problem):
    r = result(problem, variant(1), gpu_fp())
    hybrid = r.model_copy(update=HYBRID)
    allowing = SimpleNamespace(config=SessionConfig(problem="layernorm"))
    excluding = SimpleNamespace(config=SessionConfig(problem="layernorm", no_hybrid=True))
    assert Session.rankable(allowing, hybrid) and Session.rankable(allowing, r)  # type: ignore[arg-type]
    assert not Session.rankable(excluding, hybrid) and Session.rankable(excluding, r)  # type: ignore[arg-type]


def test_a_promoted_hybrid_carries_its_ops_and_no_hybrid_refuses_it(tmp_path, problem):
    with Store.open(tmp_path / "store") as st:
        hybrid = result(problem, variant(1), gpu_fp()).model_copy(update=HYBRID)
        c = gpu_candidate(st, problem, variant(1), correctness=hybrid)
        with pytest.raises(PromotionRefused) as refused:
            promote(st, c.candidate_id, approved_by="alice", no_hybrid=True)
        assert st.promotion_history() == []
        (missing,) = refused.value.missing
        assert missing.startswith("hybrid: the correctness evaluation ")
        assert missing.endswith("saw PyTorch compute sum in forward, and --no-hybrid excludes hybrids")
        _approved, deployed = promote(st, c.candidate_id, approved_by="alice")
        evidence = PromotionEvidence.model_validate_json(deployed.evidence_json)
        assert (evidence.hybrid_ops, evidence.hybrid_device_fraction) == (("sum",), 0.25)
