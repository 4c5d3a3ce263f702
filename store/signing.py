"""A store's signing key and the keys it trusts: who may add measurements to this store by bundle.

Each store has one Ed25519 key, made the first time something needs it (an export, `kscout knowledge
keys`), kept as `keys/signing_key.pem` in the store folder with mode 0600 and never exported. Its public
half has a text form, `ed25519:<base64 of the 32 raw bytes>`, which is what another team trusts, and a
short id (the first 16 hex digits of the raw bytes' sha256) that people compare by eye or by phone.

Trusted keys are `keys/trusted.json`, written whole (temp file and rename) under the store lock, so
two processes trusting at once lose neither. A store always trusts its own key and never lists it there.
This is not a DuckDB table: keys are about the folder, not the rows, and a bundle never carries them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Callable, Optional

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict

from store.errors import SigningError
from store.home import KEYS_DIRNAME
from store.records import utc_now

ALGORITHM = "ed25519"
KEY_FILENAME = "signing_key.pem"
TRUSTED_FILENAME = "trusted.json"
KEY_ID_HEX = 16


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PublicKey(_Record):
    """A public key in its text form; build one with `parse_public_key` so the text is checked."""

    text: str  # "ed25519:<base64>"

    @property
    def raw(self) -> bytes:
        return base64.b64decode(self.text.split(":", 1)[1])

    @property
    def key_id(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()[:KEY_ID_HEX]

    def verify(self, payload: bytes, signature_b64: str) -> bool:
        try:
            signature = base64.b64decode(signature_b64, validate=True)
        except (binascii.Error, ValueError):
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, payload)
        except InvalidSignature:
            return False
        return True


class TrustedKey(_Record):
    key_id: str
    public_key: str
    label: Optional[str] = None  # who it belongs to, as the person trusting it said
    trusted_at: str
    how: str  # "kscout knowledge trust" | "import --trust of bundle <id>"


def parse_public_key(text: str) -> PublicKey:
    """`ed25519:<base64>` as `kscout knowledge keys` prints it; a malformed one is a SigningError."""
    text = (text or "").strip()
    algorithm, sep, body = text.partition(":")
    if not sep or algorithm != ALGORITHM:
        raise SigningError(f"not a public key: {text[:40]!r} (expected '{ALGORITHM}:<base64>')")
    try:
        raw = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise SigningError(f"public key {text[:40]!r} is not valid base64") from None
    if len(raw) != 32:
        raise SigningError(f"public key {text[:40]!r} has {len(raw)} bytes; an Ed25519 key has 32")
    return PublicKey(text=f"{ALGORITHM}:{base64.b64encode(raw).decode('ascii')}")


def _public_of(private: Ed25519PrivateKey) -> PublicKey:
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PublicKey(text=f"{ALGORITHM}:{base64.b64encode(raw).decode('ascii')}")


class Keyring:
    """The signing key and trusted keys of one store folder; `lock` is the store's inter-process lock."""

    def __init__(self, folder: Path, lock: Callable[[], AbstractContextManager]) -> None:
        self.folder = Path(folder)
        self._lock = lock

    @classmethod
    def of(cls, store) -> "Keyring":
        return cls(store.home / KEYS_DIRNAME, store.db.exclusive)

    @property
    def key_path(self) -> Path:
        return self.folder / KEY_FILENAME

    @property
    def trusted_path(self) -> Path:
        return self.folder / TRUSTED_FILENAME

    # -- this store's own key ------------------------------------------------------------------------
    def _private(self, create: bool) -> Optional[Ed25519PrivateKey]:
        if not self.key_path.exists():
            if not create:
                return None
            self._create()
        mode = stat.S_IMODE(self.key_path.stat().st_mode)
        if mode & 0o077:
            raise SigningError(
                f"signing key {self.key_path} can be read by others (mode {mode:04o}); "
                f"run `chmod 600 {self.key_path}` and try again"
            )
        try:
            key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise SigningError(f"signing key {self.key_path} is unreadable: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningError(f"signing key {self.key_path} is not an Ed25519 key")
        return key

    def _create(self) -> None:
        """Write a new key with mode 0600 from the first byte; the first of two racing processes wins
        (a hard link cannot replace a file), and the other reads the winner's key."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        tmp = self.folder / f".{KEY_FILENAME}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(pem)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, self.key_path)
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)

    def own_public(self) -> PublicKey:
        """This store's public key, made now if it has none."""
        private = self._private(create=True)
        assert private is not None
        return _public_of(private)

    def own_public_if_made(self) -> Optional[PublicKey]:
        """This store's public key, or None while it has never needed one (nothing is made)."""
        private = self._private(create=False)
        return _public_of(private) if private is not None else None

    def sign(self, payload: bytes) -> tuple[PublicKey, str]:
        """(the signing public key, the base64 Ed25519 signature of `payload`)."""
        private = self._private(create=True)
        assert private is not None
        return _public_of(private), base64.b64encode(private.sign(payload)).decode("ascii")

    # -- keys of other stores ------------------------------------------------------------------------
    def trusted(self) -> list[TrustedKey]:
        """Keys trusted here, in the order they were trusted (this store's own key is not listed)."""
        try:
            data = json.loads(self.trusted_path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise SigningError(f"trusted keys file {self.trusted_path} is unreadable: {exc}") from None
        try:
            return [TrustedKey.model_validate(k) for k in data["trusted"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise SigningError(f"trusted keys file {self.trusted_path} is malformed: {exc}") from None

    def is_trusted(self, key: PublicKey) -> bool:
        own = self.own_public_if_made()
        if own is not None and own.text == key.text:
            return True
        return any(t.public_key == key.text for t in self.trusted())

    def trust(self, key: PublicKey, *, label: Optional[str] = None, how: str) -> tuple[TrustedKey, bool]:
        """(the entry, whether it is new). Trusting a key again keeps its first entry."""
        with self._lock():
            keys = self.trusted()
            for t in keys:
                if t.public_key == key.text:
                    return t, False
            entry = TrustedKey(key_id=key.key_id, public_key=key.text, label=label, trusted_at=utc_now(), how=how)
            self._write([*keys, entry])
        return entry, True

    def untrust(self, key_id: str) -> list[TrustedKey]:
        """Remove the trusted keys whose id starts with `key_id`; what was removed (none: nothing matched)."""
        key_id = key_id.strip().lower()
        if not key_id:
            raise SigningError("empty key id")
        with self._lock():
            keys = self.trusted()
            gone = [t for t in keys if t.key_id.startswith(key_id)]
            if len(gone) > 1:
                raise SigningError(f"key id {key_id!r} is ambiguous: it matches {', '.join(t.key_id for t in gone)}")
            if gone:
                self._write([t for t in keys if t not in gone])
        return gone

    def _write(self, keys: list[TrustedKey]) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.folder / f".{TRUSTED_FILENAME}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"trusted": [k.model_dump(mode="json") for k in keys]}, indent=2) + "\n")
        os.replace(tmp, self.trusted_path)
