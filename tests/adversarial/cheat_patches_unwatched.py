"""Patches comparison helpers the worker does not watch (torch.isfinite, torch.abs, Tensor.__sub__),
through run-time names, and returns zeros. The worker cannot notice; the parent, which never ran this
code, compares with its own torch and refuses it all the same."""
import importlib

import torch
import triton
import triton.language as tl
from torch import nn

_mod = importlib.import_module("to" + "rch")
_set = getattr(__builtins__, "set" + "attr") if not isinstance(__builtins__, dict) else __builtins__["set" + "attr"]
_set(_mod, "is" + "finite", lambda t: _mod.ones_like(t, dtype=_mod.bool))
_set(_mod, "a" + "bs", lambda t: _mod.zeros_like(t))
_set(getattr(_mod, "Ten" + "sor"), "__s" + "ub__", lambda a, b: _mod.zeros_like(a))


@triton.jit
def _zeros(Y, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.zeros((BLOCK,), tl.float32).to(Y.dtype.element_ty), mask=offs < numel)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        y = torch.empty_like(x)
        _zeros[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
