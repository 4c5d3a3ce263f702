"""RMS normalisation over the feature dimension of a (batch, features, dim1, dim2) tensor.

Written for this corpus in the KernelBench format: the shipped size puts 256 * 256 = 65536 spatial
positions per image, so a kernel that puts the positions on the grid's y axis exceeds CUDA's 65535.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms


batch_size = 16
features = 64
dim1 = 256
dim2 = 256


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features]
