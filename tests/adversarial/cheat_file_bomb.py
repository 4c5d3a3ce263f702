"""Writes a file without end into its working folder. Refused statically (file access); past that,
the worker's file-size limit stops the write."""
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
        with open("fill", "wb") as f:
            while True:
                f.write(b"0" * (1 << 20))
