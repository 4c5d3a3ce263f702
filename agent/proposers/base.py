"""The proposer contract: the session asks for candidates, a proposer returns sources with rationale.

A proposer never evaluates and never writes to the store; the session does both. It may be slow (an
LLM) or fail (a reply without code): failures come back as `ProposalError`s inside the batch result,
never as exceptions that end the session.
"""

from __future__ import annotations

import enum
from typing import Any, Optional, Protocol

from pydantic import BaseModel, ConfigDict, Field

from evaluation.records import EvalResult, ProblemInfo


class Action(str, enum.Enum):
    """What the tree policy asked for."""

    seed = "seed"  # the first candidate(s) of a run
    refine = "refine"  # improve the parent (best branch)
    sibling = "sibling"  # a different change from the parent's parent
    restart = "restart"  # start again from the seed configuration space
    repair = "repair"  # fix a parent that failed (llm proposer)


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class ParentInfo(Frozen):
    candidate_id: str
    source: str
    knobs: dict[str, Any] = Field(default_factory=dict)
    transformation_tags: tuple[str, ...] = ()
    result: Optional[EvalResult] = None  # its evaluation (diagnostics for repair/refine prompts)


class ProposeRequest(Frozen):
    problem: ProblemInfo
    device: str  # "cpu" | "cuda"
    arch: str  # "sm_90", "cpu", ...
    device_name: str
    action: Action
    parent: Optional[ParentInfo] = None
    n: int = 1  # how many candidates are wanted
    seen_sha256: frozenset[str] = frozenset()  # sources already evaluated in this run: never repeat
    context_text: str = ""  # rendered knowledge context (hardware, constraints, outcomes, failures)
    seed_hints: tuple[dict[str, Any], ...] = ()  # knob settings that worked before on similar devices
    rng_seed: int = 0
    # whether a hybrid (PyTorch compute beside the Triton kernels) can win this search: False under
    # --no-hybrid, where the lowering proposes no library contraction (agent/proposers/lowering/library.py)
    hybrids: bool = True


class Proposal(Frozen):
    source: str
    rationale: str
    transformation_tags: tuple[str, ...] = ()
    knobs: dict[str, Any] = Field(default_factory=dict)
    parent_id: Optional[str] = None
    template_name: Optional[str] = None  # prompt template (llm) or kernel template (template)
    template_sha256: Optional[str] = None
    llm_call_ids: tuple[str, ...] = ()


class ProposalError(Frozen):
    """A proposer attempt that produced no candidate (no code in reply, 429 after retries, timeout)."""

    kind: str  # "no_code" | "rate_limited" | "timeout" | "server_error" | "cost_limit" | "exhausted"
    message: str


class ProposeResult(Frozen):
    proposals: tuple[Proposal, ...] = ()
    errors: tuple[ProposalError, ...] = ()
    cost_usd: float = 0.0


class Proposer(Protocol):
    name: str

    def propose(self, request: ProposeRequest) -> ProposeResult: ...
