"""One definition of an evaluation's speedup (`EvalResult.measured_speedup`), and every reader agrees.

Before, the search (`stopping.measured_speedup`), the gate (`evidence.aggregate_speedup`), the store's
summary columns (`rows`) and `EvalResult.speedup` each computed it and disagreed at the edges: a failed
result, a case without the baseline, a non-positive ratio. The table below fixes each edge once.
"""

from __future__ import annotations

import math

import pytest

from agent.lifecycle.evidence import aggregate_speedup
from agent.search.stopping import measured_speedup
from evaluation.records import Baseline, EvalResult, Fingerprint, Speedup, Status, TimedCase, TimingStats
from store.rows import evaluation_rows

FP = Fingerprint(
    device_kind="cuda",
    device_name="NVIDIA H200",
    arch="sm_90",
    triton_version="3.6",
    torch_version="2.11",
    python_version="3.12",
    kernelscout_version="0.1.0",
)
CPU = Fingerprint(
    device_kind="cpu",
    device_name="cpu (triton interpreter)",
    arch="cpu",
    triton_version="3.9",
    torch_version="2.13",
    python_version="3.11",
    kernelscout_version="0.1.0",
    triton_interpret=True,
)
STATS = TimingStats(
    latency_ms_p20=1,
    latency_ms_p50=1,
    latency_ms_p80=1,
    latency_ms_min=1,
    latency_ms_mean=1,
    n_samples=10,
    n_warmup=2,
    l2_flushed=True,
    method="cuda_graph",
)


def result(*cases, status=Status.passed, fp=FP, note=None):
    """cases: one dict per timed case, baseline name -> (ratio, low, high)."""
    timing = tuple(
        TimedCase(
            case_id=f"c{i}",
            params={"M": 8 * (i + 1)},
            dtype="float32",
            candidate=STATS,
            baselines=tuple(Baseline(name=b, timing=STATS) for b in case),
            speedups=tuple(
                Speedup(baseline=b, ratio=r, ratio_low=lo, ratio_high=hi, significant=lo > 1 or hi < 1)
                for b, (r, lo, hi) in case.items()
            ),
        )
        for i, case in enumerate(cases)
    )
    return EvalResult(
        status=status,
        candidate_sha256="x",
        problem_id="p",
        problem_name="softmax",
        device=fp.device_kind,
        timing=timing,
        timing_note=note,
        fingerprint=fp,
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
    )


GM = math.sqrt
EDGES = [
    # (name, result, baseline, expected (ratio, low, high, significant) or None)
    (
        "two timed cases: geometric means of ratio and of each end",
        result({"eager": (2.0, 1.5, 2.5)}, {"eager": (0.5, 0.4, 0.6)}),
        "eager",
        (1.0, GM(1.5 * 0.4), GM(2.5 * 0.6), False),
    ),
    ("one case, a clear win", result({"eager": (1.3, 1.1, 1.5)}), "eager", (1.3, 1.1, 1.5, True)),
    ("a clear loss is significant too", result({"eager": (0.7, 0.6, 0.8)}), "eager", (0.7, 0.6, 0.8, True)),
    ("an interval crossing 1 is noise", result({"eager": (1.02, 0.98, 1.06)}), "eager", (1.02, 0.98, 1.06, False)),
    ("an interval touching 1 is noise", result({"eager": (1.05, 1.0, 1.1)}), "eager", (1.05, 1.0, 1.1, False)),
    ("no timing at all", result(), "eager", None),
    ("untimed CPU pass", result(fp=CPU, note="not measured on this device (cpu, Triton interpreter)"), "eager", None),
    (
        "a failed candidate with numbers left over",
        result({"eager": (3.0, 2.0, 4.0)}, status=Status.incorrect),
        "eager",
        None,
    ),
    ("baseline never timed", result({"eager": (2.0, 1.8, 2.2)}), "torch_compile", None),
    (
        "baseline missing in one case: no mean over a subset",
        result({"eager": (2.0, 1.8, 2.2), "torch_compile": (1.2, 1.1, 1.3)}, {"eager": (2.0, 1.8, 2.2)}),
        "torch_compile",
        None,
    ),
    (
        "the other baseline of the same result is still measured",
        result({"eager": (2.0, 1.8, 2.2), "torch_compile": (1.2, 1.1, 1.3)}, {"eager": (2.0, 1.8, 2.2)}),
        "eager",
        (2.0, 1.8, 2.2, True),
    ),
    ("a zero ratio is not a measurement", result({"eager": (0.0, 0.0, 0.0)}), "eager", None),
    ("an infinite ratio is not a measurement", result({"eager": (math.inf, 2.0, math.inf)}), "eager", None),
]


@pytest.mark.parametrize("name,res,baseline,expected", EDGES, ids=[e[0] for e in EDGES])
def test_every_reader_gives_the_one_speedup_at_the_edges(name, res, baseline, expected):
    m = res.measured_speedup(baseline)
    searched = measured_speedup(res, baseline)
    gated = aggregate_speedup(res, baseline)
    row, _, _ = evaluation_rows("e1", "r1", "x", "search", res, "2026-01-01T00:00:00+00:00")
    col = "eager" if baseline == "eager" else "compile"
    stored = (row[f"speedup_vs_{col}"], row[f"speedup_vs_{col}_low"], row[f"speedup_vs_{col}_high"])
    if expected is None:
        assert (m, searched, gated, res.speedup(baseline)) == (None, None, None, None)
        assert stored == (None, None, None)
        return
    ratio, low, high, significant = expected
    assert (m.ratio, m.ratio_low, m.ratio_high) == pytest.approx((ratio, low, high))
    assert m.significant is significant and m.baseline == baseline and m.n_cases == len(res.timing)
    assert searched == m and res.speedup(baseline) == m.ratio
    assert (gated.ratio, gated.ratio_low, gated.ratio_high) == (m.ratio, m.ratio_low, m.ratio_high)
    assert stored == (m.ratio, m.ratio_low, m.ratio_high)
