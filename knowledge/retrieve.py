"""Answers: document chunks ranked by relevance, and the past measurements the question's intent wants.

Documents:
1. Parse the question for devices, ops, vendors and dtypes (knowledge.aliases).
2. Filter documents: one written for other devices cannot answer, nor can one from another vendor that
   names no device (an AMD tuning guide does not answer an H100 question); documents of no vendor
   (guidance, constraints) always stay.
3. Score every surviving chunk twice, exactly: cosine similarity to the question's vector over the
   whole index (knowledge.index), and BM25 (exact tokens such as "sm_90" or "num_warps"). Both scores
   exist for every chunk, so fusion never drops a chunk because one ranking did not list it; each is
   scaled to [0, 1] over the candidates and mixed (`VECTOR_WEIGHT`), plus `HEADING_WEIGHT` times the
   share of the passage's own section heading that the question says ("which macros were removed"
   and "Removed macros"). The first chunk of either ranking is among the k returned, unless its
   document is shown already by passages that score above it. A question's identifiers ("tcgen05",
   "dispatch_compute_cap": knowledge.headings) bring in the sections whose heading path names them,
   the few nearest the question for each, though neither ranking listed them (a generated reference
   page whose every chunk says "tcgen05", its text a code signature); scaling stays over the two
   rankings' candidates, and a passage so named gains `IDENTIFIER_WEIGHT`.
4. Facets, per passage (knowledge.facets): a passage is about the asked device when its document's tags
   or its heading path name it, and mentions it when only its section's text does (a section split into
   chunks mentions in each what any of them says); likewise for the asked op, where the op's schedule
   kind also counts ("Row-wise kernels" answers a layernorm question), and where tags on nearly every
   op family make a page about none. A question naming devices of several architectures ("an Ampere
   and a Hopper GPU") is answered by a passage only as far as it covers the one it covers least. When a
   question names an op and a device, every passage that matches both (with relevance of at least
   `FACET_FLOOR`) comes before every passage that matches one, "about" before "mentions"
   (`ABOUT_BONUS`, once for each of the device, the op, and an identifier of the question that the
   passage's heading names), and within one section the chunk that says the facets itself leads. Otherwise
   a small boost for the device or op breaks near-ties only (at most `MAX_BOOST`). A question that
   names a library of the corpus (knowledge.collections: "in CUB", "composable kernel") is about that
   library: its passages (relevance of at least `FACET_FLOOR`) come first, and the device and op lifts
   go to them only, so a shipped page tagged with the asked device no longer outranks the library's
   own page that mentions the device in its text.
5. At most `MAX_PER_DOCUMENT` chunks of one document, unless fewer documents than k can answer at all,
   or the passages over the cap score within `CAP_MARGIN` of the best (the best are in one document).
6. Each hit carries the sentences that matched (`excerpt`), where to read it (file or URL with the
   section's anchor), and who wrote it (a vendor, or the project with its own measurements).

Measurements (knowledge.intent): only a question that names an op gets outcomes. Status and speed are
separate facts: a correctness-only pass (every check passed, speed not measured: a CPU) is "correct,
not timed", never a failure and never a speedup; significance is read from the speedup interval
(`store.records.speed_verdict`: wholly above 1, wholly below 1, or within noise). "What worked" gets
only passed outcomes whose interval lies above 1, fastest first; "what failed" gets failure patterns,
then real failures (correctness, crashes, refusals) and then significant slowdowns; how-to and fact
questions get outcomes ranked passed-first. Each outcome carries its label (`OutcomeHit.verdict`).
Rows imported from another team's store say whose they are, and that this store has not measured them.
Two outcomes that cite the same evaluation with other numbers (one of ours and a team's, or two teams')
are shown together, each naming the other (`OutcomeHit.conflicts_with`), whatever the intent would
have kept: an answer never picks one side of a disagreement silently.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterable, Optional, Sequence

import numpy as np

from knowledge.aliases import (
    DEVICE_ARCH,
    DEVICE_VENDOR,
    canonical_devices,
    model_ops,
    normalize_op,
    op_with_relatives,
    parse_query,
    vendor_of_arch,
)
from knowledge.bm25 import tokenize
from knowledge.errors import RetrievalError
from knowledge.facets import ABOUT, PassageFacets, passage_facets
from knowledge.headings import candidates as heading_candidates
from knowledge.headings import identifiers, names_identifier
from knowledge.index import Corpus, corpus_for, search_vectors
from knowledge.intent import Intent, asks_about_housekeeping, classify
from knowledge.records import AskResult, DocumentHit, FailureHit, OutcomeHit, Provenance, QueryFacets
from store.records import (
    Chunk,
    ChunkKind,
    Document,
    DocumentOrigin,
    FailurePattern,
    OutcomeRecord,
    SpeedVerdict,
    speed_verdict,
)

__all__ = [
    "ask",
    "rank_chunks",
    "rank_outcomes",
    "corpus_for",
    "resolve_facets",
    "load_builtin_if_empty",
    "documents_or_builtin",
    "catalogue",
    "one_connection",
    "Corpus",
]

CANDIDATES = 60
VECTOR_WEIGHT = 0.4  # a plateau from 0.25 to 0.4 on both question sets (MRR 0.926-0.939 third-party, 0.938 shipped); 0.5: 0.901, 0.65: 0.856
DEVICE_BOOST = 0.04
OP_BOOST = 0.03
HEADING_WEIGHT = 0.1  # relevance added for a section heading the question says in full (_heading_cover)
HEADING_PREFIX = 6
# A question's identifiers ("tcgen05", "dispatch_compute_cap": knowledge.headings): the sections whose
# heading path names one join the candidates, the HEADING_CANDIDATES nearest the question for each, and
# a passage so named gains IDENTIFIER_WEIGHT of relevance. On all three question sets, 2 to 20
# candidates and a weight of 0.2 to 0.4 measured alike; 0.5 lost a fixture question ("does num_stages
# above 2 help on MI300X" led with a Triton page whose heading says num_stages) (2026-12-06).
HEADING_CANDIDATES = 5
IDENTIFIER_WEIGHT = 0.3
COLLECTION_BOOST = 0.05  # a passage of a library the question names (knowledge.collections)
COLLECTION_LIFT = 1.0  # ... with relevance of at least FACET_FLOOR: before every passage of elsewhere
MAX_BOOST = DEVICE_BOOST + OP_BOOST  # a relevance lead larger than this can never be overturned
# Chunks shown from one document. 3, not 2: a library's page often has its answer in the third-best
# section (cub::DeviceReduce's "Requesting a guarantee" behind the page's intro and support matrix);
# on the CCCL + CK set MRR went 0.847 -> 0.860, the shipped and fixture sets unchanged (2026-12-06).
MAX_PER_DOCUMENT = 3
# Op-and-device questions: a passage that is about both (its document's tags or its own heading and
# text name the asked device, and the asked op or that op's schedule kind) comes before every passage
# about only one, once its relevance is at least FACET_FLOOR of the [0, 1] scale (a passage that names
# both in passing, about something else, stays where relevance puts it).
FACET_FLOOR = 0.3  # 0.15 to 0.3 measured alike on the CCCL + CK set; 0.5 lost an op-and-device question
BOTH_LIFT = 1.0
# Among those, a passage whose document tags or heading name the device or the op (it is about them)
# ranks above one whose text mentions them in passing, unless relevance differs by more than this.
ABOUT_BONUS = 0.3  # 0.15: "what worked on MI300 for layernorm" led with a tolerance table
# The per-document cap gives way to a passage scoring within CAP_MARGIN of the best one: when the best
# passages are all in one document, they are all shown.
CAP_MARGIN = 0.1
EXCERPT_CHARS = 320


# -- documents -------------------------------------------------------------------------------------


def resolve_facets(
    question: str, corpus: Corpus, device: Optional[str] = None, op: Optional[str] = None
) -> QueryFacets:
    """The question's facets, with an explicit --device/--op taking the place of parsed ones."""
    facets = parse_query(question, extra_devices=corpus.extra_device_names)
    update: dict = {}
    if device:
        devices = canonical_devices(device, corpus.extra_device_names, device_name=True) or (device.strip(),)
        update["devices"] = devices
        update["archs"] = tuple(dict.fromkeys(DEVICE_ARCH[d] for d in devices if d in DEVICE_ARCH))
    if op:
        update["ops"] = (normalize_op(op),)
    return facets.model_copy(update=update) if update else facets


