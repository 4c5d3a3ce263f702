"""The files the parent and the worker exchange in the scratch directory.

parent -> worker: `request.json` (mode, nonce, device, problem path, cases, seeds) and one
`state_<k>.pt` per distinct parameter binding (the reference Model's state dict). The worker reads and
deletes them before it imports the candidate.
worker -> parent: `r<case>_<trial>.pt` per correctness call (outputs and the inputs as they were after
the call), written atomically, and `status.json` at the end. Every file carries the request's nonce,
so a file the candidate wrote is not taken for the worker's. The parent loads .pt files with
weights_only=True: a crafted pickle cannot run code in the parent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REQUEST = "request.json"
STATUS = "status.json"
CANDIDATE = "candidate.py"


def result_name(case_index: int, trial: int) -> str:
    return f"r{case_index:04d}_{trial:02d}.pt"


def state_name(key: int) -> str:
    return f"state_{key}.pt"


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def save_atomic(path: Path, payload: Any) -> None:
    import torch

    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def package(value: Any) -> dict[str, Any]:
    """An output as plain data: {"kind": tensor|sequence|other, "items": [...], "types": [...]}."""
    import torch

    def item(v):
        if isinstance(v, torch.Tensor):
            return v.detach().cpu().clone()
        if isinstance(v, (bool, int, float)):
            return v
        return None

    if isinstance(value, torch.Tensor):
        return {"kind": "tensor", "items": [item(value)], "types": ["Tensor"]}
    if isinstance(value, (tuple, list)):
        return {"kind": "sequence", "items": [item(v) for v in value], "types": [type(v).__name__ for v in value]}
    return {"kind": "other", "items": [item(value)], "types": [type(value).__name__]}
