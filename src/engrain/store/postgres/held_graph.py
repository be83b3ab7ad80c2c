"""A large PostgreSQL user's vectors in an HNSW graph held in process, whose walk proposes
the pool search's candidates (issue 18, session 20; ``projected.py`` serves the searches).

The database walks the pool's graph for every ``context()`` of a large user: at 100,000
memories ~6 ms of its CPU at k = 50 and 15-26 ms for the deep pools the gate asks for
(k = 75-187, ``hnsw.ef_search`` = 4 × k), the p95 of a call (docs/postgres.md, "Session
19"). Here the walk runs in process instead: a usearch graph (``store/ann.py``'s
:class:`~engrain.store.ann.VectorIndex`: int8 vectors, connectivity 16, keyed by the rows'
``seq``) proposes :data:`GRAPH_PER_ROW` × ``k`` + :data:`GRAPH_EXTRA` seqs (~1-2 ms of one
core), and the database scores those and every row changed since the graph's revision by
pgvector's own distance (``projected.nearest_sql``): the rows, fields and scores are the SQL
path's, only which rows are looked at comes from here, and nothing held can be stale.

**Built off the path, then kept current by patching.** The first search of a user that
walks the pool's graph starts a load in a thread: the user's seqs and vectors read in one
snapshot through a cursor, added to a new graph chunk by chunk (never all the vectors at
once; ~55 s of one core at 100,000 rows). Meanwhile the SQL path serves, so the first
``context()`` after opening a store is no slower than without the graph. Once more than
``projected.RELOAD_ROWS`` rows changed since its revision, a load *catches up* instead of
building again (:func:`caught_up`): the rows changed since (``row_changes``, migration 008)
read in one snapshot with the revision, and those whose vector the graph does not hold
added or replaced in place (~0.5 ms of CPU a row). A forgotten row's seq cannot be read
any more (the row is gone): it stays in the graph as a dead candidate, which the database
does not find; once dead rows are :data:`WORN_SHARE` of the graph, the next load builds a
new one.

**Kept between processes** (session 21): a graph built (or read and brought up to date) is
written to a file in a cache directory (``graph_file.py``), and the next process serving
the user reads it instead of building one: :func:`restored` checks it against the database
and catches it up in one snapshot (~0.5 s of CPU at 100,000 rows, against ~55-75 s to
build).

**Threads.** A graph is patched only by its user's load (one per user per process, the
loader's rule) under the index's own lock, while searches walk it; the held
:class:`PoolGraph` naming it is replaced by one with the newer revision only after every
row changed up to that revision is in it. A search that read the older revision has the
database score every row changed since that revision, so candidates added early cost
nothing and none can be missed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg

from engrain.store.ann import ANN_MIN_VECTORS, VectorIndex, join_at_exit
from engrain.store.postgres.codec import Conn
from engrain.store.postgres.loader import ONE_CORE
from engrain.store.postgres.schema import INDEXED_DIM, LEARNING_KINDS

#: Candidates the graph proposes per row asked for, plus :data:`GRAPH_EXTRA`: asked for
#: 1.5 × k + 16, its walk (int8 vectors, expansion 256) held the exact k nearest of
#: bench/latency.py's 100,000 notes with R@k 0.997 / 0.993 / 0.990 at k = 50 / 100 / 187
#: (200 questions of seed 8); asked for k alone, 0.96 (docs/postgres.md, "Session 20").
GRAPH_PER_ROW = 1.5
GRAPH_EXTRA = 16
#: What the graph holds per row, for the check before a load (usearch's count at 100,000
#: rows: ~64 MB with the int8 vectors).
GRAPH_ROW_BYTES = 700
#: Rows from which a user's graph is held: a smaller user keeps the database's walk, which
#: is cheap over a small graph (the SQLite store searches such users exactly, from the same
#: threshold: ``store/ann.py``'s ``ANN_MIN_VECTORS``), and the bound is not spent on users
#: it barely helps.
MIN_ROWS = ANN_MIN_VECTORS
#: The share of dead rows (forgotten since the graph was built) from which the next load
#: builds a new graph instead of patching this one: dead rows take candidates' places.
WORN_SHARE = 0.1
#: Rows a load reads at a time through a server-side cursor.
CHUNK_ROWS = 4_096

INDEXED = f"m.embedding IS NOT NULL AND vector_dims(m.embedding) = {INDEXED_DIM}"
REVISION = "SELECT revision FROM revisions WHERE user_id = %s"
GONE = "SELECT count(*) FROM row_changes c WHERE c.user_id = %s AND c.revision > %s AND c.gone"


@dataclass(frozen=True)
class Scope:
    """Which of a user's rows a held graph holds: those with a vector of the indexed size
    and ``only`` (an SQL condition on ``m``, the memories row; empty: every such row).
    ``name`` tells its graph file apart from the other scopes' of the same user."""

    name: str
    only: str = ""

    @property
    def indexed(self) -> str:
        """The rows of the scope, as an SQL condition on ``m``."""
        return f"{INDEXED}{self.only}"

    @property
    def count_sql(self) -> str:
        return f"SELECT count(*) FROM memories m WHERE m.user_id = %s AND {self.indexed}"

    @property
    def load_sql(self) -> str:
        return (
            f"SELECT m.seq, vector_send(m.embedding) FROM memories m WHERE m.user_id = %s "
            f"AND {self.indexed} ORDER BY m.seq"
        )

    @property
    def changed_sql(self) -> str:
        """The rows of the scope changed after a revision (seq and vector)."""
        return (
            "SELECT m.seq, vector_send(m.embedding) FROM row_changes c JOIN memories m "
            f"ON m.user_id = c.user_id AND m.id = c.id WHERE c.user_id = %s "
            f"AND c.revision > %s AND {self.indexed}"
        )

    @property
    def seqs_sql(self) -> str:
        """The seqs of the user's rows of the scope, as one value (:func:`seqs_of`): their
        big-endian int8s joined (``NULL``: none), so that a million of them cross the
        socket as 8 MB and are read without a Python object a row (``loader.ONE_CORE``)."""
        return (
            "SELECT string_agg(int8send(m.seq), ''::bytea) FROM memories m "
            f"WHERE m.user_id = %s AND {self.indexed}"
        )

    @property
    def some_rows_sql(self) -> str:
        """The seqs and vectors of some rows of the scope."""
        return (
            "SELECT m.seq, vector_send(m.embedding) FROM memories m WHERE m.user_id = %s "
            f"AND m.seq = ANY(%s) AND {self.indexed}"
        )

    def file_key(self, user_id: str) -> str:
        """What names the user's graph of this scope in a graph file (``graph_file.py``):
        the user id for the pool (the files of earlier versions), the user id and the
        scope's name apart from it by a NUL (which no stored user id holds: PostgreSQL's
        text cannot) for the others."""
        return user_id if self is POOL else f"{user_id}\x00{self.name}"


