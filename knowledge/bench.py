"""Benchmarks of retrieval quality and scale. Prints tables; writes only into a temporary folder.

    python -m knowledge.bench quality [--store DIR]     hit@1 / recall@5 / MRR over the question sets
    python -m knowledge.bench thirdparty [--thirdparty-store DIR]   the same over the CCCL and CK docs
    python -m knowledge.bench bm25                      our BM25 against bm25s at 3,000 and 30,000 chunks
    python -m knowledge.bench latency [--docs 250] [--sections 12]   fresh-process `kscout ask`, ingest files/s
    python -m knowledge.bench scale [--chunks N] [--outcomes N] [--queries N]
    python -m knowledge.bench all

Quality runs the real pipeline (shipped hwdocs, the real embedding model, `ask`). Scale adds synthetic
rows in bulk straight into the store's tables and vector collection (random unit vectors: the point is
query latency, not their meaning), then times warm `ask` calls whose questions the real model embeds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "tests" / "data" / "retrieval_questions.jsonl"
VENDOR_QUESTIONS = ROOT / "tests" / "data" / "vendor_questions.jsonl"
VENDOR_DOCS = ROOT / "tests" / "data" / "vendor_docs"
# Real vendor documentation, verbatim, beside the checkout (never copied into it): NVIDIA CCCL and AMD
# Composable Kernel. Questions over it name passages by file and heading or quote; a clone without
# ../shared has no such folder, and the set is then left out (tests skip).
THIRDPARTY_QUESTIONS = ROOT / "tests" / "data" / "thirdparty_questions.jsonl"
THIRDPARTY_DOCS = Path(os.environ.get("KSCOUT_THIRDPARTY_DOCS", ROOT.parent / "shared" / "thirdparty-docs"))
THIRDPARTY_FOLDERS: dict[str, dict] = {
    "cccl/docs": {
        "vendor": "nvidia",
        "source_url": "https://github.com/NVIDIA/cccl/blob/571f2fc3bc53cd710e306ad43d58995c1fe4219f/docs/",
    },
    "composable_kernel/docs": {
        "vendor": "amd",
        "source_url": "https://github.com/ROCm/composable_kernel/blob/8e22e1ae31bbf7086f69d8724e027676791d351a/docs/",
    },
}
# How each folder of the third-party-style fixture is ingested: as an engineer would, with a vendor and
# the URL the folder is published at, and (like the real ROCm tree) without device tags.
VENDOR_FOLDERS: dict[str, dict] = {
    "rocm": {"vendor": "AMD", "source_url": "https://rocm.docs.amd.com/en/latest/"},
    "hip": {
        "vendor": "Advanced Micro Devices, Inc.",
        "source_url": "https://rocm.docs.amd.com/projects/HIP/en/latest/",
    },
    "cutlass": {"vendor": "NVIDIA", "source_url": "https://docs.nvidia.com/cutlass/"},
    "cuda": {"vendor": "nvidia", "source_url": "https://docs.nvidia.com/cuda/"},
    "tenstorrent": {
        "vendor": "Tenstorrent Inc.",
        "devices": ("n150", "n300"),
        "source_url": "https://docs.tenstorrent.com/",
    },
}
console = Console()


def doc_key(source: str) -> str:
    """How a question names a document: the hwdocs stem, or the fixture path without its suffix."""
    for marker in ("/vendor_docs/", "/thirdparty-docs/"):
        if marker in source:
            return str(Path(source.split(marker, 1)[1]).with_suffix(""))
    return Path(source).stem


def third_party(question: dict) -> bool:
    """A question whose expected passage is in a document nobody here wrote (not a shipped hwdoc)."""
    return "/" in question["expected"]


def passage_matches(question: dict, hit) -> bool:
    """Whether a hit is the question's expected passage: its document, and (when the question names
    them) a heading on its heading path and a quote in its text (case and spacing ignored)."""
    if doc_key(hit.source) != question["expected"]:
        return False
    if question.get("heading") and question["heading"] not in hit.heading_path:
        return False
    quote = question.get("quote")
    return not quote or " ".join(quote.lower().split()) in " ".join(hit.text.lower().split())


def _ranked_keys(result) -> list[str]:
    keys: list[str] = []
    for hit in result.documents:
        key = doc_key(hit.source)
        if key not in keys:
            keys.append(key)
    return keys


def ingest_vendor_docs(store, on_file=None):
    """The fixture folders, each with its own options (see VENDOR_FOLDERS)."""
    from knowledge.ingest import IngestOptions, ingest_paths

    reports = []
    for folder, opts in VENDOR_FOLDERS.items():
        reports.append(ingest_paths(store, [VENDOR_DOCS / folder], IngestOptions(**opts), on_file))
    return reports


def _rank(q: dict, result, k: int) -> tuple[Optional[int], list[str]]:
    """The expected answer's 1-based rank in the top k (None when absent) and what was ranked: passages
    (chunks in answer order) when the question names a heading or quote, else distinct documents."""
    if q.get("heading") or q.get("quote"):
        hits = list(result.documents[:k])
        rank = next((i + 1 for i, h in enumerate(hits) if passage_matches(q, h)), None)
        return rank, [f"{doc_key(h.source)}#{h.heading_path[-1] if h.heading_path else ''}" for h in hits]
    keys = _ranked_keys(result)[:k]
    return (keys.index(q["expected"]) + 1 if q["expected"] in keys else None), keys


def _summary(ranks: list[Optional[int]]) -> dict:
    n = len(ranks)
    if not n:
        return {"questions": 0}
    return {
        "questions": n,
        "hit_at_1": sum(r == 1 for r in ranks) / n,
        "recall_at_5": sum(r is not None for r in ranks) / n,
        "mrr": sum(1.0 / r for r in ranks if r) / n,
    }


# (id, op, device name, arch, status, speedup, interval, transformation): measured outcomes of the
# kind a search writes, so outcome questions have something to find (ids as thirdparty_questions.jsonl
# names them). Decoys sit beside each answer: a slower win, a failure, other devices and ops.
_OUTCOMES: list[tuple] = [
    ("ln-mi300x-a", "layernorm", "AMD Instinct MI300X", "gfx942", "passed", 1.8, (1.7, 1.9), "rows_per_program=4"),
    ("ln-mi300x-b", "layernorm", "AMD Instinct MI300X", "gfx942", "passed", 2.4, (2.3, 2.5), "single_pass=true"),
    ("ln-mi300x-fail", "layernorm", "AMD Instinct MI300X", "gfx942", "incorrect", None, None, "one_pass_variance"),
    ("ln-h100", "layernorm", "NVIDIA H100 80GB HBM3", "sm_90", "passed", 3.0, (2.9, 3.1), "rows_per_program=2"),
    ("sm-h200-fast", "softmax", "NVIDIA H200", "sm_90", "passed", 1.6, (1.5, 1.7), "online_softmax=true"),
    ("sm-h200-slow", "softmax", "NVIDIA H200", "sm_90", "passed", 0.92, (0.90, 0.95), "num_warps=16"),
    ("sm-h200-fail", "softmax", "NVIDIA H200", "sm_90", "incorrect", None, None, "no_max_subtraction"),
    ("sm-a100", "softmax", "NVIDIA A100-SXM4-80GB", "sm_80", "passed", 1.4, (1.3, 1.5), "rows_per_program=2"),
    ("sm-a100-noise", "softmax", "NVIDIA A100-SXM4-80GB", "sm_80", "passed", 1.02, (0.97, 1.07), "num_warps=8"),
    ("rms-h100-a", "rmsnorm", "NVIDIA H100 80GB HBM3", "sm_90", "passed", 1.5, (1.4, 1.6), "rows_per_program=1"),
    ("rms-h100-b", "rmsnorm", "NVIDIA H100 80GB HBM3", "sm_90", "passed", 2.1, (2.0, 2.2), "rows_per_program=4"),
    ("rms-cpu", "rmsnorm", "x86 CPU", "cpu", "correctness_only", None, None, "rows_per_program=4"),
    ("mm-mi300x-fast", "matmul_epilogue", "AMD Instinct MI300X", "gfx942", "passed", 1.3, (1.2, 1.4), "BLOCK_K=64"),
    ("mm-mi300x-slow", "matmul_epilogue", "AMD Instinct MI300X", "gfx942", "passed", 0.8, (0.75, 0.85), "split_k=4"),
]


def synthetic_outcomes() -> list:
    from store.records import OutcomeRecord

    rows = []
    for i, (oid, op, device, arch, status, speedup, interval, transformation) in enumerate(_OUTCOMES):
        low, high = interval if interval else (None, None)
        rows.append(
            OutcomeRecord(
                outcome_id=oid,
                op_family=op,
                problem_id="p-" + op,
                device_name=device,
                arch=arch,
                shape_bucket="M>=4096,N=4096..8191",
                dtype="bfloat16",
                transformation=transformation,
                candidate_id="c-" + oid,
                baseline="eager",
                speedup=speedup,
                speedup_low=low,
                speedup_high=high,
                latency_ms_p50=None if speedup is None else 0.1 / speedup,
                status=status,
                triton_version="3.4.0",
                torch_version="2.8.0",
                evidence_eval_ids=(f"ev-{oid}",),
                summary=f"{transformation} for {op} on {device}: {speedup}x ({status})",
                created_at=f"2026-11-{1 + i:02d}T00:00:00+00:00",
            )
        )
    return rows


def ingest_thirdparty_docs(store, on_file=None):
    """The real CCCL and Composable Kernel docs (THIRDPARTY_DOCS), as an engineer would ingest them: a
    vendor and the commit's URL, no device tags; plus the synthetic outcomes."""
    from knowledge.ingest import IngestOptions, ingest_paths

    if not THIRDPARTY_DOCS.is_dir():
        raise FileNotFoundError(f"no third-party docs at {THIRDPARTY_DOCS} (set KSCOUT_THIRDPARTY_DOCS)")
    reports = []
    for folder, opts in THIRDPARTY_FOLDERS.items():
        reports.append(ingest_paths(store, [THIRDPARTY_DOCS / folder], IngestOptions(**opts), on_file))
    known = {o.outcome_id for o in store.outcomes(limit=10_000)}
    for o in synthetic_outcomes():
        if o.outcome_id not in known:
            store.add_outcome(o)
    return reports


