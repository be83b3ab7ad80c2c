"""Build ``src/engrain/embed/minilm/words.npz``: all-MiniLM-L6-v2's vector of each of its
alphabetic vocabulary tokens embedded alone (issue 15).

    python scripts/build_word_table.py [--dims 384]

A word that is one WordPiece token ("violin", "instruments") embedded as a text is the
model run on ``[CLS] token [SEP]``: this script runs exactly that once per token (the float
graph, 256 tokens a run: ~40 s of CPU), so ``embed.word_table`` gives such a word its model
vector without running the model. A word of several pieces ("kickboxing": kick ##box
##ing) gets the mean of its pieces' rows (the ``##`` pieces are run as ``[CLS] ##ing
[SEP]``). Only tokens of ASCII letters are kept (with and without ``##``: 26,503 of
30,522), which covers every word ``recall.soft_terms`` reads. Each row is stored in int8
with its own scale (cosine to the float row ≥ 0.9999); ``--dims`` below 384 first projects
the rows onto their top principal directions (not shipped: it raises unrelated words'
cosines, docs/decisions.md).
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from engrain.embed import minilm, word_table

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "engrain" / "embed" / "minilm" / word_table.TABLE_FILE
CLS, SEP = 101, 102
BATCH = 256
ALPHABETIC = re.compile(r"(##)?[a-z]+")


def session() -> ort.InferenceSession:
    """The fused float graph on the package's weights, one intra-op thread per core."""
    model, weights = minilm.model_source(fused=True, int8=False)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if weights is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(weights)
        )
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def token_vectors(run: ort.InferenceSession, ids: np.ndarray) -> np.ndarray:
    """The model's unit vector of each token id embedded alone (mean-pooled like a text)."""
    out = np.empty((len(ids), minilm.DIM), dtype=np.float32)
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        x = np.stack([np.full_like(chunk, CLS), chunk, np.full_like(chunk, SEP)], axis=1)
        feed = {"input_ids": x, "attention_mask": np.ones_like(x),
                "token_type_ids": np.zeros_like(x)}  # fmt: skip
        pooled = run.run(None, feed)[0].mean(axis=1)
        out[start : start + len(chunk)] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dims", type=int, default=minilm.DIM)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    path = Path(str(minilm.__file__)).with_name("minilm") / "tokenizer.json"
    vocab = Tokenizer.from_file(str(path)).get_vocab()
    ids = np.array(sorted(i for t, i in vocab.items() if ALPHABETIC.fullmatch(t)), np.int64)
    started = time.process_time()
    vectors = token_vectors(session(), ids)
    print(f"{len(ids)} tokens embedded in {time.process_time() - started:.1f} s of CPU")
    if args.dims < minilm.DIM:
        _, _, basis = np.linalg.svd(vectors, full_matrices=False)
        vectors = vectors @ basis[: args.dims].T
    scales = np.abs(vectors).max(axis=1) / 127.0
    rows = np.round(vectors / scales[:, None]).astype(np.int8)
    np.savez(args.out, ids=ids.astype(np.int32), rows=rows, scales=scales.astype(np.float32))
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
