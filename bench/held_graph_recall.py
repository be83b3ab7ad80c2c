"""How many of the exact nearest rows a held graph's candidates hold at a size the database
is not needed for: the held graphs (``store/postgres/held_graph.py``: the pool's, and the
learnings' of a user whose learnings are too many to rank in process) built, as a serving
process builds them (``VectorIndex.built_from`` over 4,096-row chunks of unit vectors, in
seq order), over ``bench/pg_scale.py --big-vectors latency-derived``'s corpus, and their
candidates (``PoolGraph.candidates``: 1.5 × k + 16) compared with exact search over the same
float32 vectors, for two question sets.

    python bench/held_graph_recall.py --rows 1000000 --save /tmp/h7-graphs-offline \\
        --out bench/results/held-graph-recall-1m-s25-h7.json

``--save`` keeps each graph's dump (``VectorIndex.write_to``). With ``--url`` and
``--graph-dir`` the graphs are not built: they are the files ``bench/pg_held_build.py``
wrote from that database (the corpus loaded by ``bench/pg_scale.py`` with the same
arguments), checked against it as a serving process checks them (``held_graph.restored``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common
import numpy as np
from pg_scale import derived_vectors

from engrain.embed.minilm import MiniLMEmbedder
from engrain.store.ann import VectorIndex
from engrain.store.postgres import held_graph
from engrain.store.postgres.graph_file import GraphFiles
from engrain.store.postgres.held_graph import CHUNK_ROWS, PoolGraph, unit_rows
from engrain.store.postgres.schema import INDEXED_DIM, LEARNING_KINDS


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def corpus(rows: int, derive_from: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The corpus's unit vectors in seq order, and which rows are typed learnings."""
    notes = common.make_notes(rows, seed=seed)
    embedder = MiniLMEmbedder()
    real, _, cached = common.embed_corpus(
        embedder,
        [n.text for n in notes[:derive_from]],
        cache_dir=Path(tempfile.gettempdir()) / "engrain-bench",
    )
    assert cached, "the real vectors are not cached: bench/pg_scale.py embeds them first"
    vectors = derived_vectors(np.asarray(real, dtype=np.float32), rows, seed + 4)
    learning = np.fromiter(
        (common.CATEGORY_KIND[n.category].value in LEARNING_KINDS for n in notes), bool, rows
    )
    return unit_rows(vectors), learning


def built(vectors: np.ndarray, keys: np.ndarray) -> tuple[VectorIndex, dict[str, float]]:
    wall, cpu = time.perf_counter(), _cpu()
    chunks = (
        (keys[at : at + CHUNK_ROWS], vectors[at : at + CHUNK_ROWS])
        for at in range(0, len(keys), CHUNK_ROWS)
    )
    index = VectorIndex.built_from(INDEXED_DIM, chunks)
    return index, {"wall_s": time.perf_counter() - wall, "cpu_s": _cpu() - cpu}


def kept(url: str, directory: Path, user: str, scope: str) -> PoolGraph:
    """The graph ``bench/pg_held_build.py`` kept for ``user`` in ``directory``, checked
    against the database at ``url``."""
    import psycopg

    which = held_graph.LEARNINGS if scope == "learnings" else held_graph.POOL
    with psycopg.connect(url, autocommit=True) as conn:
        files = GraphFiles.of(conn, directory)
        found = None if files is None else files.read(which.file_key(user))
        assert found is not None, f"no {scope} graph file of {user} in {directory}"
        graph = held_graph.restored(conn, user, found.revision, found.index, which)
    assert graph is not None, f"the {scope} graph file does not hold the database's rows"
    return graph


def recall(
    graph: PoolGraph, vectors: np.ndarray, keys: np.ndarray, queries: np.ndarray, k: int
) -> dict[str, Any]:
    """R@k of the graph's candidates against exact search, and the walk's CPU a search."""
    found, cpu = [], []
    for query in queries:
        exact = keys[np.argsort(-(vectors @ query), kind="stable")[:k]]
        start = _cpu()
        proposed = graph.candidates(query, k)
        cpu.append(_cpu() - start)
        found.append(len(set(exact.tolist()) & set(proposed.tolist())) / k)
    return {
        "k": k,
        "recall": float(np.mean(found)),
        "worst": float(np.min(found)),
        "walk_cpu_ms_mean": 1000 * float(np.mean(cpu)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--derive-from", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--question-seeds", default="8,99", help="common.make_queries seeds")
    parser.add_argument("--scopes", default="learnings,pool")
    parser.add_argument("--save", type=Path, help="a directory for the graphs' dumps")
    parser.add_argument("--url", help="the corpus's database (with --graph-dir)")
    parser.add_argument("--graph-dir", type=Path, help="read the graphs kept there")
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    vectors, learning = corpus(args.rows, args.derive_from, args.seed)
    seqs = np.arange(1, args.rows + 1, dtype=np.uint64)  # COPY's order, a fresh table
    embedder = MiniLMEmbedder()
    question_sets = {
        seed: unit_rows(
            np.asarray(embedder.embed(common.make_queries(args.queries, seed=int(seed))), "f4")
        )
        for seed in args.question_seeds.split(",")
    }
    result: dict[str, Any] = {
        "rows": args.rows, "learnings": int(learning.sum()), "load": os.getloadavg()[0],
        "machine": common.machine_info(), "graphs": {},
    }  # fmt: skip
    for scope in args.scopes.split(","):
        mask = learning if scope == "learnings" else np.ones(args.rows, bool)
        rows, keys = vectors[mask], seqs[mask]
        print(f"building the {scope} graph over {len(keys):,} rows", file=sys.stderr)
        if args.graph_dir is not None and args.url is not None:
            graph, cost = kept(args.url, args.graph_dir, args.user, scope), {}
            index = graph.index
            assert len(index) == len(keys), (len(index), len(keys))
        else:
            index, cost = built(rows, keys)
            graph = PoolGraph(0, index, index.nbytes)
        k = 100 if scope == "learnings" else 50
        entry: dict[str, Any] = {"rows": len(keys), "build": cost, "nbytes": index.nbytes}
        entry["recall"] = {
            seed: recall(graph, rows, keys, queries, k) for seed, queries in question_sets.items()
        }
        if args.save is not None:
            args.save.mkdir(parents=True, exist_ok=True)
            with (args.save / f"{scope}.usearch").open("wb") as out:
                entry["saved"] = index.write_to(out)
        result["graphs"][scope] = entry
        print(f"  {json.dumps(entry)}", file=sys.stderr)
        del index, graph, rows
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
