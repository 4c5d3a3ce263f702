"""A real Triton softmax is launched, and its output thrown away: PyTorch's softmax is returned.

Issue 25 allows PyTorch compute beside Triton (a labelled hybrid), but not in place of it: the output
must hold the Triton kernels' work."""
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _softmax(X, Y, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + row * n + offs, mask=offs < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(Y + row * n + offs, e / tl.sum(e, 0), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return torch.softmax(x, dim=-1)
