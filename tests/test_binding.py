"""Reference weights mapped onto a candidate's parameters: by name, suffix, shape, order, transposed, and
plain tensor attributes; what cannot be mapped is said in one line."""

from __future__ import annotations

import torch
from torch import nn

from evaluation.binding import annotate, bind
from evaluation.records import EvalResult, Fingerprint, Status


class Ref(nn.Module):
    def __init__(self, n=6, k=4):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))
        self.bias = nn.Parameter(torch.randn(n))
        self.proj = nn.Linear(k, n)


def _state():
    torch.manual_seed(0)
    return Ref().state_dict()


def test_identical_names_and_shapes_load_exactly():
    state = _state()
    torch.manual_seed(1)
    cand = Ref()
    report = bind(cand, state)
    assert report.loaded and report.method == "exact" and "loaded by name (4 tensors)" in report.message
    assert torch.equal(cand.proj.weight, state["proj.weight"])


def test_other_names_are_matched_by_suffix_shape_order_and_transposition_and_say_how():
    class Cand(nn.Module):
        def __init__(self):
            super().__init__()
            self.gamma = nn.Parameter(torch.empty(6))  # same shape as beta: matched by declaration order
            self.beta = nn.Parameter(torch.empty(6))
            self.w_t = nn.Parameter(torch.empty(4, 6))  # the Linear weight kept transposed for the kernel
            self.inner = nn.Module()
            self.inner.bias = torch.empty(6)  # a plain tensor attribute, named like the reference's proj.bias

    state = _state()
    cand = Cand()
    report = bind(cand, state)
    how = {m.candidate: (m.reference, m.how) for m in report.matches}
    # "bias" names two (6,) reference tensors, so the suffix is ambiguous: the three (6,) tensors go by order
    assert how["gamma"] == ("weight", "order") and how["beta"] == ("bias", "order")
    assert how["inner.bias"] == ("proj.bias", "order") and torch.equal(cand.inner.bias, state["proj.bias"])
    assert how["w_t"] == ("proj.weight", "transposed")
    assert report.loaded and report.method == "matched"
    assert torch.equal(cand.w_t, state["proj.weight"].t())
    assert "w_t <- proj.weight (transposed)" in report.message
    mapped = {m.reference for m in report.matches}
    assert mapped == {"weight", "bias", "proj.weight", "proj.bias"}


def test_weights_that_cannot_be_mapped_are_named_and_the_failure_says_so():
    class Cand(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(5))  # 5, not 6: no reference tensor fits

    report = bind(Cand(), {"weight": torch.randn(6)})
    assert not report.loaded and report.method == "none"
    assert report.unmatched_reference == ("weight",) and report.unmatched_candidate == ("scale",)
    assert report.message == (
        "could not map every reference weight onto the candidate: reference weight(s) "
        "weight [6] have no counterpart in the candidate; the candidate's scale [5] keep "
        "their own random initialisation"
    )
    fp = Fingerprint(
        device_kind="cpu",
        device_name="cpu",
        arch="cpu",
        triton_version="x",
        torch_version="x",
        python_version="x",
        kernelscout_version="x",
    )
    failed = EvalResult(
        status=Status.incorrect,
        message="2 of 2 cases failed",
        candidate_sha256="0",
        problem_id="p",
        problem_name="n",
        device="cpu",
        fingerprint=fp,
        started_at="t",
        duration_s=0.0,
    )
    out = annotate(failed, report)
    assert out.weight_binding == report and out.message.startswith("2 of 2 cases failed (could not map")


def test_a_model_without_weights_binds_trivially():
    report = bind(nn.Identity(), {})
    assert report.loaded and report.method == "none"
