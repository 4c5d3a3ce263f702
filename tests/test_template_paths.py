"""The template kernels' run-time paths (whole row, looped, split row, L2-grouped split; plain, persistent and
TMA matmul) each compute the reference under the Triton interpreter at awkward shapes; at H200 sizes the plan
picks the path the fastest kernels use; and refinements follow the parent's diagnostics, saying why."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from kernel_files import import_file

from agent.proposers import knobs as K
from agent.proposers.base import Action, ParentInfo, ProposeRequest
from agent.proposers.family import match_family
from agent.proposers.template import TemplateProposer, render
from evaluation.problem import load_problem
from evaluation.records import (
    DEFAULT_TOLERANCES,
    EvalResult,
    Fingerprint,
    KernelInfo,
    Status,
    TimedCase,
    TimingStats,
    source_sha256,
)

PROBLEMS = Path(__file__).resolve().parents[1] / "evaluation" / "problems"

# Shapes the problems' own CPU cases do not all reach: M=1, N=1, odd widths, more than 64 rows, and rows wider
# than 4096 that are not a power of two (which, with the interpreter's 2-SM stand-in, take the split path).
ROW_CASES = [(1, 64), (3, 1), (7, 97), (70, 33), (2, 5000), (1, 12289), (5, 1000), (2, 4096)]  # last: EVEN chunks
MATMUL_CASES = [(1, 64, 32), (9, 1, 1), (37, 61, 53), (70, 40, 30), (130, 96, 80)]

PATHS = {  # knob changes that make the CPU cases above take each path
    "whole_row": {"split_rows": False, "single_max_n": 16384},
    "looped": {"split_rows": False, "single_max_n": 1024, "block_n": 512, "tile_elems": 2048},
    "split": {"block_n": 512, "programs_per_sm": 4},
    "split_l2_groups": {"block_n": 1024, "programs_per_sm": 8, "split_l2_reuse": True, "cache_hints": False},
    "split_chunk_reductions": {"block_n": 512, "lane_stats": False},
    "looped_chunk_reductions": {"split_rows": False, "single_max_n": 1024, "block_n": 512, "lane_stats": False},
    "persistent_packed": {
        "split_rows": False,
        "persistent": True,
        "programs_per_sm": 1,
        "tile_elems": 32768,
        "elems_per_thread": 2,
    },
}
ROW_FAMILIES = ("layernorm", "rmsnorm", "add_rmsnorm", "softmax", "log_softmax", "cross_entropy", "row_sum")


def _candidate(tmp_path: Path, family: str, changes: dict):
    template = K.TEMPLATE_OF_FAMILY[family]
    knobs = K.validate(template, {**K.default_knobs(template), **changes})
    source = render(match_family(PROBLEMS / f"{family}.py"), knobs)
    tag = hashlib.sha256(source.encode()).hexdigest()[:12]
    path = tmp_path / f"cand_{family}_{tag}.py"
    path.write_text(source)
    return import_file(path, f"_paths_{family}_{tag}"), tag


def _check(tmp_path: Path, family: str, changes: dict, cases: list[dict], dtype: str = "float32") -> None:
    """Each case: reference weights loaded strictly, float64 reference, the default tolerance of the dtype."""
    cand, tag = _candidate(tmp_path, family, changes)
    ref = import_file(PROBLEMS / f"{family}.py", f"_paths_ref_{family}_{tag}")
    tol = getattr(ref, "TOLERANCES", {}).get(dtype) or (DEFAULT_TOLERANCES[dtype].atol, DEFAULT_TOLERANCES[dtype].rtol)
    torch_dtype = getattr(torch, dtype)
    for case in cases:
        for key, value in case.items():
            setattr(ref, key, value)
        torch.manual_seed(0)
        init = ref.get_init_inputs()
        model = ref.Model(*init)
        new = cand.ModelNew(*init)
        new.load_state_dict(model.state_dict(), strict=True)
        torch.manual_seed(1)
        inputs = [x.to(torch_dtype) if x.is_floating_point() else x for x in ref.get_inputs()]
        got = new.to(torch_dtype)(*inputs)
        want = model.double()(*[x.double() if x.is_floating_point() else x for x in inputs])
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        for g, w in zip(got, want):
            assert g.dtype == torch_dtype and g.shape == w.shape, (case, g.dtype, g.shape, w.shape)
            err = (g.double() - w).abs()
            assert not (err > tol[0] + tol[1] * w.abs()).any(), f"{family} {case} {changes}: max err {err.max():.3g}"


def _row_cases(family: str) -> list[dict]:
    width = "V" if family == "cross_entropy" else "N"
    return [{"M": m, width: n} for m, n in ROW_CASES]


# ---------------------------------------------------------------- every path computes the reference


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("family", ROW_FAMILIES)
def test_each_row_path_computes_the_reference_at_awkward_shapes(tmp_path, family, path):
    changes = dict(PATHS[path])
    if family == "row_sum":  # the reduction template has no L2 grouping or per-lane statistics knobs
        changes.pop("split_l2_reuse", None)
        changes.pop("lane_stats", None)
    _check(tmp_path, family, changes, _row_cases(family))


@pytest.mark.parametrize("family", ["layernorm", "add_rmsnorm", "log_softmax", "cross_entropy", "row_sum"])
def test_split_path_loads_bf16_and_reduces_in_fp32(tmp_path, family):
    cases = [c for c in _row_cases(family) if c["M"] <= 2 and max(c.values()) > 4096]
    _check(tmp_path, family, PATHS["split"], cases, dtype="bfloat16")


@pytest.mark.parametrize("family", ["swiglu", "geglu"])
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"tiling": "rows", "block": 256, "cache_hints": False},
        {"block": 512, "persistent": True, "programs_per_sm": 1},
    ],
)
def test_elementwise_computes_the_reference_at_awkward_shapes(tmp_path, family, changes):
    _check(tmp_path, family, changes, [{"M": m, "N": n} for m, n in ROW_CASES])


MATMUL_VARIANTS = {
    "default_hopper_tiles": {},
    "persistent": {"persistent": True, "block_m": 32, "block_n": 32, "block_k": 16},
    "tma": {"tma": True, "block_m": 32, "block_n": 32, "block_k": 16},
    "tma_persistent_split_k": {
        "tma": True,
        "persistent": True,
        "block_m": 64,
        "block_n": 32,
        "block_k": 32,
        "split_k": 2,
    },
}


@pytest.mark.parametrize("variant", sorted(MATMUL_VARIANTS))
def test_matmul_variants_compute_the_reference(tmp_path, variant):
    cases = [{"M": m, "K": k, "N": n} for m, k, n in MATMUL_CASES]
    _check(tmp_path, "matmul_epilogue", MATMUL_VARIANTS[variant], cases)


def test_matmul_tma_variant_in_bf16_widens_only_under_the_interpreter(tmp_path):
    _check(tmp_path, "matmul_epilogue", MATMUL_VARIANTS["tma"], [{"M": 64, "K": 64, "N": 48}], dtype="bfloat16")


def test_matmul_uses_descriptors_only_where_tma_can_read_the_strides(tmp_path):
    cand, _ = _candidate(tmp_path, "matmul_epilogue", {"tma": True, "block_m": 32, "block_n": 32, "block_k": 16})
    aligned, odd = torch.randn(64, 64), torch.randn(37, 61)
    assert all(d is not None for d in cand._descriptors(aligned, torch.randn(48, 64), 32, 32, 16))
    assert cand._descriptors(odd, torch.randn(53, 61), 32, 32, 16) == (None, None)


def test_matmul_default_is_the_hopper_tile_measured_fastest():
    # H200, bf16 8192^3 (agent/search/peers/RESULTS.md): persistent + TMA 128x256x64 reached cuBLAS's matmul alone
    assert K.default_knobs("matmul") == {
        "block_m": 128,
        "block_n": 256,
        "block_k": 64,
        "group_m": 8,
        "num_warps": 8,
        "num_stages": 3,
        "split_k": 1,
        "persistent": True,
        "tma": True,
    }


# ---------------------------------------------------------------- the plan at H200 sizes


def _plan_on_h200(tmp_path, family: str, changes: dict | None = None):
    cand, _ = _candidate(tmp_path, family, changes or {})
    cand._device_facts.cache_clear()
    cand._device_facts = lambda device: (132, 60 << 20)  # an H200: 132 SMs, 60 MB of L2
    return lambda m, n: cand._plan(m, n, n * 2, torch.device("cpu"))


def test_default_plan_at_llm_sizes_is_what_fast_row_kernels_do(tmp_path):
    plan = _plan_on_h200(tmp_path, "layernorm")
    assert plan(8192, 8192) == ("single", 1, 8192, 1)  # whole row in registers, one read
    assert plan(16384, 2048) == ("single", 2, 2048, 1)  # short rows packed two to a program
    assert plan(4096, 32000) == ("looped", 1, 4096, 1)  # wide rows: chunked, online statistics
    path, group, block, splits = plan(16, 4194304)  # few very long rows: split each over many programs
    assert (path, group, block) == ("split", 16, 4096) and 16 * splits >= 132 * 4
    grouped = _plan_on_h200(tmp_path, "layernorm", {"split_l2_reuse": True})(16, 4194304)
    assert grouped[0] == "split" and grouped[1] * 4194304 * 2 <= 30 << 20  # each launch group fits half the L2


@pytest.mark.parametrize("family", ["layernorm", "softmax", "cross_entropy"])
def test_per_lane_statistics_stay_exact_on_rows_with_a_large_offset(tmp_path, family):
    """Welford and the online max per lane are stable where sum(x^2) - n*mean^2 would cancel."""
    cand, _ = _candidate(tmp_path, family, {"single_max_n": 1024, "block_n": 512, "split_rows": False})
    torch.manual_seed(3)
    x = 1000.0 + torch.randn(3, 3001)
    if family == "layernorm":
        new = cand.ModelNew(3001)
        got, want = (
            new(x),
            torch.nn.functional.layer_norm(x.double(), (3001,), new.weight.double(), new.bias.double(), 1e-5),
        )
    elif family == "softmax":
        got, want = cand.ModelNew()(x), torch.softmax(x.double(), -1)
    else:
        t = torch.randint(0, 3001, (3,))
        got, want = cand.ModelNew()(x, t), torch.nn.functional.cross_entropy(x.double(), t, reduction="none")
    torch.testing.assert_close(got.double(), want, atol=2e-4, rtol=2e-4)


def test_warps_follow_the_tile(tmp_path):
    cand, _ = _candidate(tmp_path, "softmax", {"elems_per_thread": 16})
    assert [cand._warps(e) for e in (64, 2048, 4096, 8192, 32768, 1 << 20)] == [1, 4, 8, 16, 32, 32]


# ---------------------------------------------------------------- moves steered by diagnostics

FP = Fingerprint(
    device_kind="cuda",
    device_name="NVIDIA H200",
    arch="sm_90",
    triton_version="3.6.0",
    torch_version="2.11.0",
    python_version="3.12.3",
    kernelscout_version="0",
)


def _stats(ms: float) -> TimingStats:
    return TimingStats(
        latency_ms_p20=ms,
        latency_ms_p50=ms,
        latency_ms_p80=ms,
        latency_ms_min=ms,
        latency_ms_mean=ms,
        n_samples=20,
        n_warmup=5,
        l2_flushed=True,
        method="cuda_graph",
    )


def _result(
    *,
    pct: float | None = None,
    regs: int = 40,
    spills: int = 0,
    status: Status = Status.passed,
    message: str | None = None,
) -> EvalResult:
    timing = ()
    if pct is not None:
        timing = (
            TimedCase(
                case_id="M=16,N=4194304|bfloat16",
                params={"M": 16, "N": 4194304},
                dtype="bfloat16",
                candidate=_stats(1.0),
                baselines=(),
                speedups=(),
                pct_of_ceiling=pct,
            ),
        )
    return EvalResult(
        status=status,
        message=message,
        candidate_sha256="c" * 64,
        problem_id="p",
        problem_name="x",
        device="cuda",
        timing=timing,
        fingerprint=FP,
        started_at="2026-01-01T00:00:00Z",
        duration_s=1.0,
        kernels=(KernelInfo(name="_kernel", n_regs=regs, n_spills=spills, num_warps=8),),
    )


def test_spills_steer_towards_fewer_registers_per_thread_and_say_so():
    moves = K.steered_moves("rowwise", K.default_knobs("rowwise"), _result(pct=80.0, regs=255, spills=48))
    first = moves[0]
    assert first.changes == (("elems_per_thread", 16, 8),)
    assert first.why.startswith("the parent's _kernel spills 48 registers to local memory (255 per thread)")


def test_low_bandwidth_steers_towards_more_parallelism():
    knobs = K.validate("rowwise", {**K.default_knobs("rowwise"), "split_rows": False})
    moves = K.steered_moves("rowwise", knobs, _result(pct=4.0))
    assert moves[0].changes == (("split_rows", False, True),)
    assert "only 4% of the copy ceiling at M=16,N=4194304|bfloat16" in moves[0].why


def test_near_ceiling_bandwidth_steers_towards_more_bytes_in_flight():
    knobs = K.validate("rowwise", {**K.default_knobs("rowwise"), "cache_hints": False})
    moves = K.steered_moves("rowwise", knobs, _result(pct=75.0))
    assert [m.names for m in moves[:2]] == [("cache_hints",), ("elems_per_thread",)]
    assert moves[1].changes == (("elems_per_thread", 16, 32),)


def test_nothing_to_steer_by_at_the_ceiling_or_without_measurements():
    assert K.steered_moves("rowwise", K.default_knobs("rowwise"), _result(pct=95.0)) == []
    assert K.steered_moves("rowwise", K.default_knobs("rowwise"), _result()) == []
    assert K.steered_moves("rowwise", K.default_knobs("rowwise"), None) == []


def test_out_of_resources_steers_a_matmul_repair_to_fewer_stages():
    failed = _result(
        status=Status.compile_error,
        message="OutOfResources: out of resource: shared memory, Required: 262144, Hardware limit: 232448",
    )
    moves = K.steered_moves("matmul", K.default_knobs("matmul"), failed)
    assert moves[0].changes == (("num_stages", 3, 2),) and "ran out of shared memory" in moves[0].why


def test_refine_proposes_the_steered_move_first_with_its_evidence():
    problem = load_problem(str(PROBLEMS / "layernorm.py"), device="cpu")
    knobs = K.default_knobs("rowwise")
    source = render(match_family(PROBLEMS / "layernorm.py"), knobs)
    parent = ParentInfo(
        candidate_id=source_sha256(source),
        source=source,
        knobs=knobs,
        transformation_tags=("tile_elems=4096",),
        result=_result(pct=70.0, regs=255, spills=12),
    )
    request = ProposeRequest(
        problem=problem,
        device="cuda",
        arch="sm_90",
        device_name="NVIDIA H200",
        action=Action.refine,
        parent=parent,
        n=2,
        seen_sha256=frozenset({parent.candidate_id}),
    )
    first, second = TemplateProposer().propose(request).proposals
    assert first.transformation_tags == ("elems_per_thread=8",)
    assert first.rationale.startswith("refine, elems_per_thread 16->8: the parent's _kernel spills 12 registers")
    assert second.transformation_tags == ("single_max_n=8192",)
