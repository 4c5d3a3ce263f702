"""The model's forward as the lowering captures it, and that graph run on real tensors.

The capture is the lowering's own (agent.proposers.lowering.capture): one aten graph with symbolic
sizes, convolutions and pooling as kscout:: ops. Running it on the real model's parameters, tensor
attributes and inputs (an fx Interpreter that maps the kscout:: ops back to torch.nn.functional) gives
every node's real shape, dtype and value range, which is what a region's problem file declares, and it
is the program whose regions the profiler times.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from agent.model import ModelError
from agent.proposers.lowering.capture import CARRIER_OFFSET, Captured
from agent.proposers.lowering.state import attribute

aten = torch.ops.aten

# ops that only look at their operand under another shape: copied into every region that reads them
VIEWS = {
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.permute.default,
    aten.t.default,
    aten.transpose.int,
    aten.expand.default,
    aten.unsqueeze.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.slice.Tensor,
    aten.select.int,
    aten.alias.default,
    aten.split.Tensor,
    aten.split_with_sizes.default,
    aten.unbind.int,
}
CONTRACTIONS = {
    aten.mm.default,
    aten.addmm.default,
    aten.bmm.default,
    aten.baddbmm.default,
    aten.convolution.default,
}
CUSTOM_CONTRACTIONS = ("kscout::conv", "kscout::conv_t")


def op_name(target) -> str:
    """`addmm`, `kscout::conv`: how a node's op is named in regions and reports."""
    name = getattr(target, "_schema", None)
    if name is not None:
        full = target._schema.name
        return full.split("::", 1)[1] if full.startswith("aten::") else full
    return getattr(target, "__name__", str(target))


def is_contraction(node) -> bool:
    return node.target in CONTRACTIONS or op_name(node.target) in CUSTOM_CONTRACTIONS


def lowerable(node) -> bool:
    from agent.proposers.lowering.lower import _key
    from agent.proposers.lowering.lowerings import LOWERINGS

    return node.target is operator.getitem or bool(LOWERINGS.get(node.target) or LOWERINGS.get(_key(node.target)))


@dataclass(frozen=True)
class Meta:
    """A node's real value, described: shape, dtype, and the range a problem's inputs should keep."""

    shape: tuple[int, ...]
    dtype: str  # torch dtype name: float32, int64, bool
    nonnegative: bool  # every real value was >= 0 (a ReLU output, a running variance)
    low: float = 0.0
    high: float = 0.0


@dataclass
class Traced:
    """The captured graph, the real model, its inputs and what each node's real value looked like."""

    captured: Captured
    model: torch.nn.Module
    inputs: list
    args: list  # the graph's placeholders' real values, in order
    device: str = "cpu"
    meta: dict = field(default_factory=dict)  # node -> Meta (tensors) or int/float (sizes)


def _describe(value) -> Any:
    if isinstance(value, torch.Tensor):
        v = value.detach()
        floating = v.is_floating_point()
        nonneg = bool(v.numel() == 0 or (v.min() >= 0).item()) if v.dtype != torch.bool else True
        low = float(v.min()) if v.numel() and v.dtype != torch.bool and not floating else 0.0
        high = float(v.max()) if v.numel() and v.dtype != torch.bool and not floating else 0.0
        return Meta(tuple(v.shape), str(v.dtype).replace("torch.", ""), nonneg, low, high)
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_describe(x) for x in value)
    return value


def _conv(x, w, b, stride, padding, dilation, groups):
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[w.dim() - 2]
    return fn(x, w, b, stride, padding, dilation, groups)


def _conv_t(x, w, b, stride, padding, output_padding, dilation, groups):
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[w.dim() - 2]
    return fn(x, w, b, stride, padding, output_padding, groups, dilation)


def _pool(x, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor):
    d = len(kernel)
    if kind == "max":
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[d]
        return fn(x, kernel, stride, padding, dilation, ceil_mode)
    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[d]
    if d == 1:
        return fn(x, kernel, stride, padding, ceil_mode, count_include_pad)
    return fn(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor)


