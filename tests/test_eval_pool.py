"""Warm workers (evaluation/pool.py), search contexts (evaluation/context.py) and the pipelined judge,
on the CPU with real worker processes (sandboxed where bubblewrap works here)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from evaluation import evaluate, harness, load_problem, phases, pool, protocol, time_many
from evaluation.context import SearchContext, plant_kernels
from evaluation.isolation import resolve_sandbox
from evaluation.records import Status

ROOT = Path(__file__).parent.parent
SEED = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()
SMALL = {"M": 2}


@pytest.fixture
def warm(monkeypatch):
    """One warm worker kept for the CPU (the default keeps none there)."""
    monkeypatch.setenv("KSCOUT_WARM_WORKERS", "1")
    pool.close_all()
    isolation = resolve_sandbox(None, "cpu")
    yield pool.pool("cpu", isolation, harness.scratch_root())
    pool.close_all()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _facts(result):
    return (
        result.status,
        [(r.case_id, r.passed, r.max_abs_error, r.seeds) for r in result.shape_results],
        [k.name for k in result.kernels],
        result.triton_launches,
    )


def test_the_default_keeps_no_warm_worker_on_a_cpu_and_a_number_overrides_it(monkeypatch):
    monkeypatch.delenv("KSCOUT_WARM_WORKERS", raising=False)
    assert pool.warm_count("cpu") == 0
    monkeypatch.setenv("KSCOUT_WARM_WORKERS", "3")
    assert pool.warm_count("cpu") == 3
    monkeypatch.setenv("KSCOUT_WARM_WORKERS", "off")
    assert pool.warm_count("cuda") == 0
    monkeypatch.setenv("KSCOUT_WARM_WORKERS", "many")
    with pytest.raises(ValueError, match="KSCOUT_WARM_WORKERS must be auto, off or a number"):
        pool.warm_count("cpu")


@pytest.mark.slow  # real evaluations: 5 s or more on the 2-core machine
def test_a_warm_worker_gives_the_verdict_a_fresh_worker_gives(warm, monkeypatch):
    warm.fill()
    pooled = evaluate(SEED, "layernorm", device="cpu", trials=1, seed=42, overrides=SMALL)
    assert warm.handed == 1
    monkeypatch.setenv("KSCOUT_WARM_WORKERS", "0")
    pool.close_all()
    fresh = evaluate(SEED, "layernorm", device="cpu", trials=1, seed=42, overrides=SMALL)
    assert pooled.status is Status.passed, pooled.message
    assert _facts(pooled) == _facts(fresh)


def test_a_warm_sandboxed_worker_reads_inputs_written_after_it_started_under_a_strict_umask(warm):
    """The request's inputs are written once the worker waits; under umask 077 only the parent could
    read them until `start` opens them to the sandbox's uid (a regression: the shared transport's
    set-up once took that step's place)."""
    warm.fill()
    before = os.umask(0o077)
    try:
        result = evaluate(SEED, "layernorm", device="cpu", trials=1, seed=42, overrides=SMALL)
    finally:
        os.umask(before)
    assert warm.handed == 1
    assert result.status is Status.passed, result.message


@pytest.mark.slow  # real evaluations: 5 s or more on the 2-core machine
def test_each_warm_worker_runs_one_request_and_a_new_one_takes_its_place(warm):
    warm.fill()
    first = warm.idle[0].worker
    first_pid = first.proc.pid
    result = evaluate(SEED, "layernorm", device="cpu", trials=1, seed=7, overrides=SMALL)
    assert result.status is Status.passed, result.message
    assert not _alive(first_pid)  # it ran this candidate and exited
    assert not first.scratch.root.exists()  # its scratch folder went with it
    replacement = warm.idle[0].worker
    assert replacement.proc.pid != first_pid and replacement.alive()
    assert (warm.spawned, warm.handed) == (2, 1)


