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
Since migration 015 both graphs hold only the rows of *graphed* users (``graphed.py``): a
user enters them, every row at once, with the write that takes it to the writer's
``exact_search_below``, and a search plan reads the flag, so a user whose rows are not in
the graphs is searched exactly by every process, whatever its own threshold; the indexed
form says ``AND m.graphed``. A small user's write then inserts nothing into either graph
(~45% of the server's CPU of an ingest, ``docs/ingest.md``).
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
blocks (``packed_blocks (user_id, term, first_seq, data)``: up to 256 postings, sorted by
the memory's ``seq``, each 7 bytes: the seq's low 32 bits, term frequency and document
length, escaped where they do not fit: ``postings.py``; migration 014 repacked the 14-byte
records of ``posting_blocks``, ``repack.py``); ``revisions``
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
By default (``ENGRAIN_PG_POOL_INDEX`` unset or ``graph``; ``pool_index="graph"``) the
candidates of a user of at least 20,000 memories come from an HNSW graph of the user's
vectors held in process instead (``held_graph.py``, session 20), kept in a file between
processes (``graph_file.py``, session 21); ``ENGRAIN_PG_POOL_INDEX=off`` keeps the
database's walk.

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
after the count) in one transaction and one round trip with ``ENGRAIN_DEFER_USES=off``; by
default (since session 29, as on SQLite) the record commits in the call and the count just
after it, on a thread of the store, before any other statement of the process
(``deferred.py``).
Everything the write needs from the items it is given (rows, tokens, JSON) is computed
before the transaction opens, so a bad item changes nothing; a deadlock or serialization
failure rolls back and reruns the whole transaction.

