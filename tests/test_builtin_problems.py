"""Built-in problems declare what the harness needs, and each seed kernel computes its reference.

Seeds run under the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1) on every declared
CPU case, in float32 and bfloat16, against the reference run in float64 on the same (cast) inputs.
"""

from __future__ import annotations

import importlib
import inspect
import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from evaluation.records import DEFAULT_TOLERANCES

OWNED = (
    "rmsnorm",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "swiglu",
    "geglu",
    "add_rmsnorm",
    "row_sum",
    "matmul_epilogue",
)
ALL = ("layernorm",) + OWNED
SIZE_CONSTANTS = {name: ("M", "N") for name in ALL}
SIZE_CONSTANTS["cross_entropy"] = ("M", "V")
SIZE_CONSTANTS["matmul_epilogue"] = ("M", "K", "N")
KNOWN_TAGS = {"representative", "timed", "largest", "edge", "shipped", "big", "llm_scale", "long_rows"}
# Under the interpreter kernels read host memory; without it (a GPU machine) they need the GPU.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRETED or not torch.cuda.is_available() else "cuda"
WITH_PARAMETERS = ("layernorm", "rmsnorm", "add_rmsnorm", "matmul_epilogue")
# Seeds whose rows loop over fixed blocks, and the attribute that caps the block.
LOOPED = {
    "softmax": "max_block_n",
    "log_softmax": "max_block_n",
    "cross_entropy": "max_block_v",
    "row_sum": "max_block_n",
    "layernorm": "max_block_n",
    "rmsnorm": "max_block_n",
    "add_rmsnorm": "max_block_n",
}
# What a seed's forward may ask of PyTorch: allocation, views, and the interpreter's own staging of
# tensors through host memory (copy_, new_empty, set_). Anything else is PyTorch doing the work.
NON_COMPUTE_OPS = {
    "aten.empty.memory_format",
    "aten.empty_like.default",
    "aten.empty_strided.default",
    "aten.new_empty.default",
    "aten.view.default",
    "aten._unsafe_view.default",
    "aten.copy_.default",
    "aten.set_.source_Storage",
    "aten.set_.source_Storage_storage_offset",
}


def _problem(name):
    return importlib.import_module(f"evaluation.problems.{name}")


def _seed(name):
    return importlib.import_module(f"evaluation.seeds.{name}")


def _cases(names, device="cpu", slow_big=False):
    """`slow_big`: the "big" case is marked slow (a test that forces tiny blocks on it takes 5-25 s)."""

    def case_id(name, case):
        return f"{name}-" + ",".join(f"{k}={v}" for k, v in case.items() if k != "tags")

    def marks(case):
        return [pytest.mark.slow] if slow_big and "big" in case["tags"] else []

    return [
        pytest.param(name, case, id=case_id(name, case), marks=marks(case))
        for name in names
        for case in _problem(name).SHAPES[device]
    ]


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def _tolerance(mod, dtype: str) -> tuple[float, float]:
    override = getattr(mod, "TOLERANCES", {}).get(dtype)
    if override is not None:
        return override
    tol = DEFAULT_TOLERANCES[dtype]
    return tol.atol, tol.rtol


def _bind(mod, case, monkeypatch):
    for key, value in case.items():
        if key != "tags":
            monkeypatch.setattr(mod, key, value)


def _run(name, case, dtype, monkeypatch, *, load_weights=True, tweak=None):
    """Model and ModelNew after one seed; returns (expected fp64, actual, inputs, originals)."""
    mod, seed = _problem(name), _seed(name)
    _bind(mod, case, monkeypatch)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    model_new = seed.ModelNew(*mod.get_init_inputs())
    if load_weights:
        model_new.load_state_dict(model.state_dict())
    if tweak is not None:
        tweak(model_new)
    torch_dtype = getattr(torch, dtype)
    inputs = [t.to(torch_dtype) if t.is_floating_point() else t for t in mod.get_inputs()]
    originals = [t.clone() for t in inputs]
    on_device = [t.to(DEVICE) for t in inputs]
    with torch.no_grad():
        expected = model.double()(*[t.double() if t.is_floating_point() else t for t in inputs])
        actual = model_new.to(DEVICE, torch_dtype)(*on_device)
    as_list = lambda out: list(out) if isinstance(out, (tuple, list)) else [out]  # noqa: E731
    after = [t.cpu() for t in on_device]
    return as_list(expected), [t.cpu() for t in as_list(actual)], after, originals


