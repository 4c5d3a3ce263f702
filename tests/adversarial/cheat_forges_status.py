"""Writes a success status and fake results into its working directory, then leaves with code 0."""
import json
import os

import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        with open("status.json", "w") as f:
            json.dump({"nonce": "guess", "status": "ok", "launches": 1, "kernels": []}, f)
        torch.save({"nonce": "guess", "outputs": {"kind": "tensor", "items": [x], "types": ["Tensor"]},
                    "inputs": [x]}, "r0000_00.pt")
        os._exit(0)
