"""KernelBench-style problem: mean cross-entropy of logits against integer targets (one scalar)."""

import torch
import torch.nn as nn

DTYPES = ("float32",)
SHAPES = {"cpu": [{"rows": 6, "classes": 40}, {"rows": 3, "classes": 1}], "cuda": [{"rows": 512, "classes": 4000}]}


class Model(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, targets)


rows = 6
classes = 40


def get_inputs():
    return [torch.randn(rows, classes), torch.randint(0, classes, (rows,))]


def get_init_inputs():
    return []
