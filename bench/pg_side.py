"""``Engine.context()`` of two source trees side by side, on one PostgreSQL database.

    from pg_side import side_by_side
    side_by_side({"new": Path("."), "base": Path("/tmp/base")}, url, users, queries, ...)

Each tree gets a worker process (``python bench/pg_side.py``, with ``<tree>/src`` first on
``PYTHONPATH``, so it imports that tree's engrain) holding one engine with the real
embedder. The parent sends each query to every worker in turn, one at a time (which worker
goes first alternates), so the two trees see the same machine load, the same database and
the same queries; a worker answers with the call's milliseconds, the engine's own stage laps
(``Gated.timings_ms``: classify, embed, candidates, score, …) and the milliseconds spent in
each store call (overlapping reads counted in full). Cold start — a new engine's first
``context()``, the model already loaded and run once — is measured ``cold_rounds`` times per
tree, alternating, each on a new engine, and the loads each one started (a large user's held
learnings and graphs) are waited for, untimed, before the next (since session 26: before,
each was measured beside the other tree's loads and its own last engine's, and the first
included the model's first run, ~0.8 s).

Before the warm-up each worker waits, untimed, until its store serves the queried users from
a working set in process if it keeps them (``PostgresStore.wait_for_working_set``); the
seconds that took are reported per tree (``working_set_load_s``).

The workers only read and count accesses, and write context records (state documents), so
neither changes the revision of the user the other serves: each keeps its caches.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: How a worker learns whether its model's intra-op threads spin between calls
#: (``MiniLMEmbedder(spinning=…)``, the ``onnx_spinning`` setting): "1" or "0".
SPINNING_ENV = "ENGRAIN_BENCH_SPINNING"
#: Whether a worker's model runs single-threaded, a multi-text call split over the cores
#: (``MiniLMEmbedder(split=…)``, the ``onnx_split`` setting): "1", or "0" (the default).
SPLIT_ENV = "ENGRAIN_BENCH_SPLIT"
#: Store calls timed inside ``context()`` (those a tree's store has).
STORE_CALLS = (
    "search", "search_many", "lexical_search", "query", "get", "get_state", "record_access",
    "record_uses", "write",
)  # fmt: skip


def worker_env(
    tree: Path, *, spinning: bool, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a worker for ``tree``: that tree's ``src`` first on the path,
    whether its model threads spin (:data:`SPINNING_ENV`), and ``extra`` variables."""
    env = {**os.environ, **(extra or {})}
    env[SPINNING_ENV] = "1" if spinning else "0"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tree / "src"), str(HERE), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    return env


def worker_embedder() -> Any:
    """The worker's model, its threads spinning or not as :data:`SPINNING_ENV` says, split
    or not as :data:`SPLIT_ENV` says."""
    from engrain.embed.minilm import MiniLMEmbedder

    return MiniLMEmbedder(
        spinning=os.environ.get(SPINNING_ENV, "1") == "1",
        split=os.environ.get(SPLIT_ENV, "0") == "1",
    )


