"""Module state that the forward reads and writes: plain tensor attributes, neither parameters nor buffers
(`self.hidden = torch.randn(batch_size, hidden_size)` in `__init__`).

Reading. Each such tensor is a placeholder of kind "attr", traced like a parameter (symbolic sizes). A
candidate reads it from its own module at every call and moves it to the device of the forward's first
input (what a reference that runs `self.hidden = self.hidden.to(x.device)` does; one that does not
would fail on a GPU with the attribute left on the CPU), so no value is baked into the source: a
candidate written for one instance computes with the tensor of whichever instance runs it. `state_dict`
does not hold these tensors, so the harness does not copy them: the candidate's own `__init__` (the
reference's, copied) draws them after the same seed.

Writing. A forward may rebind the attribute (`self.hidden = torch.tanh(...)`) or write into its tensor
(`self.hidden.copy_(h0)`); the reference then holds the new value for its next call. The choice made
here: the capture returns each attribute's value after the forward as an extra output of the graph, and
where it changed, the candidate writes it back the way the reference did (rebinds the attribute, or
copies into the module's tensor: a `StateWrite`), so its next call reads what the reference's next call
reads. A tensor attribute the forward creates (`__init__` did not set it) is written back the same
way. The trace follows the Python path of one call, here as for any branch in forward: a forward that
branches on its own state (`if hasattr(self, "cache")`, a Python int counter) is written for the path its
first call took. A forward that sets a tensor attribute to something else than a plain tensor (None, a
Parameter) is refused: the lowering keeps an attribute's state only as a tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agent.proposers.lowering.ir import LoweringError


@dataclass(frozen=True)
class StateWrite:
    """An attribute the forward left holding another value; the candidate writes it back."""

    name: str  # dotted attribute name: "hidden", "cell.h"
    how: str  # "assign": the forward rebinds the attribute; "copy": it writes into the tensor in place


def _plain_tensors(model: torch.nn.Module):
    """(path of the owner, owner, attribute, tensor) for every plain tensor attribute of the module tree."""
    for path, m in model.named_modules():
        for attr, value in list(vars(m).items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                yield path, m, attr, value


def _dotted(path: str, attr: str) -> str:
    return f"{path}.{attr}" if path else attr


def attribute(model: torch.nn.Module, dotted: str) -> torch.Tensor:
    """The plain tensor attribute named `dotted` ("hidden", "cell.h") of a built model."""
    owner, _, attr = dotted.rpartition(".")
    return model.get_submodule(owner).__dict__[attr]


class TensorAttributes:
    """The model's plain tensor attributes: one placeholder per distinct tensor (an attribute that
    aliases another shares its placeholder), swapped in for the trace and put back after it."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.names: list[str] = []  # per placeholder: the first name the tensor is reachable by
        self.values: list[torch.Tensor] = []
        self.slots: list[tuple[torch.nn.Module, str, int, str]] = []  # (owner, attribute, placeholder, name)
        self.created: list[tuple[torch.nn.Module, str]] = []  # tensor attributes the traced forward set anew
        index: dict[int, int] = {}
        for path, m, attr, value in _plain_tensors(model):
            i = index.setdefault(id(value), len(self.names))
            if i == len(self.names):
                self.names.append(_dotted(path, attr))
                self.values.append(value)
            self.slots.append((m, attr, i, _dotted(path, attr)))

    def install(self, tensors) -> None:
        """Give every attribute its placeholder's traced tensor."""
        for m, attr, i, _ in self.slots:
            m.__dict__[attr] = tensors[i]

    def after_forward(self, tensors) -> list[tuple[str, torch.Tensor, bool]]:
        """(name, value now, rebound) per attribute, read after the traced forward, then (name, value,
        True) per tensor attribute the forward created; refuses state the lowering cannot keep."""
        from agent.proposers.lowering.capture import attr_expr

        out = []
        for m, attr, i, name in self.slots:
            now = m.__dict__.get(attr)
            if not isinstance(now, torch.Tensor) or isinstance(now, torch.nn.Parameter):
                what = f"a {type(now).__name__}" if attr in vars(m) else "a parameter, a buffer or a submodule"
                raise LoweringError(
                    f"forward turns the tensor attribute {attr_expr('self', name)} into {what}: "
                    f"the lowering keeps a plain tensor attribute only as a plain tensor"
                )
            out.append((name, now, now is not tensors[i]))
        known = {(id(m), attr) for m, attr, _, _ in self.slots}
        for path, m, attr, value in _plain_tensors(self.model):
            if (id(m), attr) not in known:
                self.created.append((m, attr))
                out.append((_dotted(path, attr), value, True))
        return out

    def restore(self) -> None:
        for m, attr, i, _ in self.slots:
            m.__dict__[attr] = self.values[i]
        for m, attr in self.created:
            m.__dict__.pop(attr, None)


def split_writes(gm, n_user: int, tuple_output: bool, after: list, attr_nodes: list) -> tuple[StateWrite, ...]:
    """Keep, of the graph's trailing outputs (one per entry of `after`, from `after_forward`), those of
    the attributes the forward changed or created, and say how each is written back.

    Run after capture made the in-place writes out-of-place (capture._out_of_place, and
    capture._functionalize for writes through a view): an attribute written in place then returns the
    written value rather than its own placeholder (`attr_nodes`, per attribute `__init__` set)."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outs = output.args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    keep, writes = outs[:n_user], []
    placeholders = list(attr_nodes) + [None] * (len(after) - len(attr_nodes))
    for (name, _, rebound), value, placeholder in zip(after, outs[n_user:], placeholders):
        if rebound:
            writes.append(StateWrite(name, "assign"))
        elif value is not placeholder:
            writes.append(StateWrite(name, "copy"))
        else:
            continue
        keep.append(value)
    output.args = (keep[0] if len(keep) == 1 and not tuple_output else tuple(keep),)
    gm.graph.lint()
    gm.recompile()
    return tuple(writes)
