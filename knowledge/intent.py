"""What a question wants: what worked, what failed, how to do something, or a fact.

The intent decides which past measurements an answer shows. "What failed for layernorm" wants failure
patterns and failed or slower outcomes first, never the winners; "what worked" wants only speedups
whose interval excludes 1; "what is TMA" names no op or kernel and gets no outcomes at all. Plain word
patterns are enough: these questions are short and their verbs are few.
"""

from __future__ import annotations

import enum
import re


class Intent(str, enum.Enum):
    worked = "worked"
    failed = "failed"
    howto = "how-to"
    fact = "fact"


_FAILED = re.compile(
    r"\b(fail(?:s|ed|ing|ures?)?|broke(?:n)?|break(?:s)?|crash(?:es|ed)?|errors?|incorrect|wrong|mismatch(?:es)?|"
    r"nan|inf|slow(?:er|down|downs)?|regress(?:ed|ion|ions)?|worse|pitfalls?|avoid|problems?|issues?|bugs?|"
    r"(?:did|does|do)\s*n[o']t\s+work|not\s+work(?:ing)?|went\s+wrong|timed?\s*out|spill(?:s|ed)?)\b",
    re.IGNORECASE,
)
_WORKED = re.compile(
    r"\b(work(?:ed|s)?(?:\s+well)?|best|fastest|faster|speed\s*ups?|sped\s+up|wins?|won|help(?:ed|s)?|"
    r"gains?|improv(?:e|ed|es|ement)|successful|succeeded|beat|top)\b",
    re.IGNORECASE,
)
_HOWTO = re.compile(
    r"^\s*(how\s+(?:do|should|can|would|to)|how\s+\w+\s+i\b)|\b(how\s+to|write|implement|tune|tuning|choose|"
    r"pick|configure|set\s+up|should\s+i|recommended?|guidelines?|best\s+practices?)\b",
    re.IGNORECASE,
)


def classify(question: str) -> Intent:
    """Failed before worked ("what worked and what failed" is asked to avoid mistakes), then how-to."""
    if _FAILED.search(question):
        return Intent.failed
    if _WORKED.search(question):
        return Intent.worked
    if _HOWTO.search(question):
        return Intent.howto
    return Intent.fact
