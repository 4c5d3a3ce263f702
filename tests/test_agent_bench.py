"""`python -m agent.search.bench` on the CPU: a tiny search per problem, one CSV row each, no speed claimed."""

import csv
import shutil

from agent.search.bench import CSV_FIELDS, NOT_MEASURED, main, pick_case


def test_pick_case_takes_the_first_cpu_case_or_the_named_one():
    assert pick_case("layernorm", "cpu", "bfloat16") == "M=8,N=256|bfloat16"
    assert pick_case("layernorm", "cuda", "bfloat16") == "M=4096,N=4096|bfloat16"
    assert pick_case("layernorm", "cuda", "bfloat16", "M=16384,N=2048") == "M=16384,N=2048|bfloat16"


def test_bench_on_the_cpu_writes_one_row_with_speed_columns_not_measured(hwdocs_store_template, tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(hwdocs_store_template, store)  # the shipped docs are already embedded: no 20 s ingest
    out = tmp_path / "out"

    assert (
        main(
            [
                "--problems",
                "layernorm",
                "--budget",
                "2",
                "--trials",
                "1",
                "--device",
                "cpu",
                "--out",
                str(out),
                "--store",
                str(store),
            ]
        )
        == 0
    )

    with open(out / "bench_search.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and tuple(rows[0]) == CSV_FIELDS
    row = rows[0]
    assert (row["problem"], row["case"], row["dtype"]) == ("layernorm", "M=8,N=256", "bfloat16")
    assert row["evaluations"] == "2"
    assert len(row["best_candidate"]) == 12  # the first passing candidate (correctness only)
    for col in (
        "best_p50_ms",
        "gbps",
        "pct_of_copy_ceiling",
        "speedup_vs_eager",
        "speedup_vs_torch_compile",
        "speedup_vs_seed",
        "evals_to_within_5pct",
    ):
        assert row[col] == NOT_MEASURED, col
    captured = capsys.readouterr()
    assert "[1/1] layernorm M=8,N=256|bfloat16" in captured.err
    assert "not measured" in captured.out


def test_a_timed_run_row_takes_speeds_from_the_remeasure_and_the_seed_from_the_same_process(tmp_path):
    """The GPU path, from a recorded H200 evaluation written into a real store: no device needed."""
    from pathlib import Path

    from test_lifecycle_support import make_run, variant

    import evaluation
    from agent.search.bench import summarize_run
    from evaluation.records import EvalResult, source_sha256
    from store import Store
    from store.records import CandidateRecord, RunStatus, utc_now

    case = "M=4096,N=4096|bfloat16"
    recorded = EvalResult.model_validate_json(
        (Path(__file__).parent / "eval_fixtures" / "h200_layernorm_seed.json").read_text()
    )
    seed = recorded.model_copy(update={"timing": tuple(t for t in recorded.timing if t.case_id == case)})

    def faster(result, factor, source):  # the same timings with the candidate `factor` times faster
        t = result.timing[0]
        c = t.candidate.model_copy(
            update={
                "latency_ms_p50": t.candidate.latency_ms_p50 / factor,
                "latency_ms_p20": t.candidate.latency_ms_p20 / factor,
                "latency_ms_p80": t.candidate.latency_ms_p80 / factor,
            }
        )
        sp = tuple(s.model_copy(update={"ratio": s.ratio * factor}) for s in t.speedups)
        return result.model_copy(
            update={
                "timing": (t.model_copy(update={"candidate": c, "speedups": sp}),),
                "candidate_sha256": source_sha256(source),
            }
        )

    sources = {name: variant(i) for i, name in enumerate(("seed", "slow", "good", "best"))}
    with Store.open(tmp_path / "store") as store:
        run = make_run(store, evaluation.load_problem("layernorm", device="cuda"), recorded.fingerprint)
        for name, src in sources.items():
            store.add_candidate(
                CandidateRecord(
                    candidate_id=source_sha256(src),
                    run_id=run.run_id,
                    generation=0,
                    proposer="seed" if name == "seed" else "template",
                    source=src,
                    created_at=utc_now(),
                )
            )
        for name, factor in (("seed", 1.0), ("slow", 0.5), ("good", 1.2), ("best", 1.25)):
            store.add_evaluation(run.run_id, source_sha256(sources[name]), faster(seed, factor, sources[name]))
        for name, factor in (("best", 1.3), ("seed", 1.02)):
            store.add_evaluation(
                run.run_id, source_sha256(sources[name]), faster(seed, factor, sources[name]), kind="remeasure"
            )
        store.finish_run(
            run.run_id,
            status=RunStatus.finished,
            stop_reason="evaluation_budget",
            best_candidate_id=source_sha256(sources["best"]),
        )
        row = summarize_run(store, run.run_id, case)
    t = seed.timing[0]
    eager = {s.baseline: s.ratio for s in t.speedups}
    p50 = t.candidate.latency_ms_p50 / 1.3
    assert (row["case"], row["dtype"], row["best_candidate"]) == (
        "M=4096,N=4096",
        "bfloat16",
        source_sha256(sources["best"])[:12],
    )
    assert row["evaluations"] == 4
    assert row["timing_source"] == "remeasure" and abs(row["best_p50_ms"] - p50) < 1e-12
    assert abs(row["gbps"] - t.achieved_gbps) < 1e-6  # the stored GB/s of that case, as every view shows it
    assert abs(row["speedup_vs_eager"] - eager["eager"] * 1.3) < 1e-9
    assert abs(row["speedup_vs_torch_compile"] - eager["torch_compile"] * 1.3) < 1e-9  # the same re-measure
    assert abs(row["speedup_vs_seed"] - 1.3 / 1.02) < 1e-9 and row["seed_source"] == "remeasure (same process)"
    assert row["evals_to_within_5pct"] == 3  # 1.2 >= 0.95 * 1.25