#: Every row with a vector of the indexed size: the pool's graph (session 20).
POOL = Scope("pool")
#: The typed learnings only (``schema.LEARNING_KINDS``, the rows of the database's own
#: learnings graph, ``memories_learnings_hnsw``): a user whose learnings are too many to
#: rank in process (``learnings.py``) has them proposed by a graph of their own.
LEARNINGS = Scope("learnings", f" AND m.kind IN ({', '.join(repr(k) for k in LEARNING_KINDS)})")
#: The pool's statements (tests and benchmarks read them).
COUNT = POOL.count_sql
LOAD = POOL.load_sql
CHANGED_ROWS = POOL.changed_sql
SEQS = POOL.seqs_sql
SOME_ROWS = POOL.some_rows_sql
#: Rows of a graph read from a file whose vectors are compared with the database's before
#: it is used (every row's seq is: :func:`restored`).
CHECKED_ROWS = 512


@dataclass(frozen=True)
class PoolGraph:
    """A user's rows as of ``revision`` in a graph held in process (``index``, keyed by
    seq), ``dead`` of its rows forgotten since; ``nbytes`` what holding it costs."""

    revision: int
    index: VectorIndex
    nbytes: int
    dead: int = 0

    @property
    def worn(self) -> bool:
        """Whether the next load builds a new graph (:data:`WORN_SHARE`)."""
        return self.dead > WORN_SHARE * max(1, len(self.index))

    def candidates(self, query: np.ndarray[Any, Any], k: int) -> np.ndarray[Any, Any]:
        """The seqs of the graph's :data:`GRAPH_PER_ROW` × ``k`` + :data:`GRAPH_EXTRA`
        rows nearest ``query`` (any order; its length changes no rank)."""
        wanted = math.ceil(GRAPH_PER_ROW * k) + GRAPH_EXTRA if k > 0 else 0
        unit = unit_rows(np.asarray(query, dtype=np.float32).reshape(1, -1))[0]
        return self.index.search(unit, wanted).astype(np.int64)


