"""The expression printer: sympy index arithmetic and scalar expression trees as Triton (or Python) text.

One table maps each pointwise op to Triton. Transcendentals that the interpreter lacks (tanh,
log1p, expm1, pow) are written through exp/log, so the same candidate runs on a GPU and under
TRITON_INTERPRET=1. Loads are masked by the masks of the index variables they depend on (an index
past the end of a block is never dereferenced), and by the condition of any enclosing `Masked` node
(padding, pooling windows). Common subexpressions are written once per scope.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import sympy

from agent.proposers.lowering.ir import (
    BOOL,
    FLOATS,
    I64,
    TL_DTYPE,
    Arg,
    Const,
    E,
    Index,
    Load,
    LoweringError,
    Masked,
    Op,
)

# ---------------------------------------------------------------- sympy -> text


def _paren(text: str) -> str:
    return text if text.replace("_", "").isalnum() else f"({text})"


def sympy_text(expr, names: Optional[dict] = None, mode: str = "triton") -> str:
    """Integer (and in Python mode, float) size arithmetic as text; `names` renames symbols."""
    from torch.utils._sympy.functions import (
        CeilDiv,
        CleanDiv,
        FloatPow,
        FloatTrueDiv,
        FloorDiv,
        IntTrueDiv,
        ModularIndexing,
        PowByNatural,
        PythonMod,
        ToFloat,
        TruncToInt,
    )
    from torch.utils._sympy.functions import (
        Max as TMax,
    )
    from torch.utils._sympy.functions import (
        Min as TMin,
    )
    from torch.utils._sympy.functions import (
        Mod as TMod,
    )

    names = names or {}
    e = sympy.sympify(expr)

    def p(x) -> str:
        if isinstance(x, sympy.Symbol):
            return names.get(x, x.name)
        if isinstance(x, sympy.Integer):
            return str(int(x))
        if isinstance(x, sympy.Float) or isinstance(x, sympy.Rational) and mode == "python":
            return repr(float(x))
        if isinstance(x, sympy.Rational):
            return f"({int(x.p)} / {int(x.q)})"
        if isinstance(x, sympy.Add):
            terms = sorted(x.args, key=lambda t: (t.is_number, str(t)))
            out = p(terms[0])
            for t in terms[1:]:
                if t.could_extract_minus_sign():
                    out += " - " + _paren(p(-t))
                else:
                    out += " + " + p(t)
            return out
        if isinstance(x, sympy.Mul):
            coeff, rest = x.as_coeff_Mul()
            if coeff == -1:
                return "-" + _paren(p(rest))
            num, den = sympy.fraction(x)
            if den != 1 and mode == "python":
                return f"{_paren(p(num))} / {_paren(p(den))}"
            return " * ".join(_paren(p(a)) for a in x.args)
        if isinstance(x, sympy.Pow):
            base, exp = x.args
            if exp.is_Integer and int(exp) > 0:
                return " * ".join([_paren(p(base))] * int(exp))
            if mode == "python":
                return f"({p(base)}) ** ({p(exp)})"
            raise LoweringError(f"internal: power {x} in kernel index arithmetic")
        if isinstance(x, FloorDiv):
            return f"{_paren(p(x.args[0]))} // {_paren(p(x.args[1]))}"
        if isinstance(x, (CleanDiv, IntTrueDiv)):
            return f"{_paren(p(x.args[0]))} // {_paren(p(x.args[1]))}"
        if isinstance(x, CeilDiv):
            return f"-((-{_paren(p(x.args[0]))}) // {_paren(p(x.args[1]))})"
        if isinstance(x, ModularIndexing):
            a, b, c = x.args
            inner = p(a) if b == 1 else f"{_paren(p(a))} // {_paren(p(b))}"
            return f"({inner}) % {_paren(p(c))}"
        if isinstance(x, (sympy.Mod, TMod, PythonMod)):
            return f"{_paren(p(x.args[0]))} % {_paren(p(x.args[1]))}"
        if isinstance(x, (sympy.Min, TMin, sympy.Max, TMax)):
            is_min = isinstance(x, (sympy.Min, TMin))
            args = [p(a) for a in x.args]
            if mode == "python":
                return f"{'min' if is_min else 'max'}({', '.join(args)})"
            out = args[0]
            for a in args[1:]:
                out = f"tl.{'minimum' if is_min else 'maximum'}({out}, {a})"
            return out
        if isinstance(x, (sympy.floor, TruncToInt)) and mode == "python":
            return f"int({p(x.args[0])})"
        if isinstance(x, sympy.ceiling) and mode == "python":
            return f"math.ceil({p(x.args[0])})"
        if isinstance(x, (FloatTrueDiv,)) and mode == "python":
            return f"({p(x.args[0])}) / ({p(x.args[1])})"
        if isinstance(x, ToFloat) and mode == "python":
            return f"float({p(x.args[0])})"
        if isinstance(x, (FloatPow, PowByNatural)) and mode == "python":
            return f"({p(x.args[0])}) ** ({p(x.args[1])})"
        if mode == "python":
            fn = type(x).__name__.lower()
            if fn in ("sqrt", "exp", "log", "sin", "cos", "tanh"):
                return f"math.{fn}({', '.join(p(a) for a in x.args)})"
        raise LoweringError(f"cannot print size expression {x} ({type(x).__name__})")

    return p(e)


# ---------------------------------------------------------------- scalar expressions -> Triton


_UNARY = {
    "exp": "tl.exp({a})",
    "log": "tl.log({a})",
    "sqrt": "tl.sqrt({a})",
    "rsqrt": "tl.math.rsqrt({a})",
    "sin": "tl.sin({a})",
    "cos": "tl.cos({a})",
    "erf": "tl.math.erf({a})",
    "abs": "tl.abs({a})",
    "neg": "-{a}",
    "floor": "tl.floor({a})",
    "ceil": "tl.ceil({a})",
    "exp2": "tl.exp2({a})",
    "log2": "tl.log2({a})",
    "log10": "(tl.log({a}) * 0.4342944819032518)",
    "not": "({a} == 0)",
    "isnan": "({a} != {a})",
    "relu": "tl.where({a} > 0, {a}, 0)",
    "reciprocal": "(1.0 / {a})",
    # no libdevice under the interpreter: through exp/log, in forms that do not overflow
    "sigmoid": "(1.0 / (1.0 + tl.exp(-{a})))",
    "silu": "({a} / (1.0 + tl.exp(-{a})))",
    "tanh": "(1.0 - 2.0 / (tl.exp(2.0 * {a}) + 1.0))",
    "log1p": "tl.log(1.0 + {a})",
    "expm1": "(tl.exp({a}) - 1.0)",
    "sign": "(({a} > 0).to({t}) - ({a} < 0).to({t}))",
    "trunc": "tl.where({a} < 0, tl.ceil({a}), tl.floor({a}))",
    "round": "tl.where(tl.abs({a} - tl.floor({a}) - 0.5) < 1e-7, 2.0 * tl.floor((tl.floor({a}) + 1.0) * 0.5), "
    "tl.floor({a} + 0.5))",
}

_BINARY = {
    "add": "{a} + {b}",
    "sub": "{a} - {b}",
    "mul": "{a} * {b}",
    "div": "{a} / {b}",
    "maximum": "tl.where(({a} > {b}) | ({a} != {a}), {a}, {b})",
    "minimum": "tl.where(({a} < {b}) | ({a} != {a}), {a}, {b})",
    "eq": "{a} == {b}",
    "ne": "{a} != {b}",
    "lt": "{a} < {b}",
    "le": "{a} <= {b}",
    "gt": "{a} > {b}",
    "ge": "{a} >= {b}",
    "and": "{a} & {b}",
    "or": "{a} | {b}",
    "xor": "{a} ^ {b}",
    "pow": "tl.exp({b} * tl.log({a}))",
    "floordiv": "tl.floor({a} / {b})",
    "truncdiv": "({a} / {b})",
    "remainder": "({a} - {b} * tl.floor({a} / {b}))",
    "fmod": "({a} - {b} * ({a} / {b}).to(tl.int32).to({t}))",
}

# Triton's fp32 `/` is div.full.f32 on NVIDIA, up to 2 ulp off (the interpreter divides exactly, so the CPU
# never sees it). PyTorch divides with IEEE rounding, and the difference is not noise everywhere: a mean that
# misses a constant row's value becomes noise / sqrt(eps) after x - mean, and floor(6 / 3) can be 1. Quotients
# computed in fp32 use tl.div_rn (its operands cast, so an int or a constexpr operand is fine); float64 `/` is
# already IEEE.
_QUOTIENTS = ("div", "floordiv", "remainder", "fmod")
_PRECISE_DIV = "tl.div_rn(tl.cast({a}, tl.float32), tl.cast({b}, tl.float32))"


def _const_text(value, dtype: str) -> str:
    if dtype in FLOATS:
        v = float(value)
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    if dtype == BOOL:
        return "1" if value else "0"
    return str(int(value))


@dataclass
class Axis:
    """How an index symbol appears in a kernel: the Triton expression that holds it and its mask."""

    var: str
    mask: Optional[str] = None


class Writer:
    """Writes the Triton lines of scalar expressions over a kernel's index space, with CSE."""

    def __init__(
        self,
        axes: dict,
        lines: list,
        prefix: str = "t",
        counter: Optional[list] = None,
        buffers: Optional[dict] = None,
        sizes: Optional[dict] = None,
        indent: str = "    ",
        resolve=None,
    ):
        self.axes = axes  # sympy.Symbol -> Axis
        self.lines = lines
        self.prefix = prefix
        self.counter = counter if counter is not None else [0]
        self.cache: dict = {}
        self.buffers = buffers or {}  # buffer name -> kernel parameter name
        self.sizes = sizes or {}  # size symbol -> kernel parameter name
        self.indent = indent
        self.resolve = resolve  # Load -> replacement E or a variable name (fusion), or None
        self.mask_stack: list[str] = []
        self.eviction = ""  # "evict_last" keeps a row in L2 for the next pass; "evict_first" streams it

    def fresh(self) -> str:
        self.counter[0] += 1
        return f"{self.prefix}{self.counter[0]}"

    def emit(self, code: str) -> str:
        name = self.fresh()
        self.lines.append(f"{self.indent}{name} = {code}")
        return name

    def index(self, expr) -> str:
        names = {s: a.var for s, a in self.axes.items()}
        names.update(self.sizes)
        return sympy_text(expr, names)

    def masks_of(self, expr) -> list[str]:
        out = []
        for s in sorted(sympy.sympify(expr).free_symbols, key=lambda s: s.name):
            a = self.axes.get(s)
            if a is not None and a.mask and a.mask not in out:
                out.append(a.mask)
        return out

    def value(self, e: E) -> str:
        key = (e, tuple(self.mask_stack))
        if key in self.cache:
            return self.cache[key]
        out = self._value(e)
        self.cache[key] = out
        return out

    def _value(self, e: E) -> str:
        t = TL_DTYPE[e.dtype]
        if isinstance(e, Const):
            return self.emit(f"tl.full([1], {_const_text(e.value, e.dtype)}, {t})")
        if isinstance(e, Arg):
            return e.name
        if isinstance(e, Index):
            text = self.index(e.expr)
            code = f"({text})" if e.expr.free_symbols & set(self.axes) else f"tl.full([1], {text}, tl.int64)"
            return self.emit(code if e.dtype == I64 else f"({code}).to({t})")
        if isinstance(e, Load):
            if self.resolve is not None:
                got = self.resolve(e)
                if isinstance(got, str):
                    return got
                if got is not None:
                    return self.value(got)
            ptr = self.buffers.get(e.buffer)
            if ptr is None:
                raise LoweringError(f"internal: kernel reads {e.buffer}, which is not among its arguments")
            masks = self.masks_of(e.index) + self.mask_stack
            mask = " & ".join(masks)
            other = "0" if e.dtype not in FLOATS else "0.0"
            idx = self.index(e.index)
            hint = f', eviction_policy="{self.eviction}"' if self.eviction else ""
            if mask:
                code = f"tl.load({ptr} + ({idx}), mask={mask}, other={other}{hint})"
            else:
                code = f"tl.load({ptr} + ({idx}){hint})"
            return self.emit(f"{code}.to({t})")
        if isinstance(e, Masked):
            cond = self.value(e.cond)
            self.mask_stack.append(cond)
            try:
                body = self.value(e.body)
            finally:
                self.mask_stack.pop()
            return self.emit(f"tl.where({cond}, {body}, {_const_text(e.other, e.dtype)})")
        if isinstance(e, Op):
            return self._op(e, t)
        raise LoweringError(f"internal: expression {type(e).__name__}")

    def _op(self, e: Op, t: str) -> str:
        args = [self.value(a) for a in e.args]
        if e.op == "cast":
            target = TL_DTYPE[e.params[0]]
            if e.params[0] == BOOL:
                return self.emit(f"({args[0]} != 0)")
            return self.emit(f"{args[0]}.to({target})")
        if e.op == "where":
            return self.emit(f"tl.where({args[0]}, {args[1]}, {args[2]})")
        if e.op == "pow_const":
            return self.emit(_pow_const(args[0], e.params[0], t))
        if e.op == "rpow_const":
            base = e.params[0]
            if base <= 0:
                return self.emit(f"tl.exp({args[0]} * tl.log(tl.full([1], {base!r}, {t})))")
            return self.emit(f"tl.exp({args[0]} * {math.log(base)!r})")
        if e.op in _UNARY:
            return self.emit(_UNARY[e.op].format(a=args[0], t=t))
        if e.op in _BINARY:
            text = _BINARY[e.op]
            if e.op in _QUOTIENTS and t == "tl.float32":
                text = text.replace("{a} / {b}", _PRECISE_DIV)
            return self.emit(text.format(a=args[0], b=args[1], t=t))
        raise LoweringError(f"internal: no Triton text for op {e.op}")