def load_questions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def evaluate(store, questions: list[dict], k: int = 5) -> dict:
    """hit@1, recall@k and MRR (overall, third-party passages only, op-and-device questions), excerpt
    hits, outcome hits, misses; questions as in the jsonl files. A question naming a heading or quote
    is scored on passages, in the order `ask` (k=k) shows them; one naming only a document is scored
    on distinct documents. An op-and-device question (kind "op-device") counts as a miss unless its
    passage is in the top 3; an outcome question ("outcome": id) wants that outcome listed first."""
    from knowledge.aliases import canonical_devices, normalize_op, parse_query
    from knowledge.retrieve import ask

    lenient_hits = excerpt_hits = with_answer = 0
    outcome_hits = with_outcome = 0
    ranks: list[Optional[int]] = []
    misses, alias_misses, excerpt_misses, top3_misses, outcome_misses = [], [], [], [], []
    latencies = []
    for q in questions:
        passage = bool(q.get("heading") or q.get("quote"))
        t = time.perf_counter()
        result = ask(store, q["question"], k=k if passage else 2 * k)
        latencies.append(time.perf_counter() - t)
        rank, shown_keys = _rank(q, result, k)
        keys = _ranked_keys(result)[:k]
        ranks.append(rank)
        also = set(q.get("also", ()))
        lenient_hits += rank is not None or bool(also & set(keys))
        if rank is None:
            misses.append(
                (q["question"], q["expected"] + (f"#{q['heading']}" if q.get("heading") else ""), ", ".join(shown_keys))
            )
        if q.get("kind") == "op-device" and (rank is None or rank > 3):
            top3_misses.append((q["question"], q["expected"], str(rank)))
        if q.get("outcome"):
            with_outcome += 1
            first = result.outcomes[0].outcome_id if result.outcomes else "(none)"
            outcome_hits += first == q["outcome"]
            if first != q["outcome"]:
                outcome_misses.append((q["question"], q["outcome"], first))
        if q.get("answer"):
            with_answer += 1
            shown = [h.excerpt for h in result.documents if doc_key(h.source) == q["expected"]][:2]
            if any(q["answer"].lower() in e.lower() for e in shown):
                excerpt_hits += 1
            elif rank is not None:
                excerpt_misses.append((q["question"], q["answer"], " | ".join(shown)[:300]))
        facets = parse_query(q["question"])
        want_devices = {d.upper() for d in canonical_devices(q.get("device") or "", device_name=True)}
        if q.get("device") and not want_devices & {d.upper() for d in facets.devices}:
            alias_misses.append((q["question"], f"device {q['device']}", str(list(facets.devices))))
        if q.get("op") and normalize_op(q["op"]) not in facets.ops:
            alias_misses.append((q["question"], f"op {q['op']}", str(list(facets.ops))))
    n = len(questions)
    overall = _summary(ranks)
    tp = _summary([r for q, r in zip(questions, ranks) if third_party(q)])
    od = [r for q, r in zip(questions, ranks) if q.get("kind") == "op-device"]
    return {
        **overall,
        "recall_at_5_with_also": lenient_hits / n,
        "third_party_questions": tp["questions"],
        "third_party_hit_at_1": tp.get("hit_at_1"),
        "third_party_recall_at_5": tp.get("recall_at_5"),
        "third_party_mrr": tp.get("mrr"),
        "op_device_questions": len(od),
        "op_device_in_top_3": sum(r is not None and r <= 3 for r in od) / len(od) if od else None,
        "outcome_first": outcome_hits / with_outcome if with_outcome else None,
        "excerpt_shows_answer": excerpt_hits / with_answer if with_answer else None,
        "ask_ms_p50": 1e3 * statistics.median(latencies),
        "_misses": misses,
        "_top3_misses": top3_misses,
        "_outcome_misses": outcome_misses,
        "_alias_misses": alias_misses,
        "_excerpt_misses": excerpt_misses,
    }


