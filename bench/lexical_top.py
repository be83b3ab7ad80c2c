"""BM25's top k at a large user's size, side by side for several source trees.

    python bench/lexical_top.py --tree base=/tmp/base --tree new=. --size 1000000 \
        --out bench/results/lexical-top-1m.json

The corpus is ``bench/latency.py``'s (the same notes, seed and timed queries); its BM25
index is built once from its texts (no store, no vectors: ~15 s of CPU at a million) and
kept as :meth:`~engrain.store.lexical.LexicalIndex.to_arrays` in ``--cache-dir``. Each
round, each tree (alternating, fresh processes importing engrain from ``<tree>/src``)
loads that index and asks ``LexicalIndex.top`` for every timed query at the gate's two
pool depths (50 and 125) without a mask and with one keeping 70 % of the documents (drawn
from the seed), after the warm-up queries: the calling thread's CPU per call (median,
mean, p95 over the calls; the report gives each number's median over rounds) and a digest
of every answer (documents and scores), which must be the same for every tree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DEPTHS = (50, 125)
MASK_SHARE = 0.7


def _build(spec: dict[str, Any]) -> dict[str, Any]:
    """Make the corpus's texts and save their BM25 index's arrays (in a child process)."""
    import common

    from engrain.store.lexical import LexicalIndex

    start = time.process_time()
    texts = [note.text for note in common.make_notes(spec["size"], seed=spec["seed"])]
    index = LexicalIndex(texts)
    np.savez(spec["cache"], **index.to_arrays())
    return {"build_cpu_s": round(time.process_time() - start, 1)}


def _serve(spec: dict[str, Any]) -> dict[str, Any]:
    """Time ``top`` for every query, depth and mask in this (fresh) process."""
    import engrain
    from engrain.store.lexical import LexicalIndex

    with np.load(spec["cache"]) as saved:
        index = LexicalIndex.from_arrays(dict(saved))
    mask = np.random.default_rng(spec["seed"]).random(index.size) < MASK_SHARE
    for query in spec["warmup"]:
        index.top(query, DEPTHS[-1])
    digest = hashlib.sha256()
    cpu: list[float] = []
    for query in spec["queries"]:
        for kept in (None, mask):
            for k in DEPTHS:
                start = time.thread_time()
                rows, scores = index.top(query, k, kept)
                cpu.append((time.thread_time() - start) * 1000.0)
                digest.update(rows.astype(np.int64).tobytes() + scores.tobytes())
    return {
        "tree": str(Path(engrain.__file__).resolve().parent),
        "calls": len(cpu),
        "cpu_thread_p50_ms": round(float(np.percentile(cpu, 50)), 3),
        "cpu_thread_mean_ms": round(float(np.mean(cpu)), 3),
        "cpu_thread_p95_ms": round(float(np.percentile(cpu, 95)), 3),
        "answers": digest.hexdigest(),
        "load_1m": os.getloadavg()[0],
    }


def _run(tree: Path, mode: str, spec: dict[str, Any]) -> dict[str, Any]:
    """``mode`` in a fresh interpreter on ``tree``'s sources (and this directory's)."""
    import common

    here = Path(__file__).resolve().parent
    return common.run_child(__file__, mode, spec, [tree / "src", here], same_hashes=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tree",
        action="append",
        metavar="LABEL=PATH",
        default=[],
        help="a source tree to measure (repeatable; the first is the base)",
    )
    parser.add_argument("--size", type=int, default=1_000_000, help="documents of the index")
    parser.add_argument("--queries", type=int, default=200, help="timed queries (latency.py's)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where the index's arrays are kept (default $TMPDIR/engrain-bench)",
    )
    parser.add_argument("--out", type=Path, help="write the report here as JSON")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)  # fmt: skip
    for mode, path in (("build", args.build), ("serve", args.serve)):
        if path is not None:  # a child process
            spec = json.loads(path.read_text(encoding="utf-8"))
            print(json.dumps(_build(spec) if mode == "build" else _serve(spec)))
            return 0
    trees = dict(t.split("=", 1) for t in args.tree) or {"this": str(Path(__file__).parents[1])}
    cache_dir = args.cache_dir or Path(tempfile.gettempdir()) / "engrain-bench"
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache = cache_dir / f"bm25-{args.size}-s{args.seed}.npz"
    spec: dict[str, Any] = {"size": args.size, "seed": args.seed, "cache": str(cache)}
    first = Path(next(iter(trees.values())))
    if not cache.is_file():
        print(f"building the BM25 index of {args.size:,} notes", file=sys.stderr)
        print(f"  {_run(first, 'build', spec)}", file=sys.stderr)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import common

    warmup, queries, _ = common.latency_pool(args.warmup, args.queries, args.seed)
    spec |= {"warmup": warmup, "queries": queries}
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    for round_ in range(args.rounds):
        for label, tree in trees.items():
            runs[label].append(_run(Path(tree), "serve", spec))
            print(f"round {round_ + 1} {label}: {runs[label][-1]}", file=sys.stderr)
    keys = ("cpu_thread_p50_ms", "cpu_thread_mean_ms", "cpu_thread_p95_ms")
    report: dict[str, Any] = {
        "size": args.size, "seed": args.seed, "queries": args.queries, "depths": list(DEPTHS),
        "mask_share": MASK_SHARE, "rounds": args.rounds,
        "trees": {label: {"path": tree,
                          **{k: float(np.median([r[k] for r in runs[label]])) for k in keys},
                          "runs": runs[label]} for label, tree in trees.items()},
        "same_answers": len({r["answers"] for rs in runs.values() for r in rs}) == 1,
    }  # fmt: skip
    base = next(iter(trees))
    for label in trees:
        row = report["trees"][label]
        ratios = {k: round(row[k] / report["trees"][base][k], 3) for k in keys}
        row["ratio_to_" + base] = ratios
        print(f"{label:>8}: " + "  ".join(f"{k[11:]} {row[k]:.3f}" for k in keys)
              + f"  ratio {ratios}")  # fmt: skip
    print(f"same answers in every process: {report['same_answers']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