def _asked_vendors(corpus: Corpus, facets: QueryFacets) -> set[str]:
    vendors = set(facets.vendors)
    for d in facets.devices:
        v = DEVICE_VENDOR.get(d) or corpus.device_vendor.get(d.upper())
        if v and v != "generic":
            vendors.add(v)
    return vendors


def _doc_filter(
    corpus: Corpus, facets: QueryFacets, kinds: Optional[set] = None, only_docs: Optional[set[str]] = None
) -> tuple[set[str], set[str], set[str]]:
    """(allowed document ids, those matching the device or vendor, those matching the op)."""
    asked_devices = {d.upper() for d in facets.devices}
    asked_vendors = _asked_vendors(corpus, facets)
    asked_ops = {r for o in facets.ops for r in op_with_relatives(o)}
    allowed, dev_match, op_match = set(), set(), set()
    for doc_id, doc in corpus.documents.items():
        if only_docs is not None and doc_id not in only_docs:
            continue
        if kinds is not None and doc.kind not in kinds:
            continue
        devices = corpus.doc_devices[doc_id]
        vendor = doc.vendor if doc.vendor not in (None, "generic") else None
        if asked_devices and devices:
            if not devices & asked_devices:
                continue
            dev_match.add(doc_id)
        elif vendor and asked_vendors:
            if vendor not in asked_vendors:
                continue  # another vendor's document that names no device: not about this hardware
            if not asked_devices:
                dev_match.add(doc_id)
        if asked_ops and corpus.doc_ops[doc_id] & asked_ops:
            op_match.add(doc_id)
        allowed.add(doc_id)
    return allowed, dev_match, op_match


