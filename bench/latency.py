"""Latency of ``Engine.context()`` for one user with 1k / 10k / … memories.

    python bench/latency.py --out bench/results/latency.json [--sizes 1000,10000] [--queries 200]
    python bench/latency.py --url 'sqlite:///{tmp}/latency-{size}.db' \
        --url 'chroma://{tmp}/chroma-{size}'      # backends side by side, in one run

For each store URL (``--url``, repeatable; ``{tmp}`` is the run's temporary directory and
``{size}`` the memory count; the default is a SQLite file there) and each size: a fresh store
holding one user with N memories (realistic 20–80 word
texts generated from a seed, embedded with the real all-MiniLM-L6-v2 in batches and written
through ``engine.store.write``), a few untimed warm-up calls, then one ``context()`` call per
distinct query, timed end to end (query embedding included). A second pass over other
queries times each stage (query embedding, vector search, the procedural lookup, token
counting, rendering, the access-count write) by wrapping the engine's store and embedder.

The corpus vectors are cached in the temp directory between runs (``--no-vector-cache``
re-embeds); they are the same vectors either way, only the build is faster.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import common

import engrain.engine as engine_module
from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder

USER = "bench-user"
TARGETS = {"p50_ms": 15.0, "p95_ms": 30.0}
WRITE_BATCH = 2000


def time_queries(engine: Engine, queries: Sequence[str]) -> list[float]:
    """Milliseconds of one ``context()`` call per query, measured outside the engine."""
    out = []
    for query in queries:
        start = time.perf_counter()
        engine.context(query, USER, now=common.NOW)
        out.append((time.perf_counter() - start) * 1000.0)
    return out


#: Calls timed inside ``context()``: (where, attribute, name). One the engine does not
#: have is skipped. They overlap the engine's own laps (``Gated.timings_ms``), which are
#: reported beside them.
CALL_TARGETS = (
    ("embedder", "embed_query", "embed_query"),
    ("store", "search", "vector_search"),  # matrix product + filters + loading the k rows
    ("store", "lexical_search", "lexical_search"),
    ("store", "query", "store_query"),  # SQL lookups: procedural and pinned memories
    ("store", "record_access", "record_access"),  # one write transaction per call
    ("engine", "count_tokens", "count_tokens"),  # the final block's count in context()
)


@contextmanager
def stage_timers(engine: Engine) -> Iterator[dict[str, dict[str, list[float]]]]:
    """Per ``context()`` call made while active: the engine's own stage laps (if it reports
    them), the milliseconds spent in each wrapped call, and the total."""
    spent: dict[str, float] = {}
    owners = {"embedder": engine.embedder, "store": engine.store, "engine": engine_module}
    targets = [
        (owners[where], attr, name)
        for where, attr, name in CALL_TARGETS
        if hasattr(owners[where], attr)
    ]
    out: dict[str, dict[str, list[float]]] = {
        "laps": defaultdict(list), "calls": defaultdict(list), "total": defaultdict(list),
    }  # fmt: skip
    original_context = engine.context

    def context(*args: Any, **kwargs: Any) -> Any:
        spent.clear()
        start = time.perf_counter()
        result = original_context(*args, **kwargs)
        total = (time.perf_counter() - start) * 1000.0
        laps = dict(getattr(getattr(result, "gated", None), "timings_ms", None) or {})
        for name, ms in laps.items():
            out["laps"][name].append(ms)
        if laps:
            out["laps"]["outside_pipeline"].append(total - sum(laps.values()))
        for _, _, name in targets:
            out["calls"][name].append(spent.get(name, 0.0))
        out["total"]["context"].append(total)
        return result

    with common.timing(targets, spent):
        engine.context = context  # type: ignore[method-assign]
        try:
            yield out
        finally:
            del engine.context


def _stats(groups: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    return {
        group: {
            name: {
                "p50_ms": round(common.percentile(v, 50), 3),
                "mean_ms": round(sum(v) / len(v), 3),
            }
            for name, v in values.items()
        }
        for group, values in groups.items()
    }


def run_size(
    url: str,
    size: int,
    notes: Sequence[common.Note],
    vectors: Any,
    embedder: MiniLMEmbedder,
    queries: Sequence[str],
    stage_queries: Sequence[str],
    warmup: Sequence[str],
    workdir: Path,
) -> dict[str, Any]:
    """Build one user with ``size`` memories in the store ``url`` and time ``context()``."""
    settings = Settings(url=url, data_dir=workdir)
    engine = Engine(settings=settings, embedder=embedder)
    with engine:
        memories = common.make_memories(notes[:size], vectors[:size], USER)
        start = time.perf_counter()
        for offset in range(0, len(memories), WRITE_BATCH):
            engine.store.write(memories[offset : offset + WRITE_BATCH])
        write_s = time.perf_counter() - start
        start = time.perf_counter()
        time_queries(engine, warmup[:1])  # the first call builds the user's vector matrix
        first_ms = (time.perf_counter() - start) * 1000.0
        time_queries(engine, warmup[1:])
        latencies = time_queries(engine, queries)
        with stage_timers(engine) as groups:
            time_queries(engine, stage_queries)
        stages = _stats(groups)
        types = Counter(m.memory_type.value for m in memories)
    return {
        "memories": size,
        "queries": len(queries),
        **common.summarize(latencies),
        "first_call_ms": round(first_ms, 2),
        "write_seconds": round(write_s, 2),
        "memory_types": dict(sorted(types.items())),
        "stages": stages,
        "stage_queries": len(stage_queries),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated memory counts")
    parser.add_argument("--queries", type=int, default=200, help="timed queries per size")
    parser.add_argument("--warmup", type=int, default=10, help="untimed queries per size")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--url",
        action="append",
        metavar="TEMPLATE",
        help="a store URL to measure (repeatable; {tmp} and {size} are filled in); "
        f"default {DEFAULT_URL}",
    )
    parser.add_argument(
        "--no-vector-cache",
        action="store_true",
        help="embed the corpus even if an earlier run cached its vectors",
    )
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if not sizes or sizes[0] < 1 or args.queries < 1 or args.warmup < 1:
        parser.error("sizes, --queries and --warmup must be positive")
    templates = args.url or [DEFAULT_URL]
    if len(sizes) > 1 and (shared := [t for t in templates if "{size}" not in t]):
        parser.error(f"with several sizes each --url needs {{size}} (a fresh store): {shared}")

    embedder = MiniLMEmbedder()
    notes = common.make_notes(sizes[-1], seed=args.seed)
    # Distinct queries: warm-up, timed, and stage-split sets never share a question.
    pool = common.make_queries(args.warmup + 2 * args.queries, seed=args.seed + 1)
    warmup, queries = pool[: args.warmup], pool[args.warmup : args.warmup + args.queries]
    stage_queries = pool[args.warmup + args.queries :]
    cache_dir = None if args.no_vector_cache else Path(tempfile.gettempdir()) / "engrain-bench"
    print(f"corpus: {len(notes):,} notes; embedding with {embedder.model_id}", file=sys.stderr)
    vectors, embed_s, from_cache = common.embed_corpus(
        embedder, [n.text for n in notes], cache_dir=cache_dir
    )

    backends: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="engrain-latency-") as tmp:
        for label, template in backend_labels(templates).items():
            results: dict[str, Any] = {}
            for size in sizes:
                url = template.replace("{tmp}", tmp).replace("{size}", str(size))
                print(f"{label}, size {size:,}: writing and querying", file=sys.stderr)
                results[str(size)] = run_size(
                    url, size, notes, vectors, embedder, queries, stage_queries, warmup, Path(tmp)
                )
            backends[label] = {"url": template, "sizes": results}

    report = {
        # the first backend's numbers where earlier reports kept them
        "sizes": next(iter(backends.values()))["sizes"],
        "backends": backends,
        "targets": TARGETS,
        "machine": common.machine_info(),
        "corpus": {
            "seed": args.seed,
            "notes": len(notes),
            "words_mean": round(sum(len(n.text.split()) for n in notes) / len(notes), 1),
            "embedding_seconds": round(embed_s, 1),
            "embedding_texts_per_s": round(len(notes) / embed_s, 1) if embed_s else None,
            "vectors_from_cache": from_cache,
        },
        "engine": _engine_settings(embedder.model_id, list(backends)),
    }
    common.write_json(args.out, report)
    print_table(report)
    return 0


DEFAULT_URL = "sqlite:///{tmp}/latency-{size}.db"


def backend_labels(templates: Sequence[str]) -> dict[str, str]:
    """Each URL template by a short label: its scheme (numbered when repeated)."""
    labels: dict[str, str] = {}
    for template in templates:
        scheme = template.partition(":")[0] or "store"
        label, n = scheme, 1
        while label in labels:
            n += 1
            label = f"{scheme}-{n}"
        labels[label] = template
    return labels


def _engine_settings(model_id: str, stores: Sequence[str] = ("sqlite",)) -> dict[str, Any]:
    """The defaults the measured engines ran with."""
    s = Settings()
    return {
        "store": stores[0] if len(stores) == 1 else list(stores),
        "embedder": model_id,
        "top_k": s.top_k,
        "token_budget": s.token_budget,
        "candidate_multiplier": s.candidate_multiplier,
    }


def first_row(report: dict[str, Any]) -> dict[str, Any]:
    """The first size's results."""
    return dict(next(iter(report["sizes"].values())))


