"""Device/op/vendor/dtype aliases and the BM25 index: the parts of retrieval that need no store."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.aliases import (
    canonical_devices,
    document_devices,
    document_ops,
    normalize_op,
    op_with_relatives,
    parse_query,
    vendor_of_arch,
)
from knowledge.bm25 import BM25Index, tokenize


@pytest.mark.parametrize(
    "question, devices, archs",
    [
        ("what worked on MI300 for layernorm", ("MI300X", "MI300A"), ("gfx942",)),
        ("MI300X LDS size", ("MI300X",), ("gfx942",)),
        ("is the MI300A an APU", ("MI300A",), ("gfx942",)),
        ("H100 SXM vs H100 PCIe bandwidth", ("H100",), ("sm_90",)),
        ("tuning on h100", ("H100",), ("sm_90",)),
        ("Hopper TMA", ("H100", "H200"), ("sm_90",)),
        ("wgmma on sm_90a", ("H100", "H200"), ("sm_90",)),
        ("B200 fp4 rate", ("B200",), ("sm_100",)),
        ("what is new in Blackwell", ("B200",), ("sm_100",)),
        ("A100 shared memory", ("A100",), ("sm_80",)),
        ("Ampere async copy", ("A100",), ("sm_80",)),
        ("wavefront size on gfx942", ("MI300X", "MI300A"), ("gfx942",)),
        ("MI250 matrix cores", ("MI250X",), ("gfx90a",)),
        ("what is public about MTIA v2", ("MTIA",), ("mtia",)),
        ("AVX-512 on EPYC Genoa", ("x86 CPU",), ("cpu",)),
    ],
)
def test_device_aliases_resolve_to_canonical_devices_and_archs(question, devices, archs):
    facets = parse_query(question)
    assert facets.devices == devices
    assert facets.archs == archs


@pytest.mark.parametrize(
    "question",
    [
        "what worked for layernorm on the CPU",
        "softmax on cpu in float32",
        "does the rmsnorm kernel run on CPUs",
        "cpu kernels for cross entropy",
    ],
)
def test_cpu_in_a_question_is_the_device(question):
    facets = parse_query(question)
    assert (facets.devices, facets.archs) == (("x86 CPU",), ("cpu",))


@pytest.mark.parametrize(
    "question",
    [
        "how much cpu launch overhead does a kernel have",
        "is the H100 softmax CPU-bound",
        "the CPU-side cost of a Triton launch",
        "cpu time of autotuning",
        "how busy is the host CPU during a run",
    ],
)
def test_cpu_as_the_host_side_of_a_gpu_run_is_not_a_device(question):
    assert "x86 CPU" not in parse_query(question).devices


def test_cpu_in_a_device_name_is_the_device_whatever_follows():
    assert canonical_devices("cpu (triton interpreter)", device_name=True) == ("x86 CPU",)
    assert canonical_devices("cpu time", device_name=True) == ("x86 CPU",)
    assert canonical_devices("NVIDIA H200", device_name=True) == ("H200",)
    assert canonical_devices("AMD Instinct MI300X VF", device_name=True) == ("MI300X",)


def test_unknown_device_names_from_documents_match_literally():
    assert parse_query("MI355X tile sizes", extra_devices=["MI355X"]).devices == ("MI355X",)
    assert parse_query("MI355X tile sizes").devices == ()


@pytest.mark.parametrize(
    "question, ops",
    [
        ("layer norm on H100", ("layernorm",)),
        ("fastest LN kernel", ("layernorm",)),
        ("ln(x) in the log domain", ()),
        ("RMSNorm eps placement", ("rmsnorm",)),
        ("fused add rmsnorm", ("add_rmsnorm",)),
        ("why does my softmax overflow", ("softmax",)),
        ("log softmax of large vocab", ("log_softmax",)),
        ("CE loss ignore_index", ("cross_entropy",)),
        ("cross-entropy over 128k vocab", ("cross_entropy",)),
        ("silu gate precision", ("swiglu",)),
        ("SwiGLU vs GeGLU", ("swiglu", "geglu")),
        ("gelu tanh approximation", ("geglu",)),
        ("GEMM tile sizes", ("matmul_epilogue",)),
        ("matmul split-K", ("matmul_epilogue",)),
        ("a linear layer with bias", ("matmul_epilogue",)),
        ("row-wise sum", ("row_sum",)),
        ("meta-parameters of a triton kernel", ()),
    ],
)
def test_op_aliases_resolve_to_op_families(question, ops):
    assert parse_query(question).ops == ops


def test_vendor_and_dtype_are_parsed():
    facets = parse_query("what worked on AMD ROCm in bf16 and fp8")
    assert facets.vendors == ("amd",)
    assert facets.dtypes == ("bfloat16", "float8")
    assert parse_query("NVIDIA fp32 with tf32 dot").dtypes == ("tf32", "float32")
    assert parse_query("triton meta-parameters").vendors == ()


def test_document_lists_canonicalize_for_comparison():
    assert document_devices(["H100 SXM", "H100 PCIe", "H100 NVL", "H100", "GH100"]) == {"H100"}
    assert document_devices(["MI300X", "MI300A"]) == {"MI300X", "MI300A"}
    assert document_devices(["MI355X"]) == {"MI355X"}
    assert document_ops(["layer norm", "rmsnorm", "matmul"]) == {"layernorm", "rmsnorm", "matmul_epilogue"}


def test_op_normalization_relatives_and_vendor_of_arch():
    assert normalize_op("LN") == "layernorm"
    assert normalize_op("gemm") == "matmul_epilogue"
    assert normalize_op("my_custom_op") == "my_custom_op"
    assert op_with_relatives("add_rmsnorm") == ("add_rmsnorm", "rmsnorm")
    assert [vendor_of_arch(a) for a in ("sm_90", "gfx942", "cpu")] == ["nvidia", "amd", None]


def test_tokenize_keeps_compound_tokens_and_their_parts():
    assert tokenize("Set num_warps for tl.load on sm_90 kernels") == [
        "set",
        "num_warps",
        "num",
        "warp",
        "tl.load",
        "tl",
        "load",
        "sm_90",
        "sm",
        "kernel",
    ]


def test_bm25_ranks_the_chunk_with_the_rare_query_terms_first():
    texts = [
        "The H200 has 141 GB of HBM3e at 4.8 TB/s of bandwidth.",
        "Set num_warps to 8 for rows of 4096 elements; bandwidth matters.",
        "The MI300X wavefront is 64 lanes wide.",
        "Bandwidth, bandwidth, bandwidth: memory-bound kernels live on it.",
    ]
    index = BM25Index(texts)
    top = index.top("H200 HBM3e bandwidth", k=4)
    assert [row for row, _ in top][0] == 0
    assert {row for row, _ in top} == {0, 1, 3}  # the MI300X text shares no term
    assert top[0][1] > top[1][1] > 0
    assert index.top("wavefront", k=4) == [(2, pytest.approx(index.top("wavefront", k=1)[0][1]))]


def test_bm25_respects_the_allowed_rows_and_k():
    index = BM25Index(["alpha beta", "alpha", "alpha gamma", "delta"])
    allowed = np.array([False, True, True, True])
    rows = [row for row, _ in index.top("alpha", k=5, allowed=allowed)]
    assert sorted(rows) == [1, 2] and 0 not in rows
    assert len(index.top("alpha", k=1)) == 1
    assert index.top("zeta", k=3) == []
    assert BM25Index([]).top("alpha", k=3) == []


@pytest.mark.parametrize(
    "raw, vendor",
    [
        ("NVIDIA Corporation", "nvidia"),
        ("Advanced Micro Devices, Inc.", "amd"),
        ("AMD", "amd"),
        ("intel corp", "intel"),
        ("Habana Labs", "intel"),
        ("Tenstorrent  Inc.", "tenstorrent"),
        ("Cerebras Systems", "cerebras-systems"),
        ("Foo_Bar.ai", "foo-bar-ai"),
        ("Meta Platforms", "meta"),
    ],
)
def test_any_vendor_name_is_accepted_and_normalised(raw, vendor):
    from knowledge.aliases import normalize_vendor

    assert normalize_vendor(raw) == vendor


@pytest.mark.parametrize(
    "raw, device",
    [
        ("h100 sxm", "H100 SXM"),
        ("mi355x", "MI355X"),
        ("MI300X", "MI300X"),
        ("a100", "A100"),
        ("gaudi3", "GAUDI3"),
        ("Wormhole  n300", "Wormhole n300"),
        ("hopper", "hopper"),
    ],
)
def test_device_names_are_normalised_for_case_and_spacing(raw, device):
    from knowledge.aliases import normalize_device, normalize_devices

    assert normalize_device(raw) == device
    assert normalize_devices([raw, raw.upper(), raw.lower()]) == (device,)


def test_empty_or_unprintable_names_are_refused():
    from knowledge.aliases import normalize_device, normalize_vendor

    for bad in ("", "   ", "!!", "a\x00b", "x" * 65):
        with pytest.raises(ValueError):
            normalize_vendor(bad)
        with pytest.raises(ValueError):
            normalize_device(bad)


@pytest.mark.parametrize(
    "question, intent",
    [
        ("what failed for layernorm", "failed"),
        ("why is my softmax slower on MI300", "failed"),
        ("what didn't work for rmsnorm", "failed"),
        ("what worked on MI300 for layernorm", "worked"),
        ("fastest LN on the H200", "worked"),
        ("how do I tune num_warps for softmax", "how-to"),
        ("what is TMA", "fact"),
        ("how much HBM does the H200 have", "fact"),
    ],
)
def test_question_intent(question, intent):
    from knowledge.intent import classify

    assert classify(question).value == intent
