"""What is live, rollback to the previous known-good kernel, append-only history, stale evidence."""

from __future__ import annotations

import json
import shutil

import pytest
from test_lifecycle_support import gpu_candidate, gpu_fp, result, variant

import evaluation
from agent.cli import main
from agent.lifecycle.evidence import PromotionEvidence
from agent.lifecycle.gate import LifecycleError
from agent.lifecycle.registry import FlagNote, deployed_entries, flag, promote, rollback
from agent.lifecycle.revalidate import freshness
from store import Store
from store.records import PromotionState


@pytest.fixture(scope="module")
def problem():
    return evaluation.load_problem("layernorm", device="cuda")


@pytest.fixture(scope="module")
def history_template(tmp_path_factory, problem):
    """Kernels A, B, C promoted in that order for layernorm on sm_90 (C is live), built once."""
    home = tmp_path_factory.mktemp("registry") / "store"
    with Store.open(home) as store:
        ids = []
        for n, who in ((1, "alice"), (2, "bob"), (3, "carol")):
            c = gpu_candidate(store, problem, variant(n))
            promote(store, c.candidate_id, approved_by=who)
            ids.append(c.candidate_id)
    return home, ids


@pytest.fixture
def home(tmp_path, history_template):
    """A private copy of the template store, so each test changes its own history."""
    shutil.copytree(history_template[0], tmp_path / "store")
    return tmp_path / "store"


@pytest.fixture
def three(home, history_template):
    return history_template[1]


def three_evidence_ranges(home) -> str:
    with Store.open(home) as store:
        (entry,) = deployed_entries(store)
    return ", ".join(f"{k} {r.min}..{r.max}" for k, r in entry.evidence.assumptions.shape_range.items())


def live(store) -> str | None:
    (entry,) = deployed_entries(store)
    return entry.candidate_id


def test_deployed_shows_the_latest_promotion_with_its_approver_and_evidence(home, three):
    with Store.open(home) as store:
        (entry,) = deployed_entries(store)
        deployed_events = [e for e in store.promotion_history() if e.state is PromotionState.deployed]
    assert (entry.op, entry.arch, entry.candidate_id) == ("layernorm", "sm_90", three[2])
    assert entry.approved_by == "carol" and entry.since == deployed_events[-1].created_at
    assert entry.rollback_target == three[1] and entry.known_good == tuple(three)
    assert entry.evidence is not None and entry.evidence.speedup == pytest.approx(1.4)


def test_rollback_walks_back_through_known_good_kernels_to_the_reference(home, three):
    with Store.open(home) as store:
        first = rollback(store, "layernorm", "sm_90", by="dave", reason="p99 regression")
        assert (first.candidate_id, first.previous_candidate_id) == (three[1], three[2])
        assert (first.state, first.actor, first.note) == (
            PromotionState.rolled_back,
            "dave",
            "p99 regression",
        )
        assert live(store) == three[1]
        (entry,) = deployed_entries(store)
        assert entry.approved_by == "bob" and entry.changed_by == "dave" and entry.since == first.created_at
        assert entry.evidence.candidate_id == three[1]  # the restored kernel keeps its own evidence

        rollback(store, "layernorm", "sm_90", by="dave")
        assert live(store) == three[0]
        to_reference = rollback(store, "layernorm", "sm_90", by="dave")
        assert to_reference.candidate_id is None and live(store) is None
        with pytest.raises(LifecycleError, match="the reference is already live"):
            rollback(store, "layernorm", "sm_90", by="dave")


def test_rollback_appends_rows_and_never_changes_earlier_ones(home, three):
    with Store.open(home) as store:
        before = store.promotion_history()
        rollback(store, "layernorm", "sm_90", by="dave", reason="bad")
        after = store.promotion_history()
    assert len(after) == len(before) + 1 and after[: len(before)] == before
    assert [e.state.value for e in after] == ["approved", "deployed"] * 3 + ["rolled_back"]


def test_a_rolled_back_kernel_is_not_a_known_good_target_later(home, problem, three):
    with Store.open(home) as store:
        rollback(store, "layernorm", "sm_90", by="dave")  # C is out, B is live
        d = gpu_candidate(store, problem, variant(4))
        _a, deployed = promote(store, d.candidate_id, approved_by="erin")
        assert deployed.previous_candidate_id == three[1]
        back = rollback(store, "layernorm", "sm_90", by="dave")
        assert back.candidate_id == three[1]  # not C, which was rolled back before


