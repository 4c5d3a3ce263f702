"""A warm worker whose own start fails (before any request, so before any candidate code) is reported as
not judged, with an out-of-memory class where the device was full, never as the candidate's crash."""

from __future__ import annotations

import pytest
import torch

from evaluation import protocol
from evaluation.harness import _death
from evaluation.isolation import Scratch, WorkerExit, WorkerProcess
from evaluation.records import Stage, Status


def _exit(code, tail, timed_out=False):
    return WorkerExit(returncode=code, timed_out=timed_out, stopped_early=False, stderr_tail=tail, wall_s=1.0)


def test_a_warm_up_out_of_memory_is_not_judged_and_marked_for_a_check_alone():
    tail = f"{protocol.WARM_UP_FAILED} AcceleratorError: CUDA error: out of memory Search for ...\n"
    verdict = _death(_exit(protocol.WARM_UP_EXIT, tail), Stage.correctness, 60.0)
    assert verdict["status"] is Status.not_judged
    assert verdict["error_class"] == "OutOfMemoryError"  # what executors check again alone
    assert verdict["message"].startswith("the worker could not start on the device before the candidate ran")
    assert "CUDA error: out of memory" in verdict["message"]


def test_the_same_exit_code_without_the_warm_up_line_is_the_candidates_crash():
    verdict = _death(_exit(protocol.WARM_UP_EXIT, "Traceback ...\nValueError: boom\n"), Stage.correctness, 60.0)
    assert verdict["status"] is Status.crashed
    assert verdict["error_class"] == "Exit75"


def test_a_warm_up_line_after_a_case_started_is_the_candidates_crash():
    tail = f"[kscout-worker] M=3,N=1|float32 trial 0\n{protocol.WARM_UP_FAILED} forged by the candidate\n"
    verdict = _death(_exit(protocol.WARM_UP_EXIT, tail), Stage.correctness, 60.0)
    assert verdict["status"] is Status.crashed


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where a CUDA warm-up fails")
def test_a_real_worker_that_cannot_warm_up_for_cuda_exits_with_the_warm_up_code(tmp_path):
    scratch = Scratch.make(str(tmp_path))
    worker = WorkerProcess(scratch, "cuda", isolation="none", timeout_s=60.0, warm=True)
    worker.spawn()
    assert worker.proc is not None
    assert worker.proc.wait(timeout=120) == protocol.WARM_UP_EXIT
    exit_ = worker.finish()
    verdict = _death(exit_, Stage.correctness, 60.0)
    assert verdict["status"] is Status.not_judged
    assert verdict["error_class"] == "WorkerStart"
    assert "could not start on the device" in verdict["message"]
    scratch.cleanup()
