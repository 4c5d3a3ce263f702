"""What a question wants: what worked, what failed, how to do something, or a fact.

The intent decides which past measurements an answer shows. "What failed for layernorm" wants failure
patterns, failed outcomes and significant slowdowns, never the winners; "what worked" wants only
speedups whose interval excludes 1; "what is TMA" names no op or kernel and gets no outcomes at all.
Plain word patterns are enough: these questions are short and their verbs are few.

A remedy asked for is a how-to, whatever it remedies: in "how to avoid bank conflicts", "how can I
prevent register spills" or "how do I fix a NaN", the failure words are the object of a remedy verb
(avoid, prevent, reduce, fix, debug, work around...), so that verb and its object are set aside before
failure words are looked for. "What failed when we tried to avoid bank conflicts" still asks what failed.
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
    r"nans?|infs?|slow(?:er|down|downs)?|regress(?:ed|ion|ions)?|worse|pitfalls?|problems?|issues?|bugs?|"
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


# A remedy verb where it is asked for (at the start, or after "to", "for", "I", "we", "you", "can",
# "should", "do"), with its object up to the end of the clause.
_REMEDY = re.compile(
    r"(?:^\s*|\b(?:to|for|i|we|you|can|should|do)\s+)"
    r"(?:avoid(?:s|ed|ing)?|prevent(?:s|ed|ing)?|reduc(?:e|es|ed|ing)|minimi[sz](?:e|es|ed|ing)|"
    r"eliminat(?:e|es|ed|ing)|fix(?:es|ed|ing)?|debug(?:s|ged|ging)?|mitigat(?:e|es|ed|ing)|"
    r"resolv(?:e|es|ed|ing)|troubleshoot(?:s|ed|ing)?|diagnos(?:e|es|ed|ing)|get(?:ting)?\s+rid\s+of|"
    r"work(?:ing)?\s+around|deal(?:ing)?\s+with|cop(?:e|ing)\s+with|recover(?:ing)?\s+from)\b"
    r".*?(?=\s+(?:and|but|or)\b|[?.,;]|$)",
    re.IGNORECASE,
)
# Phrases that ask for a way to do something, though they hold a word of another intent ("best").
_HOWTO_PHRASE = re.compile(r"\bbest\s+(?:practices?|ways?\s+to)\b", re.IGNORECASE)


# Words that ask about a project's licence or build, the only questions licence and build files
# (kind housekeeping) answer; any other question ("how big is the H100's L2") never cites them.
_HOUSEKEEPING = re.compile(
    r"\b(licen[cs](?:e|es|ed|ing)|copyright|copying|notices?|patents?|spdx|"
    r"build(?:s|ing)?|cmake\w*|makefiles?|bazel|meson|setup\.py|pyproject|install(?:s|ed|ing|ation)?|"
    r"requirements?|dependenc(?:y|ies)|compil(?:e|es|ed|ing|er)\s+flags?)\b",
    re.IGNORECASE,
)


def asks_about_housekeeping(question: str) -> bool:
    """Whether a question is about a licence or a build, so licence and build files may answer it."""
    return bool(_HOUSEKEEPING.search(question))


def classify(question: str) -> Intent:
    """Failed before worked ("what worked and what failed" is asked to avoid mistakes), then how-to;
    a remedy asked for (see the module doc) is set aside first and makes the question a how-to."""
    rest, remedies = _REMEDY.subn(" ", question)
    rest, phrases = _HOWTO_PHRASE.subn(" ", rest)
    if _FAILED.search(rest):
        return Intent.failed
    if _WORKED.search(rest):
        return Intent.worked
    if remedies or phrases or _HOWTO.search(question):
        return Intent.howto
    return Intent.fact
