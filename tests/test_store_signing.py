"""A store's signing key and the keys it trusts (store/signing.py), on real store folders."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import stat

import pytest

from store import Store
from store.errors import SigningError
from store.signing import Keyring, parse_public_key


def _keyring(folder) -> Keyring:
    return Keyring(folder / "keys", contextlib.nullcontext)


def test_the_signing_key_is_made_on_first_need_readable_by_its_owner_only(tmp_path):
    with Store.open(tmp_path / "home") as store:
        keyring = Keyring.of(store)
        assert keyring.own_public_if_made() is None and not keyring.key_path.exists()
        key = keyring.own_public()
        assert stat.S_IMODE(keyring.key_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(keyring.folder.stat().st_mode) == 0o700
        assert keyring.key_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    with Store.open(tmp_path / "home") as again:
        assert Keyring.of(again).own_public() == key  # the same key when the store opens again
    raw = base64.b64decode(key.text.removeprefix("ed25519:"))
    assert len(raw) == 32 and key.key_id == hashlib.sha256(raw).hexdigest()[:16]
    assert sorted(os.listdir(tmp_path / "home" / "keys")) == ["signing_key.pem"]  # no temp file left


def test_a_signature_verifies_only_for_its_payload_and_key(tmp_path):
    ours, theirs = _keyring(tmp_path / "a"), _keyring(tmp_path / "b")
    key, signature = ours.sign(b"payload")
    assert key.verify(b"payload", signature)
    assert not key.verify(b"payload!", signature)
    assert not theirs.own_public().verify(b"payload", signature)
    assert not key.verify(b"payload", "not base64 at all")


def test_a_signing_key_others_can_read_is_refused(tmp_path):
    keyring = _keyring(tmp_path)
    keyring.own_public()
    keyring.key_path.chmod(0o644)
    with pytest.raises(SigningError, match="can be read by others .*chmod 600"):
        keyring.sign(b"payload")


def test_public_key_text_round_trips_and_malformed_text_is_refused(tmp_path):
    key = _keyring(tmp_path).own_public()
    assert parse_public_key(f"  {key.text}\n") == key
    for bad, why in (
        ("ssh-ed25519:AAAA", "expected 'ed25519:<base64>'"),
        ("ed25519:not*base64", "not valid base64"),
        ("ed25519:" + base64.b64encode(b"short").decode(), "has 5 bytes"),
    ):
        with pytest.raises(SigningError, match=why):
            parse_public_key(bad)


def test_a_store_trusts_its_own_key_and_keys_it_was_told_to_trust_once_each(tmp_path):
    ours, theirs = _keyring(tmp_path / "a"), _keyring(tmp_path / "b")
    own, other = ours.own_public(), theirs.own_public()
    assert ours.is_trusted(own) and not ours.is_trusted(other)
    entry, new = ours.trust(other, label="mi300-lab", how="kscout knowledge trust")
    again, new_again = ours.trust(other, label="someone else", how="kscout knowledge trust")
    assert new and not new_again and again == entry  # trusting twice keeps the first entry
    assert ours.is_trusted(other) and [t.key_id for t in ours.trusted()] == [other.key_id]
    assert ours.trusted()[0].label == "mi300-lab"
    assert ours.untrust(other.key_id[:6]) == [entry]
    assert not ours.is_trusted(other) and ours.trusted() == []
    assert ours.untrust(other.key_id) == []