**Modules.** ``schema`` (migrations), ``fill`` (the token counts a large table's
migration 009 left, filled in batches after it), ``codec`` (rows ↔ memories, vectors), ``sql``
(the queries), ``writes`` (the write transactions), ``bm25`` (posting blocks' statements
and scores), ``postings`` (a block's bytes: 7-byte records, and the 14-byte ones before
migration 014),
``restem`` (migration 011: the stored terms re-stemmed after the stemmer's fix; the
re-stemming itself), ``restem_final_e`` (migration 012: the same after the final "e"'s
fix), ``restem_plural`` (migration 013: the same after "-ies" / "-ied" / "-ie" and "-us"),
``repack`` (migration 014: every posting block repacked at 7 bytes a posting), ``graphed``
(migration 015: the HNSW graphs hold the rows of graphed users only).
The store itself is :class:`PostgresStore` here over four layers, each a class in its own
module: ``pooled`` (the pool, reads, write transactions and their retries and outcomes),
``records`` (the embedding cache, revisions, state documents, API keys), ``listings``
(reads by id and :meth:`PostgresStore.query`'s kept listings) and ``searches`` (vector and
BM25 search, each user's search plan; the plan's constants and rules are ``plans``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path

import numpy as np
import psycopg
from psycopg.conninfo import conninfo_to_dict

from engrain.errors import ConfigError, StoreError
from engrain.model import Memory, Vector
from engrain.store import heap
from engrain.store.base import ALL, KeyClaim, MemoryFilter, Patch, State
from engrain.store.postgres import fill, held_graph, outcome, schema
from engrain.store.postgres import graph as pool_graph
from engrain.store.postgres.codec import EF_SEARCH, configure
from engrain.store.postgres.deferred import DeferredCounts, Uses, deferred_uses
from engrain.store.postgres.graph_file import graph_dir as graph_dir_env
from engrain.store.postgres.learnings import Learnings
from engrain.store.postgres.learnings import learnings_bytes as learnings_bytes_env
from engrain.store.postgres.listings import Listing
from engrain.store.postgres.loader import Answering
from engrain.store.postgres.plans import (
    EF_BY_GRAPH_ROWS,
    EF_PER_ROW,
    EXACT_SEARCH_BELOW,
    INDEXED_SHARE,
    LEARNINGS_EF_PER_ROW,
    WIDE_EF_BY_GRAPH_ROWS,
    WIDE_EF_PER_ROW,
    ef_for_graph,
    ef_for_search,
    learnings_graph,
)
from engrain.store.postgres.projected import KINDS as POOL_KINDS
from engrain.store.postgres.projected import Projected
from engrain.store.postgres.projected import pool_kind as pool_kind_env
from engrain.store.postgres.projected import projected_bytes as projected_bytes_env
from engrain.store.postgres.records import Records
from engrain.store.postgres.schema import HNSW_INDEX_SQL, INDEXED_DIM, MIGRATIONS
from engrain.store.postgres.searches import Searches
from engrain.store.postgres.sql import filter_sql, redact
from engrain.store.postgres.working import WorkingSets
from engrain.store.postgres.working import working_set_asked as _working_set_asked
from engrain.store.postgres.working import working_set_min as _working_set_min
from engrain.store.postgres.writes import access_body, deferred_body, uses_body, write_body

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

log = logging.getLogger(__name__)

#: Decoded rows :meth:`PostgresStore.query` keeps, each checked against its row version.
CACHED_ROWS = 20_000
#: Seconds :meth:`PostgresStore.close` waits for a background filler's batch to end.
_FILL_STOP_SECONDS = 10.0


class PostgresStore(Searches, Records):
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
    else 1 GiB for the graph, each for the pools' and for the learnings' graphs of users
    whose learnings are too many to search in process, 0 for the projection); ``pool_index``
    what they are held as,
    ``"graph"`` (an HNSW graph in process, the users of at least 20,000 memories) or
    ``"projection"`` (``"auto"``: ``ENGRAIN_PG_POOL_INDEX``, the graph unless it says
    ``projection`` or ``off``); ``graph_dir``
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
        defer_uses: bool | None = None,
    ) -> None:
        self._deferred: DeferredCounts | None = None  # until the pool is open (below)
        try:
            conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise ConfigError(f"malformed PostgreSQL URL: {str(exc).strip()}") from exc
        kind = pool_kind_env() if pool_index == "auto" else pool_index
        if kind not in POOL_KINDS:
            raise ConfigError(f"unknown pool index {kind!r}: one of {', '.join(POOL_KINDS)}")
        # every setting read before any I/O: a bad one migrates and opens nothing
        least = _working_set_min() if working_set_min == "auto" else working_set_min
        learned = working_set_min == "auto" and not _working_set_asked()
        learnings_held = (
            learnings_bytes_env() if learnings_bytes == "auto" else int(learnings_bytes)
        )
        projected_held = (
            projected_bytes_env(kind=kind) if projected_bytes == "auto" else int(projected_bytes)
        )
        kept = graph_dir_env() if graph_dir == "auto" else graph_dir
        defer = deferred_uses() if defer_uses is None else defer_uses
        self.url = url
        self.exact_search_below = exact_search_below
        self.indexed_share = indexed_share
        self.cached_rows = cached_rows
        self.ef_search = ef_search
        self._rows: OrderedDict[tuple[str, str], tuple[str, Memory]] = OrderedDict()
        self._listings: OrderedDict[tuple[str, MemoryFilter, int | None, int], Listing] = (
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
        heap.share_one_arena()  # before the pool's threads start (store/heap.py)
        self.migrate()
        # writes record their tokens where this tree's migrations made their table (a
        # test standing in for an older tree leaves that migration out)
        self._tokens = any(name == outcome.MIGRATION for name, _ in schema.MIGRATIONS)
        self._open_pool(pool_size, connect_timeout)
        try:
            self._hold(least, learned, learnings_held, projected_held, kind, kept)
            self._filler: fill.Filler | None = None
            if fill_in_background and self._fill_pending():
                filler = fill.Filler(url)
                # its thread cannot start (memory, threads): the next open fills them
                self._filler = filler if filler.start() else None
            if defer:
                self._defer_uses()
        except BaseException:
            self._pool.close()  # a store that did not open leaves no pool behind
            raise

    def _hold(
        self,
        least: int | str | None,
        learned: bool,
        learnings_held: int,
        projected_held: int,
        kind: str,
        kept: str | Path | None,
    ) -> None:
        """What this process holds of large users (working sets, learnings, graphs), as
        the settings read by the constructor ask."""
        self._working = (
            None if least is None else WorkingSets(self._connection, int(least), learned=learned)
        )
        # the loads of what is held in process begin once the call asking has answered
        self._answering = Answering()
        self._learnings = (
            None
            if learnings_held <= 0
            else Learnings(self._connection, learnings_held, answering=self._answering)
        )
        where = None if kept is None else Path(kept)
        self._projected = (
            None
            if projected_held <= 0
            else Projected(
                self._connection,
                projected_held,
                kind=kind,
                graph_dir=where,
                answering=self._answering,
            )
        )
        # a user's learnings too many to rank in process walk a graph held here, as the pool
        self._learnings_graph = (
            None
            if projected_held <= 0 or kind != "graph" or self._learnings is None
            else Projected(
                self._connection,
                projected_held,
                kind=kind,
                graph_dir=where,
                scope=held_graph.LEARNINGS,
                answering=self._answering,
            )
        )

    def _defer_uses(self) -> None:
        """Commit the counted uses after each call, on a thread of the store
        (``deferred.py``); if the thread cannot start, each call commits its own."""
        deferred = DeferredCounts(lambda batch: self._transaction(deferred_body(batch)))
        if deferred.start():
            self._deferred = deferred
        else:
            log.warning("%s: the counted uses are written in each context() call (their "
                        "thread could not start)", self._where)  # fmt: skip

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
        self._transaction(
            write_body(upserts, deletes, state, patches, claims, self.exact_search_below)
        )
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

    def answering(self) -> AbstractContextManager[None]:
        """One call of an engine (its calls in flight: ``lifecycle.CallGate``) inside the
        ``with`` block: the loads of what is held in process (learnings, held graphs) that
        its reads ask for begin once it (or another call) has answered, not beside it: the
        call itself is served by SQL, and at 1,000,000 memories its loads beside it made the
        first one take 0.82 s instead of 0.43 (``loader.Answering``)."""
        return self._answering.call()

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

    def wait_for_learnings_graph(self, user_id: str, timeout: float | None = None) -> bool:
        """Wait for a load of the graph of the user's learnings that runs (users whose
        learnings are too many to rank in process: ``projected.py`` with
        ``held_graph.LEARNINGS``; tests and benchmarks); whether one is held."""
        return self._learnings_graph is not None and self._learnings_graph.wait(user_id, timeout)

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        """Add one to the access count of each id (once per occurrence) and stamp it; the
        revision does not change, and a deleted id is not brought back."""
        if ids:
            self._transaction(access_body(user_id, ids, at))

    def record_uses(
        self, user_id: str, ids: Sequence[str], at: datetime, state: Sequence[State] = ()
    ) -> None:
        """:meth:`record_access` and the ``state`` documents in one transaction, one round
        trip (``writes.uses_body``): a ``context()``'s counted uses and its record. With the
        counts deferred (``ENGRAIN_DEFER_USES``, ``deferred.py``) the record commits here and
        the counts, once it has, are handed to the store's thread: a failed record hands
        nothing over."""
        if not ids and not state:
            return
        deferred = self._deferred
        if deferred is None:
            self._transaction(uses_body(user_id, ids, at, state))
            return
        if self._closed:  # nothing handed to a thread that has stopped
            raise StoreError(f"the PostgreSQL store at {self._where} is closed")
        if state:
            self._transaction(uses_body(user_id, (), at, state))
        if ids:
            deferred.add(Uses(user_id, Counter(ids), at))

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

    def close(self) -> None:
        """Close the pool's connections (idempotent) and drop the working sets; a background
        filler ends after its batch (the next store to open the database resumes it). The
        counts waiting (``deferred.py``) are committed first."""
        if self._deferred is not None and not self._closed:
            self._deferred.close(_FILL_STOP_SECONDS)
        if self._filler is not None:
            self._filler.stop(timeout=_FILL_STOP_SECONDS)
        if self._working is not None:
            self._working.close()
        if self._learnings is not None:
            self._learnings.close()
        if self._projected is not None:
            self._projected.close()
        if self._learnings_graph is not None:
            self._learnings_graph.close()
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.close()
