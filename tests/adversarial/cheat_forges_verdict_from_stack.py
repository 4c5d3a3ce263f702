"""The red team's forgery: walk the call stack to the worker, read its request (seeds, key), write
every result and a success status into the scratch folder, and exit. Frame walking is refused
statically; past that, the parent never reads a file from scratch, so the forgery is a crash."""
import json
import os
import sys

import torch
import triton
import triton.language as tl
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        frame, request = sys._getframe(1), None
        while frame is not None and request is None:
            request = frame.f_locals.get("self", None) and getattr(frame.f_locals["self"], "req", None)
            frame = frame.f_back
        with open("status.json", "w") as f:
            json.dump({"status": "ok", "key": getattr(request, "key", "none"), "launches": 1}, f)
        for case in getattr(request, "cases", []):
            for t in range(len(case.trials)):
                torch.save({"outputs": {"kind": "tensor", "items": [x], "types": ["Tensor"]}},
                           f"r{case.index:04d}_{t:02d}.pt")
        os._exit(0)
