"""The same ``context()`` calls on SQLite and on PostgreSQL, stage by stage: the calling
thread's CPU and wall per stage, the process's CPU, and what each stage worked on.

    python bench/backend_stages.py \\
        --sqlite /tmp/engrain-bench/stores/latency-100000-s7-model.db \\
        --url 'postgresql://postgres:@/big?host=/tmp/…/pgdata' --graph-dir /tmp/…/graphs \\
        --workdir /tmp/me --queries 150 --out bench/results/backend-stages-….json

One process opens one engine on each store (the SQLite file copied first by SQLite's
backup, never opened in place) over the same 100,000 notes (``bench/latency.py``'s, which
``pg_scale.py --big-vectors latency`` loads: the same texts and vectors), each with its own
query cache over one MiniLM model (threads not spinning: ``Engine``'s choice over
PostgreSQL, taken for both so the embedding is the same work). The two are asked the same
questions (``common.make_queries(warmup + queries, seed)``; the first ``warmup`` untimed,
after each store's held indexes are ready), alternating which goes first per question.

Each stage in :data:`STAGES` is wrapped so the calling thread's CPU (``thread_time``) and
wall (``perf_counter``) are taken **exclusively** (a wrapped stage inside another is charged
to itself); ``waiting for reads begun`` is the calling thread asking for a read begun before
the embedding (PostgreSQL: on another thread, so its wall is the wait). Each backend's own
parts (:data:`OWN_STAGES`: PostgreSQL's searches, BM25, reads and rows decoded; SQLite's
walks, lexical search and memories built) are wrapped the same way in whatever thread runs
them, another thread's under ``(other threads) …``. What no wrapped stage of the calling
thread ran is ``other``. Per call: the process's CPU (every thread: the model's pool and the
store's read threads), the PostgreSQL server's (``--server-pid``), the candidates each
stage saw, the rows each store decoded, and the block (SHA-1). The report gives each
stage's median, mean and 95th percentile per backend and the ratio of the means.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import os
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import common
import numpy as np
from pg_side import server_cpu_ms

import engrain.engine as engine_module
import engrain.recall.block as block_module
import engrain.recall.pool as pool_module
import engrain.recall.pool_rules as rules_module
import engrain.recall.rank as rank_module
import engrain.recall.selection as selection_module
import engrain.recall.understand as understand_module
import engrain.store.found as found_module
from engrain import Engine, Settings

#: (module or class, attribute, stage): the stages both backends run.
STAGES: list[tuple[Any, str, str]] = [
    (understand_module, "classify", "classify"),
    (understand_module, "refine", "intent model"),
    (understand_module, "start_reads", "reads begun"),
    (pool_module, "start_reads", "reads begun"),
    (pool_module, "nearest", "vector searches"),
    (pool_module, "gather", "pool: gather"),
    (pool_module, "with_turns", "pool: turns, summaries"),
    (rules_module, "with_summaries", "pool: turns, summaries"),
    (rules_module, "with_speakers", "pool: rules"),
    (rules_module, "with_time", "pool: rules"),
    (rules_module, "with_soft_terms", "pool: rules"),
    (rules_module, "with_chunk_rank", "pool: rules"),
    (rules_module, "store_line_vectors", "pool: rules"),
    (rules_module, "with_asked_turns", "pool: rules"),
    (rules_module, "with_second_round", "pool: rules"),
    (rules_module, "with_candidate_domains", "pool: rules"),
    (rules_module, "with_work", "pool: rules"),
    (rules_module, "with_area", "pool: rules"),
    (rules_module, "with_pointed", "pool: rules"),
    (pool_module, "_unnamed_vector", "pool: rules"),
    (rank_module, "_score", "scoring"),
    (rank_module, "_partners", "scoring"),
    (rank_module, "with_excerpts", "scoring"),
    (rank_module, "with_speaker_lines", "scoring"),
    (rank_module, "gated_columns", "scoring"),
    (selection_module, "select_gated", "selection"),
    (selection_module, "line_tokens", "selection"),
    (block_module, "line_tokens", "selection"),
    (selection_module, "line_floor", "selection"),
    (selection_module, "built_all", "assembly"),
    (block_module, "_fit", "assembly"),
    (engine_module.Engine, "_count_uses", "record_uses"),
    (engine_module, "gated_context", "other"),
]

#: (module, attribute path, stage): each backend's own parts, wrapped where they exist.
OWN_STAGES: list[tuple[str, str, str]] = [
    ("engrain.store.postgres.searches", "Searches.search_many", "pg: search_many"),
    ("engrain.store.postgres.searches", "Searches._sql_search", "pg: pool search (SQL)"),
    ("engrain.store.postgres.searches", "Searches.lexical_search", "pg: lexical search"),
    ("engrain.store.postgres.bm25", "scores", "pg: BM25 scored in numpy"),
    ("engrain.store.postgres.listings", "Listings.query", "pg: query (pinned, procedural)"),
    ("engrain.store.postgres.records", "Records.get_state", "pg: get_state"),
    ("engrain.store.postgres.learnings", "Learnings.search", "pg: learnings search"),
    ("engrain.store.postgres.projected", "Projected.search", "pg: pool search (held graph)"),
    ("engrain.store.postgres.pooled", "Pooled._read", "pg: SQL read"),
    ("engrain.store.postgres", "PostgresStore.record_uses", "pg: record_uses"),
    ("engrain.store.cache", "UserCache._search", "sqlite: vector search"),
    ("engrain.store.cache", "UserCache._lexical_found", "sqlite: lexical search"),
    ("engrain.store.ann", "VectorIndex.search_similar", "sqlite: usearch walk"),
    ("engrain.store.sqlite", "SQLiteStore.query", "sqlite: query (pinned, procedural)"),
    ("engrain.store.sqlite", "SQLiteStore.record_uses", "sqlite: record_uses"),
    ("engrain.store.found", "memories", "sqlite: memories built"),
]

#: Where each store turns what it read into memories: (module, function, counter).
DECODERS: list[tuple[str, str, str]] = [
    ("engrain.store.postgres.searches", "from_row", "rows decoded (PostgreSQL)"),
    ("engrain.store.postgres.listings", "from_row", "rows decoded (PostgreSQL)"),
    ("engrain.store.postgres.projected", "from_row", "rows decoded (PostgreSQL)"),
    ("engrain.store.postgres.learnings", "from_row", "rows decoded (PostgreSQL)"),
]


class Spans:
    """Exclusive CPU and wall per stage: the calling thread's under the stage's name, any
    other thread's under ``"(other threads) "`` and the name; and per-call counters."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.counts: dict[str, float] = defaultdict(float)
        self._local = threading.local()  # each thread's stack of open spans
        self._lock = threading.Lock()
        self.thread = threading.get_ident()

    def reset(self) -> None:
        with self._lock:
            self.cpu.clear()
            self.wall.clear()
            self.counts.clear()

    @contextlib.contextmanager
    def span(self, stage: str) -> Iterator[None]:
        """Charge the block's own CPU and wall (less its wrapped callees') to ``stage``."""
        stack: list[list[float]] = self._local.__dict__.setdefault("stack", [])
        if threading.get_ident() != self.thread:
            stage = "(other threads) " + stage
        frame = [time.thread_time(), time.perf_counter(), 0.0, 0.0]
        stack.append(frame)
        try:
            yield
        finally:
            stack.pop()
            cpu = time.thread_time() - frame[0]
            wall = time.perf_counter() - frame[1]
            with self._lock:
                self.cpu[stage] += cpu - frame[2]
                self.wall[stage] += wall - frame[3]
            if stack:
                stack[-1][2] += cpu
                stack[-1][3] += wall

    def wrap(self, function: Callable[..., Any], stage: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.span(stage):
                return function(*args, **kwargs)

        return timed


def install(spans: Spans, embedders: list[Any]) -> list[tuple[Any, str, Any]]:
    """Wrap every stage, the embedding and the counters; the originals, to put back."""
    undo: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, attr: str, value: Any) -> None:
        undo.append((owner, attr, owner.__dict__.get(attr)))
        setattr(owner, attr, value)

    for owner, attr, stage in STAGES:
        original = getattr(owner, attr, None)
        if original is not None:
            patch(owner, attr, spans.wrap(original, stage))
    for module_name, path, stage in OWN_STAGES:
        module = importlib.import_module(module_name)
        *owners, attr = path.split(".")
        owner = module
        for name in owners:
            owner = getattr(owner, name)
        patch(owner, attr, spans.wrap(getattr(owner, attr), stage))
    for embedder in embedders:
        patch(embedder, "embed_query", spans.wrap(embedder.embed_query, "query embedding"))
    for module_name, attr, counter in DECODERS:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(module_name)
            decode = getattr(module, attr)

            def counted(*args: Any, _decode: Any = decode, _c: str = counter, **kw: Any) -> Any:
                spans.counts[_c] += 1
                with spans.span("pg: rows decoded"):
                    return _decode(*args, **kw)

            patch(module, attr, counted)
    built = found_module.memories

    def counted_built(rows: Any, *args: Any, **kwargs: Any) -> Any:
        out = built(rows, *args, **kwargs)
        spans.counts["memories built (SQLite)"] += len(out)
        return out

    patch(found_module, "memories", counted_built)

    def waiting(started: Callable[..., Any]) -> Callable[..., Any]:
        def waited(*args: Any, **kwargs: Any) -> Any:
            begun = started(*args, **kwargs)

            def timed(read: Callable[[], Any] | None, name: str) -> Callable[[], Any] | None:
                if read is None:
                    return None

                def result() -> Any:
                    with spans.span("waiting for reads begun"):
                        out = read()
                    spans.counts[name] = len(out)
                    return out

                return result

            return begun._replace(lexical=timed(begun.lexical, "lexical matches"),
                                  pinned=timed(begun.pinned, "pinned"))  # fmt: skip

        return waited

    for module in (understand_module, pool_module):  # both begin reads (recall.pool_reads)
        patch(module, "start_reads", waiting(module.start_reads))
    nearest = pool_module.nearest

    def counted_nearest(*args: Any, **kwargs: Any) -> Any:
        out = nearest(*args, **kwargs)
        spans.counts["nearest (pool)"] += len(out[0])
        if len(out) > 1:
            spans.counts["nearest (learnings)"] += len(out[1])
        return out

    patch(pool_module, "nearest", counted_nearest)
    score = rank_module._score

    def counted_score(pool: Any, *args: Any, **kwargs: Any) -> Any:
        spans.counts["candidates ranked"] += len(pool)
        return score(pool, *args, **kwargs)

    patch(rank_module, "_score", counted_score)
    return undo


