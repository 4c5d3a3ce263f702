"""Causal self-attention, the core of a decoder layer: softmax(q k^T / sqrt(D), causal) v.

Built-in problem file (format: evaluation/problems/__init__.py). q, k and v are (B, H, L, D); query i
sees keys 0..i (torch's is_causal). The baselines keep IEEE-fp32 matmuls; float32 is judged
at (5e-4, 5e-4), what PyTorch's own float32 attention reaches over 4099 keys (TOLERANCES below).
"""

import torch
from torch import nn

OP_FAMILY = "attention"
DESCRIPTION = "y = scaled_dot_product_attention(q, k, v, is_causal=True); q, k, v (B, H, L, D)"

B = 4
H = 16
L = 2048
D = 64

DTYPES = ("float32", "bfloat16")

# PyTorch's own float32 SDPA misses (1e-4, 1e-4) against float64 on the offset trial (inputs x*4+1.5) once
# the rows are long: max error 1.7e-4 at L=1000, D=80 and 2.6e-4 at L=4099, D=128 (CPU, 2026-12-07),
# from summing a thousand exp-weighted values of magnitude ~5 into a result near 0.
TOLERANCES = {"float32": (5e-4, 5e-4)}

SHAPES = {
    "cuda": [
        {"B": 4, "H": 16, "L": 2048, "D": 64, "tags": ("representative", "timed")},
        {"B": 8, "H": 32, "L": 512, "D": 64, "tags": ("representative", "timed")},
        {"B": 2, "H": 16, "L": 4096, "D": 128, "tags": ("largest", "timed")},
        {"B": 1, "H": 1, "L": 1, "D": 64, "tags": ("edge",)},
        {"B": 3, "H": 5, "L": 127, "D": 64, "tags": ("edge",)},
        {"B": 2, "H": 3, "L": 1000, "D": 80, "tags": ("edge",)},
        {"B": 1, "H": 2, "L": 4099, "D": 128, "tags": ("edge",)},
        {"B": 1, "H": 1, "L": 17, "D": 256, "tags": ("edge",)},
    ],
    "cpu": [
        {"B": 1, "H": 2, "L": 64, "D": 32, "tags": ("representative",)},
        {"B": 1, "H": 1, "L": 1, "D": 16, "tags": ("edge",)},
        {"B": 2, "H": 3, "L": 37, "D": 24, "tags": ("edge",)},
        {"B": 1, "H": 2, "L": 131, "D": 64, "tags": ("edge",)},
        {"B": 1, "H": 1, "L": 17, "D": 200, "tags": ("edge",)},
    ],
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    return [torch.randn(B, H, L, D), torch.randn(B, H, L, D), torch.randn(B, H, L, D)]


def get_init_inputs():
    return []


def bytes_moved(params: dict, itemsize: int) -> int:
    """Fewest bytes: read q, k and v once, write the output once (the scores never reach memory)."""
    return 4 * params["B"] * params["H"] * params["L"] * params["D"] * itemsize


def flops(params: dict) -> int:
    """Two products over the causal half: 2 * (2 L^2 D) / 2 per head."""
    return 2 * params["B"] * params["H"] * params["L"] * params["L"] * params["D"]