def _print_eval(title: str, out: dict) -> None:
    table = Table(title=title)
    for col in ("metric", "value"):
        table.add_column(col)
    for key, value in out.items():
        if not key.startswith("_"):
            table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    console.print(table)
    for key, head, cols in (
        ("_misses", "misses (expected not in the top 5)", ("question", "expected", "got")),
        ("_top3_misses", "op-and-device questions whose passage is not in the top 3", ("question", "expected", "rank")),
        ("_outcome_misses", "outcome questions whose outcome is not first", ("question", "expected", "first")),
        (
            "_alias_misses",
            "facets the question set names but the alias parser missed",
            ("question", "expected", "parsed"),
        ),
        ("_excerpt_misses", "excerpts that do not show the answer", ("question", "answer", "excerpt")),
    ):
        if out.get(key):
            t = Table(title=head)
            for col in cols:
                t.add_column(col, overflow="fold")
            for row in out[key]:
                t.add_row(*row)
            console.print(t)


def quality_thirdparty(store_dir: Optional[Path] = None, k: int = 5) -> dict:
    """The question set over the real third-party docs: a store of the shipped hwdocs, CCCL, Composable
    Kernel and the synthetic outcomes (`store_dir` is reused: unchanged files are skipped)."""
    from knowledge.ingest import ingest_builtin
    from store import Store

    questions = load_questions(THIRDPARTY_QUESTIONS)
    with tempfile.TemporaryDirectory(prefix="kscout-bench-") as tmp, Store.open(store_dir or Path(tmp)) as store:
        t0 = time.perf_counter()
        reports = [ingest_builtin(store)] + ingest_thirdparty_docs(store)
        ingest_s = time.perf_counter() - t0
        files = [f for r in reports for f in r.files]
        out = evaluate(store, questions, k)
        out["ingest_chunks"] = sum(f.chunks for f in files)
        out["ingest_s"] = ingest_s
    _print_eval(f"retrieval quality: CCCL + Composable Kernel questions ({len(questions)})", out)
    return out