def test_a_warm_worker_started_under_other_settings_is_discarded_not_used(warm, monkeypatch):
    warm.fill()
    stale = warm.idle[0].worker
    monkeypatch.setenv("KSCOUT_WORKER_FILE_MB", "64")  # other limits: a worker started now differs
    taken = warm.take()
    try:
        assert taken is not stale and taken.proc.pid != stale.proc.pid
        assert taken.limits.file_size_bytes == 64 << 20
        deadline = time.monotonic() + 5
        while stale.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stale.proc.poll() is not None  # killed, its scratch folder removed
        assert not stale.scratch.root.exists()
    finally:
        taken.finish(stopped=True)
        taken.scratch.cleanup()


def test_a_warm_worker_nobody_needs_exits_when_the_pool_closes(warm):
    warm.fill()
    worker = warm.idle[0].worker
    pool.close_all()
    worker.proc.wait(timeout=10)
    assert worker.proc.returncode is not None and not worker.scratch.root.exists()


@pytest.mark.slow  # real evaluations: 5 s or more on the 2-core machine
def test_the_time_limit_of_a_warm_worker_counts_from_its_request(warm):
    warm.fill()
    time.sleep(2.0)  # idle in the pool for 2 s: none of it may count against the candidate
    never = (ROOT / "tests" / "adversarial" / "cheat_never_returns.py").read_text()
    started = time.monotonic()
    result = evaluate(never, "layernorm", device="cpu", trials=1, seed=1, overrides=SMALL, timeout_s=6.0)
    assert result.status is Status.timed_out and "6 s limit" in result.message
    assert time.monotonic() - started >= 6.0


@pytest.mark.slow  # real evaluations: 5 s or more on the 2-core machine
def test_a_search_context_judges_every_candidate_on_one_seed_and_reuses_its_references():
    info = load_problem("layernorm", "cpu", overrides=SMALL)
    with SearchContext(scratch_root=harness.scratch_root()) as ctx:
        first = evaluate(SEED, info, device="cpu", trials=1, context=ctx)
        refs = ctx.references(info, "cpu")
        reused_before = refs.reused
        sibling = SEED + "\n# a sibling: same kernels, another candidate\n"
        second = evaluate(sibling, info, device="cpu", trials=1, context=ctx)
        judged = sum(r.trials for r in second.shape_results)
        assert refs.reused - reused_before == judged  # every judgement of the second from kept outputs
        with pytest.raises(ValueError, match="uses the context's seed"):
            evaluate(SEED, info, device="cpu", trials=1, seed=ctx.seed + 1, context=ctx)
    assert first.status is second.status is Status.passed
    assert [r.seeds for r in first.shape_results] == [r.seeds for r in second.shape_results]
    assert first.shape_results[0].seeds[0] == ctx.seed
    assert [r.max_abs_error for r in first.shape_results] == [r.max_abs_error for r in second.shape_results]


@pytest.mark.slow  # real evaluations: 5 s or more on the 2-core machine
def test_a_wrong_candidate_is_still_refused_when_its_references_are_kept():
    info = load_problem("layernorm", "cpu", overrides=SMALL)
    zeros = (ROOT / "tests" / "adversarial" / "cheat_zeros.py").read_text()
    with SearchContext() as ctx:
        assert evaluate(SEED, info, device="cpu", trials=1, context=ctx).status is Status.passed
        wrong = evaluate(zeros, info, device="cpu", trials=1, context=ctx)
        assert ctx.references(info, "cpu").reused > 0
    assert (wrong.status, wrong.error_class) == (Status.incorrect, "ValueMismatch")


def test_kept_references_stop_at_their_budget_instead_of_evicting():
    info = load_problem("layernorm", "cpu", overrides=SMALL)
    import torch

    from evaluation.correctness import References

    refs = References(info, "cpu", 5, keep_bytes=3 * 8 * 100)
    case = info.shape_cases[0]
    trials = [protocol.Trial(seed=s) for s in range(5)]
    for t in trials:
        refs.keep(case, t, torch.zeros(100, dtype=torch.float64))
    assert [refs.kept(case, t) is not None for t in trials] == [True, True, True, False, False]


