"""The judge's comparison of a large float output in one pass over the device memory (a Triton kernel).

`compare._stream` in PyTorch reads and writes the float64 reference about thirty times for each output
(one kernel per operation): about 50 GB of traffic for a 4096 x 32000 output, 15-20 ms of an H100, for
every judged call. A parent judging a batch does hundreds of them while its workers share the device.
Here every statistic the verdict needs comes from one read of the output and of the reference, as
per-block partials that PyTorch then combines on the device, with the same semantics as `_stream`:

- an element fails unless |a - e| <= atol + rtol * |e|, or both are NaN, or e is infinite and a == e;
- the largest absolute error counts only where the reference is finite, NaN as +inf and +inf as the
  largest finite double (what `nan_to_num(nan=inf)` does to the PyTorch path's differences);
- the largest relative error divides that by |e| + atol, a non-finite |e| counted as 0 (a 0/0 there is
  NaN, and NaN wins the maximum, as `torch.maximum` lets it);
- failures where the output is not finite but the reference is are counted apart (NonFinite);
- the sums of squares of the finite reference and of the error there give the norm test.

Counts, the first failing index and both maxima are bit for bit those of the PyTorch path; the sums of
squares are summed in another order (equal to rounding). Floating-point contraction is off, so
`atol + rtol * |e|` rounds as PyTorch's separate multiply and add do.
"""

from __future__ import annotations

from typing import Any

import torch

BLOCK = 2048
FLOAT_INPUTS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_KERNEL: list[Any] = []  # built on first use: the parent imports Triton only where it judges on a GPU
_CONSTANTS: dict[tuple[float, float, str], torch.Tensor] = {}  # (atol, rtol, device) -> the float64 constants


def _kernel():
    if _KERNEL:
        return _KERNEL[0]
    import triton
    import triton.language as tl

    @triton.jit
    def judge_block(
        a_ptr,
        e_ptr,
        n,
        const_ptr,
        bad_ptr,
        first_ptr,
        nonfinite_ptr,
        max_abs_ptr,
        max_rel_ptr,
        rel_nan_ptr,
        ref_sq_ptr,
        err_sq_ptr,
        BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        idx = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        live = idx < n
        a = tl.load(a_ptr + idx, mask=live, other=0.0).to(tl.float64)
        e = tl.load(e_ptr + idx, mask=live, other=0.0)
        # float64 constants come from memory: a Python float argument or literal would be a float32
        atol = tl.load(const_ptr)
        rtol = tl.load(const_ptr + 1)
        inf = tl.load(const_ptr + 2)
        biggest = tl.load(const_ptr + 3)
        diff = tl.abs(a - e)
        abs_e = tl.abs(e)
        nan_a = a != a
        nan_e = e != e
        inf_e = abs_e == inf
        finite_e = (~nan_e) & (~inf_e)
        finite_a = (a == a) & (tl.abs(a) != inf)
        ok = (diff <= atol + rtol * abs_e) | (nan_a & nan_e) | (inf_e & (a == e))
        bad = (~ok) & live
        d = tl.where(finite_e, diff, 0.0)
        d = tl.where(d != d, inf, tl.where(d == inf, biggest, d))
        d = tl.where(live, d, 0.0)
        den = tl.where(finite_e, abs_e, 0.0) + atol
        rel = tl.where(live, d / den, 0.0)
        rel_nan = rel != rel
        fe = tl.where(finite_e & live, e, 0.0)
        err = tl.where(finite_e & live, a - e, 0.0)
        tl.store(bad_ptr + pid, tl.sum(bad.to(tl.int64), axis=0))
        tl.store(first_ptr + pid, tl.min(tl.where(bad, idx, n), axis=0))
        tl.store(nonfinite_ptr + pid, tl.sum((bad & (~finite_a) & finite_e).to(tl.int64), axis=0))
        tl.store(max_abs_ptr + pid, tl.max(d, axis=0))
        tl.store(max_rel_ptr + pid, tl.max(tl.where(rel_nan, 0.0, rel), axis=0))
        tl.store(rel_nan_ptr + pid, tl.sum(rel_nan.to(tl.int64), axis=0))
        tl.store(ref_sq_ptr + pid, tl.sum(fe * fe, axis=0))
        tl.store(err_sq_ptr + pid, tl.sum(err * err, axis=0))

    _KERNEL.append(judge_block)
    return judge_block


def applies(act: Any, exp: Any) -> bool:
    """Whether the one-pass comparison judges these: a float output and its float64 reference, both on
    one GPU. (Under Triton's interpreter `stats` runs on the CPU too: the tests call it directly.)"""
    if not (isinstance(act, torch.Tensor) and isinstance(exp, torch.Tensor)):
        return False
    if exp.dtype != torch.float64 or act.dtype not in FLOAT_INPUTS or act.numel() != exp.numel():
        return False
    return exp.is_cuda and act.device == exp.device


def stats(act: torch.Tensor, exp: torch.Tensor, atol: float, rtol: float) -> tuple[torch.Tensor, ...]:
    """(failures, first failing index or numel, non-finite failures, max abs error, max rel error, sum of
    squares of the finite reference, of the error there): 0-d tensors on the reference's device."""
    import triton

    flat_a, flat_e = act.reshape(-1).contiguous(), exp.reshape(-1).contiguous()
    n = flat_e.numel()
    blocks = max(1, triton.cdiv(n, BLOCK))
    dev = flat_e.device
    ints = [torch.empty(blocks, dtype=torch.int64, device=dev) for _ in range(4)]
    floats = [torch.empty(blocks, dtype=torch.float64, device=dev) for _ in range(4)]
    bad, first, nonfinite, rel_nan = ints
    max_abs, max_rel, ref_sq, err_sq = floats
    key = (float(atol), float(rtol), str(dev))
    const = _CONSTANTS.get(key)
    if const is None:
        values = [float(atol), float(rtol), float("inf"), torch.finfo(torch.float64).max]
        const = _CONSTANTS[key] = torch.tensor(values, dtype=torch.float64, device=dev)
    _kernel()[(blocks,)](
        flat_a,
        flat_e,
        n,
        const,
        bad,
        first,
        nonfinite,
        max_abs,
        max_rel,
        rel_nan,
        ref_sq,
        err_sq,
        BLOCK=BLOCK,
        enable_fp_fusion=False,
    )
    nan = torch.full((), float("nan"), dtype=torch.float64, device=dev)
    worst_rel = torch.where(rel_nan.sum() > 0, nan, max_rel.max())
    return bad.sum(), first.min(), nonfinite.sum(), max_abs.max(), worst_rel, ref_sq.sum(), err_sq.sum()