def test_a_flagged_kernel_is_skipped_as_rollback_target(home, three):
    with Store.open(home) as store:
        entries = {e.candidate_id: e for e in deployed_entries(store)}
        live_entry = entries[three[2]]
        # B fails revalidation while C is live: a rollback of C must skip B
        flagged_b = live_entry.model_copy(update={"candidate_id": three[1]})
        flag(store, flagged_b, FlagNote(verdict="failed", reason="incorrect on M=1", eval_id=None), by="ci")
        assert deployed_entries(store)[0].rollback_target == three[0]
        back = rollback(store, "layernorm", "sm_90", by="dave")
        assert back.candidate_id == three[0]


def test_rollback_of_an_unknown_op_is_a_clear_error(home, three):
    with (
        Store.open(home) as store,
        pytest.raises(LifecycleError, match="no promotion history for softmax on sm_90"),
    ):
        rollback(store, "softmax", "sm_90", by="dave")


def test_rollback_cli_records_who_and_why_and_history_lists_it(home, three, capsys):
    main(
        [
            "rollback",
            "layernorm",
            "--device",
            "sm_90",
            "--by",
            "dave",
            "--reason",
            "p99",
            "--store",
            str(home),
            "--json",
        ]
    )
    event = json.loads(capsys.readouterr().out)
    assert (event["state"], event["actor"], event["note"]) == ("rolled_back", "dave", "p99")
    assert event["candidate_id"] == three[1]
    main(["history", "layernorm", "--device", "sm_90", "--store", str(home), "--json"])
    events = json.loads(capsys.readouterr().out)["events"]
    assert [e["state"] for e in events][-1] == "rolled_back" and len(events) == 7


def test_deployed_cli_json_is_one_object_marking_other_device_evidence_unverifiable(home, three, capsys):
    main(["deployed", "--store", str(home), "--json"])
    out = json.loads(capsys.readouterr().out)
    (row,) = out["deployed"]
    assert row["candidate_id"] == three[2] and row["approved_by"] == "carol"
    assert out["current_env"]["arch"] == "cpu"
    assert row["freshness"] == "not verifiable here (this machine is cpu)"


def test_deployed_and_history_name_the_live_kernel_and_its_approver_at_80_columns(home, three, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    main(["deployed", "--store", str(home)])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    text = " ".join(out.split())  # lines wrap between words at 80 columns
    assert text.startswith(f"layernorm on sm_90: {three[2][:12]} since ") and "approved by carol" in text
    assert "1.40x [1.30, 1.50] vs eager" in text
    ranges = three_evidence_ranges(home)
    assert ranges in text and "evidence: not verifiable here (this machine is cpu)" in text
    main(["history", "layernorm", "--device", "sm_90", "--store", str(home)])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()[:2] == "20"]
    assert [r[2] for r in rows] == ["approved", "deployed"] * 3  # when is two words (date, time)


def test_freshness_calls_evidence_from_another_compiler_stale(home, problem, three):
    with Store.open(home) as store:
        (entry,) = deployed_entries(store)
    assert freshness(entry, gpu_fp()) == "current"
    assert freshness(entry, gpu_fp(triton_version="3.5.0")) == "stale evidence: triton 3.4.0 -> 3.5.0"
    assert freshness(entry, gpu_fp(driver_version="580.1")) == "stale evidence: driver 575.57.08 -> 580.1"


def test_a_passing_revalidation_on_the_new_environment_makes_evidence_current_again(home, problem, three):
    from test_lifecycle_support import timing

    with Store.open(home) as store:
        (entry,) = deployed_entries(store)
    newer = gpu_fp(triton_version="3.5.0")
    good = result(problem, variant(3), newer, timed=timing(problem, 1.38, 1.3, 1.46))
    slow = result(problem, variant(3), newer, timed=timing(problem, 1.05, 1.0, 1.1))
    assert freshness(entry, newer, [slow]).startswith("stale evidence")
    assert freshness(entry, newer, [good]) == f"revalidated on this environment at {good.started_at}"


def test_evidence_json_round_trips_through_the_store(home, three):
    with Store.open(home) as store:
        deployed = [e for e in store.promotion_history() if e.state is PromotionState.deployed]
    ev = PromotionEvidence.model_validate_json(deployed[0].evidence_json)
    assert ev.candidate_id == three[0] and ev.env.triton_version == "3.4.0"
