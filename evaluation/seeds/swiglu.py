"""Seed kernel for the swiglu problem: a flat elementwise kernel, silu computed in fp32."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _swiglu_fwd(A, B, Y, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(A + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    # silu(a) = a * sigmoid(a); exp(-a) overflowing to inf gives -0.0, the right limit.
    y = a / (1.0 + tl.exp(-a)) * b
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    block = 1024

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a1 = a.reshape(-1).contiguous()
        b1 = b.reshape(-1).contiguous()
        y = torch.empty_like(a1)
        n = a1.numel()
        _swiglu_fwd[(triton.cdiv(n, self.block),)](a1, b1, y, n, BLOCK=self.block, num_warps=4)
        return y.reshape(a.shape)
