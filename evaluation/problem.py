"""Problems: a KernelBench-style reference file, its declared shape/dtype set, and its identity.

A problem file is executed as a fresh module for every shape case, with its module-level integer
constants rebound to the case's values *before* the module body runs: the constants are replaced in
the syntax tree, so derived globals (`hidden = 4 * dim`) follow, and `get_inputs()` /
`get_init_inputs()` / `Model` see the case's sizes. The parent and the worker both build a case this
way, so they agree on shapes without sharing any Python object.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import types
from pathlib import Path
from typing import Any

from evaluation.errors import ProblemError
from evaluation.records import DEFAULT_TOLERANCES, ProblemInfo, ShapeCase, Tolerance
from evaluation.static_check import parse

PROBLEMS_DIR = Path(__file__).resolve().parent / "problems"
SEEDS_DIR = Path(__file__).resolve().parent / "seeds"
DEFAULT_DTYPES = ("float32",)


def builtin_names() -> list[str]:
    return sorted(p.stem for p in PROBLEMS_DIR.glob("*.py") if not p.stem.startswith("_"))


def resolve_spec(spec: str) -> tuple[Path, bool]:
    """A built-in name or a path to a file; returns (path, builtin)."""
    names = builtin_names()
    if spec in names:
        return PROBLEMS_DIR / f"{spec}.py", True
    path = Path(spec).expanduser()
    if path.suffix == ".py" or "/" in spec or path.exists():
        if not path.is_file():
            raise ProblemError(f"problem file not found: {spec}")
        path = path.resolve()
        return path, path.parent == PROBLEMS_DIR
    raise ProblemError(f"unknown problem {spec!r}; built-in problems: {', '.join(names)}")


def read_source(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ProblemError(f"cannot read problem file {path}: {exc.strerror}") from None


def parse_source(source: str, path: Path) -> ast.Module:
    try:
        return parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(f"syntax error in problem file {path} line {exc.lineno}: {exc.msg}") from None


def size_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level `NAME = <int literal>` assignments, in file order: the knobs a shape case binds."""
    found: dict[str, int] = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Constant)
            and type(value.value) is int
        ):
            found[target.id] = value.value
    return found


def _rebind(tree: ast.Module, params: dict[str, int]) -> ast.Module:
    tree = copy.deepcopy(tree)  # keeps line numbers, so tracebacks point into the real file
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None
        )
        if isinstance(target, ast.Name) and target.id in params and isinstance(node.value, ast.Constant):
            node.value = ast.Constant(value=int(params[target.id]))
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
    path = Path(path)
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
        tree = _rebind(tree, params)
    module = types.ModuleType(f"kscout_problem_{path.stem}")
    module.__file__ = str(path)
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)
    except Exception as exc:  # the user's file failed while running: that is a bad problem, one line
        raise ProblemError(f"problem file {path} failed to run: {type(exc).__name__}: {exc}") from None
    for name, value in (params or {}).items():
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