def block_of(result: Any) -> str:
    return hashlib.sha1(str(result).encode()).hexdigest()[:16]


def ready(engine: Engine, user: str) -> None:
    """Wait for the store's held indexes (SQLite's vector index, PostgreSQL's learnings and
    the pool's graph) so no timed call builds one."""
    for name in ("wait_for_index", "wait_for_learnings", "wait_for_projection"):
        wait = getattr(engine.store, name, None)
        if wait is not None:
            wait(user)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from engrain.embed.minilm import MiniLMEmbedder

    if args.graph_dir:
        os.environ["ENGRAIN_PG_GRAPH_DIR"] = str(args.graph_dir)
    args.workdir.mkdir(parents=True, exist_ok=True)
    copy = common.copy_store(args.sqlite, args.workdir / f"backend-stages-{os.getpid()}.db")
    model = MiniLMEmbedder(spinning=False)
    model.embed(["warm the model up"])
    queries = common.make_queries(args.warmup + args.queries, seed=args.seed)
    data = Path(tempfile.mkdtemp(prefix="backend-stages-", dir=args.workdir))
    engines = {
        "sqlite": Engine(settings=Settings(url=f"sqlite:///{copy}", data_dir=data / "s"),
                         embedder=model),
        "postgres": Engine(settings=Settings(url=args.url, data_dir=data / "p"), embedder=model),
    }  # fmt: skip
    users = {"sqlite": args.sqlite_user, "postgres": args.pg_user}
    fill = None
    if args.hold_fill:
        import psycopg

        from engrain.store.postgres.fill import FILL_LOCK

        fill = psycopg.connect(args.url, autocommit=True)
        fill.execute("SELECT pg_advisory_lock(%s)", (FILL_LOCK,))
    calls: dict[str, list[dict[str, Any]]] = {"sqlite": [], "postgres": []}
    try:
        for name, engine in engines.items():
            engine.context(queries[0], users[name], now=common.NOW)
            ready(engine, users[name])
            for query in queries[1 : args.warmup]:
                engine.context(query, users[name], now=common.NOW)
        spans = Spans()
        undo = install(spans, [e.embedder for e in engines.values()])
        load = [os.getloadavg()[0]]
        try:
            for i, query in enumerate(queries[args.warmup :]):
                order = ["postgres", "sqlite"] if i % 2 == 0 else ["sqlite", "postgres"]
                for name in order:
                    spans.reset()
                    server = server_cpu_ms(args.server_pid) if name == "postgres" else 0.0
                    process, cpu, wall = (
                        time.process_time(),
                        time.thread_time(),
                        time.perf_counter(),
                    )
                    result = engines[name].context(query, users[name], now=common.NOW)
                    wall = (time.perf_counter() - wall) * 1000.0
                    cpu = (time.thread_time() - cpu) * 1000.0
                    process = (time.process_time() - process) * 1000.0
                    if name == "postgres" and args.server_pid:
                        server = server_cpu_ms(args.server_pid) - server
                    stages = {k: v * 1000.0 for k, v in spans.cpu.items()}
                    walls = {k: v * 1000.0 for k, v in spans.wall.items()}
                    mine = [k for k in stages if not k.startswith("(other threads)")]
                    stages["other"] = stages.get("other", 0.0) + cpu - sum(stages[k] for k in mine)
                    walls["other"] = walls.get("other", 0.0) + wall - sum(walls[k] for k in mine)
                    gated = result.gated
                    calls[name].append({
                        "query": query, "thread_cpu_ms": cpu, "wall_ms": wall,
                        "process_cpu_ms": process, "server_cpu_ms": server,
                        "stages_cpu_ms": stages, "stages_wall_ms": walls,
                        "counts": dict(spans.counts),
                        "budget": gated.budget.tokens if gated else 0,
                        "shown": len(result.memories), "block": block_of(result),
                    })  # fmt: skip
        finally:
            for owner, attr, original in reversed(undo):
                if original is None:
                    delattr(owner, attr)
                else:
                    setattr(owner, attr, original)
        load.append(os.getloadavg()[0])
    finally:
        for engine in engines.values():
            engine.close()
        if fill is not None:
            fill.close()
        copy.unlink()
    return summary(calls, args, load)


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    return {
        "median": round(float(np.median(a)), 3),
        "mean": round(float(a.mean()), 3),
        "p95": round(float(np.percentile(a, 95)), 3),
    }


