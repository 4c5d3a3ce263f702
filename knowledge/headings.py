"""Section headings that name the question's identifiers: candidates and evidence for `knowledge.retrieve`.

A question that names a code identifier ("tcgen05", "barrier_expect_tx", "cuda.compute") asks about the
thing of that name, and the sections written about it carry the name in their heading path (the page
title "tcgen05.mma", the section "dispatch_compute_cap"). The two rankings can both miss them:
- BM25 weighs a term by how many chunks hold it, and a family of generated reference pages (every
  variant of every tcgen05 instruction a section of its own) puts "tcgen05" in 793 of 3,451 chunks of
  the CCCL + CK corpus, in 13 of its 361 documents: it weighs less than "memory";
- such a section's text is a code signature, which a sentence-embedding model puts far from a question
  asked in words (the top 60 by vector were `cp_async_bulk_tensor` variants).
So, for each identifier, the few sections whose heading path holds it and whose text is nearest the
question join the candidates (`candidates`), and retrieve treats a passage whose heading names one as
about it (`names_identifier`): a relevance bonus, and in an op-and-device question one more facet it is
about. A body that only mentions the identifier gets neither: it is what the lexical ranking already
counts.

An identifier is a token of the question that has a letter and a digit, or joins words with "." or "_"
("num_warps", "cp.async"), and names no device, architecture, data type, op or vendor. Those are facets,
with rules of their own (knowledge.facets): counting "MI300X", "bf16" or "H100" again as identifiers
cost two of the fixture set's first places (hit@1 0.838 -> 0.784) and put an op-and-device question
of the CCCL + CK set out of the top 5.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, Sequence

import numpy as np

from knowledge.aliases import parse_query
from knowledge.bm25 import tokenize
from knowledge.index import Corpus

_CODE_LIKE = re.compile(r"[._]|[a-z].*\d|\d.*[a-z]")


def identifiers(question: str, extra_devices: Sequence[str] = ()) -> tuple[str, ...]:
    """The question's code-like tokens that are no facet, in question order ("tcgen05" of "matrix
    multiply with tcgen05 tensor memory on Blackwell"; nothing of "bf16 data on sm_90")."""
    found = []
    for token in dict.fromkeys(tokenize(question)):
        if not _CODE_LIKE.search(token):
            continue
        facets = parse_query(token, extra_devices=extra_devices)
        if facets.devices or facets.archs or facets.dtypes or facets.ops or facets.vendors:
            continue
        found.append(token)
    return tuple(found)


def heading_terms(corpus: Corpus, row: int) -> frozenset[str]:
    """The tokens of a chunk's heading path, title included (one set per distinct path)."""
    cache: dict = corpus.__dict__.setdefault("_heading_path_terms", {})
    path = tuple(corpus.chunks[row].heading_path)
    terms = cache.get(path)
    if terms is None:
        terms = cache[path] = frozenset(tokenize(" ".join(path)))
    return terms


def rows_naming(corpus: Corpus, term: str) -> np.ndarray:
    """The rows whose heading path holds `term`. A chunk's text starts with its heading path, so the
    term's BM25 postings hold them all; only those are read."""
    cache: dict = corpus.__dict__.setdefault("_rows_naming", {})
    rows = cache.get(term)
    if rows is None:
        posted = corpus.bm25.rows_of(term).tolist()
        rows = cache[term] = np.array([r for r in posted if term in heading_terms(corpus, r)], dtype=np.int64)
    return rows


def candidates(
    corpus: Corpus,
    idents: Iterable[str],
    allowed: np.ndarray,
    nearness: Callable[[np.ndarray], np.ndarray],
    taken: set[int],
    per_identifier: int,
) -> list[int]:
    """For each identifier, the `per_identifier` allowed rows that its heading names and that are not
    `taken` already, nearest the question first (`nearness(rows)`: cosine similarity, or BM25 where
    there are no vectors)."""
    added: list[int] = []
    seen = set(taken)
    for term in idents:
        rows = rows_naming(corpus, term)
        rows = rows[allowed[rows]] if rows.size else rows
        if not rows.size:
            continue
        n = 0
        for r in rows[np.argsort(-nearness(rows), kind="stable")].tolist():
            if n >= per_identifier:
                break
            if r not in seen:
                seen.add(r)
                added.append(r)
                n += 1
    return added


def names_identifier(corpus: Corpus, rows: np.ndarray, idents: Sequence[str]) -> np.ndarray:
    """Whether each row's heading path holds one of the identifiers."""
    out = np.zeros(rows.size, dtype=bool)
    if idents:
        for i, r in enumerate(rows.tolist()):
            terms = heading_terms(corpus, r)
            out[i] = any(t in terms for t in idents)
    return out