class Worker:
    """One worker process serving ``context()`` calls for the engrain of ``tree``."""

    def __init__(
        self,
        name: str,
        tree: Path,
        url: str,
        data_dir: Path,
        *,
        spinning: bool = True,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        env = worker_env(tree, spinning=spinning, extra=extra)
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), url, str(data_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        self.where = self.ask({"op": "hello"})["engrain"]

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request; its answer (the worker's error re-raised here)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"worker {self.name}: {answer['error']}")
        return answer

    def close(self) -> None:
        """Ask the worker to stop and wait for it."""
        if self.process.poll() is None:
            with contextlib.suppress(RuntimeError, BrokenPipeError):
                self.ask({"op": "quit"})
            self.process.wait(timeout=60)


def side_by_side(
    trees: dict[str, Path],
    url: str,
    users: Sequence[str],
    queries: Sequence[str],
    seed: int,
    data_dir: Path,
    *,
    cold_rounds: int = 3,
    warmup: int = 10,
    urls: dict[str, str] | None = None,
    spinning: dict[str, bool] | None = None,
    server_pid: int | Sequence[int] | None = None,
    environ: Mapping[str, Mapping[str, str]] | None = None,
    blocks: bool = True,
    threads: int = 0,
    threaded_queries: Sequence[str] = (),
    own_servers: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Latency of ``context()`` per tree over the same queries, alternating (module
    docstring): per tree p50/p95/p99, cold start, stage laps and store calls (mean ms per
    call), and the ratios of the first tree's numbers to the second's. ``urls`` gives a
    tree another database than ``url`` (a copy of the corpus in that tree's schema, when
    the trees' schemas differ); ``spinning`` whether a tree's model threads spin between
    calls (default: they do, ``MiniLMEmbedder``'s default). With ``server_pid`` (the
    postmaster's) each call's CPU is also counted on the server: every process of that
    server, the call's backends and its background workers (the trees take turns, so the
    other tree's backends are idle meanwhile). ``environ``: variables set for a tree's
    worker only (``ENGRAIN_PG_WORKING_SET``, say). With ``blocks``, after the timed calls
    each tree previews every query's block (``Engine.preview``: nothing written, so both
    read the same database) and ``blocks`` says how many are identical (a SHA-256 each).
    With ``threads`` > 1, before the blocks, ``threaded_queries`` (default: the same
    queries, whose vectors the engines still hold) are asked ``threads`` at a time on each
    worker's one engine, alternating in rounds (``threads``: calls/s, p50 / p95, the
    worker's and the server's CPU a call). ``own_servers`` (each tree's database on a server
    of its own, ``--baseline-keep``): each tree's *cycle*, from the start of one of its calls
    to the start of its next (the other tree's call between touches neither its worker nor
    its server), is counted too: its server's CPU and its worker's process CPU a cycle, which
    include what a call leaves to run after it returns (counted uses written after the call,
    ``ENGRAIN_DEFER_USES``), where the per-call counts leave it out or give it to the other
    tree's call. Every call also reports its calling thread's CPU (``thread_cpu_ms``)."""
    import common
    import numpy as np

    rng = np.random.default_rng(seed)
    who = [users[int(i)] for i in rng.integers(0, len(users), len(queries))]
    urls, spinning, environ = urls or {}, spinning or {}, environ or {}
    workers = [
        Worker(
            name,
            tree,
            urls.get(name, url),
            data_dir,
            spinning=spinning.get(name, True),
            extra=environ.get(name),
        )
        for name, tree in trees.items()
    ]
    try:
        cold: dict[str, list[float]] = defaultdict(list)
        for r in range(cold_rounds):
            for w in workers if r % 2 == 0 else workers[::-1]:
                answer = w.ask({"op": "open", "message": queries[0], "user": who[0]})
                cold[w.name].append(answer["cold_s"])
                # the loads that open started, done before the next cold start (untimed):
                # else each is measured beside the other tree's and its own last engine's
                w.ask({"op": "settle", "users": [who[0]]})
        settled: dict[str, float] = {}
        for w in workers:  # a working set in process (this tree's large users) loaded first
            settled[w.name] = w.ask({"op": "settle", "users": sorted(set(who))})["settle_s"]
        for i in range(min(warmup, len(queries))):
            for w in workers:
                w.ask({"op": "context", "message": queries[-1 - i], "user": who[-1 - i]})
        times: dict[str, list[float]] = defaultdict(list)
        laps: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        calls: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        counted: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        each: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for i, (message, user) in enumerate(zip(queries, who, strict=True)):
            for w in workers if i % 2 == 0 else workers[::-1]:
                if own_servers is not None and w.name in own_servers:
                    answer_own = server_cpu_ms(own_servers[w.name])
                before = server_cpu_ms(server_pid)
                answer = w.ask({"op": "context", "message": message, "user": user})
                if server_pid is not None:
                    answer["server_cpu_ms"] = server_cpu_ms(server_pid) - before
                if own_servers is not None and w.name in own_servers:
                    answer["own_server_at_ms"] = answer_own
                times[w.name].append(answer["ms"])
                each[w.name].append({"query": i, **answer})
                for stage, ms in answer["laps"].items():
                    laps[w.name][stage].append(ms)
                for call, ms in answer["calls"].items():
                    calls[w.name][call].append(ms)
                for what, n in answer.get("statements", {}).items():
                    counted[w.name][what].append(n)
        out: dict[str, Any] = {"order": "alternating per query", "trees": {}}
        if threads > 1:
            # other questions than the timed ones: each engine keeps its recent query vectors
            asked = list(threaded_queries) or list(queries)
            askers = [users[int(i)] for i in rng.integers(0, len(users), len(asked))]
            out["threads"] = _threaded(workers, asked, askers, threads, server_pid)
        if blocks:
            # every query's block, previewed (nothing written) by each tree after the timed
            # calls, on the same database: what differs is the trees' code
            asked = [list(c) for c in zip(queries, who, strict=True)]
            digests = {w.name: w.ask({"op": "blocks", "calls": asked})["blocks"] for w in workers}
            first_digests, *others = digests.values()
            differ = [i for i, d in enumerate(first_digests) if any(o[i] != d for o in others)]
            out["blocks"] = {"queries": len(queries), "identical": len(queries) - len(differ),
                             "differ": differ}  # fmt: skip
        for w in workers:
            row: dict[str, Any] = common.summarize(times[w.name])
            row["engrain"] = w.where
            row["onnx_spinning"] = spinning.get(w.name, True)
            row["environ"] = dict(environ.get(w.name, {}))
            row["database"] = urls.get(w.name, url).split("?")[0]
            row["cold_start_s"] = {
                "median": round(float(np.median(cold[w.name])), 3),
                "runs": [round(c, 3) for c in cold[w.name]],
            }
            row["working_set_load_s"] = round(settled[w.name], 2)
            for what in ("cpu_ms", "server_cpu_ms", "thread_cpu_ms"):  # steadier than wall time
                spent = [c[what] for c in each[w.name] if what in c]
                if spent:
                    row[f"{what[:-3]}_per_context_ms"] = {
                        "median": round(float(np.median(spent)), 2),
                        "mean": round(float(np.mean(spent)), 2),
                    }
            row.update(_cycles(each[w.name]))
            row["laps_mean_ms"] = {k: round(float(np.mean(v)), 2) for k, v in laps[w.name].items()}
            row["laps_p95_ms"] = {
                k: round(common.percentile(v, 95), 2) for k, v in laps[w.name].items()
            }
            row["store_ms_per_context"] = {
                k: round(float(np.mean(v)), 2) for k, v in calls[w.name].items()
            }
            row["store_ms_p50_p95"] = {  # each store call's wall in the calls that made it
                k: [round(common.percentile(v, 50), 2), round(common.percentile(v, 95), 2)]
                for k, v in calls[w.name].items()
            }
            row["statements_per_context"] = {
                k: round(float(np.sum(v)) / len(queries), 2) for k, v in counted[w.name].items()
            }
            memory = w.ask({"op": "rss"})
            row["rss_mb"] = memory["rss_mb"]
            row["rss_peak_mb"] = memory.get("rss_peak_mb")  # the worker's peak, its loads'
            # store calls of large users served from a working set / by SQL (whole run)
            row["working_set_calls"] = memory.get("working_set_calls", {})
            row["learnings_calls"] = memory.get("learnings_calls", {})
            row["projected_calls"] = memory.get("projected_calls", {})
            row["projected_graphs"] = memory.get("projected_graphs", {})
            row["learnings_graph_calls"] = memory.get("learnings_graph_calls", {})
            # the tail: the slowest 5% of the calls, each with its laps and store calls
            slowest = sorted(each[w.name], key=lambda c: -c["ms"])[: max(1, len(queries) // 20)]
            row["slowest"] = [_rounded(c) for c in slowest]
            out["trees"][w.name] = row
        first, second = (out["trees"][w.name] for w in workers[:2])
        out["ratio_first_to_second"] = {
            k: round(first[k] / second[k], 3) for k in ("p50_ms", "p95_ms", "p99_ms", "mean_ms")
        }
        return out
    finally:
        for w in workers:
            w.close()


def concurrent_calls(engine: Any, calls: Sequence[Sequence[str]], threads: int) -> dict[str, Any]:
    """``engine.context`` for each (message, user) of ``calls``, ``threads`` at a time on
    one engine: the wall seconds of all, the process's CPU ms a call, each call's ms."""
    from concurrent.futures import ThreadPoolExecutor

    import common

    def one(call: Sequence[str]) -> float:
        start = time.perf_counter()
        engine.context(call[0], call[1], now=common.NOW)
        return (time.perf_counter() - start) * 1000.0

    cpu, start = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(threads, thread_name_prefix="bench-caller") as pool:
        each = list(pool.map(one, calls))
    return {
        "seconds": time.perf_counter() - start,
        "cpu_ms": (time.process_time() - cpu) * 1000.0 / max(1, len(calls)),
        "ms": each,
    }


def server_cpu_ms(postmaster: int | Sequence[int] | None) -> float:
    """CPU time, ms, of the postmaster ``postmaster`` (or of several, each tree's database
    on a server of its own) and its children so far (0 without one): each process's time
    on a CPU from ``/proc/<pid>/schedstat`` (nanoseconds; the user and system ticks of
    ``/proc/<pid>/stat`` count in 10 ms steps, coarser than a call's share). Children that
    ended since the last reading take their CPU with them: a pooled store's backends live
    as long as its connections."""
    if postmaster is None:
        return 0.0
    postmasters = {postmaster} if isinstance(postmaster, int) else set(postmaster)
    nanoseconds = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if int(entry) not in postmasters and parent not in postmasters:
                continue
            with open(f"/proc/{entry}/schedstat") as f:
                nanoseconds += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return nanoseconds / 1e6


def _threaded(
    workers: Sequence[Worker],
    queries: Sequence[str],
    who: Sequence[str],
    threads: int,
    server_pid: int | Sequence[int] | None,
) -> dict[str, Any]:
    """The queries again, ``threads`` calls at a time on each worker's one engine, in
    rounds of ``4 × threads`` calls that alternate between the workers (which goes first
    alternates): per tree calls/s, call p50 / p95 ms, the worker's and the server's CPU a
    call (the other worker is idle meanwhile)."""
    import common

    size = 4 * threads
    rounds = [
        [[q, u] for q, u in zip(queries[i : i + size], who[i : i + size], strict=True)]
        for i in range(0, len(queries), size)
    ]
    seconds: dict[str, float] = defaultdict(float)
    each: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    server: dict[str, float] = defaultdict(float)
    for r, calls in enumerate(rounds):
        for w in workers if r % 2 == 0 else workers[::-1]:
            before = server_cpu_ms(server_pid)
            answer = w.ask({"op": "threads", "calls": calls, "threads": threads})
            server[w.name] += server_cpu_ms(server_pid) - before
            seconds[w.name] += answer["seconds"]
            each[w.name].extend(answer["ms"])
            cpu[w.name].append(answer["cpu_ms"] * len(calls))
    out: dict[str, Any] = {"threads": threads, "calls": len(queries), "trees": {}}
    for w in workers:
        summary = common.summarize(each[w.name])
        out["trees"][w.name] = {
            "calls_per_s": round(len(queries) / seconds[w.name], 2),
            "p50_ms": summary["p50_ms"],
            "p95_ms": summary["p95_ms"],
            "cpu_per_context_ms": round(sum(cpu[w.name]) / len(queries), 2),
            "server_cpu_per_context_ms": round(server[w.name] / len(queries), 2),
        }
    return out


def _cycles(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A tree's CPU a cycle (``side_by_side``'s ``own_servers``): from the start of each of
    its calls to the start of its next, its server's and its worker's process CPU, medians
    and means over the cycles (one fewer than the calls)."""
    import numpy as np

    out: dict[str, Any] = {}
    for at, name in (("own_server_at_ms", "server_cpu_per_cycle_ms"),
                     ("cpu_at_ms", "cpu_per_cycle_ms")):  # fmt: skip
        marks = [c[at] for c in calls if at in c]
        spans = [b - a for a, b in itertools.pairwise(marks)]
        if spans:
            out[name] = {"median": round(float(np.median(spans)), 2),
                         "mean": round(float(np.mean(spans)), 2)}  # fmt: skip
    return out


def _rounded(call: dict[str, Any]) -> dict[str, Any]:
    """A call's record with its milliseconds rounded to 0.01."""
    return {
        k: round(v, 2) if isinstance(v, float) else _rounded(v) if isinstance(v, dict) else v
        for k, v in call.items()
    }


# -- the worker -------------------------------------------------------------------------


def _rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory now (``VmHWM``: its peak so far), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def _count_statements(lock: threading.Lock) -> dict[str, int]:
    """Count the statements every psycopg cursor of this process sends (``execute``,
    ``executemany``, ``copy``) and the connections taken from any pool, in a dict the
    caller clears; a statement inside a pipeline is counted though it shares a round trip
    with its neighbours (``pipelined`` counts those, ``syncs`` the pipelines' round trips:
    round trips = statements − pipelined + syncs)."""
    import psycopg
    import psycopg_pool

    counts: dict[str, int] = defaultdict(int)

    def counting(cls: Any, name: str, label: str) -> None:
        original = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kw: Any) -> Any:
            with lock:
                counts[label] += 1
                conn = getattr(self, "connection", None)
                if getattr(conn, "_pipeline", None) is not None:
                    counts["pipelined"] += 1
            return original(self, *args, **kw)

        setattr(cls, name, wrapper)

    counting(psycopg.Cursor, "execute", "statements")
    counting(psycopg.Cursor, "executemany", "statements")
    counting(psycopg.Cursor, "copy", "statements")
    counting(psycopg_pool.ConnectionPool, "getconn", "connections")
    # a pipeline's sync: one round trip for everything queued since the last one
    from psycopg._pipeline_base import BasePipeline

    counting(BasePipeline, "_enqueue_sync", "syncs")
    return counts


def _serve(url: str, data_dir: Path) -> None:
    """Answer requests on stdin, one JSON line each, until ``quit``."""
    import common
    import numpy as np

    import engrain
    from engrain import Engine, Settings
    from engrain.recall.gate import LEARNING_KINDS
    from engrain.store.base import MemoryFilter

    TYPED = MemoryFilter(kinds=LEARNING_KINDS)  # the gate's learnings' search
    embedder = worker_embedder()
    embedder.embed(["the model's first run"])  # ~0.8 s once a process: not a store's cold start
    engine: Any = None
    spent: dict[str, float] = defaultdict(float)
    lock = threading.Lock()
    statements = _count_statements(lock)

    def timed(name: str, call: Any) -> Any:
        def wrapper(*args: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return call(*args, **kw)
            finally:
                with lock:
                    spent[name] += (time.perf_counter() - start) * 1000.0

        return wrapper

    out = sys.stdout
    sys.stdout = sys.stderr  # anything the engine prints stays off the protocol
    for line in sys.stdin:
        request = json.loads(line)
        try:
            op = request["op"]
            if op == "quit":
                break
            if op == "hello":
                answer: dict[str, Any] = {"engrain": str(Path(engrain.__file__).parent)}
            elif op == "open":
                if engine is not None:
                    engine.close()
                start = time.perf_counter()
                engine = Engine(settings=Settings(url=url, data_dir=data_dir), embedder=embedder)
                engine.context(request["message"], request["user"], now=common.NOW)
                answer = {"cold_s": time.perf_counter() - start}
                for name in STORE_CALLS:
                    if hasattr(engine.store, name):
                        setattr(engine.store, name, timed(name, getattr(engine.store, name)))
            elif op == "context":
                spent.clear()
                statements.clear()
                cpu = time.process_time()
                mine = time.thread_time()
                start = time.perf_counter()
                result = engine.context(request["message"], request["user"], now=common.NOW)
                ms = (time.perf_counter() - start) * 1000.0
                thread_ms = (time.thread_time() - mine) * 1000.0
                cpu_ms = (time.process_time() - cpu) * 1000.0
                gated = getattr(result, "gated", None)
                with lock:
                    answer = {
                        "ms": ms,
                        "cpu_ms": cpu_ms,
                        "thread_cpu_ms": thread_ms,
                        "cpu_at_ms": cpu * 1000.0,
                        "laps": dict(getattr(gated, "timings_ms", None) or {}),
                        "calls": dict(spent),
                        "statements": dict(statements),
                    }
            elif op == "threads":
                # the calls shared by ``threads`` threads on this one engine, as a server's
                # workers would: the wall seconds and the process's CPU for all of them
                answer = concurrent_calls(engine, request["calls"], request["threads"])
            elif op == "blocks":
                # the block each (message, user) would get now, without writing anything
                answer = {
                    "blocks": [
                        hashlib.sha256(
                            engine.preview(message, user, now=common.NOW).text.encode()
                        ).hexdigest()
                        for message, user in request["calls"]
                    ]
                }
            elif op == "settle":
                # wait until the store serves these users from a working set in process,
                # if it keeps them (store/postgres/working.py); untimed, like a warm-up
                start = time.perf_counter()
                wait = getattr(engine.store, "wait_for_working_set", None)
                for user in request["users"] if wait is not None else ():
                    wait(user, 1800.0)
                # and its typed learnings, if it searches them in process
                # (store/postgres/learnings.py): one search starts their load
                learned = getattr(engine.store, "wait_for_learnings", None)
                for user in request["users"] if learned is not None else ():
                    engine.store.search(user, np.ones(384, dtype=np.float32), 1, TYPED)
                    learned(user, 1800.0)
                # and the graph of its learnings, if they are too many to rank in process:
                # the next learnings' search starts its load
                graphed = getattr(engine.store, "wait_for_learnings_graph", None)
                for user in request["users"] if graphed is not None else ():
                    engine.store.search(user, np.ones(384, dtype=np.float32), 1, TYPED)
                    graphed(user, 1800.0)
                # and its pool's projection, if it keeps one (store/postgres/projected.py):
                # one pool search starts its load
                projected = getattr(engine.store, "wait_for_projection", None)
                for user in request["users"] if projected is not None else ():
                    engine.store.search(user, np.ones(384, dtype=np.float32), 1, MemoryFilter())
                    projected(user, 1800.0)
                answer = {"settle_s": time.perf_counter() - start}
            elif op == "rss":
                working = getattr(engine.store, "_working", None)  # store/postgres/working.py
                answer = {
                    "rss_mb": _rss_mb(),
                    "rss_peak_mb": _rss_mb("VmHWM"),
                    "working_set_calls": dict(getattr(working, "calls", None) or {}),
                    "learnings_calls": dict(
                        getattr(getattr(engine.store, "_learnings", None), "calls", None) or {}
                    ),
                    "projected_calls": dict(
                        getattr(getattr(engine.store, "_projected", None), "calls", None) or {}
                    ),
                    # graphs read from a file / built (store/postgres/graph_file.py)
                    "projected_graphs": dict(
                        getattr(getattr(engine.store, "_projected", None), "graphs", None) or {}
                    ),
                    # the learnings' held graph (users whose learnings are refused in process)
                    "learnings_graph_calls": dict(
                        getattr(getattr(engine.store, "_learnings_graph", None), "calls", None)
                        or {}
                    ),
                }
            else:
                answer = {"error": f"unknown op {op!r}"}
        except Exception as exc:  # reported to the parent, which raises it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    if engine is not None:
        engine.close()


if __name__ == "__main__":
    _serve(sys.argv[1], Path(sys.argv[2]))
