"""Seed kernel for the add_rmsnorm problem: one row per program, writes h, normalises it from fp32.

y is computed from the fp32 sum rather than from h rounded to the output dtype: one rounding fewer.
A row longer than max_block_n (M=16 x N=4194304 is past Triton's 2**20-element block limit) loops:
the first pass writes h and sums its squares, the second re-reads x and r (not the rounded h).
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _add_rmsnorm_fwd(
    X, R, W, Y, H, stride_x, stride_r, stride_y, stride_h, N, eps, BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    if ONE_BLOCK:
        mask = cols < N
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(R + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        h = x + r
        tl.store(H + row * stride_h + cols, h.to(H.dtype.element_ty), mask=mask)
        rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * stride_y + cols, (h * rstd * w).to(Y.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(X + row * stride_x + start + cols, mask=mask, other=0.0).to(tl.float32)
            r = tl.load(R + row * stride_r + start + cols, mask=mask, other=0.0).to(tl.float32)
            h = x + r
            tl.store(H + row * stride_h + start + cols, h.to(H.dtype.element_ty), mask=mask)
            acc += h * h
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(X + row * stride_x + start + cols, mask=mask, other=0.0).to(tl.float32)
            r = tl.load(R + row * stride_r + start + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(W + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(Y + row * stride_y + start + cols, ((x + r) * rstd * w).to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    # Widest row normalised in one block; longer rows loop over blocks (tests lower it).
    max_block_n = 16384

    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(n))
        self.eps = 1e-6

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        r2 = residual.reshape(-1, n).contiguous()
        y = torch.empty_like(x2)
        h = torch.empty_like(x2)
        one_block = n <= self.max_block_n
        block = triton.next_power_of_2(n) if one_block else min(4096, self.max_block_n)
        num_warps = min(max(block // 256, 1), 16)
        _add_rmsnorm_fwd[(x2.shape[0],)](
            x2,
            r2,
            self.weight,
            y,
            h,
            x2.stride(0),
            r2.stride(0),
            y.stride(0),
            h.stride(0),
            n,
            self.eps,
            BLOCK_N=block,
            ONE_BLOCK=one_block,
            num_warps=num_warps,
        )
        return y.reshape(x.shape), h.reshape(x.shape)
