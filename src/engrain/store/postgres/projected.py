"""A large PostgreSQL user's nearest memories found through a projection held in process
(issue 18, session 17).

The gate's pool search (the ``k`` memories nearest the question, any kind) walks the HNSW
graph of every memory on the SQL path: at 100,000 memories the largest cost the database
has left in a ``context()`` (~7-13 ms of its CPU a call at ef 200, docs/postgres.md,
"Session 17"), and approximate (R@50 ~0.99). Searching all 100,000 float32 vectors in
process would cost more CPU than the walk (~10 ms of one core for the product alone) and
~150 MB. Here a user whose searches walk the graph is held as the seqs of their memories
with a vector of the indexed size and those vectors' unit directions projected onto their
:data:`DIMS` main directions (the right singular vectors of a sample: ~51 MB at 100,000
memories). A search ranks every held row by the projected product (one ``einsum``, ~2-4 ms
of one core), takes the :data:`CANDIDATES_PER_ROW` × ``k`` best, and asks the database for
the ``k`` nearest of those by pgvector's own cosine distance, filter applied, in one
statement: the rows and scores it returns are the SQL path's own, and only which rows are
looked at is approximate (R@50 against exact search ~0.998 on the benchmark's corpus,
against the walk's ~0.99).

**Never stale.** The same statement also looks at every row changed since the revision
the projection was read at (migration 008's ``row_changes``: every write stamps the rows
it changes): a new or re-embedded memory is scored exactly by the database whatever the
projection holds, and a forgotten one is not found. Nothing else of a row is held, so
nothing else can be stale: the filter, the fields and the access counts are read in the
call. Read in one ``REPEATABLE READ`` snapshot with the count of those changes; more than
:data:`DELTA_ROWS` changed rows, or fewer than ``k`` rows passing the filter among the
candidates: the call is served by SQL. More than :data:`RELOAD_ROWS`: a new projection is
loaded in the background.

**Loaded off the path.** The first search of a user that walks the pool's graph starts a
load in a thread (revision, a sample for the directions and every row's vector, chunk by
chunk, in one snapshot). One load per user at a time, the next no sooner than four times
the last one took (at least :data:`RELOAD_PAUSE` s).

**The projection is off** (``ENGRAIN_PG_POOL_INDEX=projection`` with
``ENGRAIN_PG_PROJECTED_MB``, or ``PostgresStore(pool_index="projection", projected_bytes=…)``):
on one two-core machine running both, a ``context()`` at 100,000 memories cost the
database ~2.8 ms less CPU and the process ~5.5 ms more (the product over every row is
memory-bound, ~3 ms, beside ranking and the candidates' literal), with 90 MB more RSS, so
it did not win there (docs/postgres.md, "Session 17"). It is for a deployment whose
database is the bottleneck: it moves the walk's CPU to the processes serving the calls.

**Bounded by bytes:** at most the bound a store (``ENGRAIN_PG_PROJECTED_MB`` in MiB, e.g.
:data:`PROJECTED_BYTES` = 96 MiB for a 100,000-memory user's projection; held graphs
:data:`GRAPH_BYTES` unset), least recently used users dropped first; a user whose projection
alone exceeds it keeps the database's walk (a million memories: ~520 MB).

**Threads and processes.** A held projection never changes; a load builds a new one,
published under the lock only if it is newer. Other processes' writes are seen through
``row_changes`` in the search's own snapshot.

**Or a graph** (``kind="graph"``, ``ENGRAIN_PG_POOL_INDEX=graph``, session 20): the same
searches, statement and bounds, with the candidates (1.5 × ``k`` + 16) proposed by an
HNSW graph of the user's vectors held in process instead of the projection's product
(``held_graph.py``: ~1.5 ms of one core a search, R@50 ~0.997, caught up in place from
``row_changes``). It cut the database's CPU a call by ~4.5 ms for ~1 ms more of the
process's (docs/postgres.md, "Session 20"). **The default** (unset
``ENGRAIN_PG_POOL_INDEX``; ``projection`` or ``off`` with no bound: the database's walk;
:func:`pool_kind`) since session 24: a process serving a 100,000-memory user with it holds
256-273 MB once the process keeps one malloc arena (``store/heap.py``), against 288-320
before, under the 300 MB target (docs/postgres.md, "Session 24 … (h7)"). A graph is kept
in a file between processes (``graph_file.py``), so a new process reads it (~0.5 s of CPU)
instead of building it (~55-75 s), and it is held only for users of at least
``held_graph.MIN_ROWS`` memories.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from engrain import envvars
from engrain.errors import ConfigError, StoreError
from engrain.model import Memory
from engrain.store import heap
from engrain.store.base import MemoryFilter
from engrain.store.postgres import held_graph
from engrain.store.postgres.codec import EACH_ACCESS, SELECT_COLUMNS, Conn, from_row
from engrain.store.postgres.graph_file import GraphFiles
from engrain.store.postgres.held import Connect, HeldByBytes
from engrain.store.postgres.held_graph import PoolGraph
from engrain.store.postgres.loader import ONE_CORE, Answering, Load, four_times
from engrain.store.postgres.sql import array_literal, filter_sql

log = logging.getLogger(__name__)

#: A bound that holds a 100,000-memory user's projection (~51 MB) with room: the
#: projection's bound with ``ENGRAIN_PG_PROJECTED_MB=on``.
PROJECTED_BYTES = 96 * 2**20
#: The graphs' bound when none is given (the held graph is the default:
#: ``store/postgres/__init__.py``'s docstring): one user of 1,000,000 memories, the largest
#: issue 18 sets a target for, by the check before a load (``held_graph.GRAPH_ROW_BYTES``
#: a row: ~668 MiB; held, the graph is ~530 MB, its learnings' ~120 MB more, each bounded
#: on its own). A graph read from its file is that file's pages, shared by the processes
#: serving the user and given back by the kernel when memory runs short, not each
#: process's own (docs/postgres.md, "Session 25 … (h7)").
GRAPH_BYTES = 2**30
#: Directions a vector is projected onto. R@50 against exact search of the candidates
#: (4 per row) on bench/latency.py's 100,000 notes, questions of seeds 8 / 99: 0.941 /
#: 0.928 at 64, 0.989 / 0.989 at 96, 0.998 / 0.998 at 128 (docs/postgres.md, "Session 17").
DIMS = 128
#: The share of the sample's energy (sum of squared singular values) the directions must
#: keep for a projection to be held; else the user keeps the graph. On the corpus above
#: 0.883 / 0.942 / 0.968 at 64 / 96 / 128 directions gave R@50 0.94 / 0.989 / 0.998 (the
#: same for both question sets); isotropic vectors (the tests' random ones) keep ~DIMS / 384.
MIN_ENERGY = 0.95
#: Seconds before a user whose projection was refused (too little energy kept) is tried again.
REFUSED_PAUSE = 600.0
#: Candidates the database scores exactly per row asked for.
CANDIDATES_PER_ROW = 4
#: The kinds of what a user's pool is held as: the projection above, or an HNSW graph of
#: the vectors in process (:class:`PoolGraph`, session 20).
KINDS = ("projection", "graph")
#: Rows sampled (evenly by seq) for the directions.
SAMPLE_ROWS = 8_192
#: Rows changed since the projection's revision that a search scores itself; more and the
#: call is served by SQL.
DELTA_ROWS = 4_096
#: Rows changed since the projection's revision from which a new one is loaded.
RELOAD_ROWS = 1_024
#: Seconds at least between the end of a user's load and the start of the next.
RELOAD_PAUSE = 5.0
#: Rows a load reads at a time through a server-side cursor.
CHUNK_ROWS = 4_096

_INDEXED = held_graph.INDEXED
SAMPLE = (
    f"SELECT vector_send(m.embedding) FROM memories m WHERE m.user_id = %s AND {_INDEXED} "
    "AND m.seq %% %s = 0"
)
FIRST = (
    f"SELECT vector_send(m.embedding) FROM memories m WHERE m.user_id = %s AND {_INDEXED} "
    "ORDER BY m.seq LIMIT %s"
)
LOAD = (
    f"SELECT m.seq, vector_send(m.embedding) FROM memories m WHERE m.user_id = %s "
    f"AND {_INDEXED} ORDER BY m.seq"
)
#: How many rows changed after a revision (counted up to a limit).
CHANGED = (
    "SELECT count(*) FROM (SELECT 1 FROM row_changes c "
    "WHERE c.user_id = %s AND c.revision > %s LIMIT %s) x"
)


def nearest_sql(
    user_id: str, query: Any, k: int, flt: MemoryFilter, seqs: str, since: int
) -> tuple[str, list[Any]]:
    """The ``k`` nearest rows passing ``flt`` among the candidates (``seqs``: an array
    literal) and the rows changed after revision ``since``, by pgvector's cosine distance,
    as :func:`~engrain.store.postgres.sql.search_sql`'s exact form returns them (its
    columns, order and ties by seq). The distances are ranked on narrow rows (tuple id,
    seq, distance) and only the ``k`` kept are read whole: sorting the candidates' whole
    rows cost ~1 ms more of the database's CPU a search at 100,000 memories (``/tmp``
    probe). A candidate's distance is computed where its seq finds its row, and a changed
    row's where its id does (a row found both ways is one row of the ``UNION``): one probe
    of the memories a candidate, where joining the candidates' ids to the rows again made
    two (session 20). The ``k`` kept are then read by the tuple id (``ctid``) the ranking
    found them at, not looked up by id again: one statement is one snapshot, so the tuple
    found is the version the ranking scored, and the ``k`` probes of the primary key go
    (0.88× the database's CPU at a deep pool of 187, 100,000 memories: session 28)."""
    where, params = filter_sql(flt)
    text = (
        f"SELECT {SELECT_COLUMNS}, b.distance FROM ("
        "SELECT c.tid, c.seq, c.distance FROM ("
        "SELECT m.ctid AS tid, m.seq, (m.embedding <=> %s::vector) AS distance FROM memories m "
        f"WHERE m.user_id = %s AND m.seq = ANY(%s::text::bigint[]) AND {_INDEXED}{where} "
        "UNION "
        "SELECT m.ctid, m.seq, (m.embedding <=> %s::vector) FROM (SELECT r.id FROM row_changes r "
        "WHERE r.user_id = %s AND r.revision > %s LIMIT %s) r "
        f"JOIN memories m ON m.user_id = %s AND m.id = r.id WHERE {_INDEXED}{where}"
        ") c ORDER BY c.distance, c.seq LIMIT %s"
        f") b JOIN memories m ON m.ctid = b.tid {EACH_ACCESS} "
        "ORDER BY b.distance, b.seq"
    )
    # the changed rows up to one more than a search scores itself (more: the call goes to
    # SQL, and this statement's cost stays bounded)
    changed = DELTA_ROWS + 1
    return text, [
        query, user_id, seqs, *params,
        query, user_id, since, changed, user_id, *params,
        k,
    ]  # fmt: skip


def projected_bytes(environ: Mapping[str, str] | None = None, kind: str | None = None) -> int:
    """The bound on held projections: ``ENGRAIN_PG_PROJECTED_MB`` in MiB; 0 or ``off``: 0
    (none held, every pool search walks the graph); unset or ``on``: :data:`GRAPH_BYTES`
    for a graph (``ENGRAIN_PG_POOL_INDEX`` unset or ``graph``); for the projection
    (``projection`` or ``off``) 0 unset and :data:`PROJECTED_BYTES` ``on``; ``kind``
    (when given) standing for that variable; any other value raises
    :class:`~engrain.errors.ConfigError` (:mod:`engrain.envvars`)."""
    value = envvars.count("ENGRAIN_PG_PROJECTED_MB", environ)
    graph = (kind or pool_kind(environ)) == "graph"
    if value is envvars.ON or (value is None and graph):
        return GRAPH_BYTES if graph else PROJECTED_BYTES
    return value * 2**20 if isinstance(value, int) else 0


def pool_kind(environ: Mapping[str, str] | None = None) -> str:
    """What a large user's pool is held as: unset, ``graph`` (or ``on``) an HNSW graph in
    process (:class:`PoolGraph`, the default); ``projection`` or ``off``: the projection,
    held only with a bound given (none: the database's walk). Any other value raises
    :class:`~engrain.errors.ConfigError` (:func:`engrain.envvars.choice`)."""
    return envvars.choice("ENGRAIN_PG_POOL_INDEX", environ)


@dataclass(frozen=True)
class Projection:
    """A user's rows as of ``revision``: their seqs and their unit vectors projected onto
    ``basis`` (``INDEXED_DIM`` × :data:`DIMS`)."""

    revision: int
    seqs: np.ndarray[Any, np.dtype[np.int64]]
    rows: np.ndarray[Any, np.dtype[np.float32]]
    basis: np.ndarray[Any, np.dtype[np.float32]]

    @property
    def nbytes(self) -> int:
        """What holding this projection costs."""
        return int(self.seqs.nbytes + self.rows.nbytes + self.basis.nbytes)

    def candidates(self, query: np.ndarray[Any, Any], k: int) -> np.ndarray[Any, Any]:
        """The seqs of the :data:`CANDIDATES_PER_ROW` × ``k`` rows with the highest
        projected product with ``query`` (any order; its length changes no rank)."""
        n = len(self.seqs)
        wanted = min(n, CANDIDATES_PER_ROW * k)
        if wanted <= 0:
            return self.seqs[:0]
        # einsum: one core's SIMD loop (OpenBLAS's gemv spreads over its threads)
        scores = np.einsum("ij,j->i", self.rows, query.astype(np.float32) @ self.basis)
        if wanted == n:
            return self.seqs
        return self.seqs[np.argpartition(-scores, wanted - 1)[:wanted]]


def basis_of(sample: np.ndarray[Any, Any], dims: int = DIMS) -> tuple[np.ndarray[Any, Any], float]:
    """The ``dims`` main directions of the unit vectors ``sample`` (rows), as columns: the
    right singular vectors of the uncentred sample, which keep the most of its products;
    and the share of the sample's energy they keep."""
    _, singular, directions = np.linalg.svd(_unit_rows(sample), full_matrices=False)
    energy = singular.astype(np.float64) ** 2
    kept = float(energy[:dims].sum() / energy.sum()) if energy.sum() > 0 else 0.0
    return np.ascontiguousarray(directions[:dims].T, dtype=np.float32), kept


_unit_rows = held_graph.unit_rows
_stored = held_graph.stored


def _pause(took: float, held: bool) -> float:
    """Seconds before a user's next load, after one that took ``took``: four times as
    long, at least :data:`RELOAD_PAUSE`, or :data:`REFUSED_PAUSE` after a load that holds
    nothing (no projection kept enough, too large, or it failed)."""
    return four_times(took, RELOAD_PAUSE if held else REFUSED_PAUSE)


def _in_place(
    files: GraphFiles, user_id: str, graph: PoolGraph, written: tuple[int, int] | None
) -> PoolGraph:
    """``graph`` read in place from the file just written from it (``written``: that
    copy's CRC-32 and length), so that its pages are the file's, shared with the other
    processes serving the user, rather than this process's own copy (which is dropped);
    ``graph`` itself if it already is a view, or the file is unreadable or already another
    process's copy."""
    if written is None or graph.index.is_view:
        return graph
    kept = files.read(user_id)
    if kept is None or kept.revision != graph.revision or kept.index.saved != written:
        return graph
    return replace(graph, index=kept.index, nbytes=kept.index.nbytes)


class Projected(HeldByBytes[Projection | PoolGraph]):
    """The projections (or graphs: ``kind``, :data:`KINDS`) of the large users a store
    serves (module docstring). ``connect`` lends a pooled autocommit connection;
    ``max_bytes`` bounds what is held; ``graph_dir`` is where graphs are kept between
    processes (``graph_file.py``; ``None``: nowhere); ``scope`` which rows a graph holds
    (``held_graph.POOL``, or ``held_graph.LEARNINGS``: the graphs of the users whose
    learnings are too many to rank in process); ``background`` False loads in the calling
    thread (tests); ``answering`` holds the loads a call asks for until a call has answered
    (``loader.Answering``)."""

    def __init__(
        self,
        connect: Connect,
        max_bytes: int = PROJECTED_BYTES,
        *,
        kind: str = "projection",
        graph_dir: Path | None = None,
        scope: held_graph.Scope = held_graph.POOL,
        background: bool = True,
        answering: Answering | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ConfigError(f"unknown pool index {kind!r}: one of {', '.join(KINDS)}")
        if scope is not held_graph.POOL and kind != "graph":
            raise ConfigError(f"only a graph holds the {scope.name} of a user")
        what = f"the {kind} of a PostgreSQL user's {scope.name}"
        super().__init__(connect, max_bytes, _pause, what=what, name="engrain-pg-proj",
                         background=background, answering=answering)  # fmt: skip
        self.kind = kind
        self.scope = scope
        #: Where graphs are kept between processes (``graph_file.py``; ``None``: nowhere).
        self.graph_dir = graph_dir if kind == "graph" else None
        self._files: GraphFiles | None = None
        self._identified = False
        #: Searches served here / left to SQL (too many changes, too few rows passing).
        self.calls: dict[str, int] = {"served": 0, "by_sql": 0}
        #: Graphs read from a file and used / built (and kept in a file if there is one).
        self.graphs: dict[str, int] = {"from_file": 0, "built": 0}

    def held(self, user_id: str) -> Projection | PoolGraph | None:
        """The user's projection, if held."""
        with self._lock:
            return self._held.get(user_id)

    def search(
        self, user_id: str, query: np.ndarray[Any, Any], k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]] | None:
        """The ``k`` memories passing ``flt`` nearest ``query`` among the
        projection's candidates and the rows changed since it, scored by the database as
        it holds them when this call reads it; ``None``: not held, or the call is better
        served by SQL."""
        projection = self._recent(user_id)
        if projection is None:
            return None
        try:
            proposed = projection.candidates(query, k)
        except StoreError:  # a graph read in place whose file changed in place since
            self._changed_in_place(user_id, projection)
            return None
        seqs = array_literal(proposed.tolist())
        # the query as given: pgvector's distance to it is the SQL path's, bit for bit
        text, params = nearest_sql(user_id, query, k, flt, seqs, projection.revision)
        changed, rows = self._read(user_id, projection.revision, text, params)
        if changed > RELOAD_ROWS:
            self.start_load(user_id, again=True)
        if changed > DELTA_ROWS or len(rows) < k:
            self.calls["by_sql"] += 1
            return None
        self.calls["served"] += 1
        return [(from_row(r), 1.0 - float(r[-1])) for r in rows]

    def _changed_in_place(self, user_id: str, graph: Projection | PoolGraph) -> None:
        """Drop the user's graph, read in place from a file that someone changed in place
        since (``graph_file.unchanged``): it is never read again (its pages are the file's
        as they now are), the call and the next ones are served by SQL, and a load reads the
        file again or builds a new graph."""
        log.warning("the held graph of a user's %s was read from a file changed in place "
                    "since: dropped, loading another", self.scope.name)  # fmt: skip
        with self._lock:
            if self._held.get(user_id) is graph:
                del self._held[user_id]
        self.start_load(user_id)

    def _read(
        self, user_id: str, since: int, text: str, params: list[Any]
    ) -> tuple[int, list[Any]]:
        """In one snapshot and one round trip: how many rows changed after ``since`` (up
        to one more than :data:`DELTA_ROWS`) and the rows of :func:`nearest_sql`."""
        with self._connect() as conn:
            try:
                with conn.pipeline():
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    changed = conn.cursor(binary=True).execute(
                        CHANGED, (user_id, since, DELTA_ROWS + 1)
                    )
                    rows = conn.cursor(binary=True).execute(text, params)
                    conn.execute("COMMIT")
            except BaseException:
                with suppress(psycopg.Error):
                    conn.rollback()  # a no-op unless the transaction is still open
                raise
            first = changed.fetchone()
            return int(first[0]) if first else 0, rows.fetchall()

    # -- loads ------------------------------------------------------------------------------

    def start_load(self, user_id: str, *, again: bool = False, rows: int | None = None) -> None:
        """Start reading the user's projection unless one is held (``again``: a held one
        is replaced when the load ends), a load runs, or the pause after the last one has
        not passed (``loader.py``); or, for graphs, ``rows`` (the user's memories, if
        known) is below ``held_graph.MIN_ROWS``: no thread and no count for a user who
        keeps the database's walk."""
        if self.kind == "graph" and rows is not None and rows < held_graph.MIN_ROWS:
            return
        self._loader.start(
            user_id, lambda: self.max_bytes > 0 and (again or user_id not in self._held)
        )

    def _load(self, user_id: str, loading: Load) -> None:
        loading.full = False  # nothing held unless a projection is read: the refused pause
        if self.kind == "graph":
            projection: Projection | PoolGraph | None = self._read_graph(user_id)
        else:
            projection = self._read_projection(user_id)
        loading.full = projection is not None
        heap.release()  # the chunks read and dropped: hand their pages back
        with self._lock:
            old = self._held.get(user_id)
            if self._closed or projection is None or projection.nbytes > self.max_bytes:
                return  # too large to hold: its searches keep the graph
            if old is None or old.revision < projection.revision:
                self._held[user_id] = projection
                self._held.move_to_end(user_id)
                self._bound()

    def _read_graph(self, user_id: str) -> PoolGraph | None:
        """The user's graph: the held one brought up to date, else the one a process kept
        in a file (``graph_file.py``) checked and brought up to date, else a new one
        (``held_graph.py``), kept in the file for the next process."""
        held = self.held(user_id)
        if isinstance(held, PoolGraph) and not held.index.intact:
            held = None  # its file changed in place: read the file again, or build
        with self._connect() as conn:
            if isinstance(held, PoolGraph) and not held.worn:
                return held_graph.caught_up(conn, user_id, held, self.scope)
            files = self._graph_files(conn)
            key = self.scope.file_key(user_id)
            kept = None if files is None or held is not None else files.read(key)
            graph = None
            if kept is not None:
                graph = held_graph.restored(conn, user_id, kept.revision, kept.index, self.scope)
                graph = None if graph is None or graph.worn else graph
            fresh = graph is None
            if fresh:
                graph = held_graph.read(
                    conn, user_id, self.max_bytes, lambda: self._closed, self.scope
                )
        if graph is not None:
            self.graphs["built" if fresh else "from_file"] += 1
            if files is not None and (fresh or kept is None or graph.revision > kept.revision):
                # not yet searched (published by the caller): the save holds up no search
                written = files.write(key, graph.revision, graph.index)
                graph = _in_place(files, key, graph, written)
        return graph

    def _graph_files(self, conn: Conn) -> GraphFiles | None:
        """Where this store's graphs are kept (``None``: nowhere), its table's identity
        read once."""
        if self.graph_dir is not None and not self._identified:
            self._files = GraphFiles.of(conn, self.graph_dir)
            self._identified = True  # once, even if unreadable: no file is then trusted
        return self._files

    def _read_projection(self, user_id: str) -> Projection | None:
        """The user's projection read in one snapshot (``None``: no row to hold, more than
        the bound would allow, or directions keeping less than :data:`MIN_ENERGY`)."""
        with self._connect() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                conn.execute(ONE_CORE)  # background work: one core of the database
                with conn.cursor(binary=True) as cur:
                    revision, n = held_graph.revision_and_rows(cur, user_id)
                    if n == 0 or n * (DIMS * 4 + 8) > self.max_bytes:
                        return None
                    stride = max(1, n // SAMPLE_ROWS)
                    sample = cur.execute(SAMPLE, (user_id, stride)).fetchall()
                    if len(sample) < min(n, 2 * DIMS):  # seqs of many users: few multiples
                        sample = cur.execute(FIRST, (user_id, SAMPLE_ROWS)).fetchall()
                basis, kept = basis_of(_stored([r[0] for r in sample]))
                del sample
                if kept < MIN_ENERGY:
                    return None
                seqs = np.empty(n, dtype=np.int64)
                rows = np.empty((n, basis.shape[1]), dtype=np.float32)
                at = 0
                with conn.cursor("engrain_projected", binary=True) as named:
                    named.execute(LOAD, (user_id,))
                    while chunk := named.fetchmany(CHUNK_ROWS):
                        size = min(len(chunk), n - at)  # the count was read in this snapshot
                        seqs[at : at + size] = [r[0] for r in chunk[:size]]
                        rows[at : at + size] = (
                            _unit_rows(_stored([r[1] for r in chunk[:size]])) @ basis
                        )
                        at += size
                        del chunk
            finally:
                conn.execute("COMMIT")
        return Projection(revision, seqs[:at], rows[:at], basis)
