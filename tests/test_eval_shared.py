"""The shared output transport (evaluation/shared.py): outputs copied into a memory slot the worker
shares with the parent, the slot's descriptor passed over a Unix socket, bound to the MAC'd frames by
a token. Host slots (memfd) here; CUDA slots are the same protocol on VMM memory (tests/test_eval_gpu.py)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
import torch

from evaluation import evaluate, protocol, shared
from evaluation.records import Status

ROOT = Path(__file__).parent.parent
SEED = (ROOT / "evaluation" / "seeds" / "layernorm.py").read_text()
SMALL = {"M": 2}

pytestmark = pytest.mark.skipif(not shared.available(), reason="needs SCM_RIGHTS and memfd (Linux)")


@pytest.fixture
def ends():
    parent, child = shared.socket_pair()
    sender = shared.Sender(os.dup(child.fileno()), "host")
    child.close()
    receiver = shared.Receiver(parent, "host")
    yield sender, receiver
    receiver.close()
    sender.sock.close()


def _through(sender, receiver, value):
    head, tensors, total, strides = protocol.package_split(value)
    slot, token, sequence = sender.put(tensors, total)
    data = receiver.take(slot, token, sequence, total)
    return protocol.unpackage(shared.Blob(head=head, data=data)), (slot, token, sequence)


@pytest.mark.parametrize(
    "value",
    [
        torch.randn(3, 5),
        torch.ones(7, dtype=torch.bfloat16),
        torch.tensor(2.5),
        torch.zeros(0, 3),
        torch.arange(12, dtype=torch.int64).reshape(3, 4)[:, ::2],
        (torch.randn(2, 3), 3, None, torch.randn(5, dtype=torch.float64)),
    ],
    ids=["fp32", "bf16", "0dim", "empty", "strided", "tuple"],
)
def test_every_output_kind_crosses_a_host_slot_unchanged(ends, value):
    got, _ = _through(*ends, value)
    want = protocol.package(value)
    assert (got["kind"], got["types"]) == (want["kind"], want["types"])
    for g, w in zip(got["items"], want["items"], strict=True):
        if isinstance(w, torch.Tensor):
            assert (g.dtype, g.shape) == (w.dtype, w.shape) and torch.equal(g, w)
        else:
            assert g == w


def test_a_slot_is_reused_until_an_output_needs_more_and_the_parent_keeps_only_the_newest(ends):
    sender, receiver = ends
    small = torch.arange(1000, dtype=torch.float32)
    first = _through(sender, receiver, small)[1]
    second = _through(sender, receiver, small + 1)[1]
    assert first[0] == second[0] == 1 and second[2] == first[2] + 1  # same slot, next output
    big = torch.arange(1 << 19, dtype=torch.float64)  # 4 MiB: over the first slot's 1 MiB
    got, third = _through(sender, receiver, big)
    assert third[0] == 2 and torch.equal(got["items"][0], big)
    assert list(receiver.slots) == [2]  # the old slot was unmapped once the worker moved on


def test_the_parents_copy_stays_as_it_was_when_the_worker_writes_its_slot_again(ends):
    sender, receiver = ends
    got, _ = _through(sender, receiver, torch.full((256,), 7.0))
    _through(sender, receiver, torch.full((256,), -1.0))  # same slot, overwritten
    assert torch.equal(got["items"][0], torch.full((256,), 7.0))


def test_the_worker_does_not_write_its_slot_again_before_the_parent_has_copied_it_out(ends):
    sender, receiver = ends
    head, tensors, total, _ = protocol.package_split(torch.ones(64))
    slot, token, seq = sender.put(tensors, total)
    done = threading.Event()

    def second():
        sender.put(protocol.package_split(torch.zeros(64))[1], total)
        done.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert not done.wait(0.3)  # waiting for the acknowledgement of the first output
    data = receiver.take(slot, token, seq, total)
    assert done.wait(5)
    thread.join()
    assert torch.equal(protocol.unpackage(shared.Blob(head=head, data=data))["items"][0], torch.ones(64))


def test_a_token_other_than_the_frames_is_refused_as_forged(ends):
    sender, receiver = ends
    head, tensors, total, _ = protocol.package_split(torch.ones(8))
    slot, token, seq = sender.put(tensors, total)
    with pytest.raises(protocol.ProtocolError, match="token differs"):
        receiver.take(slot, "00" * 16, seq, total)


def test_a_slot_message_a_candidate_writes_to_the_socket_is_refused_before_it_is_mapped():
    parent, child = shared.socket_pair()
    receiver = shared.Receiver(parent, "host")
    r, w = os.pipe()  # mapping it would fail: the refusal must come first, from the token
    try:  # the candidate knows the socket's number (argv), not the token
        socket.send_fds(child, [shared.SLOT.pack(shared.SLOT_MAGIC, 1, 1 << 20, b"x" * 16)], [r])
        with pytest.raises(protocol.ProtocolError, match="token differs"):
            receiver.take(1, (b"y" * 16).hex(), 1, 64)
        assert receiver.slots == {}
    finally:
        for fd in (r, w):
            os.close(fd)
        receiver.close()
        child.close()


def test_a_frame_that_skips_a_slot_is_a_protocol_error(ends):
    _, receiver = ends
    with pytest.raises(protocol.ProtocolError, match="names slot 3, after slot 0"):
        receiver.take(3, (b"t" * 16).hex(), 1, 8)


def test_a_slot_announced_but_never_named_sends_every_later_output_by_pipe(ends, monkeypatch):
    sender, receiver = ends

    def failing_write(self, offset, tensor):
        raise shared.SharedError("copy failed")

    monkeypatch.setattr(shared._HostSlot, "write", failing_write)
    head, tensors, total, _ = protocol.package_split(torch.ones(8))
    with pytest.raises(shared.SharedError, match="copy failed"):
        sender.put(tensors, total)
    assert sender.broken is not None  # the parent holds slot 1's descriptor; no frame will name it


@pytest.mark.parametrize(
    "message, why",
    [
        (shared.SLOT.pack(shared.SLOT_MAGIC, 2, 1 << 20, b"t" * 16), "out of sequence"),
        (shared.SLOT.pack(b"NOPE", 1, 1 << 20, b"t" * 16), "out of sequence"),
        (shared.SLOT.pack(shared.SLOT_MAGIC, 1, 1 << 20, b"u" * 16), "token differs"),
        (shared.SLOT.pack(shared.SLOT_MAGIC, 1, 0, b"t" * 16), "out of sequence"),
        (b"short", "malformed"),
    ],
    ids=["skipped-id", "bad-magic", "other-token", "zero-size", "short"],
)
def test_a_malformed_slot_message_is_a_protocol_error(message, why):
    parent, child = shared.socket_pair()
    receiver = shared.Receiver(parent, "host")
    fd = os.memfd_create("slot")
    os.ftruncate(fd, 1 << 20)
    try:
        socket.send_fds(child, [message], [fd])
        with pytest.raises(protocol.ProtocolError, match=why):
            receiver.take(1, (b"t" * 16).hex(), 1, 8)
    finally:
        os.close(fd)
        receiver.close()
        child.close()


def test_a_descriptor_that_is_no_shared_memory_or_smaller_than_declared_is_refused():
    parent, child = shared.socket_pair()
    receiver = shared.Receiver(parent, "host")
    r, w = os.pipe()
    try:
        socket.send_fds(child, [shared.SLOT.pack(shared.SLOT_MAGIC, 1, 1 << 20, b"t" * 16)], [r])
        with pytest.raises(protocol.ProtocolError, match="could not be mapped"):
            receiver.take(1, (b"t" * 16).hex(), 1, 8)
    finally:
        for fd in (r, w):
            os.close(fd)
        receiver.close()
        child.close()


def test_a_frame_that_declares_more_bytes_than_its_slot_holds_is_refused(ends):
    sender, receiver = ends
    head, tensors, total, _ = protocol.package_split(torch.ones(8))
    slot, token, seq = sender.put(tensors, total)
    with pytest.raises(protocol.ProtocolError, match="more bytes than its slot holds"):
        receiver.take(slot, token, seq, 1 << 30)


def test_no_slot_message_at_all_ends_in_a_protocol_error_not_a_hang(monkeypatch):
    monkeypatch.setattr(shared, "RECEIVE_TIMEOUT_S", 0.2)
    parent, child = shared.socket_pair()
    receiver = shared.Receiver(parent, "host")
    try:
        with pytest.raises(protocol.ProtocolError, match="no shared slot arrived"):
            receiver.take(1, (b"t" * 16).hex(), 1, 8)
    finally:
        receiver.close()
        child.close()


def test_a_host_slot_over_the_workers_file_size_limit_falls_back_to_the_pipe(ends, monkeypatch):
    import resource

    sender, _ = ends
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1 << 20, resource.RLIM_INFINITY))
    head, tensors, total, _ = protocol.package_split(torch.ones(1 << 19))  # 2 MiB
    with pytest.raises(shared.SharedError, match="file-size limit"):
        sender.put(tensors, total)
    assert sender.broken is None  # only this output goes by pipe


def test_the_shared_head_must_end_at_its_table():
    head, tensors, total, _ = protocol.package_split(torch.ones(4))
    data = torch.ones(4).view(torch.uint8).numpy()
    with pytest.raises(ValueError, match="bytes after its table"):
        protocol.unpackage(shared.Blob(head=head + b"x" * 64, data=data))
    with pytest.raises(ValueError, match="do not match its table entry"):
        protocol.unpackage(shared.Blob(head=head, data=data[:8]))


def test_an_evaluation_through_shared_slots_gives_the_verdict_the_pipe_gives(monkeypatch):
    taken = []
    original = shared.Receiver.take

    def counting(self, *args):
        taken.append(args)
        return original(self, *args)

    monkeypatch.setattr(shared.Receiver, "take", counting)
    monkeypatch.setenv("KSCOUT_OUTPUT_TRANSPORT", "shared")
    by_slot = evaluate(SEED, "layernorm", device="cpu", trials=1, seed=42, overrides=SMALL)
    assert by_slot.status is Status.passed, by_slot.message
    assert len(taken) >= len(by_slot.shape_results)  # every judged output came through a slot
    monkeypatch.setenv("KSCOUT_OUTPUT_TRANSPORT", "pipe")
    through_slots = len(taken)
    by_pipe = evaluate(SEED, "layernorm", device="cpu", trials=1, seed=42, overrides=SMALL)
    assert len(taken) == through_slots  # the pipe run used no slot
    facts = lambda r: [(s.case_id, s.passed, s.max_abs_error, s.seeds) for s in r.shape_results]  # noqa: E731
    assert facts(by_slot) == facts(by_pipe)


def test_a_wrong_candidate_is_refused_through_shared_slots(monkeypatch):
    monkeypatch.setenv("KSCOUT_OUTPUT_TRANSPORT", "shared")
    zeros = (ROOT / "tests" / "adversarial" / "cheat_zeros.py").read_text()
    wrong = evaluate(zeros, "layernorm", device="cpu", trials=1, seed=3, overrides=SMALL)
    assert (wrong.status, wrong.error_class) == (Status.incorrect, "ValueMismatch")


def test_the_default_transport_is_shared_where_descriptors_can_be_passed(monkeypatch):
    from evaluation import harness

    monkeypatch.delenv("KSCOUT_OUTPUT_TRANSPORT", raising=False)
    assert harness.output_transport() == "shared"
    monkeypatch.setattr(shared, "available", lambda: False)
    assert harness.output_transport() == "pipe"


def test_the_ack_is_only_accepted_for_the_output_the_worker_sent_last(ends):
    sender, receiver = ends
    head, tensors, total, _ = protocol.package_split(torch.ones(8))
    sender.put(tensors, total)
    receiver.sock.send(shared.ACK.pack(shared.ACK_MAGIC, 1, 99))  # not the sequence it waits for
    with pytest.raises(shared.SharedError, match="out of order"):
        sender.put(tensors, total)
    assert sender.broken is not None  # the slot may still be read: never written again
