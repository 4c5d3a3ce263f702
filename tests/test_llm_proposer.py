"""The llm proposer against a real HTTP server: faults are retried, recorded, and never fatal."""

import hashlib

import pytest
from fake_openai import (
    SEED_SOURCE,
    FakeOpenAI,
    Reply,
    good_kernel,
    malformed,
    prose,
    rate_limited,
    server_error,
    slow,
)

import prompts
from agent.proposers.base import Action, ParentInfo, ProposeRequest
from agent.proposers.llm import LLMProposer
from evaluation.records import (
    EvalResult,
    Fingerprint,
    KernelInfo,
    Mismatch,
    ShapeResult,
    Stage,
    Status,
)

PRICED = "openai/gpt-4o-mini"  # in litellm's local cost map: cost is computed from the reply's usage


@pytest.fixture(scope="module")
def problem():
    import evaluation

    return evaluation.load_problem("layernorm", device="cpu")


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s


def proposer(server, calls, **kw):
    kw = {"backoff_s": 0.01, "timeout_s": 5.0, "attempts": 3, **kw}
    return LLMProposer(kw.pop("model", PRICED), api_base=server.url, run_id="run-1", on_call=calls.append, **kw)


def request(problem, action=Action.seed, parent=None, n=1):
    return ProposeRequest(
        problem=problem,
        device="cpu",
        arch="cpu",
        device_name="cpu (triton interpreter)",
        action=action,
        parent=parent,
        n=n,
        context_text="- [H200 datasheet] 4.8 TB/s HBM3e",
    )


def test_retries_a_429_and_a_500_then_returns_the_kernel(server, problem):
    calls = []
    server.enqueue(rate_limited(), server_error(), good_kernel())
    result = proposer(server, calls).propose(request(problem))
    assert [p.source for p in result.proposals] == [SEED_SOURCE]
    assert result.errors == ()
    assert [c.attempt for c in calls] == [1, 2, 3]
    assert calls[0].error.startswith("RateLimitError") and calls[1].error.startswith("InternalServerError")
    assert calls[2].error is None and calls[2].response_text.startswith("One row per program")
    assert (calls[2].prompt_tokens, calls[2].completion_tokens, calls[2].resolved_model) == (100, 50, "fake-model")
    assert all(c.run_id == "run-1" and c.model == PRICED for c in calls)
    assert result.proposals[0].llm_call_ids == tuple(c.call_id for c in calls)


def test_records_template_name_hash_and_the_rendered_text_that_was_sent(server, problem):
    calls = []
    server.enqueue(good_kernel())
    result = proposer(server, calls).propose(request(problem))
    sent = server.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert "class Model(nn.Module)" in sent[1]["content"]  # the reference source
    assert "4.8 TB/s HBM3e" in sent[1]["content"]  # the knowledge context
    assert "A simple correct kernel for this problem" in sent[1]["content"]  # the shipped seed
    expected = hashlib.sha256(
        f"system:{prompts.template_sha256('system')}\npropose:{prompts.template_sha256('propose')}".encode()
    ).hexdigest()
    assert (calls[0].template_name, calls[0].template_sha256) == ("propose", expected)
    assert calls[0].rendered_prompt == f"[system]\n{sent[0]['content']}\n\n[user]\n{sent[1]['content']}"
    assert (result.proposals[0].template_name, result.proposals[0].template_sha256) == ("propose", expected)


def test_a_reply_without_code_is_recorded_with_its_cost_and_retried(server, problem):
    calls = []
    server.enqueue(prose(), good_kernel())
    result = proposer(server, calls).propose(request(problem))
    assert len(result.proposals) == 1
    assert calls[0].error == "no code in reply" and "fuse the mean" in calls[0].response_text
    assert calls[0].cost_usd == pytest.approx(calls[1].cost_usd) and calls[0].cost_usd > 0
    assert result.cost_usd == pytest.approx(calls[0].cost_usd + calls[1].cost_usd)


def test_a_reply_past_the_timeout_is_recorded_and_retried(server, problem):
    calls = []
    server.enqueue(slow(1.5), good_kernel())
    result = proposer(server, calls, timeout_s=0.4).propose(request(problem))
    assert len(result.proposals) == 1
    assert calls[0].error.startswith("Timeout") and calls[0].duration_ms >= 400
    assert calls[1].error is None


