"""One ``context()`` call's timeline over PostgreSQL: what each thread of the worker and each
server backend does when, and which of it is the call's critical path.

    python bench/pg_timeline.py --url 'postgresql://postgres:@/big?host=/tmp/…/pgdata' \\
        --user big-user --queries 80 --hold-fill --out bench/results/pg-timeline-….json

One engine over the database, the real model (threads not spinning, as ``Engine`` chooses
over PostgreSQL; ``--split`` for single-threaded runs), the user's typed learnings loaded
first. Every call is recorded as events, each with its thread, start and end (ms from the
call's start) and the thread's CPU: the store's public calls and the held learnings'
search; each pooled connection held, with its backend's process id and that backend's CPU
while it was held (``/proc/<pid>/schedstat``); the model's runs, with the CPU of the
process's threads that are not Python's (onnxruntime's intra-op pool). The pool's walk
records its depth ``k`` (``_sql_search``'s, or the held pool index's search); each store
call records its thread's run-queue wait (ready, without a core) and each connection its
backend's (``schedstat``'s second field), so ``search_many``'s wall splits into CPU, waiting
for a core and waiting for the other side. The summary splits the calling thread's path
— before the embedding, the embedding, ``search_many`` (the pool's walk in this thread,
the learnings in a search thread), waiting for the lexical matches begun before the
embedding, scoring to selection, ``record_uses`` — by the calls' percentiles, and gives
the walk's backend CPU by the pool's depth. ``tail_by_cpu`` sets the slowest tenth of the
calls by critical-path CPU (what an idle machine's wall follows, unlike a loaded one's)
beside the median calls, part by part, with each group's message classes; each call also
records its class, budget, block size and the collector's passes meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import common
import numpy as np
import psycopg
from pg_side import server_cpu_ms

#: The store's calls recorded (those the store has).
STORE_CALLS = (
    "search", "search_many", "lexical_search", "query", "get_state", "record_uses", "write",
    "_sql_search",
)  # fmt: skip
#: The segments of the calling thread's path, in order.
SEGMENTS = ("before", "embed", "search_many", "lexical_wait", "after", "record_uses")
#: ``search_many``'s wall split: the calling thread's CPU and run-queue wait, the pooled
#: connection's checkout, the backend's CPU and run-queue wait, the in-process candidates.
SEARCH_PARTS = (
    "wall", "walk", "walk_backend_cpu", "walk_backend_queued", "walk_conn_wait",
    "search_many_cpu", "search_many_queued", "pool_in_process_cpu",
)  # fmt: skip


def _schedstat_ms(path: str) -> float:
    """The CPU ms a process or thread has run (``schedstat``'s first field, ns); 0 if gone."""
    return _schedstat(path)[0]


def _schedstat(path: str) -> tuple[float, float]:
    """The ms a process or thread has run and has waited on a run queue, ready to run but
    without a core (``schedstat``'s first two fields, ns); zeros if gone."""
    try:
        with open(path) as f:
            fields = f.read().split()
        return int(fields[0]) / 1e6, int(fields[1]) / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0


def _thread_stat() -> tuple[float, float]:
    """:func:`_schedstat` of the calling thread."""
    return _schedstat(f"/proc/self/task/{threading.get_native_id()}/schedstat")


def _native_threads() -> dict[int, float]:
    """This process's threads that Python does not know (onnxruntime's pool): tid → CPU ms."""
    python = {t.native_id for t in threading.enumerate()}
    out = {}
    for tid in os.listdir("/proc/self/task"):
        if int(tid) not in python:
            out[int(tid)] = _schedstat_ms(f"/proc/self/task/{tid}/schedstat")
    return out


_COUNTS: dict[int, list[int]] | None = None


def count_statements() -> dict[int, list[int]]:
    """Count, per connection (``id``), the statements its cursors send (``execute``,
    ``executemany``, ``copy``), those sent inside a pipeline, and the pipelines' syncs:
    round trips = statements − pipelined + syncs (as ``pg_side._count_statements``). The
    counters are installed once per process (psycopg's classes wrapped); every caller
    reads the same counts."""
    global _COUNTS
    if _COUNTS is not None:
        return _COUNTS
    from psycopg._pipeline_base import BasePipeline

    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])

    def counting(cls: Any, name: str, slot: int) -> None:
        original = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kw: Any) -> Any:
            conn = getattr(self, "_conn" if slot == 2 else "connection", None)
            row = counts[id(conn)]
            row[slot] += 1
            if slot == 0 and getattr(conn, "_pipeline", None) is not None:
                row[1] += 1
            return original(self, *args, **kw)

        setattr(cls, name, wrapper)

    for name in ("execute", "executemany", "copy"):
        counting(psycopg.Cursor, name, 0)
    counting(BasePipeline, "_enqueue_sync", 2)
    _COUNTS = counts
    return counts


