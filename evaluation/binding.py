"""Mapping the reference's weights onto a candidate's parameters, and saying how it was done.

The reference Model and the candidate ModelNew are built after the same seed, but a candidate that
creates its parameters in another order, under other names (`gamma` for `weight`), as plain tensor
attributes, or transposed, draws different random weights; compared against the reference it looks
wrong although its kernel is right. The worker used to load the reference's state dict only when the
names and shapes agreed exactly, and said nothing when they did not. `bind` matches, in this order:

1. every name and shape the same: the state dict is loaded as it is ("exact");
2. by name: the same name, then the same last part of the name (`norm.weight` and `weight`);
3. by shape: a shape that only one remaining tensor has on each side;
4. by order: tensors of one shape, the same number on both sides, in declaration order (weight and
   bias of a LayerNorm, both (N,)): reported as such, since order is a guess;
5. transposed: a 2-D tensor whose transposed shape is unique on both sides (W^T kept for a kernel).

Plain tensor attributes of the candidate's modules (`self.w = torch.randn(n)`) take part too. What is
left unmatched on either side is named in the report, and the report says in one line what happened.
`annotate(result, binding)` puts the report on an EvalResult and, when the candidate failed correctness
with weights that could not all be mapped, says so in its message.
"""

from __future__ import annotations

from typing import Any

from evaluation.records import EvalResult, Status, WeightBinding, WeightMatch


