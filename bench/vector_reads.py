"""What a large user's ``context()`` reads by rowid to score candidates, what that costs,
and what scoring them from the usearch index's own int8 vectors would change (issue 18).

    python bench/vector_reads.py --db /tmp/h2-stores/latency-100000-s7-vectors-….db \
        --workdir /tmp/h2-x --out bench/results/vector-reads-100k-s16-h2.json

Each mode runs in its own process on its own copy of the file (SQLite's backup, so a shared
store is never written), with ``bench/latency.py``'s warm-up and timed queries:

- ``exact``: the store as it is. Per call: the rows read by rowid for their vectors
  (``SQLiteStore._row_vectors``' reader: rows, and its thread CPU), the memories built, the
  call's thread CPU and its block's digest. Per search through the index
  (``vector_search.scored_vectors``): ``k``, the rows scored, their exact scores and their
  scores from the index's int8 vectors, widened two ways: as stored (then normalised, as
  ``VectorIndex.vectors`` does) and at the middle of their quantization step (usearch
  truncates toward zero, so a stored ``c`` stands for ``127·u`` in ``[c, c + 1)`` away from
  zero; the middle is unbiased).
- ``int8``: the same calls with every indexed search's candidates ranked and scored by the
  middle-of-step int8 scores (``vector_search.top_rows`` given them instead of the exact
  ones); the memories are still built with their float32 vectors. What a block would be
  if candidates were scored in memory: the blocks are compared with ``exact``'s.
- ``int8-rank``: the k best by those int8 scores, returned with their exact scores (what
  changes with the candidates kept alone).
- ``float16``: scored with float16 copies of the vectors (a float16 index's, +38 MB at
  100,000 against int8).
- ``int8-tail``: scored by int8 but the ``--exact-head`` best by int8 exactly: whether
  reading only a search's head would keep the blocks.

Then, on a third copy, SQLite's cost per row read by rowid (the query the reader runs, 220
rows): random rowids with a cold page cache (a call's case), the same rows again (warm),
contiguous rowids, and with ``PRAGMA mmap_size``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
import numpy as np
from latency import USER

from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder
from engrain.store import built, sqlite, vector_search
from engrain.store import cache as store_cache

#: How candidates are scored: as the store does; by int8 (every score the middle-of-step
#: int8 one); ranked by int8 but returned with exact scores; by float16 vectors; by int8
#: but the ``--exact-head`` best by int8 exactly (what reading only those would give).
MODES = ("exact", "int8", "int8-rank", "float16", "int8-tail")


def _copy(db: Path, target: Path) -> Path:
    target.unlink(missing_ok=True)
    with sqlite3.connect(db) as source, sqlite3.connect(target) as copy:
        source.backup(copy, pages=65_536)
    return target


def _widened(codes: np.ndarray, middle: bool) -> np.ndarray:
    """Unit vectors from int8 codes: as stored, or at the middle of each code's step."""
    wide = codes.astype(np.float32)
    if middle:
        wide += 0.5 * np.sign(wide)
    norms = np.linalg.norm(wide, axis=1, keepdims=True)
    out: np.ndarray = np.divide(wide, norms, out=np.zeros_like(wide), where=norms > 0)
    return out


def _int8_vectors(arrays: Any, rows: np.ndarray, middle: bool) -> np.ndarray:
    held = arrays.held
    index = held.index
    with index._lock:
        stored = index._index.get(held.keys[rows], dtype="i8")
    codes = np.stack(stored) if isinstance(stored, tuple) else np.asarray(stored)
    return _widened(codes, middle)


