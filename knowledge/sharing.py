"""Sharing what one team's store learned with another: `kscout knowledge export`, `import`, `trust`, `keys`.

The bundle format, its signature and the merge rules live in store/sharing.py, the keys in
store/signing.py; this module adds who exported it (team from --team or $KSCOUT_TEAM, the user, the
host), writes the vectors of imported rows and leaves the ask index current. After importing an MI300
team's bundle, `kscout ask "what worked on MI300 for layernorm"` answers from their outcomes and names
them as theirs, not re-measured here.

Trust is per store: a bundle imports only when this store trusts the key that signed it. Another team
prints its public key with `kscout knowledge keys`; `kscout knowledge trust KEY` (the key's text, or a
bundle it signed) trusts it here, as does `kscout knowledge import --trust`.
"""

from __future__ import annotations

import getpass
import os
import socket
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict

from store.errors import SigningError
from store.sharing import BundleManifest, BundleOrigin, ImportReport, read_manifest, write_imported_vectors
from store.sharing import export_bundle as _export
from store.sharing import import_bundle as _import
from store.signing import Keyring, PublicKey, TrustedKey, parse_public_key


def _user() -> Optional[str]:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return os.environ.get("USER") or None


def export_bundle(store, out: Path, *, team: Optional[str] = None) -> BundleManifest:
    origin = BundleOrigin(
        store=store.store_uid,
        team=team or os.environ.get("KSCOUT_TEAM") or None,
        user_name=_user(),
        host=socket.gethostname() or None,
    )
    return _export(store, Path(out), origin)


def import_bundle(store, bundle: Path, *, trust: bool = False) -> ImportReport:
    report = _import(store, Path(bundle), trust=trust)
    write_imported_vectors(store, report)
    from knowledge.index import corpus_for

    corpus_for(store)
    return report


class KeysReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    own_key_id: str
    own_public_key: str  # what another team passes to `kscout knowledge trust`
    trusted: tuple[TrustedKey, ...]


class TrustResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key_id: str
    public_key: str
    label: Optional[str] = None
    status: str  # "trusted" | "already trusted" | "own key"


def store_keys(store) -> KeysReport:
    """This store's public key (made now if it has none) and the keys it trusts."""
    keyring = Keyring.of(store)
    own = keyring.own_public()
    return KeysReport(own_key_id=own.key_id, own_public_key=own.text, trusted=tuple(keyring.trusted()))


def _key_of(key_or_bundle: str) -> tuple[PublicKey, Optional[str]]:
    """(the key, the bundle's team) from a key's text or a bundle folder (whose signature must verify)."""
    path = Path(key_or_bundle).expanduser()
    if path.is_dir():
        manifest, key = read_manifest(path)
        return key, manifest.origin.team
    try:
        return parse_public_key(key_or_bundle), None
    except SigningError as exc:
        raise SigningError(
            f"{exc}; pass a public key as `kscout knowledge keys` prints it, or a bundle folder"
        ) from None


def trust_key(store, key_or_bundle: str, *, label: Optional[str] = None) -> TrustResult:
    """Trust a key for every later import into this store (idempotent)."""
    key, team = _key_of(key_or_bundle)
    keyring = Keyring.of(store)
    own = keyring.own_public_if_made()
    if own is not None and own.text == key.text:
        return TrustResult(key_id=key.key_id, public_key=key.text, status="own key")
    entry, new = keyring.trust(key, label=label or team, how="kscout knowledge trust")
    return TrustResult(
        key_id=entry.key_id,
        public_key=entry.public_key,
        label=entry.label,
        status="trusted" if new else "already trusted",
    )


def untrust_key(store, key_id: str) -> list[TrustedKey]:
    gone = Keyring.of(store).untrust(key_id)
    if not gone:
        raise SigningError(f"no trusted key has an id starting with {key_id!r} (see `kscout knowledge keys`)")
    return gone
