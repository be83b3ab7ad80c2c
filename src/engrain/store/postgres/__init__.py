"""PostgreSQL with pgvector: the store for multi-user deployments and the path to scale.

Selected by URL (``postgresql://user:pass@host/db`` or ``postgres://…``). Every process —
API replicas, workers, the CLI — opens its own pool over the same database, and a write by
one is seen by the next read of any other.

**Schema.** Named migrations in a ``migrations`` table (the first creates the ``vector``
extension). ``memories`` is keyed by ``(user_id, id)`` and holds every field of
:class:`~engrain.model.Memory`; timestamps are ``timestamptz`` (read back in UTC, like the
SQLite store), floats ``double precision`` — except the access count and last access time,
which live in the narrow ``access`` table: they change on every ``context()`` call, and
there they update in place instead of copying a 2 kB row into every index, the HNSW graph
included (17 ms a call, and index bloat, at a million memories when they were columns).
``state`` holds the per-user JSON documents, ``revisions`` one row per user with its
revision number and the document count and total token length BM25 needs, ``term_stats``
its document frequencies, ``access_clocks`` its access clock;
``embedding_cache`` the content-hash cache. Provenance and state documents are ``json``,
not ``jsonb``: jsonb rewrites numbers (``6.07e16`` comes back as an int, ``-0.0`` as ``0``)
and refuses the ``\\u0000`` escape, while ``json`` keeps the exact text engrain wrote, and
nothing queries inside these documents.

**Vectors of any size, an index for the production size.** ``embedding`` is an untyped
``vector`` column, so the 4-dimensional vectors of the contract tests and the 384-dimensional
vectors of all-MiniLM-L6-v2 live in the same table. HNSW needs a fixed dimension, so the
index is a partial expression index: ``(embedding::vector(384)) vector_cosine_ops WHERE
vector_dims(embedding) = 384``. Another model size needs one more such index, nothing else.
A search for a user with at least :data:`EXACT_SEARCH_BELOW` memories and at least
:data:`INDEXED_SHARE` of the table runs the indexed form (``ORDER BY
embedding::vector(384) <=> q LIMIT k`` with the user and every filter in its ``WHERE``,
``hnsw.iterative_scan = relaxed_order`` so filtered scans keep going until ``k`` rows
pass). Any other user is searched exactly through the ``(user_id, …)`` b-tree: for a small
user that is faster than the graph (2,000 rows ≈ 4 ms here), and for a user holding a
sliver of a large multi-tenant table the graph walk would mostly visit other users' rows.
If an indexed scan still returns fewer than ``k`` rows (a very selective filter), the exact
form runs instead, so ``k`` rows come back whenever ``k`` pass the filter, as the protocol
promises. The walk's candidate list (``hnsw.ef_search``) follows the graph's size
(:data:`EF_BY_GRAPH_ROWS`, at least :data:`EF_PER_ROW` per row asked for, or
:data:`LEARNINGS_EF_PER_ROW` on the learnings' own graph, or
:data:`WIDE_EF_BY_GRAPH_ROWS` on a pool graph rebuilt wide by ``engrain migrate
--pool-graph``: ``graph.py``), set for the search alone and sent in its round trip.
Since both forms return the right rows, the choice is kept per user for
:data:`PLAN_SECONDS`. :meth:`PostgresStore.search_many`
(the gate's pool and learnings) runs its searches at once, each on its own pooled
connection. (One graph per tenant — a partitioned table — is the next step if a
deployment has many users each far above the threshold.)

**BM25 equal to** :class:`~engrain.store.lexical.LexicalIndex`. Texts are tokenized in
Python with :func:`engrain.store.lexical.tokenize` at write time into posting lists kept in
blocks (``posting_blocks (user_id, term, first_seq, data)``: up to 256 postings of packed
seq, term frequency and document length, sorted by the memory's ``seq``); ``revisions``
keeps each user's document count and total length, ``term_stats`` each term's document
frequency, all in the write's transaction. A query reads the statistics of its terms and
every block of their lists in one statement (``bm25``) and scores in numpy with
LexicalIndex's own float32 arithmetic and term order, so the scores are bit-for-bit the
same (while a user's total token length stays below 2**24, where float32 sums are exact).
The best matches are then checked against the filter in SQL by seq, best first, until
``k`` pass. A million memories: a question's ~400,000 postings are ~1,600 rows (~30 ms),
where one row per posting took ~330 ms to scan and decode. Nothing of a posting list is
kept in the process, so nothing needs to be checked for staleness or warmed.

**Reads.** What process memory holds is always checked against the database in the same
call. :meth:`PostgresStore.query` (which can return thousands of rows, all the user's
procedural memories for example) keeps each listing with the user's revision and *access
clock* (``access_clocks``: bumped by every access count, whose row lock orders the counts
of one user; each access row records the clock of its last count). Asked again, it reads
the revision, the clock and the access rows counted since, in one statement: the same
revision serves the kept listing with those counts applied; another revision lists again.
A listing lists ids with their row versions (``xmin`` of the memory and of its access row)
and decodes only the rows it has not already decoded at that version; reading and decoding
full rows with their vectors costs ~40 µs a row, listing them ~1 µs.

**A large user's learnings in process** (``learnings.py``, on by default): the typed
learnings every ``context()`` searches, of a user whose searches walk the graphs, are held
as int16 steps of each vector (``quantized.py``, two bytes a value) with the columns a
filter reads and searched exactly (no walk of the learnings' graph): the steps choose the
rows that may be among the k best, which are ranked by their float32 vectors read with
them; each search reads the rows changed since the held revision (``row_changes``) and
those rows in one snapshot and one round trip, so it is never stale.

**A large user's pool search through a projection** (``projected.py``, off unless
``ENGRAIN_PG_PROJECTED_MB`` or ``projected_bytes`` asks for it: it did not win on a machine
running both the process and the database; it moves the walk's CPU off the database): a
user whose searches walk the pool's graph is held as the seqs of their memories and their
vectors projected onto 128 main directions; a search ranks those, and the database scores
the best 4 × ``k`` and every row changed since the projection's revision exactly, in one
statement and snapshot (no walk; never stale: nothing but which rows to look at is held).
With ``ENGRAIN_PG_POOL_INDEX=graph`` (``pool_index="graph"``) the candidates of a user of
at least 20,000 memories come from an HNSW graph of the user's vectors held in process
instead (``held_graph.py``, session 20), kept in a file between processes
(``graph_file.py``, session 21). By default (unset, ``projection`` or ``off``) neither is
held and the database walks the pool's graph: the held graph costs ~70–90 MB of RSS at
100,000 memories, past the 300 MB target (docs/postgres.md).

**A large user's working set** (``working.py``, off unless ``ENGRAIN_PG_WORKING_SET=on``
or ``working_set_min`` asks for it): users of 20,000 to 200,000 memories are searched and
BM25-ranked in process from a :class:`~engrain.store.cache.UserCache`, served
only while one statement per call finds the user's revision unchanged (access counts made
since applied) or the rows changed since are few and changed in place (read from
``row_changes`` and applied in the call); a call after any other write is served by SQL
while the working set is brought up to date in the background.

**Writes** (``writes.py``). One READ COMMITTED transaction per :meth:`PostgresStore.write`.
It first bumps the revision row of every user it changes (in sorted order: writers of one
user queue there, writers of different users never wait on each other), then locks the
rows it replaces, patches or deletes with ``SELECT … FOR UPDATE`` in ``(user_id, id)``
order. A patch is applied to the row read under that lock, so concurrent changes of other
fields are kept, and a row a concurrent forget deleted is gone by the time the lock is
granted: the patch is skipped, never re-inserted. :meth:`PostgresStore.record_access`
takes a shared lock on the same rows in the same order before it counts (an atomic
``access_count + n``), so the two never deadlock and a count never brings a row back.
:meth:`PostgresStore.record_uses` is that count and a ``context()``'s record (state rows,
after the count) in one transaction and one round trip.
Everything the write needs from the items it is given (rows, tokens, JSON) is computed
before the transaction opens, so a bad item changes nothing; a deadlock or serialization
failure rolls back and reruns the whole transaction.

**Modules.** ``schema`` (migrations), ``fill`` (the token counts a large table's
migration 009 left, filled in batches after it), ``codec (rows ↔ memories, vectors), ``sql`` (the
queries), ``writes`` (the write transactions), ``bm25`` (posting blocks and scores),
``restem`` (migration 011: the stored terms re-stemmed after the stemmer's fix; the
re-stemming itself), ``restem_final_e`` (migration 012: the same after the final "e"'s
fix), ``restem_plural`` (migration 013: the same after "-ies" / "-ied" / "-ie" and "-us");
this module holds the store itself.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from engrain.errors import ConfigError, StoreError, ValidationError, WriteOutcomeUnknownError
from engrain.model import Memory, Vector, as_utc
from engrain.store.base import ALL, KeyClaim, KeyRecord, MemoryFilter, Patch, State
from engrain.store.lexical import tokenize
from engrain.store.postgres import bm25, fill, outcome, schema
from engrain.store.postgres import graph as pool_graph
from engrain.store.postgres.codec import (
    EF_SEARCH,
    KEY_COLUMNS,
    Conn,
    configure,
    from_row,
    key_from_row,
    key_row,
)
from engrain.store.postgres.graph_file import graph_dir as graph_dir_env
from engrain.store.postgres.learnings import Learnings
from engrain.store.postgres.learnings import learnings_bytes as learnings_bytes_env
from engrain.store.postgres.projected import KINDS as POOL_KINDS
from engrain.store.postgres.projected import Projected
from engrain.store.postgres.projected import pool_kind as pool_kind_env
from engrain.store.postgres.projected import projected_bytes as projected_bytes_env
from engrain.store.postgres.schema import HNSW_INDEX_SQL, INDEXED_DIM, MIGRATIONS
from engrain.store.postgres.sql import (
    CHANGES,
    FETCH,
    best_rows_sql,
    chunks,
    filter_sql,
    listing_sql,
    redact,
    search_sql,
)
from engrain.store.postgres.working import WorkingSets
from engrain.store.postgres.working import working_set_asked as _working_set_asked
from engrain.store.postgres.working import working_set_min as _working_set_min
from engrain.store.postgres.writes import access_body, uses_body, write_body
from engrain.store.reads import SharedThreads

__all__ = [
    "CACHED_ROWS",
    "EF_BY_GRAPH_ROWS",
    "EF_PER_ROW",
    "EF_SEARCH",
    "EXACT_SEARCH_BELOW",
    "HNSW_INDEX_SQL",
    "INDEXED_DIM",
    "INDEXED_SHARE",
    "LEARNINGS_EF_PER_ROW",
    "MIGRATIONS",
    "WIDE_EF_BY_GRAPH_ROWS",
    "WIDE_EF_PER_ROW",
    "PostgresStore",
    "configure",
    "ef_for_graph",
    "ef_for_search",
    "learnings_graph",
]

#: Users with fewer memories are searched exactly: reading their rows through the b-tree
#: and sorting by distance (~2 µs a row here) beats a graph walk at that size.
EXACT_SEARCH_BELOW = 2_000
#: ... and so are users holding less than this share of the table: one global graph is
#: mostly other users' rows, and a filtered walk visits about k / share of them.
INDEXED_SHARE = 0.01
#: Decoded rows :meth:`PostgresStore.query` keeps, each checked against its row version.
CACHED_ROWS = 20_000
#: Times a write is retried after a deadlock or serialization failure.
_RETRIES = 3
#: Seconds :meth:`PostgresStore.close` waits for a background filler's batch to end.
_FILL_STOP_SECONDS = 10.0
#: Seconds a user's search plan (HNSW or exact, :meth:`PostgresStore._indexed`) is kept.
PLAN_SECONDS = 10.0
#: Users whose search plan is kept, least recently used dropped first.
PLANS_KEPT = 10_000
#: ``hnsw.ef_search`` by the size of the graph a search walks: (most rows, ef), the first
#: that holds; larger graphs get :data:`EF_SEARCH`. Measured R@50 of the pool's search
#: against exact search (``bench/pg_scale.py``, 100 queries of the model's vectors): at
#: 100,000 rows 0.980 / 0.993 / 0.996 at ef 100 / 200 / 400; at 1,000,000 0.923 at 200,
#: 0.980 at 400. Between the two nothing is measured, hence the bound at 200,000.
EF_BY_GRAPH_ROWS: tuple[tuple[int, int], ...] = ((200_000, 200),)
#: ... and at least this many candidates per row asked for: the learnings' search (k = 100)
#: had R@100 0.908 / 0.948 / 0.969 at ef 100 / 200 / 400 at 100,000 memories on their
#: graph as first built (``ef_construction`` 64), so a list of 200 lost recall the pool's
#: k = 50 kept (0.993). The pool's graph is still built so.
EF_PER_ROW = 4
#: ... except on the learnings' own graph, built with a wide list (``ef_construction``
#: 400, ``schema.LEARNINGS_EF_CONSTRUCTION``, migration 007): there 3 per row, ef 300 for
#: the gate's 100. R@100 against exact search at ef 200 / 300 / 400, session 15: real
#: vectors (bench/latency.py's 100,000 notes) 0.984 / 0.991 / 0.994 and, other questions,
#: 0.980 / 0.989 / 0.993; derived vectors 0.998 / 0.999 / 0.999. 300 keeps ≥ 0.98 with a
#: margin for ~20% less of the server's CPU a walk than 400 (docs/postgres.md, "Session 15").
LEARNINGS_EF_PER_ROW = 3
#: The pool's graph built wide (``graph.WIDE_EF_CONSTRUCTION``, ``engrain migrate
#: --pool-graph``): (most rows, ef) as :data:`EF_BY_GRAPH_ROWS`, and 3 candidates per row.
#: R@50 against exact search, 100,000 real-vector memories, 60 questions each of seed 8
#: (the tune set) / seed 99, session 18: the wide graph at ef 100 / 150 / 200 0.9900 /
#: 0.9959 / 0.9967 and 0.9838 / 0.9930 / 0.9956; the default graph at its 200 0.9906 and
#: 0.9884. 150 is the least list measured whose recall is not below the default graph's on
#: the tune set (100 is, by 0.0006, and by 0.005 on the other), for ~0.9 ms less of the
#: server's CPU a walk (docs/postgres.md, "Session 18 … (h3)"). Larger graphs are not
#: measured: they keep the wide list.
WIDE_EF_BY_GRAPH_ROWS: tuple[tuple[int, int], ...] = ((200_000, 150),)
WIDE_EF_PER_ROW = 3


def ef_for_graph(rows: int) -> int:
    """The ``hnsw.ef_search`` for a walk of a graph of ``rows`` rows
    (:data:`EF_BY_GRAPH_ROWS`): the smallest candidate list measured to keep R@50 ≥ 0.98
    with a margin."""
    for most, ef in EF_BY_GRAPH_ROWS:
        if rows <= most:
            return ef
    return EF_SEARCH


def learnings_graph(flt: MemoryFilter) -> bool:
    """Whether a search under ``flt`` walks the learnings' own graph
    (``memories_learnings_hnsw``, partial on their kinds): its kinds are all learning
    kinds, which is what lets the planner prove the index's predicate."""
    return bool(flt.kinds) and all(k.value in schema.LEARNING_KINDS for k in flt.kinds or ())


