"""A large PostgreSQL user's typed learnings searched in process (issue 18, session 16).

Every ``context()`` scores the user's 100 learnings nearest the question (``recall.gate``:
a search filtered to :data:`~engrain.store.postgres.schema.LEARNING_KINDS`). On the SQL
path that search walks the learnings' own HNSW graph: ~9-11 ms of the database's CPU a
call at 100,000 memories (22,000 learnings), the largest cost of a call after nothing
(docs/postgres.md, "Session 15"), and approximate (R@100 ~0.99). Here the learnings of a
user whose searches go through the graph are kept per store as a small matrix with the
columns a filter reads (kind, type, project, session, key, flags, importance, seq) and
searched exactly (one product: ~1.5 ms of one core at 22,000 rows), so R@100 is 1.0.

**Two bytes a value** (session 23, ``quantized.py``): the matrix holds each vector as int16
steps of its own scale, half the bytes of its float32s (~17 MB at 100,000 memories instead
of ~34). The steps rank the rows to within a bound measured when they are read; the rows
that bound cannot tell from the k-th best (the k and a few more) are read whole from the
database with their float32 vectors and ranked exactly, so the answer is the exact
search's, bit for bit, as before.

**In stages** (session 26, ``quantized.staged_window``): a user with
``quantized.STAGED_ROWS`` learnings or more when loaded has them held in a basis of their
own (the directions of most energy of the load's first chunk, 2,048 learnings, first;
every later row, a delta's too, in the same basis) as column blocks, and a search
multiplies in full only the rows a partial product cannot rule out (~420 of 22,000 at
100,000 memories, the threshold's probe included): the ranking 0.53-0.56x the CPU of the
product over every row, the same candidates' answer.

**Never stale, one round trip.** The matrix is held as of a revision of the user
(``revisions``). A search ranks the held rows first, then reads, in one ``REPEATABLE READ``
snapshot and one round trip (a pipeline): the user's revision, the rows changed since the
held revision (:data:`DELTA`, migration 008's ``row_changes``: every write stamps the rows
it changes with the revision it bumps, a forget leaves a tombstone) with their scoring
columns if they are learnings now, and the rows of the candidate ids (``sql.FETCH``, access
counts and vectors included). Nothing changed, or only columns a search does not read (a
promotion, a new confidence: any change whose scoring columns and vector's digest compare
equal): the rows read, ranked by their vectors, are the answer. Otherwise the delta is
applied (a new immutable snapshot, published if no newer one is: a new or
forgotten learning copies the matrix, ~20 ms at 100,000 memories), the search runs again
and the rows it now ranks that were not read are fetched (a second round trip; each is
checked against the filter, since it is read in a later snapshot). More than
:data:`DELTA_ROWS` changed rows: the held matrix is dropped, the call is served by SQL and
a load starts. So a call never returns a learning forgotten, superseded or muted before it
began, and finds every one committed before it began, by any process: what it returns was
read after the call began.

**Loaded off the path.** The first search of a user that walks the learnings' graph
(:meth:`PostgresStore.search`, indexed) is served by SQL and starts a load in a thread: the
revision and the learnings' scoring columns and vectors in one snapshot (~22,000 rows,
~34 MB of vectors read a chunk at a time, ~17 MB kept). One load per user at a time, the
next no sooner than four times the last one took (at least :data:`RELOAD_PAUSE` s).

**Bounded by bytes.** At most :data:`LEARNINGS_BYTES` (``ENGRAIN_PG_LEARNINGS_MB``; 0:
off) of held learnings per store, least recently used users dropped first; ~1 kB a
learning (its 384 steps, its columns, its id), so ~22 MB for a 100,000-memory user and
none for a user whose learnings alone exceed the bound (a million memories: ~220,000
learnings, ~220 MB, stay with the graph): such a user's learnings are counted, not read,
and counted again no sooner than :data:`REFUSED_PAUSE` s later.

**Threads.** A held snapshot never changes; applying a delta builds a new one, published
under the lock only if the held revision is still older. A thread that computed a snapshot
another thread replaced still serves its own call from it (it was read after that call
began).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import psycopg

from engrain import envvars
from engrain.model import Kind, Memory, MemoryType
from engrain.store import heap
from engrain.store.base import MemoryFilter
from engrain.store.postgres import quantized
from engrain.store.postgres.codec import from_row
from engrain.store.postgres.held import Connect, HeldByBytes
from engrain.store.postgres.loader import ONE_CORE, Answering, Load, four_times
from engrain.store.postgres.quantized import (
    Basis,
    Quantized,
    Steps,
    approximate,
    exact_top,
    quantize,
    rotated,
    staged_window,
    window,
)
from engrain.store.postgres.schema import INDEXED_DIM, LEARNING_KINDS
from engrain.store.postgres.sql import FETCH

#: Bytes of learnings a store holds across its users (least recently used dropped first).
LEARNINGS_BYTES = 96 * 2**20
#: Changed rows a search reads and applies itself; more and the call is served by SQL
#: while the learnings are loaded again.
DELTA_ROWS = 2_048
#: Seconds at least between the end of a user's load and the start of the next.
RELOAD_PAUSE = 5.0
#: ... and after a load refused because the user's learnings, counted, exceed the bound:
#: they are not read, and counted again no sooner than this (``projected.REFUSED_PAUSE``).
REFUSED_PAUSE = 600.0
#: Bytes a held learning costs besides its vector's steps (columns, its digest and factor,
#: its three tails' lengths, id string, position entry).
ROW_OVERHEAD = 260
#: Bytes a held learning's vector costs a dimension (int16 steps, ``quantized.py``).
VALUE_BYTES = 2
#: Filters whose left-out rows a held snapshot keeps (a ``context()`` uses one).
FILTERS_KEPT = 8

_KINDS = list(Kind)
_TYPES = list(MemoryType)
_LEARNING = "m.kind = ANY(%s::text[]) AND m.embedding IS NOT NULL AND vector_dims(m.embedding) = "
#: The columns a filter reads, then the vector (NULL for a changed row that is no held
#: learning now: gone, another kind, another size).
_COLUMNS = (
    "m.id, m.seq, m.kind, m.memory_type, m.project, m.session_id, m.key, m.compressed, "
    "m.muted, m.superseded_by IS NOT NULL, m.importance, m.pinned, vector_send(m.embedding)"
)
#: Every learning of a user with a vector of the indexed size, by seq.
LOAD = (
    f"SELECT {_COLUMNS} FROM memories m WHERE m.user_id = %s "
    f"AND {_LEARNING}{INDEXED_DIM} ORDER BY m.seq"
)
#: How many :data:`LOAD` reads (its matrix is allocated once, then filled chunk by chunk).
COUNT = f"SELECT count(*) FROM memories m WHERE m.user_id = %s AND {_LEARNING}{INDEXED_DIM}"
#: Rows a load reads at a time through a server-side cursor: a chunk's rows and bytes are
#: dropped before the next one comes, so a load holds little more than what it keeps.
CHUNK_ROWS = 2_048
REVISION = "SELECT revision FROM revisions WHERE user_id = %s"
#: The rows changed after a revision (up to a limit), each with its scoring columns if it
#: is a held learning now (else NULLs).
DELTA = (
    f"SELECT c.id, {_COLUMNS} FROM row_changes c "
    f"LEFT JOIN memories m ON m.user_id = c.user_id AND m.id = c.id "
    f"AND {_LEARNING}{INDEXED_DIM} "
    "WHERE c.user_id = %s AND c.revision > %s LIMIT %s"
)


def learnings_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The bound on held learnings: ``ENGRAIN_PG_LEARNINGS_MB`` in MiB (0 or ``off``:
    none held, every learnings' search walks the graph), else :data:`LEARNINGS_BYTES`; any
    other value raises :class:`~engrain.errors.ConfigError` (:mod:`engrain.envvars`)."""
    value = envvars.count("ENGRAIN_PG_LEARNINGS_MB", environ)
    if value is envvars.OFF:
        return 0
    return value * 2**20 if isinstance(value, int) else LEARNINGS_BYTES


