"""Records <-> table rows, without losing a bit on the way.

JSON text is written with `allow_nan=True`: a candidate that produces NaN puts NaN into its
`EvalResult` (a mismatch's `actual`), and pydantic's own JSON would turn it into `null`, which either
loses the value or fails to load back. Python's `json` writes and reads NaN and Infinity exactly.
"""

from __future__ import annotations

import enum
import json
import math
from typing import Any, Iterable, Optional, TypeVar

from pydantic import BaseModel

from evaluation.records import EvalResult, Fingerprint, ProblemInfo
from store.records import (
    CandidateRecord,
    Chunk,
    Document,
    FailurePattern,
    LLMCall,
    OutcomeRecord,
    PromotionEvent,
    RunRecord,
    StopRule,
    utc_now,
)

R = TypeVar("R", bound=BaseModel)


def plain(value: Any) -> Any:
    """A value DuckDB stores as is: enums by value, tuples as lists, nested records as JSON text."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, BaseModel):
        return dumps(value)
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


def dumps(record: BaseModel | dict | list) -> str:
    data = record.model_dump(mode="python") if isinstance(record, BaseModel) else record
    return json.dumps(data, allow_nan=True, default=_json_default, sort_keys=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"cannot store {type(value).__name__} as JSON")


def loads(text: str) -> Any:
    return json.loads(text)


def record_row(record: BaseModel, **extra: Any) -> dict[str, Any]:
    """Columns named after the record's fields, plus computed columns the caller adds."""
    row = {name: plain(getattr(record, name)) for name in type(record).model_fields}
    row.update(extra)
    return row


def from_row(cls: type[R], row: dict[str, Any], *, drop: Iterable[str] = ()) -> R:
    skip = set(drop)
    data = {k: v for k, v in row.items() if k in cls.model_fields and k not in skip}
    return cls.model_validate(data)


# -- per-type mappings ------------------------------------------------------------------------------


def environment_row(fp: Fingerprint) -> dict[str, Any]:
    return record_row(fp, env_id=fp.key(), fingerprint_json=dumps(fp), first_seen=utc_now())


def problem_row(p: ProblemInfo) -> dict[str, Any]:
    return {
        "problem_id": p.problem_id,
        "name": p.name,
        "op_family": p.op_family,
        "source_path": p.source_path,
        "source_sha256": p.source_sha256,
        "builtin": p.builtin,
        "description": p.description,
        "dtypes": list(p.dtypes),
        "shape_cases_json": dumps([c.model_dump(mode="python") for c in p.shape_cases]),
        "tolerances_json": dumps({k: t.model_dump(mode="python") for k, t in p.tolerances.items()}),
        "has_byte_model": p.has_byte_model,
        "has_flop_model": p.has_flop_model,
        "seed_path": p.seed_path,
        "info_json": dumps(p),
        "first_seen": utc_now(),
    }


def run_row(run: RunRecord) -> dict[str, Any]:
    row = record_row(run)
    row.pop("stop_rule")
    rule = run.stop_rule
    row.update(
        stop_rule_json=dumps(rule),
        max_evaluations=rule.max_evaluations,
        max_minutes=rule.max_minutes,
        target_speedup=rule.target_speedup,
        stall_limit=rule.stall_limit,
        max_cost_usd=rule.max_cost_usd,
    )
    return row


def run_from_row(row: dict[str, Any]) -> RunRecord:
    data = dict(row)
    data["stop_rule"] = StopRule.model_validate(loads(row["stop_rule_json"]))
    return from_row(RunRecord, data)


def candidate_row(c: CandidateRecord) -> dict[str, Any]:
    row = record_row(c)
    row.pop("source")  # lives once in candidate_sources
    return row


def candidate_from_row(row: dict[str, Any]) -> CandidateRecord:
    return from_row(CandidateRecord, row)


