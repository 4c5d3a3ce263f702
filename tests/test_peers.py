"""agent.search.peers: runs with torch and Triton alone, checks kernels before timing them, and reports one line
per row; agent.search.peers.render keeps the committed kernels equal to what the templates render today."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from agent.search.peers import bench as peers
from agent.search.peers.render import BEST_KNOBS, KERNELS, render_all

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names)


def _top_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_committed_kernels_are_what_the_templates_render_from_best_knobs():
    rendered = render_all(BEST_KNOBS)
    committed = {str(p.relative_to(KERNELS)): p.read_text() for p in KERNELS.rglob("*.py")}
    assert set(rendered) == set(committed), "run: python -m agent.search.peers.render"
    stale = [name for name, source in rendered.items() if committed[name] != source]
    assert not stale, f"stale kernels {stale}: run python -m agent.search.peers.render"


def test_peers_and_its_kernels_need_only_torch_and_triton():
    allowed = STDLIB | {"torch", "triton", "__future__"}
    for path in [ROOT / "agent" / "search" / "peers" / "bench.py", *KERNELS.rglob("*.py")]:
        assert _top_imports(path) <= allowed, (path.name, _top_imports(path) - allowed)


def test_row_specs_parse_and_bad_ones_say_why():
    assert peers.parse_row("layernorm:M=16,N=4194304") == ("layernorm", {"M": 16, "N": 4194304})
    with pytest.raises(ValueError, match="is not NAME=INT"):
        peers.parse_row("layernorm:M=16,N=big")
    with pytest.raises(ValueError, match="expected OP:NAME=INT"):
        peers.parse_row("layernorm")


def test_default_rows_cover_the_issue_table():
    rows = {peers.row_id(op, p) for op, p in peers.DEFAULT_ROWS}
    for op in ("layernorm", "rmsnorm", "add_rmsnorm", "softmax", "log_softmax"):
        assert f"{op}:M=16,N=4194304" in rows and f"{op}:M=16384,N=8192" in rows
    assert "cross_entropy:M=8192,V=128256" in rows
    # issue 24's tensor-core line: bf16 GEMM at 8192^3, 4096^3 and 1024x8192x8192 beside cuBLAS
    for mkn in ("M=8192,K=8192,N=8192", "M=4096,K=4096,N=4096", "M=1024,K=8192,N=8192"):
        assert f"matmul_epilogue:{mkn}" in rows


def test_on_the_cpu_kernels_are_checked_and_a_wrong_one_is_reported_not_timed(tmp_path):
    kernels = tmp_path / "kernels" / "rmsnorm"
    kernels.mkdir(parents=True)
    good = (KERNELS / "rmsnorm.py").read_text()
    (kernels / "good.py").write_text(good)
    # Same kernel, but the weight is never applied: close to the reference, still wrong.
    bad = good.replace("    y = y * tl.load(W + cols", "    y = y * 1.0 + 0.0 * tl.load(W + cols")
    assert bad != good
    (kernels / "no_weight.py").write_text(bad)
    args = peers.parse_args(["--kernels", str(tmp_path / "kernels"), "--dtype", "float32"])
    got = {m.provider: m for m in peers.run_row("rmsnorm", {"M": 7, "N": 97}, args, None, None, None)}
    assert got["kernel:good"].status == "checked" and got["kernel:good"].note.startswith("ok")
    assert got["kernel:no_weight"].status == "failed" and "outside the tolerance" in got["kernel:no_weight"].note


def test_best_per_row_picks_the_fastest_kernel_and_the_summary_takes_geomeans():
    def m(row, provider, p50, comp=None):
        out = peers.Measurement(row, provider, "timed", p50_ms=p50, pct_of_copy=50.0)
        if comp:
            out.ratios["torch_compile"] = comp
        return out

    ms = [
        m("softmax:M=1,N=2", "torch_compile", 1.0),
        m("softmax:M=1,N=2", "kernel:a", 0.8, 1.25),
        m("softmax:M=1,N=2", "kernel:b", 0.5, 2.0),
        m("softmax:M=3,N=4", "kernel:a", 1.0, 0.8),
        peers.Measurement("softmax:M=3,N=4", "kernel:b", "failed", "boom"),
    ]
    lines = peers.best_per_row(ms)
    assert " b " in lines[2] and "0.5000" in lines[2]
    assert " a " in lines[3]
    summary = peers.summarize(ms)
    assert summary[0].startswith("softmax          a") and "geomean 1.00 worst 0.80" in summary[0]


def test_render_writes_variants_into_folders(tmp_path):
    spec = tmp_path / "sweep.json"
    spec.write_text('{"swiglu": {"small": {"block": 256}, "big": {"block": 8192}}, "_comment": "x"}')
    out = render_all(spec)
    assert set(out) == {"swiglu/small.py", "swiglu/big.py"}
    assert "_BLOCK = 256" in out["swiglu/small.py"]


def test_a_kernels_folder_without_the_ops_kernels_stops_before_anything_is_timed(tmp_path):
    """A sweep not rendered (on an H100 the attention sweep timed only eager and compile, 'no kernel timed')."""
    args = peers.parse_args(["--ops", "attention", "--kernels", str(tmp_path / "not_rendered")])
    with pytest.raises(SystemExit, match=r"no kernel for attention in .*not_rendered.*peers\.render --knobs"):
        peers.select_rows(args)
    # the baselines alone are a run that asks for no kernel; the committed folder has attention's
    alone = peers.parse_args(["--ops", "attention", "--kernels", str(tmp_path), "--providers", "eager"])
    assert {op for op, _ in peers.select_rows(alone)} == {"attention"}
    assert {op for op, _ in peers.select_rows(peers.parse_args(["--ops", "attention"]))} == {"attention"}
