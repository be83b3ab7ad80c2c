"""R@10 of LoCoMo's captured pools with soft terms' word vectors from each source (issue 15).

The pools are ``bench/train_chunk_rank.py capture``'s (5,000 tokens, before soft terms and
the chunk re-ranking); each question's pool is ordered by ``recall.soft_terms`` with the
words' vectors from one source, then by ``recall.chunk_rank`` and the gate's totals, as
``context()`` does. Sources: ``none`` (soft terms off), ``model`` (every word a model run,
session 13), ``table`` (the model's word table, ``embed.word_table``: shipped),
``table+model`` (the table for one-token words, the model for the others).

    python bench/train_chunk_rank.py capture --work /tmp/cap
    python bench/soft_term_sources.py --work /tmp/cap --half A [--sources none,table]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import train_chunk_rank as tcr

from engrain.embed.minilm import MiniLMEmbedder
from engrain.embed.word_table import load_table
from engrain.recall import chunk_rank
from engrain.recall.score_batch import gated_totals
from engrain.recall.soft_terms import SOFT_TERMS_WEIGHT, WordVectors, with_soft_terms

Source = Callable[[Sequence[str]], np.ndarray]
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def sources(names: Sequence[str]) -> dict[str, Source | None]:
    """Each named source's batch embedder of words (None: soft terms off)."""
    model = MiniLMEmbedder()
    table = load_table()

    def mixed(words: Sequence[str]) -> np.ndarray:
        out = table.embed(words)
        pieces = table.pieces(words)
        several = [i for i, n in enumerate(pieces) if n > 1]
        if several:
            out[several] = model.embed([words[i] for i in several])
        return out

    known: dict[str, Source | None] = {"none": None, "model": model.embed,
                                       "table": table.embed, "table+model": mixed}  # fmt: skip
    return {name: known[name] for name in names}


def recall(asked: list[Any], embed: Source | None, name: str) -> dict[str, float]:
    """Mean R@10 of ``asked`` ordered with ``embed``'s word vectors, and per category."""
    words, weights = WordVectors(), chunk_rank.shipped_weights()
    rows = []
    for a in asked:
        pool = a.pool
        if embed is not None:
            pool = with_soft_terms(pool, a.question, (name, embed), SOFT_TERMS_WEIGHT, words)
        pool = chunk_rank.with_chunk_rank(pool, a.question, weights)
        totals = gated_totals([(c.memory, c.relevance, 0.0) for c in pool], a.query)
        order = sorted(range(len(pool)), key=lambda i: totals[i], reverse=True)
        held = {t for i in order[:10] for t in pool[i].memory.provenance.turn_ids}
        rows.append((a.category, sum(e in held for e in a.evidence) / len(a.evidence)))
    out = {"R@10": round(float(np.mean([r for _, r in rows])), 4)}
    for cat, label in CATEGORIES.items():
        out[label] = round(float(np.mean([r for c, r in rows if c == cat])), 4)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--half", default="A", choices=["A", "B"])
    parser.add_argument("--sources", default="none,model,table,table+model")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    # the capture pickled its questions as ``__main__.Asked`` (it ran as a script)
    sys.modules["__main__"].Asked = tcr.Asked  # type: ignore[attr-defined]
    asked = tcr.load(args.work, args.half)
    report: dict[str, Any] = {"half": args.half, "questions": len(asked)}
    for name, embed in sources(args.sources.split(",")).items():
        started = time.process_time()
        report[name] = recall(asked, embed, name)
        report[name]["process_cpu_s"] = round(time.process_time() - started, 1)
        print(name, report[name], flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
