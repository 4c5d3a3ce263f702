"""Names engineers use for devices, op families, vendors and dtypes, mapped to one canonical form.

Engineers write "MI300", "Hopper", "sm_90", "LN", "GEMM"; documents list "H100 SXM" and outcomes say
"NVIDIA H100 80GB HBM3". Retrieval filters and boosts only work if all of them meet on the same
canonical names, so every comparison in this package goes through `parse_query`/`canonical_devices`.

Patterns are matched case-insensitively at word boundaries, longest first, and each matched span is
consumed so "log softmax" is not also read as "softmax". "LN" and "CE" are matched only in capitals:
in lower case they are a logarithm and a syllable far more often than a layer norm or a loss.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from knowledge.records import QueryFacets

_B = r"(?<![a-z0-9])"  # left word boundary that treats "_" and "-" as separators
_E = r"(?![a-z0-9])"

# (pattern, canonical devices). Order matters only for overlapping spans: specific before generic.
_DEVICE_PATTERNS: list[tuple[str, tuple[str, ...]]] = [
    (r"gh200", ("H200", "H100")),
    (r"gh100|h100(?:[\s-]?(?:sxm5?|pcie|nvl))?", ("H100",)),
    (r"h200(?:[\s-]?(?:sxm|nvl))?", ("H200",)),
    (r"hopper", ("H100", "H200")),
    (r"sm_?90a?", ("H100", "H200")),
    (r"a100(?:[\s-]?(?:sxm4?|pcie))?", ("A100",)),
    (r"ampere", ("A100",)),
    (r"sm_?80", ("A100",)),
    (r"gb200|b200|b100", ("B200",)),
    (r"blackwell", ("B200",)),
    (r"sm_?100a?", ("B200",)),
    (r"mi300x", ("MI300X",)),
    (r"mi300a", ("MI300A",)),
    (r"mi300", ("MI300X", "MI300A")),
    (r"gfx942|cdna[\s-]?3", ("MI300X", "MI300A")),
    (r"mi250x?|mi210|gfx90a|cdna[\s-]?2", ("MI250X",)),
    (r"mtia(?:[\s-]?(?:v[12]|2i|t?[12]))?", ("MTIA",)),
    (r"epyc|xeon|genoa|sapphire[\s-]rapids|x86(?:[_-]64)?", ("x86 CPU",)),
    # "on the CPU", "CPU kernels": the device. Not the host side of a GPU run: "CPU launch overhead",
    # "CPU-side", "CPU time", "host CPU" are about what the CPU costs a GPU kernel.
    (
        r"(?<!host\s)(?<!host-)cpus?(?![\s-]+(?:launch(?:es|ing)?|overheads?|side|time|timings?|bound|threads?|"
        r"dispatch|latenc(?:y|ies)|usage|utili[sz]ation|wall|cost))",
        ("x86 CPU",),
    ),
]

# Device names that only a device *name* (a fingerprint's, not a question) may resolve: there, "cpu"
# names the device whatever follows it.
_DEVICE_NAME_ONLY: list[tuple[str, tuple[str, ...]]] = [(r"cpu", ("x86 CPU",))]

DEVICE_ARCH: dict[str, str] = {
    "H100": "sm_90",
    "H200": "sm_90",
    "A100": "sm_80",
    "B200": "sm_100",
    "MI300X": "gfx942",
    "MI300A": "gfx942",
    "MI250X": "gfx90a",
    "MTIA": "mtia",
    "x86 CPU": "cpu",
}

DEVICE_VENDOR: dict[str, str] = {
    "H100": "nvidia",
    "H200": "nvidia",
    "A100": "nvidia",
    "B200": "nvidia",
    "MI300X": "amd",
    "MI300A": "amd",
    "MI250X": "amd",
    "MTIA": "meta",
    "x86 CPU": "generic",
}

OP_FAMILIES: tuple[str, ...] = (
    "layernorm",
    "rmsnorm",
    "add_rmsnorm",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "swiglu",
    "geglu",
    "row_sum",
    "matmul_epilogue",
    "attention",
)

# (pattern, ops, case_sensitive)
_OP_PATTERNS: list[tuple[str, tuple[str, ...], bool]] = [
    (
        r"(?:fused[\s_-]?)?add[\s_+-]*rms[\s_-]?norm|residual[\s_-]*(?:\+|add|and)[\s_-]*rms[\s_-]?norm",
        ("add_rmsnorm",),
        False,
    ),
    (r"layer[\s_-]?norm(?:alization)?s?", ("layernorm",), False),
    (r"LN", ("layernorm",), True),
    (r"rms[\s_-]?norm(?:alization)?s?|root[\s-]mean[\s-]square[\s-]norm(?:alization)?", ("rmsnorm",), False),
    (r"log[\s_-]?softmax", ("log_softmax",), False),
    (r"logsumexp|log[\s-]sum[\s-]exp", ("softmax", "log_softmax", "cross_entropy"), False),
    (r"softmax(?:es)?", ("softmax",), False),
    (r"cross[\s_-]?entropy|xent|nll(?:[\s_]?loss)?", ("cross_entropy",), False),
    (r"CE", ("cross_entropy",), True),
    (r"swi[\s_-]?glu|silu[\s_-]?gat(?:e|ed|ing)|swish|silu", ("swiglu",), False),
    (r"ge[\s_-]?glu|gelu", ("geglu",), False),
    (r"gated[\s-]activations?", ("swiglu", "geglu"), False),
    (r"row[\s_-]?(?:wise[\s_-])?sums?|reductions?", ("row_sum",), False),
    (r"mat[\s_-]?muls?|gemms?|linear|matrix[\s-]multipl\w*|tl\.dot", ("matmul_epilogue",), False),
    (r"(?:flash[\s_-]?|self[\s_-]?|causal[\s_-]?)?attention|sdpa|scaled[\s_-]dot[\s_-]product", ("attention",), False),
]

# Ops whose constraints and outcomes also apply to a family (an add+rmsnorm is an rmsnorm too).
OP_RELATIVES: dict[str, tuple[str, ...]] = {
    "add_rmsnorm": ("rmsnorm",),
    "rmsnorm": ("add_rmsnorm",),
    "log_softmax": ("softmax",),
    "cross_entropy": ("softmax", "log_softmax"),
    "softmax": ("log_softmax",),
    "geglu": ("swiglu",),
    "swiglu": ("geglu",),
    "attention": ("softmax",),  # its softmax rows take the softmax's constraints (subtract the row max)
}

# How each op family is scheduled (the design's schedule kinds): a norm, a softmax or a row sum is a
# row-wise kernel, a matmul a contraction, a gated activation pointwise. A passage on a device's row-wise
# kernels answers a layernorm question about that device though it never names a norm.
OP_SCHEDULE: dict[str, str] = {
    "layernorm": "rowwise",
    "rmsnorm": "rowwise",
    "add_rmsnorm": "rowwise",
    "softmax": "rowwise",
    "log_softmax": "rowwise",
    "cross_entropy": "rowwise",
    "row_sum": "rowwise",
    "matmul_epilogue": "contraction",
    "attention": "contraction",
    "swiglu": "pointwise",
    "geglu": "pointwise",
}

# Words that name a schedule kind without naming an op family.
_SCHEDULE_PATTERNS: list[tuple[str, str]] = [
    (
        r"row[\s_-]?wise|per[\s-]row|rows?[\s_-]per[\s_-]program|one[\s-]row|norms?|normali[sz]ations?|"
        r"(?:cross[\s-](?:lane|warp|wavefront)[\s-])?reduc(?:e|es|ing|tions?)",
        "rowwise",
    ),
    (r"contractions?|mfma|wgmma|mma|tensor[\s-]cores?|matrix[\s-]cores?", "contraction"),
    (r"element[\s_-]?wise|point[\s_-]?wise|activations?", "pointwise"),
]

_VENDOR_PATTERNS: list[tuple[str, str]] = [
    (r"nvidia|cuda|ptx", "nvidia"),
    (r"amd|rocm|hip|instinct", "amd"),
    # Plain "meta" is mostly Triton's meta-parameters; only the possessive names the company.
    (r"meta['’]s|facebook", "meta"),
    (r"intel", "intel"),
]

_DTYPE_PATTERNS: list[tuple[str, str]] = [
    (r"bf16|bfloat16", "bfloat16"),
    (r"fp16|float16", "float16"),
    (r"tf32", "tf32"),
    (r"fp32|float32", "float32"),
    (r"fp64|float64", "float64"),
    (r"fp8|float8|e4m3|e5m2", "float8"),
    (r"nvfp4|mxfp4|fp4", "float4"),
]


def _compile(pattern: str, case_sensitive: bool = False) -> re.Pattern[str]:
    if case_sensitive:
        return re.compile(r"(?<![A-Za-z0-9])(?:" + pattern + r")(?![A-Za-z0-9])")
    return re.compile(_B + "(?:" + pattern + ")" + _E, re.IGNORECASE)


_DEVICES = [(_compile(p), d) for p, d in _DEVICE_PATTERNS]
_DEVICES_NAME_ONLY = [(_compile(p), d) for p, d in _DEVICE_NAME_ONLY]
_OPS = [(_compile(p, cs), o) for p, o, cs in _OP_PATTERNS]
_VENDORS = [(_compile(p), v) for p, v in _VENDOR_PATTERNS]
_SCHEDULES = [(_compile(p), k) for p, k in _SCHEDULE_PATTERNS]
_DTYPES = [(_compile(p), d) for p, d in _DTYPE_PATTERNS]


def _scan(text: str, table: list) -> list:
    """Values of every pattern that matches, consuming spans so overlaps count once, in table order."""
    taken: list[tuple[int, int]] = []
    found: list = []
    for rx, value in table:
        for m in rx.finditer(text):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            taken.append((m.start(), m.end()))
            items = value if isinstance(value, tuple) else (value,)
            for item in items:
                if item not in found:
                    found.append(item)
    return found


def canonical_devices(text: str, extra_names: Iterable[str] = (), *, device_name: bool = False) -> tuple[str, ...]:
    """Canonical devices named in `text`.

    `extra_names` are device names from ingested documents that the table does not know (a user's
    "MI355X"): they match literally and stand for themselves. `device_name=True` also reads "cpu"
    where a question would not ("cpu launch overhead" is about a GPU run), which is right for a
    fingerprint's device name.
    """
    table = _DEVICES + (_DEVICES_NAME_ONLY if device_name else [])
    found = _scan(text, table)
    for name in extra_names:
        name = name.strip()
        if not name or canonical_devices_known(name):
            continue
        if _compile(re.escape(name)).search(text) and name.upper() not in {f.upper() for f in found}:
            found.append(name)
    return tuple(found)


def canonical_devices_known(name: str) -> bool:
    return bool(_scan(name, _DEVICES + _DEVICES_NAME_ONLY))


def document_devices(devices: Iterable[str]) -> frozenset[str]:
    """The canonical devices a document's `devices` list covers, in upper case for comparison."""
    out: set[str] = set()
    for d in devices:
        known = _scan(d, _DEVICES + _DEVICES_NAME_ONLY)
        out.update(x.upper() for x in (known or [d.strip()]) if x)
    return frozenset(out)