def _worst_ratio(expected, actual, atol, rtol) -> float:
    """max |actual - expected| / (atol + rtol |expected|): at most 1 means within tolerance."""
    err = (actual.double() - expected).abs()
    return (err / (atol + rtol * expected.abs())).max().item()


def _assert_matches(name, dtype, expected, actual):
    atol, rtol = _tolerance(_problem(name), dtype)
    assert len(actual) == len(expected)
    for exp, act in zip(expected, actual):
        assert act.shape == exp.shape
        assert act.dtype == getattr(torch, dtype)
        assert torch.isfinite(act).all()
        ratio = _worst_ratio(exp, act, atol, rtol)
        max_abs = (act.double() - exp).abs().max().item()
        assert ratio <= 1.0, f"max abs error {max_abs:.3e} is {ratio:.2f}x tolerance {atol}, {rtol}"


# ---- the seeds compute their references ----------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name,case", _cases(ALL))
def test_seed_matches_float64_reference_on_every_cpu_case(name, case, dtype, monkeypatch):
    expected, actual, inputs, originals = _run(name, case, dtype, monkeypatch)
    _assert_matches(name, dtype, expected, actual)
    assert all(torch.equal(a, b) for a, b in zip(inputs, originals)), "seed wrote into its input"


@pytest.mark.parametrize("name,case", _cases(LOOPED, slow_big=True))
def test_looped_seed_stays_correct_when_a_row_spans_many_blocks(name, case, monkeypatch):
    # A 16-wide block makes N=1000 take 63 steps with a ragged tail: the online (max, sum) must hold
    tweak = lambda m: setattr(m, LOOPED[name], 16)  # noqa: E731
    expected, actual, _, _ = _run(name, case, "float32", monkeypatch, tweak=tweak)
    _assert_matches(name, "float32", expected, actual)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name,case", _cases(["matmul_epilogue"], slow_big=True))
def test_matmul_seed_stays_correct_with_many_ragged_tiles(name, case, dtype, monkeypatch):
    def small_tiles(m):
        m.block_m, m.block_n, m.block_k = 16, 16, 16

    expected, actual, _, _ = _run(name, case, dtype, monkeypatch, tweak=small_tiles)
    _assert_matches(name, dtype, expected, actual)


@pytest.mark.parametrize("name", WITH_PARAMETERS)
def test_comparison_catches_a_seed_whose_weights_were_not_loaded(name, monkeypatch):
    # ModelNew keeps its own random weights (drawn after Model's): the comparison must fail.
    case = _problem(name).SHAPES["cpu"][0]
    expected, actual, _, _ = _run(name, case, "float32", monkeypatch, load_weights=False)
    atol, rtol = _tolerance(_problem(name), "float32")
    assert _worst_ratio(expected[0], actual[0], atol, rtol) > 10.0


class _RecordOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", ALL)
def test_seed_forward_leaves_all_compute_to_triton(name, monkeypatch):
    mod, seed = _problem(name), _seed(name)
    _bind(mod, mod.SHAPES["cpu"][0], monkeypatch)
    model_new = seed.ModelNew(*mod.get_init_inputs()).to(DEVICE)
    inputs = [t.to(DEVICE) for t in mod.get_inputs()]
    with torch.no_grad(), _RecordOps() as rec:
        model_new(*inputs)
    assert rec.ops - NON_COMPUTE_OPS == set()
    if INTERPRETED:
        assert "aten.copy_.default" in rec.ops  # the interpreter staged a kernel launch


# ---- the declarations the harness reads ---------------------------------------------------------


