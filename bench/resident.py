"""Resident memory of a process serving one large user, two trees side by side (issue 18).

    python bench/resident.py --db /tmp/engrain-bench/stores/latency-100000-….db \
        --baseline-src /tmp/h2-base/src --rounds 3 --out bench/results/resident-100k.json

Each round runs two fresh processes one after the other on copies of the same file (the
baseline tree first, then this one; ``--baseline-src`` and ``--new-src`` are put first on
``PYTHONPATH``; ``--warmup-rounds`` let each tree build and save its indexes in its copy):
each loads the model, opens an ``Engine`` on the copy, runs the first ``context()``, waits
for the approximate index, runs ``--queries`` more calls, and reports

- ``rss_model_mb``: ``VmRSS`` after loading the model (before the store is opened);
  ``rss_first_call_mb`` after the first ``context()`` (the rows' vectors and the image's
  bytes still held) and ``rss_index_ready_mb`` once the approximate index is attached
  (the matrix dropped): what the calls add is ``rss_mb`` minus that;
- ``rss_mb``: ``VmRSS`` after the calls; ``rss_store_mb`` the difference; ``rssanon_mb``,
  ``rssfile_mb`` and ``vmhwm_mb``: its anonymous and file-backed parts, and the peak;
  ``rss_trimmed_mb`` right after asking glibc to hand back what it keeps freed
  (``malloc_trim(0)``): what the process holds live, without the allocator's retention,
  which varies by tens of MB from one run to the next; ``trim_ms`` that trim's thread CPU;
- ``rss_calls_median_mb`` / ``rss_calls_max_mb``: ``VmRSS`` after each of the calls, their
  median and largest (what the process holds while serving, not at one moment);
- ``sqlite_mb``: what SQLite's allocator holds (``sqlite3_memory_used``: page caches,
  statements); ``malloc_free_mb``: what glibc's arenas hold freed (``mallinfo2``'s
  ``fordblks``, before the trim);
- ``traced_mb`` / ``traced_peak_mb`` (with ``--traced`` only): what ``tracemalloc``
  (started after the model) counts now and at most: Python and NumPy allocations, not
  usearch's own (C++) memory, and ``traced_top``: the largest allocation sites then
  (file:line, MB, blocks). Off by default: tracemalloc's own bookkeeping (a trace per
  live block) is resident too, ~65 MB at 100,000 memories, and would count as the store's;
- ``matrix_mb``: the bytes of the working set's float32 matrix, if it keeps one;
- with ``--refresh-seconds``: the image of a user whose rows the calls patched (a
  memory's tenth use promotes it) is saved again from the working set that often, on a
  saving thread, while the calls run (the store's default is every 60 s: a run shorter
  than that saves it only at close, after the RSS is read);
- ``cpu_ms_per_call`` / ``wall_ms_per_call``: CPU (every thread's, query embedding
  included) and wall time per ``context()`` call after the index is ready;
  ``thread_cpu_ms_p50`` / ``thread_cpu_ms_p95``: the calling thread's CPU a call;
- ``--server-order``: the store opened before the model is loaded (by the first call), as
  ``engrain serve`` orders it; ``rss_model_mb`` is then the imports alone;
- ``recall_at_50``: the share of exact search's top 50 that the store's search returns
  (the same queries, no filter and the unmuted current one), measured after the RSS.

Numbers: the median over the rounds per tree; each round kept.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import common

USER = "bench-user"


def serve(spec: dict[str, Any]) -> dict[str, Any]:
    """One measuring process (see the module docstring)."""
    from latency import recall_at, rss_mb

    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder

    if spec.get("refresh_seconds") is not None:  # how often a patched image is saved again
        import engrain.store.sqlite as sqlite_store

        sqlite_store.IMAGE_REFRESH_SECONDS = float(spec["refresh_seconds"])
    embedder = MiniLMEmbedder()
    if not spec.get("server_order"):  # the model loaded before the store opens
        embedder.embed(["warm the model up"])
    rss_model = rss_mb()
    if spec.get("traced"):
        tracemalloc.start()
    queries = common.make_queries(spec["queries"] + 1, seed=spec["seed"])
    start = time.perf_counter()
    cpu = time.process_time()
    engine = Engine(settings=Settings(url=f"sqlite:///{spec['db']}",
                                      data_dir=Path(spec["db"]).parent),
                    embedder=embedder)  # fmt: skip
    with engine:
        engine.context(queries[0], USER, now=common.NOW)
        cold = {"wall_ms": (time.perf_counter() - start) * 1000.0,
                "cpu_s": time.process_time() - cpu}  # fmt: skip
        rss_first = rss_mb()
        indexed = bool(engine.store.wait_for_index(USER))  # type: ignore[attr-defined]
        rss_ready = rss_mb()
        cpu, wall = time.process_time(), time.perf_counter()
        during, thread_ms = [], []
        for query in queries[1:]:
            own = time.thread_time()
            engine.context(query, USER, now=common.NOW)
            thread_ms.append((time.thread_time() - own) * 1000.0)
            during.append(rss_mb())
        calls = max(1, len(queries) - 1)
        per_call = {"cpu_ms_per_call": (time.process_time() - cpu) * 1000.0 / calls,
                    "wall_ms_per_call": (time.perf_counter() - wall) * 1000.0 / calls,
                    "thread_cpu_ms_p50": _quantile(thread_ms, 0.5),
                    "thread_cpu_ms_p95": _quantile(thread_ms, 0.95)}  # fmt: skip
        rss = rss_mb()
        status = {**_status(), **_allocators()}
        trim_cpu = time.thread_time()
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # what glibc keeps freed, handed back
        trim_cpu = time.thread_time() - trim_cpu
        rss_trimmed = rss_mb()
        traced, peak = tracemalloc.get_traced_memory() if spec.get("traced") else (0, 0)
        top = _top_sites(tracemalloc.take_snapshot()) if spec.get("traced") else []
        tracemalloc.stop()
        snapshot = engine.store._cache(USER).snapshot  # type: ignore[attr-defined]
        arrays = snapshot.arrays
        matrix = getattr(arrays, "matrix", None)
        parts = _parts(snapshot)
        recall = recall_at(engine, queries[1:], 50) if spec["recall"] and indexed else None
    return {
        "rss_model_mb": rss_model,
        "rss_first_call_mb": rss_first,
        "rss_index_ready_mb": rss_ready,
        "rss_mb": rss,
        "rss_store_mb": round(rss - rss_model, 1),
        "rss_trimmed_mb": rss_trimmed,
        "trim_ms": round(trim_cpu * 1000.0, 2),
        "rss_calls_median_mb": statistics.median(during) if during else rss,
        "rss_calls_max_mb": max(during, default=rss),
        **status,
        **(
            {
                "traced_mb": round(traced / 2**20, 1),
                "traced_peak_mb": round(peak / 2**20, 1),
                "traced_top": top,
            }
            if spec.get("traced")
            else {}
        ),
        "matrix_mb": 0.0 if matrix is None else round(matrix.nbytes / 2**20, 1),
        **parts,
        "indexed": indexed,
        **{name: round(value, 2) for name, value in per_call.items()},
        "cold_start_ms": round(cold["wall_ms"], 1),
        "cold_start_cpu_s": round(cold["cpu_s"], 2),
        "recall_at_50": recall,
    }


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank; 0.0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _status() -> dict[str, float]:
    """Anonymous and file-backed resident memory (``RssAnon``, ``RssFile``) and the peak
    (``VmHWM``), in MB."""
    out: dict[str, float] = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            name = line.split(":", 1)[0]
            if name in ("RssAnon", "RssFile", "VmHWM"):
                out[f"{name.lower()}_mb"] = round(int(line.split()[1]) / 1024.0, 1)
    return out


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]  # fmt: skip


def _allocators() -> dict[str, float]:
    """What SQLite's allocator holds and what glibc keeps freed, in MB (``NaN`` where the
    library or the call is missing)."""
    out = {"sqlite_mb": float("nan"), "malloc_free_mb": float("nan")}
    try:
        sqlite = ctypes.CDLL("libsqlite3.so.0")
        sqlite.sqlite3_memory_used.restype = ctypes.c_int64
        out["sqlite_mb"] = round(sqlite.sqlite3_memory_used() / 2**20, 1)
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        out["malloc_free_mb"] = round(libc.mallinfo2().fordblks / 2**20, 1)
    except (OSError, AttributeError):
        pass
    return out


def _top_sites(snapshot: tracemalloc.Snapshot, count: int = 15) -> list[list[Any]]:
    """The ``count`` largest allocation sites of ``snapshot``: file:line, MB, blocks."""
    return [
        [str(stat.traceback[0]), round(stat.size / 2**20, 2), stat.count]
        for stat in snapshot.statistics("lineno")[:count]
    ]


def _parts(snapshot: Any) -> dict[str, Any]:
    """Sizes of a working set's larger parts (MB; what the tree has): the approximate
    index as usearch counts it (reserved capacity included) and its vectors' type, the
    BM25 postings' arrays, the image's bytes, the ids' array, the filters' vector
    subsets, and the memories built and kept (a count)."""
    arrays = snapshot.arrays
    out: dict[str, Any] = {}
    index = getattr(getattr(snapshot.ann, "index", None), "_index", None)
    if index is not None:
        out["index_mb"] = round(index.memory_usage / 2**20, 1)
        out["index_dtype"] = str(index.dtype).rsplit(".", 1)[-1]
    postings = getattr(snapshot.lexical, "_postings", None)
    if postings is not None:
        held = sum(docs.nbytes + tfs.nbytes for docs, tfs in postings.values())
        out["bm25_postings_mb"] = round(held / 2**20, 1)
    base = getattr(arrays.rows, "base", None)
    blob = getattr(getattr(base, "content", None), "blob", None)
    if blob is not None:
        out["image_mb"] = round(len(blob) / 2**20, 1)
    ids = getattr(arrays, "ids", None)
    if ids is not None:  # an object array's pointers, or the ids' blob (store/ids.py)
        out["ids_mb"] = round(ids.nbytes / 2**20, 1)
    positions = getattr(arrays, "position", None)
    if positions is not None and hasattr(positions, "nbytes"):  # not a dict
        out["positions_mb"] = round(positions.nbytes / 2**20, 1)
    # a filter's copy: its vectors (if kept) and its coarse projection (store/coarse.py)
    subsets = [(s[1], s[2] if len(s) > 2 else None) for s in arrays.subsets.values()]
    out["subsets_mb"] = round(sum(0 if v is None else v.nbytes for v, _ in subsets) / 2**20, 1)
    out["projections_mb"] = round(
        sum(0 if p is None else p.coords.nbytes for _, p in subsets) / 2**20, 1
    )
    out["decoded"] = len(arrays.rows.decoded)
    return out


def _run(
    db: Path,
    workdir: Path,
    name: str,
    src: Path | None,
    queries: int,
    seed: int,
    traced: bool,
    extra_env: dict[str, str],
    refresh_seconds: float | None = None,
    server_order: bool = False,
) -> dict[str, Any]:
    """:func:`serve` in a fresh interpreter on a copy of ``db`` (importing engrain from
    ``src`` if given, with ``extra_env`` added to its environment)."""
    copy = workdir / f"{name}.db"
    if not copy.exists():  # each tree keeps its own copy (and the indexes it saves there)
        shutil.copyfile(db, copy)
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(":")
    env.update(extra_env)
    spec = {"db": str(copy), "queries": queries, "seed": seed, "recall": True, "traced": traced,
            "refresh_seconds": refresh_seconds, "server_order": server_order}  # fmt: skip
    done = subprocess.run(
        [sys.executable, __file__, "--serve", json.dumps(spec)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"measuring process failed ({done.returncode}):\n{done.stderr}")
    result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    return result


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and values:
            out[key] = round(statistics.median(values), 4)
    out["rounds"] = runs
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="a SQLite file holding the user (copied)")
    parser.add_argument("--baseline-src", type=Path, help="the other tree's src directory")
    parser.add_argument(
        "--new-src", type=Path, help="the new tree's src directory (default: the one installed)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warmup-rounds",
        type=int,
        default=0,
        help="rounds run first and not counted (each tree builds and saves "
        "its own indexes in its copy of the file)",
    )
    parser.add_argument("--queries", type=int, default=100, help="context() calls per process")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument(
        "--traced",
        action="store_true",
        help="run tracemalloc (its bookkeeping then counts in the RSS)",
    )
    parser.add_argument(
        "--new-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the new tree's processes only (repeatable), "
        "e.g. MALLOC_ARENA_MAX=2 against the baseline without it",
    )
    parser.add_argument(
        "--refresh-seconds",
        type=float,
        help="seconds between two saves of a patched image in the measured processes "
        "(the store's IMAGE_REFRESH_SECONDS, 60 by default: a run of calls shorter than "
        "that never refreshes the image, as a serving process does every minute)",
    )
    parser.add_argument(
        "--server-order",
        action="store_true",
        help="open the store before the model loads (the model loaded by the first call, "
        "as engrain serve does) instead of loading the model first",
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        print(json.dumps(serve(json.loads(args.serve))))
        return 0
    if args.db is None or not args.db.is_file():
        parser.error("--db must name a SQLite file")
    new_env = dict(item.split("=", 1) for item in args.new_env)
    trees: dict[str, list[dict[str, Any]]] = {"baseline": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="engrain-resident-") as tmp:
        for round_ in range(args.warmup_rounds + args.rounds):
            for name, src in (("baseline", args.baseline_src), ("new", args.new_src)):
                if name == "baseline" and src is None:
                    continue
                extra = new_env if name == "new" else {}
                result = _run(
                    args.db, Path(tmp), name, src, args.queries, args.seed, args.traced, extra,
                    args.refresh_seconds, args.server_order,
                )  # fmt: skip
                if round_ >= args.warmup_rounds:
                    trees[name].append(result)
                print(f"round {round_ + 1} {name}: {json.dumps(result)}", file=sys.stderr)
    report = {
        "db": str(args.db),
        "baseline_src": None if args.baseline_src is None else str(args.baseline_src),
        "queries": args.queries,
        "warmup_rounds": args.warmup_rounds,
        "traced": args.traced,
        "new_env": new_env,
        "refresh_seconds": args.refresh_seconds,
        "server_order": args.server_order,
        **{name: _median(runs) for name, runs in trees.items() if runs},
        "machine": common.machine_info(),
    }
    common.write_json(args.out, report)
    for name in trees:
        if trees[name]:
            m = report[name]
            traced = (
                f", traced {m['traced_mb']:.0f} MB (peak {m['traced_peak_mb']:.0f})"
                if "traced_mb" in m
                else ""
            )
            print(f"{name:>9}: RSS {m['rss_mb']:.0f} MB (model {m['rss_model_mb']:.0f}, store "
                  f"{m['rss_store_mb']:.0f}){traced}, matrix {m['matrix_mb']:.0f} MB, CPU "
                  f"{m['cpu_ms_per_call']:.1f} ms/call, R@50 "
                  f"{m.get('recall_at_50')}, cold start {m['cold_start_ms']:.0f} ms "
                  f"({m['cold_start_cpu_s']:.2f} s CPU)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
