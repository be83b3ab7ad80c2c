"""What a process serving one large user holds, part by part (issue 18).

    PYTHONPATH=src python bench/resident_parts.py COPY-OF-A-STORE.db [--queries 200] [--traced]

One process opened as ``bench/resident.py`` opens it (the model, the store, the first
``context()``, the index waited for, ``--queries`` calls), then every part released in
turn, ``gc.collect()`` and ``malloc_trim(0)`` after each, and the ``VmRSS`` each gave back
(``steps``): glibc's freed-but-kept memory, the rows found and memories built kept, engrain's
``functools`` caches, the learnings' usearch index, the main one, the BM25 postings, the
rest of the store (closed), leaving the model and imports. Also ``smaps_rollup`` and the
resident MB by kind of mapping at three points, and with ``--traced`` tracemalloc's
largest files and lines (started after the model; its bookkeeping counts in the RSS).
The releases reach into the store's internals: the file is only read, but the process is
good for nothing after them. Prints one JSON object.
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

USER = "bench-user"
LIBC = ctypes.CDLL("libc.so.6")


def rollup() -> dict[str, float]:
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in (
                "Rss:",
                "Anonymous:",
                "Shared_Clean:",
                "Private_Clean:",
                "Private_Dirty:",
            ):
                out[parts[0][:-1]] = round(int(parts[1]) / 1024, 1)
    return out


def maps() -> dict[str, float]:
    """Resident MB by kind of mapping: [heap], [stack], anonymous by size, files."""
    out: dict[str, float] = {}
    name = size = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                size = (hi - lo) >> 20
                name = (
                    head[5]
                    if len(head) > 5
                    else ("anon>=32M" if size >= 32 else "anon>=1M" if size >= 1 else "anon<1M")
                )
                if name.startswith("/"):
                    name = "file:" + name.rsplit("/", 1)[-1][:30]
            elif head[0] == "Rss:":
                out[name] = out.get(name, 0) + int(head[1]) / 1024
    top = sorted(out.items(), key=lambda kv: -kv[1])
    return {k: round(v, 1) for k, v in top if v >= 1 or not k.startswith("file:")}


def rss() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def trimmed() -> float:
    gc.collect()
    LIBC.malloc_trim(0)
    return rss()


def main() -> None:
    db = sys.argv[1]
    traced = "--traced" in sys.argv
    n = int(sys.argv[sys.argv.index("--queries") + 1]) if "--queries" in sys.argv else 200
    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder

    out: dict[str, object] = {}
    out["python_numpy"] = rss()
    import engrain.recall.gate  # noqa: F401

    out["imports"] = rss()
    embedder = MiniLMEmbedder()
    embedder.embed(["warm the model up"])
    out["model"] = rss()
    out["model_rollup"] = rollup()
    out["model_maps"] = maps()
    if traced:
        tracemalloc.start(1)
    queries = common.make_queries(n + 1, seed=23)
    engine = Engine(
        settings=Settings(url=f"sqlite:///{db}", data_dir=Path(db).parent), embedder=embedder
    )
    engine.context(queries[0], USER, now=common.NOW)
    out["first_call"] = rss()
    engine.store.wait_for_index(USER)
    out["index_ready"] = rss()
    cpu = time.thread_time()
    for q in queries[1:]:
        engine.context(q, USER, now=common.NOW)
    out["thread_cpu_ms_per_call"] = round((time.thread_time() - cpu) * 1000 / n, 2)
    out["after_calls"] = rss()
    out["after_calls_rollup"] = rollup()
    out["after_calls_maps"] = maps()
    if traced:
        snap = tracemalloc.take_snapshot()
        stats = snap.statistics("filename")
        out["traced_total_mb"] = round(sum(s.size for s in stats) / 2**20, 1)
        out["traced_by_file"] = [
            [
                str(s.traceback[0].filename).split("site-packages/")[-1].split("src/")[-1],
                round(s.size / 2**20, 2),
                s.count,
            ]
            for s in stats[:25]
        ]
        stats = snap.statistics("lineno")
        out["traced_by_line"] = [
            [str(s.traceback[0]).split("src/")[-1], round(s.size / 2**20, 2), s.count]
            for s in stats[:30]
        ]
        del snap, stats
    steps = []
    before = rss()
    after = trimmed()
    steps.append(["allocator retention (malloc_trim)", round(before - after, 1)])
    cache = engine.store._cache(USER)
    snapshot = cache.snapshot
    decoded = snapshot.arrays.rows.decoded
    out["decoded_entries"] = len(decoded._entries)
    out["decoded_found"] = len(decoded._found)
    decoded._entries.clear()
    decoded._found.clear()
    now = trimmed()
    steps.append(["built memories and rows found kept", round(after - now, 1)])
    after = now
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("engrain"):
            for value in list(vars(mod).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()
    now = trimmed()
    steps.append(["engrain's functools caches", round(after - now, 1)])
    after = now
    part = snapshot.part
    out["learnings_index_usearch_mb"] = (
        None if part is None else round(part.index._index.memory_usage / 2**20, 1)
    )
    out["main_index_usearch_mb"] = (
        None if snapshot.ann is None else round(snapshot.ann.index._index.memory_usage / 2**20, 1)
    )
    slot = cache._slot
    cache._slot = None  # nothing stamps the indexes being released
    del decoded
    # learnings' index
    if part is not None:
        from dataclasses import replace

        cache._snapshot = replace(cache._snapshot, part=None)
        slot.part._index = None  # type: ignore[attr-defined]
        part.index._index = None
        del part
        snapshot = None
        now = trimmed()
        steps.append(["learnings' usearch index", round(after - now, 1)])
        after = now
    ann = cache._snapshot.ann
    if ann is not None:
        from dataclasses import replace

        ann.index._index = None
        del ann
        now = trimmed()
        steps.append(["main usearch index", round(after - now, 1)])
        after = now
    lex = cache._snapshot.lexical
    if lex is not None:
        lex._postings = {}
        del lex
        now = trimmed()
        steps.append(["BM25 postings", round(after - now, 1)])
        after = now
    engine.close()
    del cache, slot
    engine.store._caches.clear()
    del engine
    now = trimmed()
    steps.append(["the rest of the store (columns, ids, arrays, sqlite)", round(after - now, 1)])
    after = now
    out["steps"] = steps
    if traced:
        snap = tracemalloc.take_snapshot()
        stats = snap.statistics("lineno")
        out["left_traced_mb"] = round(sum(s.size for s in stats) / 2**20, 1)
        out["left_by_line"] = [
            [str(s.traceback[0]).split("src/")[-1], round(s.size / 2**20, 2), s.count]
            for s in stats[:30]
        ]
        del snap, stats
        tracemalloc.stop()
        out["left_after_tracemalloc_stop"] = trimmed()
    out["left_model_and_imports"] = after
    out["left_maps"] = maps()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
