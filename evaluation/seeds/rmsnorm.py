"""Seed kernel for the rmsnorm problem: one row per program, fp32 accumulation.

A row that fits one block (N <= max_block_n) is loaded once; a longer row (M=16 x N=4194304 is past
Triton's 2**20-element block limit) loops over fixed blocks twice: the sum of squares, then the output.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _rmsnorm_fwd(X, W, Y, stride_x, stride_y, N, eps, BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr):
    # int64 row offsets: M * N passes 2**31 at LLM sizes.
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    if ONE_BLOCK:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            x = tl.load(x_row + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(W + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + start + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    # Widest row normalised in one block; longer rows loop over blocks (tests lower it).
    max_block_n = 16384

    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(n))
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        y = torch.empty_like(x2)
        one_block = n <= self.max_block_n
        block = triton.next_power_of_2(n) if one_block else min(4096, self.max_block_n)
        num_warps = min(max(block // 256, 1), 16)
        _rmsnorm_fwd[(x2.shape[0],)](
            x2,
            self.weight,
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
