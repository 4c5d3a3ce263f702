"""Benchmarks of retrieval quality and scale. Prints tables; writes only into a temporary folder.

    python -m knowledge.bench quality [--store DIR]     recall@5 / MRR over both question sets
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
    marker = "/vendor_docs/"
    if marker in source:
        return str(Path(source.split(marker, 1)[1]).with_suffix(""))
    return Path(source).stem


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


def evaluate(store, questions: list[dict], k: int = 5) -> dict:
    """recall@k and MRR over distinct documents, excerpt hits, misses; questions as in the jsonl files."""
    from knowledge.aliases import canonical_devices, normalize_op, parse_query
    from knowledge.retrieve import ask

    hits = lenient_hits = excerpt_hits = with_answer = 0
    rr = 0.0
    misses, alias_misses, excerpt_misses = [], [], []
    latencies = []
    for q in questions:
        t = time.perf_counter()
        result = ask(store, q["question"], k=2 * k)
        latencies.append(time.perf_counter() - t)
        keys = _ranked_keys(result)[:k]
        rank = keys.index(q["expected"]) + 1 if q["expected"] in keys else None
        also = set(q.get("also", ()))
        hits += rank is not None
        lenient_hits += rank is not None or bool(also & set(keys))
        rr += 1.0 / rank if rank else 0.0
        if rank is None:
            misses.append((q["question"], q["expected"], ", ".join(keys)))
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
    return {
        "questions": n,
        "recall_at_5": hits / n,
        "recall_at_5_with_also": lenient_hits / n,
        "mrr": rr / n,
        "excerpt_shows_answer": excerpt_hits / with_answer if with_answer else None,
        "ask_ms_p50": 1e3 * statistics.median(latencies),
        "_misses": misses,
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
        ("_misses", "misses (expected not in the top 5 documents)", ("question", "expected", "got")),
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


def quality(store_dir: Optional[Path] = None, k: int = 5) -> dict:
    """Both question sets over one store holding the shipped hwdocs and the third-party-style fixture."""
    from knowledge.ingest import ingest_builtin
    from store import Store

    sets = {
        "shipped": [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()],
        "third-party": [json.loads(line) for line in VENDOR_QUESTIONS.read_text().splitlines() if line.strip()],
    }
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


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m knowledge.bench")
    parser.add_argument("what", choices=("quality", "latency", "scale", "all"))
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
        quality(args.store)
    if args.what in ("latency", "all"):
        latency(args.docs, args.sections, store_dir=args.store)
    if args.what in ("scale", "all"):
        scale(args.chunks, args.outcomes, args.queries, args.store)


if __name__ == "__main__":
    main()
