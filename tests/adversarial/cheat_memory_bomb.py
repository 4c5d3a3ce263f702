"""Reserves memory without end (1 GiB at a time, never touched, so nothing but the address space
grows). No syntax can forbid allocation: the worker's address-space limit stops it, a crash."""
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
        hoard = []
        while True:
            hoard.append(torch.empty(1 << 30, dtype=torch.uint8))
