"""Which kernel family a reference computes, read from the ops it runs rather than from its name.

The template proposer can only write kernels for patterns it has templates for, so a reference must be
mapped onto one of them (and refused, naming the ops, when it cannot). Tracing happens on fake tensors:
KernelBench references can declare inputs of many GiB, and only shapes matter here. `torch.fx` gives a
graph with parameter names; a forward that fx cannot trace (shape-dependent control flow) is run once
under a `TorchDispatchMode` that records aten ops instead. Both paths produce the same event list, which
small per-family rules explain completely or not at all: an op left over means the kernel would skip
work, so the match fails.

Besides the family, the match says how a candidate must mirror the reference: the `__init__` signature,
each parameter's dotted name and shape as an expression of the init arguments (found by building the
reference once with probe sizes), which forward input plays which role, and constants such as eps.
"""

from __future__ import annotations

import inspect
import math
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch

from agent import Frozen
from evaluation.errors import KscoutError
from evaluation.problem_file import init_inputs as problem_init_inputs

FAMILIES = (
    "layernorm",
    "rmsnorm",
    "add_rmsnorm",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "swiglu",
    "geglu",
    "row_sum",
    "matmul_epilogue",
    "attention",
)


class FamilyMatchError(KscoutError):
    """A reference whose ops map onto no kernel family the template proposer knows."""


_Record = Frozen


class ParamInfo(_Record):
    name: str  # dotted state_dict name, e.g. "ln.weight"
    shape: tuple[int, ...]  # with the reference's default init inputs
    shape_exprs: tuple[str, ...]  # Python expressions over the init argument names, e.g. ("n",)
    init: str  # "ones" | "zeros" | "random": how the reference fills it (values come from its state_dict)
    mean: float = 0.0
    std: float = 0.0
    is_buffer: bool = False


class FamilyMatch(_Record):
    family: str
    method: str  # "fx" | "dispatch"
    ops_seen: tuple[str, ...]  # compute ops in execution order (views and dtype casts left out)
    inputs: tuple[str, ...]  # forward parameter names, in order
    roles: dict[str, str]  # "x", "residual", "a", "b", "logits", "targets" -> input; "weight", "bias" -> param
    params: tuple[ParamInfo, ...]
    init_signature: str  # parameter list of Model.__init__ without self, e.g. "n" or "k, n"
    constants: dict[str, Any]  # eps, activation, reduction, keepdim, norm_ndim, weight_layout, outputs
    source_path: Optional[str] = None


# ---------------------------------------------------------------- loading the reference


def load_reference(path: Union[str, Path]) -> types.ModuleType:
    """Execute a KernelBench-style file as a fresh module through the evaluator's one loader
    (evaluation/problem_file.py), so the proposer and the judge read a problem the same way."""
    from evaluation.problem import ProblemError
    from evaluation.problem_file import exec_problem

    path = Path(path)
    if not path.is_file():
        raise FamilyMatchError(f"reference file not found: {path}")
    try:
        module = exec_problem(path)
    except ProblemError as exc:
        raise FamilyMatchError(str(exc)) from None
    return module


# ---------------------------------------------------------------- events: one op with labelled operands


@dataclass
class _Event:
    op: str
    args: list  # tensor operands as labels ("in:x", "param:weight", "param:weight^T", "tmp:3"), else constants
    kwargs: dict
    out: str
    shapes: list = field(default_factory=list)  # shape of each tensor operand, None for constants

    def arg(self, pos: int, name: str, default: Any = None) -> Any:
        if name in self.kwargs:
            return self.kwargs[name]
        return self.args[pos] if len(self.args) > pos else default

    def rank(self) -> Optional[int]:
        shape = self.shapes[0] if self.shapes else None
        return None if shape is None else len(shape)


