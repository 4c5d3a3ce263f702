"""Builders of realistic store rows, shared by the store tests (and run inside writer subprocesses).

Named test_store_* so that it stays among the store's test files; it defines no tests itself.
"""

from __future__ import annotations

import math
import sys
import uuid
from pathlib import Path

from evaluation.records import (
    Baseline,
    EvalResult,
    Fingerprint,
    Mismatch,
    ProblemInfo,
    ShapeCase,
    ShapeResult,
    Speedup,
    Stage,
    Status,
    TimedCase,
    TimingStats,
    Tolerance,
    source_sha256,
)
from store.records import (
    CandidateRecord,
    Chunk,
    ChunkKind,
    Document,
    OutcomeRecord,
    RunRecord,
    StopRule,
    utc_now,
)

TESTS_DIR = Path(__file__).resolve().parent


def fingerprint(arch: str = "sm_90", device_name: str = "NVIDIA H200") -> Fingerprint:
    return Fingerprint(
        device_kind="cuda",
        device_name=device_name,
        arch=arch,
        driver_version="570.86",
        cuda_version="12.8",
        triton_version="3.4.0",
        torch_version="2.11.0",
        python_version="3.12.3",
        kernelscout_version="0.1.0",
    )


def problem() -> ProblemInfo:
    return ProblemInfo(
        problem_id="p" * 16,
        name="layernorm",
        op_family="layernorm",
        source_path="evaluation/problems/layernorm.py",
        source_sha256="d" * 64,
        builtin=True,
        description="y = layer_norm(x) * w + b",
        shape_cases=(
            ShapeCase(
                case_id="M=8,N=256|float32", params={"M": 8, "N": 256}, dtype="float32", tags=("representative",)
            ),
            ShapeCase(case_id="M=7,N=97|float32", params={"M": 7, "N": 97}, dtype="float32", tags=("edge",)),
        ),
        dtypes=("float32",),
        tolerances={"float32": Tolerance(atol=1e-4, rtol=1e-4)},
        has_byte_model=True,
        seed_path="evaluation/seeds/layernorm.py",
    )


def run(run_id: str | None = None, *, op_family: str = "layernorm", arch: str = "sm_90") -> RunRecord:
    return RunRecord(
        run_id=run_id or uuid.uuid4().hex,
        problem_id="p" * 16,
        problem_name="layernorm",
        op_family=op_family,
        device="cuda",
        arch=arch,
        env_id=fingerprint(arch).key(),
        proposer="template",
        seed=7,
        stop_rule=StopRule(max_evaluations=200, max_minutes=30.0, target_speedup=1.5, stall_limit=40),
        started_at=utc_now(),
        config_json='{"budget": 200}',
    )


def candidate(run_id: str, n: int = 0, *, parent_id: str | None = None) -> CandidateRecord:
    source = f"# candidate {n}\nimport triton\nclass ModelNew:\n    BLOCK = {64 * (n + 1)}\n"
    return CandidateRecord(
        candidate_id=source_sha256(source),
        run_id=run_id,
        parent_id=parent_id,
        generation=n,
        proposer="template",
        prompt_template="refine.j2",
        prompt_sha256="a" * 64,
        rationale=f"try BLOCK={64 * (n + 1)}",
        transformation_tags=("block_size", "num_warps"),
        knobs_json=f'{{"BLOCK": {64 * (n + 1)}}}',
        policy_action="refine",
        policy_reason="best branch",
        source=source,
        created_at=utc_now(),
    )


def timing(p50: float) -> TimingStats:
    return TimingStats(
        latency_ms_p20=p50 * 0.97,
        latency_ms_p50=p50,
        latency_ms_p80=p50 * 1.04,
        latency_ms_min=p50 * 0.95,
        latency_ms_mean=p50 * 1.01,
        n_samples=100,
        n_warmup=10,
        l2_flushed=True,
        method="cuda_graph",
    )


def passed_result(candidate_id: str, *, p50: float = 0.0123456789012345, arch: str = "sm_90") -> EvalResult:
    cases = []
    for case_id, eager_p50, compile_p50 in (
        ("M=4096,N=4096|float32", 0.031, 0.02),
        ("M=8192,N=8192|float32", 0.12, 0.09),
    ):
        cand = timing(p50)
        speedups = (
            Speedup(
                baseline="eager",
                ratio=eager_p50 / p50,
                ratio_low=eager_p50 * 0.97 / (p50 * 1.04),
                ratio_high=eager_p50 * 1.04 / (p50 * 0.97),
                significant=True,
            ),
            Speedup(
                baseline="torch_compile",
                ratio=compile_p50 / p50,
                ratio_low=compile_p50 * 0.97 / (p50 * 1.04),
                ratio_high=compile_p50 * 1.04 / (p50 * 0.97),
                significant=True,
            ),
        )
        cases.append(
            TimedCase(
                case_id=case_id,
                params={"M": 4096, "N": 4096},
                dtype="float32",
                candidate=cand,
                baselines=(
                    Baseline(name="eager", timing=timing(eager_p50)),
                    Baseline(name="torch_compile", timing=timing(compile_p50)),
                ),
                speedups=speedups,
                bytes_moved=134217728,
                achieved_gbps=3141.592653589793,
                pct_of_ceiling=73.1415926535,
            )
        )
    return EvalResult(
        status=Status.passed,
        candidate_sha256=candidate_id,
        problem_id="p" * 16,
        problem_name="layernorm",
        device="cuda",
        shape_results=(
            ShapeResult(
                case_id="M=4096,N=4096|float32",
                params={"M": 4096, "N": 4096},
                dtype="float32",
                passed=True,
                trials=3,
                seeds=(1, 2, 3),
                atol=1e-4,
                rtol=1e-4,
                max_abs_error=1.2345678901234567e-06,
                max_rel_error=3.3e-07,
                numel=16777216,
            ),
        ),
        timing=tuple(cases),
        fingerprint=fingerprint(arch),
        started_at=utc_now(),
        duration_s=12.345678901234567,
        triton_launches=4,
        seeds=(1, 2, 3),
    )


