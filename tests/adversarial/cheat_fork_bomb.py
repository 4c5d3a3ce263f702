"""Forks without end. Refused statically; in the sandbox the process limit stops it."""
import os
import time

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
        while True:
            if os.fork() == 0:
                time.sleep(2)
                os._exit(0)
