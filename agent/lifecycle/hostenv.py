"""This machine's environment fingerprint without importing torch, for commands that only list.

`kscout deployed` says how fresh each deployed kernel's evidence is on this machine, which needs this
machine's fingerprint. `evaluation.fingerprint()` imports torch (seconds) to ask CUDA about the device;
a command that only lists rows should answer at once. The same facts are written down elsewhere:
torch's version file (read as text, not imported), nvidia-smi for the device, package metadata for
the rest. Where they cannot be read this way (ROCm, no nvidia-smi beside a CUDA build of torch), it
falls back to `evaluation.fingerprint()`, so the answer is never a guess. A test checks that both
give the same fingerprint on the machine the suite runs on.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Optional

from evaluation.records import Fingerprint


def _torch_version_file() -> dict[str, Optional[str]]:
    """`__version__`, `cuda`, `hip` from torch/version.py, parsed as text (no import)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(list(spec.submodule_search_locations)[0]) / "version.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return {}
    out: dict[str, Optional[str]] = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        if target in ("__version__", "cuda", "hip") and isinstance(value, ast.Constant):
            out[target] = value.value
    return out


def _version(dist: str, fallback: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return fallback


def _nvidia_smi() -> Optional[tuple[str, str, str]]:
    """(name, sm_XY, driver) of GPU 0, as torch.cuda and the fingerprint would name it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line for line in out.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not lines or visible is not None:  # a remapped device order: only torch knows which one is 0
        return None
    name, cap, driver = (p.strip() for p in lines[0].split(","))
    major, _, minor = cap.partition(".")
    return name, f"sm_{major}{minor}", driver


def probe_environment() -> Fingerprint:
    """The fingerprint `evaluation.fingerprint("auto")` would give here, without importing torch."""
    from evaluation import __version__

    tv = _torch_version_file()
    if "__version__" not in tv or tv.get("hip"):
        return _full()
    common = dict(
        triton_version=_version("triton", "unknown"),
        torch_version=tv["__version__"],
        python_version=platform.python_version(),
        kernelscout_version=_version("kernelscout", __version__),
    )
    if tv.get("cuda") is None:  # a CPU build of torch: evaluation runs through the Triton interpreter
        return Fingerprint(
            device_kind="cpu", device_name="cpu (triton interpreter)", arch="cpu", triton_interpret=True, **common
        )
    gpu = _nvidia_smi()
    if gpu is None:
        return _full()
    name, arch, driver = gpu
    return Fingerprint(
        device_kind="cuda",
        device_name=name,
        arch=arch,
        driver_version=driver,
        cuda_version=tv["cuda"],
        triton_interpret=os.environ.get("TRITON_INTERPRET") == "1",
        **common,
    )


def _full() -> Fingerprint:
    """Where the cheap probe cannot answer (ROCm, remapped devices): ask a local executor, as revalidate would."""
    from agent.search.executors import make_executor

    with make_executor() as ex:
        return ex.environment()
