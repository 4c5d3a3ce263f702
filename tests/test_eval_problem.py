"""Problems: loading built-ins and KernelBench files, derived shape sets, identity, trial inputs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from evaluation import list_problems, load_problem
from evaluation.errors import ProblemError
from evaluation.inputs import make_inputs
from evaluation.problem import exec_problem
from evaluation.records import DEFAULT_TOLERANCES
from evaluation.shapes import CPU_MAX_NUMEL, footprint

FIXTURES = Path(__file__).parent / "eval_fixtures"
KB = FIXTURES / "rmsnorm_kb.py"


def _values(info, name):
    return {c.params[name] for c in info.shape_cases}


def test_layernorm_builtin_uses_its_declared_cpu_cases_in_both_dtypes():
    info = load_problem("layernorm")
    assert info.builtin and info.op_family == "layernorm"
    assert info.dtypes == ("float32", "bfloat16")
    declared = exec_problem(info.source_path).SHAPES["cpu"]
    assert [c.case_id for c in info.shape_cases[:3]] == ["M=8,N=256|float32", "M=8,N=256|bfloat16", "M=1,N=64|float32"]
    assert len(info.shape_cases) == 2 * len(declared)
    assert [c.tags for c in info.shape_cases[::2]] == [tuple(d["tags"]) for d in declared]
    assert info.tolerances["bfloat16"] == DEFAULT_TOLERANCES["bfloat16"]
    assert info.seed_path.endswith("evaluation/seeds/layernorm.py")
    assert info.has_byte_model and info.has_flop_model
    assert re.fullmatch(r"[0-9a-f]{16}", info.problem_id)


def test_cuda_shape_set_of_a_builtin_differs_and_so_does_its_identity():
    cpu, cuda = load_problem("layernorm", "cpu"), load_problem("layernorm", "cuda")
    assert ("M=8192,N=8192|float32", ("largest", "timed")) in [(c.case_id, c.tags) for c in cuda.shape_cases]
    assert cpu.problem_id != cuda.problem_id
    assert load_problem("layernorm", "cpu").problem_id == cpu.problem_id


def test_list_problems_returns_every_builtin_file():
    names = [p.name for p in list_problems()]
    expected = sorted(p.stem for p in (Path(__file__).parent.parent / "evaluation" / "problems").glob("[!_]*.py"))
    assert names == expected and "layernorm" in names


def test_problem_identity_ignores_comments_and_blank_lines_but_not_code(tmp_path):
    src = KB.read_text()
    (tmp_path / "a.py").write_text(src)
    (tmp_path / "b.py").write_text("# a comment\n\n" + src.replace("\n\n", "\n\n\n   \n") + "\n# trailing\n")
    (tmp_path / "c.py").write_text(src.replace("self.eps = eps", "self.eps = eps * 1.0"))
    ids = [load_problem(str(tmp_path / f"{n}.py")).problem_id for n in "abc"]
    assert ids[0] == ids[1] != ids[2]


@pytest.mark.parametrize(
    "spec,content,needle",
    [
        ("nosuchproblem", None, "built-in problems: add_rmsnorm"),
        ("missing/file.py", None, "problem file not found"),
        ("bad.py", "def broken(:\n", "syntax error in problem file"),
        ("nomodel.py", "import torch\ndef get_inputs():\n    return []\n", "defines no `Model`"),
        ("noinputs.py", "import torch\nclass Model(torch.nn.Module):\n    pass\n", "defines no `get_inputs`"),
    ],
)
def test_bad_problem_specs_raise_problem_error_with_one_line(tmp_path, spec, content, needle):
    if content is not None:
        (tmp_path / spec).write_text(content)
        spec = str(tmp_path / spec)
    elif spec.endswith(".py"):
        spec = str(tmp_path / spec)
    with pytest.raises(ProblemError) as info:
        load_problem(spec)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_file_without_model_is_refused_before_any_of_it_runs(tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef get_inputs():\n    return []\n")
    with pytest.raises(ProblemError):
        load_problem(str(script))
    assert not marker.exists()


def test_kernelbench_file_with_huge_shipped_size_gets_small_cpu_cases_plus_edges():
    info = load_problem(str(KB), "cpu")
    rep = info.shape_cases[0]
    assert rep.tags == ("representative", "timed")
    assert rep.params["kernel_size"] == 3  # structural constants keep their value
    assert footprint(KB, rep.params).max_numel <= CPU_MAX_NUMEL
    assert rep.params["batch_size"] >= 8 and rep.params["dim"] >= 8
    # rows get 1 and 97; the normalised width also 1537, past one 1024-wide block
    assert {1, 97} <= _values(info, "batch_size") and {1, 97, 1537} <= _values(info, "dim")
    assert max(c.params["batch_size"] for c in info.shape_cases if "big" not in c.tags) < 1024
    assert {c.tags for c in info.shape_cases[1:]} == {("edge",), ("big",)}
    assert all(footprint(KB, c.params).max_numel <= 16384 for c in info.shape_cases if "big" not in c.tags)


def test_set_pins_a_constant_in_every_case_and_drops_its_edges():
    info = load_problem(str(KB), "cpu", {"dim": 4099})
    assert _values(info, "dim") == {4099}
    assert {1, 97, 1537} & _values(info, "batch_size") == {1}  # 97 rows of 4099 exceed the budget
    builtin = load_problem("layernorm", "cpu", {"N": 130})
    declared_m = {d["M"] for d in exec_problem(builtin.source_path).SHAPES["cpu"]}
    assert _values(builtin, "N") == {130} and _values(builtin, "M") == declared_m


def test_set_with_an_unknown_constant_or_a_bad_value_is_refused():
    with pytest.raises(ProblemError, match="unknown constant 'width'.*batch_size, dim, kernel_size"):
        load_problem(str(KB), "cpu", {"width": 8})
    with pytest.raises(ProblemError, match="integers >= 1"):
        load_problem(str(KB), "cpu", {"dim": 0})


def test_cuda_cases_keep_shipped_sizes_when_they_fit_and_add_gpu_edges(tmp_path):
    small = tmp_path / "small.py"
    small.write_text(
        KB.read_text().replace("dim = 393216", "dim = 4096").replace("batch_size = 4096", "batch_size = 1024")
    )
    info = load_problem(str(small), "cuda")
    assert info.shape_cases[0].params == {"batch_size": 1024, "dim": 4096, "kernel_size": 3}
    assert "shipped" in info.shape_cases[0].tags
    assert {1, 4099, 12289} <= _values(info, "dim")


def test_derived_globals_follow_a_rebound_constant():
    module = exec_problem(FIXTURES / "pick_logit.py", {"rows": 5, "classes": 17})
    logits, targets = module.get_inputs()
    assert module.width == 17 and logits.shape == (5, 17) and targets.shape == (5,)


def test_integer_inputs_keep_dtype_and_values_while_floats_are_cast_and_rescaled():
    module = exec_problem(FIXTURES / "pick_logit.py", {"rows": 6, "classes": 10})
    plain = make_inputs(module, "bfloat16", seed=11, trial=0, device="cpu")
    scaled = make_inputs(module, "bfloat16", seed=11, trial=1, device="cpu")
    assert plain[0].dtype == torch.bfloat16 and plain[1].dtype == torch.int64
    assert torch.equal(plain[1], scaled[1])
    torch.manual_seed(11)
    raw, _ = module.get_inputs()
    assert torch.equal(scaled[0], (raw * 4 + 1.5).to(torch.bfloat16))
    assert torch.equal(make_inputs(module, "bfloat16", seed=11, trial=1, device="cpu")[0], scaled[0])


def test_non_negative_inputs_are_only_scaled_never_shifted(tmp_path):
    problem = tmp_path / "probs.py"
    problem.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, p):\n        return p.log()\n"
        "n = 16\ndef get_inputs():\n    return [torch.rand(n)]\n"
    )
    module = exec_problem(problem)
    torch.manual_seed(3)
    raw = module.get_inputs()[0]
    assert torch.equal(make_inputs(module, "float32", 3, 1, "cpu")[0], raw * 4)
    assert torch.equal(make_inputs(module, "float32", 3, 2, "cpu")[0], raw * 0.01)
    # a float64 case scales in float64: the trial's inputs are as exact as its dtype
    assert torch.equal(make_inputs(module, "float64", 3, 2, "cpu")[0], raw.double() * 0.01)


def test_rescaling_never_writes_into_the_tensor_get_inputs_returned(tmp_path):
    """The scale is applied in place to a copy: a problem that hands out one module-level tensor (or the
    same tensor twice) must not see it rescaled, and trial 1 must not compound on trial 0."""
    problem = tmp_path / "shared.py"
    problem.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
        "X = torch.linspace(-1.0, 1.0, 9)\ndef get_inputs():\n    return [X, X]\n"
    )
    module = exec_problem(problem)
    before = module.X.clone()
    a, b = make_inputs(module, "float32", 0, 1, "cpu")
    assert torch.equal(module.X, before)
    assert torch.equal(a, before * 4 + 1.5) and torch.equal(b, a)  # each scaled once, not twice


def test_tolerances_declared_in_the_problem_override_the_defaults(tmp_path):
    problem = tmp_path / "tol.py"
    shutil.copy(KB, problem)
    problem.write_text(problem.read_text() + "\nTOLERANCES = {'float32': (1e-3, 2e-3)}\n")
    tol = load_problem(str(problem)).tolerances["float32"]
    assert (tol.atol, tol.rtol) == (1e-3, 2e-3)


def test_time_case_selection_makes_only_the_named_cases_timed_and_keeps_other_tags():
    from evaluation.harness import timed_cases

    declared = load_problem("layernorm", "cuda")
    picked = load_problem("layernorm", "cuda", timed=["M=16384,N=2048|bfloat16"])
    tags = {c.case_id: c.tags for c in picked.shape_cases}
    assert [c.case_id for _, c in timed_cases(picked)] == ["M=16384,N=2048|bfloat16"]
    assert tags["M=16384,N=2048|bfloat16"] == ("representative", "timed")
    assert tags["M=16384,N=2048|float32"] == ("representative",)
    assert tags["M=8192,N=8192|bfloat16"] == ("largest",)
    assert tags["M=1,N=4096|bfloat16"] == ("edge",)  # untouched
    assert [c.case_id for c in picked.shape_cases] == [c.case_id for c in declared.shape_cases]
    # a CPU case with no "timed" tag gains it
    cpu = load_problem("layernorm", "cpu", timed=["M=7,N=97|float32"])
    assert {c.case_id: c.tags for c in cpu.shape_cases}["M=7,N=97|float32"] == ("edge", "timed")


def test_the_timed_selection_is_part_of_the_problem_identity():
    one = load_problem("layernorm", "cuda", timed=["M=4096,N=4096|bfloat16"])
    assert one.problem_id == load_problem("layernorm", "cuda", timed=["M=4096,N=4096|bfloat16"]).problem_id
    two = load_problem("layernorm", "cuda", timed=["M=4096,N=4096|float32"])
    assert len({one.problem_id, two.problem_id, load_problem("layernorm", "cuda").problem_id}) == 3


def test_dtype_selection_keeps_every_declared_shape_in_only_the_chosen_dtype():
    full = load_problem("layernorm", "cuda")
    bf16 = load_problem("layernorm", "cuda", dtypes=["bfloat16"])
    assert bf16.dtypes == ("bfloat16",) and set(bf16.tolerances) == {"bfloat16"}
    assert [c.case_id for c in bf16.shape_cases] == [c.case_id for c in full.shape_cases if c.dtype == "bfloat16"]
    assert len(bf16.shape_cases) == len(exec_problem(full.source_path).SHAPES["cuda"])
    # a narrower correctness set is another problem: no evaluation proven on one is reused for the other
    assert bf16.problem_id != full.problem_id
    # declared order wins over the order asked for, so the identity does not depend on it
    both = load_problem("layernorm", "cuda", dtypes=["bfloat16", "float32"])
    assert both.dtypes == ("float32", "bfloat16") and both.problem_id == full.problem_id


def test_an_undeclared_dtype_is_refused_with_the_declared_ones():
    with pytest.raises(ProblemError) as err:
        load_problem("layernorm", "cpu", dtypes=["float16"])
    assert str(err.value) == "layernorm does not declare dtype 'float16'; its dtypes: float32, bfloat16"


def test_an_unknown_time_case_is_refused_with_the_valid_ids():
    with pytest.raises(ProblemError) as err:
        load_problem("layernorm", "cpu", timed=["M=4096,N=4096|bfloat16"])
    msg = str(err.value)
    assert "unknown case id 'M=4096,N=4096|bfloat16'" in msg
    assert "valid ids: M=8,N=256|float32, M=8,N=256|bfloat16" in msg


def test_a_problem_declares_whether_its_fp32_baselines_may_use_tf32(tmp_path):
    assert load_problem("matmul_epilogue").float32_matmul_precision == "high"  # its tolerance admits TF32
    assert load_problem("layernorm").float32_matmul_precision == "highest"  # the default: IEEE fp32
    src = (Path(load_problem("row_sum").source_path)).read_text()
    (tmp_path / "loose.py").write_text(src + '\nFLOAT32_MATMUL_PRECISION = "medium"\n')
    with pytest.raises(ProblemError, match="FLOAT32_MATMUL_PRECISION must be 'highest'.*not 'medium'"):
        load_problem(str(tmp_path / "loose.py"))
