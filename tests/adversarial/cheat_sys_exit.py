"""Raises SystemExit(0) mid-forward: no `except Exception` may turn that into a verdict."""
import sys

import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        sys.exit(0)
