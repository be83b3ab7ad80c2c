"""Does a learning's best sentence rank it better than its own vector? (issue 12, session 25)

For every labelled message of one split (``tune`` by default) of the gating evaluation's
sets, every memory of its project is ranked three ways against the message: by its own
cosine (the shipped dense side), by the bare best of its own and its pieces' cosines
(:func:`engrain.recall.sentences.pieces`), and by ``recall.sentences``' chance-calibrated
evidence (:func:`engrain.recall.sentences.lifted`, weight 1: the best piece's quantile
among all the project's pieces to the power of the learning's pieces). Per message the
ranking's AUC of its must-include memories against the project's other active memories
(superseded and muted ones left out, as no profile scores them); per set the mean over its
messages, and the mean number of pieces of the memories each ranking puts in a message's
top ten (a bare maximum favours long learnings). The query side too: for the messages of
two sentences or more, the AUC of the memories' own cosines with the whole message against
their best cosine with any of its sentences (a message that asks two things, matched by
either).

This measures the ranking alone: no threshold, budget or share. ``bench/gating_lopo.py``'s
``sentence_weight`` candidates measure what the gate does with it.

Usage: ``python bench/sentence_ranks.py [--split tune] [--sets …]
[--out bench/results/sentence-ranks.json]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, write_json
from gating import SETS, load_data

from engrain.embed import make_embedder
from engrain.model import Kind, Memory
from engrain.recall.sentences import build, lifted, pieces

RANKINGS = ("own", "best_piece", "chance")
TOP = 10


def auc(scores: npt.NDArray[np.float64], positive: npt.NDArray[np.bool_]) -> float | None:
    """The share of (positive, negative) pairs the scores order right, ties half."""
    pos, neg = scores[positive], scores[~positive]
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).mean()
    equal = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * equal)


def project_rankings(
    rows: Sequence[dict[str, Any]], embedder: Any
) -> tuple[list[Memory], list[str], Any]:
    """The project's active memories with their vectors, their ids in the set, and their
    piece index."""
    active = [r for r in rows if not r.get("superseded_by") and not r.get("muted")]
    vectors = np.asarray(embedder.embed([r["content"] for r in active]), dtype=np.float32)
    memories = [
        Memory.new("u", r["content"], Kind(r["kind"]).default_memory_type, Kind(r["kind"]),
                   now=NOW, embedding=v)
        for r, v in zip(active, vectors, strict=True)
    ]  # fmt: skip
    return memories, [r["id"] for r in active], build(memories, 0, embedder.embed)


def measure(names: Sequence[str], split: str, embedder: Any) -> dict[str, Any]:
    """Per set: the mean AUC of each ranking and the mean pieces of its top ten."""
    out: dict[str, Any] = {}
    for name in names:
        data = load_data(name=name)
        per: dict[str, list[float]] = {k: [] for k in RANKINGS}
        top_pieces: dict[str, list[float]] = {k: [] for k in RANKINGS}
        asked: dict[str, list[float]] = {"whole_message": [], "best_message_sentence": []}
        for project, rows in data.projects.items():
            memories, ids, index = project_rankings(rows, embedder)
            count = {m.id: max(1, len(pieces(m.content))) for m in memories}
            labelled = [
                m for m in data.messages
                if m["split"] == split and m["project"] == project and m["must_include"]
            ]  # fmt: skip
            for message in labelled:
                query = np.asarray(embedder.embed([message["text"]]), dtype=np.float32)[0]
                own = np.array([float(np.dot(m.embedding, query)) for m in memories])
                best = own.copy()
                sims = index.matrix @ query if index.ids else np.zeros(0)
                for i, m in enumerate(memories):
                    at = index.position.get(m.id)
                    if at is not None:
                        end = index.starts[at + 1] if at + 1 < len(index.ids) else len(sims)
                        best[i] = max(own[i], float(sims[index.starts[at] : end].max()))
                found = [(m, float(s)) for m, s in zip(memories, own, strict=True)]
                chance = lifted(index, query, found, 1.0)
                scores = {"own": own, "best_piece": best,
                          "chance": np.array([chance[m.id] for m in memories])}  # fmt: skip
                positive = np.array([i in message["must_include"] for i in ids])
                said = pieces(message["text"])
                if said:
                    parts = np.asarray(embedder.embed(list(said)), dtype=np.float32)
                    by_part = np.array([float((parts @ m.embedding).max()) for m in memories])
                    for key, values in (("whole_message", own),
                                        ("best_message_sentence", by_part)):  # fmt: skip
                        a = auc(values, positive)
                        if a is not None:
                            asked[key].append(a)
                for key, values in scores.items():
                    a = auc(values, positive)
                    if a is not None:
                        per[key].append(a)
                    top = np.argsort(-values, kind="stable")[:TOP]
                    top_pieces[key].append(statistics.mean(count[memories[i].id] for i in top))
        out[name] = {
            "messages": len(per["own"]),
            "auc": {k: round(statistics.mean(v), 4) for k, v in per.items()},
            "top10_pieces": {k: round(statistics.mean(v), 2) for k, v in top_pieces.items()},
            "messages_of_sentences": len(asked["whole_message"]),
            "query_side_auc": {k: round(statistics.mean(v), 4) if v else None
                               for k, v in asked.items()},
        }  # fmt: skip
        print(f"{name:10} n={out[name]['messages']:3d} AUC " + " ".join(
            f"{k} {out[name]['auc'][k]:.4f}" for k in RANKINGS) + "; top-10 pieces " + " ".join(
            f"{k} {out[name]['top10_pieces'][k]:.2f}" for k in RANKINGS), flush=True)  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Rank every set's memories three ways and write the AUCs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="tune", choices=("tune", "held"))
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.sets.split(",") if s.strip()]
    sets = measure(names, args.split, make_embedder(args.embedder))
    pooled = {k: round(statistics.mean(s["auc"][k] for s in sets.values()), 4) for k in RANKINGS}
    print("mean over sets: " + " ".join(f"{k} {v:.4f}" for k, v in pooled.items()))
    query_side = {
        k: round(statistics.mean(s["query_side_auc"][k] for s in sets.values()
                                 if s["query_side_auc"][k] is not None), 4)
        for k in ("whole_message", "best_message_sentence")
    }  # fmt: skip
    print("messages of two sentences or more, mean over sets: "
          + " ".join(f"{k} {v:.4f}" for k, v in query_side.items()))  # fmt: skip
    write_json(args.out, {"benchmark": "sentence-ranks", "split": args.split, "sets": sets,
                          "mean_over_sets": pooled,
                          "query_side_mean_over_sets": query_side})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
