"""The device's copy bandwidth: the ceiling that "% of ceiling" is measured against.

Bytes read plus bytes written by a large device-to-device copy (eager, CUDA events: a graph-captured
copy of a GiB or more runs slower than the copy engine allows, so it would understate the ceiling).
Measured once per (device name, driver) and cached as JSON under $KSCOUT_HOME/cache (default
~/.cache/kernelscout): a user-level cache, never the store.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

COPY_BYTES = 1 << 30  # 1 GiB copied: 2 GiB through memory per copy
N_COPIES = 10


def cache_dir() -> Path:
    home = os.environ.get("KSCOUT_HOME")
    base = Path(home).expanduser() if home else Path.home() / ".cache" / "kernelscout"
    return base / "cache"


def _cache_file(device_name: str, driver: str | None) -> Path:
    key = hashlib.sha256(f"{device_name}|{driver}".encode()).hexdigest()[:16]
    return cache_dir() / f"copy-ceiling-{key}.json"


def measure_copy_gbps() -> float:
    """Median over copies of (read + written bytes) / time, in GB/s (1e9 bytes)."""
    import torch

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(N_COPIES):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del src, dst
    torch.cuda.empty_cache()
    ms = sorted(times)[len(times) // 2]
    return 2 * COPY_BYTES / (ms * 1e-3) / 1e9


def copy_ceiling_gbps(device_name: str, driver: str | None) -> float:
    path = _cache_file(device_name, driver)
    try:
        cached = json.loads(path.read_text())
        if cached.get("device_name") == device_name and cached.get("driver") == driver:
            return float(cached["copy_gbps"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    gbps = measure_copy_gbps()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "device_name": device_name,
                "driver": driver,
                "copy_gbps": gbps,
                "copy_bytes": COPY_BYTES,
                "method": "cuda_events, eager copy_, median",
            }
        )
    )
    tmp.replace(path)
    return gbps
