"""Throughput of ``Engine.context()`` with 1, 4 and 16 concurrent callers sharing one engine.

    python bench/concurrency.py --out bench/results/concurrency.json \
        [--seconds 10 | --calls 2000] [--callers 1,4,16] [--memories 10000]

One SQLite file in a temp directory holds one user with ``--memories`` memories, built the
way ``bench/latency.py`` builds them (the same seeded texts, embedded with the real
all-MiniLM-L6-v2 and written through ``engine.store.write``). Then, in one run:

* **single caller** — ``context()`` p50/p95 measured exactly as ``bench/latency.py`` does it
  (the same warm-up and timed queries, ``latency.time_queries``), on the engine that wrote
  the memories;
* **sequential** — one loop in the main thread, the figure the concurrent ones stand beside;
* **threads N** — N threads sharing one :class:`~engrain.Engine`, as a web server's workers
  would;
* **async N** — one :class:`~engrain.AsyncEngine`, ``asyncio.gather`` over N tasks each
  awaiting ``context()`` in a loop (``asyncio.to_thread`` runs them on the loop's default
  executor, ``min(32, cores + 4)`` threads).

Each setting runs in ``--rounds`` interleaved rounds (every setting once per round, the
order reversed every other round, so a change in the machine's load weighs on all of them
alike). Each round opens its own engine on the same file (the loaded model is shared), so an
error cannot leave a broken working set to the next; a few untimed calls warm it, then its
callers share the round's part of ``--seconds`` (or of ``--calls``). Queries
cycle through a pool of distinct questions larger than the engine's query-vector LRU, so
every call embeds its message as a real one would. Every exception a call raises is counted
as an error (by type and message) and so is every error engrain only logs (a failed
background job); calls/s and the latency percentiles count successful calls only.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common
import latency

from engrain import AsyncEngine, Settings
from engrain.embed.minilm import MiniLMEmbedder

USER = latency.USER
#: ``context()`` p50/p95 at 10,000 memories before the concurrency work (issue 11).
BASELINE_MS = {"p50_ms": 8.6, "p95_ms": 13.1}
WARMUP_CALLS = 5
QUERY_POOL = 2000  # distinct questions; far more than the 256-slot query LRU


@dataclass
class Tally:
    """What the callers of one setting did: per-call milliseconds of the successful calls,
    and the errors by kind (with one full message of each kind)."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    examples: dict[str, str] = field(default_factory=dict)
    logged: collections.Counter[str] = field(default_factory=collections.Counter)
    wall_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self, ms: float) -> None:
        """One successful call of ``ms`` milliseconds."""
        with self.lock:
            self.latencies_ms.append(ms)

    def failed(self, exc: BaseException) -> None:
        """One call that raised ``exc``."""
        key = error_key(exc)
        with self.lock:
            self.errors[key] += 1
            self.examples.setdefault(key, f"{type(exc).__name__}: {exc}"[:400])


def error_key(exc: BaseException) -> str:
    """The exception's type and message with numbers and temp paths blanked, so that alike
    errors add up."""
    message = getattr(exc, "message", None) or str(exc)
    message = re.sub(r"\d+", "N", re.sub(r"/tmp/\S+", "<path>", message))
    return f"{type(exc).__module__}.{type(exc).__name__}: {message[:100]}"


class Pacer:
    """Hands out the next query to any caller until the setting's time or call count is
    used up (``None`` then). Safe to share between threads."""

    def __init__(self, queries: Sequence[str], *, seconds: float, calls: int | None) -> None:
        self._queries = itertools.cycle(queries)
        self._seconds = seconds
        self._calls = calls
        self._given = 0
        self._deadline = float("inf")
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the clock (a call budget has no clock)."""
        if self._calls is None:
            self._deadline = time.perf_counter() + self._seconds

    def next(self) -> str | None:
        """The next query, or ``None`` when the setting is over."""
        with self._lock:
            if self._calls is not None and self._given >= self._calls:
                return None
            if time.perf_counter() >= self._deadline:
                return None
            self._given += 1
            return next(self._queries)


class LoggedErrors(logging.Handler):
    """Counts the errors engrain logs instead of raising (failed background jobs)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.counts: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        self.counts[f"{record.name}: {error_key(exc) if exc else record.getMessage()[:100]}"] += 1