_VIEWS = {
    "view",
    "reshape",
    "contiguous",
    "float",
    "to",
    "type_as",
    "flatten",
    "unsqueeze",
    "squeeze",
    "size",
    "detach",
    "clone",
    "alias",
    "_to_copy",
    "_unsafe_view",
    "expand",
    "getitem",
    "dim",
    "type",
    "bfloat16",
    "half",
    "lift_fresh",
    "device",
}
_TRANSPOSES = {"t", "T", "transpose", "permute", "mT"}
_ALIASES = {
    "native_layer_norm": "layer_norm",
    "_softmax": "softmax",
    "_log_softmax": "log_softmax",
    "nll_loss_forward": "nll_loss",
    "mm": "matmul",
    "addmm": "linear_t",
    "rsqrt_": "rsqrt",
    "truediv": "div",
    "true_divide": "div",
    "multiply": "mul",
    "subtract": "sub",
    "fast_gelu": "gelu",
    "convolution": "conv",
    "neg": "neg",
    "square": "square",
}
_MODULE_OPS = {
    torch.nn.LayerNorm: "layer_norm",
    torch.nn.Linear: "linear",
    torch.nn.Softmax: "softmax",
    torch.nn.LogSoftmax: "log_softmax",
    torch.nn.GELU: "gelu",
    torch.nn.SiLU: "silu",
    torch.nn.ReLU: "relu",
    torch.nn.CrossEntropyLoss: "cross_entropy",
    torch.nn.Conv1d: "conv1d",
    torch.nn.Conv2d: "conv2d",
    torch.nn.Conv3d: "conv3d",
}
if hasattr(torch.nn, "RMSNorm"):
    _MODULE_OPS[torch.nn.RMSNorm] = "rms_norm"


def _canonical(name: str) -> str:
    name = name.split(".")[-1] if name.startswith("aten.") else name
    name = {"__matmul__": "matmul", "__add__": "add", "__mul__": "mul", "__truediv__": "div"}.get(name, name)
    return _ALIASES.get(name, name)


# ---------------------------------------------------------------- the fx path


