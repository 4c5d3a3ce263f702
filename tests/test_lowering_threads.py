"""Lowering while other searches of the same process work in threads (optimize-many, coverage --concurrency).

A capture traces with make_fx, and the template proposer of another search matches families with
torch.fx.symbolic_trace. Both patch torch.nn.Module.__call__ and __getattr__ on the class for the length
of a trace, so without care a module called in another thread (a reference run for its float64 answer,
or another search's trace) is routed into this trace's tracer: `NameError: module is not installed as a
submodule`, and a patch undone out of order leaves a dead tracer's wrapper on every later module call.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch
from lowering_cases import CASES

from agent.proposers.lowering.capture import capture

KB_DEV = Path(
    os.environ.get("KSCOUT_KERNELBENCH_DEV", Path(__file__).resolve().parents[1] / ".." / "shared" / "kernelbench-dev")
)
INLINE = [
    "softmax_dim1",
    "linear_epilogue",
    "layer_norm",
    "maxpool1d",
    "instance_norm",
    "batch_norm_eval",
    "conv1d_grouped",
    "pointwise_broadcast",
]
KERNELBENCH = [
    "level1/19_ReLU.py",
    "level1/2_Standard_matrix_multiplication_.py",
    "level1/34_InstanceNorm.py",
    "level1/41_Max_Pooling_1D.py",
    "level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.py",
    "level2/76_Gemm_Add_ReLU.py",
    "level2/63_Gemm_ReLU_Divide.py",
    "level2/17_Conv2d_InstanceNorm_Divide.py",
]
N_CAPTURES = 8


def _problems(kind: str) -> list[tuple[str, str]]:
    if kind == "inline":
        return [(CASES[name], f"/tmp/{name}.py") for name in INLINE]
    if not KB_DEV.is_dir():
        pytest.skip(f"the KernelBench dev set is not at {KB_DEV} (set KSCOUT_KERNELBENCH_DEV)")
    return [((KB_DEV / rel).read_text(), str(KB_DEV / rel)) for rel in KERNELBENCH]


def _signature(captured) -> tuple:
    """What a capture decides: the graph's code, its placeholders, its outputs and the symbols' hints."""
    hints = sorted((str(s), v) for s, v in captured.hints.items())
    return captured.gm.code, tuple(captured.placeholders), captured.n_outputs, captured.tuple_output, tuple(hints)


def _forward_cases() -> list:
    """References as another search's evaluation runs them: real modules on real tensors."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)).eval()
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.MaxPool2d(2)).eval()
    cases = [(mlp, torch.randn(5, 12)), (conv, torch.randn(2, 3, 9, 9))]
    with torch.no_grad():
        return [(m, x, m(x)) for m, x in cases]


def _fx_cases() -> list:
    """Modules as the family matcher traces them (torch.fx.symbolic_trace: leaf modules are call_module)."""
    gemm = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    norm = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.GroupNorm(2, 4), torch.nn.Tanh())
    return [(m, torch.fx.symbolic_trace(m).code) for m in (gemm, norm)]


@pytest.mark.parametrize("kind", ["inline", "kernelbench"])
def test_captures_from_eight_threads_match_a_lone_capture_while_other_threads_run_and_trace_modules(kind):
    problems = _problems(kind)
    alone = [_signature(capture(src, path)) for src, path in problems]  # single-threaded, before any thread
    forwards, fx_cases = _forward_cases(), _fx_cases()
    fx = torch.fx._symbolic_trace
    plain_call, plain_getattr = fx._orig_module_call, fx._orig_module_getattr  # PyTorch's own, saved by fx

    start = threading.Barrier(N_CAPTURES + len(forwards) + len(fx_cases))
    done = threading.Event()
    got: dict[int, tuple] = {}
    errors: list[str] = []
    runs = {"forward": 0, "fx": 0}

    def capture_thread(i: int) -> None:
        src, path = problems[i % len(problems)]
        start.wait()
        try:
            got[i] = _signature(capture(src, path))
        except Exception as exc:
            errors.append(f"capture {Path(path).name}: {type(exc).__name__}: {exc}")

    def loop(what: str, body) -> None:
        start.wait()
        while not done.is_set():
            try:
                body()
            except Exception as exc:
                errors.append(f"{what}: {type(exc).__name__}: {exc}")
            runs[what] += 1
            done.wait(0.005)  # leave the GIL to the captures between runs

    def forward(m, x, expected):
        with torch.no_grad():
            out = m(x)
        assert torch.equal(out, expected), f"{type(m[0]).__name__} forward differs by {(out - expected).abs().max()}"

    def fx_trace(m, code):
        assert torch.fx.symbolic_trace(m).code == code, "the family tracer's graph differs from a lone trace"

    threads = [threading.Thread(target=capture_thread, args=(i,)) for i in range(N_CAPTURES)]
    threads += [threading.Thread(target=loop, args=("forward", lambda c=c: forward(*c))) for c in forwards]
    threads += [threading.Thread(target=loop, args=("fx", lambda c=c: fx_trace(*c))) for c in fx_cases]
    for t in threads:
        t.start()
    for t in threads[:N_CAPTURES]:
        t.join(timeout=300)
    done.set()
    for t in threads[N_CAPTURES:]:
        t.join(timeout=60)

    assert not errors, "\n".join(f"{errors.count(e)} x {e}" for e in dict.fromkeys(errors))
    assert sorted(got) == list(range(N_CAPTURES))
    for i in range(N_CAPTURES):
        assert got[i] == alone[i % len(problems)], f"capture {i} ({problems[i % len(problems)][1]}) differs"
    assert runs["forward"] > 0 and runs["fx"] > 0  # they really ran during the captures
    # no tracer's wrapper is left on the class: a module called after the traces is PyTorch's own call
    assert torch.nn.Module.__call__ is plain_call and torch.nn.Module.__getattr__ is plain_getattr
    for m, x, expected in forwards:
        with torch.no_grad():
            assert torch.equal(m(x), expected)
