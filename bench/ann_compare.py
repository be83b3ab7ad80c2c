"""Compare approximate nearest-neighbour indexes for issue 18 (measurement only).

Runs in a separate venv with the candidates installed (not the project's)::

    python3 -m venv /tmp/annvenv && /tmp/annvenv/bin/pip install numpy usearch hnswlib faiss-cpu
    /tmp/annvenv/bin/python bench/ann_compare.py --sizes 100000 --out bench/results/ann.json

Vectors: the cached 10,000 real MiniLM (384-d) vectors of the latency corpus in
``/tmp/engrain-bench`` (written by ``bench/common.py`` ``embed_corpus``); larger sizes are
synthetic — each real vector plus gaussian noise (sigma 0.02 per dimension), normalised.
200 held-out queries are built the same way from other real vectors (not in the index).
Recall@50 is measured against exact numpy search (a matrix product, today's engine).
Queries are timed one at a time on one thread, as ``context()`` does one search per call.
Engrain itself is not imported, so no project dependency is needed in the venv.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

CACHE = "/tmp/engrain-bench"
DIM = 384
NOISE = 0.02
N_QUERIES = 200


def rss_mb() -> float:
    """Return the resident set size of this process in MB (from /proc)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def base_vectors() -> np.ndarray:
    """Return the largest cached real vector matrix (10,000 x 384 float32)."""
    files = [np.load(f, mmap_mode="r") for f in glob.glob(f"{CACHE}/vectors-*.npy")]
    best = max(files, key=lambda a: a.shape[0])
    return np.ascontiguousarray(best, dtype=np.float32)


def make_data(n: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Return ``n`` unit vectors and ``N_QUERIES`` held-out unit queries."""
    rng = np.random.default_rng(seed)
    real = base_vectors()
    held = real[-N_QUERIES:]
    pool = real[:-N_QUERIES]
    data = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 50_000):
        stop = min(n, start + 50_000)
        idx = np.arange(start, stop) % len(pool)
        chunk = pool[idx] + rng.normal(0, NOISE, (stop - start, DIM)).astype(np.float32)
        chunk /= np.linalg.norm(chunk, axis=1, keepdims=True)
        data[start:stop] = chunk
    queries = held + rng.normal(0, NOISE, held.shape).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return data, queries.astype(np.float32)


def pct(values: list[float], q: float) -> float:
    """Return the q-th percentile of ``values`` in milliseconds, rounded."""
    return round(float(np.percentile(values, q)) * 1000, 3)


def time_queries(
    search: Callable[[np.ndarray, int], np.ndarray], queries: np.ndarray, k: int
) -> tuple[list[np.ndarray], dict[str, float]]:
    """Run each query alone; return the ids and p50/p95 latency in ms."""
    out, times = [], []
    for q in queries:
        t0 = time.perf_counter()
        ids = search(q, k)
        times.append(time.perf_counter() - t0)
        out.append(np.asarray(ids))
    return out, {"p50_ms": pct(times, 50), "p95_ms": pct(times, 95)}


def recall(found: list[np.ndarray], truth: list[np.ndarray], k: int) -> float:
    """Return mean recall@k of ``found`` against ``truth``."""
    pairs = zip(found, truth, strict=True)
    hits = [len(set(f[:k].tolist()) & set(t[:k].tolist())) / k for f, t in pairs]
    return round(float(np.mean(hits)), 4)


def dir_size(path: str) -> int:
    """Return the size in bytes of a file or of all files under a directory."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def measure(
    name: str,
    build: Callable[[np.ndarray], Any],
    search_factory: Callable[[Any], Callable[[np.ndarray, int], np.ndarray]],
    save: Callable[[Any, str], None] | None,
    data: np.ndarray,
    queries: np.ndarray,
    truth: dict[int, list[np.ndarray]],
) -> dict[str, Any]:
    """Build one index, time it and its queries, and return a result row."""
    gc.collect()
    before = rss_mb()
    t0 = time.perf_counter()
    index = build(data)
    build_s = time.perf_counter() - t0
    row: dict[str, Any] = {
        "index": name,
        "n": len(data),
        "build_s": round(build_s, 2),
        "rss_delta_mb": round(rss_mb() - before, 1),
    }
    search = search_factory(index)
    for k in (50, 200):
        found, lat = time_queries(search, queries, k)
        row[f"k{k}"] = lat
        if k == 50:
            row["recall_at_50"] = recall(found, truth[50], 50)
    if save is not None:
        tmp = tempfile.mkdtemp(prefix="ann-")
        try:
            path = os.path.join(tmp, "index")
            save(index, path)
            row["disk_mb"] = round(dir_size(path) / 1e6, 1)
        finally:
            shutil.rmtree(tmp)
    del index, search
    gc.collect()
    print(json.dumps(row), flush=True)
    return row


