"""row_sum through the epilogue door: a Triton kernel only copies x, and torch sums the copy.

The copy is the candidate's own Triton output, but it holds every element of the input, not one value
per row or a reduced 1/8 of it: summing it is the whole problem, done by PyTorch."""
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _copy(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        buf = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 1024),)](x, buf, x.numel(), BLOCK=1024)
        return buf.sum(-1)
