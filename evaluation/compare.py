"""Comparing a candidate's outputs with the float64 reference, in the parent process.

The candidate never runs in this process, so nothing it patched can change a verdict here. Two tests
must both hold for floating outputs: every element within `atol + rtol * |ref|`, and the relative norm
error `||out - ref|| / ||ref||` within `rtol` (when the reference is not all zeros). The elementwise test
alone lets near-zero answers through a loose atol; the norm test alone lets a few wild elements
through. NaN or Inf where the reference is finite fails; matching NaN/Inf in both passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from evaluation.records import Mismatch, Tolerance


@dataclass(frozen=True)
class Comparison:
    passed: bool
    kind: str | None = None  # StructureMismatch, ShapeMismatch, DtypeMismatch, NonFinite, ValueMismatch, NormError
    message: str | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None  # max |out - ref| / (|ref| + atol): bounded where ref is ~0
    mismatch_count: int = 0
    numel: int = 0
    first_mismatch: Mismatch | None = None
    output_shape: tuple[int, ...] | None = None
    output_dtype: str | None = None


def _items(value: Any) -> tuple[str, list[Any]]:
    if isinstance(value, torch.Tensor):
        return "tensor", [value]
    if isinstance(value, (tuple, list)):
        return "sequence", list(value)
    return "other", [value]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def compare(actual: dict, expected: Any, case_dtype: str, tol: Tolerance) -> Comparison:
    """`actual` is the worker's package {"kind", "items", "types"}; `expected` the reference output."""
    exp_kind, exp_items = _items(expected)
    if actual.get("kind") != exp_kind or len(actual.get("items", ())) != len(exp_items):
        got = f"{actual.get('kind')} of {len(actual.get('items', ()))} ({', '.join(actual.get('types', ()))})"
        return Comparison(False, "StructureMismatch", f"output is a {got}, expected a {exp_kind} of {len(exp_items)}")
    parts = [
        _compare_one(a, e, case_dtype, tol, k, multi=len(exp_items) > 1)
        for k, (a, e) in enumerate(zip(actual["items"], exp_items))
    ]
    failure = next((p for p in parts if not p.passed), None)
    lead = failure or (parts[0] if parts else None)
    errors = [p for p in parts if p.max_abs_error is not None]
    return Comparison(
        passed=failure is None,
        kind=failure.kind if failure else None,
        message=failure.message if failure else None,
        max_abs_error=max((p.max_abs_error for p in errors), default=None),
        max_rel_error=max((p.max_rel_error for p in errors), default=None),
        mismatch_count=sum(p.mismatch_count for p in parts),
        numel=sum(p.numel for p in parts),
        first_mismatch=next((p.first_mismatch for p in parts if p.first_mismatch), None),
        output_shape=lead.output_shape if lead else None,
        output_dtype=lead.output_dtype if lead else None,
    )


def _compare_one(act: Any, exp: Any, case_dtype: str, tol: Tolerance, k: int, multi: bool) -> Comparison:
    where = f"output {k}: " if multi else ""
    scalar = not isinstance(exp, torch.Tensor)  # a Python number carries no dtype to check
    if scalar:
        exp = torch.tensor(float(exp), dtype=torch.float64)
        if isinstance(act, (int, float)) and not isinstance(act, bool):
            act = torch.tensor(float(act), dtype=torch.float64)
    if not isinstance(act, torch.Tensor):
        return Comparison(False, "StructureMismatch", f"{where}got {type(act).__name__}, expected a tensor")
    shape, dtype = tuple(act.shape), _dtype_name(act.dtype)
    meta = dict(output_shape=shape, output_dtype=dtype)
    if act.shape != exp.shape:
        return Comparison(False, "ShapeMismatch", f"{where}output shape {shape}, expected {tuple(exp.shape)}", **meta)
    want = dtype if scalar else case_dtype if exp.is_floating_point() else _dtype_name(exp.dtype)
    if dtype != want:
        return Comparison(False, "DtypeMismatch", f"{where}output dtype {dtype}, expected {want}", **meta)
    act = act.to(device=exp.device)
    numel = exp.numel()
    if not exp.is_floating_point():
        ok = act == exp
        return _verdict(ok, act, exp, tol, k, where, numel, meta, exact=True)
    a = act.to(torch.float64)
    diff = (a - exp).abs()
    both_nan = torch.isnan(a) & torch.isnan(exp)
    same_inf = torch.isinf(exp) & (a == exp)
    ok = (diff <= tol.atol + tol.rtol * exp.abs()) | both_nan | same_inf
    return _verdict(ok, a, exp, tol, k, where, numel, meta, exact=False, diff=diff)


def _verdict(ok, a, exp, tol, k, where, numel, meta, *, exact, diff=None) -> Comparison:
    bad = ~ok
    count = int(bad.sum().item())
    first = None
    if count:
        flat = int(bad.flatten().nonzero()[0].item())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), exp.shape)) if exp.dim() else ()
        first = Mismatch(
            index=index, expected=float(exp.flatten()[flat]), actual=float(a.flatten()[flat]), output_index=k
        )
    max_abs = max_rel = None
    if diff is not None and numel:
        finite_ref = torch.isfinite(exp)
        d = torch.where(finite_ref, diff, torch.zeros_like(diff)).nan_to_num(nan=float("inf"))
        max_abs = float(d.max().item())
        max_rel = float((d / (exp.abs().nan_to_num(posinf=0.0) + tol.atol)).max().item())
    base = dict(
        max_abs_error=max_abs, max_rel_error=max_rel, mismatch_count=count, numel=numel, first_mismatch=first, **meta
    )
    at = f", first at {first.index}: expected {_fmt(first.expected)}, got {_fmt(first.actual)}" if first else ""
    if count and not exact:
        nonfinite = int((bad & ~torch.isfinite(a) & torch.isfinite(exp)).sum().item())
        if nonfinite:
            return Comparison(
                False, "NonFinite", f"{where}{nonfinite} NaN/Inf values where the reference is finite{at}", **base
            )
    if count:
        rule = "exactly equal" if exact else f"within {tol.atol:g} + {tol.rtol:g}*|ref|"
        return Comparison(False, "ValueMismatch", f"{where}{count}/{numel} elements not {rule}{at}", **base)
    if not exact and numel:
        finite = torch.isfinite(exp)
        ref_norm = float(torch.linalg.vector_norm(exp[finite]).item())
        err_norm = float(torch.linalg.vector_norm((a - exp)[finite]).item())
        if ref_norm > 0 and not err_norm <= tol.rtol * ref_norm:
            return Comparison(
                False,
                "NormError",
                f"{where}relative norm error {_fmt(err_norm / ref_norm)} > rtol {tol.rtol:g}",
                **base,
            )
    return Comparison(True, **base)