@contextmanager
def logged_errors() -> Iterator[collections.Counter[str]]:
    """While active, the errors logged under the ``engrain`` logger are counted."""
    handler = LoggedErrors()
    logger = logging.getLogger("engrain")
    logger.addHandler(handler)
    try:
        yield handler.counts
    finally:
        logger.removeHandler(handler)


def call_loop(context: Callable[[str], Any], pacer: Pacer, tally: Tally) -> None:
    """One synchronous caller: ``context(query)`` until the pacer says stop."""
    while (query := pacer.next()) is not None:
        start = time.perf_counter()
        try:
            context(query)
        except Exception as exc:  # every failure is a result here
            tally.failed(exc)
        else:
            tally.ok((time.perf_counter() - start) * 1000.0)


def run_sequential(engine: AsyncEngine, pacer: Pacer, tally: Tally, callers: int) -> float:
    """One caller in the calling thread; returns the wall seconds."""
    start = time.perf_counter()
    pacer.start()
    call_loop(lambda q: engine.sync.context(q, USER, now=common.NOW), pacer, tally)
    return time.perf_counter() - start


def run_threads(engine: AsyncEngine, pacer: Pacer, tally: Tally, callers: int) -> float:
    """``callers`` threads sharing ``engine.sync``, released together; returns the wall
    seconds from their release to the last one's end."""
    barrier = threading.Barrier(callers + 1)

    def caller() -> None:
        barrier.wait()
        call_loop(lambda q: engine.sync.context(q, USER, now=common.NOW), pacer, tally)

    threads = [threading.Thread(target=caller, name=f"caller-{i}") for i in range(callers)]
    for thread in threads:
        thread.start()
    pacer.start()
    start = time.perf_counter()
    barrier.wait()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def run_async(engine: AsyncEngine, pacer: Pacer, tally: Tally, callers: int) -> float:
    """``callers`` tasks over one AsyncEngine, gathered; returns the wall seconds."""

    async def caller() -> None:
        while (query := pacer.next()) is not None:
            start = time.perf_counter()
            try:
                await engine.context(query, USER, now=common.NOW)
            except Exception as exc:  # every failure is a result here
                tally.failed(exc)
            else:
                tally.ok((time.perf_counter() - start) * 1000.0)

    async def main() -> float:
        pacer.start()
        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        return time.perf_counter() - start

    return asyncio.run(main())


MODES: dict[str, Callable[[AsyncEngine, Pacer, Tally, int], float]] = {
    "sequential": run_sequential,
    "threads": run_threads,
    "async": run_async,
}


def open_engine(path: Path, embedder: MiniLMEmbedder) -> AsyncEngine:
    """A new engine on the existing file, with settings independent of the environment."""
    settings = Settings(url=f"sqlite:///{path}", data_dir=path.parent)
    return AsyncEngine(settings=settings, embedder=embedder)


def run_setting(
    mode: str,
    callers: int,
    path: Path,
    embedder: MiniLMEmbedder,
    queries: Sequence[str],
    warmup: Sequence[str],
    tally: Tally,
    *,
    seconds: float,
    calls: int | None,
) -> None:
    """One round of a setting on its own engine: warm-up, then ``callers`` callers until
    the pacer stops them; what they did is added to ``tally``."""
    engine = open_engine(path, embedder)
    try:
        for query in warmup:
            engine.sync.context(query, USER, now=common.NOW)
        pacer = Pacer(queries, seconds=seconds, calls=calls)
        with logged_errors() as logged:
            tally.wall_seconds += MODES[mode](engine, pacer, tally, callers)
            engine.sync.wait()
        tally.logged.update(logged)
    finally:
        engine.sync.close()


