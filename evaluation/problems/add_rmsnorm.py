"""Residual add fused with RMSNorm (eps = 1e-6): the pre-norm step of every transformer block.

Built-in problem file (format: evaluation/problems/__init__.py). Both outputs count: `h` feeds
the next residual, so a kernel must write it, not only the normalised `y`.
"""

import torch
from torch import nn

OP_FAMILY = "add_rmsnorm"
DESCRIPTION = "h = x + residual; y = h * rsqrt(mean(h^2) + eps) * weight; returns (y, h)"

M = 4096
N = 4096
EPS = 1e-6

DTYPES = ("float32", "bfloat16")

SHAPES = {
    "cuda": [
        {"M": 4096, "N": 4096, "tags": ("representative", "timed")},
        {"M": 16384, "N": 4096, "tags": ("representative", "timed")},
        {"M": 8192, "N": 8192, "tags": ("largest", "timed")},
        {"M": 1, "N": 4096, "tags": ("edge",)},
        {"M": 4099, "N": 4099, "tags": ("edge",)},
        {"M": 127, "N": 1000, "tags": ("edge",)},
        {"M": 3, "N": 12289, "tags": ("edge",)},
        {"M": 65, "N": 1, "tags": ("edge",)},
        {"M": 16384, "N": 8192, "tags": ("llm_scale",)},  # timed on request: --time-case
        {"M": 16, "N": 4194304, "tags": ("long_rows",)},  # few long rows (40_LayerNorm's shape)
    ],
    "cpu": [
        {"M": 8, "N": 256, "tags": ("representative",)},
        {"M": 1, "N": 64, "tags": ("edge",)},
        {"M": 7, "N": 97, "tags": ("edge",)},
        {"M": 5, "N": 1000, "tags": ("edge",)},
        {"M": 3, "N": 1, "tags": ("edge",)},
        {"M": 3, "N": 1537, "tags": ("edge",)},  # a row past 1024
        {"M": 67, "N": 4099, "tags": ("big",)},  # > 64 rows, a non-power-of-two width past 4096
    ],
}


class Model(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(n))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        h = x + residual
        y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * self.weight
        return y, h


def get_inputs():
    return [torch.randn(M, N), torch.randn(M, N)]


def get_init_inputs():
    return [N]


def bytes_moved(params: dict, itemsize: int) -> int:
    """Fewest bytes: read x and residual, write y and h, read weight once."""
    m, n = params["M"], params["N"]
    return 4 * m * n * itemsize + n * itemsize


def flops(params: dict) -> int:
    """Add, square, sum, scale by rstd, scale by weight: five per element."""
    m, n = params["M"], params["N"]
    return 5 * m * n