# the kscout:: ops of the capture, as the torch.nn.functional calls they stand for (eager and in source)
CUSTOM = {"kscout::conv": _conv, "kscout::conv_t": _conv_t, "kscout::pool": _pool}


class _Runner(torch.fx.Interpreter):
    def __init__(self, gm, device: str, label: Optional[Callable] = None):
        super().__init__(gm)
        self.device = torch.device(device)
        self.label = label  # node -> a profiler range name, or None
        self.seen: dict = {}

    def run_node(self, n):
        name = self.label(n) if self.label is not None else None
        if name is None:
            out = super().run_node(n)
        else:
            with torch.profiler.record_function(name):
                out = super().run_node(n)
        self.seen[n] = out
        return out

    def call_function(self, target, args, kwargs):
        fn = CUSTOM.get(op_name(target))
        if fn is not None:
            return fn(*args, **kwargs)
        if isinstance(kwargs.get("device"), torch.device) and kwargs["device"].type == "meta":
            kwargs = {**kwargs, "device": self.device}  # the capture built the model on the meta device
        return super().call_function(target, args, kwargs)


def _refuse_recurrent(module, path: str) -> None:
    """A model with an nn.LSTM, nn.GRU or nn.RNN is out, said at once. Captured, such a module unrolls
    into a region per time step, layer and direction (36_LSTMHn: 512 steps x 6 layers), whose capture
    and lowering alone ran past 300 s on two CPU cores, and whose kernels, one launch per step, could
    not beat cuDNN's fused recurrent kernel. A recurrent module kept whole as one reference region
    would let the rest of such a model be searched; that is not built."""
    from evaluation.problem import init_inputs

    try:
        with torch.device("meta"):
            model = module.Model(*init_inputs(module))
    except Exception:
        return  # built on the host by the capture (capture._meta_model), which says what fails
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.RNNBase):
            layers = m.num_layers * (2 if m.bidirectional else 1)
            raise ModelError(
                f"{path}: recurrent `{name}` (nn.{type(m).__name__}, {layers} layer-directions) is out of the "
                "model flow: captured, it unrolls into a region per time step, and no per-step kernel beats "
                "cuDNN's fused one"
            )


def trace(source: str, path: str, device: str = "cpu", seed: int = 0) -> Traced:
    """Capture the model's forward (the lowering's capture) and build the real model and inputs."""
    from agent.proposers.lowering.capture import capture
    from evaluation.problem import exec_problem_source, init_inputs

    module = exec_problem_source(source, path)
    _refuse_recurrent(module, path)
    captured = capture(source, path, static=True)  # sizes as shipped: the flow writes real sizes
    torch.manual_seed(seed)
    try:
        model = module.Model(*init_inputs(module)).eval().to(device)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    except Exception as exc:
        raise ModelError(f"{path}: cannot build the model: {type(exc).__name__}: {exc}") from exc
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    by_input = dict(zip(captured.input_names, inputs))
    args: list = []
    for ph in captured.placeholders:
        if ph.kind == "param":
            args.append(state[ph.name])
        elif ph.kind == "attr":
            # a plain tensor attribute, on the run's device as the reference moves it; a copy, since the
            # profiled forwards of the real model may write into it (state.py)
            args.append(attribute(model, ph.name).detach().to(device).clone())
        elif ph.kind == "carrier":
            value = eval(ph.name, {"getattr": getattr}, {"self": model})  # an attribute path of attr_expr
            args.append(torch.empty(int(value) + CARRIER_OFFSET, device=device))
        elif ph.kind == "scalar":
            args.append(torch.tensor(by_input[ph.name], dtype=ph.dtype, device=device))
        else:
            args.append(by_input[ph.name])
    return Traced(captured=captured, model=model, inputs=inputs, args=args, device=device)


def run(traced: Traced, label: Optional[Callable] = None, record: bool = False):
    """One forward through the captured graph; `record` keeps every node's Meta on `traced`."""
    runner = _Runner(traced.captured.gm, traced.device, label)
    with torch.no_grad():
        out = runner.run(*traced.args)
    if record:
        traced.meta = {n: _describe(v) for n, v in runner.seen.items()}
    return out
