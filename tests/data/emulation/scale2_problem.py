"""y = 2 * x over a (rows, cols) tensor (a KernelBench-style problem for the emulation tests)."""
import torch
import torch.nn as nn

rows = 70000
cols = 64


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