def test_searches_side_by_side_keep_references_within_one_shared_budget_and_give_it_back():
    import torch

    from evaluation.context import SearchContext, shared_budget
    from evaluation.correctness import KeepBudget, References

    info = load_problem("layernorm", "cpu", overrides=SMALL)
    case = info.shape_cases[0]
    trials = [protocol.Trial(seed=s) for s in range(4)]
    shared = KeepBudget(3 * 8 * 100)
    first = References(info, "cpu", 5, keep_bytes=1 << 30, shared=shared)
    second = References(info, "cpu", 5, keep_bytes=1 << 30, shared=shared)
    for t in trials[:2]:
        first.keep(case, t, torch.zeros(100, dtype=torch.float64))
    for t in trials:
        second.keep(case, t, torch.zeros(100, dtype=torch.float64))
    # each alone would keep all four; together they keep three, the first search's two first
    assert [second.kept(case, t) is not None for t in trials] == [True, False, False, False]
    assert shared.used == 3 * 8 * 100 and shared.full()
    first.forget()
    assert shared.used == 8 * 100 and first.kept(case, trials[0]) is None
    first.keep(case, trials[3], torch.zeros(100, dtype=torch.float64))  # a search that is over keeps nothing
    assert first.kept(case, trials[3]) is None and shared.used == 8 * 100
    second.keep(case, trials[1], torch.zeros(100, dtype=torch.float64))
    assert second.kept(case, trials[1]) is not None and shared.used == 2 * 8 * 100

    # two search contexts of one process draw on the device's one budget, and closing gives it back
    budget = shared_budget("cpu")
    before = budget.used
    with SearchContext(1) as a, SearchContext(2) as b:
        ra, rb = a.references(info, "cpu"), b.references(info, "cpu")
        assert ra.shared is budget and rb.shared is budget
        ra.keep(case, trials[0], torch.zeros(100, dtype=torch.float64))
        rb.keep(case, trials[0], torch.zeros(100, dtype=torch.float64))
        assert budget.used == before + 2 * 8 * 100
    assert budget.used == before


def test_judges_of_one_trial_at_once_compute_its_reference_once_and_all_get_the_same_verdict(monkeypatch):
    import threading

    import torch

    from evaluation.correctness import Judge, References
    from evaluation.inputs import trial_inputs

    info = load_problem("layernorm", "cpu", overrides=SMALL)
    refs = References(info, "cpu", 5, keep_bytes=1 << 30)
    case, trial = info.shape_cases[0], protocol.Trial(seed=11)
    right = refs.expected(case, trial_inputs(refs.module(case.params), case.dtype, trial, "cpu"))
    blob, strides = protocol.package_bytes(right.to(getattr(torch, case.dtype)))
    computed = []
    original = References.expected

    def slow_expected(self, *args, **kwargs):
        computed.append(1)
        time.sleep(0.3)  # long enough for every other judge to arrive while this one computes
        return original(self, *args, **kwargs)

    monkeypatch.setattr(References, "expected", slow_expected)
    verdicts = []
    judges = [
        threading.Thread(target=lambda: verdicts.append(Judge(refs, "cpu").judge(case, trial, blob, strides)))
        for _ in range(6)
    ]
    for j in judges:
        j.start()
    for j in judges:
        j.join()
    assert len(computed) == 1 and refs.reused == 5
    assert len(verdicts) == 6 and all(v.passed for v in verdicts)


@pytest.mark.slow  # real evaluations: 5 s or more on the 2-core machine
def test_baselines_timed_once_in_a_search_are_quoted_for_the_next_batch(monkeypatch):
    monkeypatch.setattr(harness, "HOST_TIMING", True)  # the timing stage's checks on the CPU clock
    info = load_problem(
        "layernorm",
        "cpu",
        overrides=SMALL,
        timed=[load_problem("layernorm", "cpu", overrides=SMALL).shape_cases[0].case_id],
    )
    with SearchContext() as ctx, phases.recording() as rows:
        checked = [
            evaluate(s, info, device="cpu", trials=1, time_it=False, context=ctx) for s in (SEED, SEED + "\n#2\n")
        ]
        one = time_many([(SEED, checked[0])], info, device="cpu", baselines=("eager",), context=ctx)
        two = time_many([(SEED + "\n#2\n", checked[1])], info, device="cpu", baselines=("eager",), context=ctx)
    roles = [r["role"] for r in rows]
    assert roles.count("baselines") == 1 and roles.count("timing") == 2
    assert one[0].status is two[0].status is Status.passed
    eager = [r.timing[0].baselines[0].timing for r in (one[0], two[0])]
    assert eager[0] == eager[1]  # the same measurement, quoted twice
    assert ctx.baselines_reused == 1