def _scaled(values: np.ndarray, over: Optional[np.ndarray] = None) -> np.ndarray:
    """Values scaled to [0, 1] by the lowest and highest of those `over` selects (all by default); a
    value outside that range is clipped to it. Where those are all equal, they (and any value as high)
    scale to 1 when positive, the rest to 0."""
    ref = values if over is None else values[over]
    if ref.size == 0:
        return np.zeros_like(values)
    lo, hi = float(ref.min()), float(ref.max())
    if hi - lo < 1e-9:
        return (values >= hi - 1e-9).astype(values.dtype) if hi > 0 else np.zeros_like(values)
    return np.clip((values - lo) / (hi - lo), 0.0, 1.0)


def rank_chunks(
    store,
    corpus: Corpus,
    query: str,
    facets: QueryFacets,
    *,
    k: int,
    kinds: Optional[set] = None,
    only_docs: Optional[set[str]] = None,
    max_per_document: int = MAX_PER_DOCUMENT,
    query_vector=None,
) -> list[DocumentHit]:
    allowed, dev_match, op_match = _doc_filter(corpus, facets, kinds, only_docs)
    if not allowed or not corpus.chunks:
        return []
    mask = corpus.allowed_rows(allowed)
    n = max(CANDIDATES, 4 * k)
    if query_vector is None:
        query_vector = store.embed_query(query)
    vec = search_vectors(corpus, query_vector, mask, n)
    bm_scores = corpus.bm25.scores(query)
    bm_scores[~mask] = 0.0
    bm = [(int(r), float(bm_scores[r])) for r in np.argsort(-bm_scores, kind="stable")[:n] if bm_scores[r] > 0]
    vec_rank = {row: i + 1 for i, (row, _) in enumerate(vec)}
    bm_rank = {row: i + 1 for i, (row, _) in enumerate(bm)}
    ranked_rows = set(vec_rank) | set(bm_rank)
    # Sections whose heading names an identifier of the question, though neither ranking listed them
    # (a generated reference page: the identifier in most of its chunks, a code signature for text).
    idents = identifiers(query, corpus.extra_device_names)
    q = None if query_vector is None else np.asarray(query_vector, dtype=np.float32)
    named_rows = heading_candidates(
        corpus,
        idents,
        mask,
        (lambda rs: corpus.vectors[rs] @ q) if q is not None else (lambda rs: bm_scores[rs]),
        ranked_rows,
        HEADING_CANDIDATES,
    )
    rows = np.array(sorted(ranked_rows | set(named_rows)), dtype=np.int64)
    if rows.size == 0:
        return []
    # Scaled over the two rankings' candidates only: one that the heading brought in changes no other's
    # relevance (below their lowest, it scales to 0).
    listed = np.array([r in ranked_rows for r in rows.tolist()], dtype=bool)
    # Exact scores on both sides for every candidate: no chunk loses for being absent from one list.
    if q is not None:
        cos = corpus.vectors[rows] @ q
        cos = np.where(corpus.has_vector[rows], cos, cos[corpus.has_vector[rows]].min(initial=0.0))
        # Scores, not reciprocal ranks: mixing in RRF (k=10, half weight or all) left the CCCL + CK set
        # where it was and cost the fixture set 3-8 points of hit@1 (a rank hides how far ahead a chunk is).
        relevance = VECTOR_WEIGHT * _scaled(cos, listed) + (1 - VECTOR_WEIGHT) * _scaled(bm_scores[rows], listed)
    else:
        relevance = _scaled(bm_scores[rows], listed)
    named = names_identifier(corpus, rows, idents)
    relevance = relevance + HEADING_WEIGHT * _heading_cover(corpus, query, rows) + IDENTIFIER_WEIGHT * named
    facets_of = passage_facets(corpus, facets, rows, dev_match, op_match)
    # A question that names a library (knowledge.collections) is about its documents: the facet lifts
    # go to passages inside the named collections only, which also get COLLECTION_BOOST among themselves.
    inside = _named_collection_docs(corpus, query)
    boost = np.zeros(rows.size, dtype=np.float64)
    lifted = np.zeros(rows.size, dtype=bool)
    for i, (dev, op, _) in enumerate(facets_of):
        if inside is not None:
            if corpus.chunks[int(rows[i])].document_id not in inside:
                continue
            boost[i] = COLLECTION_LIFT if relevance[i] >= FACET_FLOOR else COLLECTION_BOOST
        boost[i] += DEVICE_BOOST * (dev > 0) + OP_BOOST * (op > 0)
        if facets.devices and facets.ops and dev and op and relevance[i] >= FACET_FLOOR:
            # a heading that names the question's identifier makes the passage about one more thing asked
            boost[i] += BOTH_LIFT + ABOUT_BONUS * ((dev == ABOUT) + (op == ABOUT) + bool(named[i]))
            lifted[i] = True
    score = _mentions_lead_their_section(corpus, rows, relevance + boost, [f.own for f in facets_of], lifted)
    order = np.argsort(-score, kind="stable")
    ranked = [(float(score[i]), int(rows[i])) for i in order]
    leaders = {r for r in (vec[0][0] if vec else None, bm[0][0] if bm else None) if r is not None}
    chosen = _select(corpus, ranked, k, max_per_document, leaders)
    matched = {int(r): f for r, f in zip(rows, facets_of)}
    return [_hit(corpus, row, s, vec_rank.get(row), bm_rank.get(row), matched[row], query) for s, row in chosen]


