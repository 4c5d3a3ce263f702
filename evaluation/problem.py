"""Problems: a KernelBench-style reference file, its declared shape/dtype set, its tolerance policy and
its identity.

Reading, rebinding and executing a problem file is problem_file.py's job (the one loader); deriving a
shape set for a file that declares none is shapes.py's. This module puts them together into a
ProblemInfo. It re-exports the loader's functions under their old names for existing callers.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path
from typing import Any

from evaluation import shapes
from evaluation.errors import ProblemError
from evaluation.problem_file import (  # noqa: F401  (re-exported: the worker and the harness import them here)
    SLOT,
    exec_problem,
    exec_problem_source,
    init_inputs,
    normalized_source,
    parse_source,
    read_source,
    rebind,
    size_constants,
    size_slots,
    top_level_names,
)
from evaluation.records import (
    DEFAULT_TOLERANCES,
    DroppedCase,
    ProblemInfo,
    ShapeCase,
    Tolerance,
)

PROBLEMS_DIR = Path(__file__).resolve().parent / "problems"
SEEDS_DIR = Path(__file__).resolve().parent / "seeds"
DEFAULT_DTYPES = ("float32",)
# Tolerance policies a user can choose. "strict" (the default): the problem's TOLERANCES, else the
# per-dtype defaults of records.DEFAULT_TOLERANCES (float32: 1e-4). "kernelbench": KernelBench's
# atol = rtol = 1e-2, never tighter than strict for a dtype (bfloat16 keeps 1.6e-2).
TOLERANCE_POLICIES = ("strict", "kernelbench")
KERNELBENCH_TOLERANCE = 1e-2


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


def problem_id(
    source: str,
    cases: list[ShapeCase] | tuple[ShapeCase, ...],
    launch_cases: list[ShapeCase] | tuple[ShapeCase, ...] = (),
    tolerance_policy: str = "strict",
) -> str:
    """sha256 of the normalized source and everything that decides a verdict on it: the shape set, the
    full-size launch checks, and a tolerance policy other than the default."""
    dump = lambda cs: [c.model_dump(mode="json") for c in cs]  # noqa: E731
    extra = {"launch_cases": dump(launch_cases)} if launch_cases else {}
    if tolerance_policy != "strict":
        extra["tolerance_policy"] = tolerance_policy
    shape_set = json.dumps(
        dump(cases) if not extra else {"cases": dump(cases), **extra}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256((normalized_source(source) + "\n" + shape_set).encode()).hexdigest()[:16]


def tolerances(module: Any, dtypes: tuple[str, ...], policy: str = "strict") -> dict[str, Tolerance]:
    if policy not in TOLERANCE_POLICIES:
        raise ProblemError(f"unknown tolerance policy {policy!r}; use one of: {', '.join(TOLERANCE_POLICIES)}")
    declared = getattr(module, "TOLERANCES", {}) or {}
    out = {}
    for dtype in dtypes:
        if dtype in declared:
            atol, rtol = declared[dtype]
            tol = Tolerance(atol=float(atol), rtol=float(rtol))
        elif dtype in DEFAULT_TOLERANCES:
            tol = DEFAULT_TOLERANCES[dtype]
        else:
            raise ProblemError(f"no tolerance for dtype {dtype!r}; declare it in TOLERANCES")
        if policy == "kernelbench":
            tol = Tolerance(atol=max(tol.atol, KERNELBENCH_TOLERANCE), rtol=max(tol.rtol, KERNELBENCH_TOLERANCE))
        out[dtype] = tol
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
    declared = getattr(module, "SHAPES", None)
    if not isinstance(declared, dict) or device_kind not in declared:
        return None
    cases, seen = [], set()
    for entry in declared[device_kind]:
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
        raise ProblemError(
            f"unknown case id {', '.join(map(repr, unknown))} for --time-case; valid ids: {', '.join(valid)}"
        )
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
        raise ProblemError(
            f"{Path(path).stem} does not declare dtype {', '.join(map(repr, unknown))}; "
            f"its dtypes: {', '.join(declared)}"
        )
    return tuple(d for d in declared if d in wanted)


def load_problem(
    spec: str,
    device: str = "cpu",
    overrides: dict[str, int] | None = None,
    timed: list[str] | tuple[str, ...] | None = None,
    dtypes: list[str] | tuple[str, ...] | None = None,
    tolerance: str = "strict",
) -> ProblemInfo:
    """`timed`: case ids (ShapeCase.case_id) that become the only cases timed; None keeps the declared tags.
    `dtypes`: keep only these of the declared dtypes (a kernel wanted for bf16 alone is proven and timed in
    bf16 alone); None keeps them all. `tolerance`: a policy of TOLERANCE_POLICIES."""
    from evaluation.fingerprint import resolve_device

    device_kind = resolve_device(device) if device == "auto" else "cuda" if device == "rocm" else device
    if device_kind not in ("cpu", "cuda"):
        raise ProblemError(f"unknown device kind {device!r} for a shape set; use cpu or cuda")
    path, builtin = resolve_spec(spec)
    source = read_source(path)
    tree = parse_source(source, path)
    slots = size_slots(tree)
    module = exec_problem_source(source, path)
    overrides = dict(overrides or {})
    declared_keys = {
        k
        for kind in ("cpu", "cuda")
        for e in (getattr(module, "SHAPES", None) or {}).get(kind, [])
        for k in e
        if k != "tags"
    }
    _check_overrides(overrides, set(slots) | declared_keys)

    dropped: list[DroppedCase] = []
    notes: tuple[str, ...] = ()
    shape_params = _declared_cases(module, device_kind, overrides)
    if shape_params is None:
        plan = shapes.derive_plan(path, slots, device_kind, overrides, source=source)
        shape_params = plan.cases
        dropped = [DroppedCase(params=p, reason=r) for p, r in plan.dropped]
        notes = tuple(plan.notes)
    dtypes = _select_dtypes(tuple(getattr(module, "DTYPES", DEFAULT_DTYPES)), dtypes, path)
    cases = [
        ShapeCase(case_id=case_id(params, dtype), params=params, dtype=dtype, tags=tags)
        for params, tags in shape_params
        for dtype in dtypes
    ]
    if timed:
        cases = _select_timed(cases, timed)
    launch = _launch_cases(module, device_kind, dict(slots, **overrides), overrides, dtypes)
    precision = getattr(module, "FLOAT32_MATMUL_PRECISION", "highest")
    if precision not in ("highest", "high"):
        raise ProblemError(
            f"{path}: FLOAT32_MATMUL_PRECISION must be 'highest' (IEEE fp32) or 'high' (TF32), not {precision!r}"
        )
    seed = SEEDS_DIR / f"{path.stem}.py" if builtin else None
    doc = (getattr(module, "DESCRIPTION", None) or (ast.get_docstring(tree) or "").split("\n")[0]).strip()
    return ProblemInfo(
        problem_id=problem_id(source, cases, launch, tolerance),
        name=path.stem,
        op_family=str(getattr(module, "OP_FAMILY", "unknown")),
        source_path=str(path),
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        builtin=builtin,
        description=doc,
        shape_cases=tuple(cases),
        dtypes=dtypes,
        tolerances=tolerances(module, dtypes, tolerance),
        tolerance_policy=tolerance,
        has_byte_model=callable(getattr(module, "bytes_moved", None)),
        has_flop_model=callable(getattr(module, "flops", None)),
        float32_matmul_precision=precision,
        seed_path=str(seed) if seed is not None and seed.is_file() else None,
        source=source,
        seed_source=seed.read_text() if seed is not None and seed.is_file() else None,
        launch_cases=tuple(launch),
        dropped_cases=tuple(dropped),
        shape_notes=notes,
    )


def _launch_cases(
    module, device_kind: str, shipped: dict[str, int], overrides: dict[str, int], dtypes: tuple[str, ...]
) -> list[ShapeCase]:
    """On the CPU, the GPU-sized cases whose launches a worker follows on meta tensors (launch limits
    such as a grid y of 65536 only bite at full size): a built-in's declared cuda cases, or a
    KernelBench file's shipped sizes. None on a GPU, which checks its own limits."""
    if device_kind != "cpu":
        return []
    declared = _declared_cases(module, "cuda", overrides)
    params_list = [p for p, _ in declared] if declared is not None else ([shipped] if shipped else [])
    return [
        ShapeCase(case_id=case_id(p, d), params=p, dtype=d, tags=("launch_only",)) for p in params_list for d in dtypes
    ]


def list_problems(device: str = "cpu") -> list[ProblemInfo]:
    return [load_problem(name, device) for name in builtin_names()]
