"""The llm proposer: any litellm model, prompts from prompts/*.j2, every call recorded.

Failure is normal here: a model answers prose, a server says 429 or 500, a reply arrives after the
timeout. Each of those is one recorded attempt (with its error), retried with exponential backoff,
and after the last attempt a `ProposalError` in the batch result; nothing here ends a session.
litellm is imported lazily (it costs seconds) and only after its cost map is pinned to the local copy.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import prompts
from agent.proposers.base import (
    Action,
    ParentInfo,
    Proposal,
    ProposalError,
    ProposeRequest,
    ProposeResult,
)
from agent.proposers.codeextract import extract_code, fenced_blocks
from evaluation.records import EvalResult, ProblemInfo
from store.records import LLMCall, utc_now

_TAGS = re.compile(r"^\s*\**tags\**\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)


def _litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def _classify(exc: Exception) -> tuple[str, bool]:
    """(ProposalError kind, retryable) for an exception raised by litellm.completion."""
    litellm = _litellm()
    if isinstance(exc, litellm.Timeout):
        return "timeout", True
    if isinstance(exc, litellm.RateLimitError):
        return "rate_limited", True
    status = getattr(exc, "status_code", None)
    if isinstance(exc, (litellm.InternalServerError, litellm.ServiceUnavailableError, litellm.BadGatewayError)) or (
        isinstance(status, int) and status >= 500
    ):
        return "server_error", True
    if isinstance(exc, litellm.APIConnectionError):
        return "connection_error", True
    return "client_error", False  # 400, 401, 404: asking again changes nothing


def diagnostics(result: EvalResult) -> dict[str, Any]:
    """What a repair prompt shows of an evaluation: the failing stage and the evidence, not the whole record."""
    failing = [
        {
            "case_id": s.case_id,
            "max_abs_error": s.max_abs_error,
            "max_rel_error": s.max_rel_error,
            "atol": s.atol,
            "rtol": s.rtol,
            "mismatch_count": s.mismatch_count,
            "numel": s.numel,
            "first_mismatch": s.first_mismatch.model_dump() if s.first_mismatch else None,
            "message": s.message,
        }
        for s in result.shape_results
        if not s.passed
    ][:4]
    pcts = [t.pct_of_ceiling for t in result.timing if t.pct_of_ceiling is not None]
    return {
        "status": result.status.value,
        "failed_stage": result.failed_stage.value if result.failed_stage else None,
        "error_class": result.error_class,
        "message": result.message,
        "failing_shapes": failing,
        "kernels": [k.model_dump() for k in result.kernels],
        "pct_of_ceiling": max(pcts) if pcts else None,
        "stderr_tail": result.stderr_tail[-2000:].strip(),
    }


def _parent_vars(parent: ParentInfo) -> dict[str, Any]:
    result = parent.result
    timing = []
    if result is not None:
        for t in result.timing:
            eager = next((s.ratio for s in t.speedups if s.baseline == "eager"), None)
            timing.append(
                {
                    "case_id": t.case_id,
                    "latency_ms_p50": t.candidate.latency_ms_p50,
                    "speedup": eager,
                    "pct_of_ceiling": t.pct_of_ceiling,
                }
            )
    return {
        "source": parent.source,
        "status": result.status.value if result is not None else "not evaluated",
        "timing": timing,
        "timing_note": (
            result.timing_note
            if result is not None and result.timing_note
            else "Not timed on this device: correctness only."
        ),
        "kernels": [k.model_dump() for k in result.kernels] if result is not None else [],
        "tags": list(parent.transformation_tags),
    }


def _problem_vars(problem: ProblemInfo) -> dict[str, Any]:
    return {
        "name": problem.name,
        "op_family": problem.op_family,
        "description": problem.description,
        "reference_source": Path(problem.source_path).read_text().rstrip() + "\n",
        "shapes": [c.case_id for c in problem.shape_cases],
        "dtypes": list(problem.dtypes),
        "tolerances": {d: (t.atol, t.rtol) for d, t in problem.tolerances.items() if d in problem.dtypes},
    }


def _rationale(reply: str) -> str:
    head = reply.split("```", 1)[0]
    head = _TAGS.sub("", head).strip()
    return " ".join(head.split())[:1000]


def _tags(reply: str) -> tuple[str, ...]:
    m = _TAGS.search(reply.split("```", 1)[0])
    if not m:
        return ()
    tags = [re.sub(r"[^a-z0-9_=.]+", "_", t.strip().strip("`").lower()).strip("_") for t in m.group(1).split(",")]
    return tuple(t for t in tags if t)[:8]


class LLMProposer:
    name = "llm"

    def __init__(
        self,
        model: str,
        *,
        api_base: Optional[str] = None,
        api_key: Optional[str] = None,
        run_id: Optional[str] = None,
        on_call: Optional[Callable[[LLMCall], None]] = None,
        timeout_s: float = 180.0,
        attempts: int = 3,
        backoff_s: float = 2.0,
        temperature: float = 0.7,
        max_tokens: int = 4096,
        max_cost_usd: Optional[float] = None,
        spent_usd: float = 0.0,
    ):
        self.model = model
        self.api_base = api_base
        # An OpenAI-compatible server (vLLM) needs some key; a hosted provider reads its own variable.
        self.api_key = api_key if api_key is not None else ("none" if api_base else None)
        self.run_id = run_id
        self.on_call = on_call
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self.spent_usd = spent_usd

    # -- prompts ---------------------------------------------------------------------------------
    def _user_prompt(self, request: ProposeRequest) -> tuple[str, dict[str, Any]]:
        common = {
            "problem": _problem_vars(request.problem),
            "device": {"device_name": request.device_name, "arch": request.arch, "kind": request.device},
            "context_text": request.context_text,
            "action": request.action.value,
        }
        parent = request.parent
        if request.action is Action.repair and parent is not None and parent.result is not None:
            return "repair", {**common, "parent": _parent_vars(parent), "diag": diagnostics(parent.result)}
        if request.action in (Action.refine, Action.sibling) and parent is not None:
            return "refine", {**common, "parent": _parent_vars(parent)}
        seed = request.problem.seed_path
        return "propose", {**common, "seed_source": Path(seed).read_text() if seed else ""}

    def messages(self, request: ProposeRequest) -> tuple[str, str, list[dict[str, str]]]:
        """(template name, combined template sha256, chat messages) for one request."""
        name, variables = self._user_prompt(request)
        system_text, system_sha = prompts.render("system")
        user_text, user_sha = prompts.render(name, **variables)
        sha = hashlib.sha256(f"system:{system_sha}\n{name}:{user_sha}".encode()).hexdigest()
        return name, sha, [{"role": "system", "content": system_text}, {"role": "user", "content": user_text}]

    # -- calls -----------------------------------------------------------------------------------
    def _record(self, **fields) -> LLMCall:
        call = LLMCall(call_id=uuid.uuid4().hex, run_id=self.run_id, model=self.model, created_at=utc_now(), **fields)
        if self.on_call is not None:
            self.on_call(call)
        return call

    def complete(self, template: str, sha: str, messages: list[dict[str, str]], *, need_code: bool = True):
        """Ask until a usable reply or the attempts run out: (reply text or None, calls, error or None)."""
        litellm = _litellm()
        rendered = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)
        calls: list[LLMCall] = []
        error: Optional[ProposalError] = None
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                time.sleep(self.backoff_s * 2 ** (attempt - 2))
            started = time.perf_counter()
            try:
                response = litellm.completion(
                    model=self.model,
                    messages=messages,
                    api_base=self.api_base,
                    api_key=self.api_key,
                    timeout=self.timeout_s,
                    temperature=self.temperature,
                    max_tokens=self.max_tokens,
                    num_retries=0,
                    max_retries=0,
                    stream=False,
                )
            except Exception as exc:  # litellm maps every provider failure onto its exception types
                kind, retryable = _classify(exc)
                message = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                calls.append(
                    self._record(
                        template_name=template,
                        template_sha256=sha,
                        rendered_prompt=rendered,
                        duration_ms=(time.perf_counter() - started) * 1000.0,
                        error=message,
                        attempt=attempt,
                    )
                )
                error = ProposalError(kind=kind, message=message)
                if not retryable:
                    break
                continue
            duration_ms = (time.perf_counter() - started) * 1000.0
            text = response.choices[0].message.content or ""
            try:
                cost = float(litellm.completion_cost(completion_response=response))
            except Exception:  # unknown model (a local vLLM): the cost is not known, not zero
                cost = None
            self.spent_usd += cost or 0.0
            usage = getattr(response, "usage", None)
            no_code = need_code and extract_code(text) is None
            calls.append(
                self._record(
                    template_name=template,
                    template_sha256=sha,
                    rendered_prompt=rendered,
                    response_text=text,
                    resolved_model=getattr(response, "model", None),
                    prompt_tokens=getattr(usage, "prompt_tokens", None),
                    completion_tokens=getattr(usage, "completion_tokens", None),
                    cost_usd=cost,
                    duration_ms=duration_ms,
                    error=(
                        "no code in reply"
                        + (
                            f" ({len(fenced_blocks(text))} fenced blocks, none defines ModelNew)"
                            if fenced_blocks(text)
                            else ""
                        )
                    )
                    if no_code
                    else None,
                    attempt=attempt,
                )
            )
            if no_code:
                error = ProposalError(kind="no_code", message=calls[-1].error or "no code in reply")
                if self._over_budget():
                    break
                continue
            return text, calls, None
        return None, calls, error

    def _over_budget(self) -> bool:
        return self.max_cost_usd is not None and self.spent_usd >= self.max_cost_usd

    def propose(self, request: ProposeRequest) -> ProposeResult:
        proposals: list[Proposal] = []
        errors: list[ProposalError] = []
        spent_before = self.spent_usd
        for _ in range(request.n):
            if self._over_budget():
                errors.append(
                    ProposalError(
                        kind="cost_limit", message=f"spent ${self.spent_usd:.4f} of the ${self.max_cost_usd} ceiling"
                    )
                )
                break
            template, sha, messages = self.messages(request)
            text, calls, error = self.complete(template, sha, messages)
            if text is None:
                errors.append(error or ProposalError(kind="no_code", message="no usable reply"))
                continue
            proposals.append(
                Proposal(
                    source=extract_code(text) or "",
                    rationale=_rationale(text),
                    transformation_tags=_tags(text),
                    template_name=template,
                    template_sha256=sha,
                    llm_call_ids=tuple(c.call_id for c in calls),
                )
            )
        return ProposeResult(proposals=tuple(proposals), errors=tuple(errors), cost_usd=self.spent_usd - spent_before)

    def explain(
        self, *, source: str, parent_source: str, result_line: str, op_family: str, device_name: str, arch: str
    ) -> Optional[str]:
        """Three sentences on what a change did, for the search log (None if the model did not answer)."""
        text, sha = prompts.render(
            "explain",
            source=source,
            parent_source=parent_source,
            result_line=result_line,
            op_family=op_family,
            device_name=device_name,
            arch=arch,
        )
        reply, _, _ = self.complete("explain", sha, [{"role": "user", "content": text}], need_code=False)
        return reply.strip() if reply else None
