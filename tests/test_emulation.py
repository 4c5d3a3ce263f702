"""Device emulation: GPU-written candidates run on the CPU as a CUDA run would see them, with the
target's launch limits, every autotune config checked, and full-size launches followed on meta tensors.

The in-process tests install emulation into the test process and undo it afterwards; one test runs a
candidate in a subprocess in the worker's order (emulation, launch counter, compute watch, snapshot),
which is what the worker does once the lead adds the calls.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evaluation import emulation
from evaluation.problem import exec_problem

DATA = Path(__file__).parent / "data" / "emulation"
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
    reason="emulation is for the CPU interpreter",
)


@pytest.fixture
def emulated():
    report = emulation.install("H200")
    assert report.emulated, report.reason
    yield report
    emulation._uninstall()


def _load(path: Path, name: str):
    with emulation.candidate_scope():
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def _forward(model, *inputs):
    with emulation.candidate_scope(), torch.no_grad():
        return model(*inputs)


def test_a_cuda_written_candidate_runs_on_the_cpu_and_sees_an_h200(emulated, tmp_path):
    src = tmp_path / "cuda_style.py"
    src.write_text(
        "import torch, triton, triton.language as tl\n"
        "SMS = torch.cuda.get_device_properties(0).multi_processor_count\n"
        "CAP = torch.cuda.get_device_capability()\n"
        "@triton.jit\n"
        "def k(x, y, n, B: tl.constexpr):\n"
        "    o = tl.program_id(0) * B + tl.arange(0, B)\n"
        "    tl.store(y + o, tl.load(x + o, mask=o < n) + 1.0, mask=o < n)\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.b = torch.nn.Parameter(torch.zeros(3)).cuda()\n"
        "        assert torch.cuda.is_available() and torch.cuda.device_count() == 1\n"
        "    def forward(self, x):\n"
        "        assert x.is_cuda and x.device.type == 'cuda' and x.get_device() == 0\n"
        "        x = x.cuda().to('cuda:0')\n"
        "        y = torch.empty(x.shape, device='cuda', dtype=x.dtype)\n"
        "        k[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), B=128)\n"
        "        torch.cuda.synchronize()\n"
        "        return y\n"
    )
    module = _load(src, "cuda_style")
    assert module.SMS == 132 and module.CAP == (9, 0)
    with emulation.candidate_scope():
        model = module.ModelNew()
    x = torch.randn(300)
    y = _forward(model, x)
    assert y.device.type == "cpu" and torch.equal(y, x + 1.0)  # outside the scope, the truth
    assert not torch.cuda.is_available() and not x.is_cuda
    report = emulation.report()
    assert report.emulated and report.device_name == "NVIDIA H200" and report.arch == "sm_90"
    assert {"torch.cuda.get_device_properties", "Tensor.cuda", "torch.cuda.synchronize"} <= set(report.cuda_apis_used)
    assert report.launches_checked == 1 and not report.shared_memory_checked
    assert "NVIDIA H200 (sm_90) emulated" in report.describe()


def test_every_autotune_config_runs_and_agreeing_configs_pass(emulated, tmp_path):
    src = tmp_path / "tuned.py"
    src.write_text(
        "import torch, triton, triton.language as tl\n"
        "@triton.autotune(configs=[triton.Config({'B': b}, num_warps=w) for b, w in ((64, 2), (128, 4), (512, 8))],\n"
        "                 key=['n'])\n"
        "@triton.jit\n"
        "def relu(x, y, n, B: tl.constexpr):\n"
        "    o = tl.program_id(0) * B + tl.arange(0, B)\n"
        "    tl.store(y + o, tl.maximum(tl.load(x + o, mask=o < n), 0.0), mask=o < n)\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n"
        "        relu[lambda m: (triton.cdiv(x.numel(), m['B']),)](x, y, x.numel())\n"
        "        return y\n"
    )
    model = _load(src, "tuned").ModelNew()
    x = torch.randn(1000)
    assert torch.equal(_forward(model, x), x.relu())
    assert torch.equal(_forward(model, x), x.relu())  # the key is cached: one config from now on
    report = emulation.report()
    assert [(a.kernel, a.configs, a.agreed) for a in report.autotune] == [("relu", 3, True)]
    assert report.launches_checked == 4


def test_autotune_configs_that_disagree_are_refused_as_incorrect_naming_the_config(emulated):
    model = _load(DATA / "autotune_disagree.py", "autotune_disagree").ModelNew()
    with pytest.raises(emulation.AutotuneConfigMismatch) as err:
        _forward(model, torch.randn(1000))
    status, stage, error_class, message = emulation.verdict_for(err.value)
    assert (status, stage, error_class) == ("incorrect", "correctness", "AutotuneConfigMismatch")
    assert "config 1 (BLOCK=64, num_warps=2, num_stages=3) disagrees with config 0" in message
    assert emulation.report().autotune[0].agreed is False


def test_a_grid_y_over_65535_fails_before_any_program_runs_with_the_limit_named(emulated):
    model = _load(DATA / "grid_y.py", "grid_y").ModelNew()
    with pytest.raises(emulation.LaunchLimitError) as err:
        _forward(model, torch.randn(65536, 2))  # 65536 interpreted programs would take minutes
    assert err.value.limit == "grid_y"
    assert "grid y = 65536 exceeds the NVIDIA H200 limit of 65535" in str(err.value)
    assert emulation.verdict_for(err.value)[:3] == ("crashed", "correctness", "LaunchLimitExceeded")
    out = _forward(model, torch.ones(65535 // 1000, 2))  # under the limit it runs
    assert torch.equal(out, torch.full((65, 2), 2.0))


def test_num_warps_that_is_not_a_power_of_two_is_a_compile_error(emulated):
    model = _load(DATA / "odd_warps.py", "odd_warps").ModelNew()
    with pytest.raises(emulation.LaunchLimitError) as err:
        _forward(model, torch.randn(100))
    assert err.value.limit == "num_warps" and "num_warps = 6 is not a power of two from 1 to 32" in str(err.value)
    assert emulation.verdict_for(err.value)[:3] == ("compile_error", "compile", "LaunchLimitExceeded")


def test_launch_limits_follow_the_target_device():
    mi300 = emulation.device_spec("mi300x")
    assert mi300.max_num_warps == 16  # 64-wide wavefronts
    with pytest.raises(emulation.LaunchLimitError, match="num_warps = 32"):
        emulation.check_launch(mi300, "k", (4,), num_warps=32)
    assert emulation.check_launch(emulation.device_spec("H200"), "k", (2**31 - 1, 65535), 32) == (2**31 - 1, 65535, 1)
    with pytest.raises(emulation.LaunchLimitError, match="grid x = 2147483648"):
        emulation.check_launch(emulation.device_spec("H200"), "k", (2**31,))
    with pytest.raises(ValueError, match="unknown target device 'Z80'"):
        emulation.device_spec("Z80")


def test_block_sizes_are_limited_by_the_interpreter_itself(emulated, tmp_path):
    """tl.arange must be a power of two of at most 2^20 elements: Triton's front end checks it under the
    interpreter as on a GPU, so emulation adds nothing there (this test keeps that true)."""
    src = tmp_path / "arange.py"
    src.write_text(
        "import torch, triton, triton.language as tl\n"
        "@triton.jit\n"
        "def k(y, B: tl.constexpr):\n"
        "    o = tl.arange(0, B)\n"
        "    tl.store(y + o, o.to(tl.float32))\n"
    )
    kernel = _load(src, "arange").k
    y = torch.empty(2**21)
    for block, needle in ((100, "power of 2"), (2**21, "exceeds triton maximum tensor numel")):
        with pytest.raises(Exception, match=needle):
            with emulation.candidate_scope():
                kernel[(1,)](y, B=block)


def test_the_tutorial_host_code_runs_with_the_targets_driver_figures(emulated):
    module = _load(DATA / "tutorial_softmax.py", "tutorial_softmax")
    assert module.NUM_SM == 132 and module.SIZE_SMEM == 232448 and module.target.arch == 90
    x = torch.randn(37, 100)
    assert torch.allclose(_forward(module.ModelNew(), x), torch.softmax(x, -1), atol=1e-6)


def test_full_size_launches_are_followed_on_meta_tensors_without_running_kernels(emulated):
    model_cls = _load(DATA / "grid_y.py", "grid_y2").ModelNew
    shipped = exec_problem(DATA / "scale2_problem.py")  # rows = 70000: 4.5M programs if it ran
    report = emulation.check_launches_at_scale(model_cls, shipped, "float32", "rows=70000,cols=64|float32")
    assert report.limit == "grid_y" and "grid y = 70000" in report.violation
    assert report.inconclusive is None
    fits = exec_problem(DATA / "scale2_problem.py", {"rows": 65535, "cols": 4099})
    ok = emulation.check_launches_at_scale(model_cls, fits, "float32", "fits")
    assert ok.violation is None and ok.inconclusive is None
    assert ok.launches == (("scale_kernel", (65, 65535, 1)),)
    item = _load(DATA / "needs_item.py", "needs_item").ModelNew
    unclear = emulation.check_launches_at_scale(item, shipped, "float32", "rows=70000,cols=64|float32")
    assert unclear.violation is None and "meta" in unclear.inconclusive.lower()


def test_nothing_is_emulated_where_a_real_gpu_is_or_outside_the_interpreter(monkeypatch):
    assert emulation.install("H200", device="cuda").reason == "a real GPU is used as it is"
    monkeypatch.delenv("TRITON_INTERPRET")
    assert "interpreter" in emulation.install("H200").reason
    assert not emulation.installed()


WORKER_LIKE = r"""
import importlib.util, json, sys
import torch
from evaluation import emulation
from evaluation.guards import ComputeWatch, HarnessSnapshot, LaunchCounter

