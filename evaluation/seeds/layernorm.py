"""Seed kernel for the layernorm problem: one row per program, fp32 accumulation.

A row that fits one block (N <= max_block_n) is loaded once and normalised in registers. A longer row
(the few-long-rows case, M=16 x N=4194304, is past Triton's 2**20-element block limit) loops over
fixed blocks three times: the mean, the variance about that mean (two passes, not sum-of-squares, so
a large offset cannot cancel the variance away), then the normalised output.

Means divide with `tl.div_rn`: Triton's fp32 `/` is `div.full.f32` on NVIDIA (up to 2 ulp off), and a mean
that misses a constant row's value (bf16 inputs near 1e4 round to one value) makes noise / sqrt(eps) of
what should be exactly zero. The looped path sums about the row's first element for the same reason: the
running sum of 4M values near 1e4 would round.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _layernorm_fwd(X, W, B, Y, stride_x, stride_y, N, eps, BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64 row offsets: M * N passes 2**31 at LLM sizes
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    if ONE_BLOCK:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.div_rn(tl.sum(x, axis=0), tl.cast(N, tl.float32))
        diff = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=0) / N + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (diff * rstd * w + b).to(Y.dtype.element_ty), mask=mask)
    else:
        shift = tl.load(x_row).to(tl.float32)
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            acc += tl.where(mask, x - shift, 0.0)
        mean = shift + tl.div_rn(tl.sum(acc, axis=0), tl.cast(N, tl.float32))
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            diff = tl.where(mask, x - mean, 0.0)
            acc += diff * diff
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(W + start + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(B + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + start + cols, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    # Widest row normalised in one block; longer rows loop over blocks this wide (tests lower it).
    max_block_n = 16384

    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(n))
        self.bias = nn.Parameter(0.1 * torch.randn(n))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        y = torch.empty_like(x2)
        one_block = n <= self.max_block_n
        block = triton.next_power_of_2(n) if one_block else min(4096, self.max_block_n)
        num_warps = min(max(block // 256, 1), 16)
        _layernorm_fwd[(x2.shape[0],)](
            x2,
            self.weight,
            self.bias,
            y,
            x2.stride(0),
            y.stride(0),
            n,
            self.eps,
            BLOCK_N=block,
            ONE_BLOCK=one_block,
            num_warps=num_warps,
        )
        return y.reshape(x.shape)
