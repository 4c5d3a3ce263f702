"""Log-softmax over the last dimension (attention-score widths and vocabulary widths).

Built-in problem file (format: evaluation/problems/__init__.py). Rows reach a 50257-wide vocabulary,
so a kernel that holds a whole row in one block will not compile everywhere.
"""

import torch
from torch import nn

OP_FAMILY = "log_softmax"
DESCRIPTION = "y = log_softmax(x, dim=-1) of an (M, N) tensor"

M = 4096
N = 4096

DTYPES = ("float32", "bfloat16")

SHAPES = {
    "cuda": [
        {"M": 4096, "N": 4096, "tags": ("representative", "timed")},
        {"M": 8192, "N": 8192, "tags": ("representative", "timed")},
        {"M": 4096, "N": 32000, "tags": ("largest", "timed")},
        {"M": 1, "N": 4096, "tags": ("edge",)},
        {"M": 4099, "N": 4099, "tags": ("edge",)},
        {"M": 127, "N": 1000, "tags": ("edge",)},
        {"M": 3, "N": 50257, "tags": ("edge",)},
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
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return []


def bytes_moved(params: dict, itemsize: int) -> int:
    """Fewest bytes: read x once, write y once (a looped kernel's second read is not counted)."""
    m, n = params["M"], params["N"]
    return 2 * m * n * itemsize


def flops(params: dict) -> int:
    """Max, subtract, exp, sum, subtract the log-sum: five per element (exp counted as one)."""
    m, n = params["M"], params["N"]
    return 5 * m * n