def _fx_events(model: torch.nn.Module, inputs: list) -> tuple[list[_Event], list[str]]:
    from torch.fx import symbolic_trace
    from torch.fx.passes.shape_prop import ShapeProp

    from agent.proposers.lowering.capture import isolate_fx_traces

    isolate_fx_traces()  # other searches' threads call and trace modules meanwhile
    gm = symbolic_trace(model)
    ShapeProp(gm).propagate(*inputs)
    labels: dict[str, Any] = {}
    events: list[_Event] = []
    outputs: list[str] = []

    def lab(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return labels[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(lab(x) for x in a)
        return a

    def shape_of(a: Any) -> Optional[tuple]:
        meta = a.meta.get("tensor_meta") if isinstance(a, torch.fx.Node) else None
        return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            labels[node.name] = f"in:{node.target}"
            continue
        if node.op == "get_attr":
            labels[node.name] = f"param:{node.target}"
            continue
        if node.op == "output":
            out = node.args[0]
            outputs = [lab(o) for o in out] if isinstance(out, (tuple, list)) else [lab(out)]
            continue
        args, kwargs = list(node.args), dict(node.kwargs)
        if node.op == "call_module":
            mod = gm.get_submodule(node.target)
            op = next((v for k, v in _MODULE_OPS.items() if isinstance(mod, k)), type(mod).__name__.lower())
            for pname, _ in mod.named_parameters(recurse=False):
                kwargs[pname] = f"param:{node.target}.{pname}"
            for attr in ("eps", "dim", "approximate", "reduction", "ignore_index", "normalized_shape"):
                if hasattr(mod, attr):
                    kwargs.setdefault(attr, getattr(mod, attr))
        elif node.op == "call_method":
            op = _canonical(node.target)
        else:
            target = node.target
            op = _canonical(getattr(target, "__name__", str(target)))
            if target is getattr and len(args) == 2 and isinstance(args[1], str):
                op = args[1]  # tensor.T, tensor.shape
        first = args[0] if args else None
        if op in _VIEWS or op == "shape":
            labels[node.name] = lab(first) if isinstance(first, torch.fx.Node) else f"tmp:{node.name}"
            continue
        if op in _TRANSPOSES and isinstance(first, torch.fx.Node):
            labels[node.name] = _transposed(lab(first))
            continue
        labels[node.name] = f"tmp:{node.name}"
        events.append(
            _Event(
                op,
                [lab(a) for a in args],
                {k: lab(v) for k, v in kwargs.items()},
                labels[node.name],
                [shape_of(a) for a in args],
            )
        )
    return events, outputs


def _transposed(label: str) -> str:
    return label[:-2] if label.endswith("^T") else label + "^T"


# ---------------------------------------------------------------- the dispatch path


def _dispatch_events(model: torch.nn.Module, inputs: list, input_names: list[str]) -> tuple[list[_Event], list[str]]:
    from torch.utils._python_dispatch import TorchDispatchMode

    labels: dict[int, str] = {}
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        labels[id(p)] = f"param:{name}"
    for name, t in zip(input_names, inputs):
        if isinstance(t, torch.Tensor):
            labels[id(t)] = f"in:{name}"
    events: list[_Event] = []
    keep: list = []  # outputs stay alive so ids are not reused during the run

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            op = _canonical(func.overloadpacket.__name__)
            if op in ("device", "empty", "ones", "zeros", "full", "randn", "rand", "randint", "scalar_tensor"):
                return out
            outs = out if isinstance(out, (tuple, list)) else [out]
            keep.extend(outs)
            first = args[0] if args else None

            def lab(a: Any) -> Any:
                if isinstance(a, torch.Tensor):
                    return labels.get(id(a), f"tmp:{id(a)}")
                return a

            if op in _VIEWS or (op in _TRANSPOSES and isinstance(first, torch.Tensor)):
                label = lab(first)
                if op in _TRANSPOSES and first.dim() == 2:
                    label = _transposed(label)
                for o in outs:
                    if isinstance(o, torch.Tensor):
                        labels[id(o)] = label
                return out
            label = f"tmp:{len(events)}"
            for o in outs:
                if isinstance(o, torch.Tensor):
                    labels[id(o)] = label
            shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else None for a in args]
            events.append(_Event(op, [lab(a) for a in args], {k: lab(v) for k, v in kwargs.items()}, label, shapes))
            return out

    with Recorder():
        result = model(*inputs)
    results = result if isinstance(result, (tuple, list)) else [result]
    outputs = [labels.get(id(r), "?") for r in results]
    return events, outputs


# ---------------------------------------------------------------- rules: explain every compute event


class _Rules:
    """Each rule returns (family, roles, constants) when it explains every event, else None."""

    def __init__(self, events: list[_Event], outputs: list[str]):
        self.ev = events
        self.outputs = outputs

    def match(self) -> Optional[tuple[str, dict, dict]]:
        for rule in (
            self.layernorm,
            self.rms,
            self.softmaxes,
            self.cross_entropy,
            self.gated,
            self.row_sum,
            self.matmul,
            self.attention,
        ):
            found = rule()
            if found is not None:
                return found
        return None

    def _last_dim(self, e: _Event, dim: Any) -> bool:
        rank = e.rank()
        if isinstance(dim, (list, tuple)):
            if len(dim) != 1:
                return False
            dim = dim[0]
        if not isinstance(dim, int):
            return False
        return dim == -1 or (rank is not None and dim == rank - 1)

    def _only(self, *ops: str) -> bool:
        return [e.op for e in self.ev] == list(ops)

    def layernorm(self):
        if not self._only("layer_norm"):
            return None
        e = self.ev[0]
        x = e.args[0]
        if not str(x).startswith("in:"):
            return None
        shape = e.arg(1, "normalized_shape")
        ndim = len(shape) if isinstance(shape, (list, tuple)) else 1
        roles = {"x": x[3:]}
        for role, pos in (("weight", 2), ("bias", 3)):
            p = e.arg(pos, role)
            if isinstance(p, str) and p.startswith("param:"):
                roles[role] = p[6:]
        eps = e.arg(4, "eps", 1e-5)
        return "layernorm", roles, {"eps": float(eps), "norm_ndim": ndim}

    def rms(self):
        ev = list(self.ev)
        residual_add = None
        if ev and ev[0].op == "add" and all(str(a).startswith("in:") for a in ev[0].args[:2]):
            residual_add, ev = ev[0], ev[1:]
        src = residual_add.out if residual_add else None
        if len(ev) == 1 and ev[0].op == "rms_norm":
            e = ev[0]
            x = e.args[0]
            eps = e.arg(3, "eps")
            w = e.arg(2, "weight")
            weight = w[6:] if isinstance(w, str) and w.startswith("param:") else None
        else:
            parsed = self._rms_chain(ev)
            if parsed is None:
                return None
            x, eps, weight = parsed
        if residual_add is None and not str(x).startswith("in:"):
            return None
        if residual_add is not None and x != src:
            return None
        roles = {"weight": weight} if weight else {}
        consts = {"eps": float(eps) if eps is not None else float(torch.finfo(torch.float32).eps)}
        if residual_add is None:
            roles["x"] = x[3:]
            return "rmsnorm", roles, consts
        roles["x"], roles["residual"] = residual_add.args[0][3:], residual_add.args[1][3:]
        if len(self.outputs) != 2 or src not in self.outputs:
            return None
        consts["outputs"] = ["h" if o == src else "y" for o in self.outputs]
        return "add_rmsnorm", roles, consts

    def _rms_chain(self, ev: list[_Event]):
        """x*x|x**2 -> mean(last) -> +eps -> rsqrt -> x*r (or sqrt -> x/s) [-> *weight]."""
        if len(ev) not in (5, 6):
            return None
        sq, mean, add, root, norm = ev[:5]
        if sq.op == "pow" and sq.args[1] == 2:
            x = sq.args[0]
        elif sq.op == "mul" and sq.args[0] == sq.args[1]:
            x = sq.args[0]
        elif sq.op == "square":
            x = sq.args[0]
        else:
            return None
        if mean.op != "mean" or mean.args[0] != sq.out or not self._last_dim(mean, mean.arg(1, "dim")):
            return None
        if add.op != "add" or mean.out not in add.args:
            return None
        eps = next((a for a in add.args if isinstance(a, (int, float))), None)
        if eps is None:
            return None
        if root.op == "rsqrt" and norm.op == "mul" and set(norm.args[:2]) == {x, root.out}:
            pass
        elif root.op == "sqrt" and norm.op == "div" and norm.args[:2] == [x, root.out]:
            pass
        else:
            return None
        weight = None
        if len(ev) == 6:
            wm = ev[5]
            others = [a for a in wm.args[:2] if a != norm.out]
            if wm.op != "mul" or norm.out not in wm.args or len(others) != 1 or not str(others[0]).startswith("param:"):
                return None
            weight = others[0][6:]
        return x, eps, weight

    def softmaxes(self):
        for family in ("softmax", "log_softmax"):
            if self._only(family):
                e = self.ev[0]
                if str(e.args[0]).startswith("in:") and self._last_dim(e, e.arg(1, "dim")):
                    return family, {"x": e.args[0][3:]}, {}
        return None

    def cross_entropy(self):
        if self._only("cross_entropy"):
            e = self.ev[0]
            logits, targets = e.args[0], e.arg(1, "target")
            reduction = e.arg(4 if len(e.args) > 4 else 99, "reduction", "mean")
            ignore = e.arg(3 if len(e.args) > 3 else 99, "ignore_index", -100)
            if e.kwargs.get("weight") not in (None,) or float(e.kwargs.get("label_smoothing", 0.0)) != 0.0:
                return None
            if e.rank() != 2:
                return None
        elif self._only("log_softmax", "nll_loss"):
            ls, nll = self.ev
            if nll.args[0] != ls.out or not self._last_dim(ls, ls.arg(1, "dim")) or ls.rank() != 2:
                return None
            logits, targets = ls.args[0], nll.args[1]
            reduction = nll.arg(3, "reduction", "mean")
            reduction = {0: "none", 1: "mean", 2: "sum"}.get(reduction, reduction)
            ignore = nll.arg(4, "ignore_index", -100)
            if nll.arg(2, "weight") is not None:
                return None
        else:
            return None
        if not (str(logits).startswith("in:") and str(targets).startswith("in:")):
            return None
        return (
            "cross_entropy",
            {"logits": logits[3:], "targets": targets[3:]},
            {"reduction": reduction, "ignore_index": int(ignore)},
        )

    def gated(self):
        if len(self.ev) != 2 or self.ev[1].op != "mul":
            return None
        act, mul = self.ev
        family = {"silu": "swiglu", "gelu": "geglu"}.get(act.op)
        if family is None or not str(act.args[0]).startswith("in:") or act.out not in mul.args[:2]:
            return None
        other = [a for a in mul.args[:2] if a != act.out]
        if len(other) != 1 or not str(other[0]).startswith("in:"):
            return None
        consts = {}
        if family == "geglu":
            consts["activation"] = "gelu_tanh" if act.arg(1, "approximate", "none") == "tanh" else "gelu_erf"
        return family, {"a": act.args[0][3:], "b": other[0][3:]}, consts

    def row_sum(self):
        if not self._only("sum"):
            return None
        e = self.ev[0]
        dim = e.arg(1, "dim")
        if not str(e.args[0]).startswith("in:") or not self._last_dim(e, dim) or e.kwargs.get("dtype") is not None:
            return None
        return "row_sum", {"x": e.args[0][3:]}, {"keepdim": bool(e.arg(2, "keepdim", False))}

    def matmul(self):
        ev = list(self.ev)
        if not ev:
            return None
        head = ev.pop(0)
        roles: dict[str, str] = {}
        if head.op == "linear":
            x, w, b = head.args[0], head.arg(1, "weight"), head.arg(2, "bias")
            layout = "nk"
        elif head.op == "linear_t":  # aten.addmm(bias, x, W^T)
            b, x, w = head.args[0], head.args[1], head.args[2]
            w, layout = (w[:-2], "nk") if str(w).endswith("^T") else (w, "kn")
        elif head.op == "matmul":
            x, w, b = head.args[0], head.args[1], None
            w, layout = (w[:-2], "nk") if str(w).endswith("^T") else (w, "kn")
        else:
            return None
        if not str(x).startswith("in:") or not str(w).startswith("param:") or head.rank() != 2:
            return None
        roles["x"], roles["weight"] = x[3:], w[6:]
        last = head.out
        if b is not None:
            if not str(b).startswith("param:"):
                return None
            roles["bias"] = b[6:]
        elif ev and ev[0].op == "add" and last in ev[0].args[:2]:
            other = [a for a in ev[0].args[:2] if a != last]
            if len(other) != 1 or not str(other[0]).startswith("param:"):
                return None
            roles["bias"] = other[0][6:]
            last = ev.pop(0).out
        activation = "none"
        if ev and ev[0].op in ("gelu", "relu") and ev[0].args[0] == last:
            act = ev.pop(0)
            if act.op == "relu":
                activation = "relu"
            else:
                activation = "gelu_tanh" if act.arg(1, "approximate", "none") == "tanh" else "gelu_erf"
        if ev:
            return None
        return "matmul_epilogue", roles, {"activation": activation, "weight_layout": layout}

    def attention(self):
        """F.scaled_dot_product_attention(q, k, v) over three forward inputs: no mask, no dropout, no GQA;
        causal or not, the default or a given scale."""
        if not self._only("scaled_dot_product_attention"):
            return None
        e = self.ev[0]
        q, k, v = e.arg(0, "query"), e.arg(1, "key"), e.arg(2, "value")
        if not all(str(t).startswith("in:") and not str(t).endswith("^T") for t in (q, k, v)):
            return None
        if e.arg(3, "attn_mask") is not None or float(e.arg(4, "dropout_p", 0.0) or 0.0) != 0.0:
            return None
        if e.kwargs.get("enable_gqa") or e.rank() is None or e.rank() < 2:
            return None
        scale = e.arg(6, "scale")
        if scale is not None and not isinstance(scale, (int, float)):
            return None
        return (
            "attention",
            {"q": q[3:], "k": k[3:], "v": v[3:]},
            {"is_causal": bool(e.arg(5, "is_causal", False)), "scale": None if scale is None else float(scale)},
        )


# ---------------------------------------------------------------- parameters and the init signature


_PROBES = (7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67)


def _init_signature(model_cls: type, init_inputs: list) -> tuple[str, dict[str, Any]]:
    """The parameter list to render and each name bound to its default init value."""
    sig = inspect.signature(model_cls.__init__)
    params = [p for p in list(sig.parameters.values())[1:]]
    parts, bound = [], {}
    values = list(init_inputs)
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            bound[p.name] = tuple(values)
            values = []
        elif p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        else:
            if values:
                bound[p.name] = values.pop(0)
            elif p.default is not p.empty:
                bound[p.name] = p.default
            simple = isinstance(p.default, (int, float, str, bool, type(None), tuple))
            parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}" if simple else p.name)
    return ", ".join(parts), bound


