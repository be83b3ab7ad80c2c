"""The slowest tenth of ``context()`` calls on a SQLite file, stage by stage, per call.

    python bench/tail_stages.py --db /tmp/engrain-bench/stores/latency-100000-s7-model.db \
        --workdir /tmp/me --out bench/results/tail-stages-100k.json

The file is copied (SQLite's backup) into ``--workdir`` first, so a shared cache is never
written. A store opened on the copy waits for its indexes, runs ``bench/latency.py``'s
warm-up queries, then its timed ones (the same seed; ``--unseen`` takes the pool's next
segment instead, questions the process has not met). Each stage named in :data:`STAGES`
is wrapped so its calling thread's CPU is taken **exclusively** (a stage called inside
another is charged to itself, not to both), per call; what no wrapped stage ran is
``other`` (``Engine.context``'s own work: validation, the tier's choice, the result). The
garbage collector is left on, and its collections' CPU is reported per call too (charged
to the stage it landed in). Each call also records what it worked on: its budget, class,
candidates ranked, memories shown, rows read by rowid, ids made and memories built.

The report gives, for the slowest tenth of calls by thread CPU and for the rest, each
stage's mean and share, and each counter's mean: where the tail's time goes, on the same
calls. The wrappers cost a few hundred nanoseconds a wrapped call (~100-200 a call), which
the numbers include.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
import numpy as np
from latency import DEEP_BUDGET, USER

import engrain
import engrain.engine as engine_module
import engrain.recall.block as block_module
import engrain.recall.pool as pool_module
import engrain.recall.pool_rules as rules_module
import engrain.recall.rank as rank_module
import engrain.recall.selection as selection_module
import engrain.recall.understand as understand_module
import engrain.store.built as built_module
import engrain.store.found as found_module
import engrain.store.sqlite_uses as uses_module
import engrain.store.sqlite_writes as writes_module
import engrain.store.vector_search as search_module
from engrain import Engine
from engrain.store.ann import VectorIndex
from engrain.store.arrays import Arrays
from engrain.store.cache import UserCache
from engrain.store.ids import IdColumn
from engrain.store.rows import Decoded
from engrain.store.sqlite import SQLiteStore

#: (module or class, attribute, stage): what is wrapped. Names a module looks up in its own
#: globals are patched there (the gate's stage modules), methods on their class.
STAGES: list[tuple[Any, str, str]] = [
    (understand_module, "classify", "classify"),
    (understand_module, "refine", "intent model"),
    (understand_module, "start_reads", "candidates: other"),
    (pool_module, "start_reads", "candidates: other"),
    (pool_module, "_candidates", "candidates: other"),
    (pool_module, "gather", "gather"),
    (pool_module, "with_turns", "candidates: other"),
    (rules_module, "with_summaries", "candidates: other"),
    (rules_module, "with_speakers", "candidates: rules"),
    (rules_module, "with_time", "candidates: rules"),
    (rules_module, "with_soft_terms", "candidates: rules"),
    (rules_module, "with_chunk_rank", "candidates: rules"),
    (rules_module, "store_line_vectors", "candidates: rules"),
    (rules_module, "with_asked_turns", "candidates: rules"),
    (rules_module, "with_second_round", "candidates: rules"),
    (rules_module, "with_candidate_domains", "candidates: rules"),
    (rules_module, "with_work", "candidates: rules"),
    (rules_module, "with_area", "candidates: rules"),
    (rules_module, "with_pointed", "candidates: rules"),
    (pool_module, "_unnamed_vector", "candidates: rules"),
    (rank_module, "_score", "scoring"),
    (rank_module, "_partners", "scoring: partners, excerpts"),
    (rank_module, "with_excerpts", "scoring: partners, excerpts"),
    (rank_module, "with_speaker_lines", "scoring: partners, excerpts"),
    (selection_module, "select_gated", "selection"),
    (selection_module, "line_tokens", "selection: line costs"),
    (block_module, "line_tokens", "selection: line costs"),
    (selection_module, "line_floor", "selection: line costs"),
    (rank_module, "gated_columns", "scoring: the totals"),
    (selection_module, "built_all", "shown memories built"),
    (block_module, "_fit", "assembly"),
    (engine_module, "gated_context", "other"),
    (engine_module.Engine, "_count_uses", "uses: other"),
    (uses_module, "count", "uses: SQL"),
    (UserCache, "_search", "vector search: other"),
    (VectorIndex, "search_similar", "vector search: usearch walk"),
    (search_module, "reachable", "vector search: other"),
    (search_module, "passing_rows", "vector search: other"),
    (search_module, "counted_rows", "vector search: other"),
    (SQLiteStore, "record_uses", "uses: record_uses (BEGIN, COMMIT)"),
    (writes_module, "write_state", "uses: context record"),
    (SQLiteStore, "_sync_version", "uses: data_version"),
    (UserCache, "touch", "uses: working set touched"),
    (Decoded, "carried", "uses: working set touched"),
    (search_module, "subset_top", "vector search: learnings subset"),
    (search_module, "scored_vectors", "vector search: rows read"),
    (search_module, "top_rows", "vector search: found"),
    (search_module, "exact_top", "vector search: found"),
    (UserCache, "_lexical_found", "lexical: BM25"),
    (Arrays, "found_of", "lexical/vector: found_of"),
    (SQLiteStore, "query", "pinned (store.query)"),
    (SQLiteStore, "get", "store.get"),
]


class Spans:
    """Exclusive thread CPU per stage name, and call counts of a few counted functions."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.counts: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []  # [start, child time] per open span

    def wrap(self, function: Callable[..., Any], stage: str) -> Callable[..., Any]:
        """``function`` charging its own thread CPU (less its wrapped callees') to ``stage``."""
        spans = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading_ident() != spans.thread:
                return function(*args, **kwargs)
            frame = [time.thread_time(), 0.0]
            spans._stack.append(frame)
            try:
                return function(*args, **kwargs)
            finally:
                spans._stack.pop()
                total = time.thread_time() - frame[0]
                spans.spent[stage] += total - frame[1]
                if spans._stack:
                    spans._stack[-1][1] += total

        return timed

    thread = 0

    def reset(self) -> None:
        self.spent.clear()
        self.counts.clear()
        self._stack.clear()