def canonical_ops(text: str) -> tuple[str, ...]:
    """Op families named in `text` (the patterns also match the canonical names, "matmul_epilogue")."""
    return tuple(_scan(text, _OPS))


def normalize_op(op: str) -> str:
    """One canonical family for a user's --op value, or the value itself lowercased if unknown."""
    ops = canonical_ops(op)
    return ops[0] if ops else op.strip().lower()


MODEL_SUFFIXES = ("blocks", "block", "models", "model", "nets", "net", "layers", "layer")


def model_ops(question: str, families: Iterable[str]) -> tuple[str, ...]:
    """Whole-model families ("model:minigptblock") that a question names: letters and digits of the
    question, run together, contain the model's name, or its name without a trailing "block", "model"
    or "net" ("what worked for MiniGPT blocks" names model:minigptblock)."""
    text = re.sub(r"[^a-z0-9]", "", question.lower())
    found = []
    for family in families:
        name = re.sub(r"[^a-z0-9]", "", family.removeprefix("model:"))
        stems = {name} | {name[: -len(s)] for s in MODEL_SUFFIXES if name.endswith(s) and len(name) - len(s) >= 3}
        if any(stem and stem in text for stem in stems):
            found.append(family)
    return tuple(found)


def op_with_relatives(op: str) -> tuple[str, ...]:
    return (op,) + OP_RELATIVES.get(op, ())


