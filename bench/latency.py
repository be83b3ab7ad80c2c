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

The timed part runs in a fresh subprocess per size (``--serve``), so every process cache is
cold: it loads the model, then opens a new ``Engine`` on the file just written and times the
first ``context()`` (``cold_start_ms``: the open plus that call; the file itself is in the
OS page cache, as on a machine that just used it). It then waits for the approximate index
of a large user if the store builds one (``index_wait_s``), times the queries, reads its
resident memory (``VmRSS`` from ``/proc/self/status``; ``rss_mb`` after the queries,
``rss_model_mb`` before the store was opened, so the store's share is the difference;
``rss_peak_mb``, the peak (``VmHWM``) of the serving, read before the recall below, whose
second store holds every vector again; ``rss_peak_recall_mb`` the peak with it;
``rss_peak_close_mb`` the close's, from a peak reset after the recall and a heap trim, so
with what the recall left resident when one ran), and measures the recall of
the store's vector search against exact search over the same file (``recall_at_50``: the
share of the exact top 50 the store returns, mean over the timed queries;
``recall_learnings_at_100``: the same for the gate's search of 100 learnings).
A store opened twice on a new file is measured twice: ``first_open`` is the very first
open (no index file yet), the headline numbers are from the second.

``--baseline-src DIR`` measures an older tree too (``git archive <commit> src | tar -x -C
/tmp/base``), in its own processes alternating with this tree's (``--rounds`` of each) on
the same file, so both see the same load, each after a first open of its own (which saves
the indexes it derives); its medians are under ``baseline``.

``--synthetic-vectors`` writes clustered random unit vectors instead of embedding the
corpus (which takes about 10 minutes at 100,000 on an idle 2-core machine and hours on a
busy one): cold start, RSS and the store's work do not depend on the vectors' values, the
recall of the approximate index does (reported, but not comparable with real vectors).

The corpus vectors are cached between runs (``--cache-dir``, default
``$TMPDIR/engrain-bench``; ``--no-vector-cache`` re-embeds); they are the same vectors
either way, only the build is faster.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import common

import engrain.engine as engine_module
from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder
from engrain.store import heap
from engrain.store.base import MemoryFilter

USER = "bench-user"
#: context() p95 targets (ms) by backend and memories for one user: issue 18's at 100,000 and
#: 1,000,000; up to 10,000 memories issue 15's 20 ms on every backend.
P95_TARGETS: dict[tuple[str, int], float] = {
    ("sqlite", 100_000): 15.0, ("sqlite", 1_000_000): 40.0,
    ("postgres", 100_000): 30.0, ("postgres", 1_000_000): 60.0,
}  # fmt: skip
SMALL = 10_000
SMALL_P95_TARGET = 20.0


def p95_target(backend: str, size: int) -> float | None:
    """The p95 target for ``size`` memories on ``backend`` (None where no issue sets one)."""
    if size <= SMALL:
        return SMALL_P95_TARGET
    return P95_TARGETS.get((backend, size))


WRITE_BATCH = 2000


def time_queries(
    engine: Engine,
    queries: Sequence[str],
    cpu: dict[str, list[float]] | None = None,
    calls: list[dict[str, Any]] | None = None,
) -> list[float]:
    """Milliseconds of one ``context()`` call per query, measured outside the engine. With
    ``cpu``, each call's CPU milliseconds are appended to its lists: ``thread`` (the calling
    thread's, what the call itself computes) and ``process`` (every thread's: onnxruntime's
    pool embedding the query too, and any background job running meanwhile). With
    ``calls``, each call's query, times, budget and block digest (:func:`_call`), and what
    :class:`CallProbe` saw in it: the collector's passes and the counted uses' write."""
    out = []
    probe = CallProbe(engine) if calls is not None else None
    with probe if probe is not None else nullcontext():
        for query in queries:
            if probe is not None:
                probe.begin()
            thread, process = time.thread_time(), time.process_time()
            start = time.perf_counter()
            result = engine.context(query, USER, now=common.NOW)
            out.append((time.perf_counter() - start) * 1000.0)
            if cpu is not None:
                cpu["thread"].append((time.thread_time() - thread) * 1000.0)
                cpu["process"].append((time.process_time() - process) * 1000.0)
                if calls is not None and probe is not None:
                    calls.append({**_call(query, result, out[-1], cpu), **probe.seen})
    return out


