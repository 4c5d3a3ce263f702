"""Lowered kernels on a GPU at sizes the interpreter cannot reach (marked gpu: `.ci/gpu suite` runs them)."""

from __future__ import annotations

import pytest
import torch
from kernel_files import import_file
from lowering_cases import ref

from agent.proposers.lowering import lower_source

pytestmark = pytest.mark.gpu


def test_split_k_partials_past_two_billion_elements_reduce_to_the_product(tmp_path):
    """32 partials of a 12289 x 12289 output are 4.8e9 elements: partial s sits at s * M * N, past int32.
    The derived case of 6_Matmul_with_large_K_dimension_ where every split-K candidate read out of bounds
    on an H100 (1a9f275); checked against cuBLAS in float64 on a band of rows and columns."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    m, k, n = 12289, 2048, 12289
    source = ref(
        "def forward(self, a, b):\n    return torch.matmul(a, b)\n",
        "[torch.randn(M, K), torch.randn(K, N)]",
        consts=f"M = {m}\nK = {k}\nN = {n}\n",
    )
    low = lower_source(source, "/tmp/split_k_big.py")
    config = low.default_config()
    config = {**config, "groups": [dict(g, split_k=32) if g["kind"] == "matmul" else g for g in config["groups"]]}
    (tmp_path / "candidate.py").write_text(low.render(config))  # triton.jit reads its source from a file
    model = import_file(tmp_path / "candidate.py", "split_k_big_candidate").ModelNew()
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=g)
    b = torch.randn(k, n, device="cuda", generator=g)
    out = model(a, b)
    torch.cuda.synchronize()
    for rows in (slice(0, 64), slice(m - 64, m)):  # the first and the last partial planes' rows
        want = a[rows].double() @ b.double()
        torch.testing.assert_close(out[rows].double(), want, atol=1e-3, rtol=1e-4)