def summary(
    calls: dict[str, list[dict[str, Any]]], args: argparse.Namespace, load: list[float]
) -> dict[str, Any]:
    """Each stage's and counter's statistics per backend, and the ratio of the means."""
    report: dict[str, Any] = {
        "benchmark": "backend_stages", "queries": args.queries, "warmup": args.warmup,
        "seed": args.seed, "sqlite": str(args.sqlite), "load_1m": load,
        "machine": common.machine_info(), "backends": {},
    }  # fmt: skip
    for name, made in calls.items():
        stages = sorted({s for c in made for s in c["stages_cpu_ms"]})
        counters = sorted({s for c in made for s in c["counts"]})
        report["backends"][name] = {
            "totals": {k: _stats([c[k] for c in made])
                       for k in ("thread_cpu_ms", "wall_ms", "process_cpu_ms", "server_cpu_ms")},
            "stages_cpu_ms": {s: _stats([c["stages_cpu_ms"].get(s, 0.0) for c in made])
                              for s in stages},
            "stages_wall_ms": {s: _stats([c["stages_wall_ms"].get(s, 0.0) for c in made])
                               for s in stages},
            "counts": {s: _stats([c["counts"].get(s, 0.0) for c in made]) for s in counters},
            "budget": _stats([c["budget"] for c in made]),
            "shown": _stats([c["shown"] for c in made]),
        }  # fmt: skip
    report["calls"] = calls
    return report