@pytest.mark.parametrize("name", OWNED)
def test_problem_declares_family_dtypes_and_shape_sets(name):
    mod = _problem(name)
    assert mod.OP_FAMILY == name
    assert isinstance(mod.DESCRIPTION, str) and mod.DESCRIPTION
    assert mod.DTYPES == ("float32", "bfloat16")
    assert {"cpu", "cuda"} <= set(mod.SHAPES)
    for const in SIZE_CONSTANTS[name]:
        assert isinstance(getattr(mod, const), int)
    for device, cases in mod.SHAPES.items():
        for case in cases:
            assert set(case) == set(SIZE_CONSTANTS[name]) | {"tags"}, (device, case)
            assert set(case["tags"]) <= KNOWN_TAGS and case["tags"], (device, case)
            assert all(isinstance(case[c], int) and case[c] >= 1 for c in SIZE_CONSTANTS[name])
    for dtype, (atol, rtol) in getattr(mod, "TOLERANCES", {}).items():
        assert dtype in mod.DTYPES and atol > 0 and rtol > 0


@pytest.mark.parametrize("name", OWNED)
def test_cuda_set_has_timed_cases_and_exactly_one_largest(name):
    cases = _problem(name).SHAPES["cuda"]
    assert any("timed" in c["tags"] for c in cases)
    assert sum("largest" in c["tags"] for c in cases) == 1


@pytest.mark.parametrize("name", OWNED)
def test_cpu_set_stays_small_enough_for_the_interpreter(name):
    for case in _problem(name).SHAPES["cpu"]:
        numel = max(case["M"] * case.get("K", 1), case["M"] * case.get("N", case.get("V", 1)))
        if "big" in case["tags"]:  # one case past the common block sizes, a few hundred thousand elements
            assert numel <= 300_000, case
        else:
            assert numel <= 8192 or (case["M"] <= 8 and numel <= 16384), case


REDUCED = {name: ("N",) for name in ALL}
REDUCED.update(cross_entropy=("V",), matmul_epilogue=("K",), swiglu=(), geglu=())


@pytest.mark.parametrize("name", ALL)
def test_cpu_set_crosses_the_common_block_sizes(name):
    """Issue 10: one case with more than 64 rows and a non-power-of-two width above 4096; issue 17: every
    reduced dimension past 1024 somewhere, and one case with every size a non-power-of-two at once."""
    cases = _problem(name).SHAPES["cpu"]
    width = {"cross_entropy": "V"}.get(name, "N")
    assert any(c["M"] > 64 and c[width] > 4096 and not _is_pow2(c[width]) for c in cases), name
    for dim in REDUCED[name]:
        assert any(1024 < c[dim] for c in cases if "big" not in c["tags"]), (name, dim)
    sizes = SIZE_CONSTANTS[name]
    assert any(all(not _is_pow2(c[d]) for d in sizes) for c in cases), name


NEW_GPU_CASES = {
    name: {(16384, 8192): "llm_scale"}
    for name in ("layernorm", "rmsnorm", "add_rmsnorm", "softmax", "log_softmax", "swiglu", "geglu")
}
for _name in ("layernorm", "rmsnorm", "add_rmsnorm", "softmax", "log_softmax"):
    NEW_GPU_CASES[_name][(16, 4194304)] = "long_rows"


@pytest.mark.parametrize("name", sorted(NEW_GPU_CASES))
def test_llm_scale_cuda_cases_are_declared_but_not_timed_by_default(name):
    cases = {(c["M"], c["N"]): c["tags"] for c in _problem(name).SHAPES["cuda"]}
    for shape, tag in NEW_GPU_CASES[name].items():
        assert cases[shape] == (tag,), (shape, cases.get(shape))  # no "timed": --time-case selects them


