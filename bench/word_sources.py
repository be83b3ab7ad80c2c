"""Word vectors for soft terms: the model run on each word against its word table (issue 15).

For the category ↔ instance pairs soft terms are for (instruments–violin, exercises–yoga)
and unrelated pairs, the cosine each source gives; for LoCoMo's chunk words, how close the
table's vector of a word is to the model's (one-token words and words of several pieces
apart) and the CPU a word costs each way (thread CPU, medians of ``--rounds``).

    python bench/word_sources.py [--sample 400] [--out bench/results/word-sources.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baselines as bl

from engrain.embed.minilm import MiniLMEmbedder
from engrain.embed.word_table import load_table
from engrain.recall.soft_terms import chunk_words

#: A category and its instance (the session-12 analysis, docs/decisions.md), then pairs
#: of unrelated words.
RELATED = [("instruments", "violin"), ("instruments", "guitar"), ("exercises", "yoga"),
           ("exercises", "kickboxing"), ("art", "painting"), ("pets", "dog"),
           ("sports", "soccer"), ("hobbies", "pottery"), ("books", "novel"),
           ("food", "pizza")]  # fmt: skip
UNRELATED = [("instruments", "kitchen"), ("exercises", "painting"), ("art", "yoga"),
             ("pets", "violin"), ("sports", "museum")]  # fmt: skip


def cpu_per_word(embed: object, words: list[str], rounds: int) -> float:
    """Median thread CPU (µs) a word over ``rounds`` calls on ``words``."""
    times = []
    for _ in range(rounds):
        started = time.thread_time()
        embed(words)  # type: ignore[operator]
        times.append(time.thread_time() - started)
    return float(np.median(times)) / len(words) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sample", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", type=Path, default=bl.DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    model = MiniLMEmbedder()
    table = load_table()
    pairs = {}
    for a, b in RELATED + UNRELATED:
        m, t = model.embed([a, b]), table.embed([a, b])
        pairs[f"{a}-{b}"] = {"model": round(float(m[0] @ m[1]), 3),
                             "table": round(float(t[0] @ t[1]), 3)}  # fmt: skip
    words = sorted({w for c in bl.load_locomo(args.data) for s in c.sessions for t in s.turns
                    for w in chunk_words(t.text)})  # fmt: skip
    sample = random.Random(15).sample(words, min(args.sample, len(words)))
    one = [n == 1 for n in table.pieces(sample)]
    cos = np.sum(model.embed(sample) * table.embed(sample), axis=1)
    out = {
        "pairs": pairs,
        "locomo_words": len(words),
        "sample": len(sample),
        "one_token_share": round(float(np.mean(one)), 3),
        "table_vs_model_cosine_median": {
            "one token": round(float(np.median(cos[np.array(one)])), 4),
            "several pieces": round(float(np.median(cos[~np.array(one)])), 4),
        },
        "thread_cpu_us_a_word": {
            "model": round(cpu_per_word(model.embed, sample, args.rounds), 1),
            "table": round(cpu_per_word(table.embed, sample, args.rounds), 1),
        },
        "graph": model.graph,
    }
    print(json.dumps(out, indent=2))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
