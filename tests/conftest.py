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

SLOW_TESTS = os.path.join(os.path.dirname(__file__), "slow_tests.txt")


def _slow_ids() -> set[str]:
    with open(SLOW_TESTS) as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects by marker
def pytest_collection_modifyitems(config, items):
    slow = _slow_ids()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
    whole_suite = [os.path.abspath(a) for a in config.args] == [os.path.dirname(os.path.abspath(__file__))]
    stale = sorted(slow - {item.nodeid for item in items})
    if whole_suite and stale:  # a renamed or removed test would silently lose its slow mark
        raise pytest.UsageError(f"tests/slow_tests.txt names tests that do not exist: {', '.join(stale)}")
    if _HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


_SIGNALS = ("SIGINT", "SIGTERM")
SIGNAL_LEAKS = os.environ.get("KSCOUT_SIGNAL_LEAKS")  # a file each leak is appended to, besides the warning


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test that leaves SIGINT or SIGTERM handled otherwise than it found them is named, and the
    handler put back: a SIG_IGN left behind is inherited by every child started after it (a `kscout
    optimize` child then ignores Ctrl-C, and the signal tests fail far from the cause). Set-up and
    teardown count: a fixture can leak too."""
    import signal
    import sys

    before = {name: signal.getsignal(getattr(signal, name)) for name in _SIGNALS}
    yield
    for name, handler in before.items():
        now = signal.getsignal(getattr(signal, name))
        if now is not handler and now != handler:
            signal.signal(getattr(signal, name), handler)
            line = f"{item.nodeid} left {name} as {now!r} (was {handler!r}); put back"
            print(f"\nkscout: {line}", file=sys.stderr)
            if SIGNAL_LEAKS:
                with open(SIGNAL_LEAKS, "a") as f:
                    f.write(line + "\n")


@pytest.fixture
def kscout_home(tmp_path, monkeypatch):
    """Point the store at a fresh folder, as a user's $KSCOUT_HOME would be."""
    home = tmp_path / "kscout-home"
    home.mkdir()
    monkeypatch.setenv("KSCOUT_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def hwdocs_store_template(tmp_path_factory):
    """A store folder holding the shipped hwdocs, loaded once per test session by the first `ask` on an
    empty store (the auto-load path). Embedding them costs tens of seconds on 2 cores, so modules copy
    this folder (shutil.copytree) instead of ingesting again; never write to it directly.
    """
    from knowledge.retrieve import ask
    from store import Store

    home = tmp_path_factory.mktemp("hwdocs-template") / "home"
    with Store.open(home) as store:
        assert store.documents() == []
        ask(store, "warm-up question about the H100")
    return home


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say which shuffled order ran, also under -q (pytest-randomly's own header line is hidden there)."""
    seed = getattr(config.option, "randomly_seed", None)
    if seed is not None and config.pluginmanager.hasplugin("randomly"):
        terminalreporter.write_line(f"test order: shuffled by pytest-randomly, replay with --randomly-seed={seed}")
