"""The offline proposer: candidates are points of a kernel family's knob space, rendered from jinja2 templates.

No model is asked anything, so a search runs without a network and every candidate is reproducible from
(template, knobs). The hand-written families are specialised schedules, tuned for LLM shapes, and are
preferred when a reference matches one; any other reference is lowered from its traced graph
(agent/proposers/lowering: fusion groups, one generic kernel per schedule kind) and searched over the
lowering's knobs and fusion switches. Each action is a way to pick configurations: seed takes past winners on similar devices
(`seed_hints`) then the family default; refine continues along the knob the parent just changed, then
tries its other neighbours (first the moves its measured registers, spills and % of copy ceiling argue
for: `knobs.steered_moves`); sibling prefers knobs the parent did not just move; restart jumps to a random
configuration far from the parent. A configuration whose source was already evaluated is never returned.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from importlib import resources
from typing import Any, Iterable, Iterator, Optional

import jinja2

from agent.proposers import knobs as K
from agent.proposers.base import Action, Proposal, ProposalError, ProposeRequest, ProposeResult
from agent.proposers.family import FamilyMatch, FamilyMatchError, match_family, param_init_expr
from evaluation.records import ProblemInfo, source_sha256

_PARTIALS = ("_module.j2", "_activation.j2")


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("agent.proposers", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


@functools.lru_cache(maxsize=None)
def template_sha256(template: str) -> str:
    """Hash of the family template followed by the partials it includes: what decides the generated text."""
    root = resources.files("agent.proposers") / "templates"
    h = hashlib.sha256()
    for name in (f"{template}.j2",) + _PARTIALS:
        h.update((root / name).read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=64)
def _match_cached(source_path: str, source_sha: str) -> FamilyMatch:
    del source_sha  # part of the cache key only: an edited file is traced again
    return match_family(source_path)


def match_for(problem: ProblemInfo) -> FamilyMatch:
    """The family match of a problem; for a built-in one its OP_FAMILY must agree with the tracer."""
    match = _match_cached(problem.source_path, problem.source_sha256)
    if problem.builtin and problem.op_family not in ("", "unknown") and problem.op_family != match.family:
        raise FamilyMatchError(
            f"{problem.name}: OP_FAMILY says {problem.op_family} but its ops trace to "
            f"{match.family} ({', '.join(match.ops_seen)})"
        )
    return match


# ---------------------------------------------------------------- rendering


def _module_context(match: FamilyMatch) -> dict[str, Any]:
    holders: list[str] = []
    params = []
    for p in match.params:
        parts = p.name.split(".")
        for i in range(1, len(parts)):
            holder = ".".join(parts[:i])
            if holder not in holders:
                holders.append(holder)
        owner = "self" + "".join(f".{x}" for x in parts[:-1])
        params.append({"owner": owner, "leaf": parts[-1], "expr": param_init_expr(p), "is_buffer": p.is_buffer})
    return {"holders": holders, "params": params, "init_signature": match.init_signature, "inputs": list(match.inputs)}


def _ref(name: Optional[str]) -> Optional[str]:
    return None if name is None else "self." + name


def _family_context(match: FamilyMatch) -> dict[str, Any]:
    r, c, fam = match.roles, match.constants, match.family
    ctx: dict[str, Any] = {"op": fam}
    if K.TEMPLATE_OF_FAMILY[fam] == "rowwise":
        w, b = _ref(r.get("weight")), _ref(r.get("bias"))
        ctx.update(
            x=r.get("x") or r.get("logits"),
            residual=r.get("residual"),
            targets=r.get("targets"),
            has_weight=w is not None,
            has_bias=b is not None,
            eps=repr(float(c.get("eps", 0.0))),
            norm_ndim=int(c.get("norm_ndim", 1)),
            ignore_index=int(c.get("ignore_index", -100)),
            reduction=c.get("reduction", "none"),
        )
        if fam == "cross_entropy":
            ptrs, launch = ["X", "T", "Y"], ["x2", "t", "y"]
        else:
            ptrs, launch = ["X"], ["x2"]
            if fam == "add_rmsnorm":
                ptrs, launch = ptrs + ["R"], launch + ["r2"]
            if w:
                ptrs, launch = ptrs + ["W"], launch + [w]
            if b:
                ptrs, launch = ptrs + ["B"], launch + [b]
            if fam == "add_rmsnorm":
                ptrs, launch = ptrs + ["H"], launch + ["h"]
            ptrs, launch = ptrs + ["Y"], launch + ["y"]
        ctx.update(ptrs=", ".join(ptrs), launch_ptrs=", ".join(launch))
        if fam == "add_rmsnorm":
            shape = f".reshape({ctx['x']}.shape)"
            ctx["outputs"] = ", ".join(f"{o}{shape}" for o in c.get("outputs", ["y", "h"]))
    elif fam in ("swiglu", "geglu"):
        ctx.update(a=r["a"], b=r["b"], activation="silu" if fam == "swiglu" else c.get("activation", "gelu_tanh"))
    elif fam == "row_sum":
        ctx.update(x=r["x"], keepdim=bool(c.get("keepdim", False)))
    elif fam == "attention":
        scale = c.get("scale")
        ctx.update(q=r["q"], k_in=r["k"], v=r["v"], causal=bool(c.get("is_causal")), scale=repr(scale))
    else:
        ctx.update(
            x=r["x"],
            weight=_ref(r["weight"]),
            bias=_ref(r.get("bias")),
            activation=c.get("activation", "none"),
            weight_layout=c.get("weight_layout", "nk"),
        )
    return ctx


def render(match: FamilyMatch, knobs: dict) -> str:
    """The complete candidate file for one configuration (knobs are validated and normalized first)."""
    template = K.TEMPLATE_OF_FAMILY[match.family]
    knobs = K.validate(template, knobs)
    header = (
        f"{match.family} candidate from kernelscout's template proposer ({template}.j2).\n\n"
        f"knobs: {json.dumps(knobs, sort_keys=True)}"
    )
    ctx = {"header": header, "k": knobs, **_module_context(match), **_family_context(match)}
    return _env().get_template(f"{template}.j2").render(**ctx)


# ---------------------------------------------------------------- choosing configurations


def _shape_note(problem: ProblemInfo) -> str:
    cases = [c for c in problem.shape_cases if "representative" in c.tags] or list(problem.shape_cases)
    if not cases:
        return ""
    params = ",".join(f"{k}={v}" for k, v in cases[0].params.items())
    return f" (shapes like {params})"


_FP32_GEMM_NOTE = (
    "; the matmul family template is tuned for 16-bit operands (in float32 its tiles overflow shared memory "
    "and its dot is TF32): lowered instead"
)


def _fp32_gemm_on_gpu(template: str, request: ProposeRequest) -> bool:
    """A matmul-family problem with a float32 case, proposed for a GPU, goes to the lowering: the family
    template's default tiles (128x256x64, 3 stages) need ~288 KB of shared memory in float32 (an H100 allows
    227 KB) and its `tl.dot` is TF32 for float32 operands, while the lowering seeds GEMMs with float32-aware
    tiles and an explicit dot precision (ieee / tf32x3). Any declared float32 dtype counts, since a candidate
    is judged on every declared dtype. On "cpu" nothing changes: the Triton interpreter has no shared-memory
    limit and no TF32, and the CPU tests pin the family path."""
    problem = request.problem
    # A problem that allows TF32 for its float32 matmuls (FLOAT32_MATMUL_PRECISION = "high", as the built-in
    # matmul_epilogue does) has the family template's dot within its policy: it keeps the family template.
    return (
        template == "matmul"
        and request.device != "cpu"
        and "float32" in problem.dtypes
        and problem.float32_matmul_precision == "highest"
    )


def _seed_default(template: str, request: ProposeRequest) -> tuple[dict, str]:
    """The template's default configuration for this request, and what was changed from it. Float32
    attention proposed for a GPU starts from three-TF32-pass dots: on an H100 the IEEE seed took 92.5 ms on
    minGPT's attention (B128 H8 L512 D96, causal), 54x PyTorch's float32 SDPA (1.72 ms), its dots on FMAs
    rather than the tensor cores. Three TF32 passes carry about float32's product error; the judge still
    holds them to the attention tolerance against float64. The IEEE configuration stays among the seed's
    siblings, one precision move away."""
    default = K.default_knobs(template)
    if template == "attention" and request.device != "cpu" and "float32" in request.problem.dtypes:
        return {**default, "precision": "tf32x3"}, ", with precision=tf32x3 for float32 on a GPU"
    return default, ""


def _hint_knobs(hint: Any) -> Any:
    return hint.get("knobs") if isinstance(hint, dict) and isinstance(hint.get("knobs"), dict) else hint


class TemplateProposer:
    """Proposer over jinja2 kernel templates; deterministic for a given request (rng_seed included)."""

    name = "template"

    def __init__(self, schedule_hints=None):
        # (schedule kinds, arch) -> knob dicts of past wins with those kinds, from any op family
        # (Store.schedule_hints); the session passes its store's, tests may leave it out
        self.schedule_hints = schedule_hints

    def propose(self, request: ProposeRequest) -> ProposeResult:
        try:
            match = match_for(request.problem)
        except FamilyMatchError:
            return self._lowered(request)
        template = K.TEMPLATE_OF_FAMILY[match.family]
        if _fp32_gemm_on_gpu(template, request):
            routed = self._lowered(request, extra_note=_FP32_GEMM_NOTE)
            if routed.proposals or not any(e.kind == "unsupported" for e in routed.errors):
                return routed
            # the lowering cannot take this reference: the family template, exactly as without the routing
        return self._family(match, template, request)

    def _family(self, match: FamilyMatch, template: str, request: ProposeRequest) -> ProposeResult:
        note = _shape_note(request.problem)
        if request.action is Action.seed:
            candidates = self._seed(template, request)
        else:
            candidates = self._from_parent(template, request)
        proposals: list[Proposal] = []
        seen = set(request.seen_sha256)
        parent_id = request.parent.candidate_id if request.parent and request.action is not Action.seed else None
        for knobs, rationale, tags in candidates:
            source = render(match, knobs)
            sha = source_sha256(source)
            if sha in seen:
                continue
            seen.add(sha)
            proposals.append(
                Proposal(
                    source=source,
                    rationale=rationale + note,
                    transformation_tags=tags,
                    knobs=knobs,
                    parent_id=parent_id,
                    template_name=f"{template}.j2",
                    template_sha256=template_sha256(template),
                )
            )
            if len(proposals) >= request.n:
                break
        errors: tuple[ProposalError, ...] = ()
        if len(proposals) < request.n:
            errors = (
                ProposalError(
                    kind="exhausted",
                    message=(
                        f"{request.action.value}: {len(proposals)} of {request.n} new configuration(s) of the {template} "
                        f"template; every other one in reach was already evaluated"
                    ),
                ),
            )
        return ProposeResult(proposals=tuple(proposals), errors=errors)

    def _lowered(self, request: ProposeRequest, extra_note: str = "") -> ProposeResult:
        """No family matches (or a float32 GEMM on a GPU: `_fp32_gemm_on_gpu`): lower the traced graph.
        A reference the lowering cannot cover ends in one line naming its ops and the schedules known (never
        a partial kernel). `extra_note` follows the shape note in every proposal's rationale."""
        from agent.proposers.lowering import LoweringError, lower_problem
        from agent.proposers.lowering.propose import LoweringSearch

        try:
            lowered = lower_problem(request.problem)
        except LoweringError as exc:
            message = " ".join(str(exc).split())
            return ProposeResult(
                errors=(ProposalError(kind="unsupported", message=(f"{message} (and no hand-written family matches)")),)
            )
        search = LoweringSearch(lowered)
        extra: tuple = ()
        if request.action is Action.seed and self.schedule_hints is not None:
            extra = tuple(self.schedule_hints(search.kinds(), request.arch))
        return search.propose(request, note=_shape_note(request.problem) + extra_note, extra_hints=extra)

    # each generator yields (knobs, rationale, transformation_tags); the caller renders and dedupes

    def _seed(self, template: str, request: ProposeRequest) -> Iterator[tuple[dict, str, tuple]]:
        ignored = []
        valid = []
        for i, hint in enumerate(request.seed_hints):
            try:
                valid.append((i, K.validate(template, _hint_knobs(hint), partial=True)))
            except K.KnobError as exc:
                ignored.append(f"seed_hints[{i}] ignored: {exc}")
        suffix = ("; " + "; ".join(ignored)) if ignored else ""
        for i, knobs in valid:
            yield (
                knobs,
                f"seed from seed_hints[{i}]: a configuration that worked on a similar device{suffix}",
                ("seed", "seed_hint"),
            )
        default, changed = _seed_default(template, request)
        yield default, f"seed: the {template} template's default configuration{changed}{suffix}", ("seed",)
        for move in K.single_moves(template, default):
            yield (
                move.apply(template, default),
                (f"seed variant, {move.describe()}: {move.why}{suffix}"),
                ("seed",) + move.tags(),
            )

    def _parent_knobs(self, template: str, request: ProposeRequest) -> tuple[dict, str]:
        if request.parent is None:
            return K.default_knobs(template), "no parent given: starting from the default configuration; "
        try:
            return K.validate(template, dict(request.parent.knobs)), ""
        except K.KnobError:  # e.g. the shipped seed, written by hand
            return K.default_knobs(
                template
            ), f"from the {template} template's default (the parent was not made from it); "

    def _from_parent(self, template: str, request: ProposeRequest) -> Iterator[tuple[dict, str, tuple]]:
        base, prefix = self._parent_knobs(template, request)
        parent_sha = source_sha256(request.parent.source) if request.parent else ""
        rng = random.Random(f"{request.rng_seed}:{request.action.value}:{parent_sha}")
        if request.action is Action.restart:
            for knobs in K.far_configs(template, base, rng):
                changed = tuple(f"{k}={K.fmt(v)}" for k, v in knobs.items() if base.get(k) != v)
                yield (
                    knobs,
                    (
                        f"{prefix}restart: a random configuration {K.distance(template, base, knobs):.1f} "
                        f"knob-steps from the parent, to leave a local optimum"
                    ),
                    ("restart",) + changed,
                )
            return
        last = {t.split("=")[0] for t in (request.parent.transformation_tags if request.parent else ())}
        singles = K.single_moves(template, base)
        pairs = K.pair_moves(template, base)
        rng.shuffle(singles)
        rng.shuffle(pairs)
        along = [m for m in singles if set(m.names) & last]
        across = [m for m in singles if not set(m.names) & last]
        # Moves the parent's own diagnostics argue for (spills, % of copy ceiling, out of resources) go first.
        steered = K.steered_moves(template, base, request.parent.result if request.parent else None)
        if request.action is Action.refine:
            order: Iterable[K.Move] = steered + along + across + pairs
            verb = "refine"
        elif request.action is Action.repair:  # a failed template candidate is best replaced by a neighbour
            order = steered + across + pairs + along
            verb = "repair"
        else:  # sibling
            order = across + pairs + along
            verb = request.action.value
        for move in order:
            yield move.apply(template, base), f"{prefix}{verb}, {move.describe()}: {move.why}", move.tags()