def problem_id(source: str, cases: list[ShapeCase] | tuple[ShapeCase, ...]) -> str:
    shape_set = json.dumps([c.model_dump(mode="json") for c in cases], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((normalized_source(source) + "\n" + shape_set).encode()).hexdigest()[:16]


def tolerances(module: types.ModuleType, dtypes: tuple[str, ...]) -> dict[str, Tolerance]:
    declared = getattr(module, "TOLERANCES", {}) or {}
    out = {}
    for dtype in dtypes:
        if dtype in declared:
            atol, rtol = declared[dtype]
            out[dtype] = Tolerance(atol=float(atol), rtol=float(rtol))
        elif dtype in DEFAULT_TOLERANCES:
            out[dtype] = DEFAULT_TOLERANCES[dtype]
        else:
            raise ProblemError(f"no tolerance for dtype {dtype!r}; declare it in TOLERANCES")
    return out


def case_id(params: dict[str, int], dtype: str) -> str:
    return ",".join(f"{k}={v}" for k, v in params.items()) + "|" + dtype


def _check_overrides(overrides: dict[str, int], known: set[str]) -> None:
    for name, value in overrides.items():
        if name not in known:
            raise ProblemError(
                f"unknown constant {name!r} in --set; this problem's constants: {', '.join(sorted(known))}"
            )
        if type(value) is not int or value < 1:
            raise ProblemError(f"--set {name}={value!r}: sizes must be integers >= 1")


def _declared_cases(module, device_kind: str, overrides: dict[str, int]) -> list[tuple[dict, tuple]] | None:
    shapes = getattr(module, "SHAPES", None)
    if not isinstance(shapes, dict) or device_kind not in shapes:
        return None
    cases, seen = [], set()
    for entry in shapes[device_kind]:
        params = {k: int(v) for k, v in entry.items() if k != "tags"}
        params.update(overrides)
        key = tuple(sorted(params.items()))
        if key in seen:
            continue
        seen.add(key)
        cases.append((params, tuple(entry.get("tags", ()))))
    return cases


def _select_timed(cases: list[ShapeCase], timed: list[str] | tuple[str, ...]) -> list[ShapeCase]:
    """Only the named cases keep (or gain) the "timed" tag; every other tag stays as declared.

    The tags are part of the problem id, so a search timed on one case never reuses an evaluation
    that was timed on another."""
    wanted = list(dict.fromkeys(timed))
    valid = [c.case_id for c in cases]
    unknown = [w for w in wanted if w not in valid]
    if unknown:
        raise ProblemError(f"unknown case id {', '.join(map(repr, unknown))} for --time-case; "
                           f"valid ids: {', '.join(valid)}")
    out = []
    for c in cases:
        tags = tuple(t for t in c.tags if t != "timed") + (("timed",) if c.case_id in wanted else ())
        out.append(c.model_copy(update={"tags": tags}))
    return out


def _select_dtypes(declared: tuple[str, ...], wanted: list[str] | tuple[str, ...] | None, path) -> tuple[str, ...]:
    if not wanted:
        return declared
    unknown = [d for d in dict.fromkeys(wanted) if d not in declared]
    if unknown:
        raise ProblemError(f"{Path(path).stem} does not declare dtype {', '.join(map(repr, unknown))}; "
                           f"its dtypes: {', '.join(declared)}")
    return tuple(d for d in declared if d in wanted)


def load_problem(spec: str, device: str = "cpu", overrides: dict[str, int] | None = None,
                 timed: list[str] | tuple[str, ...] | None = None,
                 dtypes: list[str] | tuple[str, ...] | None = None) -> ProblemInfo:
    """`timed`: case ids (ShapeCase.case_id) that become the only cases timed; None keeps the declared tags.
    `dtypes`: keep only these of the declared dtypes (a kernel wanted for bf16 alone is proven and timed in
    bf16 alone); None keeps them all."""
    from evaluation import shapes
    from evaluation.fingerprint import resolve_device

    device_kind = resolve_device(device) if device == "auto" else "cuda" if device == "rocm" else device
    if device_kind not in ("cpu", "cuda"):
        raise ProblemError(f"unknown device kind {device!r} for a shape set; use cpu or cuda")
    path, builtin = resolve_spec(spec)
    source = read_source(path)
    tree = parse_source(source, path)
    constants = size_constants(tree)
    module = exec_problem(path)
    overrides = dict(overrides or {})
    declared_keys = {k for e in getattr(module, "SHAPES", {}).get(device_kind, []) for k in e if k != "tags"}
    _check_overrides(overrides, set(constants) | declared_keys)

    shape_params = _declared_cases(module, device_kind, overrides)
    if shape_params is None:
        shape_params = shapes.derive_cases(path, constants, device_kind, overrides)
    dtypes = _select_dtypes(tuple(getattr(module, "DTYPES", DEFAULT_DTYPES)), dtypes, path)
    cases = [
        ShapeCase(case_id=case_id(params, dtype), params=params, dtype=dtype, tags=tags)
        for params, tags in shape_params
        for dtype in dtypes
    ]
    if timed:
        cases = _select_timed(cases, timed)
    precision = getattr(module, "FLOAT32_MATMUL_PRECISION", "highest")
    if precision not in ("highest", "high"):
        raise ProblemError(f"{path}: FLOAT32_MATMUL_PRECISION must be 'highest' (IEEE fp32) or 'high' (TF32), "
                           f"not {precision!r}")
    seed = SEEDS_DIR / f"{path.stem}.py" if builtin else None
    doc = (getattr(module, "DESCRIPTION", None) or (ast.get_docstring(tree) or "").split("\n")[0]).strip()
    return ProblemInfo(
        problem_id=problem_id(source, cases),
        name=path.stem,
        op_family=str(getattr(module, "OP_FAMILY", "unknown")),
        source_path=str(path),
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        builtin=builtin,
        description=doc,
        shape_cases=tuple(cases),
        dtypes=dtypes,
        tolerances=tolerances(module, dtypes),
        has_byte_model=callable(getattr(module, "bytes_moved", None)),
        has_flop_model=callable(getattr(module, "flops", None)),
        float32_matmul_precision=precision,
        seed_path=str(seed) if seed is not None and seed.is_file() else None,
        source=source,
        seed_source=seed.read_text() if seed is not None and seed.is_file() else None,
    )


def list_problems(device: str = "cpu") -> list[ProblemInfo]:
    return [load_problem(name, device) for name in builtin_names()]
