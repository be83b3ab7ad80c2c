"""Why a block differs between a large PostgreSQL user's held graphs and the database's walks:
each search of the gate compared with exact search (issue 18).

    python bench/pg_block_diff.py --url 'postgresql://postgres:@/big?host=/tmp/h1-pg1m' \\
        --graph-dir /tmp/h1-graphs --calls 22 --out bench/results/pg-block-diff-1m-s26-h1.json

For each call (an index into ``bench/pg_scale.py``'s questions, ``common.make_queries(100,
seed=8)``, its ``big-user``) the block is previewed through a store holding both graphs (the
pool's and the learnings') and through one walking the database's graphs; where the two
differ, every search the gate made (``search_many``'s ``(k, filter)``) is run through the
held graphs, the walks and exact search, and each reports the rows it missed of the exact
``k`` with their scores and the exact ``k``-th score (a tie or a near row shows there), and,
for each row the held graph missed, whether the graph holds it and at how many candidates
its walk finds it. Nothing is written (``preview``).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

import common
import numpy as np
import psycopg

from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder
from engrain.recall.gate import LEARNING_KINDS
from engrain.store.base import MemoryFilter
from engrain.store.postgres import PostgresStore

USER = "big-user"
#: Candidates at which a missed row is looked for in the held graph's walk.
WIDER = (500, 1000, 3000)


def _ready(store: PostgresStore) -> None:
    """Both held graphs loaded (the first searches start them: ``pg_side.py``'s settle)."""
    one = np.ones(384, dtype=np.float32)
    typed = MemoryFilter(kinds=LEARNING_KINDS)
    store.search(USER, one, 1, MemoryFilter())
    store.wait_for_projection(USER, 1800.0)
    store.search(USER, one, 1, typed)
    store.wait_for_learnings(USER, 1800.0)
    store.search(USER, one, 1, typed)
    store.wait_for_learnings_graph(USER, 1800.0)


def _missed(held: PostgresStore, url: str, flt: MemoryFilter, ids: list[str], query: Any) -> Any:
    """Whether the held graph of ``flt``'s search holds each of ``ids`` and at which of
    :data:`WIDER` candidates its walk finds it."""
    with psycopg.connect(url) as conn:
        seqs = dict(
            conn.execute(
                "SELECT id, seq FROM memories WHERE user_id = %s AND id = ANY(%s)", (USER, ids)
            ).fetchall()
        )
    holder = held._learnings_graph if flt.kinds else held._projected
    graph = None if holder is None else holder.held(USER)
    if graph is None:
        return {}
    unit = query / np.linalg.norm(query)
    out = {}
    for memory_id, seq in seqs.items():
        key = np.array([seq], dtype=np.uint64)
        held_it = bool(graph.index.contains(key)[0])
        found = [n for n in WIDER if held_it and seq in set(graph.index.search(unit, n).tolist())]
        out[memory_id] = {"in_graph": held_it, "found_at": found[0] if found else None}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--graph-dir", required=True)
    parser.add_argument("--calls", default="22", help="comma-separated call indices")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    queries = common.make_queries(100, seed=8)
    embedder = MiniLMEmbedder(spinning=False)
    held = PostgresStore(args.url, pool_index="graph", graph_dir=args.graph_dir)
    walk = PostgresStore(args.url, pool_index="projection", projected_bytes=0)
    exact = PostgresStore(args.url, exact_search_below=10**9, learnings_bytes=0, projected_bytes=0)
    _ready(held)
    asked: list[tuple[Any, list[Any]]] = []
    many = held.search_many

    def recorded(user: str, vector: Any, searches: Any) -> Any:
        asked.append((np.asarray(vector, dtype=np.float32).copy(), list(searches)))
        return many(user, vector, searches)

    held.search_many = recorded  # type: ignore[method-assign]
    settings = Settings(url=args.url, data_dir=Path("/tmp/pg-block-diff"))
    engines = {
        "held": Engine(settings=settings, store=held, embedder=embedder),
        "walk": Engine(settings=settings, store=walk, embedder=embedder),
    }
    report: dict[str, Any] = {"calls": {}}
    for call in (int(c) for c in args.calls.split(",")):
        asked.clear()
        blocks = {n: e.preview(queries[call], USER, now=common.NOW) for n, e in engines.items()}
        digests = {n: hashlib.sha256(b.text.encode()).hexdigest()[:16] for n, b in blocks.items()}
        row: dict[str, Any] = {"question": queries[call], "blocks": digests, "searches": []}
        print(f"call {call}: {queries[call]!r} {digests}")
        if digests["held"] != digests["walk"]:
            vector, searches = asked[0]
            for k, flt in searches:
                found = {
                    "held": held.search(USER, vector, k, flt),
                    "walk": walk.search(USER, vector, k, flt),
                    "exact": exact.search(USER, vector, k, flt),
                }
                truth = [m.id for m, _ in found["exact"]]
                search: dict[str, Any] = {
                    "k": k, "learnings": bool(flt.kinds),
                    "exact_kth_score": round(found["exact"][-1][1], 6),
                }  # fmt: skip
                for name in ("held", "walk"):
                    ids = {m.id for m, _ in found[name]}
                    missed = [(i, round(s, 6)) for i, (m, s) in enumerate(found["exact"])
                              if m.id not in ids]  # fmt: skip
                    search[name] = {
                        "recall": round(1 - len(missed) / max(1, len(truth)), 3),
                        "missed": [
                            {"id": truth[i], "exact_rank": i + 1, "score": s} for i, s in missed
                        ],
                        "kth_score": round(found[name][-1][1], 6),
                    }
                missed_ids = [m["id"] for m in search["held"]["missed"]]
                search["held_graph"] = _missed(held, args.url, flt, missed_ids, vector)
                row["searches"].append(search)
                print(f"  k={k} {'learnings' if flt.kinds else 'pool'}: R@k held "
                      f"{search['held']['recall']}, walk {search['walk']['recall']}; "
                      f"held missed {search['held']['missed']} {search['held_graph']}")  # fmt: skip
        report["calls"][str(call)] = row
    for store in (held, walk, exact):
        store.close()
    if args.out:
        common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