def serve(args: argparse.Namespace) -> dict[str, Any]:
    """One mode's process: the calls and what they read."""
    copy = _copy(args.db, args.workdir / f"vector-reads-{args.mode}.db")
    pool = common.make_queries(args.warmup + 2 * args.queries, seed=args.seed + 1)
    warmup = pool[: args.warmup]
    queries = pool[args.warmup + args.queries : args.warmup + 2 * args.queries]  # unseen
    call: dict[str, Any] = {}
    searches: list[dict[str, Any]] = []

    reader_of = sqlite.SQLiteStore._row_vectors

    def counted_reader(store: Any, user_id: str) -> Any:
        read = reader_of(store, user_id)

        def timed(rowids: Any, ids: Any, dim: int, *, texts: bool = False) -> Any:
            start = time.thread_time()
            out = read(rowids, ids, dim, texts=texts)
            call["read_ms"] = call.get("read_ms", 0.0) + (time.thread_time() - start) * 1e3
            call["rows_read"] = call.get("rows_read", 0) + len(rowids)
            return out

        return timed

    sqlite.SQLiteStore._row_vectors = counted_reader  # type: ignore[method-assign]
    build = built.memories

    def counted_build(*a: Any, **kw: Any) -> Any:
        out = build(*a, **kw)
        call["built"] = call.get("built", 0) + len(out)
        return out

    built.memories = counted_build
    scored = vector_search.scored_vectors

    def compared(arrays: Any, rows: np.ndarray) -> Any:
        out = scored(arrays, rows)
        query = call.get("query")
        if arrays.held is not None and query is not None and len(rows):
            searches.append({
                "rows": len(rows),
                "exact": out @ query,
                "stored": _int8_vectors(arrays, rows, middle=False) @ query,
                "middle": _int8_vectors(arrays, rows, middle=True) @ query,
            })  # fmt: skip
        return out

    vector_search.scored_vectors = compared
    searched = store_cache.approximate

    def listed(*a: Any, **kw: Any) -> Any:
        out = searched(*a, **kw)
        call.setdefault("found", []).extend([m.id for m, _ in found] for found in out)
        return out

    store_cache.approximate = listed  # type: ignore[assignment]
    if args.mode != "exact":
        top = vector_search.top_rows

        def other_top(arrays: Any, rows: Any, scores: Any, k: int, vectors: Any = None) -> Any:
            query = call.get("query")
            if arrays.held is None or query is None or not len(rows):
                return top(arrays, rows, scores, k, vectors)
            if args.mode == "float16":
                return top(arrays, rows, vectors.astype(np.float16).astype(np.float32) @ query,
                           k, vectors)  # fmt: skip
            approximate = _int8_vectors(arrays, rows, middle=True) @ query
            if args.mode == "int8":
                return top(arrays, rows, approximate, k, vectors)
            if args.mode == "int8-tail":
                head = np.argsort(-approximate, kind="stable")[: args.exact_head]
                approximate[head] = scores[head]
                return top(arrays, rows, approximate, k, vectors)
            # int8-rank: the k best by int8, returned with their exact scores
            best = np.argsort(-approximate, kind="stable")[:k]
            return top(arrays, rows[best], scores[best], k, vectors[best])

        vector_search.top_rows = other_top
    embedder = MiniLMEmbedder()
    embed = embedder.embed

    def seen(texts: Any) -> Any:
        out = embed(texts)
        if len(texts) == 1:
            call["query"] = np.asarray(out[0], dtype=np.float32)
        return out

    embedder.embed = seen  # type: ignore[method-assign]
    engine = Engine(settings=Settings(url=f"sqlite:///{copy}", data_dir=args.workdir),
                    embedder=embedder)  # fmt: skip
    calls = []
    with engine:
        engine.context(warmup[0], USER, now=common.NOW)
        engine.store.wait_for_index(USER)  # type: ignore[attr-defined]
        for query in warmup[1:]:
            engine.context(query, USER, now=common.NOW)
        searches.clear()
        load = os.getloadavg()[0]
        for query in queries:
            call.clear()
            start = time.thread_time()
            context = engine.context(query, USER, now=common.NOW)
            cpu = (time.thread_time() - start) * 1e3
            ids = "\0".join(m.content for m in context.memories)
            shown = {m.id for m in context.memories}
            # where each shown memory stood in each indexed search's ranking (pool, learnings)
            ranks = [[rank for rank, memory_id in enumerate(found) if memory_id in shown]
                     for found in call.get("found", [])]  # fmt: skip
            digest = hashlib.sha256(f"{context.text}\0{context.tokens}\0{ids}".encode())
            calls.append({
                "cpu_ms": cpu, "read_ms": call.get("read_ms", 0.0),
                "rows_read": call.get("rows_read", 0), "built": call.get("built", 0),
                "shown": len(context.memories), "block": digest.hexdigest()[:16],
                "shown_ranks": ranks,
            })  # fmt: skip
    copy.unlink()
    errors = {
        way: np.abs(np.concatenate([s[way] - s["exact"] for s in searches])).tolist()
        for way in ("stored", "middle")
    }
    overlap = []
    for s in searches:
        k = min(args.k, len(s["exact"]))
        best = set(np.argsort(-s["exact"], kind="stable")[:k].tolist())
        by_int8 = set(np.argsort(-s["middle"], kind="stable")[:k].tolist())
        overlap.append(len(best & by_int8) / max(k, 1))
    return {"load_1m": [load, os.getloadavg()[0]], "calls": calls, "errors": errors,
            "overlap_at_k": overlap}  # fmt: skip


