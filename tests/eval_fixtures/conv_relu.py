"""KernelBench level-2 style problem: a convolution, then a ReLU; the convolution may stay in PyTorch."""

import torch
import torch.nn as nn

DTYPES = ("float32",)
ALLOWED_TORCH_OPS = ("aten.convolution",)
SHAPES = {"cpu": [{"batch": 2, "size": 6}], "cuda": [{"batch": 16, "size": 64}]}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


batch = 2
size = 6


def get_inputs():
    return [torch.randn(batch, 3, size, size)]


def get_init_inputs():
    return []
