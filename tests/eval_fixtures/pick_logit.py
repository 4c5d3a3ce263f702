"""KernelBench-style problem with integer targets: the logit of the target class, per row."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return logits.gather(1, targets.unsqueeze(1)).squeeze(1) * 2.0


rows = 64
classes = 1000
width = classes  # derived, not a literal: follows classes when it is rebound


def get_inputs():
    return [torch.randn(rows, width), torch.randint(0, width, (rows,))]


def get_init_inputs():
    return []