def print_table(report: dict[str, Any]) -> None:
    """The headline table and the per-stage split of each backend, for a terminal."""
    backends = report.get("backends") or {"sqlite": {"sizes": report["sizes"]}}
    for label, backend in backends.items():
        _print_backend(label, {**report, "sizes": backend["sizes"]})
    machine = report["machine"]
    print(f"\n{machine['cores']} cores, Python {machine['python']}, "
          f"load average {machine.get('load_average_1m', '?')}")  # fmt: skip


def _print_backend(label: str, report: dict[str, Any]) -> None:
    targets = report["targets"]
    print()
    print(f"context() latency, one user, {label}  (targets: p50 ≤ {targets['p50_ms']:g} ms, "
          f"p95 ≤ {targets['p95_ms']:g} ms)")  # fmt: skip
    print(f"{'memories':>10} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'mean ms':>8}  verdict")
    for size, row in report["sizes"].items():
        ok = row["p50_ms"] <= targets["p50_ms"] and row["p95_ms"] <= targets["p95_ms"]
        verdict = "meets" if ok else "misses"
        print(
            f"{int(size):>10,} {row['p50_ms']:>8.1f} {row['p95_ms']:>8.1f} "
            f"{row['p99_ms']:>8.1f} {row['mean_ms']:>8.1f}  {verdict}"
        )
    for group, title in (
        ("laps", "engine stage laps (Gated.timings_ms), mean ms"),
        ("calls", "time inside wrapped calls, mean ms"),
    ):
        names = sorted(
            {n for row in report["sizes"].values() for n in row["stages"].get(group, {})},
            key=list(next(iter(report["sizes"].values()))["stages"].get(group, {})).index,
        )
        if not names:
            continue
        print()
        print(f"{title} (second pass, {first_row(report)['stage_queries']} other queries)")
        print(f"{'memories':>10} " + " ".join(f"{n[:14]:>14}" for n in names))
        for size, row in report["sizes"].items():
            cells = " ".join(
                f"{row['stages'][group].get(n, {}).get('mean_ms', float('nan')):>14.2f}"
                for n in names
            )
            print(f"{int(size):>10,} {cells}")


if __name__ == "__main__":
    sys.exit(main())
