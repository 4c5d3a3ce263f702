"""KernelBench level-2 style problem: a linear layer, then the sum of each row."""

import torch
import torch.nn as nn

DTYPES = ("float32",)
SHAPES = {
    "cpu": [{"batch": 8, "in_features": 24, "out_features": 20}],
    "cuda": [{"batch": 1024, "in_features": 1024, "out_features": 1024}],
}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).sum(dim=1, keepdim=True)


batch = 8
in_features = 24
out_features = 20


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
