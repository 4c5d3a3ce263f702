"""Failure signatures: the same mistake on the same device counts once, however its details vary.

Two candidates that fail with "index 4096 out of bounds in /tmp/tmpa81x/cand.py" and "index 8192 out
of bounds in /tmp/tmpq2zz/cand.py" made one mistake, and the next prompt should hear about it once,
with a count. The message shape replaces the parts that vary between occurrences: quoted names -> Q,
directories of paths are stripped (the file name stays, it often says which stage failed), hex and
addresses -> X, numbers -> N, whitespace collapsed.
"""

from __future__ import annotations

import hashlib
import re

_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"|`[^`\n]*`")
_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:\\|~/|\.{1,2}/|/)(?:[\w.\-]+[/\\])*")
_HEX = re.compile(r"\b0[xX][0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")

MAX_SHAPE_CHARS = 500
MAX_EXAMPLE_CHARS = 4000


def message_shape(message: str) -> str:
    text = _QUOTED.sub("Q", message or "")
    text = _PATH.sub("", text)
    text = _HEX.sub("X", text)
    text = _NUMBER.sub("N", text)
    return _SPACE.sub(" ", text).strip()[:MAX_SHAPE_CHARS]


def failure_signature(op_family: str, arch: str, stage: str, error_class: str, shape: str) -> str:
    key = "\x1f".join((op_family, arch, stage, error_class, shape))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def embedding_text(error_class: str, stage: str, shape: str) -> str:
    """What a failure is searched by: its class, where it happened, and the shape of its message."""
    return f"{error_class} at {stage}: {shape}"