def _mentions_lead_their_section(
    corpus: Corpus, rows: np.ndarray, score: np.ndarray, own: Sequence[int], lifted: np.ndarray
) -> np.ndarray:
    """Among the lifted chunks of one section, those whose own text says more of the asked device and op
    take the section's best scores, in the same places ("Run examples and tests" lifted for naming
    gfx90a and GEMM leads with its chunk that names gfx90a, not with a sibling that only inherits it).
    The section earned the lift (knowledge.facets); the chunk that says it is what the reader needs."""
    by_section: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for i in np.flatnonzero(lifted).tolist():
        chunk = corpus.chunks[int(rows[i])]
        by_section.setdefault((chunk.document_id, tuple(chunk.heading_path)), []).append(i)
    out = score.copy()
    for members in by_section.values():
        if len({own[i] for i in members}) < 2:
            continue
        places = sorted((float(score[i]) for i in members), reverse=True)
        for i, place in zip(sorted(members, key=lambda i: (-own[i], -score[i])), places):
            out[i] = place
    return out


def _heading_cover(corpus: Corpus, query: str, rows: np.ndarray) -> np.ndarray:
    """How much of each passage's own section heading the question says: the IDF-weighted share of the
    heading's words that are among the question's ("which macros were removed" covers "Removed macros"
    whole, and "ABI breaks" not at all)."""
    asked = set(tokenize(query))
    cache: dict[int, tuple] = corpus.__dict__.setdefault("_heading_terms", {})
    out = np.zeros(rows.size, dtype=np.float64)
    for i, r in enumerate(rows.tolist()):
        terms = cache.get(r)
        if terms is None:
            path = corpus.chunks[r].heading_path
            # the page's own title says which page, not which of its sections: its words count for none
            title = set(tokenize(path[0])) if path else set()
            terms = tuple(t for t in dict.fromkeys(tokenize(path[-1])) if t not in title) if len(path) > 1 else ()
            cache[r] = terms
        if not terms:
            continue
        weights = [corpus.bm25.term_idf(t) for t in terms]
        total = sum(weights)
        if total > 0:
            out[i] = sum(w for t, w in zip(terms, weights) if _said(t, asked)) / total
    return out


def _said(term: str, asked: set[str]) -> bool:
    """A heading word the question says: the same token, or one of the same word family by a shared
    start of at least HEADING_PREFIX letters ("comparing" and "compare", "deterministic" and
    "determinism")."""
    if term in asked:
        return True
    if len(term) < HEADING_PREFIX or not term.isalpha():
        return False
    return any(len(a) >= HEADING_PREFIX and a[:HEADING_PREFIX] == term[:HEADING_PREFIX] for a in asked)


def _named_collection_docs(corpus: Corpus, query: str) -> Optional[set[str]]:
    """The documents of the collections the question names; None when it names none."""
    from knowledge.collections import named

    names = named(query, corpus.collections)
    if not names:
        return None
    return {d for name in names for d in corpus.collections[name]}


