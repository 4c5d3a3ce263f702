"""Where a store lives when the caller does not say: $KSCOUT_HOME, else the user's data directory."""

from __future__ import annotations

import os
from pathlib import Path

DB_FILENAME = "kscout.duckdb"
LOCK_FILENAME = "store.lock"
CHROMA_DIRNAME = "chroma"
TOKEN_FILENAME = "vectors.token"  # changes whenever a process writes vectors (see store/vectors.py)
KEYS_DIRNAME = "keys"  # this store's signing key and the keys it trusts (see store/signing.py)


def default_home() -> Path:
    """Follow the XDG base-directory rule so a store never lands in the working directory by accident."""
    explicit = os.environ.get("KSCOUT_HOME")
    if explicit:
        return Path(explicit).expanduser()
    data = os.environ.get("XDG_DATA_HOME")
    base = Path(data).expanduser() if data else Path.home() / ".local" / "share"
    return base / "kernelscout"