def test_planted_kernel_caches_point_their_groups_at_the_new_folder(tmp_path):
    kept = tmp_path / "kept"
    entry = kept / "KEY123"
    entry.mkdir(parents=True)
    (entry / "k.cubin").write_bytes(b"cubin")
    old = "/old/scratch/out/.triton-cache/KEY123/k.cubin"
    (entry / "__grp__k.json").write_text('{"child_paths": {"k.cubin": "%s"}}' % old)
    target = tmp_path / "worker" / ".triton-cache"
    assert plant_kernels([kept], target) == 1
    import json

    group = json.loads((target / "KEY123" / "__grp__k.json").read_text())
    assert group["child_paths"] == {"k.cubin": str(target / "KEY123" / "k.cubin")}
    assert (target / "KEY123" / "k.cubin").read_bytes() == b"cubin"
    assert oct(os.stat(target).st_mode & 0o777) == "0o777"  # the sandbox's uid may add entries


def test_the_pipelined_judge_sees_every_message_in_order_and_stops_at_the_verdict():
    seen = []

    def on_message(message, blob):
        seen.append(message.index)
        time.sleep(0.01)
        return message.index == 3

    heard = {"parent_s": 0.0}
    judge = harness._Pipelined(on_message, heard)
    answers = []
    for i in range(8):
        answers.append(judge.put(protocol.Outputs(index=i, phase="trial"), b""))
        time.sleep(0.02 if i < 4 else 0)
    judge.close()
    assert seen == [0, 1, 2, 3]  # in order, and nothing judged after the verdict
    assert answers[:4] == [False] * 4 and all(answers[5:])
    assert heard["parent_s"] > 0.03


def test_a_harness_fault_in_the_pipelined_judge_is_raised_at_close():
    def on_message(message, blob):
        raise KeyError("bad table")

    judge = harness._Pipelined(on_message, {"parent_s": 0.0})
    judge.put(protocol.Outputs(index=0, phase="trial"), b"")
    with pytest.raises(KeyError, match="bad table"):
        judge.close()


# -- the file transport (protocol.OUTPUT FILES) ---------------------------------------------------


def test_output_files_round_trip_in_chunks_and_are_deleted_once_read(tmp_path):
    parts = [b"H" * 100, bytes(range(256)) * 10, b"T" * 7]
    names, total = protocol.write_output_files(tmp_path, 5, parts, chunk_bytes=1000, budget_bytes=1 << 20)
    assert total == 100 + 2560 + 7 and names == [f"o5-{i}.bin" for i in range(3)]
    blob = protocol.read_output_files(tmp_path, names, total)
    assert bytes(blob) == b"".join(parts)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("tamper", ["grown", "renamed", "link", "missing", "short"])
def test_output_files_that_differ_from_their_frame_are_refused(tmp_path, tamper):
    names, total = protocol.write_output_files(tmp_path, 1, [b"x" * 500], chunk_bytes=1 << 20, budget_bytes=1 << 20)
    path = tmp_path / names[0]
    declared = total
    if tamper == "grown":
        path.write_bytes(b"x" * 600)
    elif tamper == "renamed":
        names = ["../" + names[0]]
    elif tamper == "link":
        path.unlink()
        (tmp_path / "elsewhere").write_bytes(b"x" * 500)
        path.symlink_to(tmp_path / "elsewhere")
    elif tamper == "missing":
        path.unlink()
    else:
        declared = total + 1
    with pytest.raises(protocol.ProtocolError):
        protocol.read_output_files(tmp_path, names, declared)


