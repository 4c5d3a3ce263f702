"""The sub and the mul in PyTorch, full size; the sigmoid in a Triton kernel (a hybrid, issue 25)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _sigmoid(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(Y + offs, 1.0 / (1.0 + tl.exp(-x)), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x, y):
        z = ((x - y) * 1.7).contiguous()
        out = torch.empty_like(z)
        _sigmoid[(triton.cdiv(z.numel(), 256),)](z, out, z.numel(), BLOCK=256)
        return out