def schedule_kinds(text: str, ops: Optional[Iterable[str]] = None) -> frozenset[str]:
    """Schedule kinds a passage is about: those of the op families it names (`ops`, when the caller has
    read them from `text` already), and those it names outright ("row-wise kernels", "MFMA")."""
    kinds = {OP_SCHEDULE[o] for o in (canonical_ops(text) if ops is None else ops) if o in OP_SCHEDULE}
    kinds.update(_scan(text, _SCHEDULES))
    return frozenset(kinds)


def document_ops(op_families: Iterable[str]) -> frozenset[str]:
    out: set[str] = set()
    for op in op_families:
        out.update(canonical_ops(op) or (op.strip().lower(),))
    return frozenset(out)


def vendor_of_arch(arch: str) -> Optional[str]:
    arch = arch.lower()
    if arch.startswith("sm_") or arch.startswith("sm"):
        return "nvidia"
    if arch.startswith("gfx"):
        return "amd"
    if arch.startswith("mtia"):
        return "meta"
    return None


# -- open vendor and device names ------------------------------------------------------------------

# Names people write for a vendor, mapped to the short name documents and filters share. Any other
# name is accepted as a new vendor (normalised the same way): new chips come from new vendors.
_VENDOR_ALIASES: dict[str, str] = {
    "advanced micro devices inc": "amd",
    "nvidia": "nvidia",
    "nvidia corporation": "nvidia",
    "nvda": "nvidia",
    "amd": "amd",
    "advanced micro devices": "amd",
    "ati": "amd",
    "xilinx": "amd",
    "meta": "meta",
    "meta platforms": "meta",
    "facebook": "meta",
    "intel": "intel",
    "habana": "intel",
    "habana labs": "intel",
    "google": "google",
    "alphabet": "google",
    "generic": "generic",
    "none": "generic",
    "any": "generic",
}
_COMPANY_SUFFIX = re.compile(
    r"[\s,]+(?:inc|incorporated|corp|corporation|co|ltd|limited|llc|gmbh|ag|plc)\.?$", re.IGNORECASE
)
_NAME_OK = re.compile(r"^[\w][\w .,+&/()-]*$")