def _select(
    corpus: Corpus, ranked: list[tuple[float, int]], k: int, cap: int, leaders: set[int]
) -> list[tuple[float, int]]:
    """Best first, at most `cap` chunks a document, except passages within CAP_MARGIN of the best
    score (when the best passages are all in one document, all of them are shown); backfilled past
    the cap when fewer documents than k have anything; and the first chunk of each ranking kept (in
    place of its own document's weakest chunk when that document is at the cap), unless its document
    is at the cap with passages that all score above it."""
    chosen: list[tuple[float, int]] = []
    skipped: list[tuple[float, int]] = []
    per_doc: dict[str, int] = {}
    best = ranked[0][0] if ranked else 0.0
    for item in ranked:
        doc_id = corpus.chunks[item[1]].document_id
        if per_doc.get(doc_id, 0) >= cap and item[0] < best - CAP_MARGIN:
            skipped.append(item)
            continue
        if len(chosen) < k:
            chosen.append(item)
            per_doc[doc_id] = per_doc.get(doc_id, 0) + 1
    for item in skipped:
        if len(chosen) >= k:
            break
        chosen.append(item)
    chosen.sort(key=lambda t: -t[0])
    for leader in leaders:
        if any(row == leader for _, row in chosen):
            continue
        item = next(i for i in ranked if i[1] == leader)
        doc_id = corpus.chunks[leader].document_id
        replaceable = [i for i, (_, row) in enumerate(chosen) if row not in leaders]
        # A leader whose document is already at the cap takes the place of that document's weakest
        # chunk, so the cap holds and other documents keep their places; where that chunk scores above
        # the leader, the document is shown already by better passages, and the leader stays out.
        same_doc = [i for i in replaceable if corpus.chunks[chosen[i][1]].document_id == doc_id]
        at_cap = sum(corpus.chunks[row].document_id == doc_id for _, row in chosen) >= cap
        if same_doc and at_cap:
            if chosen[same_doc[-1]][0] >= item[0]:
                continue  # its document is shown already, by passages that score above it
            chosen.pop(same_doc[-1])
        elif len(chosen) >= k and replaceable:
            chosen.pop(replaceable[-1])
        chosen.append(item)
        chosen.sort(key=lambda t: -t[0])
    return chosen[:k]


_QUANTITY = re.compile(
    r"\b(how\s+(?:much|many|big|large|fast|wide)|size|capacity|bandwidth|number|count|"
    r"latency|throughput|clock|limit|max(?:imum)?|min(?:imum)?|per|peak)\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z0-9`(\"'])")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")


def _units(body: str) -> list[tuple[str, Optional[str]]]:
    """Pieces an excerpt is made of, in order: sentences of prose (soft-wrapped lines joined), list
    items, table rows (each with its table's header), code blocks whole. (text, table header or None)."""
    units: list[tuple[str, Optional[str]]] = []
    for para in re.split(r"\n\s*\n", body):
        lines = [line for line in para.split("\n") if line.strip()]
        if not lines:
            continue
        if lines[0].startswith("```"):
            units.append((" ".join(para.split()), None))
        elif lines[0].startswith("| "):
            header = lines[0]
            rows = [r for r in lines[1:] if not set(r.replace("|", "").strip()) <= {"-", ":", " "}]
            units.extend((row, header) for row in rows)
        elif all(_LIST_ITEM.match(line) or line.startswith("  ") for line in lines):
            items: list[str] = []
            for line in lines:
                if _LIST_ITEM.match(line) or not items:
                    items.append(line.strip())
                else:
                    items[-1] += " " + line.strip()
            units.extend((item, None) for item in items)
        else:
            text = " ".join(" ".join(lines).split())
            units.extend((sentence, None) for sentence in _SENTENCE_END.split(text) if sentence.strip())
    return units


_HOW = re.compile(r"\bhow\s+(?:much|many|big|large|wide|fast)\s+(.*)", re.IGNORECASE)


def _focus_terms(query: str) -> set[str]:
    """The thing a "how much/many X" question counts: its first word is worth twice the others."""
    m = _HOW.search(query)
    if not m:
        return set()
    tokens = tokenize(m.group(1))
    return set(tokens[:1])