class Timeline:
    """Records the events of the calls of one engine (module docstring)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._zero = time.perf_counter()
        self.statements = count_statements()

    def start(self) -> None:
        """A new call: forget the events, count from now."""
        with self._lock:
            self.events = []
            self._zero = time.perf_counter()

    def record(self, kind: str, name: str, began: float, cpu: float, **extra: Any) -> None:
        with self._lock:
            self.events.append({
                "kind": kind, "name": name, "thread": threading.current_thread().name,
                "t0": round((began - self._zero) * 1e3, 3),
                "t1": round((time.perf_counter() - self._zero) * 1e3, 3),
                "cpu": round(cpu, 3), **extra,
            })  # fmt: skip

    def wrap(self, owner: Any, name: str, kind: str = "store") -> None:
        """Record each call of ``owner.name``."""
        call = getattr(owner, name if name != "pool_search" else "search")

        def timed(*args: Any, **kw: Any) -> Any:
            began, cpu, (_, queued) = time.perf_counter(), time.thread_time(), _thread_stat()
            extra: dict[str, Any] = {}
            if name in ("_sql_search", "pool_search") and len(args) > 2:
                extra["k"] = int(args[2])
            try:
                return call(*args, **kw)
            finally:
                extra["queued"] = round(_thread_stat()[1] - queued, 3)
                self.record(kind, name, began, (time.thread_time() - cpu) * 1e3, **extra)

        setattr(owner, name if name != "pool_search" else "search", timed)

    def wrap_embed(self, embedder: Any) -> None:
        """Record each model run with the CPU of the model's own threads meanwhile."""
        call = embedder.embed

        def timed(texts: Sequence[str]) -> Any:
            began, cpu, pool = time.perf_counter(), time.thread_time(), _native_threads()
            try:
                return call(texts)
            finally:
                after = _native_threads()
                model = sum(after[t] - pool.get(t, after[t]) for t in after)
                self.record("embed", "embed", began, (time.thread_time() - cpu) * 1e3,
                            model_threads_cpu=round(model, 3), texts=len(texts))  # fmt: skip

        embedder.embed = timed

    def wrap_connections(self, store: Any) -> Callable[[], Any]:
        """Record each pooled connection held, with its backend's CPU meanwhile."""
        lend = store._connection

        @contextlib.contextmanager
        def held() -> Iterator[Any]:
            asked, cpu = time.perf_counter(), time.thread_time()
            with lend() as conn:
                pid = conn.info.backend_pid
                began, backend = time.perf_counter(), _schedstat(f"/proc/{pid}/schedstat")
                sent = list(self.statements[id(conn)])
                try:
                    yield conn
                finally:
                    spent, queued = _schedstat(f"/proc/{pid}/schedstat")
                    now = self.statements[id(conn)]
                    statements, pipelined, syncs = (now[i] - sent[i] for i in range(3))
                    self.record("conn", str(pid), began, (time.thread_time() - cpu) * 1e3,
                                backend_cpu=round(spent - backend[0], 3),
                                backend_queued=round(queued - backend[1], 3),
                                wait=round((began - asked) * 1e3, 3), statements=statements,
                                round_trips=statements - pipelined + syncs)  # fmt: skip

        return held


def instrument(engine: Any, timeline: Timeline) -> None:
    """Wrap ``engine``'s store, its connections and its model for ``timeline``."""
    store = engine.store
    held = timeline.wrap_connections(store)
    store._connection = held
    for part in (store._working, store._learnings, store._projected):
        if part is not None and hasattr(part, "_connect"):
            part._connect = held
    for name in STORE_CALLS:
        if hasattr(store, name):
            timeline.wrap(store, name)
    if store._learnings is not None:
        timeline.wrap(store._learnings, "search", kind="learnings")
    if getattr(store, "_projected", None) is not None:  # the pool's candidates held in process
        timeline.wrap(store._projected, "pool_search", kind="pool")
    timeline.wrap_embed(engine.embedder.inner)


