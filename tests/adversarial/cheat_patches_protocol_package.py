"""Replaces the worker's evaluation.protocol.package (which turns outputs into what the parent
judges) so zeros become the right answer. Refused as DynamicAccess; past the static check, the
harness snapshot sees the replaced function before any output is sent."""
import sys

import torch
import triton
import triton.language as tl
from torch import nn

_protocol = sys.modules["evaluation.protocol"]
_real = _protocol.package


def _fake(value):
    return _real(torch.nn.functional.layer_norm(value, (value.shape[-1],), None, None, 1e-5))


_protocol.package = _fake


@triton.jit
def _zeros(Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.zeros((BLOCK,), tl.float32).to(Y.dtype.element_ty), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        y = torch.empty_like(x)
        _zeros[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