def _pow_const(a: str, exp: float, t: str) -> str:
    if exp == 2.0:
        return f"{a} * {a}"
    if exp == 3.0:
        return f"{a} * {a} * {a}"
    if exp == 1.0:
        return a
    if exp == 0.5:
        return f"tl.sqrt({a})"
    if exp == -0.5:
        return f"tl.math.rsqrt({a})"
    if exp == -1.0:
        return f"(1.0 / {a})"
    if exp == 0.0:
        return f"tl.full([1], 1.0, {t})"
    if float(exp).is_integer() and 2 <= abs(exp) <= 8:
        product = " * ".join([a] * int(abs(exp)))
        return f"({product})" if exp > 0 else f"(1.0 / ({product}))"
    if float(exp).is_integer():
        n = int(abs(exp))
        mag = f"tl.exp({float(n)!r} * tl.log(tl.abs({a})))"
        signed = f"tl.where(({a} < 0) & ({n % 2} == 1), -{mag}, {mag})"
        return signed if exp > 0 else f"(1.0 / {signed})"
    return f"tl.exp({exp!r} * tl.log({a}))"


def tl_dtype(storage: str) -> str:
    return {
        "float32": "tl.float32",
        "float64": "tl.float64",
        "int64": "tl.int64",
        "int32": "tl.int32",
        "bool": "tl.int1",
        "bfloat16": "tl.bfloat16",
        "float16": "tl.float16",
    }.get(storage, "tl.float32")
