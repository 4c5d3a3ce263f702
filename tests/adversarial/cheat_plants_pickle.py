"""Plants a result file whose pickle runs code when loaded (here: creates a marker file), then leaves.

The parent must refuse it without running it: results are loaded with torch.load(weights_only=True).
"""
import os
import pickle

import torch
from torch import nn

MARKER = "/tmp/kscout-adversarial-pickle-ran"


class _Payload:
    def __reduce__(self):
        return (open, (MARKER, "w"))


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        with open("r0000_00.pt", "wb") as f:
            pickle.dump({"nonce": _Payload(), "outputs": _Payload(), "inputs": []}, f)
        os._exit(0)
