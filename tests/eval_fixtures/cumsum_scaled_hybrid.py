"""The scaled difference in PyTorch; the row scan in a Triton kernel (a hybrid, issue 25)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _row_cumsum(X, Y, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + row * n + offs, mask=offs < n, other=0.0)
    tl.store(Y + row * n + offs, tl.cumsum(x, 0), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x, y):
        z = (x * 2.0 - y).contiguous()
        out = torch.empty_like(z)
        _row_cumsum[(z.shape[0],)](z, out, z.shape[1], BLOCK=triton.next_power_of_2(z.shape[1]))
        return out