def revision_and_rows(cur: Any, user_id: str, scope: Scope = POOL) -> tuple[int, int]:
    """The user's store revision and number of indexed rows (of ``scope``), read with
    ``cur`` (in the caller's snapshot)."""
    first = cur.execute(REVISION, (user_id,)).fetchone()
    counted = cur.execute(scope.count_sql, (user_id,)).fetchone()
    return (int(first[0]) if first else 0), (int(counted[0]) if counted else 0)


def read(
    conn: Conn,
    user_id: str,
    max_bytes: int,
    closed: Callable[[], bool],
    scope: Scope = POOL,
) -> PoolGraph | None:
    """The user's rows (of ``scope``) read in one snapshot into a new graph, chunk by chunk
    (``None``: fewer than :data:`MIN_ROWS` rows, more than ``max_bytes`` would allow, or
    ``closed()`` became true)."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        conn.execute(ONE_CORE)
        with conn.cursor(binary=True) as cur:
            revision, n = revision_and_rows(cur, user_id, scope)
        if n == 0 or n < MIN_ROWS or n * GRAPH_ROW_BYTES > max_bytes:
            return None
        join_at_exit()  # the exit waits for the chunk being added, then stops the build
        with conn.cursor("engrain_pool_graph", binary=True) as named:
            named.execute(scope.load_sql, (user_id,))
            index = VectorIndex.built_from(INDEXED_DIM, _chunks(named, closed))
    finally:
        conn.execute("COMMIT")
    if closed():
        return None
    return PoolGraph(revision, index, index.nbytes)


def caught_up(conn: Conn, user_id: str, graph: PoolGraph, scope: Scope = POOL) -> PoolGraph:
    """``graph`` brought to the user's revision: the rows (of ``scope``) changed since its
    revision read in one snapshot, those whose vector it does not hold patched into its
    index (in place: the module docstring says why searches meanwhile stay right), the
    forgotten ones counted dead (of any scope: a narrower scope's graph is rebuilt sooner,
    never later). The same graph if nothing changed."""
    with conn.transaction(), conn.cursor(binary=True) as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur.execute(ONE_CORE)
        first = cur.execute(REVISION, (user_id,)).fetchone()
        revision = int(first[0]) if first else 0
        if revision <= graph.revision:
            return graph
        rows = cur.execute(scope.changed_sql, (user_id, graph.revision)).fetchall()
        gone = cur.execute(GONE, (user_id, graph.revision)).fetchone()
    if rows:
        keys = np.fromiter((r[0] for r in rows), dtype=np.uint64, count=len(rows))
        vectors = unit_rows(stored([r[1] for r in rows]))
        fresh = ~graph.index.holds(keys, vectors)
        if fresh.any():
            graph.index.patch(keys[fresh], vectors[fresh])
    dead = graph.dead + (int(gone[0]) if gone else 0)
    return PoolGraph(revision, graph.index, graph.index.nbytes, dead)


def restored(
    conn: Conn, user_id: str, revision: int, index: VectorIndex, scope: Scope = POOL
) -> PoolGraph | None:
    """A graph read from a file (``graph_file.py``: ``index``, the user's rows as of
    ``revision`` by its own account) checked against the database and brought up to date,
    in one snapshot; ``None`` if it cannot be trusted: the user's revision is older than
    the file's (another database's history), or, after the rows changed since ``revision``
    are patched in as :func:`caught_up` does, a row of the user's is not in it or one of
    :data:`CHECKED_ROWS` rows spread over them is there with another vector (rows of
    ``scope``). Its dead rows are counted exactly (what it holds that the user no longer
    has in the scope)."""
    with conn.transaction(), conn.cursor(binary=True) as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur.execute(ONE_CORE)
        first = cur.execute(REVISION, (user_id,)).fetchone()
        now = int(first[0]) if first else 0
        if now < revision:
            return None
        joined = cur.execute(scope.seqs_sql, (user_id,)).fetchone()
        live = seqs_of(joined[0] if joined else None)
        del joined
        if len(live) < max(1, MIN_ROWS):
            return None
        rows = (
            cur.execute(scope.changed_sql, (user_id, revision)).fetchall() if now > revision else []
        )
        spread = live[np.linspace(0, len(live) - 1, min(CHECKED_ROWS, len(live))).astype(int)]
        checked = cur.execute(
            scope.some_rows_sql, (user_id, spread.astype(np.int64).tolist())
        ).fetchall()
    if rows:
        keys = np.fromiter((r[0] for r in rows), dtype=np.uint64, count=len(rows))
        vectors = unit_rows(stored([r[1] for r in rows]))
        fresh = ~index.holds(keys, vectors)
        if fresh.any():
            index.patch(keys[fresh], vectors[fresh])
    if not holds_every(index, live):
        return None
    keys = np.fromiter((r[0] for r in checked), dtype=np.uint64, count=len(checked))
    if not index.holds(keys, unit_rows(stored([r[1] for r in checked]))).all():
        return None
    return PoolGraph(now, index, index.nbytes, dead=len(index) - len(live))


def seqs_of(joined: bytes | None) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """The seqs :meth:`Scope.seqs_sql` joined into one value (``None``: none)."""
    if not joined:
        return np.empty(0, dtype=np.uint64)
    return np.frombuffer(joined, dtype=">i8").astype(np.uint64)


def holds_every(index: VectorIndex, keys: np.ndarray[Any, Any]) -> bool:
    """Whether ``index`` holds every one of ``keys``, asked :data:`CHUNK_ROWS` at a time
    (usearch holds the GIL for a whole call: other threads take it between chunks;
    ``loader.ONE_CORE``)."""
    return all(
        bool(index.contains(keys[at : at + CHUNK_ROWS]).all())
        for at in range(0, len(keys), CHUNK_ROWS)
    )


def _chunks(named: psycopg.Cursor[Any], closed: Callable[[], bool]) -> Iterator[tuple[Any, Any]]:
    """The (seq, vector) rows of a load's cursor as (keys, unit vectors), a chunk at a
    time; none once ``closed()`` (the build stops, nothing is published)."""
    while not closed() and (chunk := named.fetchmany(CHUNK_ROWS)):
        keys = np.fromiter((r[0] for r in chunk), dtype=np.uint64, count=len(chunk))
        yield keys, unit_rows(stored([r[1] for r in chunk]))


def unit_rows(vectors: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``vectors`` (rows) scaled to unit length (a zero row stays zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    out: np.ndarray[Any, Any] = np.zeros_like(vectors)
    np.divide(vectors, norms, out=out, where=norms > 0)
    return out


def stored(blobs: list[bytes]) -> np.ndarray[Any, Any]:
    """pgvector's binary form (``vector_send``: a 4-byte header, then big-endian float32s)
    of vectors of :data:`INDEXED_DIM`, as float32 rows."""
    joined = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(blobs), INDEXED_DIM + 1)
    return joined[:, 1:].astype(np.float32)
