"""Starts a grandchild in a session of its own (setsid), which outlived the old process-group kill,
then returns zeros. Refused statically; in the sandbox the grandchild dies with the PID namespace."""
import os

import torch
import triton
import triton.language as tl
from torch import nn


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
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", ["sleep", "__MARKER__"])
            os._exit(0)
        y = torch.empty_like(x)
        _zeros[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