report = emulation.install()            # the lead's line 1: before the candidate is imported
counter = LaunchCounter(); counter.install()
with ComputeWatch():
    torch.empty(1)
snapshot = HarnessSnapshot()
with emulation.candidate_scope():       # the lead's line 2: around import, build and forward
    spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
    module = importlib.util.module_from_spec(spec); sys.modules["candidate"] = module
    spec.loader.exec_module(module)
    model = module.ModelNew()
x = torch.randn(int(sys.argv[2]))
watch = ComputeWatch()
try:
    with emulation.candidate_scope(), torch.no_grad(), watch:
        out = model(x)
    error = None
except Exception as exc:
    error = list(emulation.verdict_for(exc) or (type(exc).__name__,))
print(json.dumps({"report": emulation.report().model_dump(mode="json"), "flagged": dict(watch.flagged),
                  "changed": snapshot.changed(), "launches": counter.count, "error": error,
                  "device": None if error else out.device.type,
                  "ok": None if error else bool(torch.equal(out, x.relu()))}))
"""


@pytest.mark.parametrize("candidate,expect_error", [("tuned_relu.py", None), ("autotune_disagree.py", "incorrect")])
def test_in_a_worker_like_process_emulation_trips_no_guard(tmp_path, candidate, expect_error):
    if candidate == "tuned_relu.py":
        (tmp_path / candidate).write_text(
            "import torch, triton, triton.language as tl\n"
            "@triton.autotune(configs=[triton.Config({'B': 64}), triton.Config({'B': 256}, num_warps=8)],\n"
            "                 key=['n'], reset_to_zero=['y'])\n"
            "@triton.jit\n"
            "def relu(x, y, n, B: tl.constexpr):\n"
            "    o = tl.program_id(0) * B + tl.arange(0, B)\n"
            "    tl.atomic_add(y + o, tl.maximum(tl.load(x + o, mask=o < n), 0.0), mask=o < n)\n"
            "class ModelNew(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        assert x.is_cuda\n"
            "        y = torch.empty_like(x, device='cuda')\n"
            "        relu[lambda m: (triton.cdiv(x.numel(), m['B']),)](x, y, x.numel())\n"
            "        return y\n"
        )
        path = tmp_path / candidate
    else:
        path = DATA / candidate
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-c", WORKER_LIKE, str(path), "777"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["flagged"] == {} and out["changed"] == []
    assert out["report"]["emulated"] is True and out["launches"] >= 2
    if expect_error is None:
        assert out["error"] is None and out["ok"] is True and out["device"] == "cpu"
        assert out["report"]["autotune"][0]["agreed"] is True
    else:
        assert out["error"][0] == expect_error


def test_a_dry_run_through_pytorch_meta_kernels_leaves_the_harness_bindings_as_they_were(emulated, tmp_path):
    """layer_norm on meta tensors runs a Python reference whose first call imports torch._dynamo, which
    rebinds torch.manual_seed; the worker's snapshot would blame the candidate for it."""
    src = tmp_path / "torch_only.py"
    src.write_text(
        "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
        "        return torch.nn.functional.layer_norm(x, (x.shape[-1],))\n"
    )
    seed_fn = torch.manual_seed
    model_cls = _load(src, "torch_only").ModelNew
    report = emulation.check_launches_at_scale(model_cls, exec_problem(DATA / "scale2_problem.py"), "float32", "c")
    assert report.violation is None and report.launches == ()
    assert torch.manual_seed is seed_fn
