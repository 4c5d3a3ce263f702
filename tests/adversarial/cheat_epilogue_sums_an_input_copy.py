"""row_sum through the epilogue door: a token Triton launch touches a copy of x, and torch sums it.

The copy was filled from the input (tainted), so it is not a Triton output whatever launch saw it."""
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _touch(Y):
    tl.store(Y, tl.load(Y))


class ModelNew(nn.Module):
    def forward(self, x):
        buf = torch.empty_like(x)
        buf.copy_(x)
        _touch[(1,)](buf)
        return buf.sum(-1) if x.shape[-1] > 1 else buf.reshape(-1)
