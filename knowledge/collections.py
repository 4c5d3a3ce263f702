"""Collections: the libraries and projects a corpus is organised into, as its own folders name them.

A question that names a library ("how should I tune a reduction for Hopper in CUB", "row-wise softmax in
composable kernel on MI250") is asking about that library's documents. Without this, a passage of a
shipped hardware page tagged with the asked device and op outranks the library's own page, which only
mentions the device in its text: the op-and-device lift cannot tell them apart.

A collection is a folder of the documents' locations (the `source_url` when there is one, else the file
path), derived from the corpus, never from a list of library names:
- only folders, never a file's own name (a page is not a collection), holding at least two documents;
- not a folder every ingested document sits under ("docs", a checkout's root, a commit), nor one named
  like a vendor ("nvidia", "rocm": a vendor is a facet of its own);
- a folder counts only when its name is concentrated: its own documents' text says it (the words of
  "composable_kernel" as "Composable Kernel"), and of all the passages that say it, at least half are
  in that folder's documents. "cub" and "thrust" are; "compute", "reference", "how-to" are words that
  every part of a corpus uses, and a question using them names nothing; "latest" or "en" are a site's
  path that no text says.

A question names a collection when its words include the one-word folder name, or hold a folder's
several words one after the other ("composable kernel" names composable_kernel).
`knowledge.retrieve` then lifts only the passages inside the named collections.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable, Mapping, Sequence
from urllib.parse import urlparse

from knowledge.bm25 import BM25Index, tokenize

MIN_DOCUMENTS = 2
CONCENTRATION = 0.5
_HEXISH = re.compile(r"^[0-9a-f]{7,}$")


def _compact(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def folders(location: str) -> list[str]:
    """The folder names of a document's location, outermost first, without the file's own name."""
    parsed = urlparse(location)
    path = parsed.path if parsed.scheme in ("http", "https", "file") else location
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    return [p.lower() for p in parts[:-1] if not _HEXISH.match(p.lower())]


def derive(
    documents: Mapping[str, object],
    chunks: Sequence[object],
    bm25: BM25Index,
    is_vendor_name,
) -> dict[str, frozenset[str]]:
    """Collection name -> the ids of its documents (see the module's rules). `chunks[i]` is BM25 row i
    (its `document_id` and `text`); `is_vendor_name(name)` says whether a folder is named like a vendor."""
    members: dict[str, set[str]] = defaultdict(set)
    located = 0
    for doc_id, doc in documents.items():
        if getattr(doc, "builtin", False):
            continue  # shipped pages: one flat folder of the package, not a library of the user's
        location = getattr(doc, "source_url", None) or getattr(doc, "source", "") or ""
        names = set(folders(location))
        if names:
            located += 1
        for name in names:
            members[name].add(doc_id)
    out: dict[str, frozenset[str]] = {}
    for name, docs in members.items():
        if len(docs) < MIN_DOCUMENTS or len(docs) >= located or len(_compact(name)) < 3 or is_vendor_name(name):
            continue
        if _concentrated(name, docs, chunks, bm25):
            out[name] = frozenset(docs)
    return out


def _concentrated(name: str, docs: set[str], chunks: Sequence[object], bm25: BM25Index) -> bool:
    """The folder's name is said in its own documents' text, and at least CONCENTRATION of the passages
    that say it are there. A name no text says is a site's path ("latest", "en"), not a library's."""
    parts = _words(name)
    if len(parts) == 1:
        rows = bm25.rows_of(parts[0]).tolist()
    else:
        phrase = re.compile(
            r"\b" + r"[\s_\-]+".join(re.escape(p) for p in re.split(r"[^a-z0-9]+", name) if p) + r"s?\b"
        )
        # only passages holding every word can hold the phrase: the postings narrow the scan
        holding = set(bm25.rows_of(parts[0]).tolist())
        for part in parts[1:]:
            holding &= set(bm25.rows_of(part).tolist())
        rows = [i for i in sorted(holding) if phrase.search(getattr(chunks[i], "text", "").lower())]
    if not rows:
        return False
    inside = sum(1 for r in rows if getattr(chunks[r], "document_id", None) in docs)
    return inside > 0 and inside / len(rows) >= CONCENTRATION


def _stem_of(name: str) -> str:
    toks = tokenize(name)
    return toks[0] if toks else name


def _words(text: str) -> list[str]:
    return [_stem_of(w) for w in re.split(r"[^a-z0-9]+", text.lower()) if w]


def named(question: str, collections: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
    """The collections a question names, in name order: a one-word folder among the question's words, a
    folder of several words as consecutive words of the question ("composable kernel")."""
    tokens = set(tokenize(question))
    words = _words(question)
    found = []
    for name in sorted(collections):
        parts = _words(name)
        if len(parts) == 1:
            hit = parts[0] in tokens
        else:
            n = len(parts)
            hit = any(words[i : i + n] == parts for i in range(len(words) - n + 1))
        if hit:
            found.append(name)
    return tuple(found)
