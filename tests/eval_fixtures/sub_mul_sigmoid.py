"""KernelBench level-2 style problem: a difference of two inputs, scaled, through a sigmoid.

Model-written kernels keep the full-size sub and mul in PyTorch beside a Triton kernel (issue 25)."""

import torch
import torch.nn as nn

DTYPES = ("float32",)
SHAPES = {"cpu": [{"rows": 8, "cols": 40}, {"rows": 1, "cols": 7}], "cuda": [{"rows": 4096, "cols": 4096}]}


class Model(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid((x - y) * 1.7)


rows = 8
cols = 40


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(rows, cols)]


def get_init_inputs():
    return []