def _candidate_tensors(model) -> dict[str, tuple[Any, str]]:
    """Name -> (tensor, kind) for the candidate's parameters, buffers and plain tensor attributes."""
    import torch

    out: dict[str, tuple[Any, str]] = {}
    for name, value in model.state_dict(keep_vars=True).items():
        out[name] = (value, "state")
    for prefix, module in model.named_modules():
        for attr, value in vars(module).items():
            if (
                isinstance(value, torch.Tensor)
                and not isinstance(value, torch.nn.Parameter)
                and not attr.startswith("_")
            ):
                name = f"{prefix}.{attr}" if prefix else attr
                if name not in out and value.is_floating_point():
                    out[name] = (value, "attribute")
    return out


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def bind(model, reference_state: dict[str, Any]) -> WeightBinding:
    """Load `reference_state` into `model` as far as it maps, and report how (see the module docstring)."""
    import torch

    ref = {k: v for k, v in reference_state.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    if not isinstance(model, torch.nn.Module):
        return WeightBinding(
            loaded=not ref,
            method="none" if not ref else "partial",
            unmatched_reference=tuple(ref),
            message="the candidate is not an nn.Module: no weights could be given to it"
            if ref
            else "no weights on either side",
        )
    own = model.state_dict()
    if own.keys() == reference_state.keys() and all(own[k].shape == reference_state[k].shape for k in own):
        model.load_state_dict(reference_state)
        if not own:
            return WeightBinding(loaded=True, method="none", message="no weights on either side")
        return WeightBinding(
            loaded=True,
            method="exact",
            matches=tuple(WeightMatch(candidate=k, reference=k, how="name", shape=tuple(own[k].shape)) for k in own),
            message=f"reference weights loaded by name ({len(own)} tensors)",
        )
    cand = _candidate_tensors(model)
    cand_left = [n for n in cand if cand[n][0].is_floating_point()]
    ref_left = list(ref)
    matches: list[WeightMatch] = []

    def take(c: str, r: str, how: str) -> None:
        matches.append(WeightMatch(candidate=c, reference=r, how=how, shape=tuple(cand[c][0].shape)))
        cand_left.remove(c)
        ref_left.remove(r)

    shape = lambda t: tuple(t.shape)  # noqa: E731
    for c in list(cand_left):  # 2. by name, then by the last part of the name
        if c in ref_left and shape(cand[c][0]) == shape(ref[c]):
            take(c, c, "name")
    for c in list(cand_left):
        same = [r for r in ref_left if _last(r) == _last(c) and shape(ref[r]) == shape(cand[c][0])]
        if len(same) == 1:
            take(c, same[0], "suffix")
    for c in list(cand_left):  # 3. the only one of its shape on both sides
        s = shape(cand[c][0])
        rs = [r for r in ref_left if shape(ref[r]) == s]
        cs = [x for x in cand_left if shape(cand[x][0]) == s]
        if len(rs) == 1 and len(cs) == 1:
            take(c, rs[0], "shape")
    for s in dict.fromkeys(shape(cand[c][0]) for c in cand_left):  # 4. declaration order within a shape
        rs = [r for r in ref_left if shape(ref[r]) == s]
        cs = [x for x in cand_left if shape(cand[x][0]) == s]
        if rs and len(rs) == len(cs):
            for c, r in zip(cs, rs):
                take(c, r, "order")
    for c in list(cand_left):  # 5. transposed, unique on both sides
        t = cand[c][0]
        if t.dim() != 2:
            continue
        rs = [r for r in ref_left if ref[r].dim() == 2 and shape(ref[r])[::-1] == shape(t)]
        cs = [x for x in cand_left if cand[x][0].dim() == 2 and shape(cand[x][0]) == shape(t)]
        if len(rs) == 1 and len(cs) == 1 and shape(t)[0] != shape(t)[1]:
            take(c, rs[0], "transposed")

    with torch.no_grad():
        for m in matches:
            target, kind = cand[m.candidate]
            value = ref[m.reference].t() if m.how == "transposed" else ref[m.reference]
            value = value.to(dtype=target.dtype, device=target.device)
            if kind == "attribute":
                owner = model.get_submodule(m.candidate.rsplit(".", 1)[0]) if "." in m.candidate else model
                setattr(owner, _last(m.candidate), value.clone())
            else:
                target.copy_(value)

    missing_ref = [r for r in ref_left if not _is_stat_buffer(r)]  # fresh running statistics are defaults
    params_left = [c for c in cand_left if cand[c][1] == "state" and c in dict(model.named_parameters())]
    loaded = not missing_ref and not params_left
    guesses = [m for m in matches if m.how != "name"]
    if loaded:
        method = "matched" if guesses else "exact"
        how = ", ".join(f"{m.candidate} <- {m.reference} ({m.how})" for m in guesses)
        message = (
            f"reference weights mapped onto differently named parameters: {how}"
            if guesses
            else f"reference weights loaded by name ({len(matches)} tensors)"
        )
    else:
        method = "partial" if matches else "none"
        parts = []
        if missing_ref:
            parts.append(
                "reference weight(s) "
                + ", ".join(f"{r} {list(ref[r].shape)}" for r in missing_ref[:6])
                + " have no counterpart in the candidate"
            )
        if params_left:
            parts.append(
                "the candidate's "
                + ", ".join(f"{c} {list(cand[c][0].shape)}" for c in params_left[:6])
                + " keep their own random initialisation"
            )
        if matches:
            parts.append("matched: " + ", ".join(f"{m.candidate} <- {m.reference} ({m.how})" for m in matches[:6]))
        message = "could not map every reference weight onto the candidate: " + "; ".join(parts)
    return WeightBinding(
        loaded=loaded,
        method=method,
        matches=tuple(matches),
        unmatched_reference=tuple(ref_left),
        unmatched_candidate=tuple(cand_left),
        message=message,
    )


def _is_stat_buffer(name: str) -> bool:
    return _last(name) in ("running_mean", "running_var", "num_batches_tracked")


def annotate(result: EvalResult, binding: WeightBinding | None) -> EvalResult:
    """The result with its weight binding, and a failing verdict told when weights did not all map."""
    if binding is None:
        return result
    update: dict = {"weight_binding": binding}
    if not binding.loaded and result.status is Status.incorrect:
        update["message"] = f"{result.message or ''} ({binding.message})".strip()
    return result.model_copy(update=update)
