"""Benchmarks of retrieval quality and scale. Prints tables; writes only into a temporary folder.

    python -m knowledge.bench quality [--store DIR]     recall@5 / MRR over tests/data/retrieval_questions.jsonl
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

QUESTIONS = Path(__file__).resolve().parents[1] / "tests" / "data" / "retrieval_questions.jsonl"
console = Console()


def _stem(source: str) -> str:
    return Path(source).stem


def _ranked_stems(result) -> list[str]:
    stems: list[str] = []
    for hit in result.documents:
        stem = _stem(hit.source)
        if stem not in stems:
            stems.append(stem)
    return stems


def quality(store_dir: Optional[Path] = None, k: int = 5) -> dict:
    from knowledge.aliases import canonical_devices, normalize_op, parse_query
    from knowledge.ingest import ingest_builtin
    from knowledge.retrieve import ask
    from store import Store

    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory(prefix="kscout-bench-") as tmp, Store.open(store_dir or Path(tmp)) as store:
        t0 = time.perf_counter()
        report = ingest_builtin(store)
        ingest_s = time.perf_counter() - t0
        chunks = sum(f.chunks for f in report.files if f.status.value in ("added", "replaced"))
        hits = lenient_hits = 0
        rr = 0.0
        misses, alias_misses = [], []
        latencies = []
        for q in questions:
            t = time.perf_counter()
            result = ask(store, q["question"], k=2 * k)
            latencies.append(time.perf_counter() - t)
            stems = _ranked_stems(result)[:k]
            rank = stems.index(q["expected"]) + 1 if q["expected"] in stems else None
            also = set(q.get("also", ()))
            hits += rank is not None
            lenient_hits += rank is not None or bool(also & set(stems))
            rr += 1.0 / rank if rank else 0.0
            if rank is None:
                misses.append((q["question"], q["expected"], ", ".join(stems)))
            facets = parse_query(q["question"])
            want_devices = {d.upper() for d in canonical_devices(q.get("device") or "", device_name=True)}
            if q.get("device") and not want_devices & {d.upper() for d in facets.devices}:
                alias_misses.append((q["question"], f"device {q['device']}", str(list(facets.devices))))
            if q.get("op") and normalize_op(q["op"]) not in facets.ops:
                alias_misses.append((q["question"], f"op {q['op']}", str(list(facets.ops))))
    n = len(questions)
    out = {
        "questions": n, "recall_at_5": hits / n, "recall_at_5_with_also": lenient_hits / n, "mrr": rr / n,
        "ingest_chunks": chunks, "ingest_s": ingest_s,
        "ingest_chunks_per_s": chunks / ingest_s if chunks and ingest_s else None,
        "ask_ms_p50": 1e3 * statistics.median(latencies),
    }
    table = Table(title=f"retrieval quality over {n} questions ({QUESTIONS.name})")
    for col in ("metric", "value"):
        table.add_column(col)
    for key, value in out.items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    console.print(table)
    if misses:
        miss = Table(title="misses (expected not in the top 5 documents)")
        for col in ("question", "expected", "got"):
            miss.add_column(col, overflow="fold")
        for row in misses:
            miss.add_row(*row)
        console.print(miss)
    if alias_misses:
        am = Table(title="facets the question set names but the alias parser missed")
        for col in ("question", "expected", "parsed"):
            am.add_column(col, overflow="fold")
        for row in alias_misses:
            am.add_row(*row)
        console.print(am)
    return out


# -- scale -----------------------------------------------------------------------------------------

_OPS = ["layernorm", "rmsnorm", "softmax", "log_softmax", "cross_entropy", "swiglu", "geglu", "add_rmsnorm",
        "row_sum", "matmul_epilogue"]
_DEVICES = [("NVIDIA H100 80GB HBM3", "sm_90"), ("NVIDIA H200", "sm_90"), ("NVIDIA A100-SXM4-80GB", "sm_80"),
            ("NVIDIA B200", "sm_100"), ("AMD Instinct MI300X", "gfx942"), ("AMD Instinct MI250X", "gfx90a")]


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


_WORDS = ("block warp tile kernel memory bandwidth cache register shared load store mask reduction row "
          "column program grid stage pipeline latency throughput tensor matrix vector scalar accumulate "
          "precision overflow stable softmax norm gemm epilogue launch occupancy spill vectorize stride "
          "contiguous persistent split swizzle group barrier atomic").split()


def _insert_synthetic_chunks(store, n_chunks: int, per_doc: int = 100) -> None:
    import numpy as np

    from store.documents import chunk_metadata
    from store.records import Chunk, ChunkKind, Document, utc_now

    n_docs = max(1, n_chunks // per_doc)
    words = "[" + ", ".join(f"'{w}'" for w in _WORDS) + "]"
    now = utc_now()
    with store.db.transaction() as con:
        con.execute(f"""
            INSERT INTO documents (document_id, source, title, vendor, devices, doc_version, source_url, sha256,
                kind, op_families, builtin, ingested_at)
            SELECT 'synthdoc' || d, 'synthetic/' || d || '.md', 'Synthetic document ' || d, NULL, [], NULL, NULL,
                md5(d::VARCHAR), 'guidance', [], false, '{now}'
            FROM range({n_docs}) t(d)""")
        con.execute(f"""
            INSERT INTO chunks (chunk_id, document_id, ordinal, heading_path, text, kind, text_sha256)
            SELECT 'synthdoc' || (i // {per_doc}) || ':' || (i % {per_doc}), 'synthdoc' || (i // {per_doc}),
                i % {per_doc}, ['Synthetic', 'Section ' || (i % {per_doc})],
                array_to_string(list_transform(range(40), lambda j: {words}[((hash(i * 41 + j) % {len(_WORDS)}) + 1)::BIGINT]), ' '),
                'guidance', md5(i::VARCHAR)
            FROM range({n_docs * per_doc}) t(i)""")
    rng = np.random.default_rng(0)
    index = store._index()
    doc = Document(document_id="x", source="x", title="x", sha256="x", kind=ChunkKind.guidance, ingested_at=now)
    step = 5000
    total = n_docs * per_doc
    for start in range(0, total, step):
        ids = [f"synthdoc{i // per_doc}:{i % per_doc}" for i in range(start, min(total, start + step))]
        vectors = rng.standard_normal((len(ids), 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        metas = []
        for cid in ids:
            did, ordinal = cid.split(":")
            c = Chunk(chunk_id=cid, document_id=did, ordinal=int(ordinal), heading_path=(), text="",
                      kind=ChunkKind.guidance, text_sha256="")
            metas.append(chunk_metadata(doc.model_copy(update={"document_id": did}), c))
        with store.db.locked():
            index.upsert("chunks", ids, vectors.tolist(), metas)


def scale(n_chunks: int = 100_000, n_outcomes: int = 1_000_000, n_queries: int = 60,
          store_dir: Optional[Path] = None) -> dict:
    from knowledge.ingest import ingest_builtin
    from knowledge.retrieve import ask
    from store import Store

    doc_questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    outcome_questions = ["what worked on MI300 for layernorm", "best rmsnorm on H100 in bf16", "softmax on A100",
                         "what worked on AMD for cross entropy", "GEMM epilogue speedups on B200"]
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


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m knowledge.bench")
    parser.add_argument("what", choices=("quality", "scale", "all"))
    parser.add_argument("--store", type=Path, default=None, help="quality: reuse this store; scale: build it here (empty) and keep it")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--outcomes", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for the embedding model (1 is faster on a loaded machine)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.what in ("quality", "all"):
        quality(args.store)
    if args.what in ("scale", "all"):
        scale(args.chunks, args.outcomes, args.queries, args.store)


if __name__ == "__main__":
    main()