def ef_for_search(
    rows: int, k: int, flt: MemoryFilter, pool_built: int = pool_graph.DEFAULT_EF_CONSTRUCTION
) -> int:
    """The ``hnsw.ef_search`` of an indexed search for ``k`` rows under ``flt`` in a graph
    of ``rows`` rows: :func:`ef_for_graph`, and at least :data:`EF_PER_ROW` candidates per
    row asked for (:data:`LEARNINGS_EF_PER_ROW` on the learnings' own graph); on the pool's
    graph built with ``pool_built`` ≥ ``graph.WIDE_EF_CONSTRUCTION``,
    :data:`WIDE_EF_BY_GRAPH_ROWS` and :data:`WIDE_EF_PER_ROW` instead."""
    if learnings_graph(flt):
        return max(ef_for_graph(rows), LEARNINGS_EF_PER_ROW * k)
    if pool_built >= pool_graph.WIDE_EF_CONSTRUCTION:
        wide = next((ef for most, ef in WIDE_EF_BY_GRAPH_ROWS if rows <= most), EF_SEARCH)
        return max(wide, WIDE_EF_PER_ROW * k)
    return max(ef_for_graph(rows), EF_PER_ROW * k)


#: Threads running the other searches of :meth:`PostgresStore.search_many`, shared by
#: every store in the process (a ``context()`` runs two searches).
SEARCH_THREADS = 8