def sql_costs(db: Path, workdir: Path, rounds: int = 300, count: int = 220) -> dict[str, Any]:
    """SQLite's thread CPU to read ``count`` rows by rowid as the reader does, ms."""
    copy = _copy(db, workdir / "vector-reads-sql.db")
    con = sqlite3.connect(copy)
    user = con.execute("SELECT user_id FROM memories LIMIT 1").fetchone()[0]
    rowids = np.array([r[0] for r in con.execute(
        "SELECT rowid FROM memories WHERE user_id = ? ORDER BY rowid", (user,))])  # fmt: skip
    rng = np.random.default_rng(5)
    sql = (f"SELECT rowid, id, embedding, content FROM memories WHERE +user_id = ? AND rowid "
           f"IN ({', '.join('?' for _ in range(count))})")  # fmt: skip

    def timed(pick: list[int]) -> float:
        start = time.thread_time()
        con.execute(sql, (user, *pick)).fetchall()
        return (time.thread_time() - start) * 1e3

    out: dict[str, list[float]] = {"random": [], "same rows again": [], "contiguous": [],
                                   "random, mmap 1 GB": []}  # fmt: skip
    for _ in range(rounds):
        pick = rng.choice(rowids, count, replace=False).tolist()
        out["random"].append(timed(pick))
        out["same rows again"].append(timed(pick))
        start = int(rng.integers(0, len(rowids) - count))
        out["contiguous"].append(timed(rowids[start : start + count].tolist()))
    con.execute("PRAGMA mmap_size = 1000000000")
    for _ in range(rounds):
        out["random, mmap 1 GB"].append(timed(rng.choice(rowids, count, replace=False).tolist()))
    con.close()
    copy.unlink()
    return {name: common.summarize(values) for name, values in out.items()}


def _summary(mode: dict[str, Any]) -> dict[str, Any]:
    calls = mode["calls"]
    out: dict[str, Any] = {"load_1m": mode["load_1m"]}
    for name in ("cpu_ms", "read_ms", "rows_read", "built", "shown"):
        values = [c[name] for c in calls]
        out[name] = {"p50": float(np.percentile(values, 50)), "mean": float(np.mean(values)),
                     "p95": float(np.percentile(values, 95))}  # fmt: skip
    for way, errors in mode["errors"].items():
        e = np.asarray(errors)
        out[f"int8_error_{way}"] = {
            "pairs": int(e.size), "median": float(np.median(e)),
            "p99": float(np.percentile(e, 99)), "max": float(e.max()),
        }  # fmt: skip
    for search in (0, 1):
        ranks = [rank for c in calls if len(c["shown_ranks"]) > search
                 for rank in c["shown_ranks"][search]]  # fmt: skip
        if ranks:
            r = np.asarray(ranks)
            out[f"shown_ranks_search_{search}"] = {
                "shown": int(r.size), "p50": float(np.median(r)),
                "p95": float(np.percentile(r, 95)), "max": int(r.max()),
                "share_at_50_or_more": float((r >= 50).mean()),
            }  # fmt: skip
    overlap = np.asarray(mode["overlap_at_k"])
    out["top_k_by_int8_vs_exact"] = {"searches": int(overlap.size), "mean": float(overlap.mean()),
                                     "min": float(overlap.min())}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="a latency.py SQLite file")
    parser.add_argument("--workdir", type=Path, required=True, help="where the copies are made")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--k", type=int, default=50, help="top k compared, int8 against exact")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--exact-head", type=int, default=30,
                        help="int8-tail: the best this many by int8 scored exactly")  # fmt: skip
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated modes to run (exact always)")  # fmt: skip
    parser.add_argument("--no-sql", action="store_true",
                        help="skip the SQL part (it reads a third copy of the file)")  # fmt: skip
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.mode is not None:  # a measuring subprocess
        print(json.dumps(serve(args)))
        return 0
    wanted = ["exact", *(m for m in MODES[1:] if m in args.modes.split(","))]
    modes = {}
    for mode in wanted:
        done = subprocess.run(
            [sys.executable, __file__, *(argv or sys.argv[1:]), "--mode", mode],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        modes[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    exact = modes["exact"]["calls"]
    differ = {}
    for mode in wanted[1:]:
        pairs = zip(exact, modes[mode]["calls"], strict=True)
        differ[mode] = f"{sum(a['block'] != b['block'] for a, b in pairs)} of {len(exact)}"
    report = {
        "db": str(args.db),
        "queries": args.queries,
        **{mode: _summary(modes[mode]) for mode in wanted},
        "exact_head": args.exact_head,
        "blocks_differ_from_exact": differ,
        "sql_220_rows_thread_cpu_ms": None if args.no_sql else sql_costs(args.db, args.workdir),
        "machine": common.machine_info(),
    }
    print(json.dumps({k: v for k, v in report.items() if k != "machine"}, indent=1))
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
