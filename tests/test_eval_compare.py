"""The parent-side comparison: both the elementwise and the norm test, NaN rules, structure, dtype."""

from __future__ import annotations

import torch

from evaluation.compare import compare
from evaluation.protocol import package
from evaluation.records import Tolerance

FP32 = Tolerance(atol=1e-4, rtol=1e-4)


def _ref(*shape, scale=1.0):
    torch.manual_seed(0)
    return torch.randn(*shape, dtype=torch.float64) * scale


def test_exact_float32_rounding_of_the_reference_passes_with_its_errors_reported():
    ref = _ref(4, 8)
    result = compare(package(ref.float()), ref, "float32", FP32)
    assert result.passed and result.mismatch_count == 0 and result.numel == 32
    assert 0 < result.max_abs_error < 1e-6 and result.output_dtype == "float32" and result.output_shape == (4, 8)


def test_zeros_fail_the_norm_test_even_when_a_huge_atol_lets_every_element_through():
    ref = _ref(64, scale=1e-3)
    result = compare(package(torch.zeros(64)), ref, "float32", Tolerance(atol=1.0, rtol=1e-4))
    assert not result.passed and result.kind == "NormError"
    assert result.message == "relative norm error 1 > rtol 0.0001"


def test_first_mismatch_names_its_index_expected_and_actual():
    ref = _ref(3, 5)
    out = ref.float().clone()
    out[1, 2] += 0.5
    out[2, 4] -= 1.0
    result = compare(package(out), ref, "float32", FP32)
    assert not result.passed and result.kind == "ValueMismatch" and result.mismatch_count == 2
    assert result.first_mismatch.index == (1, 2)
    assert result.first_mismatch.expected == float(ref[1, 2])
    assert result.first_mismatch.actual == float(out[1, 2])
    assert abs(result.max_abs_error - 1.0) < 1e-6
    assert result.message.startswith("2/15 elements not within 0.0001 + 0.0001*|ref|, first at (1, 2)")


def test_nan_where_the_reference_is_finite_fails_but_matching_nan_and_inf_pass():
    ref = _ref(6)
    out = ref.float().clone()
    out[3] = float("nan")
    bad = compare(package(out), ref, "float32", FP32)
    assert not bad.passed and bad.kind == "NonFinite" and bad.first_mismatch.index == (3,)
    ref2 = ref.clone()
    ref2[1], ref2[2] = float("nan"), float("-inf")
    out2 = ref2.float()
    assert compare(package(out2), ref2, "float32", FP32).passed


def test_floating_output_must_come_in_the_case_dtype():
    ref = _ref(4)
    result = compare(package(ref.float()), ref, "bfloat16", FP32)
    assert not result.passed and result.kind == "DtypeMismatch"
    assert result.message == "output dtype float32, expected bfloat16"


def test_shape_and_structure_mismatches_are_named():
    ref = _ref(4, 4)
    assert compare(package(ref.float()[:, :3]), ref, "float32", FP32).kind == "ShapeMismatch"
    tuple_out = compare(package((ref.float(), ref.float())), ref, "float32", FP32)
    assert tuple_out.kind == "StructureMismatch" and "sequence of 2" in tuple_out.message
    assert compare(package(ref.float()), (ref, ref), "float32", FP32).kind == "StructureMismatch"


def test_tuple_outputs_are_compared_item_by_item_and_report_which_output_failed():
    a, b = _ref(3), _ref(2) * 2
    out = (a.float(), b.float().clone())
    out[1][1] += 1.0
    result = compare(package(out), (a, b), "float32", FP32)
    assert not result.passed and result.first_mismatch.output_index == 1
    assert result.message.startswith("output 1: 1/2 elements")


def test_integer_outputs_must_match_exactly_and_keep_their_dtype():
    ref = torch.tensor([3, 1, 4, 1, 5])
    assert compare(package(ref.clone()), ref, "bfloat16", FP32).passed
    off = compare(package(ref + torch.tensor([0, 0, 1, 0, 0])), ref, "float32", FP32)
    assert not off.passed and off.message.startswith("1/5 elements not exactly equal, first at (2,)")
    assert compare(package(ref.int()), ref, "float32", FP32).kind == "DtypeMismatch"


def _numbers(c):
    return (c.passed, c.kind, c.message, c.mismatch_count, c.numel, repr(c.first_mismatch), c.max_abs_error,
            c.max_rel_error)  # fmt: skip


def test_a_comparison_in_chunks_gives_the_verdict_and_numbers_of_one_pass(monkeypatch):
    from evaluation import compare as compare_module

    ref = _ref(5, 23)
    late = ref.float().clone()
    late[4, 20] += 1.0  # the first mismatch lies in the last of 17 chunks of 7
    late[4, 22] += 2.0
    nonfinite = ref.float().clone()
    nonfinite[3, 3] = float("nan")
    norm = (ref + 1e-3).float()  # every element within a loose atol; the norm error is not
    loose = Tolerance(atol=1e-2, rtol=1e-6)
    ints = (ref * 10).round().long()
    wrong_ints = ints.clone()
    wrong_ints[2, 9] += 1
    cases = [
        (ref.float(), ref, "float32", FP32),
        (late, ref, "float32", FP32),
        (nonfinite, ref, "float32", FP32),
        (norm, ref, "float32", loose),
        (wrong_ints, ints, "float32", FP32),
        (ref.float()[0, 0], ref[0, 0], "float32", FP32),  # 0-dim
    ]
    whole = [_numbers(compare(package(a), e, dt, tol)) for a, e, dt, tol in cases]
    monkeypatch.setattr(compare_module, "CHUNK", 7)
    chunked = [_numbers(compare(package(a), e, dt, tol)) for a, e, dt, tol in cases]
    assert chunked == whole
    assert [w[1] for w in whole] == [None, "ValueMismatch", "NonFinite", "NormError", "ValueMismatch", None]
    assert "first at (4, 20)" in whole[1][2] and whole[1][3] == 2


