"""LayerNorm over the last dimension with a learned weight and bias (eps = 1e-5).

Built-in problem file. It is a KernelBench-style file (Model, get_inputs, get_init_inputs, module-level
size constants) plus the declarations the harness reads for built-ins: OP_FAMILY, SHAPES, DTYPES and
the byte model. See evaluation/problems/__init__.py for the format.
"""

import torch
from torch import nn

OP_FAMILY = "layernorm"
DESCRIPTION = "y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim of an (M, N) tensor"

M = 4096
N = 4096
EPS = 1e-5

DTYPES = ("float32", "bfloat16")

# Each entry binds the size constants; tags say why the case is there.
SHAPES = {
    "cuda": [
        {"M": 4096, "N": 4096, "tags": ("representative", "timed")},
        {"M": 8192, "N": 8192, "tags": ("largest", "timed")},
        {"M": 16384, "N": 2048, "tags": ("representative", "timed")},
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
        # Random affine parameters: ones and zeros would hide a kernel that ignores them.
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(n))
        self.bias = nn.Parameter(0.1 * torch.randn(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), self.weight, self.bias, EPS)


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return [N]


def bytes_moved(params: dict, itemsize: int) -> int:
    """Fewest bytes: read x, write y, read weight and bias once."""
    m, n = params["M"], params["N"]
    return 2 * m * n * itemsize + 2 * n * itemsize


def flops(params: dict) -> int:
    m, n = params["M"], params["N"]
    return 8 * m * n