def threading_ident() -> int:
    """The calling thread's identifier (only the calling thread's spans are taken)."""
    return threading.get_ident()


def install(engine: Engine, spans: Spans) -> list[tuple[Any, str, Any]]:
    """Wrap every stage and the counters; the originals, to put back."""
    undo: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, attr: str, value: Any) -> None:
        undo.append((owner, attr, owner.__dict__.get(attr)))
        setattr(owner, attr, value)

    for owner, attr, stage in STAGES:
        original = getattr(owner, attr, None)
        if original is not None:
            patch(owner, attr, spans.wrap(original, stage))
    embed = engine.embedder.embed_query
    patch(engine.embedder, "embed_query", spans.wrap(embed, "query embedding"))
    rows_read = Arrays.vectors

    def counted_rows(self: Arrays, rows: Any, *args: Any, **kwargs: Any) -> Any:
        spans.counts["rows read by rowid"] += len(rows)
        return rows_read(self, rows, *args, **kwargs)

    patch(Arrays, "vectors", spans.wrap(counted_rows, "rows read by rowid"))
    take = IdColumn.take

    def counted_ids(self: IdColumn, rows: Any) -> Any:
        spans.counts["ids made"] += len(rows)
        return take(self, rows)

    patch(IdColumn, "take", spans.wrap(counted_ids, "ids made (IdColumn.take)"))
    built = built_module.memories

    def counted_built(rows: Any, *args: Any, **kwargs: Any) -> Any:
        out = built(rows, *args, **kwargs)
        spans.counts["memories built"] += len(out)
        return out

    patch(found_module, "memories", counted_built)
    score = rank_module._score

    def counted_score(pool: Any, *args: Any, **kwargs: Any) -> Any:
        spans.counts["candidates ranked"] += len(pool)
        return score(pool, *args, **kwargs)

    patch(rank_module, "_score", counted_score)
    return undo


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Open the copy, wait for its indexes, time the calls; the report."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    copy = common.copy_store(args.db, args.workdir / f"tail-stages-{os.getpid()}-{args.db.name}")
    warmup, seen, unseen = common.latency_pool(args.warmup, args.queries, args.seed)
    queries = unseen if args.unseen else seen
    engine = common.model_engine(copy, args.workdir)
    calls: list[dict[str, Any]] = []
    with engine:
        indexed = common.warm_up(engine, USER, warmup)
        if args.freeze:  # what ``engrain serve`` does once it has started (server/collector.py)
            gc.collect()
            gc.freeze()
        spans = Spans()
        spans.thread = threading_ident()
        gc_spent = [0.0, 0.0]
        full: list[float] = []  # each full collection's CPU in the timed calls, ms

        def collected(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                gc_spent[1] = time.thread_time()
            else:
                spent = time.thread_time() - gc_spent[1]
                gc_spent[0] += spent
                if info["generation"] == 2:
                    full.append(spent * 1000.0)

        undo = install(engine, spans)
        gc.callbacks.append(collected)
        load = os.getloadavg()[0]
        try:
            for query in queries:
                spans.reset()
                gc_spent[0] = 0.0
                begun = time.thread_time()
                result = engine.context(query, USER, now=common.NOW)
                total = (time.thread_time() - begun) * 1000.0
                gated = result.gated
                stages = {k: v * 1000.0 for k, v in spans.spent.items()}
                stages["other"] = stages.get("other", 0.0) + total - sum(stages.values())
                calls.append({
                    "query": query, "thread_cpu_ms": total, "stages_ms": stages,
                    "gc_ms": gc_spent[0] * 1000.0, "counts": dict(spans.counts),
                    "budget": gated.budget.tokens if gated else 0,
                    "intent": gated.classification.intent.value if gated else "",
                    "complexity": gated.classification.complexity.value if gated else "",
                    "shown": len(result.memories),
                    "tokens": result.tokens, "block": _block(result),
                })  # fmt: skip
        finally:
            gc.callbacks.remove(collected)
            for owner, attr, original in reversed(undo):
                if original is None:
                    delattr(owner, attr)
                else:
                    setattr(owner, attr, original)
        held = census(full)
    copy.unlink()
    return {**summary(calls, args, indexed, [load, os.getloadavg()[0]]), "collector": held}


def census(full: list[float]) -> dict[str, Any]:
    """What the collector walks after the timed calls, the engine still open: the objects it
    tracks (after one full collection, which also stops tracking tuples and dicts of atomic
    values), by type, and the CPU of five more full collections over them (their median),
    beside the full collections that landed in the timed calls."""
    gc.collect()
    objects = gc.get_objects()
    kinds = _tally(type(o).__qualname__ for o in objects)
    modules = _tally(type(o).__module__ for o in objects)
    sizes = sorted(((len(gc.get_referents(o)), o) for o in objects), key=lambda so: -so[0])
    walked = sum(n for n, _ in sizes)
    largest = [f"{n} {type(o).__qualname__} {_hint(o)}" for n, o in sizes[:15]]
    del objects, sizes
    spent = []
    for _ in range(5):
        begun = time.thread_time()
        gc.collect()
        spent.append((time.thread_time() - begun) * 1000.0)
    return {
        "tracked": sum(kinds.values()),
        "references": walked,  # what a full collection's passes follow
        "largest": largest,
        "by_type": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:40]),
        "by_module": dict(sorted(modules.items(), key=lambda kv: -kv[1])[:25]),
        "full_collection_cpu_ms": round(float(np.median(spent)), 3),
        "full_collections_in_calls_ms": [round(v, 3) for v in full],
    }