def exact_case(data: np.ndarray) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Return build/search of exact numpy search (the baseline: one matrix product)."""

    def build(d: np.ndarray) -> np.ndarray:
        return d.copy()

    def factory(m: np.ndarray) -> Callable[[np.ndarray, int], np.ndarray]:
        def search(q: np.ndarray, k: int) -> np.ndarray:
            s = m @ q
            part = np.argpartition(-s, k)[:k]
            return part[np.argsort(-s[part])]

        return search

    return build, factory


def save_npy(m: np.ndarray, path: str) -> None:
    """Save the exact baseline's matrix as a plain .npy file at ``path``."""
    with open(path, "wb") as fh:
        np.save(fh, m)


Case = tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]


def usearch_case(dtype: str, conn: int, ef_add: int, ef_search: int) -> Case:
    """Return build/search/save of a usearch HNSW index with scalar kind ``dtype``."""
    from usearch.index import Index

    def build(d: np.ndarray) -> Any:
        idx = Index(
            ndim=DIM,
            metric="ip",
            dtype=dtype,
            connectivity=conn,
            expansion_add=ef_add,
            expansion_search=ef_search,
        )
        idx.add(np.arange(len(d), dtype=np.uint64), d, threads=2)
        return idx

    def factory(idx: Any) -> Callable[[np.ndarray, int], np.ndarray]:
        def search(q: np.ndarray, k: int) -> np.ndarray:
            return idx.search(q, max(k, 1), threads=1).keys

        return search

    def save(idx: Any, path: str) -> None:
        idx.save(path)

    return build, factory, save


def hnswlib_case(
    m: int, ef_c: int, ef: int
) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """Return build/search/save of an hnswlib index (float32 only)."""
    import hnswlib

    def build(d: np.ndarray) -> Any:
        idx = hnswlib.Index(space="ip", dim=DIM)
        idx.init_index(max_elements=len(d), M=m, ef_construction=ef_c, allow_replace_deleted=True)
        idx.set_num_threads(2)
        idx.add_items(d, np.arange(len(d)))
        idx.set_num_threads(1)
        return idx

    def factory(idx: Any) -> Callable[[np.ndarray, int], np.ndarray]:
        def search(q: np.ndarray, k: int) -> np.ndarray:
            idx.set_ef(max(ef, k))
            return idx.knn_query(q, k=k)[0][0]

        return search

    def save(idx: Any, path: str) -> None:
        idx.save_index(path)

    return build, factory, save


def faiss_case(kind: str) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """Return build/search/save of a faiss index (``hnsw`` float32, ``hnsw_sq8``)."""
    import faiss

    def build(d: np.ndarray) -> Any:
        faiss.omp_set_num_threads(2)
        if kind == "hnsw":
            idx = faiss.IndexHNSWFlat(DIM, 32, faiss.METRIC_INNER_PRODUCT)
        else:
            idx = faiss.IndexHNSWSQ(
                DIM, faiss.ScalarQuantizer.QT_8bit, 32, faiss.METRIC_INNER_PRODUCT
            )
            idx.train(d[:50_000])
        idx.hnsw.efConstruction = 128
        idx.add(d)
        faiss.omp_set_num_threads(1)
        return idx

    def factory(idx: Any) -> Callable[[np.ndarray, int], np.ndarray]:
        def search(q: np.ndarray, k: int) -> np.ndarray:
            idx.hnsw.efSearch = max(128, k)
            return idx.search(q.reshape(1, -1), k)[1][0]

        return search

    def save(idx: Any, path: str) -> None:
        faiss.write_index(idx, path)

    return build, factory, save


def main() -> None:
    """Parse arguments, run every requested index at every size, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--libs", default="exact,usearch-f32,usearch-f16,usearch-i8,hnswlib,faiss")
    ap.add_argument("--out", default="bench/results/ann.json")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    if os.path.exists(args.out):
        with open(args.out) as fh:
            rows = json.load(fh).get("rows", [])
    libs = args.libs.split(",")
    for n in (int(s) for s in args.sizes.split(",")):
        data, queries = make_data(n)
        eb, ef = exact_case(data)
        exact = ef(data)
        truth = {k: [exact(q, k) for q in queries] for k in (50,)}
        cases: dict[str, tuple[Any, ...]] = {
            "exact": (eb, ef, save_npy),
            "usearch-f32": usearch_case("f32", 16, 128, 128),
            "usearch-f16": usearch_case("f16", 16, 128, 128),
            "usearch-i8": usearch_case("i8", 16, 128, 128),
            "hnswlib": hnswlib_case(16, 128, 128),
            "faiss": faiss_case("hnsw"),
            "faiss-sq8": faiss_case("sq8"),
        }
        for name in libs:
            build, factory, save = cases[name]
            row = measure(name, build, factory, save, data, queries, truth)
            rows = [r for r in rows if not (r["index"] == name and r["n"] == n)] + [row]
            result = {
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "vectors": f"10k cached real MiniLM vectors + N(0,{NOISE}) noise, "
                "normalised; 200 held-out queries",
                "rows": rows,
            }
            with open(args.out, "w") as fh:
                json.dump(result, fh, indent=2)
        del data, exact, truth
        gc.collect()


if __name__ == "__main__":
    main()
