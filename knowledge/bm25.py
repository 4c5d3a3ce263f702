"""A small BM25 index over chunk texts, kept as arrays so it can be saved and memory-loaded.

DuckDB's fts extension cannot be installed offline, so lexical ranking lives here. It matters next to
the vectors because engineers ask with exact tokens ("sm_90", "num_warps", "MFMA", "4.8 TB/s") that a
small sentence-embedding model blurs. Postings are one CSR layout (term -> rows, precomputed BM25
weights), so a query over 100,000 chunks costs a few array additions per query term, and the whole
index is four arrays and a term list that `knowledge.index` stores beside the store.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from typing import Optional, Sequence

import numpy as np

_TOKEN = re.compile(r"[a-z0-9]+(?:[._][a-z0-9]+)*")
_STOP = frozenset(
    "a an and are as at be by can do does for from has have how i in is it its my of on or should so "
    "that the this to was what when which why will with you your".split()
)


def _stem(word: str) -> str:
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")) and word.isalpha():
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Lower-case tokens; a compound ("num_warps", "tl.load") also yields its parts."""
    out: list[str] = []
    for tok in _TOKEN.findall(text.lower()):
        if tok in _STOP:
            continue
        out.append(_stem(tok))
        if "_" in tok or "." in tok:
            out.extend(_stem(p) for p in re.split(r"[._]", tok) if p and p not in _STOP and not p.isdigit())
    return out


class BM25Index:
    def __init__(self, texts: Sequence[str] = (), *, k1: float = 1.2, b: float = 0.75) -> None:
        self.n = len(texts)
        postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        lengths = np.zeros(self.n, dtype=np.float32)
        for i, text in enumerate(texts):
            counts = Counter(tokenize(text))
            lengths[i] = sum(counts.values())
            for term, tf in counts.items():
                postings[term].append((i, tf))
        avgdl = float(lengths.mean()) if self.n else 1.0
        norm = k1 * (1.0 - b + b * lengths / max(avgdl, 1e-9))
        self.terms: list[str] = sorted(postings)
        self.offsets = np.zeros(len(self.terms) + 1, dtype=np.int64)
        rows: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        self.idf = np.zeros(len(self.terms), dtype=np.float32)
        for t, term in enumerate(self.terms):
            plist = postings[term]
            idx = np.fromiter((p[0] for p in plist), dtype=np.int32, count=len(plist))
            tf = np.fromiter((p[1] for p in plist), dtype=np.float32, count=len(plist))
            idf = math.log(1.0 + (self.n - len(plist) + 0.5) / (len(plist) + 0.5))
            self.idf[t] = idf
            rows.append(idx)
            weights.append((idf * tf * (k1 + 1.0) / (tf + norm[idx])).astype(np.float32))
            self.offsets[t + 1] = self.offsets[t] + len(plist)
        self.rows = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int32)
        self.weights = np.concatenate(weights) if weights else np.zeros(0, dtype=np.float32)
        self._term_index = {t: i for i, t in enumerate(self.terms)}

    def rows_of(self, term: str) -> np.ndarray:
        """The rows whose text holds `term` (a token as `tokenize` makes it)."""
        t = self._term_index.get(term)
        if t is None:
            return np.zeros(0, dtype=np.int32)
        return self.rows[self.offsets[t] : self.offsets[t + 1]]

    # -- persistence -------------------------------------------------------------------------------
    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "bm25_offsets": self.offsets,
            "bm25_rows": self.rows,
            "bm25_weights": self.weights,
            "bm25_idf": self.idf,
        }

    @classmethod
    def from_arrays(cls, n: int, terms: list[str], arrays) -> "BM25Index":
        index = cls.__new__(cls)
        index.n = n
        index.terms = terms
        index.offsets = arrays["bm25_offsets"]
        index.rows = arrays["bm25_rows"]
        index.weights = arrays["bm25_weights"]
        index.idf = arrays["bm25_idf"]
        index._term_index = {t: i for i, t in enumerate(terms)}
        return index

    # -- queries -----------------------------------------------------------------------------------
    def term_idf(self, term: str) -> float:
        t = self._term_index.get(term)
        return float(self.idf[t]) if t is not None else 0.0

    def scores(self, query: str) -> np.ndarray:
        scores = np.zeros(self.n, dtype=np.float32)
        for term in set(tokenize(query)):
            t = self._term_index.get(term)
            if t is not None:
                s, e = self.offsets[t], self.offsets[t + 1]
                scores[self.rows[s:e]] += self.weights[s:e]
        return scores

    def top(self, query: str, k: int, allowed: Optional[np.ndarray] = None) -> list[tuple[int, float]]:
        """(row index, score) of the best `k` rows with a positive score, restricted to `allowed` rows."""
        if self.n == 0 or k <= 0:
            return []
        scores = self.scores(query)
        if allowed is not None:
            scores[~allowed] = 0.0
        positive = np.flatnonzero(scores > 0)
        if positive.size == 0:
            return []
        if positive.size > k:
            positive = positive[np.argpartition(-scores[positive], k - 1)[:k]]
        order = positive[np.argsort(-scores[positive], kind="stable")]
        return [(int(i), float(scores[i])) for i in order]
