"""Reference graphs for the lowering tests, written here in KernelBench form (Model, get_inputs,
get_init_inputs), one per schedule shape the lowering claims: small sizes, so the Triton interpreter
runs each in about a second. `run_lowered` lowers a reference, writes the candidate for a
configuration, and runs it in this process against the reference (weights loaded the way the
harness loads them), with the worker's compute watch on."""

from __future__ import annotations

import textwrap
import types
from typing import Optional

import torch

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def ref(
    forward: str, inputs: str, init: str = "", init_inputs: str = "[]", consts: str = "", signature: str = "self"
) -> str:
    """A reference file: `forward` is the body of forward(self, ...) including its `def` line."""
    body = textwrap.indent(textwrap.dedent(init), " " * 8) if init.strip() else ""
    return (
        HEADER + textwrap.dedent(consts) + "\n\nclass Model(nn.Module):\n"
        f"    def __init__({signature}):\n        super().__init__()\n{body}\n"
        + textwrap.indent(textwrap.dedent(forward), "    ")
        + f"\n\ndef get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init_inputs}\n"
    )


CASES: dict[str, str] = {
    # pointwise chains with broadcasting, a scalar input, a parameter
    "pointwise_broadcast": ref(
        """
        def forward(self, x, b, s):
            return torch.where(x > 0, F.gelu(x) * b, torch.tanh(x) - s) + self.w
        """,
        "[torch.randn(B, 5, N), torch.randn(5, 1), 0.25]",
        init="self.w = nn.Parameter(torch.randn(n))",
        consts="B = 3\nN = 37\n",
        signature="self, n",
        init_inputs="[N]",
    ),
    # reductions over any dims, kept or dropped
    "sum_mid_keepdim": ref("def forward(self, x):\n    return x.sum(dim=1, keepdim=True)\n", "[torch.randn(4, 33, 7)]"),
    "mean_two_dims": ref("def forward(self, x):\n    return x.mean(dim=(0, 2))\n", "[torch.randn(6, 5, 19)]"),
    "argmax_first": ref("def forward(self, x):\n    return torch.argmax(x, dim=0)\n", "[torch.randn(45, 6)]"),
    "argmin_last": ref("def forward(self, x):\n    return torch.argmin(x, dim=-1)\n", "[torch.randn(6, 45)]"),
    "max_min_values": ref(
        "def forward(self, x):\n    return torch.max(x, dim=1)[0] - torch.min(x, dim=1)[0]\n", "[torch.randn(5, 30, 3)]"
    ),
    "prod": ref("def forward(self, x):\n    return torch.prod(x, dim=1)\n", "[torch.rand(4, 9) + 0.5]"),
    "var_std": ref(
        "def forward(self, x):\n    return x.var(dim=1) + x.std(dim=0, unbiased=False).sum()\n", "[torch.randn(7, 29)]"
    ),
    "logsumexp": ref("def forward(self, x):\n    return torch.logsumexp(x, dim=1)\n", "[torch.randn(5, 70)]"),
    "frobenius": ref("def forward(self, x):\n    return x / torch.norm(x, p='fro')\n", "[torch.randn(3, 4, 11)]"),
    # row-wise normalisations over any dim
    "softmax_dim1": ref("def forward(self, x):\n    return torch.softmax(x, dim=1)\n", "[torch.randn(3, 41, 5)]"),
    "log_softmax": ref("def forward(self, x):\n    return torch.log_softmax(x, dim=-1)\n", "[torch.randn(6, 50)]"),
    "layer_norm": ref(
        "def forward(self, x):\n    return self.ln(x)\n",
        "[torch.randn(4, 6, 10)]",
        init="self.ln = nn.LayerNorm([6, 10])",
    ),
    "rms_norm_dim1": ref(
        """
        def forward(self, x):
            return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)
        """,
        "[torch.randn(2, 13, 3, 4)]",
    ),
    "l1_norm": ref(
        "def forward(self, x):\n    return x / torch.sum(torch.abs(x), dim=1, keepdim=True)\n", "[torch.randn(5, 40)]"
    ),
    "group_norm": ref(
        "def forward(self, x):\n    return self.gn(x)\n",
        "[torch.randn(3, G * 4, 5)]",
        init="self.gn = nn.GroupNorm(groups, groups * 4)",
        consts="G = 3\n",
        signature="self, groups",
        init_inputs="[G]",
    ),
    "instance_norm": ref(
        "def forward(self, x):\n    return self.inorm(x)\n",
        "[torch.randn(2, 3, 5, 6)]",
        init="self.inorm = nn.InstanceNorm2d(3)",
    ),
    "batch_norm_eval": ref(
        "def forward(self, x):\n    return self.bn(x)\n", "[torch.randn(8, 6)]", init="self.bn = nn.BatchNorm1d(6)"
    ),
    # torch.split: pieces of equal size (the last one shorter), and pieces of given sizes (attention's qkv)
    "split_qkv": ref(
        """
        def forward(self, x):
            q, k, v = x.split(E, dim=2)
            a, b, c = x.split(4, dim=1)
            return q * torch.sigmoid(k) + v, a.sum(1) + b.sum(1) + 2 * c.sum(1)
        """,
        "[torch.randn(2, 10, 3 * E)]",
        consts="E = 8\n",
    ),
    "split_sizes": ref(
        """
        def forward(self, x):
            a, b, c = torch.split(x, [3, 5, 2], dim=-1)
            return torch.relu(b).mean(dim=-1) + a.sum(dim=-1) - c[..., 0]
        """,
        "[torch.randn(6, 10)]",
    ),
    # scans
    "cumsum": ref("def forward(self, x):\n    return torch.cumsum(x, dim=1)\n", "[torch.randn(4, 37)]"),
    "cumprod_dim0": ref("def forward(self, x):\n    return torch.cumprod(x, dim=0)\n", "[torch.rand(9, 5) + 0.5]"),
    "cumsum_reverse": ref(
        "def forward(self, x):\n    return torch.cumsum(x.flip(1), dim=1).flip(1)\n", "[torch.randn(3, 21)]"
    ),
    "cumsum_exclusive": ref(
        """
        def forward(self, x):
            ex = torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)), x), dim=1)[:, :-1]
            return torch.cumsum(ex, dim=1)
        """,
        "[torch.randn(3, 21)]",
    ),
    "cumsum_masked": ref(
        "def forward(self, x, m):\n    return torch.cumsum(x * m, dim=1)\n",
        "[torch.randn(3, 21), torch.randint(0, 2, (3, 21)).bool()]",
    ),
    # window ops
    "maxpool1d": ref(
        "def forward(self, x):\n    return self.p(x)\n",
        "[torch.randn(2, 3, L)]",
        init="self.p = nn.MaxPool1d(k, stride=s, padding=p, dilation=d)",
        signature="self, k, s, p, d",
        consts="L = 30\nK = 4\nS = 2\nP = 1\nD = 2\n",
        init_inputs="[K, S, P, D]",
    ),
    "maxpool2d": ref(
        "def forward(self, x):\n    return self.p(x)\n",
        "[torch.randn(2, 3, 11, 9)]",
        init="self.p = nn.MaxPool2d((3, 2), stride=(2, 1), padding=(1, 0))",
    ),
    "avgpool2d_pad": ref(
        "def forward(self, x):\n    return self.p(x)\n",
        "[torch.randn(2, 2, 9, 10)]",
        init="self.p = nn.AvgPool2d(3, stride=2, padding=1)",
    ),
    "avgpool3d_nopad_count": ref(
        "def forward(self, x):\n    return self.p(x)\n",
        "[torch.randn(1, 2, 5, 6, 7)]",
        init="self.p = nn.AvgPool3d(2, stride=2, padding=1, count_include_pad=False)",
    ),
    # F.pad, constant: a positive pad fills, a negative one crops (SwinMLP pads its windows)
    "pad_crop": ref(
        "def forward(self, x):\n    return F.pad(x, [1, -2, 2, 0, 0, 1], value=0.5) * 2.0\n",
        "[torch.randn(2, 3, 7, 9)]",
    ),
    # a tensor made from a Python number in forward (SwinV2's clamp of its logit scale)
    "number_tensor": ref(
        """
        def forward(self, x):
            s = torch.clamp(self.s.to(x.device), max=torch.log(torch.tensor(1.0 / 0.01, device=x.device))).exp()
            return x * s
        """,
        "[torch.randn(2, 3, 4, 5)]",
        init="self.s = nn.Parameter(torch.tensor([[[1.0]], [[5.0]], [[-2.0]]]))",
    ),
    # ceil_mode (SqueezeNet's max pools): the last, partial window is kept unless it would start in
    # the right padding; the average's divisor stops at the padded edge
    "maxpool2d_ceil": ref(
        "def forward(self, x):\n    return self.p(x)\n",
        "[torch.randn(2, 3, 12, 13)]",
        init="self.p = nn.MaxPool2d(3, stride=2, ceil_mode=True)",
    ),
    "avgpool1d_ceil": ref(
        "def forward(self, x):\n    return self.p(x)\n",
        "[torch.randn(2, 3, L)]",
        init="self.p = nn.AvgPool1d(k, stride=s, padding=p, ceil_mode=True)",
        signature="self, k, s, p",
        consts="L = 5\nK = 2\nS = 3\nP = 1\n",
        init_inputs="[K, S, P]",
    ),
    # contractions with the epilogue fused
    "linear_epilogue": ref(
        "def forward(self, x):\n    return torch.relu(self.fc(x)) * 0.5 + 1.0\n",
        "[torch.randn(B, 24)]",
        init="self.fc = nn.Linear(24, 19)",
        consts="B = 10\n",
    ),
    # parameters of a module tree: Sequential and ModuleList children ("0", "1"), a ModuleDict key
    # that is a Python keyword (issue 26, item 0); and a pooling setting read through a Sequential
    "module_tree": ref(
        "def forward(self, x):\n    h = self.blocks[1](self.net(x))\n    return self.heads['lambda'](torch.relu(h))\n",
        "[torch.randn(B, 24)]",
        init=(
            "self.net = nn.Sequential(nn.Linear(24, 16), nn.ReLU(), nn.Linear(16, 12))\n"
            "self.blocks = nn.ModuleList([nn.Linear(12, 12), nn.Linear(12, 10)])\n"
            "self.heads = nn.ModuleDict({'lambda': nn.Linear(10, 7)})"
        ),
        consts="B = 6\n",
    ),
    "module_tree_pool": ref(
        "def forward(self, x):\n    return self.features(x) * 2.0\n",
        "[torch.randn(B, 3, 29)]",
        init="self.features = nn.Sequential(nn.MaxPool1d(3, stride=2))",
        consts="B = 2\n",
    ),
    "matmul_transposed": ref(
        "def forward(self, a, b):\n    return torch.matmul(a.T, b.T)\n", "[torch.randn(20, 9), torch.randn(13, 20)]"
    ),
    "bmm_4d": ref(
        "def forward(self, a, b):\n    return torch.matmul(a, b)\n",
        "[torch.randn(2, 3, 9, 17), torch.randn(2, 3, 17, 6)]",
    ),
    "matvec": ref(
        "def forward(self, a, b):\n    return torch.matmul(a, b)\n", "[torch.randn(18, 33), torch.randn(33, 1)]"
    ),
    "tril_matmul": ref(
        "def forward(self, a, b):\n    return torch.tril(torch.matmul(a, b))\n",
        "[torch.randn(17, 17), torch.randn(17, 17)]",
    ),
    "diag_matmul": ref(
        "def forward(self, a, b):\n    return torch.diag(a) @ b\n", "[torch.randn(12), torch.randn(12, 7)]"
    ),
    "gemm_groupnorm": ref(
        "def forward(self, x):\n    return torch.clamp(self.gn(self.fc(x)), -1, 1)\n",
        "[torch.randn(6, 20)]",
        init="self.fc = nn.Linear(20, 16)\nself.gn = nn.GroupNorm(4, 16)",
    ),
    "sdpa": ref(
        "def forward(self, q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)\n",
        "[torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)]",
    ),
    # convolutions as implicit GEMMs (stride, padding, dilation, groups), with epilogues
    "conv2d": ref(
        "def forward(self, x):\n    return torch.relu(self.c(x)) + 0.5\n",
        "[torch.randn(2, 4, 9, 8)]",
        init="self.c = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2))",
    ),
    "conv1d_grouped": ref(
        "def forward(self, x):\n    return self.c(x)\n",
        "[torch.randn(3, 6, 17)]",
        init="self.c = nn.Conv1d(6, 4, 3, groups=2, padding=1, bias=False)",
    ),
    "conv2d_depthwise": ref(
        "def forward(self, x):\n    return self.c(x)\n",
        "[torch.randn(2, 5, 7, 7)]",
        init="self.c = nn.Conv2d(5, 5, 3, groups=5)",
    ),
    "conv3d": ref(
        "def forward(self, x):\n    return self.c(x).mean(dim=1)\n",
        "[torch.randn(1, 2, 5, 6, 4)]",
        init="self.c = nn.Conv3d(2, 3, 2, stride=(1, 2, 1))",
    ),
    "conv_functional": ref(
        "def forward(self, x, w):\n    return F.conv2d(x, w, stride=2)\n",
        "[torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)]",
    ),
    "conv_transpose2d": ref(
        "def forward(self, x):\n    return torch.tanh(self.c(x))\n",
        "[torch.randn(2, 4, 5, 6)]",
        init="self.c = nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), padding=(1, 0), "
        "output_padding=(1, 2), dilation=(1, 2), groups=2)",
    ),
    "conv_transpose1d": ref(
        "def forward(self, x):\n    return self.c(x)\n",
        "[torch.randn(2, 3, 7)]",
        init="self.c = nn.ConvTranspose1d(3, 5, 4, stride=1, padding=2, bias=False)",
    ),
    "conv_transpose3d": ref(
        "def forward(self, x):\n    return self.c(x)\n",
        "[torch.randn(1, 2, 3, 4, 3)]",
        init="self.c = nn.ConvTranspose3d(2, 3, 2, stride=2)",
    ),
    # losses as compositions
    "mse": ref("def forward(self, a, b):\n    return F.mse_loss(a, b)\n", "[torch.randn(6, 11), torch.randn(6, 11)]"),
    "huber": ref(
        "def forward(self, a, b):\n    return F.smooth_l1_loss(a, b)\n", "[torch.randn(6, 11), torch.randn(6, 11)]"
    ),
    "hinge": ref(
        "def forward(self, p, t):\n    return torch.mean(torch.clamp(1 - p * t, min=0))\n",
        "[torch.randn(8, 5), torch.randint(0, 2, (8, 5)).float() * 2 - 1]",
    ),
    "kl_div": ref(
        "def forward(self, p, q):\n    return F.kl_div(torch.log(p), q, reduction='batchmean')\n",
        "[torch.softmax(torch.randn(5, 9), -1), torch.softmax(torch.randn(5, 9), -1)]",
    ),
    "cosine_loss": ref(
        "def forward(self, a, b):\n    return torch.mean(1 - F.cosine_similarity(a, b, dim=1))\n",
        "[torch.randn(6, 13), torch.randn(6, 13)]",
    ),
    "triplet": ref(
        "def forward(self, a, p, n):\n    return self.loss(a, p, n)\n",
        "[torch.randn(5, 8), torch.randn(5, 8), torch.randn(5, 8)]",
        init="self.loss = nn.TripletMarginLoss(margin=1.0)",
    ),
}


