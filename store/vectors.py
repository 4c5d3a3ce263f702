"""Chroma collections that mirror DuckDB rows as vectors: rebuildable, never the source of truth.

Collections: `chunks`, `outcomes`, `failures`, named `kscout_<store uid>_<name>` so that several
stores can share one Chroma server. Vector ids are the DuckDB ids; metadata carries the filter keys.
We always pass vectors we computed (through the embeddings cache); the registered embedding function
exists so Chroma never instantiates its default one (which downloads a model) and so a collection
reopened in another process finds its function by name.

Several processes on one local Chroma folder: every call here runs under the store's flock (the caller
holds it). A local `PersistentClient` keeps the HNSW index in memory and does not see another
process's writes, so each write also stores a fresh token in `vectors.token`; a process whose last
known token differs closes its client and reopens the folder before it reads or writes. One process
with one store pays nothing; interleaved sessions pay a ~10 ms reopen. With a Chroma server
(`KSCOUT_CHROMA_URL`) the server serializes access itself and no token is needed.
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlparse

import chromadb
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.config import Settings
from chromadb.utils.embedding_functions import register_embedding_function

from store.embeddings import MODEL_DIM, Embedder
from store.errors import StoreError, VectorIndexError, one_line

COLLECTIONS = ("chunks", "outcomes", "failures")


def _settings() -> Settings:
    """A fresh object each time: chromadb.HttpClient writes the server's address into the one it gets."""
    return Settings(anonymized_telemetry=False)


@register_embedding_function
class KscoutMiniLM(EmbeddingFunction[Documents]):
    """The store's MiniLM, under a name Chroma can find again when a collection is reopened."""

    def __init__(self) -> None:
        self._embedder = Embedder()

    def __call__(self, input: Documents) -> Embeddings:
        import numpy as np

        return [np.asarray(v, dtype=np.float32) for v in self._embedder.encode(list(input))]

    @staticmethod
    def name() -> str:
        return "kscout-minilm-l6-v2"

    def get_config(self) -> dict[str, Any]:
        return {"model": Embedder.model_name}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> "KscoutMiniLM":
        return KscoutMiniLM()

    def default_space(self) -> str:  # type: ignore[override]
        return "cosine"

    def supported_spaces(self) -> list[str]:  # type: ignore[override]
        return ["cosine"]


class _SharedLocal:
    """One PersistentClient per folder per process, shared by every Store there (see module doc)."""

    def __init__(self, path: Path):
        self.path = path
        self.client: Any = None
        self.collections: dict[str, Any] = {}  # valid while `client` is
        self.token: str | None = None
        self.users = 0
        self.pid = os.getpid()


_local: dict[str, _SharedLocal] = {}
_local_lock = threading.Lock()


