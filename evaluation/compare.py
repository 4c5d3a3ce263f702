"""Comparing a candidate's outputs with the float64 reference, in the parent process.

The candidate never runs in this process, so nothing it patched can change a verdict here. Two tests
must both hold for floating outputs: every element within `atol + rtol * |ref|`, and the relative norm
error `||out - ref|| / ||ref||` within `rtol` (when the reference is not all zeros). The elementwise test
alone lets near-zero answers through a loose atol; the norm test alone lets a few wild elements
through. NaN or Inf where the reference is finite fails; matching NaN/Inf in both passes.
"""

from __future__ import annotations

import collections
import math
import threading
from dataclasses import dataclass
from typing import Any

import torch

from evaluation import judge_kernel
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
    return _stream(act, exp, tol, k, where, meta, exact=not exp.is_floating_point())


# Elements per pass: about 300 MiB of float64 temporaries, whatever the output's size. A parent judges
# six outputs at once beside a batch's eight workers, and with 1 GiB each the checks beside it ran out of
# an H100's 80 GB; the extra launches of smaller passes cost no extra wait (one read back at the end).
CHUNK = 1 << 22
# From this many elements a float output on the GPU is judged in one pass (evaluation/judge_kernel.py).
FUSED_MIN_ELEMENTS = 1 << 16
# An output the worker's slot copied to the host (evaluation/shared.py, HOST_READ_BYTES) and a reference
# of at most this many elements on the GPU are compared on the host: the reference comes over once,
# where the PyTorch passes on the GPU copied the output in and launched a dozen kernels, each a wait
# for a turn on a device that a check's worker keeps busy (correctness.HOST_JUDGE_ELEMENTS alike).
HOST_COMPARE_ELEMENTS = 1 << 19
# Elements per piece of a host comparison (_host_finite): below PyTorch's grain size (32768), so no op
# opens an OpenMP parallel region. Beside a batch's busy workers, a parallel region or a BLAS thread team
# waits for cores the workers hold: on the 2-core CI machine with two busy processes, one run saw a
# 4096-element comparison through one dot product take 24 ms (0.2 ms in pieces; other runs differ
# less); the lent H100's parent spent 72 ms a comparison on 48 small softmax outputs (3.4 s of 19.4 s).
HOST_PIECE = 1 << 14


# How this process judged its outputs, by path ("fused" on the GPU, "fused-failed ExcName", "torch cuda",
# "torch cpu"; "host finite" where a host output and reference held no NaN or infinity (_host_finite);
# "from cpu" where the output crossed to the reference's GPU in chunks, "(reference moved)"
# where a small reference came to the host output, HOST_COMPARE_ELEMENTS): one line of
# `kscout eval --phases` (evaluation/phases.py) says whether the one-pass kernel did the judging.
PATHS: collections.Counter[str] = collections.Counter()
_PATHS_LOCK = threading.Lock()


def _count(path: str) -> None:
    with _PATHS_LOCK:
        PATHS[path] += 1


def _stream(act, exp, tol: Tolerance, k: int, where: str, meta: dict, *, exact: bool) -> Comparison:
    """Both tests over the flattened outputs, CHUNK elements at a time, on the reference's device.

    A 1.6G-element KernelBench output would need ten float64 temporaries of 13 GB each compared in
    one piece; chunked, the judge needs a few GiB at any size, and the candidate's output moves to
    the device a chunk at a time. Sums of squares and maxima combine across chunks exactly as over the
    whole (maxima bit for bit; the norms to rounding)."""
    numel = exp.numel()
    moved = act.device.type == "cpu" and exp.device.type != "cpu" and numel <= HOST_COMPARE_ELEMENTS
    if moved:
        exp = exp.cpu()
    dev = exp.device
    flat_a, flat_e = act.reshape(-1), exp.reshape(-1)
    if not exact and numel >= FUSED_MIN_ELEMENTS and judge_kernel.applies(act, exp):
        try:
            fused = judge_kernel.stats(act, exp, tol.atol, tol.rtol)
        except Exception as exc:  # no Triton, or it cannot build here: the PyTorch passes below judge alike
            fused = None
            _count(f"fused-failed {type(exc).__name__}")
        if fused is not None:
            _count("fused")
            return _verdict(fused, flat_a, flat_e, exp, tol, k, where, meta, exact)
    if not exact and dev.type == "cpu" and act.device.type == "cpu" and numel <= CHUNK:
        stats = _host_finite(flat_a, flat_e, tol)
        if stats is not None:
            _count("host finite" + (" (reference moved)" if moved else ""))
            return _verdict(stats, flat_a, flat_e, exp, tol, k, where, meta, exact)
    _count(
        f"torch {dev.type}"
        + (f" from {act.device.type}" if act.device != dev else " (reference moved)" if moved else "")
    )
    zero = torch.zeros((), dtype=torch.float64, device=dev)
    count = torch.zeros((), dtype=torch.int64, device=dev)
    nonfinite = torch.zeros((), dtype=torch.int64, device=dev)
    first = torch.full((), numel, dtype=torch.int64, device=dev)
    max_abs, max_rel, ref_sq, err_sq = zero.clone(), zero.clone(), zero.clone(), zero.clone()
    for at in range(0, numel, CHUNK):
        e = flat_e[at : at + CHUNK]
        a = flat_a[at : at + CHUNK].to(device=dev)
        if exact:
            bad = a != e
        else:
            a = a.to(torch.float64)
            diff = (a - e).abs()
            ok = (
                (diff <= tol.atol + tol.rtol * e.abs())
                | (torch.isnan(a) & torch.isnan(e))
                | (torch.isinf(e) & (a == e))
            )
            bad = ~ok
            finite_e = torch.isfinite(e)
            d = torch.where(finite_e, diff, 0.0).nan_to_num(nan=float("inf"))
            max_abs = torch.maximum(max_abs, d.max())
            max_rel = torch.maximum(max_rel, (d / (e.abs().nan_to_num(posinf=0.0) + tol.atol)).max())
            nonfinite += (bad & ~torch.isfinite(a) & finite_e).sum()
            fe = torch.where(finite_e, e, 0.0)
            ref_sq += (fe * fe).sum()
            err = torch.where(finite_e, a - e, 0.0)
            err_sq += (err * err).sum()
        n_bad = bad.sum()
        count += n_bad
        here = at + bad.to(torch.uint8).argmax()
        first = torch.minimum(first, torch.where(n_bad > 0, here, first))
    return _verdict(
        (count, first, nonfinite, max_abs, max_rel, ref_sq, err_sq), flat_a, flat_e, exp, tol, k, where, meta, exact
    )


