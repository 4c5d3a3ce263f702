"""On a GPU: outputs cross from the sandboxed worker to the judge in CUDA VMM slots (evaluation/shared.py)
and the verdict is the one the pipe gives. Skipped on the CPU (the memfd slots are tested there)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation import evaluate, load_problem
from evaluation.records import Status

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).parent.parent
SEED = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()


# Another process (its own CUDA context) maps the descriptor it receives and checks the bytes.
_CHILD = """
import socket, sys, torch
from evaluation.devshare import Cuda
sock = socket.socket(fileno=int(sys.argv[1]))
size, nbytes = int(sys.argv[2]), int(sys.argv[3])
_, fds, _, _ = socket.recv_fds(sock, 16, 1)
cuda = Cuda(0)
ptr = cuda.map(cuda.import_fd(fds[0]), size)
back = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
cuda.copy(back.data_ptr(), ptr, nbytes)
sys.exit(0 if bool((back == torch.arange(nbytes // 4, dtype=torch.float32, device="cuda")).all()) else 3)
"""


@pytest.fixture(scope="module")
def small_layernorm():
    info = load_problem("layernorm", "cuda", {"M": 64})
    cases = tuple(c for c in info.shape_cases if "long_rows" not in c.tags)
    return info.model_copy(update={"shape_cases": cases})


def test_a_vmm_slot_exported_as_a_descriptor_maps_the_same_bytes_in_another_process():
    """The route the transport rests on: a VMM allocation's POSIX descriptor, passed with SCM_RIGHTS to a
    process started after it, maps the bytes the exporter wrote (CUDA IPC handles would not cross a PID namespace)."""
    import torch

    from evaluation.devshare import Cuda

    cuda = Cuda(0)
    if not cuda.supported():
        pytest.skip("this device cannot export VMM allocations as POSIX descriptors")
    nbytes = 3 << 20
    src = torch.arange(nbytes // 4, dtype=torch.float32, device="cuda")
    handle, ptr, size = cuda.create(nbytes)
    cuda.copy(ptr, src.data_ptr(), nbytes)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(theirs.fileno()), str(size), str(nbytes)],
        pass_fds=(theirs.fileno(),),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
    )
    theirs.close()
    fd = cuda.export(handle)
    try:
        socket.send_fds(ours, [b"x"], [fd])
    finally:
        os.close(fd)
    assert child.wait(timeout=120) == 0
    cuda.unmap(ptr, size)
    cuda.release(handle)


def test_shared_slots_and_the_pipe_give_the_same_verdict_on_cuda(small_layernorm, monkeypatch):
    verdicts = {}
    for transport in ("shared", "pipe"):
        monkeypatch.setenv("KSCOUT_OUTPUT_TRANSPORT", transport)
        # one seed for both: the same inputs, so the same outputs and the same errors, bit for bit
        verdicts[transport] = evaluate(SEED, small_layernorm, device="cuda", trials=1, time_it=False, seed=4321)
    shared, pipe = verdicts["shared"], verdicts["pipe"]
    assert shared.status is Status.passed and pipe.status is Status.passed, (shared.message, pipe.message)
    assert [(r.case_id, r.passed) for r in shared.shape_results] == [(r.case_id, r.passed) for r in pipe.shape_results]
    assert [r.max_abs_error for r in shared.shape_results] == [r.max_abs_error for r in pipe.shape_results]


def test_a_wrong_kernel_is_refused_through_shared_slots_as_through_the_pipe(small_layernorm, monkeypatch):
    """The slots carry the candidate's real bytes: an off-by-a-little kernel is caught the same way."""
    wrong = SEED.replace("/ N + eps)", "/ N + eps * 1e3)")
    assert wrong != SEED, "the seed's variance expression changed: adjust the mutation"
    monkeypatch.setenv("KSCOUT_OUTPUT_TRANSPORT", "shared")
    result = evaluate(wrong, small_layernorm, device="cuda", trials=1, time_it=False)
    assert result.status is Status.incorrect, result.message


def test_a_small_output_is_read_to_the_host_and_a_large_one_stays_on_the_device():
    """The parent judges small outputs on the host (no kernel waiting for a turn on a GPU its workers
    keep busy): a slot's read of at most HOST_READ_BYTES lands in host memory, a larger one on the device,
    with the bytes the worker wrote either way."""
    import torch

    from evaluation import shared
    from evaluation.devshare import Cuda

    cuda = Cuda(0)
    if not cuda.supported():
        pytest.skip("this device cannot export VMM allocations as POSIX descriptors")
    for nbytes, where in ((shared.HOST_READ_BYTES, "cpu"), (shared.HOST_READ_BYTES + 4096, "cuda")):
        slot = shared._CudaSlot(cuda, nbytes)
        src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
        slot.write(0, src)
        out = slot.read(nbytes)
        assert out.device.type == where
        assert torch.equal(out.cpu(), src.cpu())
        slot.close()


def test_a_search_keeps_small_float64_references_on_the_host_and_large_ones_on_the_device(small_layernorm):
    import torch

    from evaluation.correctness import HOST_JUDGE_ELEMENTS, References, regular_trials

    refs = References(small_layernorm, "cuda", 5, keep_bytes=1 << 34)
    case = small_layernorm.shape_cases[0]
    small, large = regular_trials(5, 2)
    refs.keep(case, small, torch.ones(HOST_JUDGE_ELEMENTS, dtype=torch.float64, device="cuda"))
    refs.keep(case, large, torch.ones(HOST_JUDGE_ELEMENTS + 1, dtype=torch.float64, device="cuda"))
    assert refs.kept(case, small).device.type == "cpu"
    assert refs.kept(case, large).device.type == "cuda"
