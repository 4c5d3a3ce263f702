"""The lowering's intermediate representation: sizes as sympy expressions, values as index functions.

A tensor in the lowered program is a function from an index (one sympy expression per dimension) to a
scalar expression tree (`E`), the way a compiler's loop-level IR describes it. Pointwise ops and views
never touch memory: they compose index functions, so a chain of them costs nothing until a kernel
evaluates it. Only a few things are materialised as buffers: the inputs and parameters, the results
of reductions, contractions and scans, the graph outputs, and pointwise values read so often that
recomputing them would cost more than a round trip to memory. Each materialised value is produced by
one task; the scheduler (schedule.py) groups tasks into kernels.

Sizes are sympy expressions over the symbols that the traced graph's symbolic shapes use, so one
generated candidate serves every shape of the problem: the wrapper binds each symbol from the actual
tensors (or from a module attribute) when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import sympy

from evaluation.errors import KscoutError

Expr = sympy.Expr
One = sympy.Integer(1)
Zero = sympy.Integer(0)


class LoweringError(KscoutError):
    """A reference the lowering cannot turn into Triton kernels (an op or a pattern it does not know)."""


class UnsupportedOps(LoweringError):
    """The reference runs ops that no schedule covers; the message names them and the schedules known."""

    def __init__(self, ops: Sequence[str], schedules: Sequence[str], where: str = ""):
        self.ops = tuple(dict.fromkeys(ops))
        names = ", ".join(self.ops)
        super().__init__(
            f"{where}{': ' if where else ''}no schedule lowers {names}; schedules known: {', '.join(schedules)}"
        )


# compute dtypes: what a value is while a kernel works on it (storage dtypes live on buffers)
F32, F64, I64, I32, BOOL = "f32", "f64", "i64", "i32", "i1"
FLOATS = (F32, F64)
TL_DTYPE = {F32: "tl.float32", F64: "tl.float64", I64: "tl.int64", I32: "tl.int32", BOOL: "tl.int1"}


def compute_dtype(torch_dtype) -> str:
    """Floats compute in fp32 (fp64 stays fp64), integers in their width, bools as int1."""
    import torch

    if torch_dtype == torch.float64:
        return F64
    if torch_dtype.is_floating_point:
        return F32
    if torch_dtype == torch.bool:
        return BOOL
    if torch_dtype in (torch.int32, torch.int16, torch.int8, torch.uint8):
        return I32
    return I64


def sym(expr) -> Expr:
    return sympy.sympify(expr) if not isinstance(expr, sympy.Basic) else expr


def prod(values: Sequence[Expr]) -> Expr:
    out = One
    for v in values:
        out = out * v
    return out


def strides_of(shape: Sequence[Expr]) -> list[Expr]:
    out, acc = [], One
    for size in reversed(shape):
        out.append(acc)
        acc = acc * size
    return list(reversed(out))


def flat_index(shape: Sequence[Expr], index: Sequence[Expr]) -> Expr:
    """Row-major offset of `index` in a contiguous tensor of `shape` (size-1 dims contribute nothing)."""
    total = Zero
    for size, stride, i in zip(shape, strides_of(shape), index):
        if size != One:
            total = total + i * stride
    return total


def unflatten(flat: Expr, shape: Sequence[Expr]) -> list[Expr]:
    """The per-dimension index of a row-major offset (FloorDiv / ModularIndexing, as torch's sympy has them)."""
    from torch.utils._sympy.functions import FloorDiv, ModularIndexing

    out = []
    strides = strides_of(shape)
    for d, (size, stride) in enumerate(zip(shape, strides)):
        if size == One:
            out.append(Zero)
        elif d == 0:
            out.append(FloorDiv(flat, stride) if stride != One else flat)
        else:
            out.append(ModularIndexing(flat, stride, size))
    return out


def same(a: Expr, b: Expr) -> bool:
    return sympy.expand(sym(a) - sym(b)) == 0


# ---------------------------------------------------------------- scalar expression trees


@dataclass(frozen=True)
class E:
    """A scalar expression evaluated at every point of a kernel's index space."""

    dtype: str


@dataclass(frozen=True)
class Const(E):
    value: Union[float, int, bool]


@dataclass(frozen=True)
class Arg(E):
    """A scalar the wrapper passes to the kernel (a Python number input, a size-derived float)."""

    name: str


@dataclass(frozen=True)
class Index(E):
    """An integer index expression used as a value (arange, argmax positions, masks)."""

    expr: Expr


@dataclass(frozen=True)
class Load(E):
    buffer: str
    index: Expr


@dataclass(frozen=True)
class Op(E):
    op: str
    args: tuple
    params: tuple = ()  # non-expression parameters (a target dtype, a constant exponent)


@dataclass(frozen=True)
class Masked(E):
    """`body` where `cond` holds, else `other`; loads inside `body` are masked by `cond` (they may be
    out of bounds where it does not hold: padding, pooling windows, concatenation)."""

    cond: E
    body: E
    other: Union[float, int, bool]


def walk(e: E):
    yield e
    if isinstance(e, Op):
        for a in e.args:
            yield from walk(a)
    elif isinstance(e, Masked):
        yield from walk(e.cond)
        yield from walk(e.body)


def loads(e: E) -> list[Load]:
    return [x for x in walk(e) if isinstance(x, Load)]


def size_of(e: E) -> int:
    return sum(1 for _ in walk(e))


def free_symbols(e: E) -> set:
    out: set = set()
    for x in walk(e):
        if isinstance(x, Load):
            out |= x.index.free_symbols
        elif isinstance(x, Index):
            out |= x.expr.free_symbols
    return out


def substitute(e: E, fn: Callable[[E], Optional[E]]) -> E:
    """Rebuild `e` bottom-up, replacing any node for which `fn` returns a value."""
    got = fn(e)
    if got is not None:
        return got
    if isinstance(e, Op):
        return Op(e.dtype, e.op, tuple(substitute(a, fn) for a in e.args), e.params)
    if isinstance(e, Masked):
        return Masked(e.dtype, substitute(e.cond, fn), substitute(e.body, fn), e.other)
    return e


def reindex(e: E, mapping: dict) -> E:
    """Substitute index symbols in every load and index expression."""

    def fn(x: E) -> Optional[E]:
        if isinstance(x, Load):
            return Load(x.dtype, x.buffer, x.index.xreplace(mapping))
        if isinstance(x, Index):
            return Index(x.dtype, x.expr.xreplace(mapping))
        return None

    return substitute(e, fn)


# ---------------------------------------------------------------- buffers and values


@dataclass
class Buffer:
    """Memory: an input, a parameter, a plain tensor attribute, a scalar argument, or a tensor a task writes.

    `storage` is a torch dtype name, or "float" for the case's floating dtype (what the reference's
    floating outputs and parameters are at run time: float32, bfloat16, ...).
    """

    name: str
    shape: tuple
    storage: str
    kind: str  # "input" | "param" | "attr" | "scalar" | "temp" | "output"
    source: str = ""  # for inputs, params and attrs: the Python expression the wrapper reads it from

    @property
    def compute(self) -> str:
        if self.storage == "float":
            return F32
        return {
            "float64": F64,
            "bool": BOOL,
            "int32": I32,
            "int16": I32,
            "int8": I32,
            "uint8": I32,
            "float32": F32,
            "bfloat16": F32,
            "float16": F32,
        }.get(self.storage, I64)


class Value:
    """A tensor of the lowered program: a shape, a compute dtype and an index function."""

    shape: tuple
    dtype: str

    def load(self, index: Sequence[Expr]) -> E:
        raise NotImplementedError

    # a value that reads a contiguous buffer with its own row-major offsets (a realised result, or a
    # reshape of one): outputs can be views of it and reshapes need no index arithmetic
    alias: Optional[Buffer] = None


class BufferValue(Value):
    def __init__(self, buffer: Buffer, dtype: Optional[str] = None):
        self.buffer = buffer
        self.shape = tuple(buffer.shape)
        self.dtype = dtype or buffer.compute
        self.alias = buffer

    def load(self, index: Sequence[Expr]) -> E:
        if self.buffer.kind == "scalar":
            return Arg(self.dtype, self.buffer.name)
        return Load(self.dtype, self.buffer.name, flat_index(self.shape, index))


class Lazy(Value):
    def __init__(
        self,
        shape: Sequence[Expr],
        dtype: str,
        fn: Callable[[Sequence[Expr]], E],
        alias: Optional[Buffer] = None,
        view_of: Optional["Value"] = None,
    ):
        self.shape = tuple(sym(s) for s in shape)
        self.dtype = dtype
        self.fn = fn
        self.alias = alias
        self.view_of = view_of  # a row-major reshape of this value: realising it serves this one too

    def load(self, index: Sequence[Expr]) -> E:
        if len(index) != len(self.shape):
            raise LoweringError(f"internal: index of rank {len(index)} into a value of rank {len(self.shape)}")
        return self.fn(list(index))


# ---------------------------------------------------------------- tasks: what writes a buffer


@dataclass
class Task:
    out: Buffer
    kind: str = field(init=False, default="")

    def reads(self) -> set[str]:
        raise NotImplementedError


def index_vars(prefix: str, n: int) -> list[sympy.Symbol]:
    return [sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True) for i in range(n)]