def module_of(source: str, name: str = "ref") -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def run_lowered(
    source: str,
    config: Optional[dict] = None,
    *,
    path: str = "/tmp/case.py",
    seed: int = 0,
    candidate: Optional[str] = None,
):
    """(candidate source, outputs of ModelNew, outputs of the reference in float64, flagged torch ops)."""
    from agent.proposers.lowering import lower_source
    from evaluation.guards import ComputeWatch

    low = lower_source(source, path)
    cand_src = candidate or low.render(config or low.default_config())
    ref_mod = module_of(source, "reference")
    cand_mod = module_of(cand_src, "candidate")
    torch.manual_seed(seed)
    init = list(ref_mod.get_init_inputs())
    reference = ref_mod.Model(*init).eval()
    model = cand_mod.ModelNew(*init).eval()
    model.load_state_dict(reference.state_dict())
    torch.manual_seed(seed + 1)
    inputs = ref_mod.get_inputs()
    watch = ComputeWatch()
    with torch.no_grad(), watch:
        out = model(*inputs)
    wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        expected = reference.double()(*wide)
    return cand_src, out, expected, dict(watch.flagged)


def assert_close(out, expected, atol: float = 1e-4, rtol: float = 1e-4) -> None:
    outs = out if isinstance(out, (tuple, list)) else [out]
    exps = expected if isinstance(expected, (tuple, list)) else [expected]
    assert len(outs) == len(exps)
    for o, e in zip(outs, exps):
        assert tuple(o.shape) == tuple(e.shape), (o.shape, e.shape)
        if e.is_floating_point():
            assert o.dtype == torch.float32
            torch.testing.assert_close(o.double(), e, atol=atol, rtol=rtol)
        else:
            assert torch.equal(o, e)


def problem_info(tmp_path, name: str, source: str, params: Optional[dict] = None):
    """A one-case float32 ProblemInfo for `source`, written to tmp_path/NAME.py (the proposers read it)."""
    from evaluation.records import ProblemInfo, ShapeCase, Tolerance

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    params = params or {}
    case_id = "|".join([",".join(f"{k}={v}" for k, v in params.items()), "float32"]) if params else "float32"
    return ProblemInfo(
        problem_id=name,
        name=name,
        op_family="unknown",
        source_path=str(path),
        source_sha256=name,
        builtin=False,
        source=source,
        shape_cases=(ShapeCase(case_id=case_id, params=params, dtype="float32", tags=("representative",)),),
        dtypes=("float32",),
        tolerances={"float32": Tolerance(atol=1e-4, rtol=1e-4)},
    )
