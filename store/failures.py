"""Failure signatures: the same mistake on the same device counts once, however its details vary.

Two candidates that fail with "index 4096 out of bounds in /tmp/tmpa81x/cand.py" and "index 8192 out
of bounds in /tmp/tmpq2zz/cand.py" made one mistake, and the next prompt should hear about it once,
with a count. The message shape replaces the parts that vary between occurrences: quoted names -> Q,
directories of paths are stripped (the file name stays, it often says which stage failed), hex and
addresses -> X, numbers -> N, whitespace collapsed. A dtype name is not a number that varies:
"bfloat16", "float8_e4m3fn", "fp32", "i32" and "f16" stay as written, or a bf16 failure and an fp32
one would read as the same mistake ("bfloatN" and "floatN").
"""

from __future__ import annotations

import hashlib
import re

_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"|`[^`\n]*`")
_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:\\|~/|\.{1,2}/|/)(?:[\w.\-]+[/\\])*")
_HEX = re.compile(r"\b0[xX][0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# torch, numpy and Triton names (bfloat16, float8_e4m3fn, uint8, complex64, fp16, bf16, tf32), and
# MLIR's (f32, i1, bf16, also inside "128xf32"); the digits belong to the name.
_DTYPE = re.compile(
    r"(?:(?<![A-Za-z0-9_])|(?<=\dx))"
    r"(?:b?float\d+(?:_e\d+m\d+(?:fnuz|fn)?)?|u?int\d+|complex\d+|fp\d+(?:e\d+m\d+)?|bf16|tf32|f(?:16|32|64)|i(?:1|8|16|32|64)"
    r"|e\d+m\d+(?:fnuz|fn)?)"
    r"(?![A-Za-z0-9])"
)
_SPACE = re.compile(r"\s+")

MAX_SHAPE_CHARS = 500
MAX_EXAMPLE_CHARS = 4000


def message_shape(message: str) -> str:
    text = _QUOTED.sub("Q", message or "")
    text = _PATH.sub("", text)
    text = _HEX.sub("X", text)
    text = _numbers_outside_dtypes(text)
    return _SPACE.sub(" ", text).strip()[:MAX_SHAPE_CHARS]


def _numbers_outside_dtypes(text: str) -> str:
    out, end = [], 0
    for m in _DTYPE.finditer(text):
        out += [_NUMBER.sub("N", text[end : m.start()]), m.group(0)]
        end = m.end()
    out.append(_NUMBER.sub("N", text[end:]))
    return "".join(out)


def failure_signature(op_family: str, arch: str, stage: str, error_class: str, shape: str) -> str:
    key = "\x1f".join((op_family, arch, stage, error_class, shape))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def embedding_text(error_class: str, stage: str, shape: str) -> str:
    """What a failure is searched by: its class, where it happened, and the shape of its message."""
    return f"{error_class} at {stage}: {shape}"
