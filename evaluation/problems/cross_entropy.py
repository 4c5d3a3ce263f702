"""Per-token cross-entropy of LM logits against integer targets (no reduction).

Built-in problem file (format: evaluation/problems/__init__.py). Vocabularies run to 128256
(Llama 3), so a row does not fit one block; logits are scaled by 2 so the max-subtraction matters.
"""

import torch
from torch import nn

OP_FAMILY = "cross_entropy"
DESCRIPTION = "loss = cross_entropy(logits (M, V), targets (M,), reduction='none')"

M = 4096
V = 32000

DTYPES = ("float32", "bfloat16")

SHAPES = {
    "cuda": [
        {"M": 4096, "V": 32000, "tags": ("representative", "timed")},
        {"M": 16384, "V": 32000, "tags": ("representative", "timed")},
        {"M": 8192, "V": 128256, "tags": ("largest", "timed")},
        {"M": 1, "V": 128256, "tags": ("edge",)},
        {"M": 4099, "V": 50257, "tags": ("edge",)},  # GPT-2's vocabulary: odd, but 29 * 1733
        {"M": 5, "V": 32003, "tags": ("edge",)},  # a prime vocabulary
        {"M": 127, "V": 1000, "tags": ("edge",)},
        {"M": 65, "V": 1, "tags": ("edge",)},
    ],
    "cpu": [
        {"M": 8, "V": 256, "tags": ("representative",)},
        {"M": 1, "V": 64, "tags": ("edge",)},
        {"M": 7, "V": 97, "tags": ("edge",)},
        {"M": 5, "V": 1000, "tags": ("edge",)},
        {"M": 3, "V": 1, "tags": ("edge",)},
        {"M": 3, "V": 1537, "tags": ("edge",)},  # a row past 1024
        {"M": 67, "V": 4099, "tags": ("big",)},  # > 64 rows, a non-power-of-two width past 4096
    ],
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, targets, reduction="none")


def get_inputs():
    return [torch.randn(M, V) * 2, torch.randint(0, V, (M,))]


def get_init_inputs():
    return []


def bytes_moved(params: dict, itemsize: int) -> int:
    """Fewest bytes: read the logits once, read int64 targets (8 bytes), write one loss per row."""
    m, v = params["M"], params["V"]
    return m * v * itemsize + 8 * m + m * itemsize


def flops(params: dict) -> int:
    """Max, subtract, exp, sum per logit (exp counted as one); the per-row log is negligible."""
    m, v = params["M"], params["V"]
    return 4 * m * v