def excerpt(text: str, query: str, idf, limit: int = EXCERPT_CHARS) -> str:
    """The sentence (or table row, under its header) that best matches the query, with the next ones
    while they fit; a long one is windowed around its first match at word boundaries, so a number
    such as "228 KB" is never cut in half."""
    head, _, body = text.partition("\n\n")
    units = _units(body or head)
    if not units:
        return " ".join((body or head).split())[:limit]
    terms = set(tokenize(query))
    wants_number = bool(_QUANTITY.search(query))
    focus = _focus_terms(query)

    def score(unit: str, header: Optional[str]) -> float:
        tokens = set(tokenize(unit))
        found = tokens & terms
        # "HBM" asked, "HBM2e" written: a shared prefix of 3+ letters counts half.
        partial = {t for t in terms - found if len(t) >= 3 and any(u.startswith(t) for u in tokens)}
        s = sum(idf(t) * (2.0 if t in focus else 1.0) for t in found) + 0.5 * sum(idf(t) for t in partial)
        if header:  # a row matches through its header's words too ("LLVM target" of the MI100 row)
            s += 0.5 * sum(idf(t) for t in (set(tokenize(header)) & terms) - found)
        if found and re.search(r"\d", unit):
            s += 1.0 if wants_number else 0.25
        return s

    scores = [score(u, h) for u, h in units]
    best = max(range(len(units)), key=lambda i: (scores[i], -i))
    unit, header = units[best]
    if header is not None:
        shown = f"{header}\n{unit}"
        return shown if len(shown) <= limit else _window(" ".join(shown.split()), terms, limit)
    chosen = [unit]
    j = best + 1
    while j < len(units) and units[j][1] is None and len(" ".join(chosen)) + len(units[j][0]) + 1 <= limit:
        chosen.append(units[j][0])
        j += 1
    joined = " ".join(chosen)
    return joined if len(joined) <= limit else _window(joined, terms, limit)


def _window(text: str, terms: set[str], limit: int) -> str:
    words = text.split(" ")
    hit = next((i for i, w in enumerate(words) if set(tokenize(w)) & terms), 0)
    start = max(0, hit - 8)
    out: list[str] = []
    for w in words[start:]:
        if len(" ".join(out + [w])) > limit - 2:
            break
        out.append(w)
    return ("… " if start else "") + " ".join(out) + (" …" if start + len(out) < len(words) else "")


def location(doc: Document, chunk: Chunk) -> str:
    """Where a reader checks this chunk: the file's URL or path, with the section's anchor."""
    base = doc.source_url or doc.source
    if not chunk.anchor:
        return base
    return f"{base}#{chunk.anchor}"


def _hit(corpus: Corpus, row: int, score: float, vrank, brank, matched: PassageFacets, query: str) -> DocumentHit:
    chunk = corpus.chunks[row]
    doc = corpus.documents[chunk.document_id]
    measurements = None
    if doc.origin is DocumentOrigin.project:
        import json

        measurements = json.loads(doc.metadata_json or "{}").get("measurements")
    return DocumentHit(
        chunk_id=chunk.chunk_id,
        document_id=doc.document_id,
        title=doc.title,
        heading_path=chunk.heading_path,
        kind=chunk.kind,
        text=chunk.text,
        source=doc.source,
        source_url=doc.source_url,
        doc_version=doc.doc_version,
        vendor=doc.vendor,
        devices=doc.devices,
        score=score,
        vector_rank=vrank,
        bm25_rank=brank,
        matched_device=matched.device > 0,
        matched_op=matched.op > 0,
        excerpt=excerpt(chunk.text, query, corpus.bm25.term_idf),
        location=location(doc, chunk),
        origin=doc.origin,
        measurements=measurements,
        imported_from=corpus.imported.get(doc.document_id),
    )


# -- measurements ------------------------------------------------------------------------------------


def _outcome_devices_match(o: OutcomeRecord, asked: set[str]) -> bool:
    named = {d.upper() for d in canonical_devices(o.device_name, device_name=True)}
    return bool(named & asked) if named else True


# Statuses of a candidate that computes the reference: `passed` (and timed, on a GPU) and
# `correctness_only` (passed every check where speed is not measured, a CPU). Neither is a failure.
PASSED_STATUSES = ("passed", "correctness_only")
# What "what failed" lists first, in this order: correctness failures, then crashes, then refusals
# (a cheat the harness rejected); a status not named here comes after them, before the slowdowns.
FAILURE_ORDER = ("incorrect", "compile_error", "crashed", "timed_out", "rejected")


# The interpreter ran out of time with every judged trial right: neither a pass nor a failure.
UNJUDGED_STATUSES = ("not_judged",)


def is_failure(o: OutcomeRecord) -> bool:
    return o.status not in PASSED_STATUSES and o.status not in UNJUDGED_STATUSES


def _measured(o: OutcomeRecord) -> Optional[SpeedVerdict]:
    """The interval's verdict of a passed, timed outcome (None for anything else)."""
    if o.status != "passed" or o.speedup is None:
        return None
    return speed_verdict(o.speedup_low, o.speedup_high)


def significant(o: OutcomeRecord) -> bool:
    """A passed outcome whose speedup interval lies wholly above 1."""
    return _measured(o) is SpeedVerdict.faster


