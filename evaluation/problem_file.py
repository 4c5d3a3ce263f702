"""The one loader of KernelBench-style problem files: read, find the size constants, rebind, execute.

A problem file is executed as a fresh module for every shape case, with its module-level size constants
rebound to the case's values *before* the module body runs: the constants are replaced in the syntax
tree, so derived globals (`hidden = 4 * dim`) follow, and `get_inputs()` / `get_init_inputs()` /
`Model` see the case's sizes. The parent and the worker both build a case this way, so they agree on
shapes without sharing any Python object.

A size constant ("slot") is a module-level assignment whose value is an integer written with literals
only: `M = 4096`, `M = 16384 * 4`, `batch_size = 8192 * 2`, `N = 1 << 20`; or each integer of a tuple or
list of such, `input_shape = (32768,)`, named `input_shape[0]`. A value that reads another name
(`hidden = 4 * dim`) is derived, not a slot: it follows the slots it reads.

problem.py (problem identity and shape sets) and shapes.py (deriving shape sets) import this module;
neither imports the other's internals, so there is no import cycle between them.
"""

from __future__ import annotations

import ast
import copy
import operator
import re
import types
from pathlib import Path
from typing import Any

from evaluation.errors import ProblemError
from evaluation.static_check import parse

SLOT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?$")
_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}


def read_source(path: Path | str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ProblemError(f"cannot read problem file {path}: {exc.strerror}") from None


def parse_source(source: str, path: Path | str) -> ast.Module:
    try:
        return parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(f"syntax error in problem file {path} line {exc.lineno}: {exc.msg}") from None


def literal_int(node: ast.AST) -> int | None:
    """The value of an integer expression made of literals only (`16384 * 4`, `1 << 20`), else None."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = literal_int(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = literal_int(node.left), literal_int(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, (ast.Pow, ast.LShift)) and not 0 <= right <= 64:
            return None
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            return None
        return _BINOPS[type(node.op)](left, right)
    return None


def _assignment(node: ast.stmt) -> tuple[str, ast.AST] | None:
    """(name, value) of a module-level constant. A chained one (`height = width = 256`, 13 KernelBench
    dev files) is one slot named by its first target: its names share one value node, so a rebinding
    sizes them together, as the file declares them equal."""
    if isinstance(node, ast.Assign) and node.targets and all(isinstance(t, ast.Name) for t in node.targets):
        return node.targets[0].id, node.value  # type: ignore[attr-defined]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return node.target.id, node.value
    return None


def _targets(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def size_slots(tree: ast.Module) -> dict[str, int]:
    """Every integer size constant of the module, in file order: `NAME` or `NAME[i]` -> its value."""
    found: dict[str, int] = {}
    for node in tree.body:
        assigned = _assignment(node)
        if assigned is None:
            continue
        name, value = assigned
        names = _targets(node)
        for key in [k for k in found if SLOT.match(k).group(1) in names]:
            del found[key]  # a later assignment of the same name is the one that counts
        scalar = literal_int(value)
        if scalar is not None:
            if scalar >= 0:  # a negative constant is an axis (`dim = -1`), never a size
                found[name] = scalar
        elif isinstance(value, (ast.Tuple, ast.List)) and value.elts:
            items = [literal_int(e) for e in value.elts]
            if all(v is not None and v >= 0 for v in items):
                found.update({f"{name}[{i}]": v for i, v in enumerate(items)})
    return found


def size_constants(tree: ast.Module) -> dict[str, int]:
    """Kept for callers of the old name: the slots (scalars and tuple items)."""
    return size_slots(tree)


def rebind(tree: ast.Module, params: dict[str, int]) -> ast.Module:
    """A copy of the tree with each slot named in `params` set to its value (line numbers kept)."""
    tree = copy.deepcopy(tree)
    wanted: dict[str, dict[int | None, int]] = {}
    for key, value in params.items():
        match = SLOT.match(key)
        if match is None:
            raise ProblemError(f"malformed size constant {key!r}; expected NAME or NAME[index]")
        index = match.group(2)
        wanted.setdefault(match.group(1), {})[None if index is None else int(index)] = int(value)
    for node in tree.body:
        assigned = _assignment(node)
        if assigned is None or assigned[0] not in wanted:
            continue
        name, value = assigned
        for index, new in wanted[name].items():
            if index is None:
                if literal_int(value) is not None:
                    node.value = ast.Constant(value=new)
            elif isinstance(value, (ast.Tuple, ast.List)) and index < len(value.elts):
                value.elts[index] = ast.Constant(value=new)
    return ast.fix_missing_locations(tree)


def top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def exec_problem(path: Path | str, params: dict[str, int] | None = None) -> types.ModuleType:
    """Execute the problem file as a fresh module (never registered in sys.modules)."""
    return exec_problem_source(read_source(path), path, params)


def exec_problem_source(source: str, path: Path | str, params: dict[str, int] | None = None) -> types.ModuleType:
    """Execute a problem's source text as a fresh module; `path` names it in messages and tracebacks.

    The KernelBench names are checked in the syntax tree first: a file that is not a problem (a
    script, a candidate) is refused before any of its code runs."""
    path = Path(path)
    tree = parse_source(source, path)
    for required in ("Model", "get_inputs"):
        if required not in top_level_names(tree):
            raise ProblemError(f"problem file {path} defines no `{required}` (KernelBench format)")
    if params:
        tree = rebind(tree, params)
    module = types.ModuleType(f"kscout_problem_{path.stem}")
    module.__file__ = str(path)
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)
    except Exception as exc:  # the user's file failed while running: that is a bad problem, one line
        raise ProblemError(f"problem file {path} failed to run: {type(exc).__name__}: {exc}") from None
    for name, value in (params or {}).items():
        if name.isidentifier():
            setattr(module, name, value)  # constants that SHAPES binds but the file derives or lacks
    for required in ("Model", "get_inputs"):
        if not callable(getattr(module, required, None)):
            raise ProblemError(f"problem file {path} defines no `{required}` (KernelBench format)")
    return module


def init_inputs(module: types.ModuleType) -> list[Any]:
    fn = getattr(module, "get_init_inputs", None)
    return list(fn()) if callable(fn) else []


def normalized_source(source: str) -> str:
    """Comments, blank lines and trailing spaces do not change a problem's identity."""
    return ast.unparse(parse(source))