def test_a_worker_waits_while_its_earlier_output_files_exceed_the_budget(tmp_path):
    import threading

    protocol.write_output_files(tmp_path, 1, [b"a" * 800], chunk_bytes=1 << 20, budget_bytes=1000)
    threading.Timer(0.3, lambda: (tmp_path / "o1-0.bin").unlink()).start()
    started = time.monotonic()
    protocol.write_output_files(tmp_path, 2, [b"b" * 800], chunk_bytes=1 << 20, budget_bytes=1000)
    assert time.monotonic() - started >= 0.25  # it waited for the parent to take the first
    assert [p.name for p in tmp_path.iterdir()] == ["o2-0.bin"]


@pytest.mark.slow  # real evaluations: 5 s or more on the 2-core machine
def test_outputs_through_files_give_the_verdict_the_pipe_gives(monkeypatch):
    monkeypatch.setenv("KSCOUT_WORKER_FILE_MB", "1")  # chunked files under the worker's file-size limit
    monkeypatch.setenv("KSCOUT_OUTPUT_TRANSPORT", "file")
    by_file = evaluate(SEED, "layernorm", device="cpu", trials=1, seed=42)
    monkeypatch.setenv("KSCOUT_OUTPUT_TRANSPORT", "pipe")
    by_pipe = evaluate(SEED, "layernorm", device="cpu", trials=1, seed=42)
    assert by_file.status is Status.passed, by_file.message
    assert _facts(by_file) == _facts(by_pipe)
    monkeypatch.setenv("KSCOUT_OUTPUT_TRANSPORT", "carrier pigeon")
    with pytest.raises(ValueError, match="KSCOUT_OUTPUT_TRANSPORT must be auto, shared, pipe or file"):
        evaluate(SEED, "layernorm", device="cpu", trials=1, seed=42, overrides=SMALL)


def test_a_wrong_candidate_is_refused_through_output_files(monkeypatch):
    monkeypatch.setenv("KSCOUT_OUTPUT_TRANSPORT", "file")
    zeros = (ROOT / "tests" / "adversarial" / "cheat_zeros.py").read_text()
    wrong = evaluate(zeros, "layernorm", device="cpu", trials=1, seed=3, overrides=SMALL)
    assert (wrong.status, wrong.error_class) == (Status.incorrect, "ValueMismatch")


def test_output_files_that_changed_under_their_frame_make_the_result_forged(tmp_path):
    seen = []
    judge = harness._Pipelined(lambda m, b: seen.append(bytes(b)) or False, {"parent_s": 0.0}, files=tmp_path)
    names, total = protocol.write_output_files(tmp_path, 0, [b"ok" * 10], chunk_bytes=1 << 20, budget_bytes=1 << 20)
    judge.put(protocol.Outputs(index=0, phase="trial", files=names, nbytes=total), b"")
    (tmp_path / "o1-0.bin").write_bytes(b"forged, longer than declared")
    judge.put(protocol.Outputs(index=0, phase="trial", trial=1, files=["o1-0.bin"], nbytes=4), b"")
    judge.close()
    assert seen == [b"ok" * 10]
    assert judge.forged is not None and "not what the frame declared" in judge.forged


def test_references_prefetched_in_order_answer_the_first_judgements_without_computing_again(monkeypatch):
    """A search's references computed ahead (References.prefetch): every one is kept, the judgements
    that follow compute none, and a second prefetch of the same search does nothing."""
    import torch

    from evaluation.correctness import Judge, References, regular_trials
    from evaluation.inputs import trial_inputs

    info = load_problem("layernorm", "cpu", overrides=SMALL)
    refs = References(info, "cpu", 5, keep_bytes=1 << 30)
    cases = info.shape_cases[:2]
    trials = regular_trials(11, 2)
    work = [(case, trial) for case in cases for trial in trials]
    outputs = {}
    for case, trial in work:
        right = refs.expected(case, trial_inputs(refs.module(case.params), case.dtype, trial, "cpu"))
        outputs[case.case_id, trial.seed] = protocol.package_bytes(right.to(getattr(torch, case.dtype)))
    order = []
    original = References.expected

    def counted(self, case, *args, **kwargs):
        order.append(case.case_id)
        return original(self, case, *args, **kwargs)

    monkeypatch.setattr(References, "expected", counted)
    refs.prefetch(work, background=False)
    assert refs.prefetched == len(work) and order == [case.case_id for case, _ in work]
    order.clear()
    for case, trial in work:
        blob, strides = outputs[case.case_id, trial.seed]
        assert Judge(refs, "cpu").judge(case, trial, blob, strides).passed
    assert order == [] and refs.reused == len(work)  # no reference computed twice
    refs.prefetch(work, background=False)
    assert refs.prefetched == len(work)  # once per search