def test_after_the_last_attempt_the_batch_carries_a_proposal_error(server, problem):
    calls = []
    server.enqueue(server_error(), server_error(), server_error())
    result = proposer(server, calls).propose(request(problem))
    assert result.proposals == ()
    assert [e.kind for e in result.errors] == ["server_error"]
    assert len(calls) == 3 and all(c.error for c in calls)


def test_a_client_error_is_not_retried(server, problem):
    calls = []
    server.enqueue(Reply(status=400, content="bad request: unknown parameter"))
    result = proposer(server, calls).propose(request(problem))
    assert [e.kind for e in result.errors] == ["client_error"]
    assert len(calls) == 1 and len(server.requests) == 1


def test_malformed_code_is_passed_on_for_the_evaluator(server, problem):
    calls = []
    server.enqueue(malformed())
    result = proposer(server, calls).propose(request(problem))
    assert "def forward(self x):" in result.proposals[0].source
    assert calls[0].error is None


def test_an_unknown_model_has_no_cost_rather_than_zero(server, problem):
    calls = []
    server.enqueue(good_kernel())
    result = proposer(server, calls, model="openai/local-vllm-model").propose(request(problem))
    assert calls[0].cost_usd is None
    assert result.cost_usd == 0.0 and len(result.proposals) == 1


def test_the_cost_ceiling_stops_further_calls(server, problem):
    calls = []
    server.enqueue(good_kernel(), good_kernel())
    result = proposer(server, calls, max_cost_usd=1e-9).propose(request(problem, n=2))
    assert len(result.proposals) == 1 and [e.kind for e in result.errors] == ["cost_limit"]
    assert len(server.requests) == 1


def test_the_repair_prompt_carries_the_evaluators_diagnostics(server, problem):
    failed = EvalResult(
        status=Status.incorrect,
        failed_stage=Stage.correctness,
        error_class="Mismatch",
        message="M=7,N=97|float32: 12 of 679 elements outside tolerance",
        candidate_sha256="c" * 64,
        problem_id=problem.problem_id,
        problem_name="layernorm",
        device="cpu",
        shape_results=(
            ShapeResult(
                case_id="M=7,N=97|float32",
                params={"M": 7, "N": 97},
                dtype="float32",
                passed=False,
                trials=2,
                seeds=(1, 2),
                atol=1e-4,
                rtol=1e-4,
                max_abs_error=0.75,
                max_rel_error=3.0,
                mismatch_count=12,
                numel=679,
                first_mismatch=Mismatch(index=(3, 96), expected=1.5, actual=0.25),
            ),
        ),
        kernels=(KernelInfo(name="_layernorm_fwd", n_regs=40, n_spills=7, shared_bytes=0),),
        fingerprint=Fingerprint(
            device_kind="cpu",
            device_name="cpu",
            arch="cpu",
            triton_version="3.9",
            torch_version="2.13",
            python_version="3.11",
            kernelscout_version="0.1.0",
        ),
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
    )
    parent = ParentInfo(candidate_id="c" * 64, source="class ModelNew: ...  # PARENT", result=failed)
    calls = []
    server.enqueue(good_kernel())
    result = proposer(server, calls).propose(request(problem, action=Action.repair, parent=parent))
    user = server.requests[0]["messages"][1]["content"]
    assert "# PARENT" in user
    assert "Status: incorrect at stage correctness" in user and "Error class: Mismatch" in user
    assert "12 of 679 elements outside tolerance" in user
    assert "first mismatch at index (3, 96): expected 1.5, got 0.25" in user
    assert "max abs error 0.75" in user and "spills 7" in user
    assert calls[0].template_name == "repair" and result.proposals[0].template_name == "repair"


def test_explain_renders_its_prompt_and_returns_the_reply(server, problem):
    calls = []
    server.enqueue(Reply(content="Two rows per program halve the launch count."))
    text = proposer(server, calls).explain(
        source="NEW",
        parent_source="OLD",
        result_line="passed, 1.3x",
        op_family="layernorm",
        device_name="H200",
        arch="sm_90",
    )
    assert text == "Two rows per program halve the launch count."
    assert calls[0].template_name == "explain" and "NEW" in calls[0].rendered_prompt