@dataclass
class PointwiseTask(Task):
    """out[i] = fn(i) over out.shape."""

    body: E = None  # over index vars x0..x{n-1}

    def __post_init__(self):
        self.kind = "pointwise"

    def reads(self) -> set[str]:
        return {ld.buffer for ld in loads(self.body)}


REDUCTIONS = ("sum", "max", "min", "prod", "argmax", "argmin", "any", "all")


@dataclass
class ReductionTask(Task):
    """out[kept] = reduce(fn(full index)) over the reduced axes of `full_shape`.

    `full_shape` is the index space the body is written over (kept and reduced axes, in their order);
    the output is that space with the reduced axes dropped. Pooling is a reduction over window axes.
    """

    full_shape: tuple = ()
    reduced: tuple = ()  # axes of full_shape that are reduced
    rtype: str = "sum"
    body: E = None  # over index vars f0..f{n-1} of full_shape

    def __post_init__(self):
        self.kind = "reduction"

    def kept(self) -> tuple:
        return tuple(i for i in range(len(self.full_shape)) if i not in self.reduced)

    def reads(self) -> set[str]:
        return {ld.buffer for ld in loads(self.body)}


@dataclass
class MatmulTask(Task):
    """out[b..., m, n] = sum_k a(b..., m, k) * b(b..., k, n); a and b are index functions."""

    batch: tuple = ()
    m: Expr = None
    n: Expr = None
    k: Expr = None
    a_body: E = None  # over vars b0.., m, k
    b_body: E = None  # over vars b0.., k, n
    # where (b.., m, n) lands in `out`, one expression per dim of out.shape; None: out is (batch.., m, n).
    # A convolution's GEMM writes (n, g*OCg + m, spatial(n)) straight into the conv output layout.
    out_index: Optional[tuple] = None
    # The library call that computes the same product where one exists beside the index functions (a
    # convolution of two plain buffers: ("conv" | "conv_t", x buffer, w buffer, keyword arguments)), for a
    # hybrid's `engine="library"` (library.py); a matmul's views are read off a_body and b_body instead.
    library: Optional[tuple] = None

    def __post_init__(self):
        self.kind = "matmul"

    def coords(self, bvars, vm, vn) -> list:
        return list(self.out_index) if self.out_index is not None else list(bvars) + [vm, vn]

    def reads(self) -> set[str]:
        return {ld.buffer for ld in loads(self.a_body) + loads(self.b_body)}


@dataclass
class ScanTask(Task):
    """out = cumulative sum / product of fn along `axis` of out.shape."""

    axis: int = 0
    rtype: str = "sum"
    body: E = None  # over index vars x0..x{n-1} of out.shape

    def __post_init__(self):
        self.kind = "scan"

    def reads(self) -> set[str]:
        return {ld.buffer for ld in loads(self.body)}
