"""Passage facets: how much a passage is about the question's device and op.

Each facet of a passage has a level: ABOUT (its document's tags, or its heading path, name it), MENTIONS
(only its section's text does) or NONE. For the op, naming the op's schedule kind counts as naming the
op ("Row-wise kernels" for a layernorm question, "mma" for a matmul one). `knowledge.retrieve` lifts
passages by these levels; three rules keep a lift honest:

- The section is what mentions something, not the chunk: a long section is split into chunks for size
  only, so "Determinism guarantees" that says "an Ampere or a Hopper GPU" in its first chunk and
  "reduction" in its second mentions both in each. `PassageFacets.own` counts the facets, among those
  only mentioned, that the chunk's own text says (retrieve lets that chunk lead its section).
- A question that names devices of several architectures ("on an Ampere and a Hopper GPU") asks about
  each: a passage is about the devices only as much as it is about the architecture it covers least. A
  page tagged H100 that never names an Ampere part does not answer a question about both.
- A document tagged with nearly every op family (`GENERIC_TAGS_SHARE`: accumulation precision, masked
  tails, tolerances) applies to every op and is about none of them: its tags do not make its passages
  about the asked op, though its headings and text still can.
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple, Optional

import numpy as np

from knowledge.aliases import (
    DEVICE_ARCH,
    OP_FAMILIES,
    OP_SCHEDULE,
    canonical_devices,
    canonical_ops,
    op_with_relatives,
    schedule_kinds,
)
from knowledge.index import Corpus
from knowledge.records import QueryFacets

NONE, MENTIONS, ABOUT = 0, 1, 2
# Op tags on at least this share of the known op families say a page applies to every op, not that it
# is about one: the shipped constraint pages tagged with 8 and 10 of the 11 families. A library page
# about row-wise kernels (7 of 11, all one schedule kind) stays specific.
GENERIC_TAGS_SHARE = 0.7


class PassageFacets(NamedTuple):
    device: int  # NONE, MENTIONS or ABOUT
    op: int
    own: int  # how many of the facets at MENTIONS the chunk's own text says (0, 1 or 2)


class Named(NamedTuple):
    devices: frozenset[str]
    ops: frozenset[str]
    kinds: frozenset[str]

    def __or__(self, other: "Named") -> "Named":
        return Named(self.devices | other.devices, self.ops | other.ops, self.kinds | other.kinds)


def named(corpus: Corpus, text: str) -> Named:
    """The devices (upper case), op families and schedule kinds a text names."""
    ops = frozenset(canonical_ops(text))
    return Named(
        frozenset(d.upper() for d in canonical_devices(text, corpus.extra_device_names)),
        ops,
        schedule_kinds(text, ops),
    )


def architecture_groups(facets: QueryFacets) -> list[frozenset[str]]:
    """The asked devices (upper case) grouped by architecture: "Hopper" (H100, H200) is one group,
    "an Ampere and a Hopper GPU" two. A device the alias table does not know is its own group."""
    groups: dict[str, set[str]] = defaultdict(set)
    for d in facets.devices:
        groups[DEVICE_ARCH.get(d, d.upper())].add(d.upper())
    return [frozenset(g) for g in groups.values()]


def generic_op_tags(op_tags: frozenset[str]) -> bool:
    """Whether a document's op tags cover so many families that they single out none."""
    return len(op_tags & set(OP_FAMILIES)) >= GENERIC_TAGS_SHARE * len(OP_FAMILIES)


def _cached(corpus: Corpus, name: str) -> dict:
    return corpus.__dict__.setdefault(name, {})


def sections(corpus: Corpus) -> dict[tuple[str, tuple[str, ...]], list[int]]:
    """(document id, heading path) -> the rows of that section's chunks, once per corpus."""
    found = corpus.__dict__.get("_sections")
    if found is None:
        found = defaultdict(list)
        for row, chunk in enumerate(corpus.chunks):
            found[(chunk.document_id, tuple(chunk.heading_path))].append(row)
        corpus.__dict__["_sections"] = found = dict(found)
    return found


def _text_named(corpus: Corpus, row: int) -> Named:
    cache = _cached(corpus, "_text_named")
    if row not in cache:
        cache[row] = named(corpus, corpus.chunks[row].text)
    return cache[row]


def _heading_named(corpus: Corpus, row: int) -> Named:
    cache = _cached(corpus, "_heading_named")
    if row not in cache:
        cache[row] = named(corpus, " > ".join(corpus.chunks[row].heading_path))
    return cache[row]


def _section_named(corpus: Corpus, row: int) -> Named:
    chunk = corpus.chunks[row]
    key = (chunk.document_id, tuple(chunk.heading_path))
    cache = _cached(corpus, "_section_named")
    if key not in cache:
        union = Named(frozenset(), frozenset(), frozenset())
        for r in sections(corpus).get(key, [row]):
            union = union | _text_named(corpus, r)
        cache[key] = union
    return cache[key]


def passage_facets(
    corpus: Corpus, facets: QueryFacets, rows: np.ndarray, dev_match: set[str], op_match: set[str]
) -> list[PassageFacets]:
    """Each row's levels for the asked device and op (see the module doc). `dev_match` and `op_match` are
    the documents whose tags (or, for a question naming a vendor and no device, whose vendor) match."""
    groups = architecture_groups(facets)
    asked_devices = {d.upper() for d in facets.devices}
    asked_ops = {r for o in facets.ops for r in op_with_relatives(o)}
    asked_kinds = {OP_SCHEDULE[o] for o in asked_ops if o in OP_SCHEDULE}
    out: list[PassageFacets] = []
    for r in rows.tolist():
        doc_id = corpus.chunks[r].document_id
        if not (asked_devices or asked_ops):
            # a question naming a vendor only: its documents mention the hardware, no device is asked
            out.append(PassageFacets(MENTIONS if doc_id in dev_match else NONE, NONE, 0))
            continue
        heading, own_text = _heading_named(corpus, r), _text_named(corpus, r)
        section: Optional[Named] = None  # read only where the chunk's own text falls short
        own = 0
        if asked_devices:
            about = corpus.doc_devices[doc_id] | heading.devices
            levels = []
            for g in groups:
                if about & g:
                    levels.append(ABOUT)
                elif own_text.devices & g:
                    levels.append(MENTIONS)
                else:
                    section = section if section is not None else _section_named(corpus, r)
                    levels.append(MENTIONS if section.devices & g else NONE)
            device = min(levels)
            own += device == MENTIONS and bool(own_text.devices & asked_devices)
        else:
            device = ABOUT if doc_id in dev_match else NONE
        tagged = doc_id in op_match and not generic_op_tags(corpus.doc_ops[doc_id])
        if tagged or heading.ops & asked_ops or heading.kinds & asked_kinds:
            op = ABOUT
        elif own_text.ops & asked_ops or own_text.kinds & asked_kinds:
            op, own = MENTIONS, own + 1
        else:
            section = section if section is not None else _section_named(corpus, r)
            op = MENTIONS if (section.ops & asked_ops or section.kinds & asked_kinds) else NONE
        out.append(PassageFacets(device, op, own))
    return out
