"""The lowering's looped sums stay exact to fp32 over long rows with a large common offset.

The judge's large-offset stress trial (x + 1e4) over a 4M-wide row: each lane of a plain fp32 accumulator
adds thousands of values near 1e4, and once its running sum passes 2**24 every addition drops the value's
fraction, the same way each time. The mean came out 0.3-0.4 high, where PyTorch (a tree of sums) is exact
to 4e-4. The lowering's looped sums carry a Kahan compensation term per lane; these tests run the kernel
under the interpreter (whose fp32 adds round as the GPU's do), with the plain accumulator as the control,
and check that Triton's sm_90 compile keeps the compensation (no reassociation folds it away).
"""

import json
import os
import re
import subprocess
import sys

from lowering_cases import ref, run_lowered

from agent.proposers.lowering import lower_source

CENTRE = ref("def forward(self, x):\n    return x - x.mean(dim=1, keepdim=True)\n", "[torch.rand(2, 1 << 19) + 1e4]")
PATH = "/tmp/centre_long_row.py"


def _looped():
    """The centring's reduction as one looped pass per row (no split), 128 lanes: 4096 additions a lane."""
    low = lower_source(CENTRE, PATH)
    config = low.default_config()
    groups = [dict(g, single_max=0, rblock=128, split=1) if g["kind"] == "reduction" else g for g in config["groups"]]
    assert [g["kind"] for g in groups] == ["reduction", "pointwise"]
    config = {**config, "groups": groups}
    return config, low.render(config)


def _plain(candidate: str) -> str:
    """The same candidate with an uncompensated accumulator (what the lowering wrote before)."""
    plain = re.sub(
        r"(acc\d+)_y = (.*) - \1_c\n\s*\1_t = .*\n\s*\1_c = .*\n\s*\1 = \1_t",
        r"\1 = \1 + \2",
        candidate,
    )
    plain = re.sub(r"\(tl\.sum\((acc\d+), 1\) - tl\.sum\(\1_c, 1\)\)", r"tl.sum(\1, 1)", plain)
    return re.sub(r"\n\s*acc\d+_c = tl\.zeros\(.*\)", "", plain)


def test_a_looped_mean_over_a_long_offset_row_keeps_its_fractions():
    config, candidate = _looped()
    assert "acc0_c = (acc0_t - acc0) - acc0_y" in candidate
    _, out, expected, flagged = run_lowered(CENTRE, config, path=PATH)
    assert flagged == {}
    # x - mean of fp32 inputs near 1e4: the mean itself rounds to fp32 (ulp 1e-3) and nothing more is lost
    assert (out.double() - expected).abs().max().item() < 1e-3

    plain = _plain(candidate)
    assert "_c" not in plain.split("@triton.jit")[1] and plain != candidate
    _, out, expected, _ = run_lowered(CENTRE, config, path=PATH, candidate=plain)
    assert (out.double() - expected).abs().max().item() > 0.1  # the control: every fraction dropped


_COMPILE = """
import importlib.util, json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

counts = []
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("m" + str(len(counts)), path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # triton.jit reads the source through inspect
    spec.loader.exec_module(module)
    constexprs = {"XBLOCK": 1, "RBLOCK": 128, "SINGLE": False, "INDEX64": False}
    signature = {"buf1": "*fp32", "in_0": "*fp32", "s26": "i32", "s49": "i32", **{k: "constexpr" for k in constexprs}}
    src = ASTSource(fn=module._k0_reduction, signature=signature, constexprs=constexprs)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    counts.append(len(re.findall(r"\\bsub\\.f32\\b", ptx)))
print(json.dumps(counts))
"""


def _subtractions_in_sm90_ptx(tmp_path, *sources: str) -> list[int]:
    """The fp32 subtractions in each candidate's reduction kernel compiled for sm_90, in a process without
    the interpreter (whose mode is fixed at import): what the GPU's compile keeps."""
    paths = []
    for k, source in enumerate(sources):
        paths.append(tmp_path / f"candidate_{k}.py")
        paths[-1].write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE, *map(str, paths)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_compensation_survives_the_sm90_compile(tmp_path):
    """Without a GPU: Triton compiles for sm_90 with its bundled ptxas. The compensated loop keeps its two
    subtractions per element; a compiler that reassociated fp32 adds would fold them to nothing."""
    _, candidate = _looped()
    compensated, plain = _subtractions_in_sm90_ptx(tmp_path, candidate, _plain(candidate))
    assert plain == 0
    assert compensated >= 2
