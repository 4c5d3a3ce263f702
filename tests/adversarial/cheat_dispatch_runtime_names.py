"""Turns PyTorch's dispatch modes off through names built at run time (no literal the syntax check
could resolve), then lets PyTorch compute: refused as DynamicAccess."""
import importlib

import torch
import triton
import triton.language as tl
from torch import nn

_dispatch = importlib.import_module("torch.utils." + "_python" + "_dispatch")
_off = getattr(_dispatch, "_disable" + "_current_modes")


@triton.jit
def _ln(X, W, B, Y, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.div_rn(tl.sum(x, axis=0), tl.cast(N, tl.float32))  # IEEE: `/` is 2 ulp off on NVIDIA
    diff = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * N + cols, (diff * rstd * w + b).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _touch(X, Y):
    tl.store(Y, tl.load(X))


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        scratch = torch.empty(1, dtype=x.dtype, device=x.device)
        _touch[(1,)](x, scratch)
        with _off():
            return torch.nn.functional.layer_norm(x, (x.shape[-1],), self.weight, self.bias, 1e-5)
