"""Walk the captured graph node by node and build the lowered program (buffers, tasks, bindings).

Placeholders become buffers, and each size symbol of theirs gets a binding: the Python expression
the candidate's forward reads it from (`x.shape[0]`, `self.gemm.weight.shape[1]`, the module setting
a carrier stands for). A dimension whose size is not a bare symbol (the trace fixed it) becomes a
run-time check, so a candidate never computes silently on a shape it was not written for.
"""

from __future__ import annotations

import operator
from typing import Any

import sympy
import torch

from agent.proposers.lowering import ir
from agent.proposers.lowering.capture import CARRIER_OFFSET, Captured, attr_expr
from agent.proposers.lowering.ir import (
    Arg,
    BufferValue,
    Lazy,
    LoweringError,
    PointwiseTask,
    Value,
    compute_dtype,
    index_vars,
    size_of,
    sym,
)
from agent.proposers.lowering.lowerings import LOWERINGS, Program, unsupported

RECOMPUTE_LIMIT = 48  # a pointwise value read by several consumers is stored once it is bigger than this


def _storage_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class Lowerer:
    def __init__(self, captured: Captured, name: str = ""):
        self.c = captured
        self.env = captured.shape_env
        self.name = name
        self.program = Program()
        self.values: dict[Any, Any] = {}
        self._scalars = 0

    # -- symbols ------------------------------------------------------------------------------------
    def expr(self, s) -> sympy.Expr:
        if isinstance(s, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            e = s.node.expr
            try:
                e = self.env.simplify(e)
            except Exception:
                e = self.env.replace(e)
            return e
        return sym(s)

    def _bind_dims(self, source: str, fake, check_bound: bool = False) -> tuple:
        """`check_bound`: a size already bound from another tensor is checked against it (module state,
        which a forward may have rebound since, must still fit the inputs it is computed with)."""
        shape = []
        for i, s in enumerate(fake.shape):
            e = self.expr(s)
            if isinstance(e, sympy.Symbol) and not (check_bound and e in self.program.bindings):
                self.program.bindings.setdefault(e, f"{source}.shape[{i}]")
            else:
                self.program.checks.append((f"{source}.shape[{i}]", e, source))
            shape.append(e)
        return tuple(shape)

    def scalar_arg(self, e: sympy.Expr) -> Value:
        """A size-derived non-integer (a softmax scale 1/sqrt(d)) computed by the wrapper and passed in."""
        name = f"c{self._scalars}"
        self._scalars += 1
        self.program.derived[name] = e
        return Lazy((), ir.F32, lambda idx, name=name: Arg(ir.F32, name))

    # -- the walk -----------------------------------------------------------------------------------
    def run(self) -> Program:
        p = self.program
        p.derived = {}
        p.tuple_output = self.c.tuple_output
        p.writes = [(w.name, w.how) for w in self.c.writes]
        graph = self.c.gm.graph
        ph_nodes = [n for n in graph.nodes if n.op == "placeholder"]
        if len(ph_nodes) != len(self.c.placeholders):
            raise LoweringError("internal: placeholder count differs from the capture's")
        for node, ph in zip(ph_nodes, self.c.placeholders):
            fake = node.meta.get("val")
            if ph.kind == "carrier":
                e = self.expr(fake.shape[0])
                if isinstance(e, sympy.Symbol):
                    p.bindings.setdefault(e, f"int({ph.name}) + {CARRIER_OFFSET}")
                else:
                    p.checks.append((f"int({ph.name}) + {CARRIER_OFFSET}", e, ph.name))
                self.values[node] = None
                continue
            if ph.kind == "scalar":
                buf = p.new_buffer((), _storage_name(ph.dtype), kind="scalar", source=ph.name, prefix="arg_")
                p.inputs.append(ph.name)
                self.values[node] = BufferValue(buf)
                continue
            if ph.kind == "param":
                source = attr_expr("self", ph.name)
                storage = "float" if ph.dtype.is_floating_point else _storage_name(ph.dtype)
                buf = p.new_buffer(self._bind_dims(source, fake), storage, kind="param", source=source, prefix="p_")
            elif ph.kind == "attr":
                if not node.users:  # an attribute the forward never reads is not read (nor moved) at all
                    self.values[node] = None
                    continue
                # its exact dtype: casting the model to the case's dtype leaves a plain tensor attribute as it is
                source = attr_expr("self", ph.name)
                storage = _storage_name(ph.dtype)
                buf = p.new_buffer(
                    self._bind_dims(source, fake, check_bound=True), storage, kind="attr", source=source, prefix="a_"
                )
            else:
                storage = "float" if ph.dtype.is_floating_point else _storage_name(ph.dtype)
                buf = p.new_buffer(self._bind_dims(ph.name, fake), storage, kind="input", source=ph.name, prefix="in_")
                p.inputs.append(ph.name)
            self.values[node] = BufferValue(buf)
        missing = []
        for node in graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.op != "call_function":
                raise LoweringError(f"internal: graph node {node.op} {node.target}")
            val = node.meta.get("val")
            if isinstance(val, (torch.SymInt, torch.SymFloat, int, float)) and not isinstance(val, bool):
                e = self.expr(val)
                self.values[node] = e if e.is_integer else self.scalar_arg(e)
                continue
            if node.target is operator.getitem:
                base = self.values[node.args[0]]
                self.values[node] = None if base is None else base[node.args[1]]
                continue
            fn = LOWERINGS.get(node.target) or LOWERINGS.get(_key(node.target))
            if fn is None:
                missing.append(_display(node.target, node))
            if missing:  # keep walking only to name every unsupported op
                self.values[node] = None
                continue
            args = [self._arg(a) for a in node.args]
            kwargs = {
                k: self._arg(v)
                for k, v in node.kwargs.items()
                if k not in ("device", "layout", "pin_memory", "memory_format", "dtype")
            }
            out = fn(self, node, *args, **kwargs)
            self.values[node] = self._maybe_realize(node, out)
        if missing:
            raise unsupported(missing, self.name)
        self._outputs(next(n for n in graph.nodes if n.op == "output"))
        self._dead_tasks()
        return p

    def _arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.values[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x) for x in a)
        if isinstance(a, torch.dtype):
            return a
        if isinstance(a, (torch.SymInt, torch.SymFloat)):
            return self.expr(a)
        return a

    def _maybe_realize(self, node, out):
        if not isinstance(out, Lazy) or out.alias is not None or len(node.users) < 2:
            return out
        body = out.load(index_vars("x", len(out.shape)))
        if size_of(body) <= RECOMPUTE_LIMIT:
            return out
        return self.realize(
            out, compute_dtype(node.meta["val"].dtype) if hasattr(node.meta.get("val"), "dtype") else out.dtype
        )

    def realize(self, value: Value, dtype: str, kind: str = "temp", storage: str = "") -> BufferValue:
        body = value.load(index_vars("x", len(value.shape)))
        store = (
            storage or {ir.F32: "float32", ir.F64: "float64", ir.I64: "int64", ir.I32: "int32", ir.BOOL: "bool"}[dtype]
        )
        buf = self.program.new_buffer(value.shape, store, kind=kind)
        return self.program.add(PointwiseTask(out=buf, body=body))

    # -- outputs and dead code ----------------------------------------------------------------------
    def _outputs(self, node) -> None:
        outs = node.args[0]
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        produced = {t.out.name for t in self.program.tasks}
        used: set[str] = set()
        for o in outs:
            v = self.values.get(o) if isinstance(o, torch.fx.Node) else None
            if not isinstance(v, Value):
                raise LoweringError(f"{self.name}: an output of the forward is not a tensor")
            meta = o.meta.get("val")
            floating = isinstance(meta, torch.Tensor) and meta.is_floating_point()
            storage = (
                "float" if floating else _storage_name(meta.dtype) if isinstance(meta, torch.Tensor) else "float32"
            )
            buf = v.alias
            direct = (
                buf is not None
                and buf.name in produced
                and buf.name not in used
                and ir.same(ir.prod(buf.shape), ir.prod(v.shape))
            )
            base = getattr(v, "view_of", None)
            if direct:
                buf.kind = "output"
                buf.storage = storage
            elif isinstance(base, Lazy) and base.alias is None:
                # a reshape of a computed value: store the value in its own layout, return a view of it
                buf = self.realize(base, base.dtype, kind="output", storage=storage).buffer
            else:
                realized = self.realize(v, v.dtype, kind="output", storage=storage)
                buf = realized.buffer
            used.add(buf.name)
            self.program.outputs.append((buf.name, tuple(v.shape)))

    def _dead_tasks(self) -> None:
        needed = {name for name, _ in self.program.outputs}
        keep = []
        for task in reversed(self.program.tasks):
            if task.out.name in needed:
                keep.append(task)
                needed |= task.reads()
        self.program.tasks = list(reversed(keep))


def _key(target) -> str:
    name = getattr(target, "name", None)
    if callable(name):
        try:
            full = target.name()
            return full.split(".")[0]
        except Exception:
            return str(target)
    return str(target)


def _display(target, node=None) -> str:
    text = str(target)
    if "convolution" in text and node is not None and isinstance(node.args[0], torch.fx.Node):
        val = node.args[0].meta.get("val")
        rank = val.dim() if isinstance(val, torch.Tensor) else 4
        transposed = len(node.args) > 6 and node.args[6] is True
        return f"conv{'_transpose' if transposed else ''}{max(1, rank - 2)}d"
    for prefix in ("aten.", "prims."):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    for suffix in (".default", ".Tensor", ".Scalar", ".int", ".dim"):
        if text.endswith(suffix):
            text = text[: -len(suffix)]
    return text


def lower(captured: Captured, name: str = "") -> Program:
    return Lowerer(captured, name).run()