def summary(
    calls: list[dict[str, Any]], args: argparse.Namespace, indexed: bool, load: list[float]
) -> dict[str, Any]:
    """The slowest tenth against the rest: each stage's mean, each counter's."""
    order = sorted(calls, key=lambda c: c["thread_cpu_ms"], reverse=True)
    cut = max(1, len(order) // 10)
    groups = {"slowest_tenth": order[:cut], "rest": order[cut:]}
    names = sorted({s for c in calls for s in c["stages_ms"]})
    counters = sorted({s for c in calls for s in c["counts"]})

    def mean(group: list[dict[str, Any]], value: Callable[[dict[str, Any]], float]) -> float:
        return round(float(np.mean([value(c) for c in group])), 3) if group else 0.0

    report: dict[str, Any] = {}
    for label, group in groups.items():
        report[label] = {
            "calls": len(group),
            "thread_cpu_ms": mean(group, lambda c: c["thread_cpu_ms"]),
            "stages_ms": {n: mean(group, lambda c, n=n: c["stages_ms"].get(n, 0.0)) for n in names},
            "gc_ms": mean(group, lambda c: c["gc_ms"]),
            "counts": {n: mean(group, lambda c, n=n: c["counts"].get(n, 0.0)) for n in counters},
            "budget": mean(group, lambda c: c["budget"]),
            "shown": mean(group, lambda c: c["shown"]),
            "budgets": sorted({c["budget"] for c in group}),
            "intents": dict(sorted(_tally(c["intent"] for c in group).items())),
        }
    cpu = [c["thread_cpu_ms"] for c in calls]
    return {
        "db": str(args.db),
        "queries": len(calls),
        "unseen": args.unseen,
        "freeze": args.freeze,
        "indexed": indexed,
        "load_1m": load,
        "thread_cpu_ms": {
            "p50": round(float(np.percentile(cpu, 50)), 3),
            "p95": round(float(np.percentile(cpu, 95)), 3),
            "p99": round(float(np.percentile(cpu, 99)), 3),
            "mean": round(float(np.mean(cpu)), 3),
        },
        **report,
        "calls": calls,
        "engrain": str(Path(engrain.__file__).resolve().parent),
    }


def _hint(held: object) -> str:
    """Who holds a large container: its referrers' types (a report's clue, not exact)."""
    return ",".join(sorted({type(r).__qualname__ for r in gc.get_referrers(held)})[:4])


def _block(result: Any) -> str:
    """A digest of what a call returned: its text, tokens and memories' ids (trees giving
    the same blocks on the same queries give the same digests)."""
    shown = "\n".join(m.id for m in result.memories)
    return hashlib.sha256(f"{result.text}\0{result.tokens}\0{shown}".encode()).hexdigest()


def _tally(values: Any) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for v in values:
        out[str(v)] += 1
    return dict(out)


def paired(trees: dict[str, list[Path]], gc_max_ms: float | None = None) -> dict[str, Any]:
    """Reports of several runs per tree (``--pair``) on the same queries: each query's
    median over a tree's runs, per stage; the slowest tenth by the first tree's medians,
    so every tree is compared on the same calls. ``gc_max_ms``: calls whose collections
    took more CPU are left out of the medians (the full collection lands in the same call
    of every run of one tree, in the stage where the allocations cross its threshold: a
    change that allocates a little more or less moves it to another stage and query)."""
    medians: dict[str, dict[str, dict[str, float]]] = {}
    for label, paths in trees.items():
        by_query: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for path in paths:
            for call in json.loads(path.read_text(encoding="utf-8"))["calls"]:
                if gc_max_ms is None or call["gc_ms"] <= gc_max_ms:
                    by_query[call["query"]].append(call)
        names = {n for calls in by_query.values() for c in calls for n in c["stages_ms"]}
        medians[label] = {
            query: {
                "thread_cpu_ms": float(np.median([c["thread_cpu_ms"] for c in calls])),
                "gc_ms": float(np.median([c["gc_ms"] for c in calls])),
                **{n: float(np.median([c["stages_ms"].get(n, 0.0) for c in calls]))
                   for n in names},
                **{f"count: {n}": float(np.median([c.get("counts", {}).get(n, 0.0)
                                                    for c in calls]))
                   for n in {n for c in calls for n in c.get("counts", {})}},
            }
            for query, calls in by_query.items()
        }  # fmt: skip
    blocks: dict[str, dict[str, set[str]]] = {}
    for label, paths in trees.items():
        blocks[label] = defaultdict(set)
        for path in paths:
            for call in json.loads(path.read_text(encoding="utf-8"))["calls"]:
                if "block" in call:
                    blocks[label][call["query"]].add(call["block"])
    first = medians[next(iter(trees))]
    order = sorted(first, key=lambda q: -first[q]["thread_cpu_ms"])
    cut = max(1, len(order) // 10)
    groups = {"slowest_tenth": order[:cut], "rest": order[cut:], **_depths(trees, order)}
    out: dict[str, Any] = {"runs": {k: [str(p) for p in v] for k, v in trees.items()}}
    base_blocks = blocks[next(iter(trees))]
    out["blocks_differing"] = {  # queries whose block differs from the base's (any run)
        label: sum(1 for q, seen in found.items() if q in base_blocks and seen != base_blocks[q])
        for label, found in blocks.items()
    }
    out["blocks_compared"] = {label: len(found) for label, found in blocks.items()}
    for label, per_query in medians.items():
        names = sorted({n for row in per_query.values() for n in row})
        cpu = [per_query[q]["thread_cpu_ms"] for q in order if q in per_query]
        out[label] = {
            "thread_cpu_ms": {
                "p50": round(float(np.percentile(cpu, 50)), 3),
                "p95": round(float(np.percentile(cpu, 95)), 3),
                "p99": round(float(np.percentile(cpu, 99)), 3),
                "mean": round(float(np.mean(cpu)), 3),
            },
            **{
                group: {
                    n: round(float(np.mean([per_query[q].get(n, 0.0) for q in mine])), 3)
                    for n in names
                }
                for group, qs in groups.items()
                # too few queries for a rest: no empty group, no mean of nothing; a query
                # whose every call here was left out (``gc_max_ms``) is in no group here
                if (mine := [q for q in qs if q in per_query])
            },
        }
    return out


def _depths(trees: dict[str, list[Path]], order: list[str]) -> dict[str, list[str]]:
    """The queries by the depth of their pool in the first tree's first run, as
    ``latency.py`` splits its calls: ``deep``, a budget of at least
    :data:`~latency.DEEP_BUDGET`, and ``shallow``, every other (a call without a budget
    too). Runs on two stores answering the same queries (10,000 and 100,000 memories) are
    compared on the same calls this way."""
    budgets: dict[str, int] = {}
    for call in json.loads(next(iter(trees.values()))[0].read_text(encoding="utf-8"))["calls"]:
        budgets.setdefault(call["query"], int(call.get("budget", 0)))
    deep = [q for q in order if budgets.get(q, 0) >= DEEP_BUDGET]
    return {"deep": deep, "shallow": [q for q in order if budgets.get(q, 0) < DEEP_BUDGET]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="a latency.py SQLite file")
    parser.add_argument("--workdir", type=Path, help="where the copy is made")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--unseen", action="store_true", help="questions after the timed ones")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--freeze", action="store_true",
        help="move what the warm-up left alive out of the collector's passes (gc.freeze)",
    )  # fmt: skip
    parser.add_argument(
        "--pair", action="append", metavar="LABEL=RUN.json,…",
        help="compare earlier runs per query instead of measuring (repeatable; first: base)",
    )  # fmt: skip
    parser.add_argument(
        "--gc-max-ms", type=float, metavar="MS",
        help="with --pair: leave out calls whose collections took more CPU (a full one)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.pair:
        trees = {}
        for spec in args.pair:
            label, _, paths = spec.partition("=")
            trees[label] = [Path(p) for p in paths.split(",")]
        compared = paired(trees, args.gc_max_ms)
        stages = sorted(compared[next(iter(trees))]["slowest_tenth"],
                        key=lambda n: -compared[next(iter(trees))]["slowest_tenth"][n])  # fmt: skip
        print(f"{'ms a call, per-query medians':>34}  " + "  ".join(
            f"{t + ' slow':>10} {t + ' rest':>9}" for t in trees))  # fmt: skip
        for name in stages:
            print(f"{name:>34}  " + "  ".join(
                f"{compared[t]['slowest_tenth'].get(name, 0.0):10.2f} "
                f"{compared[t]['rest'].get(name, 0.0):9.2f}" for t in trees))  # fmt: skip
        first = compared[next(iter(trees))]
        if "deep" in first and "shallow" in first:
            print(f"{'by depth, ms a call':>34}  " + "  ".join(
                f"{t + ' deep':>10} {t + ' shal':>9}" for t in trees))  # fmt: skip
            every = {n for t in trees for n in compared[t].get("deep", {})}
            for name in sorted(every, key=lambda n: -max(compared[t].get("deep", {}).get(n, 0.0)
                                                         for t in trees)):  # fmt: skip
                cells = [(compared[t].get("deep", {}), compared[t].get("shallow", {}))
                         for t in trees]  # fmt: skip
                print(f"{name:>34}  " + "  ".join(
                    f"{deep.get(name, 0.0):10.2f} {shallow.get(name, 0.0):9.2f}"
                    for deep, shallow in cells))  # fmt: skip
        for t in trees:
            print(f"{t}: thread CPU of the per-query medians {compared[t]['thread_cpu_ms']}")
        print(f"blocks differing from the first tree's: {compared['blocks_differing']} "
              f"of {compared['blocks_compared']}")  # fmt: skip
        common.write_json(args.out, compared)
        return 0
    if args.db is None or args.workdir is None:
        parser.error("--db and --workdir are needed to measure")
    report = measure(args)
    print(f"thread CPU p50 / p95 / mean {report['thread_cpu_ms']}")
    held = report["collector"]
    print(f"tracked after the calls {held['tracked']}, a full collection "
          f"{held['full_collection_cpu_ms']} ms CPU; "
          f"in the calls {held['full_collections_in_calls_ms']}")  # fmt: skip
    print(f"references followed {held['references']}; largest {held['largest']}")
    print(f"tracked by type {held['by_type']}")
    print(f"tracked by module {held['by_module']}")
    names = report["slowest_tenth"]["stages_ms"]
    rows = sorted(names, key=lambda n: -report["slowest_tenth"]["stages_ms"][n])
    print(f"{'stage (exclusive, ms a call)':>34}  slowest 10%   rest")
    for name in rows:
        print(f"{name:>34}  {report['slowest_tenth']['stages_ms'][name]:10.2f}  "
              f"{report['rest']['stages_ms'][name]:6.2f}")  # fmt: skip
    for label in ("slowest_tenth", "rest"):
        r = report[label]
        print(f"{label}: cpu {r['thread_cpu_ms']} gc {r['gc_ms']} budget {r['budget']} "
              f"shown {r['shown']} {r['counts']} budgets {r['budgets']}")  # fmt: skip
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
