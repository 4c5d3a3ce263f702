"""The convolution in PyTorch (the problem allows it), the ReLU fused in a Triton kernel."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _relu(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(Y + offs, tl.maximum(x, 0.0), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        h = torch.nn.functional.conv2d(x, self.conv.weight, self.conv.bias).contiguous()
        y = torch.empty_like(h)
        _relu[(triton.cdiv(h.numel(), 256),)](h, y, h.numel(), BLOCK=256)
        return y