def test_prestart_warms_a_gpu_commands_workers_without_importing_torch_and_only_when_asked(monkeypatch):
    """`kscout eval`/`optimize --device cuda` start their first workers before their own set-up; on a
    CPU, with warm workers off or another device, nothing starts. (Here the CUDA workers cannot warm
    up: they end, and the pool discards them, as it would for any device that fails.)"""
    pool.close_all()
    try:
        assert pool.prestart("cpu", "off", 2) == 0 and pool.prestart("auto", "off", 2) == 0
        monkeypatch.setenv("KSCOUT_WARM_WORKERS", "off")
        assert pool.prestart("cuda", "off", 2) == 0
        monkeypatch.setenv("KSCOUT_WARM_WORKERS", "auto")
        monkeypatch.setattr(pool, "_cuda_ready", lambda: pytest.fail("prestart must trust the flag, not ask torch"))
        # without a sandbox the checks' workers and the baselines' (never sandboxed) share one pool
        assert pool.prestart("cuda", "off", 9) == 9
        assert pool.pool("cuda", "none").size == 9 and pool.pool("cuda", "none").spawned == 9
        assert pool.prestart("cuda", "off", 9) == 0  # kept already: nothing more starts
    finally:
        pool.close_all()


def test_prestart_for_one_evaluation_starts_only_the_workers_it_takes(monkeypatch):
    """`kscout eval` takes a check's, a timing's and the baselines' workers and ends: without a sandbox
    they come from one pool, which starts none to replace them (each would warm up beside the run
    only to be killed at exit)."""
    pool.close_all()
    monkeypatch.setenv("KSCOUT_WARM_WORKERS", "auto")
    try:
        assert pool.prestart("cuda", "off", 2, only=True) == 2
        p = pool.pool("cuda", "none")
        assert (p.size, p.quota) == (2, 3)
        taken = [p.take() for _ in range(3)]
        assert all(w is not None for w in taken)
        assert p.spawned == 3 and p.idle == [] and p.quota == 0
        for w in taken:
            w.finish(stopped=True)
            w.scratch.cleanup()
    finally:
        pool.close_all()


def test_a_pool_without_a_quota_replaces_each_worker_taken(warm):
    warm.fill()
    taken = [warm.take(), warm.take()]
    try:
        assert warm.quota is None and warm.spawned == 3 and len(warm.idle) == 1
    finally:
        for w in taken:
            w.finish(stopped=True)
            w.scratch.cleanup()


def test_closing_the_pools_ends_every_waiting_worker_and_removes_its_folder(warm):
    warm.size = 3
    warm.fill()
    workers = [w.worker for w in warm.idle]
    pool.close_all()
    for w in workers:
        assert w.proc.poll() is not None and not w.scratch.root.exists()


def test_a_worker_leaves_with_its_output_flushed_and_no_exit_handlers_run(tmp_path):
    """The worker ends through `leave` once its last message is out: what it printed still reaches
    its stderr file, and nothing registered for the interpreter's teardown runs (the CUDA context,
    inductor's pool, a candidate's finalizers cost 0.7-1.8 s there while the next process waits)."""
    import subprocess
    import sys

    marker = tmp_path / "ran"
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').close())\n"
        "sys.stdout.write('last words')\n"
        "from evaluation.worker import leave\n"
        "leave()\n"
        "sys.stdout.write('never')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "last words"
    assert not marker.exists()
