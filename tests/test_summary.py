"""The one read model of a run (agent.search.summary): the verdict names eager and torch.compile from the
same re-measure, covers every timed case (geomean and worst), says which timed cases it leaves out,
and the kernel file built from it stays a valid candidate. GPU evaluations are written as the
evaluator's records with the values an H200 run would carry; the store is real."""

from __future__ import annotations

import ast

import pytest
from test_lifecycle_support import gpu_fp, make_run, result, variant

import evaluation
from agent.search import kernelfile
from agent.search.summary import summarize, verdict_line
from evaluation.records import Baseline, Speedup, TimedCase, TimingStats, source_sha256
from store import Store
from store.records import CandidateRecord, RunStatus, utc_now


def _stats(p50: float) -> TimingStats:
    return TimingStats(
        latency_ms_p20=p50 * 0.99,
        latency_ms_p50=p50,
        latency_ms_p80=p50 * 1.01,
        latency_ms_min=p50 * 0.98,
        latency_ms_mean=p50,
        n_samples=5,
        n_warmup=10,
        l2_flushed=True,
        method="cuda_graph",
    )


def _case(case, p50: float, eager_ms: float, compile_ms: float | None, gbps: float) -> TimedCase:
    baselines = [Baseline(name="eager", timing=_stats(eager_ms))]
    speedups = [
        Speedup(
            baseline="eager",
            ratio=eager_ms / p50,
            ratio_low=eager_ms / p50 * 0.97,
            ratio_high=eager_ms / p50 * 1.03,
            significant=True,
        )
    ]
    if compile_ms is not None:
        baselines.append(Baseline(name="torch_compile", timing=_stats(compile_ms)))
        r = compile_ms / p50
        speedups.append(
            Speedup(
                baseline="torch_compile",
                ratio=r,
                ratio_low=r * 0.97,
                ratio_high=r * 1.03,
                significant=r * 0.97 > 1 or r * 1.03 < 1,
            )
        )
    return TimedCase(
        case_id=case.case_id,
        params=case.params,
        dtype=case.dtype,
        candidate=_stats(p50),
        baselines=tuple(baselines),
        speedups=tuple(speedups),
        bytes_moved=1,
        achieved_gbps=gbps,
        pct_of_ceiling=100.0 * gbps / 4000.0,
    )


@pytest.fixture
def gpu_run(tmp_path):
    """seed + best on layernorm (cuda shape set, 6 timed cases); the re-measure covers 2 of them."""
    problem = evaluation.load_problem("layernorm", device="cuda")
    timed = [c for c in problem.shape_cases if "timed" in c.tags]
    fp = gpu_fp()
    seed_src, best_src = variant(0), variant(1)
    with Store.open(tmp_path / "store") as st:
        run = make_run(st, problem, fp)
        for src, proposer in ((seed_src, "seed"), (best_src, "template")):
            st.add_candidate(
                CandidateRecord(
                    candidate_id=source_sha256(src),
                    run_id=run.run_id,
                    generation=0,
                    proposer=proposer,
                    source=src,
                    created_at=utc_now(),
                )
            )
        st.add_evaluation(
            run.run_id,
            source_sha256(seed_src),
            result(problem, seed_src, fp, timed=[_case(c, 1.0, 1.5, 1.2, 3000) for c in timed]),
        )
        st.add_evaluation(
            run.run_id,
            source_sha256(best_src),
            result(problem, best_src, fp, timed=[_case(c, 0.8, 1.5, None, 3600) for c in timed]),
        )
        # the re-measure: x eager 2.0 and 1.5, x compile 1.25 and 0.9 (the worst case is below compile)
        remeasured = [_case(timed[0], 0.5, 1.0, 0.625, 3900), _case(timed[1], 1.0, 1.5, 0.9, 3000)]
        st.add_evaluation(
            run.run_id,
            source_sha256(best_src),
            result(problem, best_src, fp, shapes=(), timed=remeasured),
            kind="remeasure",
        )
        st.add_evaluation(
            run.run_id,
            source_sha256(seed_src),
            result(
                problem,
                seed_src,
                fp,
                shapes=(),
                timed=[_case(timed[0], 0.6, 1.0, 0.625, 3500), _case(timed[1], 1.2, 1.5, 0.9, 2800)],
            ),
            kind="remeasure",
        )
        st.finish_run(
            run.run_id,
            status=RunStatus.finished,
            stop_reason="evaluation_budget",
            best_candidate_id=source_sha256(best_src),
        )
        yield st, run, timed, best_src


