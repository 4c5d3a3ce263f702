"""The first seed request of a session carries the seed hints of past outcomes (issue 11).

The session used to read the hints before building the knowledge context, so the first `seed`
request of every process went out without them. A real store holds one measured outcome; a stub
proposer records what it is asked and ends the search at once.
"""

import json
import textwrap

from agent.proposers.base import Action, ProposalError, ProposeResult
from agent.search.session import SessionConfig, start
from store import Store
from store.records import CandidateRecord, OutcomeRecord, RunRecord, StopRule

WINNING_KNOBS = {
    "schedule": "lowering",
    "fuse": {"epilogue": True, "rows": True, "siblings": True},
    "groups": [{"kind": "row", "rows": 4, "single_max": 8192, "rblock": 1024, "num_warps": 8}],
}

PROBLEM = textwrap.dedent("""
    import torch
    import torch.nn as nn

    OP_FAMILY = "hinted_rowsum"
    N = 64

    class Model(nn.Module):
        def forward(self, x):
            return x.sum(dim=1)

    def get_inputs():
        return [torch.randn(N, N)]

    def get_init_inputs():
        return []
""")


class RecordingProposer:
    name = "template"

    def __init__(self):
        self.requests = []

    def propose(self, request):
        self.requests.append(request)
        return ProposeResult(errors=(ProposalError(kind="exhausted", message="stub: nothing to offer"),))


def _past_outcome(store) -> None:
    store.create_run(
        RunRecord(
            run_id="past",
            problem_id="p-old",
            problem_name="old",
            op_family="hinted_rowsum",
            device="cpu",
            arch="cpu",
            env_id="env",
            proposer="template",
            seed=0,
            stop_rule=StopRule(max_evaluations=1),
            started_at="2026-11-01T00:00:00+00:00",
        )
    )
    source = "# a past winner\nimport triton\n"
    from evaluation.records import source_sha256

    cid = source_sha256(source)
    store.add_candidate(
        CandidateRecord(
            candidate_id=cid,
            run_id="past",
            generation=0,
            proposer="template",
            knobs_json=json.dumps(WINNING_KNOBS),
            source=source,
            created_at="2026-11-01T00:00:00+00:00",
        )
    )
    store.add_outcome(
        OutcomeRecord(
            outcome_id="o-past",
            op_family="hinted_rowsum",
            problem_id="p-old",
            device_name="cpu (triton interpreter)",
            arch="cpu",
            shape_bucket="N=64..127",
            dtype="float32",
            transformation="g0.rows=4",
            candidate_id=cid,
            baseline="eager",
            speedup=1.8,
            speedup_low=1.6,
            speedup_high=2.0,
            status="passed",
            triton_version="3.9",
            torch_version="2.13",
            summary="row kernel with 4 rows per program: 1.8x vs eager.",
            created_at="2026-11-01T00:00:00+00:00",
        )
    )


def test_the_first_seed_request_of_a_session_carries_the_stored_hints(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")  # retrieval by SQL and BM25: no embedding model needed
    problem = tmp_path / "hinted_rowsum.py"
    problem.write_text(PROBLEM)
    proposer = RecordingProposer()
    with Store.open(tmp_path / "home") as store:
        _past_outcome(store)
        config = SessionConfig(problem=str(problem), device="cpu", budget=1, trials=1)
        start(config, store, proposer=proposer)

    assert proposer.requests, "the session never asked the proposer"
    first = proposer.requests[0]
    assert first.action is Action.seed
    assert first.seed_hints == (WINNING_KNOBS,)