def print_table(report: dict[str, Any]) -> None:
    pg, sq = report["backends"]["postgres"], report["backends"]["sqlite"]
    print(f"load {report['load_1m']}")
    print(f"{'ms a call (mean / median / p95)':34} {'PostgreSQL':>24} {'SQLite':>24}  ratio")
    for key in ("thread_cpu_ms", "wall_ms", "process_cpu_ms", "server_cpu_ms"):
        p, s = pg["totals"][key], sq["totals"][key]
        print(f"{key:34} {_cell(p):>24} {_cell(s):>24}  {_ratio(p, s)}")
    for table in ("stages_cpu_ms", "stages_wall_ms"):
        print(f"-- {table}")
        for stage in sorted(set(pg[table]) | set(sq[table])):
            p, s = pg[table].get(stage), sq[table].get(stage)
            print(f"{stage:34} {_cell(p):>24} {_cell(s):>24}  {_ratio(p, s)}")
    print("-- counts")
    for counter in sorted(set(pg["counts"]) | set(sq["counts"])):
        p, s = pg["counts"].get(counter), sq["counts"].get(counter)
        print(f"{counter:34} {_cell(p):>24} {_cell(s):>24}")


def _cell(s: dict[str, float] | None) -> str:
    return "-" if s is None else f"{s['mean']:.2f} / {s['median']:.2f} / {s['p95']:.2f}"


def _ratio(p: dict[str, float] | None, s: dict[str, float] | None) -> str:
    if p is None or s is None or not s["mean"]:
        return ""
    return f"{p['mean'] / s['mean']:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sqlite", type=Path, required=True, help="a latency.py SQLite file")
    parser.add_argument("--url", required=True, help="the PostgreSQL database of the same notes")
    parser.add_argument("--sqlite-user", default="bench-user")
    parser.add_argument("--pg-user", default="big-user")
    parser.add_argument("--graph-dir", type=Path, help="ENGRAIN_PG_GRAPH_DIR")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=8, help="of common.make_queries")
    parser.add_argument("--server-pid", type=int, help="the postmaster's: its CPU a call")
    parser.add_argument("--hold-fill", action="store_true", help="no filler runs meanwhile")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    report = measure(args)
    common.write_json(args.out, report)
    print_table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