def slower(o: OutcomeRecord) -> bool:
    """A passed outcome whose speedup interval lies wholly below 1: a measured slowdown, not noise."""
    return _measured(o) is SpeedVerdict.slower


def outcome_verdict(o: OutcomeRecord) -> str:
    """How an answer labels what was measured: the failure, "correct, not timed", or the interval's
    verdict (significant speedup, significant slowdown, within noise)."""
    if is_failure(o):
        return f"failed: {o.status}"
    if o.status in UNJUDGED_STATUSES:
        return "not judged (interpreter time)"
    if o.status == "correctness_only" or o.speedup is None:
        return "correct, not timed"
    verdict = speed_verdict(o.speedup_low, o.speedup_high)
    return verdict.value if verdict is not None else "timed, no interval"


def rank_outcomes(outcomes: Iterable[OutcomeRecord]) -> list[OutcomeRecord]:
    """Passed first, then the largest measured speedup, then the newest (unmeasured ones last)."""
    unique = {o.outcome_id: o for o in outcomes}
    return sorted(
        unique.values(),
        key=lambda o: (o.status == "passed", o.speedup is not None, o.speedup or 0.0, o.created_at),
        reverse=True,
    )


def _failure_rank(o: OutcomeRecord) -> int:
    return FAILURE_ORDER.index(o.status) if o.status in FAILURE_ORDER else len(FAILURE_ORDER)


def _newest_first(outcomes: Iterable[OutcomeRecord]) -> list[OutcomeRecord]:
    return sorted(outcomes, key=lambda o: o.created_at, reverse=True)


def _for_intent(outcomes: list[OutcomeRecord], intent: Intent) -> list[OutcomeRecord]:
    unique = list({o.outcome_id: o for o in outcomes}.values())
    if intent is Intent.worked:
        return sorted((o for o in unique if significant(o)), key=lambda o: (o.speedup, o.created_at), reverse=True)
    if intent is Intent.failed:
        # Real failures (correctness, crashes, refusals; newest first within each), then significant
        # slowdowns, worst first. A correctness-only pass and a result within noise are not failures.
        failed = sorted(_newest_first(o for o in unique if is_failure(o)), key=_failure_rank)
        worse = sorted(_newest_first(o for o in unique if slower(o)), key=lambda o: o.speedup or 0.0)
        return failed + worse
    return rank_outcomes(unique)


def search_outcomes(
    store, facets: QueryFacets, *, k: int, fetch: int = 200, intent: Intent = Intent.fact
) -> list[OutcomeRecord]:
    if not facets.ops:
        return []  # a question that names no op or kernel is not asking about measurements
    asked_devices = {d.upper() for d in facets.devices}
    found: list[OutcomeRecord] = []
    for op in facets.ops:
        for arch in facets.archs or (None,):
            found.extend(store.outcomes(op_family=op, arch=arch, limit=fetch))
    if asked_devices:
        found = [o for o in found if _outcome_devices_match(o, asked_devices)]
        if not facets.archs:  # devices the alias table does not know: match by name only
            found = [o for o in found if any(d in o.device_name.upper() for d in asked_devices)]
    elif facets.vendors:
        found = [o for o in found if vendor_of_arch(o.arch) in facets.vendors]
    if facets.dtypes:
        found = [o for o in found if o.dtype in facets.dtypes]
    return _for_intent(found, intent)[:k]


def search_failures(store, facets: QueryFacets, *, k: int) -> list[FailurePattern]:
    if not facets.ops:
        return []
    found: dict[str, FailurePattern] = {}
    for op in facets.ops:
        for arch in facets.archs or (None,):
            for f in store.failure_patterns(op_family=op, arch=arch, limit=k):
                found.setdefault(f.signature, f)
    return sorted(found.values(), key=lambda f: (f.count, f.last_seen), reverse=True)[:k]


def _numbers(o: OutcomeRecord) -> tuple:
    return (o.status, o.speedup, o.speedup_low, o.speedup_high, o.latency_ms_p50)


def with_disagreements(store, outcomes: list[OutcomeRecord]) -> tuple[list[OutcomeRecord], dict[str, tuple[str, ...]]]:
    """The outcomes, each followed by the rows that cite one of its evaluations with other numbers (when
    not already in the list), and {outcome id: the ids it disagrees with} over that list."""
    citing = store.outcomes_citing([e for o in outcomes for e in o.evidence_eval_ids])
    if not citing:
        return outcomes, {}

    def disagree(a: OutcomeRecord, b: OutcomeRecord) -> bool:
        return (
            a.outcome_id != b.outcome_id
            and bool(set(a.evidence_eval_ids) & set(b.evidence_eval_ids))
            and _numbers(a) != _numbers(b)
        )

    shown: list[OutcomeRecord] = []
    seen = {o.outcome_id for o in outcomes}
    for o in outcomes:
        shown.append(o)
        for other in citing:
            if other.outcome_id not in seen and disagree(o, other):
                shown.append(other)
                seen.add(other.outcome_id)
    conflicts = {
        o.outcome_id: tuple(p.outcome_id for p in shown if disagree(o, p))
        for o in shown
        if any(disagree(o, p) for p in shown)
    }
    return shown, conflicts


