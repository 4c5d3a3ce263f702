"""KSCOUT_VECTORS=off: a machine without Chroma or the embedding model still keeps and answers.

A GPU worker of a fleet has neither chromadb nor the MiniLM package; it must still write every row
and retrieve documents by SQL filters and BM25. Run in a fresh process so the imports are observable.
"""

import json
import os
import subprocess
import sys

SCRIPT = r"""
import json, sys
from store import Store
from knowledge.ingest import ingest_builtin
from knowledge.retrieve import ask

home = sys.argv[1]
with Store.open(home) as store:
    report = ingest_builtin(store)
    answer = ask(store, "how much HBM bandwidth does the H200 have", k=5)
    vectors = store.vector_search("chunks", "H200 bandwidth", 5)
    count = store.vector_count("chunks")
    reindex_error = None
    try:
        store.reindex()
    except Exception as exc:
        reindex_error = type(exc).__name__ + ": " + str(exc)
    print(json.dumps({
        "documents": len(store.documents()),
        "chunks": len(store.chunks()),
        "top_sources": [d.source for d in answer.documents],
        "vectors": vectors,
        "count": count,
        "reindex_error": reindex_error,
        "chromadb_imported": "chromadb" in sys.modules,
        "model_imported": "sentence_transformers" in sys.modules,
    }))
"""


def test_vectors_off_keeps_every_row_retrieves_by_bm25_and_never_imports_chroma_or_the_model(tmp_path):
    env = dict(os.environ, KSCOUT_VECTORS="off")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "home")], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["documents"] == 18
    assert got["chunks"] > 100
    assert any(s.endswith("nvidia-h200.md") for s in got["top_sources"][:3]), got["top_sources"]
    assert got["vectors"] == [] and got["count"] == 0
    assert got["reindex_error"].startswith("StoreError: vectors are off")
    assert got["chromadb_imported"] is False
    assert got["model_imported"] is False