def test_cross_entropy_declares_the_llama3_vocabulary_case():
    cases = {(c["M"], c["V"]): c["tags"] for c in _problem("cross_entropy").SHAPES["cuda"]}
    assert "timed" in cases[(8192, 128256)]


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", OWNED)
def test_edges_give_every_size_one_a_prime_and_a_non_multiple_of_64(name, device):
    edges = [c for c in _problem(name).SHAPES[device] if "edge" in c["tags"]]
    for const in SIZE_CONSTANTS[name]:
        values = {c[const] for c in edges}
        assert 1 in values, (const, values)
        assert any(_is_prime(v) for v in values), (const, values)
        assert any(v % 64 for v in values if v > 1), (const, values)


@pytest.mark.parametrize("name,case", _cases(OWNED))
def test_get_inputs_follow_the_bound_size_constants(name, case, monkeypatch):
    mod = _problem(name)
    _bind(mod, case, monkeypatch)
    inputs = mod.get_inputs()
    if name == "cross_entropy":
        logits, targets = inputs
        assert logits.shape == (case["M"], case["V"]) and logits.dtype == torch.float32
        assert targets.shape == (case["M"],) and targets.dtype == torch.int64
        assert 0 <= targets.min().item() and targets.max().item() < case["V"]
        return
    k = case.get("K", case.get("N"))
    assert all(t.shape == (case["M"], k) and t.dtype == torch.float32 for t in inputs)
    assert all(t.abs().sum().item() > 0 for t in inputs)  # never zeros


@pytest.mark.parametrize("name", OWNED)
def test_seed_takes_the_same_init_arguments_and_parameters_as_model(name, monkeypatch):
    mod, seed = _problem(name), _seed(name)
    _bind(mod, mod.SHAPES["cpu"][2], monkeypatch)
    params = lambda cls: list(inspect.signature(cls.__init__).parameters)  # noqa: E731
    assert params(seed.ModelNew) == params(mod.Model)
    ref_state = mod.Model(*mod.get_init_inputs()).state_dict()
    new_state = seed.ModelNew(*mod.get_init_inputs()).state_dict()
    assert {k: v.shape for k, v in new_state.items()} == {k: v.shape for k, v in ref_state.items()}


# Hand counts for M=3, N=5 (V=7 for cross_entropy; K=4, N=6 for matmul) at 2-byte elements.
BYTES_BY_HAND = {
    "rmsnorm": 2 * (3 * 5) * 2 + 5 * 2,  # read x, write y, read weight = 70
    "softmax": 2 * (3 * 5) * 2,  # read x, write y = 60
    "log_softmax": 2 * (3 * 5) * 2,
    "cross_entropy": (3 * 7) * 2 + 3 * 8 + 3 * 2,  # logits, int64 targets, one loss per row = 72
    "swiglu": 3 * (3 * 5) * 2,  # read a and b, write y = 90
    "geglu": 3 * (3 * 5) * 2,
    "add_rmsnorm": 4 * (3 * 5) * 2 + 5 * 2,  # read x and residual, write y and h, read weight = 130
    "row_sum": (3 * 5) * 2 + 3 * 2,  # read x, write one value per row = 36
    "matmul_epilogue": (3 * 4 + 6 * 4 + 6 + 3 * 6) * 2,  # x, weight, bias, y = 120
}


@pytest.mark.parametrize("name", OWNED)
def test_bytes_moved_counts_each_input_and_output_once(name):
    params = {"M": 3, "N": 5, "V": 7}
    if name == "matmul_epilogue":
        params = {"M": 3, "K": 4, "N": 6}
    assert _problem(name).bytes_moved(params, 2) == BYTES_BY_HAND[name]


@pytest.mark.parametrize("name", OWNED)
def test_flops_grow_linearly_with_rows(name):
    mod = _problem(name)
    params = {c: 97 for c in SIZE_CONSTANTS[name]}
    one, two = mod.flops(params), mod.flops({**params, "M": 2 * params["M"]})
    assert isinstance(one, int) and one > 0 and two == 2 * one


def test_matmul_flops_count_two_per_multiply_add_plus_the_epilogue():
    params = {"M": 3, "K": 4, "N": 6}
    assert _problem("matmul_epilogue").flops(params) == 2 * 3 * 6 * 4 + 10 * 3 * 6
