"""A kernel's dot precision is a declared property, shown beside its verdict (issue 24, item 1): what
each `tl.dot` asks for, read from the source, in `show`, the report and the kernel file."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_lifecycle_support import add_candidate, cpu_fp, make_run, result

import evaluation
from agent.proposers.lowering import lower_source
from agent.search import kernelfile
from agent.search.precision import DEFAULT, dot_precisions
from agent.search.summary import summarize
from agent.search.views import summary_rows
from store import Store

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def k(a, b, PREC: tl.constexpr):
    x = tl.dot(a, b{kw})
"""

MATMUL = """
import torch
import torch.nn as nn

M = 32
K = 16
N = 8


class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        (', input_precision="ieee"', ("ieee",)),
        (', input_precision="tf32x3"', ("tf32x3",)),
        (", allow_tf32=False", ("ieee",)),
        (", allow_tf32=True", ("tf32",)),
        ("", (DEFAULT,)),
        (", input_precision=PREC", ("set at launch (PREC)",)),
    ],
)
def test_each_spelling_of_a_dots_precision_is_read(kw, expected):
    assert dot_precisions(KERNEL.format(kw=kw)) == expected


def test_distinct_precisions_in_source_order_and_none_without_a_dot_or_a_parse():
    two = (
        KERNEL.format(kw=', input_precision="tf32"')
        + "    y = tl.dot(a, b)\n    z = tl.dot(a, b, input_precision='tf32')\n"
    )
    assert dot_precisions(two) == ("tf32", DEFAULT)
    assert dot_precisions("import torch\nx = torch.dot(a, b)\n") == ()
    assert dot_precisions("def broken(:\n") == ()


def lowered_matmul(tmp_path: Path, precision: str) -> str:
    path = tmp_path / "mm.py"
    path.write_text(MATMUL)
    lw = lower_source(MATMUL, str(path))
    config = lw.default_config()
    config["groups"] = [dict(g, precision=precision) if g["kind"] == "matmul" else g for g in config["groups"]]
    return lw.render(config)


@pytest.mark.parametrize("precision", ["ieee", "tf32x3"])
def test_the_lowerings_matmul_declares_the_precision_its_knob_chose(tmp_path, precision):
    assert dot_precisions(lowered_matmul(tmp_path, precision)) == (precision,)


def test_show_and_the_kernel_file_say_the_dot_precision(tmp_path):
    source = lowered_matmul(tmp_path, "tf32x3")
    problem = evaluation.load_problem(str(tmp_path / "mm.py"), "cpu")
    fp = cpu_fp()
    with Store.open(tmp_path / "store") as st:
        run = make_run(st, problem, fp)
        c = add_candidate(st, run, source)
        st.add_evaluation(run.run_id, c.candidate_id, result(problem, source, fp))
        summary = summarize(st, run.run_id)
    assert summary.in_hand is not None and summary.in_hand.dot_precision == ("tf32x3",)
    assert ("dot precision", "tf32x3") in summary_rows(summary)
    header = kernelfile.render(summary, summary.in_hand, source, "k.py").split("\n\n", 1)[0]
    assert "# dot precision: tf32x3" in header.splitlines()