def test_verdict_names_eager_and_compile_with_geomean_and_worst_case_from_the_remeasure(gpu_run):
    st, run, timed, _ = gpu_run
    s = summarize(st, run.run_id)
    v = s.best.verdict
    assert v.numbers_from == "remeasure" and [a.baseline for a in v.across] == ["eager", "torch_compile", "seed"]
    eager, comp, seed = v.vs("eager"), v.vs("torch_compile"), v.vs("seed")
    assert eager.geomean.ratio == pytest.approx((2.0 * 1.5) ** 0.5) and eager.worst.ratio == pytest.approx(1.5)
    assert comp.geomean.ratio == pytest.approx((1.25 * 0.9) ** 0.5)
    assert (comp.worst.ratio, comp.worst_case_id) == (pytest.approx(0.9), timed[1].case_id)
    assert comp.worst.significant and comp.worst.high < 1.0  # a loss to torch.compile outside the noise
    assert seed.geomean.ratio == pytest.approx((1.2 * 1.2) ** 0.5)  # seed p50 / best p50, same re-measure
    assert v.pct_of_copy_worst == pytest.approx(75.0) and v.pct_of_copy_worst_case == timed[1].case_id
    assert v.uncovered_cases == tuple(c.case_id for c in timed[2:])
    line = verdict_line(v)
    assert "vs eager (geomean of 2 cases; worst 1.50x at" in line and "vs torch.compile" in line
    assert f"not timed on {len(timed) - 2} of the problem's timed cases" in line
    assert s.note.startswith("best re-measured interleaved with its baselines")


def test_json_of_the_summary_carries_the_compile_verdict_and_significance(gpu_run):
    st, run, _, _ = gpu_run
    data = summarize(st, run.run_id).model_dump(mode="json")
    comp = next(a for a in data["best"]["verdict"]["across"] if a["baseline"] == "torch_compile")
    assert comp["worst"]["significant"] is True and comp["cases"] == 2
    assert all("|" in c["case_id"] for c in data["best"]["verdict"]["cases"])  # the dtype in every case label


def test_kernel_file_header_is_comments_only_and_states_the_verdict(gpu_run, tmp_path):
    st, run, _, best_src = gpu_run
    s = summarize(st, run.run_id)
    path = kernelfile.write(s, s.in_hand, best_src, tmp_path / "k.py")
    text = path.read_text()
    head, _, body = text.partition("\n\n")
    assert body == best_src and all(line.startswith("# ") for line in head.splitlines())
    assert ast.parse(text)  # still a module that defines ModelNew
    assert "NVIDIA H200 (sm_90)" in head and "driver 575.57.08, CUDA 12.9, torch 2.8.0+cu129" in head
    assert f"run {run.run_id}, candidate {source_sha256(best_src)}" in head
    assert "vs torch.compile" in head and "vs eager" in head
    assert f"re-evaluate: kscout eval {path} --problem layernorm --device cuda" in head


def test_kernel_file_header_says_how_to_run_the_kernel_on_a_cpu(gpu_run, tmp_path):
    st, run, _, best_src = gpu_run
    s = summarize(st, run.run_id)
    head = kernelfile.render(s, s.in_hand, best_src, "k.py").partition("\n\n")[0].splitlines()
    assert head[-2:] == [
        "# on a CPU: set TRITON_INTERPRET=1 before this file is imported (e.g. TRITON_INTERPRET=1 python app.py), "
        "so that Triton's interpreter runs its kernels; kscout eval sets it itself",
        "# (this header is comments only; below it is the candidate exactly as it was evaluated)",
    ]
