"""The family matcher reads which kernel family a reference computes from the ops it traces to."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

from agent.proposers.family import FAMILIES, FamilyMatchError, match_family
from evaluation.errors import KscoutError

PROBLEMS = Path(__file__).resolve().parents[1] / "evaluation" / "problems"
BUILTINS = sorted(p.stem for p in PROBLEMS.glob("*.py") if not p.stem.startswith("_"))


def _op_family(name: str) -> str:
    spec = importlib.util.spec_from_file_location(f"_fm_{name}", PROBLEMS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OP_FAMILY


def _reference(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n" + textwrap.dedent(body))
    return path


def test_every_family_has_its_builtin_problem():
    assert sorted(BUILTINS) == sorted(FAMILIES)


@pytest.mark.parametrize("name", BUILTINS)
def test_matcher_agrees_with_every_builtin_op_family(name):
    match = match_family(PROBLEMS / f"{name}.py")
    assert match.family == _op_family(name)
    assert match.method == "fx"


def test_layernorm_match_names_weight_bias_and_eps_from_the_graph():
    match = match_family(PROBLEMS / "layernorm.py")
    assert match.roles == {"x": "x", "weight": "weight", "bias": "bias"}
    assert match.constants["eps"] == 1e-5
    assert match.init_signature == "n"
    assert [(p.name, p.shape_exprs) for p in match.params] == [("weight", ("n",)), ("bias", ("n",))]


def test_rmsnorm_chain_yields_its_eps_and_weight():
    match = match_family(PROBLEMS / "rmsnorm.py")
    assert match.ops_seen == ("pow", "mean", "add", "rsqrt", "mul")
    assert match.constants["eps"] == 1e-6
    assert match.roles["weight"] == "weight"


def test_add_rmsnorm_keeps_the_reference_output_order():
    match = match_family(PROBLEMS / "add_rmsnorm.py")
    assert match.roles["residual"] == "residual"
    assert match.constants["outputs"] == ["y", "h"]


def test_matmul_epilogue_maps_weight_dims_to_init_arguments():
    match = match_family(PROBLEMS / "matmul_epilogue.py")
    assert match.constants == {"activation": "gelu_tanh", "weight_layout": "nk"}
    weight = next(p for p in match.params if p.name == "weight")
    # The default init has K == N == 4096: only the probe build tells which argument is which dim.
    assert weight.shape_exprs == ("n", "k")


def test_kernelbench_layernorm_module_maps_with_nested_parameter_names(tmp_path):
    path = _reference(
        tmp_path,
        "kb_ln",
        """
        class Model(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.ln = nn.LayerNorm(dim)

            def forward(self, x):
                return self.ln(x)

        def get_inputs():
            return [torch.randn(16, 64)]

        def get_init_inputs():
            return [64]
        """,
    )
    match = match_family(path)
    assert match.family == "layernorm"
    assert match.roles == {"x": "x", "weight": "ln.weight", "bias": "ln.bias"}
    assert [(p.name, p.shape_exprs, p.init) for p in match.params] == [
        ("ln.weight", ("dim",), "ones"),
        ("ln.bias", ("dim",), "zeros"),
    ]


def test_softmax_over_dim_1_of_a_matrix_is_the_last_dim(tmp_path):
    path = _reference(
        tmp_path,
        "kb_softmax",
        """
        class Model(nn.Module):
            def forward(self, x):
                return torch.softmax(x, dim=1)

        def get_inputs():
            return [torch.randn(16, 16384)]

        def get_init_inputs():
            return []
        """,
    )
    assert match_family(path).family == "softmax"


def test_softmax_over_the_first_dim_is_refused(tmp_path):
    path = _reference(
        tmp_path,
        "kb_softmax0",
        """
        class Model(nn.Module):
            def forward(self, x):
                return torch.softmax(x, dim=0)

        def get_inputs():
            return [torch.randn(16, 64)]

        def get_init_inputs():
            return []
        """,
    )
    with pytest.raises(FamilyMatchError, match="softmax"):
        match_family(path)


def test_conv2d_is_refused_with_an_error_naming_conv2d(tmp_path):
    path = _reference(
        tmp_path,
        "kb_conv",
        """
        class Model(nn.Module):
            def __init__(self, cin, cout, k):
                super().__init__()
                self.conv = nn.Conv2d(cin, cout, k)

            def forward(self, x):
                return self.conv(x)

        def get_inputs():
            return [torch.randn(2, 3, 16, 16)]

        def get_init_inputs():
            return [3, 8, 3]
        """,
    )
    with pytest.raises(FamilyMatchError, match=r"\(conv2d\)") as info:
        match_family(path)
    assert isinstance(info.value, KscoutError)


def test_an_op_outside_the_pattern_is_named_and_refused(tmp_path):
    path = _reference(
        tmp_path,
        "kb_ln_relu",
        """
        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(F.layer_norm(x, (x.shape[-1],)))

        def get_inputs():
            return [torch.randn(4, 32)]

        def get_init_inputs():
            return []
        """,
    )
    with pytest.raises(FamilyMatchError, match=r"layer_norm, relu"):
        match_family(path)


def test_shape_dependent_control_flow_falls_back_to_aten_dispatch(tmp_path):
    path = _reference(
        tmp_path,
        "kb_dyn",
        """
        class Model(nn.Module):
            def forward(self, x):
                if x.shape[-1] > 1:
                    return torch.log_softmax(x, dim=-1)
                return x

        def get_inputs():
            return [torch.randn(4, 4096)]

        def get_init_inputs():
            return []
        """,
    )
    match = match_family(path)
    assert (match.family, match.method) == ("log_softmax", "dispatch")


def test_log_softmax_then_nll_loss_is_cross_entropy(tmp_path):
    path = _reference(
        tmp_path,
        "kb_ce",
        """
        class Model(nn.Module):
            def forward(self, logits, targets):
                return F.nll_loss(F.log_softmax(logits, dim=-1), targets, reduction="sum")

        def get_inputs():
            return [torch.randn(8, 100), torch.randint(0, 100, (8,))]

        def get_init_inputs():
            return []
        """,
    )
    match = match_family(path)
    assert match.family == "cross_entropy"
    assert match.roles == {"logits": "logits", "targets": "targets"}
    assert match.constants["reduction"] == "sum"


def test_linear_relu_module_and_x_at_weight_layouts(tmp_path):
    linear = _reference(
        tmp_path,
        "kb_linear",
        """
        class Model(nn.Module):
            def __init__(self, in_features, out_features):
                super().__init__()
                self.fc = nn.Linear(in_features, out_features)

            def forward(self, x):
                return torch.relu(self.fc(x))

        def get_inputs():
            return [torch.randn(8, 32)]

        def get_init_inputs():
            return [32, 48]
        """,
    )
    kn = _reference(
        tmp_path,
        "kb_kn",
        """
        class Model(nn.Module):
            def __init__(self, k, n):
                super().__init__()
                self.w = nn.Parameter(torch.randn(k, n))

            def forward(self, x):
                return x @ self.w

        def get_inputs():
            return [torch.randn(8, 32)]

        def get_init_inputs():
            return [32, 48]
        """,
    )
    m1, m2 = match_family(linear), match_family(kn)
    assert (m1.family, m1.constants["activation"], m1.roles["weight"]) == ("matmul_epilogue", "relu", "fc.weight")
    assert m1.constants["weight_layout"] == "nk"
    assert [p.shape_exprs for p in m1.params] == [("out_features", "in_features"), ("out_features",)]
    assert (m2.family, m2.constants["weight_layout"], m2.constants["activation"]) == ("matmul_epilogue", "kn", "none")
    assert "bias" not in m2.roles


def test_missing_reference_file_is_a_clear_error(tmp_path):
    with pytest.raises(FamilyMatchError, match="not found"):
        match_family(tmp_path / "nope.py")
