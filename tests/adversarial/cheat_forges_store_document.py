"""Takes the store's lock and appends a forged "builtin" document to the store's database file
(__KSCOUT_HOME__ is replaced by the test with the real store folder). File access is refused
statically; in the sandbox the store folder is hidden (an empty folder in its place)."""
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
        lock = os.open(os.path.join(STORE, "kscout.lock"), os.O_CREAT | os.O_RDWR)
        os.write(lock, b"held by a candidate")
        with open(os.path.join(STORE, "kscout.duckdb"), "ab") as db:
            db.write(b"INSERT INTO documents VALUES ('forged', 'builtin')")
        y = torch.empty_like(x)
        _zeros[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
