"""Seed kernel for the rmsnorm problem: one row per program, single pass, fp32 accumulation."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _rmsnorm_fwd(X, W, Y, stride_x, stride_y, N, eps, BLOCK_N: tl.constexpr):
    # int64 row offsets: M * N passes 2**31 at LLM sizes.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride_y + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(n))
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        y = torch.empty_like(x2)
        block = triton.next_power_of_2(n)
        num_warps = min(max(block // 256, 1), 16)
        _rmsnorm_fwd[(x2.shape[0],)](
            x2, self.weight, y, x2.stride(0), y.stride(0), n, self.eps,
            BLOCK_N=block, num_warps=num_warps,
        )
        return y.reshape(x.shape)
