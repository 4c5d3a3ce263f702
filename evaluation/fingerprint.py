"""Which device an evaluation runs on, and the environment every result is tied to.

A speedup means nothing without the machine it was measured on, so every EvalResult carries a
Fingerprint; the store keys environments by `Fingerprint.key()`.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from importlib import metadata

from evaluation.errors import DeviceError
from evaluation.records import Fingerprint

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str = "auto") -> str:
    """Turn "auto" into what is here; asking for cuda on a machine without a GPU is an error.

    "rocm" (a Fingerprint's device_kind) is accepted as "cuda": ROCm builds of torch use that device type.
    """
    import torch

    if device == "rocm":
        device = "cuda"
    if device not in DEVICES:
        raise DeviceError(f"unknown device {device!r}; use one of: {', '.join(DEVICES)}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda asked for, but torch sees no GPU here (use --device cpu)")
    return device


def _version(dist: str, fallback: str | None = None) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return fallback or "unknown"


@functools.lru_cache(maxsize=4)
def _nvidia_driver() -> str | None:
    """nvidia-smi is the only place the driver version is written down; torch does not report it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[0] if lines else None


def fingerprint(device: str = "auto") -> Fingerprint:
    import torch

    from evaluation import __version__

    dev = resolve_device(device)
    common = dict(
        triton_version=_version("triton"),
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        kernelscout_version=_version("kernelscout", __version__),
    )
    if dev == "cpu":
        # On the CPU every Triton kernel runs through the interpreter: the worker always sets it.
        return Fingerprint(
            device_kind="cpu",
            device_name="cpu (triton interpreter)",
            arch="cpu",
            triton_interpret=True,
            **common,
        )
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    hip = getattr(torch.version, "hip", None)
    if hip:
        arch = str(getattr(props, "gcnArchName", "gfx?")).split(":")[0]
        return Fingerprint(
            device_kind="rocm",
            device_name=props.name,
            arch=arch,
            hip_version=hip,
            driver_version=hip,
            triton_interpret=os.environ.get("TRITON_INTERPRET") == "1",
            **common,
        )
    return Fingerprint(
        device_kind="cuda",
        device_name=props.name,
        arch=f"sm_{props.major}{props.minor}",
        driver_version=_nvidia_driver(),
        cuda_version=torch.version.cuda,
        triton_interpret=os.environ.get("TRITON_INTERPRET") == "1",
        **common,
    )
