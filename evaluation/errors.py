"""Typed errors. Libraries raise these; only the CLI turns them into one-line messages (exit code 2).

`KscoutError` is the root for every package of kernelscout: it lives here because `evaluation` must
import nothing else of ours, and every other package may import `evaluation`.
"""


class KscoutError(Exception):
    """A problem with the user's input or environment, reported as one line."""

    exit_code = 2


class ProblemError(KscoutError):
    """A problem file or name that cannot be loaded: missing, malformed, no `Model`, unknown name."""


class CandidateError(KscoutError):
    """A candidate file that cannot be read, or has no `ModelNew`."""


class DeviceError(KscoutError):
    """The requested device is not available here (e.g. --device cuda without a GPU)."""