def summarize(mode: str, callers: int, tally: Tally) -> dict[str, Any]:
    """One setting's row of the report, over all its rounds."""
    done = len(tally.latencies_ms)
    failed = sum(tally.errors.values())
    wall = tally.wall_seconds
    row: dict[str, Any] = {
        "mode": mode,
        "callers": callers,
        "wall_seconds": round(wall, 2),
        "calls": done,
        "errors": failed,
        "logged_errors": sum(tally.logged.values()),
        "calls_per_s": round(done / wall, 1) if wall > 0 else None,
    }
    if tally.latencies_ms:
        stats = common.summarize(tally.latencies_ms)
        row.update(p50_ms=stats["p50_ms"], p95_ms=stats["p95_ms"], p99_ms=stats["p99_ms"],
                   mean_ms=stats["mean_ms"])  # fmt: skip
    if failed:
        row["errors_by_type"] = dict(tally.errors.most_common())
        row["error_examples"] = tally.examples
    if tally.logged:
        row["logged_errors_by_type"] = dict(tally.logged.most_common())
    return row


def build(
    path: Path, size: int, embedder: MiniLMEmbedder, seed: int, warmup: int, queries: int,
    cache_dir: Path | None,
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """Write the user's memories into a fresh file and measure the single caller there, as
    ``bench/latency.py`` does. Returns that measurement and a description of the corpus."""
    notes = common.make_notes(size, seed=seed)
    pool = common.make_queries(warmup + 2 * queries, seed=seed + 1)  # latency.py's pool
    print(f"corpus: {len(notes):,} notes; embedding with {embedder.model_id}", file=sys.stderr)
    vectors, embed_s, from_cache = common.embed_corpus(
        embedder, [n.text for n in notes], cache_dir=cache_dir
    )
    engine = common.open_engine(path.parent, path.name, embedder=embedder)
    with engine:
        memories = common.make_memories(notes, vectors, USER)
        for offset in range(0, len(memories), latency.WRITE_BATCH):
            engine.store.write(memories[offset : offset + latency.WRITE_BATCH])
        latency.time_queries(engine, pool[:1])
        latency.time_queries(engine, pool[1:warmup])
        timed = latency.time_queries(engine, pool[warmup : warmup + queries])
    single = {"memories": size, "queries": len(timed), **common.summarize(timed)}
    corpus = {
        "seed": seed,
        "notes": len(notes),
        "embedding_seconds": round(embed_s, 1),
        "vectors_from_cache": from_cache,
    }
    return single, corpus


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--memories", type=int, default=10_000, help="memories of the user")
    parser.add_argument("--callers", default="1,4,16", help="comma-separated caller counts")
    parser.add_argument("--seconds", type=float, default=12.0,
                        help="wall seconds of each setting, all rounds (default 12)")  # fmt: skip
    parser.add_argument("--calls", type=int, help="instead of --seconds: calls per setting")
    parser.add_argument("--rounds", type=int, default=3,
                        help="split each setting into this many interleaved rounds")  # fmt: skip
    parser.add_argument("--queries", type=int, default=200,
                        help="timed queries of the single caller (as latency.py)")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=10,
                        help="untimed queries before the single-caller latency")  # fmt: skip
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-vector-cache", action="store_true",
                        help="embed the corpus even if a run cached its vectors")  # fmt: skip
    args = parser.parse_args(argv)
    callers = sorted({int(c) for c in args.callers.split(",") if c.strip()})
    if (
        args.memories < 1 or not callers or callers[0] < 1 or args.seconds <= 0
        or (args.calls is not None and args.calls < 1) or args.queries < 1 or args.warmup < 1
        or args.rounds < 1
    ):  # fmt: skip
        parser.error("--memories, --callers, --seconds, --calls, --rounds, --queries and "
                     "--warmup must be positive")  # fmt: skip

    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    embedder = MiniLMEmbedder()
    cache_dir = None if args.no_vector_cache else Path(tempfile.gettempdir()) / "engrain-bench"
    with tempfile.TemporaryDirectory(prefix="engrain-concurrency-") as tmp:
        path = Path(tmp) / "concurrency.db"
        single, corpus = build(path, args.memories, embedder, args.seed, args.warmup,
                               args.queries, cache_dir)  # fmt: skip
        print(f"single caller: p50 {single['p50_ms']} ms, p95 {single['p95_ms']} ms",
              file=sys.stderr)  # fmt: skip
        pool = common.make_queries(QUERY_POOL + WARMUP_CALLS, seed=args.seed + 2)
        warmup, queries = pool[:WARMUP_CALLS], pool[WARMUP_CALLS:]
        plan = [("sequential", 1)] + [(m, n) for m in ("threads", "async") for n in callers]
        tallies = {setting: Tally() for setting in plan}
        seconds = args.seconds / args.rounds
        calls = -(-args.calls // args.rounds) if args.calls else None
        for round_ in range(args.rounds):
            # ABBA order: a drift in the machine's load weighs on every setting alike
            for mode, n in plan if round_ % 2 == 0 else reversed(plan):
                print(f"round {round_ + 1}/{args.rounds}: {mode} × {n}", file=sys.stderr)
                run_setting(mode, n, path, embedder, queries, warmup, tallies[mode, n],
                            seconds=seconds, calls=calls)  # fmt: skip
        settings = [summarize(mode, n, tallies[mode, n]) for mode, n in plan]

    machine = common.machine_info()  # its load average is the run's own, taken at the end
    machine["load_average_1m_before"] = None if load_before is None else round(load_before, 2)
    report = {
        "memories": args.memories,
        "single_caller": single,
        "single_caller_baseline": BASELINE_MS,
        "settings": settings,
        "run": {
            "seconds_per_setting": None if args.calls else args.seconds,
            "calls_per_setting": args.calls,
            "rounds": args.rounds,
            "warmup_calls_per_setting": WARMUP_CALLS,
            "query_pool": QUERY_POOL,
            "async_default_executor_threads": min(32, (os.cpu_count() or 1) + 4),
        },
        "commit": (machine.get("git") or {}).get("commit"),
        "machine": machine,
        "corpus": corpus,
        "engine": latency._engine_settings(embedder.model_id),
    }
    common.write_json(args.out, report)
    print_table(report)
    return 0


def print_table(report: dict[str, Any]) -> None:
    """The throughput table and the single-caller latency, for a terminal."""
    rows = report["settings"]
    sequential = next((r for r in rows if r["mode"] == "sequential"), None)
    base = sequential["calls_per_s"] if sequential and sequential.get("calls_per_s") else None
    print()
    print(f"context() throughput, one user with {report['memories']:,} memories, SQLite, "
          "one engine shared by the callers")  # fmt: skip
    print(f"{'setting':<12} {'callers':>7} {'calls/s':>8} {'× seq':>6} {'p50 ms':>8} "
          f"{'p95 ms':>8} {'calls':>7} {'errors':>7}")  # fmt: skip
    for row in rows:
        rate = row.get("calls_per_s") or 0.0
        ratio = f"{rate / base:>6.2f}" if base else f"{'-':>6}"
        p50, p95 = row.get("p50_ms", float("nan")), row.get("p95_ms", float("nan"))
        errors = row["errors"] + row["logged_errors"]
        print(f"{row['mode']:<12} {row['callers']:>7} {rate:>8.1f} {ratio} {p50:>8.1f} "
              f"{p95:>8.1f} {row['calls']:>7} {errors:>7}")  # fmt: skip
    for row in rows:
        for kind, count in {**row.get("errors_by_type", {}),
                            **row.get("logged_errors_by_type", {})}.items():  # fmt: skip
            print(f"  {row['mode']} × {row['callers']}: {count} × {kind}")
    single, baseline = report["single_caller"], report["single_caller_baseline"]
    print(f"\nsingle caller, measured as bench/latency.py ({single['queries']} queries): "
          f"p50 {single['p50_ms']:.1f} ms, p95 {single['p95_ms']:.1f} ms "
          f"(before: {baseline['p50_ms']} / {baseline['p95_ms']} ms)")  # fmt: skip
    machine = report["machine"]
    before, after = machine.get("load_average_1m_before", "?"), machine.get("load_average_1m", "?")
    print(f"{machine['cores']} cores, Python {machine['python']}, load average {before} before, "
          f"{after} after, commit {str(report['commit'])[:10]}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