_search_threads = SharedThreads(SEARCH_THREADS, "engrain-search")


#: Past any access clock: :meth:`PostgresStore._changes` lists no access rows.
_NO_CLOCK = 2**63 - 1
T = TypeVar("T")


@dataclass(frozen=True)
class _Listing:
    """A result of :meth:`PostgresStore.query` as of the user's ``revision`` and access
    ``clock``."""

    revision: int
    clock: int
    memories: tuple[Memory, ...]

    def counted(self, clock: int, counts: Sequence[tuple[str, int, datetime | None]]) -> _Listing:
        """This listing at access clock ``clock``, given the access rows stamped since
        (id, count, last access): the memories among them get their new counts."""
        if clock == self.clock:
            return self
        changed = {memory_id: (n, at) for memory_id, n, at in counts}
        memories = tuple(
            m
            if (hit := changed.get(m.id)) is None
            else replace(
                m, access_count=hit[0], last_accessed_at=None if hit[1] is None else as_utc(hit[1])
            )
            for m in self.memories
        )
        return _Listing(self.revision, clock, memories)


def _unit(vector: Vector) -> Vector:
    """``vector`` scaled to length 1 (a working set's dot products are then the cosine
    similarities the SQL search returns: stored vectors are unit vectors)."""
    query = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    return query / norm if norm > 0 else query