def quality(store_dir: Optional[Path] = None, k: int = 5, thirdparty_store: Optional[Path] = None) -> dict:
    """The shipped and fixture sets over one store (shipped hwdocs and the third-party-style fixture);
    then the set over the real third-party docs, in a store of its own, where those docs are present."""
    from knowledge.ingest import ingest_builtin
    from store import Store

    sets = {"shipped": load_questions(QUESTIONS), "third-party": load_questions(VENDOR_QUESTIONS)}
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="kscout-bench-") as tmp, Store.open(store_dir or Path(tmp)) as store:
        t0 = time.perf_counter()
        reports = [ingest_builtin(store)] + ingest_vendor_docs(store)
        ingest_s = time.perf_counter() - t0
        files = [f for r in reports for f in r.files]
        failed = [f for f in files if f.status.value == "failed"]
        if failed:
            raise SystemExit(f"fixture files failed to ingest: {[(f.path, f.reason) for f in failed]}")
        results["ingest"] = {"files": len(files), "chunks": sum(f.chunks for f in files), "ingest_s": ingest_s}
        for name, questions in sets.items():
            results[name] = evaluate(store, questions, k)
            _print_eval(f"retrieval quality: {name} questions ({len(questions)})", results[name])
    console.print(f"ingest: {results['ingest']}")
    if THIRDPARTY_DOCS.is_dir():
        results["cccl+ck"] = quality_thirdparty(thirdparty_store, k)
    else:
        console.print(f"[yellow]no third-party docs at {THIRDPARTY_DOCS}: that question set is left out[/]")
    return results


# -- scale -----------------------------------------------------------------------------------------

