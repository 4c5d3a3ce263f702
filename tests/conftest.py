"""Test-wide settings: the Triton interpreter on a machine without a GPU, and no network.

TRITON_INTERPRET must be set before any kernel module is imported (the mode is fixed at @triton.jit).
"""

import os

try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except Exception:  # pragma: no cover
    _HAS_CUDA = False

if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if _HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def kscout_home(tmp_path, monkeypatch):
    """Point the store at a fresh folder, as a user's $KSCOUT_HOME would be."""
    home = tmp_path / "kscout-home"
    home.mkdir()
    monkeypatch.setenv("KSCOUT_HOME", str(home))
    return home