def evaluation_rows(
    eval_id: str, run_id: str, candidate_id: str, kind: str, result: EvalResult, recorded_at: str
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The evaluation row (summary columns + the full JSON) and its per-shape and per-case rows.

    The summary speedups are `EvalResult.measured_speedup()` (geometric means over timed cases of the
    ratio and of each interval end), so the store, the search and the gate read one number.
    """
    shapes = [
        {
            "eval_id": eval_id,
            "ordinal": i,
            "case_id": s.case_id,
            "dtype": s.dtype,
            "passed": s.passed,
            "trials": s.trials,
            "atol": s.atol,
            "rtol": s.rtol,
            "max_abs_error": s.max_abs_error,
            "max_rel_error": s.max_rel_error,
            "mismatch_count": s.mismatch_count,
            "numel": s.numel,
            "message": s.message,
        }
        for i, s in enumerate(result.shape_results)
    ]
    timings = []
    for i, t in enumerate(result.timing):
        base = {b.name: b for b in t.baselines}
        speed = {s.baseline: s for s in t.speedups}
        row = {
            "eval_id": eval_id,
            "ordinal": i,
            "case_id": t.case_id,
            "dtype": t.dtype,
            **{k: getattr(t.candidate, k) for k in type(t.candidate).model_fields},
            "eager_latency_ms_p50": _p50(base.get("eager")),
            "compile_latency_ms_p50": _p50(base.get("torch_compile")),
            "bytes_moved": t.bytes_moved,
            "flops": t.flops,
            "achieved_gbps": t.achieved_gbps,
            "achieved_tflops": t.achieved_tflops,
            "pct_of_ceiling": t.pct_of_ceiling,
            "baselines_json": dumps([b.model_dump(mode="python") for b in t.baselines]),
        }
        for col, name in (("eager", "eager"), ("compile", "torch_compile")):
            s = speed.get(name)
            row[f"speedup_vs_{col}"] = s.ratio if s else None
            row[f"speedup_vs_{col}_low"] = s.ratio_low if s else None
            row[f"speedup_vs_{col}_high"] = s.ratio_high if s else None
        timings.append(row)

    abs_errors = [s.max_abs_error for s in result.shape_results if s.max_abs_error is not None]
    rel_errors = [s.max_rel_error for s in result.shape_results if s.max_rel_error is not None]
    summary: dict[str, Any] = {}
    for col, name in (("eager", "eager"), ("compile", "torch_compile")):
        m = result.measured_speedup(name)  # the one definition; None where not measured
        summary[f"speedup_vs_{col}"] = m.ratio if m else None
        summary[f"speedup_vs_{col}_low"] = m.ratio_low if m else None
        summary[f"speedup_vs_{col}_high"] = m.ratio_high if m else None
    evaluation = {
        "eval_id": eval_id,
        "run_id": run_id,
        "candidate_id": candidate_id,
        "kind": kind,
        "env_id": result.fingerprint.key(),
        "problem_id": result.problem_id,
        "device": result.device,
        "status": result.status.value,
        "failed_stage": result.failed_stage.value if result.failed_stage else None,
        "error_class": result.error_class,
        "message": result.message,
        "stderr_tail": result.stderr_tail,
        "n_shapes": len(result.shape_results),
        "n_shapes_failed": sum(1 for s in result.shape_results if not s.passed),
        "max_abs_error": _nanmax(abs_errors),
        "max_rel_error": _nanmax(rel_errors),
        "n_timed_cases": len(result.timing),
        **summary,
        "timing_note": result.timing_note,
        "ceiling_gbps": result.ceiling_gbps,
        "triton_launches": result.triton_launches,
        "kernels_json": dumps([k.model_dump(mode="python") for k in result.kernels]),
        "started_at": result.started_at,
        "duration_s": result.duration_s,
        "recorded_at": recorded_at,
        "result_json": dumps(result),
    }
    return evaluation, shapes, timings


def _p50(baseline) -> Optional[float]:
    return baseline.timing.latency_ms_p50 if baseline is not None and baseline.timing else None


def _nanmax(values: list[float]) -> Optional[float]:
    """The worst error, where NaN (a candidate that produced NaN) is worse than any number."""
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        return math.nan
    return max(values)


def evaluation_from_row(row: dict[str, Any]) -> EvalResult:
    return EvalResult.model_validate(loads(row["result_json"]))


def outcome_from_row(row: dict[str, Any]) -> OutcomeRecord:
    return from_row(OutcomeRecord, row)


def failure_from_row(row: dict[str, Any]) -> FailurePattern:
    return from_row(FailurePattern, row)


def document_from_row(row: dict[str, Any]) -> Document:
    return from_row(Document, row)


def chunk_from_row(row: dict[str, Any]) -> Chunk:
    return from_row(Chunk, row)


def llm_call_from_row(row: dict[str, Any]) -> LLMCall:
    return from_row(LLMCall, row)


def promotion_from_row(row: dict[str, Any]) -> PromotionEvent:
    return from_row(PromotionEvent, row)
