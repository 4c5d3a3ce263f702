"""A linear layer with its bias and tanh-gelu fused into the matmul's epilogue.

Built-in problem file (format: evaluation/problems/__init__.py). The float32 tolerance is loose
because tl.dot on fp32 inputs uses TF32 tensor cores on GPUs (10-bit mantissa); the eager and
torch.compile baselines are timed with TF32 allowed as well (FLOAT32_MATMUL_PRECISION).
"""

import math

import torch
from torch import nn

OP_FAMILY = "matmul_epilogue"
DESCRIPTION = 'y = gelu(x @ weight.T + bias, approximate="tanh"); x (M, K), weight (N, K)'

M = 4096
K = 4096
N = 4096

DTYPES = ("float32", "bfloat16")

TOLERANCES = {"float32": (5e-3, 5e-3)}
FLOAT32_MATMUL_PRECISION = "high"  # the tolerance admits TF32, so the baselines time TF32 matmuls too

SHAPES = {
    "cuda": [
        {"M": 4096, "K": 4096, "N": 4096, "tags": ("representative", "timed")},
        {"M": 8192, "K": 4096, "N": 14336, "tags": ("representative", "timed")},
        {"M": 8192, "K": 8192, "N": 8192, "tags": ("largest", "timed")},
        {"M": 1, "K": 4096, "N": 4096, "tags": ("edge",)},
        {"M": 4099, "K": 4099, "N": 4099, "tags": ("edge",)},
        {"M": 127, "K": 1000, "N": 1000, "tags": ("edge",)},
        {"M": 129, "K": 1, "N": 1, "tags": ("edge",)},
    ],
    "cpu": [
        {"M": 64, "K": 64, "N": 64, "tags": ("representative",)},
        {"M": 1, "K": 64, "N": 32, "tags": ("edge",)},
        {"M": 37, "K": 61, "N": 53, "tags": ("edge",)},
        {"M": 50, "K": 40, "N": 30, "tags": ("edge",)},
        {"M": 9, "K": 1, "N": 1, "tags": ("edge",)},
        {"M": 5, "K": 1537, "N": 7, "tags": ("edge",)},  # a reduction past 1024
        {"M": 67, "K": 33, "N": 4099, "tags": ("big",)},  # > 64 rows, a non-power-of-two width past 4096
    ],
}


class Model(nn.Module):
    def __init__(self, k: int, n: int):
        super().__init__()
        # Scaled so the pre-activation is O(1) whatever K is, and gelu's curve is exercised.
        self.weight = nn.Parameter(torch.randn(n, k) / math.sqrt(k))
        self.bias = nn.Parameter(0.1 * torch.randn(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ self.weight.T + self.bias, approximate="tanh")


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]


def bytes_moved(params: dict, itemsize: int) -> int:
    """Fewest bytes: read x, weight and bias once, write y once."""
    m, k, n = params["M"], params["K"], params["N"]
    return (m * k + n * k + n + m * n) * itemsize


def flops(params: dict) -> int:
    """2*M*N*K for the matmul, plus about ten per output for the bias add and tanh-gelu."""
    m, k, n = params["M"], params["K"], params["N"]
    return 2 * m * n * k + 10 * m * n