class CallProbe:
    """What one ``context()`` call spends in two places a stage lap cannot see, per call
    (:meth:`begin` starts one, :attr:`seen` is its account):

    - the garbage collector: its passes by generation (``gc0`` / ``gc1`` / ``gc2``) and
      their calling-thread CPU (``gc_ms``), from ``gc.callbacks`` (a pass runs in the
      thread whose allocation set it off: the calling thread's, whatever stage it was in);
    - the counted uses' write (``store.record_uses``: one write transaction): its
      calling-thread CPU (``uses_ms``) and wall (``uses_wall_ms``), the wall including
      any wait for the lock or the disk.

    Both are timed in the call being measured; the probe adds a callback per collection and
    one Python frame per write, the same for every tree."""

    def __init__(self, engine: Engine) -> None:
        self._store = engine.store
        self.seen: dict[str, float] = {}
        self._started = 0.0
        self._shadowed: Any = None

    def begin(self) -> None:
        """Start a new call's account."""
        self.seen = {"gc0": 0, "gc1": 0, "gc2": 0, "gc_ms": 0.0,
                     "uses_ms": 0.0, "uses_wall_ms": 0.0}  # fmt: skip

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        elif self.seen:
            self.seen[f"gc{info['generation']}"] += 1
            self.seen["gc_ms"] += (time.thread_time() - self._started) * 1000.0

    def __enter__(self) -> CallProbe:
        gc.callbacks.append(self._collected)
        self._shadowed = vars(self._store).get("record_uses")  # put back as it was
        original = getattr(self._store, "record_uses", None)
        if original is not None:

            def record_uses(*args: Any, **kwargs: Any) -> Any:
                thread, start = time.thread_time(), time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    if self.seen:
                        self.seen["uses_ms"] += (time.thread_time() - thread) * 1000.0
                        self.seen["uses_wall_ms"] += (time.perf_counter() - start) * 1000.0

            self._store.record_uses = record_uses
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._collected)
        if self._shadowed is not None:
            self._store.record_uses = self._shadowed
        elif "record_uses" in vars(self._store):
            del self._store.record_uses


#: A call is *deep* when its budget deepens the pool past ``candidate_pool`` (50): the
#: gate walks ``budget // 40`` nearest and lexical matches (``recall/pool_reads.py::pool_size``).
DEEP_BUDGET = 51 * 40


def _call(query: str, result: Any, wall_ms: float, cpu: dict[str, list[float]]) -> dict[str, Any]:
    """One timed call: its query, wall and CPU milliseconds, budget and block digest (its
    text, tokens and memories' ids: trees giving the same blocks give the same digests)."""
    import hashlib

    shown = "\n".join(m.id for m in result.memories)
    block = f"{result.text}\0{result.tokens}\0{shown}"
    gated = getattr(result, "gated", None)
    return {
        "query": query, "wall_ms": wall_ms, "thread_ms": cpu["thread"][-1],
        "process_ms": cpu["process"][-1],
        "budget": gated.budget.tokens if gated is not None else 0,
        "block": hashlib.sha256(block.encode()).hexdigest()[:16],
    }  # fmt: skip