def path_of(call: dict[str, Any]) -> dict[str, float]:
    """The calling thread's segments of one call (ms), the walk's wall and backend CPU,
    the learnings' wall, and the CPU the call's main thread and its backends spent."""
    events = call["events"]
    main = [e for e in events if e["thread"] == "MainThread"]

    def first(name: str, where: Sequence[dict[str, Any]] = events) -> dict[str, Any] | None:
        found = [e for e in where if e["name"] == name]
        return min(found, key=lambda e: e["t0"]) if found else None

    embed, many, uses = first("embed"), first("search_many", main), first("record_uses", main)
    lexical = [e for e in events if e["name"] == "lexical_search"]
    if embed is None or many is None:
        return {}
    lexical_end = max((e["t1"] for e in lexical), default=0.0)
    walk = [e for e in main if e["kind"] == "conn" and many["t0"] <= e["t0"] <= many["t1"]]
    learned = [e for e in events if e["kind"] == "learnings"]
    ready = max(many["t1"], lexical_end)
    return {
        "wall": call["ms"],
        "before": embed["t0"],
        "embed": embed["t1"] - embed["t0"],
        "embed_cpu": embed["cpu"] + embed.get("model_threads_cpu", 0.0),
        "search_many": many["t1"] - many["t0"],
        "walk": sum(e["t1"] - e["t0"] for e in walk),
        "walk_backend_cpu": sum(e["backend_cpu"] for e in walk),
        "walk_k": max(
            (e.get("k", 0) for e in main if e["name"] in ("_sql_search", "pool_search")), default=0
        ),
        "walk_backend_queued": sum(e.get("backend_queued", 0.0) for e in walk),
        "walk_conn_wait": sum(e["wait"] for e in walk),
        "search_many_cpu": many["cpu"],
        "search_many_queued": many.get("queued", 0.0),
        "pool_in_process_cpu": sum(e["cpu"] for e in main if e["name"] == "pool_search"),
        "learnings": sum(e["t1"] - e["t0"] for e in learned),
        "lexical_wait": max(0.0, lexical_end - many["t1"]),
        "after": (uses["t0"] if uses else call["ms"]) - ready,
        "record_uses": (uses["t1"] - uses["t0"]) if uses else 0.0,
        "main_cpu": call["main_cpu"],
        "process_cpu": call["cpu"],
        "backend_cpu": sum(e["backend_cpu"] for e in events if e["kind"] == "conn"),
        "main_backends_cpu": sum(e["backend_cpu"] for e in main if e["kind"] == "conn"),
    }