def normalize_vendor(name: str) -> str:
    """One spelling per vendor: "NVIDIA Corporation" -> nvidia, "Tenstorrent  Inc." -> tenstorrent.

    Known names go through the alias table; any other becomes lower case with runs of spaces, dots and
    underscores turned into one "-". Raises ValueError for an empty or unprintable name.
    """
    raw = " ".join(str(name).split())
    if not raw or len(raw) > 64 or not _NAME_OK.match(raw):
        raise ValueError(f"vendor name {name!r} must be 1-64 letters, digits, spaces or .,+&/()-")
    bare = _COMPANY_SUFFIX.sub("", raw).strip().lower()
    bare = _COMPANY_SUFFIX.sub("", bare).strip()  # "Foo Co. Ltd."
    if bare in _VENDOR_ALIASES:
        return _VENDOR_ALIASES[bare]
    return re.sub(r"[\s._]+", "-", bare).strip("-") or raw.lower()


def normalize_device(name: str) -> str:
    """One spelling per device: a known alias keeps the name as written but in canonical case
    ("h100 sxm" -> "H100 SXM"); an unknown model code ("mi355x", "gaudi3") goes to upper case; other
    names only lose extra spaces. Comparisons stay case-insensitive either way.
    """
    raw = " ".join(str(name).split())
    if not raw or len(raw) > 64 or not _NAME_OK.match(raw):
        raise ValueError(f"device name {name!r} must be 1-64 letters, digits, spaces or .,+&/()-")
    known = _scan(raw, _DEVICES + _DEVICES_NAME_ONLY)
    if len(known) == 1 and known[0].upper() == raw.upper():
        return known[0]
    has_digit = any(ch.isdigit() for ch in raw)
    if has_digit and (known or " " not in raw) and any(ch.isalpha() for ch in raw):
        return raw.upper()  # model codes: "mi355x" -> MI355X, "h100 sxm" -> H100 SXM
    return raw


def normalize_devices(names: Iterable[str]) -> tuple[str, ...]:
    """Normalised, without case-insensitive repeats, in the order given."""
    out: list[str] = []
    for name in names:
        d = normalize_device(name)
        if d.upper() not in {o.upper() for o in out}:
            out.append(d)
    return tuple(out)


def parse_query(question: str, *, extra_devices: Iterable[str] = ()) -> QueryFacets:
    """What a question says about devices, ops, vendors and dtypes (each canonical, in order seen)."""
    devices = canonical_devices(question, extra_devices)
    return QueryFacets(
        devices=devices,
        ops=canonical_ops(question),
        vendors=tuple(_scan(question, _VENDORS)),
        dtypes=tuple(_scan(question, _DTYPES)),
        archs=tuple(dict.fromkeys(DEVICE_ARCH[d] for d in devices if d in DEVICE_ARCH)),
    )