_OPS = [
    "layernorm",
    "rmsnorm",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "swiglu",
    "geglu",
    "add_rmsnorm",
    "row_sum",
    "matmul_epilogue",
]
_DEVICES = [
    ("NVIDIA H100 80GB HBM3", "sm_90"),
    ("NVIDIA H200", "sm_90"),
    ("NVIDIA A100-SXM4-80GB", "sm_80"),
    ("NVIDIA B200", "sm_100"),
    ("AMD Instinct MI300X", "gfx942"),
    ("AMD Instinct MI250X", "gfx90a"),
]


def _insert_synthetic_outcomes(store, n: int) -> None:
    ops = "[" + ", ".join(f"'{o}'" for o in _OPS) + "]"
    names = "[" + ", ".join(f"'{d}'" for d, _ in _DEVICES) + "]"
    archs = "[" + ", ".join(f"'{a}'" for _, a in _DEVICES) + "]"
    sql = f"""
    INSERT INTO outcomes (outcome_id, op_family, problem_id, device_name, arch, shape_bucket, dtype,
        transformation, candidate_id, parent_id, baseline, speedup, speedup_low, speedup_high,
        latency_ms_p50, status, triton_version, torch_version, driver_version, evidence_eval_ids,
        summary, created_at)
    SELECT 'synth-' || i, {ops}[(i % {len(_OPS)}) + 1], 'p' || (i % 10),
        {names}[((i // 10) % {len(_DEVICES)}) + 1], {archs}[((i // 10) % {len(_DEVICES)}) + 1],
        'M>=4096,N=4096..8191', CASE WHEN i % 2 = 0 THEN 'bfloat16' ELSE 'float32' END,
        'rows_per_program=' || (1 << (i % 4)), md5(i::VARCHAR), NULL, 'eager',
        0.5 + (hash(i) % 3000) / 1000.0, 0.45 + (hash(i) % 3000) / 1000.0, 0.55 + (hash(i) % 3000) / 1000.0,
        0.01 + (hash(i * 7) % 1000) / 1000.0, CASE WHEN i % 5 = 0 THEN 'incorrect' ELSE 'passed' END,
        '3.4.0', '2.8.0', NULL, ['eval-' || i], 'synthetic outcome ' || i,
        strftime(TIMESTAMP '2026-01-01' + to_seconds(i), '%Y-%m-%dT%H:%M:%S+00:00')
    FROM range({n}) t(i)
    """
    with store.db.transaction() as con:
        con.execute(sql)


_WORDS = (
    "block warp tile kernel memory bandwidth cache register shared load store mask reduction row "
    "column program grid stage pipeline latency throughput tensor matrix vector scalar accumulate "
    "precision overflow stable softmax norm gemm epilogue launch occupancy spill vectorize stride "
    "contiguous persistent split swizzle group barrier atomic"
).split()


