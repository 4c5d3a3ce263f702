"""SwiGLU gate: silu(a) * b, the MLP activation of Llama-family models.

Built-in problem file (format: evaluation/problems/__init__.py). N is the MLP's intermediate width
(14336 in Llama 3 8B); purely elementwise, so it is bound by memory.
"""

import torch
from torch import nn

OP_FAMILY = "swiglu"
DESCRIPTION = "y = silu(a) * b for (M, N) tensors a (gate) and b (up)"

M = 4096
N = 14336

DTYPES = ("float32", "bfloat16")

SHAPES = {
    "cuda": [
        {"M": 4096, "N": 8192, "tags": ("representative", "timed")},
        {"M": 4096, "N": 14336, "tags": ("representative", "timed")},
        {"M": 16384, "N": 14336, "tags": ("largest", "timed")},
        {"M": 1, "N": 14336, "tags": ("edge",)},
        {"M": 4099, "N": 4099, "tags": ("edge",)},
        {"M": 127, "N": 1000, "tags": ("edge",)},
        {"M": 3, "N": 12289, "tags": ("edge",)},
        {"M": 65, "N": 1, "tags": ("edge",)},
        {"M": 16384, "N": 8192, "tags": ("llm_scale",)},  # timed on request: --time-case
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
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(a) * b


def get_inputs():
    return [torch.randn(M, N), torch.randn(M, N)]


def get_init_inputs():
    return []


def bytes_moved(params: dict, itemsize: int) -> int:
    """Fewest bytes: read a and b, write y."""
    m, n = params["M"], params["N"]
    return 3 * m * n * itemsize


def flops(params: dict) -> int:
    """silu as a / (1 + exp(-a)) is four ops (negate, exp, add, divide), then one multiply by b."""
    m, n = params["M"], params["N"]
    return 5 * m * n