class PostgresStore:
    """A PostgreSQL database with pgvector, shared by any number of processes.

    ``url`` is a libpq URL or conninfo string; ``pool_size`` the most connections this
    process opens; ``exact_search_below`` and ``indexed_share`` the user size, absolute and
    as a share of the table, under which vector search skips the HNSW index (see the module
    docstring); ``cached_rows`` how many decoded rows :meth:`query` keeps (0: none);
    ``ef_search`` the HNSW candidate list of an indexed search (raised to ``k``; ``None``:
    by the graph's size, :func:`ef_for_graph`); ``working_set_min`` the size from which a
    user's searches are served from a working set in process (``store/postgres/working.py``;
    ``"auto"``: ``ENGRAIN_PG_WORKING_SET`` or the module's default, ``None``: never);
    ``learnings_bytes`` the most bytes of large users' typed learnings searched in process
    (``store/postgres/learnings.py``; ``"auto"``: ``ENGRAIN_PG_LEARNINGS_MB`` or 96 MiB,
    0: none, their searches walk the learnings' graph); ``projected_bytes`` the most bytes of
    large users' projections whose candidates the database scores instead of walking the
    pool's graph (``store/postgres/projected.py``; ``"auto"``: ``ENGRAIN_PG_PROJECTED_MB``,
    else 96 MiB for the graph, 0 for the projection); ``pool_index`` what they are held as,
    ``"graph"`` (an HNSW graph in process, the users of at least 20,000 memories) or
    ``"projection"`` (``"auto"``: ``ENGRAIN_PG_POOL_INDEX``, the projection unless it says
    ``graph``: the graph costs ~70–90 MB of RSS at 100,000); ``graph_dir``
    where graphs are kept between processes (``store/postgres/graph_file.py``; ``"auto"``:
    ``ENGRAIN_PG_GRAPH_DIR`` or the user's cache directory; ``None``: nowhere). The schema
    is migrated on open; ``fill_in_background`` starts a filler of the token counts a large
    table's migration 009 left (``store/postgres/fill.py``) if the database still has any.
    """

    #: Reads may run from several threads at once, each on its own pooled connection:
    #: ``context()`` overlaps its lexical, pinned and procedural reads with the query
    #: embedding and the vector search (``engrain.store.reads``).
    concurrent_reads = True

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        exact_search_below: int = EXACT_SEARCH_BELOW,
        indexed_share: float = INDEXED_SHARE,
        cached_rows: int = CACHED_ROWS,
        ef_search: int | None = None,
        connect_timeout: float = 30.0,
        working_set_min: int | str | None = "auto",
        learnings_bytes: int | str = "auto",
        projected_bytes: int | str = "auto",
        pool_index: str = "auto",
        graph_dir: str | Path | None = "auto",
        fill_in_background: bool = True,
    ) -> None:
        try:
            conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise ConfigError(f"malformed PostgreSQL URL: {str(exc).strip()}") from exc
        kind = pool_kind_env() if pool_index == "auto" else pool_index
        if kind not in POOL_KINDS:
            raise ConfigError(f"unknown pool index {kind!r}: one of {', '.join(POOL_KINDS)}")
        self.url = url
        self.exact_search_below = exact_search_below
        self.indexed_share = indexed_share
        self.cached_rows = cached_rows
        self.ef_search = ef_search
        self._rows: OrderedDict[tuple[str, str], tuple[str, Memory]] = OrderedDict()
        self._listings: OrderedDict[tuple[str, MemoryFilter, int | None, int], _Listing] = (
            OrderedDict()
        )
        #: Per user: the rows of the graph its searches walk (``None``: exact), its
        #: memories, and when that was read (:meth:`_graph_rows`).
        self._plans: OrderedDict[str, tuple[int | None, int, float]] = OrderedDict()
        #: How the pool's graph was built, as the last plan read it (graph.BUILT_SQL)
        self._pool_built = pool_graph.DEFAULT_EF_CONSTRUCTION
        self._where = redact(url)
        self._closed = False
        self._lock = threading.Lock()
        self._next_prune = 0.0  # outcome.PRUNE_SECONDS: old write tokens deleted
        self.migrate()
        # writes record their tokens where this tree's migrations made their table (a
        # test standing in for an older tree leaves that migration out)
        self._tokens = any(name == outcome.MIGRATION for name, _ in schema.MIGRATIONS)
        try:
            self._pool: ConnectionPool[Conn] = ConnectionPool(
                url,
                min_size=1,
                max_size=max(1, pool_size),
                kwargs={"autocommit": True},
                configure=configure,
                timeout=connect_timeout,
                name="engrain",
                open=True,
            )
            self._pool.wait(timeout=connect_timeout)
        except psycopg.Error as exc:
            if hasattr(self, "_pool"):
                self._pool.close()
            raise StoreError(f"cannot open PostgreSQL store at {self._where}: {exc}") from exc
        least = _working_set_min() if working_set_min == "auto" else working_set_min
        learned = working_set_min == "auto" and not _working_set_asked()
        self._working = (
            None if least is None else WorkingSets(self._connection, int(least), learned=learned)
        )
        held = learnings_bytes_env() if learnings_bytes == "auto" else int(learnings_bytes)
        self._learnings = None if held <= 0 else Learnings(self._connection, held)
        held = projected_bytes_env(kind=kind) if projected_bytes == "auto" else int(projected_bytes)
        kept = graph_dir_env() if graph_dir == "auto" else graph_dir
        self._projected = (
            None
            if held <= 0
            else Projected(
                self._connection, held, kind=kind, graph_dir=None if kept is None else Path(kept)
            )
        )
        self._filler: fill.Filler | None = None
        if fill_in_background and self._fill_pending():
            self._filler = fill.Filler(url)
            self._filler.start()

    def migrate(self) -> list[str]:
        """Apply the migrations not yet applied, each in its own transaction, one process
        at a time (an advisory lock); their names."""
        return schema.migrate(self.url, self._where)

    def fill_content_tokens(self, batch: int = fill.FILL_BATCH) -> int:
        """Fill the token counts a large table's migration 009 left, ``batch`` rows per
        transaction, in this thread (``engrain migrate``), after a filler of another process
        finishes if one runs (this store's own background filler is stopped first); the rows
        this call filled (0: none left)."""
        if self._filler is not None:
            self._filler.stop()
        try:
            return fill.fill(self.url, batch=batch) or 0
        except psycopg.Error as exc:
            raise StoreError(f"filling token counts at {self._where} failed: {exc}") from exc

    def rebuild_pool_graph(self, maintenance_work_mem: str | None = None) -> bool:
        """Rebuild the pool's HNSW graph with a wide candidate list beside the one in use
        and swap it in (``graph.rebuild``; ``engrain migrate --pool-graph``), so searches
        walk a shorter list for at least the same recall; ``False`` if it is built so already. Every
        store sees it at its next search plan (:data:`PLAN_SECONDS`)."""
        return pool_graph.rebuild(self.url, self._where, maintenance_work_mem=maintenance_work_mem)

    def wait_for_fill(self, timeout: float | None = None) -> bool:
        """Wait for this store's background filler to end (tests and benchmarks); whether
        every row of the database now holds its token count."""
        if self._filler is not None and not self._filler.wait(timeout):
            return False
        return not self._fill_pending()

    def _fill_pending(self) -> bool:
        with self._connection() as conn:
            return fill.pending(conn)

    # -- plumbing -----------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[Conn]:
        if self._closed:
            raise StoreError(f"the PostgreSQL store at {self._where} is closed")
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.errors.DataError as exc:
            raise ValidationError(f"PostgreSQL refused a value: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL at {self._where} failed: {exc}") from exc

    def _read(self, query: Any, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            cur.execute(query, params)
            return cur.fetchall()

    def _transaction(self, body: Callable[[Conn], T]) -> T:
        """``body`` in one transaction, retried from the start after a deadlock or a
        serialization failure (the transaction was rolled back, so it is safe).

        The transaction runs in pipeline mode, opened and closed by plain ``BEGIN`` and
        ``COMMIT`` statements queued with the body's: they travel together, so a write
        waits for the server only where the body reads a result (its row locks) and once
        at the end — a body that reads nothing (an access count, a state document) is one
        round trip. (psycopg's ``transaction()`` inside a pipeline syncs when it opens
        and twice when it closes: four round trips for one statement.) A statement the
        server refuses aborts the pipeline, the rest is skipped and the transaction is
        rolled back: nothing of it is written. A connection that breaks once the ``COMMIT``
        is sent leaves the outcome to :meth:`_resolve` (``outcome.py``)."""
        for attempt in range(_RETRIES + 1):
            token = outcome.new_token() if self._tokens else None
            prune = self._prune_due() if self._tokens else None
            try:
                with self._connection() as conn:
                    return outcome.in_one_transaction(conn, body, token, prune)
            except outcome.InDoubt as doubt:  # only ever raised with a token
                return self._resolve(token or b"", doubt)  # type: ignore[no-any-return]
            except StoreError as exc:
                retry = isinstance(
                    exc.__cause__,
                    psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure,
                )
                if not retry or attempt == _RETRIES:
                    raise
        raise AssertionError("unreachable")

    def _resolve(self, token: bytes, doubt: outcome.InDoubt) -> Any:
        """The result of a write whose connection broke after its ``COMMIT`` was sent, if
        the database finds its token (it committed); else ``StoreError`` (it did not, and
        now never will), or :class:`WriteOutcomeUnknownError` if the database cannot say."""
        cause = doubt.__cause__
        try:
            stored = outcome.committed(self._pool.connection, token)
        except psycopg.Error as exc:
            raise WriteOutcomeUnknownError(
                f"PostgreSQL at {self._where} went away while a write was committing "
                f"({str(cause).strip()}) and could not be asked whether it committed "
                f"({str(exc).strip()}): it may or may not be stored. Read it back (get or "
                "list it by id) once the database answers before writing it again."
            ) from exc
        if not stored:
            raise StoreError(
                f"PostgreSQL at {self._where} failed while committing (nothing was "
                f"written): {str(cause).strip()}"
            ) from cause
        return doubt.result

    def _prune_due(self) -> bytes | None:
        """The token bound to prune below, once every ``outcome.PRUNE_SECONDS`` per store."""
        now = time.time()
        with self._lock:
            if now < self._next_prune:
                return None
            self._next_prune = now + outcome.PRUNE_SECONDS
        return outcome.prune_below(now)

    # -- protocol -----------------------------------------------------------------------

    def write(
        self,
        upserts: Sequence[Memory] = (),
        deletes: Sequence[Memory] = (),
        state: Sequence[State] = (),
        patches: Sequence[Patch] = (),
        claims: Sequence[KeyClaim] = (),
    ) -> None:
        """Check the claims, insert or replace ``upserts``, apply ``patches`` to the rows
        that exist (read ``FOR UPDATE`` inside the transaction), delete ``deletes`` and put
        ``state``, in one transaction; each user whose memories changed gets a new
        revision. The claims are checked once the transaction holds the revision rows of
        their users, which every writer of those users takes first (``writes.py``)."""
        if not upserts and not deletes and not state and not patches:
            return
        # Read every item before the transaction: a bad one raises here, nothing written.
        self._transaction(write_body(upserts, deletes, state, patches, claims))
        with self._lock:  # their sizes changed: plan their next searches afresh
            for memory in (*upserts, *deletes):
                self._plans.pop(memory.user_id, None)
        if self._working is not None:
            touched: dict[str, set[str]] = {}
            for memory in (*upserts, *deletes):
                touched.setdefault(memory.user_id, set()).add(memory.id)
            for patch in patches:
                touched.setdefault(patch.user_id, set()).add(patch.where[1])
            self._working.written(touched)

    def wait_for_working_set(self, user_id: str, timeout: float | None = None) -> bool:
        """Start loading the user's working set if it is due and wait for it (tests and
        benchmarks; callers never need to: calls are served by SQL meanwhile); whether the
        user's searches are now served from it."""
        return self._working is not None and self._working.wait(user_id, timeout)

    def wait_for_learnings(self, user_id: str, timeout: float | None = None) -> bool:
        """Wait for a load of the user's learnings that runs (``learnings.py``; tests and
        benchmarks: callers never need to, their searches walk the graph meanwhile);
        whether they are now searched in process."""
        return self._learnings is not None and self._learnings.wait(user_id, timeout)

    def wait_for_projection(self, user_id: str, timeout: float | None = None) -> bool:
        """Wait for a load of the user's projection that runs (``projected.py``; tests and
        benchmarks); whether one is held."""
        return self._projected is not None and self._projected.wait(user_id, timeout)

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        """The user's memories with these ids, in the order given; unknown ids skipped."""
        if not ids:
            return []
        found = {m.id: m for _, m in self._fetch(user_id, list(dict.fromkeys(ids)))}
        return [found[i] for i in ids if i in found]

    def _fetch(self, user_id: str, ids: Sequence[str]) -> list[tuple[str, Memory]]:
        """The user's memories with these (distinct) ids, each with its row version."""
        fetched: list[tuple[str, Memory]] = []
        for part in chunks(ids):
            for row in self._read(FETCH, (user_id, part)):
                fetched.append((row[-1], from_row(row)))
        return fetched

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        """The user's memories passing ``flt``, most recently updated first (ties: the
        larger id first, so pages are stable). A listing read before is served again while
        the user's revision is unchanged, with the access counts made since (module
        docstring)."""
        key = (user_id, flt, limit, offset)
        with self._lock:
            cached = self._listings.get(key)
        if cached is not None:
            revision, clock, counts = self._changes(user_id, cached.clock)
            if revision == cached.revision:
                fresh = cached.counted(clock, counts)
                with self._lock:
                    self._listings[key] = fresh
                    self._listings.move_to_end(key)
                return list(fresh.memories)
        else:
            revision, clock, _ = self._changes(user_id, None)
        listing = self._read(*listing_sql(user_id, flt, limit, offset))
        memories = self._decoded(user_id, listing)
        if len(memories) <= self.cached_rows // 4:
            with self._lock:
                self._listings[key] = _Listing(revision, clock, tuple(memories))
                self._listings.move_to_end(key)
                while sum(len(e.memories) for e in self._listings.values()) > self.cached_rows:
                    self._listings.popitem(last=False)
        return memories

    def _changes(
        self, user_id: str, since: int | None
    ) -> tuple[int, int, list[tuple[str, int, datetime | None]]]:
        """The user's revision and access clock, and (``since`` a clock) the access counts
        stamped after it, all from one snapshot."""
        after = _NO_CLOCK if since is None else since
        rows = self._read(CHANGES, (user_id, user_id, user_id, after))
        revision, clock = int(rows[0][0] or 0), int(rows[0][1] or 0)
        counts = [(r[2], int(r[3]), r[4]) for r in rows if r[2] is not None]
        return revision, clock, counts

    def _decoded(self, user_id: str, listing: Sequence[tuple[str, str]]) -> list[Memory]:
        """The memories of ``listing`` (id, row version), from the row cache where the
        version still matches, else read and cached."""
        found: dict[str, Memory] = {}
        with self._lock:
            for memory_id, version in listing:
                hit = self._rows.get((user_id, memory_id))
                if hit is not None and hit[0] == version:
                    found[memory_id] = hit[1]
                    self._rows.move_to_end((user_id, memory_id))
        missing = [memory_id for memory_id, _ in listing if memory_id not in found]
        fetched = self._fetch(user_id, missing)
        found.update((memory.id, memory) for _, memory in fetched)
        if fetched and self.cached_rows > 0:
            with self._lock:
                for version, memory in fetched:
                    self._rows[(user_id, memory.id)] = (version, memory)
                    self._rows.move_to_end((user_id, memory.id))
                while len(self._rows) > self.cached_rows:
                    self._rows.popitem(last=False)
        # a row deleted between the two reads is left out
        return [found[memory_id] for memory_id, _ in listing if memory_id in found]

    def search_many(
        self, user_id: str, vector: Vector, searches: Sequence[tuple[int, MemoryFilter]]
    ) -> list[list[tuple[Memory, float]]]:
        """:meth:`search` for each ``(k, flt)``, all at once: the first in the calling
        thread, each other one on its own pooled connection in a search thread, so the
        database walks the graphs (the pool's and the learnings') in parallel instead of
        one after the other. With ``concurrent_reads`` false, one after the other."""
        held = None if self._working is None else self._working.current(user_id)
        if held is not None:
            return held.search_many(_unit(vector), searches)
        if len(searches) < 2 or not self.concurrent_reads:
            return [self.search(user_id, vector, k, flt) for k, flt in searches]
        # no thread holds a connection while it waits for another: the calling thread's
        # search returns its connection before the others' results are asked for
        others = [
            _search_threads().submit(self.search, user_id, vector, k, flt)
            for k, flt in searches[1:]
        ]
        try:
            first = self.search(user_id, vector, *searches[0])
        finally:
            results = [future.result() for future in others]
        return [first, *results]

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories most cosine-similar to ``vector`` among those passing ``flt``,
        best first, with their cosine similarity (1 − pgvector's cosine distance); from the
        user's working set when it is current (``working.py``)."""
        query = np.asarray(vector, dtype=np.float32)
        if k <= 0 or query.ndim != 1 or query.shape[0] == 0:
            return []
        held = None if self._working is None else self._working.current(user_id)
        if held is not None:
            return held.search(_unit(query), k, flt)
        if self._learnings is not None and query.shape[0] == INDEXED_DIM and learnings_graph(flt):
            found = self._learnings.search(user_id, _unit(query), k, flt)
            if found is not None:
                return found
        if (
            self._projected is not None
            and query.shape[0] == INDEXED_DIM
            and not learnings_graph(flt)
        ):
            found = self._projected.search(user_id, query, k, flt)
            if found is not None:
                return found
        return self._sql_search(user_id, query, k, flt)

    def _sql_search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """:meth:`search` by SQL: through the HNSW graph or exactly (module docstring)."""
        query = np.asarray(vector, dtype=np.float32)
        if k <= 0 or query.ndim != 1 or query.shape[0] == 0:
            return []
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            ef = self._ef(cur, user_id, query.shape[0], k, flt)
            rows: list[Any] = []
            if ef is not None and self._learnings is not None and learnings_graph(flt):
                self._learnings.start_load(user_id)  # the next calls search them in process
            elif ef is not None and self._projected is not None:
                # the next calls rank a projection (or walk a held graph, if it is large)
                self._projected.start_load(user_id, rows=self._user_rows(user_id))
            if ef is not None:
                text, params = search_sql(user_id, query, k, flt, indexed=True)
                if ef == EF_SEARCH:  # the connection's own setting (configure)
                    cur.execute(text, params)
                else:
                    # for this search only (SET LOCAL), in the search's round trip
                    def walk(c: Conn) -> psycopg.Cursor[Any]:
                        c.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
                        return c.cursor(binary=True).execute(text, params)

                    cur = outcome.in_one_transaction(conn, walk)
                rows = cur.fetchall()
            if ef is None or len(rows) < k:
                cur.execute(*search_sql(user_id, query, k, flt, indexed=False))
                rows = cur.fetchall()
        rows.sort(key=lambda r: r[-1])  # relaxed_order: the index may return near-sorted rows
        return [(from_row(r), 1.0 - float(r[-1])) for r in rows]

    def _ef(
        self, cur: psycopg.Cursor[Any], user_id: str, dim: int, k: int, flt: MemoryFilter
    ) -> int | None:
        """The ``hnsw.ef_search`` of this user's indexed search for ``k`` rows under
        ``flt`` (``None``: searched exactly): this store's ``ef_search`` if set (at least
        ``k``), else :func:`ef_for_search` of the graph's size."""
        rows = self._graph_rows(cur, user_id, dim)
        if rows is None:
            return None
        if self.ef_search is not None:
            return max(self.ef_search, k)
        return ef_for_search(rows, k, flt, self._pool_built)

    def _indexed(self, cur: psycopg.Cursor[Any], user_id: str, dim: int) -> bool:
        """Whether a search of this user goes through the HNSW index (module docstring)."""
        return self._graph_rows(cur, user_id, dim) is not None

    def _user_rows(self, user_id: str) -> int | None:
        """The user's memories as their last plan read them (``None``: no plan kept)."""
        with self._lock:
            kept = self._plans.get(user_id)
        return None if kept is None else kept[1]

    def _graph_rows(self, cur: psycopg.Cursor[Any], user_id: str, dim: int) -> int | None:
        """The rows of the HNSW graph a search of this user walks, or ``None`` if the
        search is exact (module docstring). The answer is kept for :data:`PLAN_SECONDS`:
        it only chooses between two forms that both return the right rows (exact search;
        the index scan, which falls back to exact search when it finds fewer than ``k``)
        and a candidate list by recall, so an answer a little out of date costs time or a
        sliver of approximate recall at most, never a wrong result."""
        if dim != INDEXED_DIM:
            return None
        now = time.monotonic()
        with self._lock:
            kept = self._plans.get(user_id)
        if kept is not None and now - kept[2] < PLAN_SECONDS:
            return kept[0]
        # the table's size as the planner knows it (ANALYZE, autovacuum): no count needed;
        # and how the pool's graph was built (graph.py), for every user's next walks
        cur.execute(
            "SELECT r.documents, greatest(c.reltuples, 0), (" + pool_graph.BUILT_SQL + ") "
            "FROM revisions r, pg_class c "
            "WHERE r.user_id = %s AND c.oid = 'memories'::regclass",
            (user_id,),
        )
        found = cur.fetchone()
        if found is not None:
            self._pool_built = int(found[2])
        if found is not None and self._working is not None:
            self._working.saw_size(user_id, int(found[0]))
        indexed = found is not None and found[0] >= max(
            self.exact_search_below, self.indexed_share * found[1]
        )
        graph = int(max(found[0], found[1])) if found is not None and indexed else None
        with self._lock:
            self._plans[user_id] = (graph, int(found[0]) if found is not None else 0, now)
            self._plans.move_to_end(user_id)
            while len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)
        return graph

    def explain_search(
        self,
        user_id: str,
        vector: Vector,
        k: int,
        flt: MemoryFilter = ALL,
        *,
        indexed: bool | None = None,
        analyze: bool = False,
    ) -> str:
        """The query plan of the vector search :meth:`search` runs for this user (or, with
        ``indexed``, of the HNSW form or the exact form), to check what serves it."""
        query = np.asarray(vector, dtype=np.float32)
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            if indexed is None:
                indexed = self._indexed(cur, user_id, query.shape[0])
            text, params = search_sql(user_id, query, k, flt, indexed=indexed)
            prefix = "EXPLAIN (ANALYZE, BUFFERS) " if analyze else "EXPLAIN "
            cur.execute(prefix + text, params)
            return "\n".join(r[0] for r in cur.fetchall())

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories passing ``flt`` with the highest BM25 score for ``text`` over
        the user's own term statistics; the scores equal :class:`LexicalIndex`'s."""
        # LexicalIndex.scores sums the terms in sorted order; so does bm25.scores.
        terms = sorted(set(tokenize(text)))
        if k <= 0 or not terms:
            return []
        held = None if self._working is None else self._working.current(user_id)
        if held is not None:
            return held.lexical_search(text, k, flt)
        statistics = self._read(bm25.STATISTICS, (terms, user_id))
        if statistics and self._working is not None:
            self._working.saw_size(user_id, int(statistics[0][0]))
        scored = bm25.scores(terms, statistics)
        depth = 2 * k
        while True:
            best = scored.best(depth)
            rows = self._read(*best_rows_sql(user_id, best, flt, k))
            if len(rows) >= k or len(best) >= len(scored):
                break
            depth *= 4
        return [(from_row(r[:-1]), best[r[-1]]) for r in rows]

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        """Add one to the access count of each id (once per occurrence) and stamp it; the
        revision does not change, and a deleted id is not brought back."""
        if ids:
            self._transaction(access_body(user_id, ids, at))

    def record_uses(
        self, user_id: str, ids: Sequence[str], at: datetime, state: Sequence[State] = ()
    ) -> None:
        """:meth:`record_access` and the ``state`` documents in one transaction, one round
        trip (``writes.uses_body``): a ``context()``'s counted uses and its record."""
        if ids or state:
            self._transaction(uses_body(user_id, ids, at, state))

    def count(self, user_id: str, flt: MemoryFilter = ALL) -> int:
        """How many of the user's memories pass ``flt``."""
        where, params = filter_sql(flt)
        rows = self._read(
            f"SELECT count(*) FROM memories m WHERE m.user_id = %s{where}", (user_id, *params)
        )
        return int(rows[0][0])

    def centroid(self, user_id: str) -> Vector | None:
        """The mean embedding of the user's memories (computed in SQL), or ``None``. Vectors
        of another size than the user's first are left out, as in the other stores."""
        rows = self._read(
            "SELECT avg(m.embedding) FROM memories m WHERE m.user_id = %s "
            "AND m.embedding IS NOT NULL AND vector_dims(m.embedding) = ("
            "  SELECT vector_dims(f.embedding) FROM memories f "
            "  WHERE f.user_id = %s AND f.embedding IS NOT NULL ORDER BY f.seq LIMIT 1)",
            (user_id, user_id),
        )
        mean = rows[0][0] if rows else None
        return None if mean is None else np.asarray(mean, dtype=np.float32)

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        """Embedding cache lookup: content hash → vector, for the hashes known."""
        found: dict[str, Vector] = {}
        for part in chunks(list(hashes)):
            for h, vector in self._read(
                "SELECT content_hash, vector FROM embedding_cache "
                "WHERE model_id = %s AND content_hash = ANY(%s::text[])",
                (model_id, part),
            ):
                found[h] = vector
        return found

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        """Embedding cache write (an existing entry is kept)."""
        if not vectors:
            return
        rows = [(model_id, h, np.asarray(v, dtype=np.float32)) for h, v in sorted(vectors.items())]

        def body(db: Conn) -> None:
            with db.cursor(binary=True) as cur:
                cur.executemany(
                    "INSERT INTO embedding_cache (model_id, content_hash, vector) "
                    "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                    rows,
                )

        self._transaction(body)

    def revision(self, user_id: str) -> int:
        """The user's revision: changes with every write of their memories; 0 if never."""
        rows = self._read("SELECT revision FROM revisions WHERE user_id = %s", (user_id,))
        return int(rows[0][0]) if rows else 0

    def get_state(self, user_id: str, namespace: str, key: str) -> dict[str, Any] | None:
        """The state document at ``(namespace, key)``, or ``None``."""
        rows = self._read(
            "SELECT value FROM state WHERE user_id = %s AND namespace = %s AND key = %s",
            (user_id, namespace, key),
        )
        return dict(rows[0][0]) if rows else None

    def states(self, user_id: str, namespace: str | None = None) -> list[State]:
        """Every state document of the user (in ``namespace``, or in all), sorted by
        namespace and key."""
        rows = self._read(
            "SELECT namespace, key, value FROM state WHERE user_id = %s "
            "AND (%s::text IS NULL OR namespace = %s) ORDER BY namespace, key",
            (user_id, namespace, namespace),
        )
        return [State(user_id, ns, k, dict(v)) for ns, k, v in rows]

    def expire_state(self, user_id: str, namespace: str, before: datetime) -> int:
        """Delete the user's documents in ``namespace`` written before ``before``; how many."""
        when = as_utc(before)

        def body(db: Conn) -> int:
            cursor = db.execute(
                "DELETE FROM state WHERE user_id = %s AND namespace = %s AND updated_at < %s "
                "RETURNING 1",
                (user_id, namespace, when),
            )
            return len(cursor.fetchall())  # (a pipeline has no row count before its sync)

        return self._transaction(body)

    def users(self) -> list[str]:
        """Every user id with at least one memory, sorted."""
        return [
            r[0]
            for r in self._read(
                "SELECT user_id FROM revisions WHERE documents > 0 ORDER BY user_id"
            )
        ]

    def put_key(self, record: KeyRecord) -> bool:
        """Store a new API key; ``False`` (nothing written) if its id is taken."""

        def body(db: Conn) -> bool:
            cursor = db.execute(
                f"INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING RETURNING 1",
                key_row(record),
            )
            return len(cursor.fetchall()) == 1

        return self._transaction(body)

    def key_record(self, digest: str) -> KeyRecord | None:
        """The key whose secret hashes to ``digest`` (asked of the database on every call),
        or ``None``."""
        rows = self._read(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE digest = %s", (digest,))
        return key_from_row(rows[0]) if rows else None

    def key_records(self) -> list[KeyRecord]:
        """Every key, oldest first (ties by id)."""
        rows = self._read(f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
        return [key_from_row(r) for r in rows]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        """Mark the key revoked (the first revocation time is kept); ``False`` if unknown."""
        when = as_utc(at)

        def body(db: Conn) -> bool:
            cursor = db.execute(
                "UPDATE api_keys SET revoked_at = coalesce(revoked_at, %s) WHERE id = %s "
                "RETURNING 1",
                (when, key_id),
            )
            return len(cursor.fetchall()) == 1

        return self._transaction(body)

    def close(self) -> None:
        """Close the pool's connections (idempotent) and drop the working sets; a background
        filler ends after its batch (the next store to open the database resumes it)."""
        if self._filler is not None:
            self._filler.stop(timeout=_FILL_STOP_SECONDS)
        if self._working is not None:
            self._working.close()
        if self._learnings is not None:
            self._learnings.close()
        if self._projected is not None:
            self._projected.close()
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.close()
