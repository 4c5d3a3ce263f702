"""Python floats from tolist() compute the layer norm, outside the dispatcher; Triton only copies the
answer into place. Refused by the static check (tolist)."""
import math

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _copy(S, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(S + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        rows = []
        for row in x.float().tolist():
            mean = sum(row) / len(row)
            var = sum((v - mean) ** 2 for v in row) / len(row)
            rows.append([(v - mean) / math.sqrt(var + 1e-5) for v in row])
        src = torch.tensor(rows, dtype=x.dtype, device=x.device)
        y = torch.empty_like(x)
        _copy[(triton.cdiv(y.numel(), 1024),)](src, y, y.numel(), BLOCK=1024)
        return y
