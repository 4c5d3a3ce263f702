"""Importing a kernel file (a rendered candidate, a problem) by path, as the harness does: registered in
sys.modules under `name`, because triton.jit reads a kernel's source back through inspect."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
