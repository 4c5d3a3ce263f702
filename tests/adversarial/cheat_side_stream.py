"""Launches the kernel on a side stream, so the harness's synchronisation would not wait for it."""
import torch
import triton
import triton.language as tl
from torch import nn

from torch.cuda import Stream as _S  # noqa: F401  (an alias must not hide it either)


@triton.jit
def _copy(X, Y, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < numel), mask=offs < numel)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))
        self.side = torch.cuda.Stream()

    def forward(self, x):
        y = torch.empty_like(x)
        with torch.cuda.stream(self.side):
            _copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