def _provenance(store, table: str, ids: Sequence[str]) -> dict[str, Provenance]:
    return {row_id: Provenance(**row) for row_id, row in store.origins_of(table, ids).items()}


# -- the answer --------------------------------------------------------------------------------------


def one_connection(store):
    """Hold one DuckDB connection for the few reads of one answer (each open costs ~20-30 ms)."""
    session = getattr(store, "session", None)
    return session() if session is not None else contextlib.nullcontext()


def load_builtin_if_empty(store, on_file=None, on_chunks=None) -> list[Document]:
    """The store's documents; a store with none gets the shipped hwdocs first (a new $KSCOUT_HOME)."""
    documents = store.documents()
    if not documents:
        from knowledge.ingest import ingest_builtin

        ingest_builtin(store, on_file, on_chunks)
        documents = store.documents()
    return documents


documents_or_builtin = load_builtin_if_empty


def catalogue(documents: Sequence[Document]) -> tuple[dict[str, int], dict[str, int]]:
    """Vendors and devices the documents cover, with how many documents each (most first)."""
    vendors: dict[str, int] = {}
    devices: dict[str, int] = {}
    shown: dict[str, str] = {}
    for d in documents:
        if d.vendor:
            vendors[d.vendor] = vendors.get(d.vendor, 0) + 1
        for name in d.devices:
            key = name.upper()
            shown.setdefault(key, name)
            devices[key] = devices.get(key, 0) + 1
    by_count = lambda items: dict(sorted(items, key=lambda t: (-t[1], t[0].lower())))  # noqa: E731
    return by_count(vendors.items()), by_count((shown[k], n) for k, n in devices.items())


def ask(store, question: str, *, device: Optional[str] = None, op: Optional[str] = None, k: int = 5) -> AskResult:
    """The document chunks and measurements that answer `question` (loads the shipped hwdocs if empty)."""
    if not question or not question.strip():
        raise RetrievalError("the question is empty")
    if k < 1:
        raise RetrievalError(f"--k must be at least 1, got {k}")
    from store.minilm import one_blas_thread

    # One DuckDB open for every read of the answer (each costs 20-100 ms); one BLAS thread for its tiny
    # matrix products (two threads contending with other processes cost seconds, not milliseconds).
    with one_connection(store), one_blas_thread():
        documents = store.documents() or load_builtin_if_empty(store)
        corpus = corpus_for(store, documents)
        corpus.imported = _provenance(store, "documents", list(corpus.documents))
        facets = resolve_facets(question, corpus, device, op)
        # a model optimized here (`kscout optimize-model`), named in the question: its measurements
        # answer it; documents are not about one user's model, so their ranking keeps the plain facets
        models = () if op else model_ops(question, store.model_families())
        measured = facets.model_copy(update={"ops": facets.ops + models}) if models else facets
        intent = classify(question)
        # Licence and build files answer only questions about a licence or a build (knowledge.intent).
        kinds = None if asks_about_housekeeping(question) else set(ChunkKind) - {ChunkKind.housekeeping}
        hits = rank_chunks(store, corpus, question, facets, k=k, kinds=kinds)
        outcomes, conflicts = with_disagreements(store, search_outcomes(store, measured, k=k, intent=intent))
        failures = search_failures(store, measured, k=k) if intent is Intent.failed else []
        o_prov = _provenance(store, "outcomes", [o.outcome_id for o in outcomes])
        f_prov = _provenance(store, "failure_patterns", [f.signature for f in failures])
    return AskResult(
        facets=measured,
        intent=intent.value,
        outcomes=tuple(outcomes),
        documents=tuple(hits),
        failures=tuple(failures),
        outcome_hits=tuple(
            OutcomeHit(
                outcome=o,
                significant=_measured(o) in (SpeedVerdict.faster, SpeedVerdict.slower),
                verdict=outcome_verdict(o),
                imported_from=o_prov.get(o.outcome_id),
                conflicts_with=conflicts.get(o.outcome_id, ()),
            )
            for o in outcomes
        ),
        failure_hits=tuple(FailureHit(failure=f, imported_from=f_prov.get(f.signature)) for f in failures),
    )
