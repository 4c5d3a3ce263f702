"""Sharing what one team's store learned with another: `kscout knowledge export` and `import`.

The bundle format and the merge rules live in store/sharing.py; this module adds who exported it
(team from --team or $KSCOUT_TEAM, the user, the host), writes the vectors of imported rows and
leaves the ask index current. After importing an MI300 team's bundle, `kscout ask "what worked on
MI300 for layernorm"` answers from their outcomes and names them as theirs.
"""

from __future__ import annotations

import getpass
import os
import socket
from pathlib import Path
from typing import Optional

from store.sharing import BundleManifest, BundleOrigin, ImportReport, write_imported_vectors
from store.sharing import export_bundle as _export
from store.sharing import import_bundle as _import


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


def import_bundle(store, bundle: Path) -> ImportReport:
    report = _import(store, Path(bundle))
    write_imported_vectors(store, report)
    from knowledge.index import corpus_for

    corpus_for(store)
    return report