def _probe_values(bound: dict[str, Any]) -> tuple[dict[str, Any], dict[int, str]]:
    """Replace each integer init value by a distinct prime; remember which expression gave which prime."""
    probes = iter(_PROBES)
    out, where = {}, {}
    for name, v in bound.items():
        if isinstance(v, int) and not isinstance(v, bool):
            out[name] = next(probes, v)
            where[out[name]] = name
        elif isinstance(v, (tuple, list)) and v and all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            new = []
            for i, _ in enumerate(v):
                p = next(probes, None)
                if p is None:
                    new.append(v[i])
                    continue
                new.append(p)
                where[p] = f"{name}[{i}]"
            out[name] = type(v)(new)
        else:
            out[name] = v
    return out, where


def _param_infos(
    module: types.ModuleType, init_inputs: list, default_model: torch.nn.Module, bound: dict[str, Any]
) -> tuple[ParamInfo, ...]:
    probe_args, where = _probe_values(bound)
    probe_model = None
    try:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            probe_model = module.Model(**probe_args) if probe_args else module.Model(*init_inputs)
    except Exception:  # a constructor that refuses small sizes: shapes stay literal
        probe_model = None
    probe_tensors = {}
    if probe_model is not None:
        probe_tensors = dict(probe_model.named_parameters())
        probe_tensors.update({f"{k}": v for k, v in probe_model.named_buffers()})
    infos = []
    items = [(n, p, False) for n, p in default_model.named_parameters()]
    items += [(n, b, True) for n, b in default_model.named_buffers()]
    for name, t, is_buffer in items:
        shape = tuple(int(d) for d in t.shape)
        probe = probe_tensors.get(name)
        exprs = []
        for i, d in enumerate(shape):
            pd = int(probe.shape[i]) if probe is not None and probe.dim() == len(shape) else None
            exprs.append(where[pd] if pd is not None and pd in where else str(d))
        init, mean, std = "random", 0.0, 0.0
        if probe is not None and probe.numel() and probe.is_floating_point():
            data = probe.detach().double()
            if bool((data == 1).all()):
                init = "ones"
            elif bool((data == 0).all()):
                init = "zeros"
            else:
                mean, std = float(data.mean()), float(data.std()) if data.numel() > 1 else 0.0
        infos.append(
            ParamInfo(
                name=name, shape=shape, shape_exprs=tuple(exprs), init=init, mean=mean, std=std, is_buffer=is_buffer
            )
        )
    return tuple(infos)