def _insert_synthetic_chunks(store, n_chunks: int, per_doc: int = 100) -> None:
    from store.records import utc_now

    n_docs = max(1, n_chunks // per_doc)
    words = "[" + ", ".join(f"'{w}'" for w in _WORDS) + "]"
    now = utc_now()
    with store.db.transaction() as con:
        con.execute(f"""
            INSERT INTO documents (document_id, source, title, vendor, devices, doc_version, source_url, sha256,
                kind, op_families, builtin, ingested_at, origin, metadata_json)
            SELECT 'synthdoc' || d, 'synthetic/' || d || '.md', 'Synthetic document ' || d, NULL, [], NULL, NULL,
                md5(d::VARCHAR), 'guidance', [], false, '{now}', 'external', '{{}}'
            FROM range({n_docs}) t(d)""")
        con.execute(f"""
            INSERT INTO chunks (chunk_id, document_id, ordinal, heading_path, text, kind, text_sha256)
            SELECT 'synthdoc' || (i // {per_doc}) || ':' || (i % {per_doc}), 'synthdoc' || (i // {per_doc}),
                i % {per_doc}, ['Synthetic', 'Section ' || (i % {per_doc})],
                array_to_string(list_transform(range(40), lambda j: {words}[((hash(i * 41 + j) % {len(_WORDS)}) + 1)::BIGINT]), ' '),
                'guidance', md5(i::VARCHAR)
            FROM range({n_docs * per_doc}) t(i)""")
    # Vectors for them in the embeddings cache, keyed as ingest keys them, which is where `ask`'s index
    # reads them from (random unit-ish vectors: the point is latency, not meaning).
    with store.db.transaction() as con:
        con.execute(
            f"""
            INSERT OR IGNORE INTO embeddings
            SELECT ?, sha256(array_to_string(heading_path, ' > ') || chr(10) || text), 384,
                   list_transform(range(384), lambda j: ((hash(ordinal * 384 + j + length(chunk_id)) % 2001)::DOUBLE - 1000.0) / 1000.0)::FLOAT[],
                   '{now}'
            FROM chunks WHERE document_id LIKE 'synthdoc%'""",
            [store.embedder.model_name],
        )


def scale(
    n_chunks: int = 100_000, n_outcomes: int = 1_000_000, n_queries: int = 60, store_dir: Optional[Path] = None
) -> dict:
    from knowledge.ingest import ingest_builtin
    from knowledge.retrieve import ask
    from store import Store

    doc_questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    outcome_questions = [
        "what worked on MI300 for layernorm",
        "best rmsnorm on H100 in bf16",
        "softmax on A100",
        "what worked on AMD for cross entropy",
        "GEMM epilogue speedups on B200",
    ]
    questions = []  # every fourth question asks about outcomes, the rest are the documents' question set
    for i, q in enumerate(doc_questions):
        questions.append(q)
        if i % 3 == 2:
            questions.append(outcome_questions[(i // 3) % len(outcome_questions)])
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="kscout-bench-") as tmp, Store.open(store_dir or Path(tmp)) as store:
        if store.documents():
            raise SystemExit(f"scale needs an empty store folder, {store_dir} has documents")
        t0 = time.perf_counter()
        store.embed(["load the embedding model"])
        out["model_load_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = ingest_builtin(store)
        out["ingest_s"] = time.perf_counter() - t0
        out["ingest_chunks"] = sum(f.chunks for f in report.files)
        out["ingest_chunks_per_s"] = out["ingest_chunks"] / out["ingest_s"]
        t0 = time.perf_counter()
        _insert_synthetic_outcomes(store, n_outcomes)
        out["insert_outcomes_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        _insert_synthetic_chunks(store, n_chunks)
        out["insert_chunks_s"] = time.perf_counter() - t0
        out["chunks_total"] = len(store.chunks())
        out["outcomes_total"] = store.db.query("SELECT count(*) AS n FROM outcomes")[0]["n"]
        t0 = time.perf_counter()
        ask(store, "warm up: H100 layernorm")
        out["first_ask_s (builds the BM25 index)"] = time.perf_counter() - t0
        for q in questions[:5]:
            ask(store, q)
        latencies = []
        outcome_counts = []
        for i in range(n_queries):
            q = questions[i % len(questions)]
            t = time.perf_counter()
            result = ask(store, q)
            latencies.append(1e3 * (time.perf_counter() - t))
            if q in outcome_questions:
                outcome_counts.append(len(result.outcomes))
        latencies.sort()
        out["ask_ms_p50"] = statistics.median(latencies)
        out["ask_ms_p95"] = latencies[min(len(latencies) - 1, int(round(0.95 * (len(latencies) - 1))))]
        out["ask_ms_max"] = latencies[-1]
        out["outcome_asks"] = len(outcome_counts)
        out["outcomes_per_outcome_ask"] = statistics.mean(outcome_counts) if outcome_counts else 0.0
    table = Table(title=f"scale: {n_chunks} synthetic chunks, {n_outcomes} synthetic outcomes, {n_queries} warm asks")
    for col in ("metric", "value"):
        table.add_column(col)
    for key, value in out.items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    console.print(table)
    return out


# -- a fresh `kscout ask` on a warm store of vendor-style documents, and ingest throughput -------------

_DEVICE_NAMES = ["MI300X", "MI250X", "H100", "H200", "A100", "B200", "MI355X", "n300", "Gaudi3", "MTIA"]
_VENDOR_OF = {
    "MI300X": "amd",
    "MI250X": "amd",
    "MI355X": "amd",
    "H100": "nvidia",
    "H200": "nvidia",
    "A100": "nvidia",
    "B200": "nvidia",
    "n300": "tenstorrent",
    "Gaudi3": "intel",
    "MTIA": "meta",
}
_TOPICS = [
    "memory hierarchy",
    "tuning guide",
    "programming model",
    "matrix cores",
    "collectives",
    "profiling",
    "numerics",
    "launch overhead",
    "occupancy",
    "data types",
]


def _paragraph_pool() -> list[str]:
    """Real prose from the shipped notes and the vendor-style fixture, as the material of synthetic pages."""
    texts = [p.read_text() for p in (ROOT / "hwdocs").glob("*.md")]
    texts += [p.read_text(errors="replace") for p in VENDOR_DOCS.rglob("*") if p.suffix in (".md", ".rst")]
    pool = []
    for text in texts:
        for para in text.split("\n\n"):
            para = " ".join(para.split())
            if len(para) >= 160 and not para.startswith(("---", "#", "|", "```", "..", ":", "-")):
                pool.append(para[:420])
    return pool


def make_vendor_corpus(folder: Path, n_docs: int = 250, sections: int = 12, seed: int = 0) -> int:
    """Markdown pages shaped like a vendor's docs tree: front matter, a title, `sections` sections of
    about one chunk each (so n_docs x sections chunks). Returns the number of files written."""
    import random

    rng = random.Random(seed)
    pool = _paragraph_pool()
    for i in range(n_docs):
        device = _DEVICE_NAMES[i % len(_DEVICE_NAMES)]
        topic = _TOPICS[(i // len(_DEVICE_NAMES)) % len(_TOPICS)]
        lines = [
            "---",
            f"title: {device} {topic} ({i})",
            f"vendor: {_VENDOR_OF[device]}",
            f"devices: [{device}]",
            f"version: {6 + i % 3}.{i % 4}",
            "description: generated for the latency benchmark",
            "---",
            f"# {device} {topic}",
            "",
        ]
        for sec in range(sections):
            lines.append(f"## {topic.title()} part {sec + 1}")
            body = " ".join(rng.sample(pool, 2)).replace("H100", device)
            lines += [body[:1000], ""]
        sub = folder / _VENDOR_OF[device] / topic.replace(" ", "-")
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"page-{i:03d}.md").write_text("\n".join(lines))
    return n_docs


LATENCY_QUESTIONS = [
    "how much shared memory per SM does an H100 have",
    "what worked on MI300 for layernorm",
    "what failed for softmax on H200",
    "what is TMA",
    "good num_warps for an RMSNorm kernel on H200",
    "how many compute units does the MI300X have",
    "what does waves_per_eu do",
    "HBM bandwidth of the B200",
    "how do I avoid bank conflicts in LDS",
    "wavefront size on gfx942",
    "tolerance for bf16 layernorm",
    "split-K for small GEMMs",
    "is fp8 supported on MI300X",
    "launch overhead of a Triton kernel",
    "Infinity Cache size",
    "how many Tensix cores does a n300 have",
    "cross entropy with large vocab",
    "persistent kernels on Hopper",
    "occupancy with 128 VGPRs",
    "what worked for rmsnorm on A100",
]


def latency(n_docs: int = 250, sections: int = 12, n_questions: int = 20, store_dir: Optional[Path] = None) -> dict:
    """Ingest files/s after the model is loaded, then `kscout ask` in fresh processes on the warm store."""
    import resource
    import subprocess
    import sys

    from knowledge.index import corpus_for
    from knowledge.ingest import ingest_paths
    from store import Store

    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="kscout-latency-") as tmp:
        home = store_dir or Path(tmp) / "home"
        docs = Path(tmp) / "docs"
        out["files"] = make_vendor_corpus(docs, n_docs, sections)
        with Store.open(home) as store:
            t0 = time.perf_counter()
            store.embedder.load()
            out["model_load_s"] = time.perf_counter() - t0
            t0, c0 = time.perf_counter(), time.process_time()
            report = ingest_paths(store, [docs])
            out["ingest_s"] = time.perf_counter() - t0
            out["ingest_cpu_s"] = time.process_time() - c0
            out["ingest_files_per_s"] = out["files"] / out["ingest_s"]
            out["ingest_files_per_cpu_s"] = out["files"] / out["ingest_cpu_s"]
            out["chunks"] = sum(f.chunks for f in report.files)
            out["documents"] = len(store.documents())
            t0 = time.perf_counter()
            corpus_for(store)  # the index `kscout ingest` leaves behind
            out["index_build_s"] = time.perf_counter() - t0
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        cmd = [sys.executable, "-c", "from agent.cli import main; main()"]
        subprocess.run(
            cmd + ["ask", "warm the page cache", "--store", str(home), "--json"],
            env=env,
            capture_output=True,
            check=True,
        )
        walls, cpus = [], []
        for q in LATENCY_QUESTIONS[:n_questions]:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            proc = subprocess.run(cmd + ["ask", q, "--store", str(home)], env=env, capture_output=True, text=True)
            walls.append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if proc.returncode != 0:
                raise SystemExit(f"kscout ask failed: {proc.stderr[-500:]}")
        walls.sort()
        cpus.sort()
        pct = lambda xs, p: xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]  # noqa: E731
        out.update(
            {
                "ask_wall_s_p50": statistics.median(walls),
                "ask_wall_s_p95": pct(walls, 0.95),
                "ask_cpu_s_p50": statistics.median(cpus),
                "ask_cpu_s_p95": pct(cpus, 0.95),
                "load_average_1min": os.getloadavg()[0],
            }
        )
    table = Table(
        title=f"latency: {out['documents']} documents, {out['chunks']} chunks, "
        f"{len(walls)} fresh `kscout ask` processes"
    )
    for col in ("metric", "value"):
        table.add_column(col)
    for key, value in out.items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    console.print(table)
    return out


# -- BM25: ours against bm25s ---------------------------------------------------------------------------


def _bm25_texts(n: int, seed: int = 0) -> list[str]:
    """n chunk-sized texts (~1,000 characters) of real prose from the shipped notes and the fixture."""
    import random

    rng = random.Random(seed)
    pool = _paragraph_pool()
    return [" ".join(rng.sample(pool, 3))[:1000] for _ in range(n)]


def _measure_bm25(impl: str, n: int, queries: list[str]) -> dict:
    """Index time, median full-scoring query time and peak traced memory of one implementation (run in
    a fresh process by `bm25_compare`, so neither pays for the other's imports or allocations)."""
    import tracemalloc

    from knowledge.bm25 import BM25Index, tokenize

    texts = _bm25_texts(n)
    t0 = time.perf_counter()
    if impl == "bm25s":
        import bm25s  # type: ignore[import-not-found]

    import_s = time.perf_counter() - t0
    tracemalloc.start()
    t0 = time.perf_counter()
    if impl == "bm25s":
        index = bm25s.BM25(k1=1.2, b=0.75)  # same parameters as ours; lucene idf
        index.index([tokenize(t) for t in texts], show_progress=False)
        score = lambda q: index.get_scores(tokenize(q))  # noqa: E731
    else:
        ours = BM25Index(texts)
        score = ours.scores
    index_s = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    for q in queries[:3]:
        score(q)
    times = []
    for q in queries:
        t = time.perf_counter()
        score(q)
        times.append(time.perf_counter() - t)
    return {
        "impl": impl,
        "chunks": n,
        "import_s": import_s,
        "index_s": index_s,
        "query_ms_p50": 1e3 * statistics.median(times),
        "index_peak_mb": peak / 2**20,
    }


def bm25_compare(sizes: tuple[int, ...] = (3_000, 30_000)) -> list[dict]:
    """knowledge.bm25 against bm25s (when installed) on the same tokens: index build, a full score
    vector per query (what `rank_chunks` uses), peak memory while indexing, and import time."""
    import subprocess
    import sys

    rows = []
    for n in sizes:
        for impl in ("ours", "bm25s"):
            code = (
                "import json, sys; from knowledge.bench import _measure_bm25, LATENCY_QUESTIONS; "
                f"print(json.dumps(_measure_bm25({impl!r}, {n}, LATENCY_QUESTIONS * 3)))"
            )
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                console.print(f"[yellow]{impl} at {n}: {proc.stderr.strip().splitlines()[-1]}[/]")
                continue
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    table = Table(title="BM25: knowledge.bm25 against bm25s (same tokens, k1=1.2, b=0.75)")
    for col in ("impl", "chunks", "import_s", "index_s", "query_ms_p50", "index_peak_mb"):
        table.add_column(col)
    for r in rows:
        table.add_row(*(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()))
    console.print(table)
    return rows


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m knowledge.bench")
    parser.add_argument("what", choices=("quality", "thirdparty", "latency", "scale", "bm25", "all"))
    parser.add_argument(
        "--thirdparty-store", type=Path, default=None, help="quality/thirdparty: reuse this store for CCCL + CK"
    )
    parser.add_argument("--docs", type=int, default=250, help="latency: vendor-style pages to generate")
    parser.add_argument("--sections", type=int, default=12, help="latency: sections (about one chunk each) per page")
    parser.add_argument(
        "--store", type=Path, default=None, help="quality: reuse this store; scale: build it here (empty) and keep it"
    )
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--outcomes", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads for the embedding model (1 is faster on a loaded machine)",
    )
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.what in ("quality", "all"):
        quality(args.store, thirdparty_store=args.thirdparty_store)
    if args.what == "bm25":
        bm25_compare()
    if args.what == "thirdparty":
        quality_thirdparty(args.thirdparty_store)
    if args.what in ("latency", "all"):
        latency(args.docs, args.sections, store_dir=args.store)
    if args.what in ("scale", "all"):
        scale(args.chunks, args.outcomes, args.queries, args.store)


if __name__ == "__main__":
    main()
