"""What a cached tier costs to serve, beside the gated pipeline it replaces.

    python bench/tiers.py --out bench/results/tiers.json [--queries 200] [--notes 1000]

One user on a fresh SQLite file: the realistic project memory of the tests
(``tests/data/project_memory.jsonl``, 72 invariants, patterns, decisions, antipatterns,
golden paths and preferences) beside ``--notes`` of the latency benchmark's personal notes,
embedded with the real all-MiniLM-L6-v2. Then, side by side in one run:

- ``cache_read``: ``TierCache.fresh()`` when this process has the tiers (a revision lookup);
- ``cold_read``: the same from a new ``TierCache`` (the stored document and its memories);
- ``compile``: compiling tiers 1 and 2 (promotion, dedup, decay filter, both compilers);
- ``context()`` end to end for a small model (tier 1), a 32K model (tier 2) and a large
  model (tier 3, the gated pipeline with its query embedding), one call per query.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import common

from engrain import Engine
from engrain.embed.minilm import MiniLMEmbedder
from engrain.tiers import Tier, TierCache

USER = "bench-user"
PROJECT = "ledgerly"
FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "project_memory.jsonl"


def load(engine: Engine, notes: int) -> int:
    """The project memory, then ``notes`` personal notes of the same user; how many."""
    for line in FIXTURE.read_text().splitlines():
        row = json.loads(line)
        out = engine.remember(row["content"], USER, row["kind"], project=PROJECT,
                              domains=row["domains"],
                              now=common.NOW - timedelta(days=row["days_ago"]))  # fmt: skip
        memory = engine.get(out.memory_id or "", USER)
        engine.store.write([memory.evolve(access_count=row["uses"])])
    texts = common.make_notes(notes)
    vectors = engine.embedder.embed([n.text for n in texts])
    engine.store.write(
        [m.evolve(project=PROJECT) for m in common.make_memories(texts, vectors, USER)]
    )
    return engine.store.count(USER)


def timed(fn: Any, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--notes", type=int, default=1000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    queries = common.make_queries(args.queries)
    with tempfile.TemporaryDirectory() as tmp:
        engine = common.open_engine(Path(tmp), "tiers.db", embedder=MiniLMEmbedder())
        stored = load(engine, args.notes)
        compile_ms = timed(lambda: engine.tiers(USER, PROJECT, rebuild=True, now=common.NOW), 5)
        compiled = engine.tiers(USER, PROJECT)
        cache = engine.tier_cache
        cache_read = timed(lambda: cache.fresh(USER, PROJECT), 2000)
        cold_read = timed(lambda: TierCache(engine.store).fresh(USER, PROJECT), 200)
        for q in queries[:5]:  # warm-up: model load, working set
            engine.context(q, USER, project=PROJECT, model="gpt-4o", now=common.NOW)
        engine.tiers(USER, PROJECT, now=common.NOW)  # warm-up promotions recompile
        results: dict[str, list[float]] = {"tier 1": [], "tier 2": [], "tier 3": []}
        fallbacks = {"tier 1": 0, "tier 2": 0}
        for q in queries:
            for name, window in (("tier 1", 8_192), ("tier 2", 32_768), ("tier 3", 128_000)):
                start = time.perf_counter()
                ctx = engine.context(q, USER, project=PROJECT, context_window=window,
                                     now=common.NOW)  # fmt: skip
                results[name].append((time.perf_counter() - start) * 1000.0)
                if ctx.fallback:  # an injection promoted an item: the tiers recompile
                    fallbacks[name] += 1
        # steady state: every item the tiers inject has been promoted by now
        cache.wait()
        engine.tiers(USER, PROJECT, now=common.NOW)
        steady = []
        for q in queries:
            start = time.perf_counter()
            ctx = engine.context(q, USER, project=PROJECT, context_window=8_192, now=common.NOW)
            steady.append((time.perf_counter() - start) * 1000.0)
            fallbacks["steady tier 1"] = fallbacks.get("steady tier 1", 0) + ctx.fallback
        results["tier 1, steady"] = steady
        engine.close()
    report = {
        "memories": stored,
        "tier_tokens": {int(t): c.tokens for t, c in compiled.tiers.items()},
        "compile": common.summarize(compile_ms),
        "cache_read": common.summarize(cache_read),
        "cold_read": common.summarize(cold_read),
        "context": {name: common.summarize(v) for name, v in results.items()},
        "fallbacks": fallbacks,
        "machine": common.machine_info(),
    }
    print(f"\n{stored} memories; tier 1 {compiled.tiers[Tier.DNA].tokens} tokens, "
          f"tier 2 {compiled.tiers[Tier.FIELD_GUIDE].tokens} tokens")  # fmt: skip
    print(f"{'':<22}{'p50 ms':>9}{'p95 ms':>9}")
    rows = [("read, cached", report["cache_read"]), ("read, new process", report["cold_read"]),
            ("compile tiers 1+2", report["compile"])]  # fmt: skip
    rows += [(f"context(), {k}", v) for k, v in report["context"].items()]
    for label, stats in rows:
        print(f"{label:<22}{stats['p50_ms']:>9.3f}{stats['p95_ms']:>9.3f}")
    print(f"fallbacks to tier 3 (tiers recompiling after a promotion): {fallbacks}")
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