def depth_summary(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """p50 / p95 of wall, thread and process milliseconds for the deep calls (a pool deeper
    than the ordinary: :data:`DEEP_BUDGET`) and the shallow ones apart, as flat keys
    (``deep_thread_p95_ms``), with each group's size; and, where :class:`CallProbe` timed
    them, the collector's and the counted uses' share (:func:`probe_summary`)."""
    out: dict[str, Any] = {}
    for group in ("deep", "shallow"):
        chosen = [c for c in calls if (c["budget"] >= DEEP_BUDGET) == (group == "deep")]
        out[f"{group}_calls"] = len(chosen)
        for measure in PROBED:
            values = [c[f"{measure}_ms"] for c in chosen if f"{measure}_ms" in c]
            if values:
                summary = common.summarize(values)
                for stat in ("p50_ms", "p95_ms"):
                    out[f"{group}_{measure}_{stat}"] = summary[stat]
        out.update(probe_summary(group, chosen))
    return out


#: The per-call measures :func:`depth_summary` takes p50 / p95 of: the call's wall, thread
#: and process times, then :class:`CallProbe`'s collector and counted uses.
PROBED = ("wall", "thread", "process", "gc", "uses", "uses_wall")


def probe_summary(group: str, calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """For one group of calls :class:`CallProbe` timed: the collector's passes per call by
    generation (``deep_gc0_per_call``), and the *slowest tenth* by the calling thread's CPU
    (at least one call) beside the rest: their mean thread CPU, the collector's and the
    counted uses' mean thread CPU in them, and the share of the thread CPU each is
    (``deep_tail_gc_share``) — what the p95 is made of."""
    probed = [c for c in calls if "gc_ms" in c]
    if not probed:
        return {}
    out: dict[str, Any] = {}
    for generation in ("gc0", "gc1", "gc2"):
        out[f"{group}_{generation}_per_call"] = round(
            sum(c[generation] for c in probed) / len(probed), 3
        )
    ordered = sorted(probed, key=lambda c: c["thread_ms"], reverse=True)
    tail = max(1, len(ordered) // 10)
    for part, chosen in (("tail", ordered[:tail]), ("rest", ordered[tail:])):
        if not chosen:
            continue
        thread = sum(c["thread_ms"] for c in chosen) / len(chosen)
        out[f"{group}_{part}_thread_mean_ms"] = round(thread, 3)
        for measure in ("gc", "uses", "uses_wall"):
            mean = sum(c[f"{measure}_ms"] for c in chosen) / len(chosen)
            out[f"{group}_{part}_{measure}_mean_ms"] = round(mean, 3)
            if measure != "uses_wall" and thread > 0:
                out[f"{group}_{part}_{measure}_share"] = round(mean / thread, 4)
    return out


def cpu_summary(cpu: dict[str, list[float]]) -> dict[str, float]:
    """p50 / p95 / mean of each list of CPU milliseconds, as flat keys (``cpu_thread_p95_ms``:
    the medians over rounds are taken key by key)."""
    out: dict[str, float] = {}
    for name, values in cpu.items():
        if values:
            summary = common.summarize(values)
            for stat in ("p50_ms", "p95_ms", "mean_ms"):
                out[f"cpu_{name}_{stat}"] = summary[stat]
    return out


#: Calls timed inside ``context()``: (where, attribute, name). One the engine does not
#: have is skipped. They overlap the engine's own laps (``Gated.timings_ms``), which are
#: reported beside them.
CALL_TARGETS = (
    ("embedder", "embed_query", "embed_query"),
    ("store", "search", "vector_search"),  # matrix product + filters + loading the k rows
    ("store", "search_many", "vector_search_many"),  # the gate's searches in one call
    ("store", "lexical_search", "lexical_search"),
    ("store", "query", "store_query"),  # SQL lookups: procedural and pinned memories
    ("store", "record_access", "record_access"),  # one write transaction per call
    ("store", "record_uses", "record_uses"),  # SQLite: the counts and the context record
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
    rounds: int = 1,
    baseline_src: Path | None = None,
    store_cache: Path | None = None,
    corpus_tag: str = "",
    build_only: bool = False,
) -> dict[str, Any]:
    """Build one user with ``size`` memories in the store ``url``, then time ``context()``
    in fresh processes (see the module docstring): ``rounds`` of them, each preceded by
    one importing engrain from ``baseline_src`` if given. With ``store_cache`` a SQLite
    store is copied from there if an earlier run kept it (``corpus_tag`` names the corpus),
    else kept there after its first open; ``build_only`` stops after that first open."""
    cached = _cached_store(url, store_cache, size, corpus_tag)
    if cached is not None and cached.is_file():
        print(f"  store copied from {cached}", file=sys.stderr)
        write_s, types = _copy_store(cached, url)
    else:
        settings = Settings(url=url, data_dir=workdir)
        with Engine(settings=settings, embedder=embedder) as engine:
            write_s, types = write_corpus(engine, notes[:size], vectors[:size])
    spec = {
        "url": url, "data_dir": str(workdir), "queries": list(queries),
        "stage_queries": list(stage_queries), "warmup": list(warmup),
    }  # fmt: skip
    baseline_spec = {**spec, "recall": False}
    if baseline_src is not None:
        baseline_spec["url"] = _baseline_copy(url, baseline_src)
    started = time.perf_counter()
    first_spec = {**spec, "queries": list(queries[:20]), "recall": False}
    if build_only:  # the stage split is not reported: a few calls suffice
        first_spec["stage_queries"] = list(stage_queries[:5])
    first_open = _serve_in_subprocess(first_spec)
    first_open["process_s"] = round(time.perf_counter() - started, 1)
    print(f"  first open: {_first_open_line(first_open)}", file=sys.stderr, flush=True)
    if cached is not None and not cached.is_file():  # with the indexes the first open saved
        started = time.perf_counter()
        _copy_store(Path(url.removeprefix("sqlite:///")), f"sqlite:///{cached}")
        print(f"  store kept in {cached} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr)  # fmt: skip
    if build_only:
        return {"memories": size, "first_open": first_open, "write_seconds": round(write_s, 2)}
    baseline_first = None
    if baseline_src is not None:  # its own first open too: it saves what it derives
        baseline_first = _serve_in_subprocess(
            {**baseline_spec, "queries": list(queries[:20])}, baseline_src
        )
    served: list[dict[str, Any]] = []
    baseline: list[dict[str, Any]] = []
    for tree in round_order(rounds, baseline_src is not None):
        if tree == "baseline":
            baseline.append(_serve_in_subprocess(baseline_spec, baseline_src))
        else:
            served.append(_serve_in_subprocess({**spec, "recall": True}))
    out = {
        "memories": size,
        "queries": len(queries),
        **_median_of(served),
        "first_open": first_open,
        "write_seconds": round(write_s, 2),
        "store_from_cache": cached is not None and write_s == 0.0,
        "memory_types": dict(sorted(types.items())),
        "stage_queries": len(stage_queries),
    }
    if baseline:
        out["baseline"] = {"src": str(baseline_src), **_median_of(baseline),
                           "first_open": baseline_first}  # fmt: skip
        out["blocks_differing_from_baseline"] = _blocks_differing(served, baseline)
    return out


def round_order(rounds: int, baseline: bool) -> list[str]:
    """The measuring processes of ``rounds`` rounds in the order they run: ``served`` (this
    tree) and, with a ``baseline``, the baseline tree, which goes first in every other round.
    Alternating, both trees see the same load on the machine; the order alternating too, a
    load that rises or falls through a run does not favour the tree that always ran first
    (two rounds with the baseline first read today's tree 1.4x slower at 100,000 in session
    28 than a paired run of the same trees, query by query: ``bench/wait_split.py``)."""
    if not baseline:
        return ["served"] * rounds
    pairs = (("baseline", "served") if n % 2 == 0 else ("served", "baseline")
             for n in range(rounds))  # fmt: skip
    return [tree for pair in pairs for tree in pair]


def _blocks_differing(served: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> int:
    """The queries whose block (its digest) differs between the two trees in any round, or
    between rounds of one tree."""
    seen: dict[str, set[str]] = defaultdict(set)
    base: dict[str, set[str]] = defaultdict(set)
    for runs, into in ((served, seen), (baseline, base)):
        for run in runs:
            for query, block in run.get("blocks", {}).items():
                into[query].add(block)
    return sum(1 for q in seen.keys() | base.keys() if seen[q] != base[q] or len(seen[q]) > 1)


def _first_open_line(result: dict[str, Any]) -> str:
    """The parts of a first open (:func:`serve`'s answer), for the build's log."""
    return (f"open {result['open_ms'] / 1000:.1f} s, first context() "
            f"{result['first_call_ms'] / 1000:.1f} s, index wait {result['index_wait_s']:.1f} s, "
            f"close {result.get('close_ms', 0.0) / 1000:.1f} s, RSS {result['rss_mb']:.0f} MB, "
            f"process {result.get('process_s', 0.0):.0f} s")  # fmt: skip


#: Above this many memories the corpus is made and written in chunks of this many (a
#: million ``Memory`` objects with their vectors would need several GB at once).
CHUNK = 50_000


def write_corpus(
    engine: Engine, notes: Sequence[common.Note], vectors: Any
) -> tuple[float, Counter[str]]:
    """Write one memory per note (with its vector) through ``engine.store.write``; the
    seconds it took and the count of each memory type. Up to :data:`CHUNK` notes the
    memories are made at once (as in earlier runs, so those corpora are unchanged); a larger
    corpus is made and written a chunk at a time, each chunk's dates drawn from a seed of its
    own and preference keys kept unique across chunks."""
    types: Counter[str] = Counter()
    seen: set[str] = set()
    seconds, began = 0.0, time.perf_counter()
    step = len(notes) if len(notes) <= 2 * CHUNK else CHUNK
    for chunk in range(0, len(notes), step):
        seed = 17 if chunk == 0 else 17 + chunk
        memories = common.make_memories(notes[chunk : chunk + step],
                                        vectors[chunk : chunk + step], USER, seed=seed)  # fmt: skip
        memories = [_unique_key(m, seen, chunk) for m in memories]
        start = time.perf_counter()
        for offset in range(0, len(memories), WRITE_BATCH):
            engine.store.write(memories[offset : offset + WRITE_BATCH])
        seconds += time.perf_counter() - start
        types.update(m.memory_type.value for m in memories)
        if step < len(notes):  # a line per chunk: a long build's log shows its pace
            print(f"  written {chunk + len(memories):,}/{len(notes):,}: {seconds:.0f} s "
                  f"writing, {time.perf_counter() - began:.0f} s in all", file=sys.stderr,
                  flush=True)  # fmt: skip
    return seconds, types


def _unique_key(memory: Any, seen: set[str], chunk: int) -> Any:
    """``memory`` with a preference key no earlier chunk used (the engine would merge
    same-key preferences)."""
    import dataclasses

    if memory.key is None:
        return memory
    key, suffix = memory.key, chunk
    while key in seen:
        key, suffix = f"{memory.key}-c{suffix}", suffix + 1
    seen.add(key)
    return memory if key == memory.key else dataclasses.replace(memory, key=key)


def _cached_store(url: str, store_cache: Path | None, size: int, tag: str) -> Path | None:
    """Where the SQLite store of this corpus is kept between runs (``None``: not kept)."""
    if store_cache is None or not url.startswith("sqlite:///"):
        return None
    return store_cache / f"latency-{size}-{tag}.db"


def _copy_store(source: Path, url: str) -> tuple[float, Counter[str]]:
    """Copy the SQLite file ``source`` to the file of ``url`` (SQLite's backup: a
    consistent copy); no write time, no type counts (the copy's are not re-read)."""
    import sqlite3

    target = Path(url.removeprefix("sqlite:///"))
    target.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst, pages=65_536)
    return 0.0, Counter()


def _baseline_copy(url: str, src: Path | None = None) -> str:
    """A copy of the SQLite file at ``url`` for the baseline tree, without what the newer
    schema added if the baseline (``src``) predates it (an older engrain refuses a file with
    migrations it does not know; the only newer one, 005, adds the ``derived_indexes`` table
    such a baseline never reads). A baseline that knows 005 keeps the saved indexes."""
    import sqlite3

    path = Path(url.removeprefix("sqlite:///"))
    if not url.startswith("sqlite:///") or not path.is_file():
        return url
    copy = path.with_name(path.stem + "-baseline" + path.suffix)
    with sqlite3.connect(path) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    store = None if src is None else src / "engrain" / "store" / "sqlite.py"
    if store is not None and store.is_file() and "005_derived_indexes" in store.read_text():
        return f"sqlite:///{copy}"
    with sqlite3.connect(copy) as db:
        db.execute("DROP TABLE IF EXISTS derived_indexes")
        db.execute("DELETE FROM migrations WHERE name = '005_derived_indexes'")
    return f"sqlite:///{copy}"


def _median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from several rounds: each number the median over the rounds (stages
    from the first); the rounds kept under ``rounds`` (the blocks' digests left out:
    :func:`_blocks_differing` compares them)."""
    import statistics

    flat = [{**r["latency"], **{k: v for k, v in r.items() if k not in ("latency", "blocks")}}
            for r in runs]  # fmt: skip
    out: dict[str, Any] = dict(flat[0])
    for key, value in flat[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values = [r[key] for r in flat if isinstance(r.get(key), (int, float))]
            out[key] = round(statistics.median(values), 4)
    if len(runs) > 1:
        out["rounds"] = [{k: v for k, v in r.items() if k != "stages"} for r in flat]
    return out


def _serve_in_subprocess(spec: dict[str, Any], src: Path | None = None) -> dict[str, Any]:
    """:func:`serve` in a new interpreter (cold caches), importing engrain from ``src``
    if given (a baseline tree); its JSON result."""
    return common.run_child(__file__, "serve", spec, [] if src is None else [src])


def rss_mb() -> float:
    """This process's resident memory (``VmRSS`` in ``/proc/self/status``), in MB."""
    return common.status_mb("VmRSS")


def rss_peak_mb() -> float:
    """This process's peak resident memory so far (``VmHWM``), in MB."""
    return common.status_mb("VmHWM")


def reset_rss_peak() -> None:
    """Start this process's peak resident memory (``VmHWM``) again from its resident
    memory now (Linux: ``/proc/self/clear_refs``; elsewhere nothing is reset)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        pass


def serve(spec: dict[str, Any]) -> dict[str, Any]:
    """The measurement of one size in this (fresh) process: cold start, latency, stage split,
    RSS and recall against exact search."""
    import os

    load_start = os.getloadavg()[0]
    embedder = MiniLMEmbedder()
    embedder.embed(["warm the model up"])  # the model's first run is not the store's
    rss_model = rss_mb()
    start = time.perf_counter()
    cpu_start = time.process_time()
    engine = Engine(settings=Settings(url=spec["url"], data_dir=Path(spec["data_dir"])),
                    embedder=embedder)  # fmt: skip
    open_ms = (time.perf_counter() - start) * 1000.0
    with engine:
        start = time.perf_counter()
        engine.context(spec["warmup"][0], USER, now=common.NOW)
        first_ms = (time.perf_counter() - start) * 1000.0
        # every thread's CPU: the load, the first call, and the index job's work so far
        cold_cpu_s = time.process_time() - cpu_start
        rss_first = rss_mb()
        start = time.perf_counter()
        wait = getattr(engine.store, "wait_for_index", None)
        indexed = bool(wait(USER)) if wait is not None else False
        index_wait_s = time.perf_counter() - start
        time_queries(engine, spec["warmup"][1:])
        cpu: dict[str, list[float]] = {"thread": [], "process": []}
        calls: list[dict[str, Any]] = []
        load_queries = os.getloadavg()[0]
        latencies = time_queries(engine, spec["queries"], cpu, calls)
        load_end = os.getloadavg()[0]
        with stage_timers(engine) as groups:
            time_queries(engine, spec["stage_queries"])
        rss = rss_mb()
        # the serving process's peak is read before the recall: its second store (the index
        # off) holds every vector again, ~3.5 GB more at 1,000,000 (docs/scale.md, "Session
        # 18 … (h11)"); the close's is read apart, from a peak reset after it
        rss_peak = rss_peak_mb()
        recall = recall_learnings = rss_peak_recall = None
        if spec.get("recall") and indexed:
            recall = recall_at(engine, spec["queries"], 50)
            # the learnings' search: exact over their rows, or a coarse pass first
            recall_learnings = recall_at(engine, spec["queries"], 100, [learnings_filter()])
            rss_peak_recall = rss_peak_mb()
        heap.release()  # what the recall freed, handed back before the close is measured
        reset_rss_peak()
        closing = time.perf_counter()
    close_ms = (time.perf_counter() - closing) * 1000.0  # waits for the saves in flight
    rss_peak_close = rss_peak_mb()  # after a recall: with what it left resident
    return {
        "latency": common.summarize(latencies),
        **cpu_summary(cpu),
        **depth_summary(calls),
        "blocks": {c["query"]: c["block"] for c in calls},
        "engrain": _tree(),
        # 1-minute load average: at the start, when the timed queries began and ended
        "load_1m_start": load_start,
        "load_1m_queries": round(load_queries, 2),
        "load_1m_end": round(load_end, 2),
        "cold_start_ms": round(open_ms + first_ms, 1),
        "cold_start_cpu_s": round(cold_cpu_s, 3),
        "rss_after_first_call_mb": rss_first,
        "rss_peak_mb": rss_peak,
        "rss_peak_recall_mb": rss_peak_recall,
        "rss_peak_close_mb": rss_peak_close,
        "open_ms": round(open_ms, 1),
        "first_call_ms": round(first_ms, 1),
        "approximate_index": indexed,
        "index_wait_s": round(index_wait_s, 2),
        "close_ms": round(close_ms, 1),
        "rss_mb": rss,
        "rss_model_mb": rss_model,
        "recall_at_50": recall,
        "recall_learnings_at_100": recall_learnings,
        "stages": _stats(groups),
    }


def _tree() -> str:
    """The engrain source this process imported (``--baseline-src`` or a ``PYTHONPATH``
    tree), with its git commit if it is a checkout."""
    import engrain

    src = Path(engrain.__file__).resolve().parent
    done = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return f"{src} at {done.stdout.strip()}" if done.returncode == 0 else str(src)


#: The filters ``recall_at_50`` is measured over: none; unmuted and current.
RECALL_FILTERS = (MemoryFilter(), MemoryFilter(include_muted=False, include_superseded=False))


def learnings_filter() -> MemoryFilter:
    """The gate's filter of its learnings search (``recall/gate.py``: ``LEARNINGS_MAX`` of
    them per call), with the default importance floor."""
    from engrain.recall.candidates import recall_filter
    from engrain.recall.gate import LEARNING_KINDS

    floor = Settings().recall_min_importance
    return recall_filter(min_importance=floor).update(kinds=LEARNING_KINDS)


def recall_at(
    engine: Engine,
    queries: Sequence[str],
    k: int,
    filters: Sequence[MemoryFilter] = RECALL_FILTERS,
) -> float | None:
    """Mean share of the exact top ``k`` (a second store on the same file with the index
    off) that the engine's store returns, over ``queries`` and ``filters``; ``None`` for a
    store without an approximate index (its search is the exact one)."""
    store = engine.store
    path = getattr(store, "path", None)
    if path is None or not getattr(store, "wait_for_index", None):
        return None
    exact = type(store)(path, ann_min_vectors=None)  # type: ignore[call-arg]
    shares = []
    try:
        for query in queries:
            vector = engine.embedder.embed_query(query)
            for flt in filters:
                want = {m.id for m, _ in exact.search(USER, vector, k, flt)}
                got = {m.id for m, _ in store.search(USER, vector, k, flt)}
                if want:
                    shares.append(len(want & got) / len(want))
    finally:
        exact.close()
    return round(sum(shares) / len(shares), 4) if shares else None


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
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where corpus vectors are cached (default $TMPDIR/engrain-bench)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measuring processes per size (numbers: their medians)",
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also measure engrain imported from this src directory (an older "
        "tree, e.g. from git archive), alternating with this one",
    )
    parser.add_argument(
        "--synthetic-vectors",
        action="store_true",
        help="clustered unit vectors drawn from the seed instead of the model's, for when "
        "embedding the corpus takes too long (hours at 100,000 on a busy machine): cold "
        "start, RSS and the store's work do not depend on the values; the index's recall "
        "does (reported, not comparable with the model's vectors)",
    )
    parser.add_argument(
        "--vectors-file",
        type=Path,
        default=None,
        help="a .npy of the model's vectors of another corpus to use for this one's notes "
        "(its first N rows): the index's recall is that of real vectors, without embedding "
        "the corpus (the texts and vectors do not match: lexical and vector hits differ)",
    )
    parser.add_argument(
        "--store-cache",
        type=Path,
        default=None,
        help="keep each SQLite store written here after its first open (with the indexes "
        "it saved) and copy it from there in later runs of the same corpus (a million "
        "memories take long to write and index)",
    )
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="write (or copy) each size's store and open it once, then stop (with "
        "--store-cache: build the corpus ahead of the measuring run)",
    )
    parser.add_argument(
        "--derived-vectors",
        action="store_true",
        help="with --vectors-file: notes beyond the file's rows get noisy copies of its "
        "vectors (bench/pg_scale.py's derived_vectors, noise 0.5, seed --seed + 4, as the "
        "PostgreSQL 1,000,000-memory corpus), so a million memories need no embedding; "
        "reported as vectors 'derived'",
    )
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:  # the measuring subprocess of run_size
        print(json.dumps(serve(json.loads(args.serve.read_text(encoding="utf-8")))))
        return 0
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if args.derived_vectors and args.vectors_file is None:
        parser.error("--derived-vectors needs --vectors-file (the vectors to derive from)")
    if not sizes or sizes[0] < 1 or args.queries < 1 or args.warmup < 1:
        parser.error("sizes, --queries and --warmup must be positive")
    templates = args.url or [DEFAULT_URL]
    if len(sizes) > 1 and (shared := [t for t in templates if "{size}" not in t]):
        parser.error(f"with several sizes each --url needs {{size}} (a fresh store): {shared}")

    embedder = MiniLMEmbedder()
    # made on first use: a run whose stores are all in --store-cache needs no corpus (a
    # million notes take minutes to make on a busy machine)
    notes: Lazy = Lazy(sizes[-1], lambda: common.make_notes(sizes[-1], seed=args.seed))
    # Distinct queries: warm-up, timed, and stage-split sets never share a question.
    warmup, queries, stage_queries = common.latency_pool(args.warmup, args.queries, args.seed)
    cache_dir = (
        None
        if args.no_vector_cache
        else (args.cache_dir or Path(tempfile.gettempdir()) / "engrain-bench")
    )
    derive_from: int | None = None
    if args.synthetic_vectors:
        print(f"corpus: {len(notes):,} notes; synthetic vectors", file=sys.stderr)
        vectors, embed_s, from_cache = synthetic_vectors(len(notes), embedder.dim, args.seed)
        vectors_label, corpus_tag = "synthetic", f"s{args.seed}-synthetic"
    elif args.vectors_file is not None:
        import numpy as np

        vectors = np.load(args.vectors_file, mmap_mode="r")
        derive_from = len(vectors) if args.derived_vectors else None
        if derive_from is None and len(vectors) < len(notes):
            parser.error(f"{args.vectors_file} holds {len(vectors):,} vectors, not {len(notes):,}")
        source = vectors
        vectors = Lazy(len(notes), lambda: derive(source, len(notes), args.seed + 4))
        embed_s, from_cache = 0.0, True
        vectors_label = f"{embedder.model_id}, another corpus's ({args.vectors_file.name})"
        corpus_tag = f"s{args.seed}-{args.vectors_file.stem}"
        if derive_from is not None and len(notes) > derive_from:
            vectors_label = "derived"
        print(f"corpus: {len(notes):,} notes; vectors of {args.vectors_file}"
              + (" (derived beyond its rows)" if vectors_label == "derived" else ""),
              file=sys.stderr)  # fmt: skip
    else:
        print(f"corpus: {len(notes):,} notes; embedding with {embedder.model_id}",
              file=sys.stderr)  # fmt: skip
        vectors, embed_s, from_cache = common.embed_corpus(
            embedder, [n.text for n in notes], cache_dir=cache_dir
        )
        vectors_label, corpus_tag = embedder.model_id, f"s{args.seed}-model"

    backends: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="engrain-latency-") as tmp:
        for label, template in backend_labels(templates).items():
            results: dict[str, Any] = {}
            for size in sizes:
                url = template.replace("{tmp}", tmp).replace("{size}", str(size))
                # a size within the file's rows holds exactly its vectors: the same store
                tag = corpus_tag
                if derive_from is not None and size > derive_from:
                    tag = f"s{args.seed}-derived-{derive_from}-{args.vectors_file.stem}"
                print(f"{label}, size {size:,}: writing and querying", file=sys.stderr)
                results[str(size)] = run_size(
                    url,
                    size,
                    notes,
                    vectors,
                    embedder,
                    queries,
                    stage_queries,
                    warmup,
                    Path(tmp),
                    max(1, args.rounds),
                    args.baseline_src,
                    args.store_cache,
                    tag,
                    args.build_only,
                )
            backends[label] = {"url": template, "sizes": results}
    if args.build_only:
        print(json.dumps(backends, indent=1))
        return 0

    report = {
        # the first backend's numbers where earlier reports kept them
        "sizes": next(iter(backends.values()))["sizes"],
        "backends": backends,
        "targets": {f"{b} {n}": t for (b, n), t in P95_TARGETS.items()}
        | {f"up to {SMALL}": SMALL_P95_TARGET},
        "machine": common.machine_info(),
        "corpus": {
            "seed": args.seed,
            "notes": len(notes),
            "words_mean": round(sum(len(n.text.split()) for n in notes) / len(notes), 1)
            if notes.made
            else None,
            "embedding_seconds": round(embed_s, 1),
            "embedding_texts_per_s": round(len(notes) / embed_s, 1) if embed_s else None,
            "vectors_from_cache": from_cache,
            "vectors": vectors_label,
            "vectors_file": None if args.vectors_file is None else str(args.vectors_file),
            "derive_from": derive_from if vectors_label == "derived" else None,
            "derive_noise": DERIVE_NOISE if vectors_label == "derived" else None,
            "derive_seed": args.seed + 4 if vectors_label == "derived" else None,
            "cache_dir": None if cache_dir is None else str(cache_dir),
        },
        "engine": _engine_settings(embedder.model_id, list(backends)),
    }
    common.write_json(args.out, report)
    print_table(report)
    return 0


DEFAULT_URL = "sqlite:///{tmp}/latency-{size}.db"


def synthetic_vectors(count: int, dim: int, seed: int) -> tuple[Any, float, bool]:
    """``count`` unit vectors clustered like embeddings (200 centres plus noise), drawn
    from ``seed``; shaped as :func:`common.embed_corpus`'s answer."""
    import numpy as np

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((200, dim))
    if count <= 2 * CHUNK:  # as in earlier runs
        vectors = centres[rng.integers(0, 200, count)] + 0.7 * rng.standard_normal((count, dim))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors.astype(np.float32), 0.0, False
    out = np.empty((count, dim), dtype=np.float32)  # a chunk at a time: float64 is 2x
    for start in range(0, count, CHUNK):
        n = min(CHUNK, count - start)
        part = centres[rng.integers(0, 200, n)] + 0.7 * rng.standard_normal((n, dim))
        out[start : start + n] = part / np.linalg.norm(part, axis=1, keepdims=True)
    return out, 0.0, False


class Lazy(Sequence[Any]):
    """A sequence of known length, made by ``make`` on first use and kept."""

    def __init__(self, length: int, make: Callable[[], Sequence[Any]]) -> None:
        self._length, self._make = length, make
        self._value: Sequence[Any] | None = None

    @property
    def made(self) -> bool:
        """Whether the sequence was made."""
        return self._value is not None

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if self._value is None:
            self._value = self._make()
        return self._value[index]


#: Norm of the noise added to a source vector to derive one (``pg_scale.derived_vectors``).
DERIVE_NOISE = 0.5


def derive(source: Any, count: int, seed: int) -> Any:
    """``count`` float32 unit vectors for the corpus from ``source`` (the model's vectors of
    ``len(source)`` texts): its first ``count`` rows if it has that many, else all of them
    followed by noisy copies — row ``i`` is ``source[i % len(source)]`` plus Gaussian noise
    of norm ~:data:`DERIVE_NOISE`, normalised, drawn from ``seed``. The rule and the draws
    are ``bench/pg_scale.py``'s ``derived_vectors`` (imported from there), so the SQLite
    and PostgreSQL million-memory corpora hold the same kind of vectors."""
    import numpy as np

    if count <= len(source):
        return np.ascontiguousarray(source[:count], dtype=np.float32)
    from pg_scale import derived_vectors

    real = np.ascontiguousarray(source, dtype=np.float32)
    return derived_vectors(real, count, seed, noise=DERIVE_NOISE)


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


def _print_depths(row: dict[str, Any]) -> None:
    """Deep and shallow calls apart (:func:`depth_summary`), this tree and the baseline's."""
    for name, r in (("", row), ("baseline ", row.get("baseline"))):
        if not r or "deep_calls" not in r:
            continue
        for group in ("deep", "shallow"):
            cells = "  ".join(
                f"{m} {r.get(f'{group}_{m}_p50_ms', float('nan')):.1f} / "
                f"{r.get(f'{group}_{m}_p95_ms', float('nan')):.1f}"
                for m in ("wall", "thread", "process")
            )
            print(f"{'':>10} {name}{group} ({r[f'{group}_calls']:.0f} calls) p50 / p95: {cells}")
            if f"{group}_tail_gc_mean_ms" in r:
                print(f"{'':>12} collector passes a call (gen 0 / 1 / 2) "
                      f"{r[f'{group}_gc0_per_call']:.2f} / {r[f'{group}_gc1_per_call']:.2f} / "
                      f"{r[f'{group}_gc2_per_call']:.3f}; slowest tenth / rest, thread ms: "
                      f"call {r[f'{group}_tail_thread_mean_ms']:.1f} / "
                      f"{r.get(f'{group}_rest_thread_mean_ms', float('nan')):.1f}, collector "
                      f"{r[f'{group}_tail_gc_mean_ms']:.2f} / "
                      f"{r.get(f'{group}_rest_gc_mean_ms', float('nan')):.2f}, counted uses "
                      f"{r[f'{group}_tail_uses_mean_ms']:.2f} / "
                      f"{r.get(f'{group}_rest_uses_mean_ms', float('nan')):.2f} "
                      f"(wall {r[f'{group}_tail_uses_wall_mean_ms']:.2f} / "
                      f"{r.get(f'{group}_rest_uses_wall_mean_ms', float('nan')):.2f})")  # fmt: skip


def _print_backend(label: str, report: dict[str, Any]) -> None:
    print()
    print(f"context() latency, one user, {label}  (verdict: p95 against the issues' target)")
    print(f"{'memories':>10} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'mean ms':>8} "
          f"{'cold ms':>8} {'1st open':>8} {'RSS MB':>7} {'R@50':>6}  verdict")  # fmt: skip
    for size, row in report["sizes"].items():
        target = p95_target(label, int(size))
        verdict = (
            "no target"
            if target is None
            else f"{'meets' if row['p95_ms'] <= target else 'misses'} p95 ≤ {target:g}"
        )
        recall = row.get("recall_at_50")
        first = row.get("first_open", {}).get("cold_start_ms", float("nan"))
        print(
            f"{int(size):>10,} {row['p50_ms']:>8.1f} {row['p95_ms']:>8.1f} "
            f"{row['p99_ms']:>8.1f} {row['mean_ms']:>8.1f} "
            f"{row.get('cold_start_ms', float('nan')):>8.0f} {first:>8.0f} "
            f"{row.get('rss_mb', float('nan')):>7.0f} "
            f"{'exact' if recall is None else f'{recall:.3f}':>6}  {verdict}"
        )
        if "baseline" in row:
            b = row["baseline"]
            print(
                f"{'  baseline':>10} {b['p50_ms']:>8.1f} {b['p95_ms']:>8.1f} "
                f"{b['p99_ms']:>8.1f} {b['mean_ms']:>8.1f} {b['cold_start_ms']:>8.0f} "
                f"{'':>8} {b['rss_mb']:>7.0f} {'exact':>6}"
            )
            print(f"{'':>10} blocks differing from the baseline's: "
                  f"{row.get('blocks_differing_from_baseline')} of {row['queries']}")  # fmt: skip
        _print_depths(row)
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
