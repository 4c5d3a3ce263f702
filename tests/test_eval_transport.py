"""The worker -> parent output transport: raw tensor bytes under a JSON table, MAC'd frames filled in place."""

from __future__ import annotations

import fcntl
import math
import os
import threading

import pytest
import torch

from evaluation import protocol
from evaluation.isolation import PIPE_BYTES, widen_pipe

KEY = bytes(range(32))


def _same(received, sent) -> None:
    expected = protocol.package(sent)
    assert (received["kind"], received["types"]) == (expected["kind"], expected["types"])
    for got, want in zip(received["items"], expected["items"], strict=True):
        if isinstance(want, torch.Tensor):
            want = want.to_dense() if want.is_sparse else want
            assert (got.dtype, got.shape) == (want.dtype, want.shape) and torch.equal(got, want)
        elif isinstance(want, float) and math.isnan(want):
            assert math.isnan(got)
        else:
            assert got == want and type(got) is type(want)


@pytest.mark.parametrize(
    "value",
    [
        torch.randn(3, 5),
        torch.ones(7, dtype=torch.bfloat16),
        torch.tensor(2.5),  # 0-dim
        torch.zeros(0, 3),  # empty
        torch.tensor([True, False, True]),
        torch.randn(4, dtype=torch.complex64),
        torch.randn(5).to(torch.float8_e4m3fn),
        torch.arange(5).to(torch.uint16),
        torch.arange(12, dtype=torch.int64).reshape(3, 4)[:, ::2],  # a strided view
        torch.randn(6).to_sparse(),
        (torch.randn(2, 3), 3, None, True, float("inf"), float("nan")),
    ],
    ids=["fp32", "bf16", "0dim", "empty", "bool", "complex", "fp8", "uint16", "strided", "sparse", "tuple"],
)
def test_every_output_kind_arrives_equal_to_what_the_candidate_returned(value):
    blob, strides = protocol.package_bytes(value)
    _same(protocol.unpackage(blob), value)
    if isinstance(value, torch.Tensor) and value.layout == torch.strided:
        assert strides == [list(value.stride())]  # as returned, before the copy made it contiguous


def test_a_blob_whose_table_lies_about_its_bytes_is_refused_and_a_pickle_is_never_loaded():
    blob = bytearray(protocol.package_bytes(torch.randn(64))[0])
    table_len = int.from_bytes(blob[4:12], "little")
    table = bytes(blob[12 : 12 + table_len])

    def with_table(text: bytes) -> bytes:
        head = protocol.OUTPUTS_FORMAT + len(text).to_bytes(8, "little") + text
        return head + bytes(-len(head) % 64) + bytes(blob[12 + table_len + (-(12 + table_len) % 64) :])

    for lie, why in [
        (table.replace(b'"nbytes":256', b'"nbytes":4096'), "match"),  # more bytes than the blob holds
        (table.replace(b'"shape":[64]', b'"shape":[65]'), "match"),  # shape and size disagree
        (table.replace(b'"float32"', b'"object"'), "dtype"),  # no dtype outside the allow-list
    ]:
        assert lie != table
        with pytest.raises(ValueError, match=why):
            protocol.unpackage(with_table(lie))
    import io

    pickled = io.BytesIO()
    torch.save({"kind": "tensor", "items": [torch.ones(2)], "types": ["Tensor"]}, pickled)
    with pytest.raises(ValueError, match="not an outputs blob"):
        protocol.unpackage(pickled.getvalue())


def test_frames_split_at_any_byte_arrive_whole_and_a_foreign_key_is_refused():
    frames = protocol.encode(KEY, 0, protocol.Done(), b"first") + protocol.encode(KEY, 1, protocol.Done(), b"")
    reader = protocol.FrameReader(KEY)
    for i in range(len(frames)):
        reader.feed(frames[i : i + 1])
    assert [(m.kind, bytes(b)) for m, b in reader.frames()] == [("done", b"first"), ("done", b"")]
    assert reader.pending() == 0
    with pytest.raises(protocol.ProtocolError, match="not MAC'd"):
        protocol.FrameReader(os.urandom(32)).feed(frames)
    replayed = protocol.FrameReader(KEY)
    with pytest.raises(protocol.ProtocolError, match="frame 0"):  # frame 1's MAC does not fit sequence 0
        replayed.feed(protocol.encode(KEY, 1, protocol.Done()))


def test_a_large_output_streamed_through_a_pipe_lands_once_in_the_buffer_its_tensor_views():
    out = torch.randn(1 << 21)  # 8 MiB: many pipe-fulls
    parts, strides = protocol.package_parts((out, 0.5))
    r, w = os.pipe()

    def worker():
        protocol.write_frame(w, KEY, 0, protocol.Outputs(index=0, phase="trial", strides=strides), parts)
        protocol.write_frame(w, KEY, 1, protocol.Done())
        os.close(w)

    threading.Thread(target=worker).start()
    reader, got = protocol.FrameReader(KEY), []
    while reader.read_from(r):
        got += reader.frames()
    os.close(r)
    assert [m.kind for m, _ in got] == ["outputs", "done"]
    blob = got[0][1]
    payload = protocol.unpackage(blob)
    tensor = payload["items"][0]
    assert torch.equal(tensor, out) and payload["items"][1] == 0.5
    start = blob.__array_interface__["data"][0]
    assert start <= tensor.untyped_storage().data_ptr() < start + blob.nbytes  # a view, not a copy


@pytest.mark.skipif(not hasattr(fcntl, "F_GETPIPE_SZ"), reason="Linux pipes only")
def test_the_result_pipe_is_widened_to_a_mebibyte():
    r, w = os.pipe()
    try:
        assert fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) < PIPE_BYTES
        widen_pipe(r)
        assert fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) == PIPE_BYTES
    finally:
        os.close(r)
        os.close(w)


def test_the_transport_bench_moves_every_value_and_reports_both_rates():
    from evaluation.bench import transport

    rates = transport(4, reps=2)
    assert set(rates) == {"framed", "bare_pipe", "ratio"}
    assert rates["framed"] > 0 and rates["bare_pipe"] > 0
    assert rates["ratio"] == pytest.approx(rates["framed"] / rates["bare_pipe"])


def test_the_spawn_bench_times_each_layer_plain_and_sandboxed_and_names_a_failing_layer(monkeypatch):
    from evaluation import bench, isolation

    # cheap layers stand in for torch's import: what is measured is the harness around them
    monkeypatch.setattr(bench, "_SPAWN_STEPS", {"interpreter": "pass", "warm-up": "import os"})
    rows = list(bench.spawn("cpu", repeats=1, together=2))
    boxed = isolation.probe_sandbox("cpu").ok
    namespaces = [f"interpreter, no {flag}" for flag in bench._SPAWN_NAMESPACES]
    sandbox_rows = ["interpreter, 2 at once", *namespaces] if boxed else []
    assert [r["step"] for r in rows] == ["interpreter", *sandbox_rows, "warm-up", "warm-up, 2 at once"]
    for r in rows:
        assert r["plain_s"] is None if r["step"] in namespaces else 0 < r["plain_s"] < 30
        assert (r["sandboxed_s"] is not None and r["sandboxed_s"] > 0) if boxed else r["sandboxed_s"] is None
    monkeypatch.setattr(bench, "_SPAWN_STEPS", {"interpreter": "raise SystemExit(3)"})
    with pytest.raises(RuntimeError, match="exit 3"):
        list(bench.spawn("cpu", repeats=1))