def _host_finite(flat_a, flat_e, tol: Tolerance):
    """`_stream`'s statistics of a host output and reference that hold no NaN or infinity, in half its
    passes: with every value finite its NaN and infinity terms are all false or zero, so the test is
    |a - e| > atol + rtol*|e| and the sums of squares are sums of products. None where a value is not
    finite (the general passes judge it): a NaN or infinity in either makes a - e one too. A parent
    judges most small outputs this way, beside its workers, so the work goes in HOST_PIECE pieces and
    never through BLAS: single-threaded, it needs no core that a worker holds."""
    numel = flat_e.numel()
    n_bad, first = 0, numel
    max_abs = max_rel = ref_sq = err_sq = 0.0
    for at in range(0, numel, HOST_PIECE):
        e = flat_e[at : at + HOST_PIECE]
        err = flat_a[at : at + HOST_PIECE].to(torch.float64) - e
        if not bool(torch.isfinite(err).all()):
            return None
        err_sq += float((err * err).sum())
        ref_sq += float((e * e).sum())
        diff = err.abs_()
        mag = e.abs()
        bad = diff > mag.mul(tol.rtol).add_(tol.atol)
        here = int(bad.sum())
        if here and not n_bad:
            first = at + int(bad.to(torch.uint8).argmax())
        n_bad += here
        max_abs = max(max_abs, float(diff.max()))
        rel = float(diff.div_(mag.add_(tol.atol)).max())  # NaN where atol is 0 over a zero: kept, as torch.max does
        max_rel = rel if rel != rel or rel > max_rel else max_rel
    return tuple(torch.tensor(v, dtype=torch.float64) for v in (n_bad, first, 0, max_abs, max_rel, ref_sq, err_sq))


def _verdict(stats, flat_a, flat_e, exp, tol: Tolerance, k: int, where: str, meta: dict, exact: bool) -> Comparison:
    """The comparison from its statistics (failures, first failing index, non-finite failures, max abs
    and rel error, sums of squares of the reference and of the error), read back in one go: each .item()
    waits for the device, and a parent judging a batch shares the GPU with the batch's workers, so each
    wait is a turn of the device's time-slicing."""
    numel = flat_e.numel()
    together = torch.stack([s.to(torch.float64) for s in stats])
    n_bad_f, first_f, nonfinite_f, max_abs_f, max_rel_f, ref_sq_f, err_sq_f = together.tolist()
    n_bad_total, first_flat = int(n_bad_f), int(first_f)  # exact: element counts stay below 2**53
    mismatch = None
    if n_bad_total:
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first_flat), exp.shape)) if exp.dim() else ()
        mismatch = Mismatch(
            index=index,
            expected=float(flat_e[first_flat]),
            actual=float(flat_a[first_flat].to(torch.float64)),
            output_index=k,
        )
    errors = {} if exact or not numel else dict(max_abs_error=max_abs_f, max_rel_error=max_rel_f)
    base = dict(mismatch_count=n_bad_total, numel=numel, first_mismatch=mismatch, **errors, **meta)
    first_at = (
        f", first at {mismatch.index}: expected {_fmt(mismatch.expected)}, got {_fmt(mismatch.actual)}"
        if mismatch
        else ""
    )
    if n_bad_total and not exact:
        n_nonfinite = int(nonfinite_f)
        if n_nonfinite:
            return Comparison(
                False,
                "NonFinite",
                f"{where}{n_nonfinite} NaN/Inf values where the reference is finite{first_at}",
                **base,
            )
    if n_bad_total:
        rule = "exactly equal" if exact else f"within {tol.atol:g} + {tol.rtol:g}*|ref|"
        return Comparison(False, "ValueMismatch", f"{where}{n_bad_total}/{numel} elements not {rule}{first_at}", **base)
    if not exact and numel:
        ref_norm, err_norm = math.sqrt(ref_sq_f), math.sqrt(err_sq_f)
        if ref_norm > 0 and not err_norm <= tol.rtol * ref_norm:
            return Comparison(
                False,
                "NormError",
                f"{where}relative norm error {_fmt(err_norm / ref_norm)} > rtol {tol.rtol:g}",
                **base,
            )
    return Comparison(True, **base)