def test_the_judge_compares_on_the_host_when_the_device_runs_out_of_memory(monkeypatch):
    from evaluation import correctness, load_problem, protocol
    from evaluation.inputs import trial_inputs

    info = load_problem("softmax", "cpu")
    case = info.shape_cases[0]
    refs = correctness.References(info, "cpu", 0)
    trial = correctness.regular_trials(11, 1)[0]
    expected = refs.expected(case, trial_inputs(refs.module(case.params), case.dtype, trial, "cpu"))
    blob, strides = protocol.package_bytes(expected.to(getattr(torch, case.dtype)))
    calls = []
    real = correctness.compare

    def full_device(outputs, expected, dtype, tol):
        calls.append(expected.device.type)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(outputs, expected, dtype, tol)

    monkeypatch.setattr(correctness, "compare", full_device)
    verdict = correctness.Judge(refs, "cpu").judge(case, trial, blob, strides)
    assert verdict.passed and verdict.numel == expected.numel()
    assert calls == ["cpu", "cpu"]  # tried once, then again with the reference on the host


def test_each_comparison_counts_the_path_that_judged_it():
    from evaluation import compare as module

    before = module.PATHS.copy()
    ref = _ref(1 << 16)  # large enough for the one-pass kernel, which needs a GPU: the torch passes here
    assert compare(package(ref.float()), ref, "float32", FP32).passed
    assert compare(package(torch.zeros(3, dtype=torch.int64)), torch.zeros(3, dtype=torch.int64), "int64", FP32).passed
    added = module.PATHS - before
    if torch.cuda.is_available():
        assert sum(added.values()) == 2
    else:  # a finite float output on the host takes the short passes; integers the exact ones
        assert added == {"host finite": 1, "torch cpu": 1}


def test_the_short_host_passes_give_the_general_passes_verdict_and_numbers(monkeypatch):
    """Every finite host output takes `_host_finite`; with it switched off the general passes judge the
    same outputs: verdicts, counts, first mismatch and largest errors agree (norms to rounding), and a
    NaN or infinity on either side still goes to the general passes."""
    from evaluation import compare as module

    torch.manual_seed(3)
    ref = torch.randn(257, 129, dtype=torch.float64) * torch.logspace(-6, 3, 129, dtype=torch.float64)
    near = ref.float()
    off = near.clone()
    off[17, 40] += 0.25
    off[200, 120] *= 1.01
    late = near.clone()  # a mismatch in the second of the short passes' pieces only (HOST_PIECE)
    late[200, 120] *= 1.01
    boundary = (ref + (FP32.atol + FP32.rtol * ref.abs()) * 0.999).float()  # each inside its bound; the norm not
    bf = ref.bfloat16()
    drift = (ref * (1 + 5e-5)).float()
    cases = [
        (near, ref, "float32", FP32),
        (off, ref, "float32", FP32),
        (late, ref, "float32", FP32),
        (boundary, ref, "float32", FP32),
        (bf, ref, "bfloat16", Tolerance(atol=1e-2, rtol=1e-2)),
        (drift, ref, "float32", Tolerance(atol=1.0, rtol=1e-5)),  # elementwise fine, the norm not
        (torch.zeros(0), torch.zeros(0, dtype=torch.float64), "float32", FP32),
        (near[0, 0], ref[0, 0], "float32", FP32),
    ]
    before = module.PATHS.copy()
    short = [compare(package(a), e, dt, tol) for a, e, dt, tol in cases]
    assert (module.PATHS - before) == {"host finite": len(cases)}
    monkeypatch.setattr(module, "_host_finite", lambda *args: None)
    general = [compare(package(a), e, dt, tol) for a, e, dt, tol in cases]
    assert [_numbers(c) for c in short] == [_numbers(c) for c in general]
    assert [c.kind for c in short] == [
        None,
        "ValueMismatch",
        "ValueMismatch",
        "NormError",
        None,
        "NormError",
        None,
        None,
    ]
    assert short[1].mismatch_count == 2 and short[1].first_mismatch.index == (17, 40)
    assert ref.numel() > 2 * module.HOST_PIECE > 200 * 129 + 120 > module.HOST_PIECE
    assert short[2].mismatch_count == 1 and short[2].first_mismatch.index == (200, 120)
    monkeypatch.undo()
    inf_ref = ref.clone()
    inf_ref[5, 5] = float("inf")
    matched = near.clone()
    matched[5, 5] = float("inf")
    before = module.PATHS.copy()
    assert compare(package(matched), inf_ref, "float32", FP32).passed  # matching infinities, general passes
    nan_out = near.clone()
    nan_out[9, 9] = float("nan")
    assert compare(package(nan_out), ref, "float32", FP32).kind == "NonFinite"
    assert (module.PATHS - before) == {"torch cpu": 2}


def test_the_compare_benchmark_times_both_paths_and_leaves_the_short_one_in_place():
    from evaluation import compare as module
    from evaluation.bench import host_compare

    before = module.PATHS.copy()
    rows = host_compare(sizes=(1000, 3000), repeats=2)
    assert [r["elements"] for r in rows] == [1000, 3000]
    assert all(r["general_ms"] > 0 and r["short_ms"] > 0 for r in rows)
    assert (module.PATHS - before) == {"torch cpu": 8, "host finite": 8}  # 2 warm-ups + 2 timed, each path
    assert module._host_finite.__name__ == "_host_finite"
