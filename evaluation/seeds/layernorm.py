"""Seed kernel for the layernorm problem: one row per program, single pass, fp32 accumulation."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _layernorm_fwd(X, W, B, Y, stride_x, stride_y, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    y = diff * rstd * w + b
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(n))
        self.bias = nn.Parameter(0.1 * torch.randn(n))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        y = torch.empty_like(x2)
        block = triton.next_power_of_2(n)
        num_warps = min(max(block // 256, 1), 16)
        _layernorm_fwd[(x2.shape[0],)](
            x2, self.weight, self.bias, y, x2.stride(0), y.stride(0), n, self.eps,
            BLOCK_N=block, num_warps=num_warps,
        )
        return y.reshape(x.shape)