def failed_result(candidate_id: str, *, arch: str = "sm_90") -> EvalResult:
    """An incorrect candidate that wrote NaN: the NaN must survive storage."""
    return EvalResult(
        status=Status.incorrect,
        failed_stage=Stage.correctness,
        error_class="Mismatch",
        message="max abs error nan at (3, 17)",
        stderr_tail="",
        candidate_sha256=candidate_id,
        problem_id="p" * 16,
        problem_name="layernorm",
        device="cuda",
        shape_results=(
            ShapeResult(
                case_id="M=7,N=97|float32",
                params={"M": 7, "N": 97},
                dtype="float32",
                passed=False,
                trials=1,
                seeds=(5,),
                atol=1e-4,
                rtol=1e-4,
                max_abs_error=math.nan,
                max_rel_error=math.inf,
                mismatch_count=12,
                numel=679,
                first_mismatch=Mismatch(index=(3, 17), expected=0.25, actual=math.nan),
                message="NaN where the reference has none",
            ),
        ),
        fingerprint=fingerprint(arch),
        started_at=utc_now(),
        duration_s=1.5,
    )


def outcome(
    n: int,
    *,
    op_family: str = "layernorm",
    arch: str = "sm_90",
    device_name: str = "NVIDIA H200",
    summary: str | None = None,
    speedup: float | None = 1.37,
) -> OutcomeRecord:
    return OutcomeRecord(
        outcome_id=f"out-{n}-{uuid.uuid4().hex[:8]}",
        op_family=op_family,
        problem_id="p" * 16,
        device_name=device_name,
        arch=arch,
        shape_bucket="M>=4096,N=4096..8191",
        dtype="bfloat16",
        transformation=f"rows_per_program={n}",
        candidate_id="c" * 64,
        baseline="eager",
        speedup=speedup,
        speedup_low=None if speedup is None else speedup * 0.95,
        speedup_high=None if speedup is None else speedup * 1.05,
        latency_ms_p50=0.0123456789,
        status="passed",
        triton_version="3.4.0",
        torch_version="2.11.0",
        evidence_eval_ids=("e1", "e2"),
        summary=summary or f"{op_family}: rows_per_program={n} gave {speedup}x over eager on {device_name}",
        created_at=utc_now(),
    )


def document(
    name: str, texts: list[str], *, sha: str | None = None, devices=("H200",), vendor: str = "nvidia"
) -> tuple[Document, list[Chunk]]:
    import hashlib

    doc_id = hashlib.sha256(name.encode()).hexdigest()[:16]
    body = "\n\n".join(texts)
    doc = Document(
        document_id=doc_id,
        source=f"hwdocs/{name}.md",
        title=name,
        vendor=vendor,
        devices=tuple(devices),
        doc_version="2025-01",
        sha256=sha or hashlib.sha256(body.encode()).hexdigest(),
        kind=ChunkKind.hardware,
        ingested_at=utc_now(),
    )
    chunks = [
        Chunk(
            chunk_id=f"{doc_id}:{i}",
            document_id=doc_id,
            ordinal=i,
            heading_path=(name, f"part {i}"),
            text=t,
            kind=ChunkKind.hardware,
            text_sha256=hashlib.sha256(t.encode()).hexdigest(),
        )
        for i, t in enumerate(texts)
    ]
    return doc, chunks


def write_many(home: str, tag: str, n: int, with_outcomes: int = 0) -> None:
    """Body of a writer process: one run, n candidates, an evaluation each, some outcomes."""
    from store import Store

    with Store.open(home) as store:
        r = run(f"run-{tag}")
        store.create_run(r)
        for i in range(n):
            c = candidate(r.run_id, i)
            c = c.model_copy(update={"source": c.source + f"# writer {tag}\n"})
            c = c.model_copy(update={"candidate_id": source_sha256(c.source)})
            store.add_candidate(c)
            store.add_evaluation(r.run_id, c.candidate_id, passed_result(c.candidate_id))
        for i in range(with_outcomes):
            store.add_outcome(outcome(i, summary=writer_summary(tag, i)))
        print(f"model_calls={store.embedder.model_calls}")


def writer_summary(tag: str, i: int) -> str:
    return f"writer {tag} outcome {i}: persistent grid on H200"


if __name__ == "__main__":  # python tests/test_store_factories.py HOME TAG N [OUTCOMES]
    sys.path.insert(0, str(TESTS_DIR.parent))
    write_many(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0)