def _read_token(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


class VectorIndex:
    def __init__(self, *, prefix: str, chroma_path: Path, token_path: Path, url: str | None = None):
        self.prefix = prefix
        self.url = url
        self.chroma_path = chroma_path
        self.token_path = token_path
        self._http: Any = None
        self._http_collections: dict[str, Any] = {}
        self._max_batch: int | None = None
        self._shared: _SharedLocal | None = None
        if url is None:
            with _local_lock:
                key = str(chroma_path.resolve())
                shared = _local.get(key)
                if shared is None or shared.pid != os.getpid():
                    shared = _local[key] = _SharedLocal(chroma_path)
                shared.users += 1
                self._shared = shared

    @property
    def where(self) -> str:
        return self.url or str(self.chroma_path)

    # -- clients ---------------------------------------------------------------------------------
    def _client(self) -> Any:
        if self.url is not None:
            if self._http is None:
                parsed = urlparse(self.url)
                if parsed.scheme not in ("http", "https") or not parsed.hostname:
                    raise StoreError(f"bad Chroma URL {self.url!r}: expected http://HOST:PORT")
                try:
                    self._http = chromadb.HttpClient(
                        host=parsed.hostname,
                        port=parsed.port or (443 if parsed.scheme == "https" else 8000),
                        ssl=parsed.scheme == "https",
                        settings=_settings(),
                    )
                except Exception as exc:
                    raise VectorIndexError(f"cannot reach Chroma at {self.url}: {one_line(exc)}") from exc
            return self._http
        shared = self._shared
        assert shared is not None
        with _local_lock:
            current = _read_token(self.token_path)
            if shared.client is not None and current != shared.token:
                shared.client.close()  # another process wrote: our in-memory index is stale
                shared.client = None
                shared.collections.clear()
            if shared.client is None:
                self.chroma_path.mkdir(parents=True, exist_ok=True)
                shared.client = chromadb.PersistentClient(path=str(self.chroma_path), settings=_settings())
                shared.token = current
            return shared.client

    def _wrote(self) -> None:
        if self._shared is None:
            return
        token = uuid.uuid4().hex
        tmp = self.token_path.with_name(self.token_path.name + f".{os.getpid()}.tmp")
        tmp.write_text(token)
        os.replace(tmp, self.token_path)
        self._shared.token = token

    def _collection(self, name: str) -> Any:
        if name not in COLLECTIONS:
            raise StoreError(f"unknown collection {name!r}; expected one of {', '.join(COLLECTIONS)}")
        client = self._client()
        known = self._known_collections()
        if name not in known:
            known[name] = client.get_or_create_collection(
                f"kscout_{self.prefix}_{name}",
                embedding_function=KscoutMiniLM(),
                configuration={"hnsw": {"space": "cosine"}},
                metadata={"model": Embedder.model_name, "dim": MODEL_DIM},
            )
        return known[name]

    def _known_collections(self) -> dict[str, Any]:
        return self._http_collections if self._shared is None else self._shared.collections

    # -- operations (the caller holds the store lock) ---------------------------------------------
    def upsert(
        self, name: str, ids: Sequence[str], vectors: Sequence[Sequence[float]], metadatas: Sequence[dict]
    ) -> None:
        if not ids:
            return
        with self._errors("write to"):
            col = self._collection(name)
            step = self._batch_size()
            for i in range(0, len(ids), step):
                col.upsert(
                    ids=list(ids[i : i + step]),
                    embeddings=[list(v) for v in vectors[i : i + step]],
                    metadatas=[clean_metadata(m) for m in metadatas[i : i + step]],
                )
            self._wrote()

    def delete(self, name: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        with self._errors("delete from"):
            self._collection(name).delete(ids=list(ids))
            self._wrote()

    def query(self, name: str, vector: Sequence[float], k: int, where: dict | None) -> list[tuple[str, float]]:
        with self._errors("search"):
            col = self._collection(name)
        try:
            found = col.query(query_embeddings=[list(vector)], n_results=k, where=where or None, include=["distances"])
        except (ValueError, TypeError) as exc:
            raise StoreError(f"bad vector filter {where!r}: {one_line(exc)}") from exc
        except Exception as exc:
            if type(exc).__name__ in ("InvalidArgumentError", "InvalidWhereError"):
                raise StoreError(f"bad vector filter {where!r}: {one_line(exc)}") from exc
            raise VectorIndexError(f"vector search in {self.where} failed: {one_line(exc)}") from exc
        return [(i, float(d)) for i, d in zip(found["ids"][0], found["distances"][0])]

    def count(self, name: str) -> int:
        with self._errors("read"):
            return self._collection(name).count()

    def rebuild(
        self, name: str, ids: Sequence[str], vectors: Sequence[Sequence[float]], metadatas: Sequence[dict]
    ) -> int:
        """Drop the collection and fill it again from the given rows."""
        with self._errors("rebuild"):
            client = self._client()
            full = f"kscout_{self.prefix}_{name}"
            self._known_collections().pop(name, None)
            if full in {c if isinstance(c, str) else c.name for c in client.list_collections()}:
                client.delete_collection(full)
            self._wrote()
        self.upsert(name, ids, vectors, metadatas)
        return len(ids)

    def discard_local_folder(self) -> Path:
        """Move a damaged local Chroma folder aside (nothing is deleted) so a rebuild starts afresh.

        Chroma's own files cannot be repaired from here (a malformed `chroma.sqlite3` fails every
        call), and everything in them is derived from DuckDB. Returns where the old folder went.
        """
        if self._shared is None:
            raise StoreError(f"Chroma at {self.where} is a server: repair it there, not from this store")
        import time as _time

        shared = self._shared
        with _local_lock:
            if shared.client is not None:
                try:
                    shared.client.close()
                except Exception:  # noqa: BLE001 - a client over damaged files may fail to close; it is dropped
                    pass
            shared.client = None
            shared.collections.clear()
            _drop_cached_system(str(self.chroma_path))
            aside = self.chroma_path.with_name(f"{self.chroma_path.name}.damaged-{_time.strftime('%Y%m%dT%H%M%S')}")
            n = 1
            while aside.exists():
                aside = aside.with_name(f"{aside.name}-{n}")
                n += 1
            if self.chroma_path.exists():
                os.replace(self.chroma_path, aside)
        self._wrote()
        return aside

    def _batch_size(self) -> int:
        if self._max_batch is None:
            try:
                self._max_batch = max(1, min(1000, int(self._client().get_max_batch_size())))
            except Exception:  # older servers do not say; 1000 is below every limit seen
                self._max_batch = 1000
        return self._max_batch

    def close(self) -> None:
        """Release this store's use of the shared client; the last user closes it."""
        self._http = None
        self._http_collections.clear()
        shared, self._shared = self._shared, None
        if shared is None:
            return
        with _local_lock:
            shared.users -= 1
            if shared.users <= 0 and shared.client is not None and shared.pid == os.getpid():
                shared.client.close()
                shared.client = None
                shared.collections.clear()
                _local.pop(str(shared.path.resolve()), None)

    def _errors(self, verb: str):
        return _Wrap(verb, self.where)


def _drop_cached_system(path: str) -> None:
    """Chroma caches one System per folder per process, and one whose start failed on damaged files
    stays cached half-built: every later client for that folder fails. Drop it so the next client
    starts a fresh one (a private table of chromadb's; if it moves, a new client simply fails again)."""
    from chromadb.api.shared_system_client import SharedSystemClient

    system = SharedSystemClient._identifier_to_system.pop(path, None)
    SharedSystemClient._identifier_to_refcount.pop(path, None)
    if system is not None:
        try:
            system.stop()
        except Exception:  # noqa: BLE001 - a half-started system fails to stop; it is dropped either way
            pass


class _Wrap:
    """Turns anything Chroma raises into a VectorIndexError that says where and what."""

    def __init__(self, verb: str, where: str):
        self.verb, self.where = verb, where

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None or isinstance(exc, StoreError) or not isinstance(exc, Exception):
            return  # nothing, or already ours: let it propagate as it is
        raise VectorIndexError(f"cannot {self.verb} Chroma at {self.where}: {one_line(exc)}") from exc


def clean_metadata(meta: dict) -> dict:
    """Chroma refuses None and empty lists; a missing key filters the same way."""
    out = {k: v for k, v in meta.items() if v is not None and not (isinstance(v, (list, tuple)) and not v)}
    out = {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}
    return out or {"_": True}