# ---------------------------------------------------------------- the entry point


def match_family(problem: Union[str, Path, types.ModuleType]) -> FamilyMatch:
    """Trace the reference, explain its ops with one family's rule, and say how to mirror its parameters."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    module = problem if isinstance(problem, types.ModuleType) else load_reference(problem)
    path = getattr(module, "__file__", None)
    with torch.random.fork_rng():
        fake = FakeTensorMode(allow_non_fake_inputs=True)
        try:
            init_inputs = problem_init_inputs(module)
            signature, bound = _init_signature(module.Model, init_inputs)
            with fake:
                model = module.Model(*init_inputs)
                inputs = list(module.get_inputs())
        except Exception as exc:
            raise FamilyMatchError(
                f"cannot build the reference {path or module.__name__}: {type(exc).__name__}: {exc}"
            ) from exc
        fwd = inspect.signature(model.forward)
        input_names = [p.name for p in fwd.parameters.values()][: len(inputs)]
        method = "fx"
        try:
            with fake:
                events, outputs = _fx_events(model, inputs)
        except Exception:  # shape-dependent control flow and friends: watch aten ops instead
            method = "dispatch"
            try:
                with fake:
                    events, outputs = _dispatch_events(model, inputs, input_names)
            except Exception as exc:
                raise FamilyMatchError(f"cannot trace {path or module.__name__}: {type(exc).__name__}: {exc}") from exc
        params = _param_infos(module, init_inputs, model, bound)
    ops_seen = tuple(dict.fromkeys(e.op for e in events))
    found = _Rules(events, outputs).match()
    if found is None:
        names = ", ".join(_display(op) for op in ops_seen) or "no compute op"
        raise FamilyMatchError(
            f"{Path(path).name if path else module.__name__}: no kernel family matches the ops it runs "
            f"({names}); families known: {', '.join(FAMILIES)}"
        )
    family, roles, constants = found
    return FamilyMatch(
        family=family,
        method=method,
        ops_seen=tuple(_display(o) for o in ops_seen),
        inputs=tuple(input_names),
        roles=roles,
        params=params,
        init_signature=signature,
        constants=constants,
        source_path=str(path) if path else None,
    )


def _display(op: str) -> str:
    if op == "conv":
        return "conv2d"
    return "linear" if op == "linear_t" else op


def param_init_expr(p: ParamInfo) -> str:
    """The expression a candidate's __init__ uses; values are overwritten by the reference's state_dict."""
    shape = ", ".join(p.shape_exprs) or "()"
    if p.init in ("ones", "zeros"):
        return f"torch.{p.init}({shape})"
    mean, std = _tidy(p.mean), _tidy(p.std)
    expr = f"torch.randn({shape})"
    if std != 1.0:
        expr = f"{std!r} * {expr}"
    if mean != 0.0:
        expr = f"{mean!r} + {expr}"
    return expr


def _tidy(v: float) -> float:
    """One significant digit: enough to show the reference's scale (1 + 0.1 * randn)."""
    if v == 0 or not math.isfinite(v):
        return 0.0
    digits = -int(math.floor(math.log10(abs(v))))
    return round(v, digits)
