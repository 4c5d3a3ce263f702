"""Pull the candidate module out of an LLM reply.

Models wrap code in fences most of the time, but not always in the language we asked for, and they
sometimes show a fragment before the full module. The rule: prefer ```python fences; among fenced
blocks take the largest that defines `ModelNew`; with no fence at all, take the largest run of lines
that looks like a module defining `ModelNew`. A block that does not parse is still returned: the
evaluator's static check reports the syntax error, and the repair prompt gets to see it.
"""

from __future__ import annotations

import re
from typing import Optional

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_DEFINES_MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_CODE_START = re.compile(r"^(import |from |class |def |@|#)")


def _defines_modelnew(code: str) -> bool:
    return bool(_DEFINES_MODELNEW.search(code))


def fenced_blocks(reply: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block, in order."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(reply)]


def _unfenced_block(reply: str) -> Optional[str]:
    """The largest stretch that starts at a code-looking line and runs to where prose resumes."""
    lines = reply.splitlines()
    best: Optional[str] = None
    start = None
    for i, line in enumerate(lines + [""]):
        is_prose = i == len(lines) or (
            line and not line[0].isspace() and not _CODE_START.match(line) and not _looks_like_code(line)
        )
        if start is None and i < len(lines) and _CODE_START.match(line):
            start = i
        elif start is not None and is_prose:
            block = "\n".join(lines[start:i]).strip("\n") + "\n"
            if _defines_modelnew(block) and (best is None or len(block) > len(best)):
                best = block
            start = None
    return best


def _looks_like_code(line: str) -> bool:
    stripped = line.rstrip()
    return bool(re.match(r"^[A-Za-z_][\w.]*\s*(=|\(|\[)", stripped)) or stripped.endswith((":", ")", "]"))


def extract_code(reply: str) -> Optional[str]:
    """The candidate source in `reply`, or None when it holds no module defining ModelNew."""
    blocks = fenced_blocks(reply)
    if blocks:
        python = [code for lang, code in blocks if lang in ("python", "py", "python3")]
        for pool in (python, [code for _, code in blocks]):
            defining = [code for code in pool if _defines_modelnew(code)]
            if defining:
                return max(defining, key=len)
        # Fences that hold something else (a shell line, an error quote): the module may sit outside.
        return _unfenced_block(_FENCE.sub("", reply))
    return _unfenced_block(reply)