def summarize(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians of each path's parts over all calls and over the calls up to the median,
    from the median to the 90th percentile and above it; the walk's backend CPU by depth."""
    paths = sorted((p for p in (path_of(c) for c in calls) if p), key=lambda p: p["wall"])
    n = len(paths)
    groups = {
        "all": paths, "to_p50": paths[: n // 2], "p50_to_p90": paths[n // 2 : (9 * n) // 10],
        "above_p90": paths[(9 * n) // 10 :],
    }  # fmt: skip
    out: dict[str, Any] = {"calls": n, "median_ms": {}}
    for name, group in groups.items():
        if group:
            out["median_ms"][name] = {
                k: round(statistics.median(p[k] for p in group), 2) for k in group[0]
            }
    depth: dict[str, list[float]] = defaultdict(list)
    for p in paths:
        k = int(p["walk_k"])
        depth["k ≤ 50" if k <= 50 else "k 51-100" if k <= 100 else "k > 100"].append(
            p["walk_backend_cpu"]
        )
    out["walk_backend_cpu_by_k"] = {
        k: {"calls": len(v), "median_ms": round(statistics.median(v), 2)}
        for k, v in sorted(depth.items())
    }
    return out


def by_store_call(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per store call (the innermost recorded call on the connection's thread that holds
    it): how many a ``context()`` makes, and the statements, round trips and backend CPU
    (ms) its connections cost a ``context()``, mean and median over the calls."""
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for call in calls:
        events = call["events"]
        owners = [e for e in events if e["kind"] in ("store", "learnings", "pool")]
        totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for e in owners:
            totals[e["name"]]["calls"] += 1
        for conn in (e for e in events if e["kind"] == "conn"):
            around = [o for o in owners if o["thread"] == conn["thread"]
                      and o["t0"] <= conn["t0"] and conn["t1"] <= o["t1"]]  # fmt: skip
            name = min(around, key=lambda o: o["t1"] - o["t0"])["name"] if around else "other"
            row = totals[name]
            row["connections"] += 1
            for what in ("statements", "round_trips", "backend_cpu"):
                row[what] += conn.get(what, 0.0)
        for name, row in totals.items():
            for what in ("calls", "connections", "statements", "round_trips", "backend_cpu"):
                per[name][what].append(row.get(what, 0.0))
    n = max(1, len(calls))
    out: dict[str, Any] = {}
    for name, rows in sorted(per.items()):
        out[name] = {
            what: {
                "mean": round(sum(v) / n, 3),  # calls without it count as 0
                "median": round(statistics.median(list(v) + [0.0] * (n - len(v))), 3),
            }
            for what, v in rows.items()
        }
    totals_each = [
        {what: sum(e.get(what, 0.0) for e in c["events"] if e["kind"] == "conn")
         for what in ("statements", "round_trips", "backend_cpu")}
        for c in calls
    ]  # fmt: skip
    out["all"] = {
        what: {
            "mean": round(sum(t[what] for t in totals_each) / n, 3),
            "median": round(statistics.median(t[what] for t in totals_each), 3),
        }
        for what in ("statements", "round_trips", "backend_cpu")
    }
    server = [c["server_cpu"] for c in calls if "server_cpu" in c]
    if server:
        out["all"]["server_cpu"] = {
            "mean": round(sum(server) / len(server), 3),
            "median": round(statistics.median(server), 3),
        }
    return out


def idle_estimate(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What each call's wall would be on an idle two-core machine, from its CPU alone: at
    least its critical path (the calling thread, the model's own threads during the
    embedding, and the backends of the calling thread's connections: the path runs one
    after the other) and at least half of all its CPU (the worker's and the server's,
    spread over two cores); percentiles of the larger of the two, and of each."""
    path, half, bound = [], [], []
    for call in calls:
        events = call["events"]
        main = [e for e in events if e["thread"] == "MainThread"]
        model = sum(e.get("model_threads_cpu", 0.0) for e in main if e["kind"] == "embed")
        backends = sum(e["backend_cpu"] for e in main if e["kind"] == "conn")
        critical = call["main_cpu"] + model + backends
        server = call.get(
            "server_cpu", sum(e["backend_cpu"] for e in events if e["kind"] == "conn")
        )
        path.append(critical)
        half.append((call["cpu"] + server) / 2.0)
        bound.append(max(path[-1], half[-1]))
    return {
        name: {f"p{q}": round(common.percentile(v, q), 2) for q in (50, 95, 99)}
        for name, v in (("critical_path_cpu", path), ("half_of_all_cpu", half), ("bound", bound))
    }


#: The parts of a call's CPU :func:`tail_by_cpu` compares (ms; see :func:`cpu_parts`).
CPU_PARTS = (
    "critical_path_cpu", "main_cpu", "embed_cpu", "pool_search_cpu", "record_uses_cpu",
    "main_rest_cpu", "main_backends_cpu", "pool_backend_cpu", "uses_backend_cpu",
    "other_threads_cpu", "server_cpu", "process_cpu", "gc_ms", "lexical_searches",
    "walk_k", "budget", "selected",
)  # fmt: skip


def cpu_parts(call: dict[str, Any]) -> dict[str, float]:
    """One call's CPU by part (ms): its critical path (the calling thread, the model's own
    threads during the embedding, the backends of the calling thread's connections), the
    calling thread's embedding, pool search (``search_many``) and counted uses and the rest
    of it (classify, scoring, selection, assembly), those backends' CPU (the pool's walk's,
    the counted uses'), the other threads' CPU (the process's less the calling thread's),
    the server's, the collector's passes, how many lexical searches it made, its pool's
    depth, budget and block size."""
    events = call["events"]
    main = [e for e in events if e["thread"] == "MainThread"]

    def within(name: str) -> list[dict[str, Any]]:
        """The calling thread's connections held inside its store call ``name``."""
        outer = [e for e in main if e["name"] == name and e["kind"] == "store"]
        return [c for c in main if c["kind"] == "conn"
                and any(o["t0"] <= c["t0"] and c["t1"] <= o["t1"] for o in outer)]  # fmt: skip

    embed = [e for e in main if e["kind"] == "embed"]
    model = sum(e.get("model_threads_cpu", 0.0) for e in embed)
    backends = sum(e["backend_cpu"] for e in main if e["kind"] == "conn")
    store_cpu = {
        name: sum(e["cpu"] for e in main if e["name"] == name and e["kind"] == "store")
        for name in ("search_many", "record_uses")
    }
    embed_cpu = sum(e["cpu"] for e in embed)
    return {
        "critical_path_cpu": call["main_cpu"] + model + backends,
        "main_cpu": call["main_cpu"],
        "embed_cpu": embed_cpu + model,
        "pool_search_cpu": store_cpu["search_many"],
        "record_uses_cpu": store_cpu["record_uses"],
        "main_rest_cpu": call["main_cpu"] - embed_cpu - sum(store_cpu.values()),
        "main_backends_cpu": backends,
        "pool_backend_cpu": sum(c["backend_cpu"] for c in within("search_many")),
        "uses_backend_cpu": sum(c["backend_cpu"] for c in within("record_uses")),
        "other_threads_cpu": call["cpu"] - call["main_cpu"],
        "server_cpu": call.get("server_cpu", 0.0),
        "process_cpu": call["cpu"],
        "gc_ms": call.get("gc_ms", 0.0),
        "lexical_searches": sum(
            1 for e in events if e["name"] == "lexical_search" and e["kind"] == "store"
        ),
        "walk_k": max(
            (e.get("k", 0) for e in main if e["name"] in ("_sql_search", "pool_search")), default=0
        ),
        "budget": call.get("budget", 0),
        "selected": call.get("selected", 0),
    }


def tail_by_cpu(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The slowest tenth of the calls by critical-path CPU (what an idle machine's wall
    follows) against the calls up to the median and between the median and the 90th
    percentile: each group's median of every :data:`CPU_PARTS` part, and how many of its
    calls were of each complexity and intent."""
    rows = sorted(((cpu_parts(c), c) for c in calls), key=lambda pair: pair[0]["critical_path_cpu"])
    n = len(rows)
    groups = {"to_p50": rows[: n // 2], "p50_to_p90": rows[n // 2 : (9 * n) // 10],
              "slowest_tenth": rows[(9 * n) // 10 :]}  # fmt: skip
    out: dict[str, Any] = {"calls": n}
    for name, group in groups.items():
        if not group:
            continue
        out[name] = {
            "calls": len(group),
            "median": {k: round(statistics.median(p[k] for p, _ in group), 2) for k in CPU_PARTS},
            "complexity": dict(Counter(c.get("complexity", "?") for _, c in group)),
            "intent": dict(Counter(c.get("intent", "?") for _, c in group)),
        }
    return out


class Collector:
    """The milliseconds the garbage collector's passes take, by generation, while it is
    :meth:`start`-ed (``gc.callbacks``): a full pass over a large process is tens of ms."""

    def __init__(self) -> None:
        self.ms = 0.0
        self.passes: Counter[int] = Counter()
        self._began = 0.0
        gc.callbacks.append(self._callback)

    def start(self) -> None:
        """Count from now."""
        self.ms, self.passes = 0.0, Counter()

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.ms += (time.perf_counter() - self._began) * 1e3
            self.passes[int(info.get("generation", 0))] += 1

    def close(self) -> None:
        """Stop counting."""
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._callback)


def call_shape(result: Any) -> dict[str, Any]:
    """What kind of call a ``context()`` result was: the message's class (complexity,
    intent), its budget, and how many memories its block holds (none for a result
    without the gate's record)."""
    gated = getattr(result, "gated", None)
    if gated is None:
        return {}
    c = gated.classification
    return {
        "complexity": c.complexity.value,
        "intent": c.intent.value,
        "budget": gated.budget.tokens,
        "selected": len(gated.selected),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder
    from engrain.recall.gate import LEARNING_KINDS
    from engrain.store.base import MemoryFilter

    queries = common.make_queries(args.queries + args.warmup, seed=args.seed)
    embedder = MiniLMEmbedder(spinning=args.spinning == "on", split=args.split)
    with contextlib.ExitStack() as stack:
        if args.hold_fill:
            from engrain.store.postgres.fill import FILL_LOCK

            db = stack.enter_context(psycopg.connect(args.url, autocommit=True))
            db.execute("SELECT pg_advisory_lock(%s)", (FILL_LOCK,))
        data = stack.enter_context(__import__("tempfile").TemporaryDirectory(prefix="pg-timeline-"))
        engine = Engine(settings=Settings(url=args.url, data_dir=Path(data)), embedder=embedder)
        stack.callback(engine.close)
        typed = MemoryFilter(kinds=LEARNING_KINDS)
        engine.store.search(args.user, np.ones(384, dtype=np.float32), 1, typed)
        wait = getattr(engine.store, "wait_for_learnings", None)
        if wait is not None:
            wait(args.user, 1800.0)
        # and the graph of its learnings, if they are too many to rank in process
        graphed = getattr(engine.store, "wait_for_learnings_graph", None)
        if graphed is not None:
            engine.store.search(args.user, np.ones(384, dtype=np.float32), 1, typed)
            graphed(args.user, 1800.0)
        # and the pool's candidates held in process, if the store keeps them (projected.py)
        engine.store.search(args.user, np.ones(384, dtype=np.float32), 1, MemoryFilter())
        held = getattr(engine.store, "wait_for_projection", None)
        if held is not None and getattr(engine.store, "_projected", None) is not None:
            held(args.user, 1800.0)
        for message in queries[args.queries :]:
            engine.context(message, args.user, now=common.NOW)
        timeline = Timeline()
        instrument(engine, timeline)
        collector = Collector()
        stack.callback(collector.close)
        calls = []
        for message in queries[: args.queries]:
            timeline.start()
            collector.start()
            server = server_cpu_ms(args.server_pid)
            cpu, main = time.process_time(), time.thread_time()
            began = time.perf_counter()
            result = engine.context(message, args.user, now=common.NOW)
            server = server_cpu_ms(args.server_pid) - server
            calls.append({
                **({"server_cpu": round(server, 3)} if args.server_pid else {}),
                "query": message,
                "ms": round((time.perf_counter() - began) * 1e3, 3),
                "cpu": round((time.process_time() - cpu) * 1e3, 3),
                "main_cpu": round((time.thread_time() - main) * 1e3, 3),
                "laps": dict(getattr(result.gated, "timings_ms", None) or {}),
                **call_shape(result),
                "gc_ms": round(collector.ms, 3),
                "gc_passes": dict(collector.passes),
                "events": sorted(timeline.events, key=lambda e: e["t0"]),
            })  # fmt: skip
    return {
        "benchmark": "pg_timeline",
        "queries": args.queries,
        "seed": args.seed,
        "spinning": args.spinning,
        "split": args.split,
        "load_1min": round(os.getloadavg()[0], 2),
        "machine": common.machine_info(),
        "pool_index": getattr(getattr(engine.store, "_projected", None), "kind", "sql walk"),
        "projected_calls": dict(getattr(engine.store._projected, "calls", None) or {}),
        "summary": summarize(calls),
        "by_store_call": by_store_call(calls),
        "idle_estimate_ms": idle_estimate(calls),
        "tail_by_cpu": tail_by_cpu(calls),
        "calls": calls,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--queries", type=int, default=80)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=8, help="of common.make_queries")
    parser.add_argument("--spinning", choices=("on", "off"), default="off")
    parser.add_argument("--split", action="store_true", help="single-threaded model runs")
    parser.add_argument("--hold-fill", action="store_true", help="no filler runs meanwhile")
    parser.add_argument("--server-pid", type=int, help="the postmaster's: its CPU a call")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    report = run(args)
    common.write_json(args.out, report)
    for group, medians in report["summary"]["median_ms"].items():
        print(group, {k: medians[k] for k in (*SEGMENTS, *SEARCH_PARTS)})
    print("walk backend CPU by depth", report["summary"]["walk_backend_cpu_by_k"])
    print("pool index", report["pool_index"], report["projected_calls"])
    print("idle estimate", report["idle_estimate_ms"])
    for group, row in report["tail_by_cpu"].items():
        if isinstance(row, dict):
            print("by CPU", group, row["calls"], row["median"], row["complexity"])
    for name, row in report["by_store_call"].items():
        print(name, {what: v["mean"] for what, v in row.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