def _pause(took: float, read: bool) -> float:
    """Seconds before a user's next load, after one that took ``took`` (every load that
    ``read`` reads all the learnings): four times as long, at least :data:`RELOAD_PAUSE`,
    or :data:`REFUSED_PAUSE` after one that counted more than the bound holds."""
    return four_times(took, RELOAD_PAUSE if read else REFUSED_PAUSE)


@dataclass(frozen=True)
class _Rows:
    """Learnings as columns (one entry a row, any order): what a filter reads and the
    vectors as int16 steps in column blocks (``quantized.py``: ``blocks``, ``factor``,
    ``tails``, ``digest``, within ``error``; in the coordinates of
    ``basis`` if there is one: a staged product), as of the user's ``revision``."""

    revision: int
    ids: tuple[str, ...]
    seq: np.ndarray[Any, np.dtype[np.int64]]
    kind: np.ndarray[Any, np.dtype[np.int8]]
    memory_type: np.ndarray[Any, np.dtype[np.int8]]
    project: np.ndarray[Any, np.dtype[np.object_]]
    session_id: np.ndarray[Any, np.dtype[np.object_]]
    key: np.ndarray[Any, np.dtype[np.object_]]
    compressed: np.ndarray[Any, np.dtype[np.bool_]]
    muted: np.ndarray[Any, np.dtype[np.bool_]]
    superseded: np.ndarray[Any, np.dtype[np.bool_]]
    importance: np.ndarray[Any, np.dtype[np.float64]]
    pinned: np.ndarray[Any, np.dtype[np.bool_]]
    digest: np.ndarray[Any, np.dtype[np.uint64]]
    #: the steps' column blocks, in order (``quantized.STAGES``)
    blocks: tuple[Steps, ...]
    factor: np.ndarray[Any, np.dtype[np.float32]]
    tails: np.ndarray[Any, np.dtype[np.float32]]
    error: float
    position: Mapping[str, int]
    #: the rows' basis (``quantized.basis_of``), shared by every snapshot of one load;
    #: ``None``: the stored coordinates, one product over every row (fewer than
    #: ``quantized.STAGED_ROWS`` learnings when loaded)
    basis: Basis | None = field(default=None, compare=False, repr=False)
    #: the rows each filter asked for leaves out (:meth:`_dropped`)
    dropped: dict[MemoryFilter, np.ndarray[Any, np.dtype[np.intp]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def nbytes(self) -> int:
        """What holding these rows costs, about (:data:`ROW_OVERHEAD` a row besides its
        vector's steps, and the basis)."""
        steps = sum(int(b.nbytes) for b in self.blocks)
        basis = 0 if self.basis is None else int(self.basis.nbytes)
        return steps + ROW_OVERHEAD * len(self.ids) + basis

    @property
    def vectors(self) -> Quantized:
        """The held vectors as ``quantized.py`` takes them."""
        return Quantized(self.blocks, self.factor, self.digest, self.error, self.tails)

    def approximate(self, query: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """Every row's approximate cosine with the unit vector ``query`` (tests)."""
        return approximate(self.blocks, self.factor, rotated(query, self.basis))

    def mask(self, flt: MemoryFilter) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
        """Which rows pass ``flt`` (``MemoryFilter.matches`` over the columns); ``None``:
        all of them."""
        keep: np.ndarray[Any, np.dtype[np.bool_]] | None = None

        def both(part: np.ndarray[Any, Any]) -> None:
            nonlocal keep
            keep = part if keep is None else keep & part

        if flt.project is not None:
            both(self.project == flt.project)
        if flt.memory_types is not None:
            both(np.isin(self.memory_type, [_TYPES.index(t) for t in flt.memory_types]))
        if flt.kinds is not None:
            both(np.isin(self.kind, [_KINDS.index(k) for k in flt.kinds]))
        if flt.session_id is not None:
            both(self.session_id == flt.session_id)
        if flt.key is not None:
            both(self.key == flt.key)
        if not flt.include_compressed:
            both(~self.compressed)
        if not flt.include_muted:
            both(~self.muted)
        if not flt.include_superseded:
            both(~self.superseded)
        if flt.min_importance is not None:
            both(self.importance >= float(flt.min_importance))
        if flt.pinned is not None:
            both(self.pinned == bool(flt.pinned))
        return keep

    def candidates(self, query: np.ndarray[Any, Any], k: int, flt: MemoryFilter) -> list[str]:
        """The ids of the rows passing ``flt`` that may be among the ``k`` most
        cosine-similar to the unit vector ``query`` (``quantized.window``: the k best by
        their steps and any within the steps' error of the k-th), best first."""
        if not self.ids or k <= 0:
            return []
        dropped = self._dropped(flt)
        k = min(k, len(self.ids) - dropped.size)
        if k <= 0:
            return []
        length = float(np.linalg.norm(query.astype(np.float64)))
        turned = rotated(query, self.basis)
        if self.basis is not None:
            # a product in stages: only the rows that can be in the window in full
            rows, scores = staged_window(self.vectors, turned, k, dropped, length)
        else:
            # einsum: one core's SIMD loop; OpenBLAS's gemv took 3-8 ms of CPU over its
            # threads for the same product (/tmp probe, session 16)
            every = approximate(self.blocks, self.factor, turned)
            every[dropped] = -np.inf
            rows = window(every, k, self.error, length)
            scores = every[rows]
        rows = rows[np.argsort(-scores, kind="stable")]
        return [self.ids[r] for r in rows.tolist()]

    def _dropped(self, flt: MemoryFilter) -> np.ndarray[Any, np.dtype[np.intp]]:
        """The rows ``flt`` leaves out, kept per filter (these rows never change, and a
        ``context()`` asks with the same filter every call: ~0.3 ms a search saved)."""
        dropped = self.dropped.get(flt)
        if dropped is None:
            keep = self.mask(flt)
            dropped = np.empty(0, dtype=np.intp) if keep is None else np.flatnonzero(~keep)
            if len(self.dropped) >= FILTERS_KEPT:
                self.dropped.clear()
            self.dropped[flt] = dropped
        return dropped

    def changed(self, revision: int, delta: Sequence[tuple[Any, ...]]) -> _Rows:
        """These rows at ``revision`` after the changed rows of ``delta`` (:data:`DELTA`'s:
        the id, then :data:`_COLUMNS` or NULLs): the same arrays when no scoring column or
        vector changed, else new ones (nothing here is changed in place; the bound on the
        steps' error is the larger of the kept rows' and the new ones')."""
        gone: set[str] = set()
        fresh: list[tuple[Any, ...]] = []
        for row in delta:
            memory_id, columns = row[0], row[1:]
            at = self.position.get(memory_id)
            if columns[0] is None:
                if at is not None:
                    gone.add(memory_id)
            elif at is None or not self._same(at, columns):
                gone.add(memory_id)
                fresh.append(columns)
        if not gone and not fresh:
            return replace(self, revision=revision)
        positions = [self.position[i] for i in gone if i in self.position]
        keep = np.delete(np.arange(len(self.ids)), positions)
        added = _columns(revision, fresh, basis=self.basis)

        def joined(old: np.ndarray[Any, Any], new: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
            # one copy into the new array (a new or forgotten learning copies the matrix:
            # ~17 MB at 100,000 memories; a row changed in place that a search does not
            # read copies nothing, above)
            out = np.empty((keep.size + len(new), *old.shape[1:]), dtype=old.dtype)
            np.take(old, keep, axis=0, out=out[: keep.size])
            out[keep.size :] = new
            return out

        ids = (self.ids if not positions else tuple(self.ids[i] for i in keep.tolist())) + added.ids
        arrays: dict[str, Any] = {n: joined(getattr(self, n), getattr(added, n)) for n in _ARRAYS}
        blocks = tuple(joined(old, new) for old, new in zip(self.blocks, added.blocks, strict=True))
        error = max(self.error, added.error)
        return _Rows(revision, ids, blocks=blocks, position=_positions(ids), error=error,
                     basis=self.basis, **arrays)  # fmt: skip

    def _same(self, at: int, columns: tuple[Any, ...]) -> bool:
        """Whether row ``at`` holds the scoring columns and vector (by its digest) of
        ``columns``."""
        one = _columns(self.revision, [columns], basis=self.basis)
        return all(getattr(one, name)[0] == getattr(self, name)[at] for name in _COMPARED)


#: The array fields of :class:`_Rows` that :meth:`_Rows._same` compares (the digest last).
_COMPARED = (
    "seq", "kind", "memory_type", "project", "session_id", "key", "compressed", "muted",
    "superseded", "importance", "pinned", "digest",
)  # fmt: skip
#: Every array field of :class:`_Rows`, in its order.
_ARRAYS = (*_COMPARED, "factor", "tails")


def _rows_of(held: Quantized, start: int, end: int) -> Quantized:
    """The rows ``start`` to ``end`` of ``held``'s arrays, as views to write into."""
    return Quantized(
        tuple(b[start:end] for b in held.blocks), held.factor[start:end], held.digest, 0.0,
        held.tails[start:end],
    )  # fmt: skip


def _positions(ids: Sequence[str]) -> dict[str, int]:
    return {memory_id: i for i, memory_id in enumerate(ids)}


def _stored_vectors(blobs: Sequence[bytes], out: np.ndarray[Any, Any] | None = None) -> Any:
    """pgvector's binary form (``vector_send``: a 4-byte header, then big-endian float32s)
    of vectors of :data:`INDEXED_DIM`, joined and converted at once (into ``out``)."""
    joined = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(blobs), INDEXED_DIM + 1)
    if out is None:
        return joined[:, 1:].astype(np.float32)
    out[...] = joined[:, 1:]
    return out


def _ranked(
    query: np.ndarray[Any, Any],
    k: int,
    ids: Sequence[str],
    found: Mapping[str, Memory],
    rows: _Rows,
) -> list[tuple[Memory, float]]:
    """The ``k`` memories of the candidates ``ids`` (those ``found``, with a vector of the
    indexed size) most cosine-similar to the unit ``query`` by their float32 vectors, best
    first, ties by their seq in ``rows`` (``quantized.exact_top``)."""
    memories = [
        m for m in (found.get(i) for i in ids)
        if m is not None and m.embedding is not None and np.shape(m.embedding) == (INDEXED_DIM,)
    ]  # fmt: skip
    if not memories:
        return []
    vectors = np.stack([np.asarray(m.embedding, dtype=np.float32) for m in memories])
    seq = rows.seq[[rows.position[m.id] for m in memories]]
    return [(memories[r], score) for r, score in exact_top(query, k, vectors, seq)]


def _columns(
    revision: int,
    rows: Sequence[tuple[Any, ...]],
    vectors: Quantized | None = None,
    basis: Basis | None = None,
) -> _Rows:
    """:class:`_Rows` of rows read as :data:`_COLUMNS` (``vectors``: theirs, already read
    and quantized in ``basis``'s coordinates, or quantized here in them)."""
    n = len(rows)
    if vectors is None:
        blobs = [row[12] for row in rows]
        vectors = quantize(_stored_vectors(blobs), blobs, basis)

    def objects(at: int) -> np.ndarray[Any, np.dtype[np.object_]]:
        column = np.empty(n, dtype=object)
        column[:] = [row[at] for row in rows]
        return column

    ids = tuple(str(row[0]) for row in rows)
    return _Rows(
        revision,
        ids,
        seq=np.fromiter((row[1] for row in rows), dtype=np.int64, count=n),
        kind=np.fromiter((_KINDS.index(Kind(row[2])) for row in rows), dtype=np.int8, count=n),
        memory_type=np.fromiter(
            (_TYPES.index(MemoryType(row[3])) for row in rows), dtype=np.int8, count=n
        ),
        project=objects(4),
        session_id=objects(5),
        key=objects(6),
        compressed=np.fromiter((bool(row[7]) for row in rows), dtype=np.bool_, count=n),
        muted=np.fromiter((bool(row[8]) for row in rows), dtype=np.bool_, count=n),
        superseded=np.fromiter((bool(row[9]) for row in rows), dtype=np.bool_, count=n),
        importance=np.fromiter((float(row[10]) for row in rows), dtype=np.float64, count=n),
        pinned=np.fromiter((bool(row[11]) for row in rows), dtype=np.bool_, count=n),
        digest=vectors.digest,
        blocks=vectors.blocks,
        factor=vectors.factor,
        tails=vectors.tails,
        error=vectors.error,
        position=_positions(ids),
        basis=basis,
    )


class Learnings(HeldByBytes[_Rows]):
    """The typed learnings of the large users a store serves, held by revision (module
    docstring). ``connect`` lends a pooled autocommit connection; ``max_bytes`` bounds what
    is held; ``background`` False loads in the calling thread (tests); ``answering`` holds
    the loads a call asks for until a call has answered (``loader.Answering``)."""

    def __init__(
        self,
        connect: Connect,
        max_bytes: int = LEARNINGS_BYTES,
        *,
        background: bool = True,
        answering: Answering | None = None,
    ) -> None:
        super().__init__(connect, max_bytes, _pause, what="the learnings of a PostgreSQL user",
                         name="engrain-pg-learn", background=background,
                         answering=answering)  # fmt: skip
        #: Searches served here / caught up by a delta / fetched twice / left to SQL.
        self.calls: dict[str, int] = {"served": 0, "caught_up": 0, "fetched_again": 0, "by_sql": 0}

    def held(self, user_id: str) -> bool:
        """Whether the user's learnings are held (tests, benchmarks)."""
        with self._lock:
            return user_id in self._held

    def refused(self, user_id: str) -> bool:
        """Whether the user's last load counted more learnings than the bound holds (none
        runs now): their searches are not served here until a later count fits."""
        with self._lock:
            loading = self._loader.get(user_id)
            return loading is not None and loading.thread is None and not loading.full

    # -- searches ---------------------------------------------------------------------------

    def search(
        self, user_id: str, query: np.ndarray[Any, Any], k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]] | None:
        """The ``k`` learnings passing ``flt`` nearest the unit vector ``query``, exactly,
        as the database holds them when this call reads it; ``None``: not held (or too far
        behind), serve this call by SQL."""
        rows = self._recent(user_id)
        if rows is None:
            return None
        wanted = rows.candidates(query, k, flt)
        revision, delta, read = self._read(user_id, rows.revision, wanted)
        if len(delta) > DELTA_ROWS:
            self.drop(user_id)
            self.calls["by_sql"] += 1
            self.start_load(user_id)
            return None
        now = rows
        if revision != rows.revision and delta:
            now = rows.changed(revision, delta)
            self._publish(user_id, now)
            if now.ids is not rows.ids:  # a scoring column or a vector changed: rank again
                wanted = now.candidates(query, k, flt)
            self.calls["caught_up"] += 1
        # the rows read in the delta's snapshot are as ``now`` holds them
        found = {m.id: m for m in (from_row(row) for row in read)}
        missing = [memory_id for memory_id in wanted if memory_id not in found]
        if missing:
            found.update(self._fetch(user_id, missing))
            self.calls["fetched_again"] += 1
        self.calls["served"] += 1
        top = _ranked(query.astype(np.float32, copy=False), k, wanted, found, now)
        return [(memory, score) for memory, score in top if flt.matches(memory)]

    def _read(
        self, user_id: str, since: int, ids: Sequence[str]
    ) -> tuple[int, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """In one snapshot and one round trip: the user's revision, the rows changed after
        ``since`` (up to one more than :data:`DELTA_ROWS`) and the rows of ``ids`` with
        their vectors (``sql.FETCH``)."""
        with self._connect() as conn:
            try:
                with conn.pipeline():
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    revision = conn.cursor(binary=True).execute(REVISION, (user_id,))
                    delta = conn.cursor(binary=True).execute(
                        DELTA, (list(LEARNING_KINDS), user_id, since, DELTA_ROWS + 1)
                    )
                    rows = conn.cursor(binary=True).execute(FETCH, (user_id, list(ids)))
                    conn.execute("COMMIT")
            except BaseException:
                with suppress(psycopg.Error):
                    conn.rollback()  # a no-op unless the transaction is still open
                raise
            first = revision.fetchone()
            return int(first[0]) if first else 0, delta.fetchall(), rows.fetchall()

    def _fetch(self, user_id: str, ids: Sequence[str]) -> dict[str, Memory]:
        """The memories of ``ids`` with their vectors, as the database holds them now."""
        with self._connect() as conn, conn.cursor(binary=True) as cur:
            cur.execute(FETCH, (user_id, list(ids)))
            return {m.id: m for m in (from_row(row) for row in cur.fetchall())}

    def _publish(self, user_id: str, rows: _Rows) -> None:
        """Hold ``rows`` for the user unless newer ones are held (or the user's were
        dropped), then drop least recently used users while over :attr:`max_bytes`."""
        with self._lock:
            old = self._held.get(user_id)
            if self._closed or old is None or old.revision >= rows.revision:
                return
            self._held[user_id] = rows
            self._bound()

    # -- loads ------------------------------------------------------------------------------

    def start_load(self, user_id: str) -> None:
        """Start reading the user's learnings unless they are held, a load runs, or the
        pause after the last one has not passed (``loader.py``)."""
        self._loader.start(user_id, lambda: user_id not in self._held and self.max_bytes > 0)

    def _load(self, user_id: str, loading: Load) -> None:
        kinds = list(LEARNING_KINDS)
        with self._connect() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                conn.execute(ONE_CORE)  # background work: one core of the database
                with conn.cursor(binary=True) as cur:
                    first = cur.execute(REVISION, (user_id,)).fetchone()
                    counted = cur.execute(COUNT, (user_id, kinds)).fetchone()
                count = int(counted[0]) if counted else 0
                # what the rows would cost held (``_Rows.nbytes``, exactly: the count is
                # this snapshot's); more than the bound: not read at all (a million
                # memories: ~220,000 learnings, ~390 MB read and dropped every minute)
                loading.full = count * (INDEXED_DIM * VALUE_BYTES + ROW_OVERHEAD) <= self.max_bytes
                if not loading.full:
                    return
                # the steps are kept, a chunk's float32s only while it is quantized
                held = Quantized(
                    quantized.blocks_of(np.empty((count, INDEXED_DIM), np.int16)),
                    np.empty(count, np.float32), np.empty(0, np.uint64), 0.0,
                    np.empty((count, len(quantized.STAGES)), np.float32),
                )  # fmt: skip
                # many learnings: held in a basis of their own, found by a staged product
                # (its directions from the first chunk: 2,048 of the user's learnings)
                basis: Basis | None = None
                chunks: list[Quantized] = []
                found: list[tuple[Any, ...]] = []
                with conn.cursor("engrain_learnings", binary=True) as named:
                    named.execute(LOAD, (user_id, kinds))
                    while chunk := named.fetchmany(CHUNK_ROWS):
                        at, blobs = len(found), [r[12] for r in chunk]
                        floats = np.empty((len(chunk), INDEXED_DIM), "f4")
                        _stored_vectors(blobs, floats)
                        if not found and count >= quantized.STAGED_ROWS:
                            basis = quantized.basis_of(floats)
                        into = _rows_of(held, at, at + len(chunk))
                        chunks.append(quantize(floats, blobs, basis, into))
                        found.extend(r[:12] for r in chunk)
                        del chunk, blobs, floats
            finally:
                conn.execute("COMMIT")
        n = len(found)
        vectors = Quantized(
            tuple(b[:n] for b in held.blocks),
            held.factor[:n],
            np.concatenate([c.digest for c in chunks]) if chunks else np.empty(0, np.uint64),
            max((c.error for c in chunks), default=0.0),
            held.tails[:n],
        )
        rows = _columns(int(first[0]) if first else 0, found, vectors, basis)
        del found, vectors, chunks
        heap.release()  # the chunks read and dropped: hand their pages back
        with self._lock:
            old = self._held.get(user_id)
            if self._closed or rows.nbytes > self.max_bytes:
                return  # too large to hold: its searches keep the graph
            if old is None or old.revision < rows.revision:
                self._held[user_id] = rows
                self._held.move_to_end(user_id)
                self._bound()
