"""evaluate() end to end on the CPU: real worker processes, Triton kernels under the interpreter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from evaluation import evaluate, fingerprint, load_problem, remeasure, resolve_device
from evaluation.errors import DeviceError
from evaluation.isolation import worker_env
from evaluation.records import EvalResult, Stage, Status

ROOT = Path(__file__).parent.parent
SEED = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()
FIXTURES = Path(__file__).parent / "eval_fixtures"
NOT_MEASURED = "not measured on this device (cpu, Triton interpreter)"


def test_layernorm_seed_passes_every_declared_cpu_case_in_fp32_and_bf16():
    result = evaluate(SEED, "layernorm", device="cpu", seed=42)
    assert result.status is Status.passed and result.failed_stage is None
    assert [r.case_id for r in result.shape_results] == [c.case_id for c in load_problem("layernorm").shape_cases]
    assert {r.dtype for r in result.shape_results} == {"float32", "bfloat16"}
    # three random trials, then the two stress trials (large logits, large offset) on seeds of their own
    assert all(r.passed and r.trials == 5 and r.seeds == (42, 43, 44, 45, 46) for r in result.shape_results)
    fp32 = [r for r in result.shape_results if r.dtype == "float32"]
    assert all(r.max_abs_error < 1e-5 * 1e4 for r in fp32)
    assert result.triton_launches == len(result.shape_results) * 5  # one launch per forward and trial
    assert [k.name for k in result.kernels] == ["_layernorm_fwd"]
    assert result.timing == () and result.timing_note == NOT_MEASURED and result.ceiling_gbps is None
    assert result.seeds == (42, 43, 44) and result.fingerprint == fingerprint("cpu")
    assert result.isolation in ("bwrap", "none")
    assert EvalResult.model_validate_json(result.model_dump_json()) == result


def test_weights_come_from_the_reference_whatever_order_the_candidate_builds_them():
    # Creating bias before weight with other init draws different numbers; loading the reference's
    # state dict makes that irrelevant.
    reordered = SEED.replace(
        "        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(n))\n        self.bias = nn.Parameter(0.1 * torch.randn(n))\n",
        "        self.bias = nn.Parameter(torch.rand(n))\n        self.weight = nn.Parameter(torch.rand(n))\n",
    )
    assert reordered != SEED
    result = evaluate(reordered, "layernorm", device="cpu", trials=1, overrides={"M": 2})
    assert result.status is Status.passed, result.message


def test_integer_targets_reach_the_candidate_as_int64_on_a_rebound_kernelbench_file():
    info = load_problem(str(FIXTURES / "pick_logit.py"), "cpu")
    assert {c.params["classes"] for c in info.shape_cases} >= {1, 97, 1537}  # past one 1024-wide block
    source = (FIXTURES / "pick_logit_triton.py").read_text()
    result = evaluate(source, info, device="cpu", trials=2)
    assert result.status is Status.passed, result.message
    assert len(result.shape_results) == len(info.shape_cases)


def test_a_secret_in_the_callers_environment_is_invisible_to_the_candidate(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-should-not-leak")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "t0k3n")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("TRITON_DEBUG_LEVEL", "0")
    probe = SEED.replace(
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n",
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        import os\n"
        "        names = ['OPENAI_API_KEY', 'MY_SERVICE_TOKEN', 'AWS_REGION', 'TRITON_DEBUG_LEVEL', 'PATH']\n"
        "        raise RuntimeError('visible=' + ','.join(n for n in names if n in os.environ))\n",
    )
    result = evaluate(probe, "layernorm", device="cpu", trials=1)
    assert result.status is Status.crashed
    assert result.message.endswith("RuntimeError: visible=TRITON_DEBUG_LEVEL,PATH")


def test_worker_environment_keeps_what_gpu_programs_need_and_drops_secret_names():
    env = worker_env(
        "cpu",
        {
            "PATH": "/bin",
            "HOME": "/h",
            "CUDA_VISIBLE_DEVICES": "0",
            "PYTHONPATH": "/x",
            "ANTHROPIC_BASE": "u",
            "GITHUB_TOKEN": "g",
            "DB_PASSWORD": "p",
            "HF_TOKEN": "h",
            "TRITON_AUTH_HEADER": "a",
            "EDITOR": "vi",
        },
    )
    assert {k: env[k] for k in ("PATH", "HOME", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET")} == {
        "PATH": "/bin",
        "HOME": "/h",
        "CUDA_VISIBLE_DEVICES": "0",
        "TRITON_INTERPRET": "1",
    }
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/x"]
    assert not {"ANTHROPIC_BASE", "GITHUB_TOKEN", "DB_PASSWORD", "HF_TOKEN", "TRITON_AUTH_HEADER", "EDITOR"} & set(env)
    assert "TRITON_INTERPRET" not in worker_env("cuda", {"TRITON_INTERPRET": "1"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
def test_asking_for_cuda_without_a_gpu_is_a_device_error():
    assert resolve_device("auto") == "cpu"
    with pytest.raises(DeviceError, match="no GPU"):
        evaluate(SEED, "layernorm", device="cuda")
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        resolve_device("tpu")


def test_remeasure_on_the_cpu_gives_a_note_and_no_numbers():
    result = remeasure({"seed": SEED, "again": SEED}, "layernorm", device="cpu")
    assert result.note == NOT_MEASURED
    assert [(c.name, c.cases, c.error, c.speedup()) for c in result.candidates] == [
        ("seed", (), None, None),
        ("again", (), None, None),
    ]


def test_a_compile_error_names_the_stage_and_keeps_the_stderr_tail_short():
    noisy = SEED.replace("import torch\n", "import sys\nimport torch\nsys.stderr.write('x' * 20000)\n", 1)
    noisy = noisy.replace("BLOCK_N=block", "BLOCK_N=block + 1")
    result = evaluate(noisy, "layernorm", device="cpu", trials=1)
    assert (result.status, result.failed_stage) == (Status.compile_error, Stage.compile)
    assert "power of 2" in result.message
    assert 0 < len(result.stderr_tail.encode()) <= 4096


def test_inputs_drawn_in_parallel_threads_match_serial_draws():
    """The parent judges several candidates in threads; each must regenerate exactly its own inputs."""
    import threading

    from evaluation.inputs import make_inputs
    from evaluation.problem import exec_problem

    module = exec_problem(load_problem("layernorm", "cpu").source_path, {"M": 256, "N": 1024})
    seeds = list(range(100, 116))
    serial = {s: make_inputs(module, "float32", s, 1, "cpu")[0] for s in seeds}
    drawn: dict[int, torch.Tensor] = {}
    barrier = threading.Barrier(len(seeds))

    def draw(seed):
        barrier.wait()
        for _ in range(20):
            drawn[seed] = make_inputs(module, "float32", seed, 1, "cpu")[0]

    threads = [threading.Thread(target=draw, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(drawn[s], serial[s]) for s in seeds)
    assert not torch.equal(serial[100], serial[101])


def test_scratch_goes_to_kscout_scratch_then_to_a_roomy_dev_shm(monkeypatch, tmp_path):
    from evaluation import harness, isolation

    monkeypatch.setenv("KSCOUT_SCRATCH", str(tmp_path))
    assert harness.scratch_root() == str(tmp_path)
    monkeypatch.delenv("KSCOUT_SCRATCH")
    monkeypatch.setattr(isolation, "SHM", tmp_path / "missing")
    assert harness.scratch_root() is None
    monkeypatch.setattr(isolation, "SHM", tmp_path)  # a writable folder with room (4 GiB at least)
    import shutil

    roomy = shutil.disk_usage(tmp_path).free > (4 << 30)
    assert harness.scratch_root() == (str(tmp_path) if roomy else None)


def test_a_draw_that_does_not_fit_waits_for_the_workers_peaks_then_gives_up(monkeypatch):
    """Re-drawing a trial's inputs must happen on the device (the worker drew them there); when the
    device is full the parent waits and retries, and after the last retry the error reaches the
    executor, which checks the candidate again with the GPU to itself."""
    from evaluation import correctness

    monkeypatch.setattr(correctness, "_OOM_BACKOFF_S", 0.0)
    run = correctness.CorrectnessRun(SEED, load_problem("layernorm", "cpu"), "cuda", 1, 0).judge
    attempts = []

    def draw(fail_times):
        def fn():
            attempts.append(1)
            if len(attempts) <= fail_times:
                raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
            return "drawn"

        return fn

    assert run._waiting_for_memory(draw(2)) == "drawn" and len(attempts) == 3
    attempts.clear()
    with pytest.raises(torch.OutOfMemoryError):
        run._waiting_for_memory(draw(99))
    assert len(attempts) == correctness._OOM_RETRIES + 1 == 5
    attempts.clear()
    run.device = "cpu"  # host memory does not come back by waiting
    with pytest.raises(torch.OutOfMemoryError):
        run._waiting_for_memory(draw(99))
    assert len(attempts) == 1


def test_a_judgement_that_runs_out_of_device_memory_is_redone_on_the_host(monkeypatch):
    """The parent's float64 reference can exhaust a GPU shared with many workers; the verdict must not
    be lost (or blamed on the candidate): that result is judged again on the host."""
    from evaluation.correctness import References

    real = References.expected
    calls = []

    def expected(self, case, inputs, device=None):
        calls.append(device)
        if device is None:  # the device is full every time
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(self, case, inputs, device)

    monkeypatch.setattr(References, "expected", expected)
    info = load_problem("layernorm", "cpu", {"M": 4})
    result = evaluate(SEED, info, device="cpu", trials=1, seed=5)
    assert result.status is Status.passed, result.message
    assert all(r.passed for r in result.shape_results) and len(result.shape_results) == len(info.shape_cases)
    assert calls[::2] == [None] * (len(calls) // 2) and calls[1::2] == ["cpu"] * (len(calls) // 2)  # device, then host
    assert len(calls) >= 2 * len(info.shape_cases) * 3  # every judged call (and each stress plan) fell back
    no_bias = SEED.replace("(diff * rstd * w + b)", "(diff * rstd * w)")
    assert no_bias != SEED
    bad = evaluate(no_bias, info, device="cpu", trials=1)
    assert bad.status is Status.incorrect  # the host judgement is a real one


ROWMAX_TRITON = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rowmax(x_ptr, out_ptr, C, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + r * C + offs, mask=offs < C, other=float("-inf"))
    tl.store(out_ptr + r, FINISH)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        _rowmax[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return out
"""


def test_a_running_max_that_starts_at_zero_is_refused_on_negated_inputs_the_problem_never_draws():
    # torch.rand inputs are never negative, and scaling keeps their sign: only the negated stress
    # trial shows that max(row, 0) is not max(row).
    info = load_problem(str(FIXTURES / "rowmax_rand.py"), "cpu")
    honest = evaluate(ROWMAX_TRITON.replace("FINISH", "tl.max(v, axis=0)"), info, device="cpu", trials=1)
    assert honest.status is Status.passed, honest.message
    # the random trial, then the negated one and the magnified one (x * s on never-negative inputs)
    assert all(r.trials == 3 for r in honest.shape_results)
    wrong = evaluate(
        ROWMAX_TRITON.replace("FINISH", "tl.maximum(tl.max(v, axis=0), 0.0)"), info, device="cpu", trials=1
    )
    assert wrong.status is Status.incorrect and wrong.error_class == "ValueMismatch"
    assert {r.case_id for r in wrong.shape_results if not r.passed} == {c.case_id for c in info.shape_cases}
    assert all("trial 1 (negated: floating inputs x*-100" in r.message for r in wrong.shape_results)
