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
revision number and the document count and total token length BM25 needs;
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
promises. (One graph per tenant — a partitioned table — is the next step if a deployment
has many users each far above the threshold.)

**BM25 in SQL, equal to** :class:`~engrain.lexical.LexicalIndex`. Texts are tokenized in
Python with :func:`engrain.lexical.tokenize` at write time into ``postings (user_id, term,
memory_id, tf, doc_length)``; ``revisions`` keeps each user's document count and total
length. A query computes idf from the user's own document frequencies and the score with
one aggregate, with the filter applied in SQL. The arithmetic is written in ``real``
(float4) in the same order numpy evaluates it, and the per-term contributions are summed
in the order ``LexicalIndex.scores`` visits the terms, so the scores are bit-for-bit the
same (while a user's total token length stays below 2**24, where float32 sums are exact).

**Reads.** Nothing is trusted from process memory: every call asks the database. One
shortcut: :meth:`PostgresStore.query` (which can return thousands of rows, all the user's
procedural memories for example) first lists ids with their row versions (``xmin`` of the
memory and of its access row: new on any change, by any process) and decodes only the rows
it has not already decoded at that version; reading and decoding full rows with their
vectors costs ~40 µs a row, listing them ~1 µs.

**Writes.** One transaction per :meth:`PostgresStore.write`. It first bumps the revision
row of every user it changes (in sorted order: writers of one user queue there, writers
of different users never wait on each other), then locks the rows it replaces or deletes
in ``(user_id, id)`` order; :meth:`PostgresStore.record_access` takes a shared lock on the
same rows in the same order before it counts, so the two never deadlock. Everything the
write needs from the items it is given (rows, tokens, JSON) is computed before the
transaction opens, so a bad item changes nothing.
"""

from __future__ import annotations

import json
import struct
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np
import psycopg
import psycopg.errors
from pgvector.psycopg import register_vector
from psycopg import Connection
from psycopg.adapt import Dumper, Loader
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import Format
from psycopg_pool import ConnectionPool

from engrain.errors import ConfigError, MigrationError, StoreError, ValidationError
from engrain.lexical import K1, B, tokenize
from engrain.model import Kind, Memory, MemoryType, Provenance, Vector, as_utc
from engrain.store.base import ALL, MemoryFilter, State, pending_migrations

#: The dimension the HNSW index serves (all-MiniLM-L6-v2). Vectors of other sizes are
#: stored and searched exactly.
INDEXED_DIM = 384
#: Users with fewer memories are searched exactly: reading their rows through the b-tree
#: and sorting by distance (~2 µs a row here) beats a graph walk at that size.
EXACT_SEARCH_BELOW = 2_000
#: ... and so are users holding less than this share of the table: one global graph is
#: mostly other users' rows, and a filtered walk visits about k / share of them.
INDEXED_SHARE = 0.01
#: Decoded rows :meth:`PostgresStore.query` keeps, each checked against its row version.
CACHED_ROWS = 20_000
#: ``hnsw.ef_search`` for every connection: the candidate list of one index scan.
EF_SEARCH = 100
#: The HNSW index, also used by bulk loaders that drop it and build it after a COPY.
HNSW_INDEX_SQL = (
    f"CREATE INDEX IF NOT EXISTS memories_embedding_hnsw ON memories "
    f"USING hnsw ((embedding::vector({INDEXED_DIM})) vector_cosine_ops) "
    f"WHERE vector_dims(embedding) = {INDEXED_DIM}"
)

_COLUMNS = (
    "id", "user_id", "project", "content", "memory_type", "kind", "domains", "session_id",
    "created_at", "updated_at", "event_at", "key", "importance", "confidence", "usefulness",
    "access_count", "last_accessed_at", "pinned", "muted", "promoted_at", "compressed",
    "compression_source", "source_session_id", "provenance", "content_hash", "embedding",
    "superseded_by",
)  # fmt: skip
#: Kept in the narrow ``access`` table, not in ``memories`` (see the module docstring).
_ACCESS_COLUMNS = ("access_count", "last_accessed_at")


def _select_expression(column: str) -> str:
    if column == "access_count":
        return "coalesce(a.access_count, 0)"
    if column == "last_accessed_at":
        return "a.last_accessed_at"
    # Provenance read as text: json.loads of a str is faster than psycopg's loader of a
    # binary json value, and the empty provenance skips parsing (5,000 rows: 200 → 95 ms).
    if column == "provenance":
        return "m.provenance::text"
    return f"m.{column}"


#: Every column of a memory, over ``memories m`` :data:`_WITH_ACCESS`.
_SELECT_COLUMNS = ", ".join(_select_expression(c) for c in _COLUMNS)
_WITH_ACCESS = "LEFT JOIN access a ON a.user_id = m.user_id AND a.id = m.id"
#: The row version of a memory: new on any change of its row or of its access counts.
_VERSION = "m.xmin::text || '/' || coalesce(a.xmin::text, '')"
_INSERT_COLUMNS = (*(c for c in _COLUMNS if c not in _ACCESS_COLUMNS), "doc_length")
#: Rows per statement when a list of keys is sent as arrays.
_CHUNK = 5_000
#: Times a write is retried after a deadlock or serialization failure.
_RETRIES = 3
_MIGRATION_LOCK = 0x656E67_7261696E  # "engrain": one migrator at a time per database
T = TypeVar("T")
Conn = Connection[tuple[Any, ...]]


# -- migrations ---------------------------------------------------------------------------


def _m001_initial(db: Conn) -> None:
    try:
        db.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege as exc:
        raise MigrationError(
            "the pgvector extension is not installed in this database and this role may not "
            "create it; run `CREATE EXTENSION vector` as a superuser once"
        ) from exc
    # Ids are compared and ordered byte-wise ("C"), like Python strings, so the query order
    # (ties by id) and users() are the same as in the other stores on any server locale.
    db.execute(
        """CREATE TABLE memories (
            user_id text COLLATE "C" NOT NULL,
            id text COLLATE "C" NOT NULL,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            project text,
            content text NOT NULL,
            memory_type text NOT NULL,
            kind text NOT NULL,
            domains text[] NOT NULL DEFAULT '{}',
            session_id text,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            event_at timestamptz,
            key text,
            importance double precision NOT NULL,
            confidence double precision NOT NULL,
            usefulness double precision NOT NULL,
            pinned boolean NOT NULL DEFAULT false,
            muted boolean NOT NULL DEFAULT false,
            promoted_at timestamptz,
            compressed boolean NOT NULL DEFAULT false,
            compression_source boolean NOT NULL DEFAULT false,
            source_session_id text,
            superseded_by text,
            provenance json NOT NULL DEFAULT '{}',
            content_hash text NOT NULL,
            embedding vector,
            doc_length integer NOT NULL DEFAULT 0,
            PRIMARY KEY (user_id, id)
        )"""
    )
    # A 384-d vector is 1.5 kB: kept in the row (not TOAST), exact search reads it in place.
    db.execute("ALTER TABLE memories ALTER COLUMN embedding SET STORAGE PLAIN")
    db.execute("CREATE INDEX memories_user_updated ON memories (user_id, updated_at DESC, id DESC)")
    # what recall reads on every call besides the searches: a user's procedural memories
    # (by type) and pinned ones, without scanning the rest of the user's rows
    db.execute(
        "CREATE INDEX memories_user_type ON memories "
        "(user_id, memory_type, updated_at DESC, id DESC)"
    )
    db.execute(
        "CREATE INDEX memories_user_pinned ON memories (user_id, updated_at DESC, id DESC) "
        "WHERE pinned"
    )
    db.execute("CREATE INDEX memories_user_key ON memories (user_id, key) WHERE key IS NOT NULL")
    db.execute(
        "CREATE INDEX memories_user_session ON memories (user_id, session_id) "
        "WHERE session_id IS NOT NULL"
    )
    db.execute(HNSW_INDEX_SQL)
    db.execute(
        """CREATE TABLE postings (
            user_id text COLLATE "C" NOT NULL,
            term text COLLATE "C" NOT NULL,
            memory_id text COLLATE "C" NOT NULL,
            tf integer NOT NULL,
            doc_length integer NOT NULL,
            PRIMARY KEY (user_id, term, memory_id) INCLUDE (tf, doc_length)
        )"""
    )
    db.execute("CREATE INDEX postings_memory ON postings (user_id, memory_id)")
    # Access counts change on every context() call: in their own narrow rows they update in
    # place (HOT), instead of copying a 2 kB memory row and inserting it into every index,
    # the HNSW graph included (17 ms a call at a million memories when they were columns).
    db.execute(
        """CREATE TABLE access (
            user_id text COLLATE "C" NOT NULL,
            id text COLLATE "C" NOT NULL,
            access_count bigint NOT NULL,
            last_accessed_at timestamptz,
            PRIMARY KEY (user_id, id)
        ) WITH (fillfactor = 70)"""
    )
    db.execute(
        """CREATE TABLE embedding_cache (
            model_id text COLLATE "C" NOT NULL,
            content_hash text COLLATE "C" NOT NULL,
            vector vector NOT NULL,
            PRIMARY KEY (model_id, content_hash)
        )"""
    )
    db.execute("ALTER TABLE embedding_cache ALTER COLUMN vector SET STORAGE PLAIN")
    db.execute(
        """CREATE TABLE state (
            user_id text COLLATE "C" NOT NULL,
            namespace text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            value json NOT NULL,
            updated_at timestamptz NOT NULL,
            PRIMARY KEY (user_id, namespace, key)
        )"""
    )
    db.execute(
        """CREATE TABLE revisions (
            user_id text COLLATE "C" PRIMARY KEY,
            revision bigint NOT NULL,
            documents bigint NOT NULL DEFAULT 0,
            total_length bigint NOT NULL DEFAULT 0
        )"""
    )


#: Named, ordered migrations. Append only; never edit one that has shipped.
MIGRATIONS: list[tuple[str, Callable[[Conn], None]]] = [
    ("001_initial", _m001_initial),
]


# -- vectors as numpy arrays --------------------------------------------------------------


class _VectorDumper(Dumper):
    """numpy float32 → pgvector's binary format (dimension, unused, big-endian floats)."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        values = np.asarray(obj, dtype=">f4")
        return struct.pack(">HH", values.shape[0], 0) + values.tobytes()


class _VectorLoader(Loader):
    """pgvector's binary format → a numpy float32 array (what every store returns)."""

    format = Format.BINARY

    def load(self, data: Any) -> Vector:
        return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)


def _configure(conn: Conn) -> None:
    """Run on every new pooled connection: vector types, UTC, search settings."""
    register_vector(conn)
    info = conn.adapters.types.get("vector")
    assert info is not None
    # A subclass per connection: the type's oid differs between databases.
    dumper = type("_Dumper", (_VectorDumper,), {"oid": info.oid})
    conn.adapters.register_dumper(np.ndarray, dumper)
    conn.adapters.register_loader(info.oid, _VectorLoader)
    conn.execute(
        "SET TIME ZONE 'UTC'; "
        f"SET hnsw.ef_search = {EF_SEARCH}; "
        "SET hnsw.iterative_scan = relaxed_order; "
        # The best plan depends on how many memories *this* user has: plan every query
        # with its own parameters instead of a generic plan cached after five calls.
        "SET plan_cache_mode = force_custom_plan"
    )


# -- the store ----------------------------------------------------------------------------


class PostgresStore:
    """A PostgreSQL database with pgvector, shared by any number of processes.

    ``url`` is a libpq URL or conninfo string; ``pool_size`` the most connections this
    process opens; ``exact_search_below`` and ``indexed_share`` the user size, absolute and
    as a share of the table, under which vector search skips the HNSW index (see the module
    docstring); ``cached_rows`` how many decoded rows :meth:`query` keeps (0: none). The
    schema is migrated on open.
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
        connect_timeout: float = 30.0,
    ) -> None:
        try:
            conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise ConfigError(f"malformed PostgreSQL URL: {str(exc).strip()}") from exc
        self.url = url
        self.exact_search_below = exact_search_below
        self.indexed_share = indexed_share
        self.cached_rows = cached_rows
        self._rows: OrderedDict[tuple[str, str], tuple[str, Memory]] = OrderedDict()
        self._where = _redact(url)
        self._closed = False
        self._lock = threading.Lock()
        self.migrate()
        try:
            self._pool: ConnectionPool[Conn] = ConnectionPool(
                url,
                min_size=1,
                max_size=max(1, pool_size),
                kwargs={"autocommit": True},
                configure=_configure,
                timeout=connect_timeout,
                name="engrain",
                open=True,
            )
            self._pool.wait(timeout=connect_timeout)
        except psycopg.Error as exc:
            if hasattr(self, "_pool"):
                self._pool.close()
            raise StoreError(f"cannot open PostgreSQL store at {self._where}: {exc}") from exc

    # -- schema -------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Apply the migrations not yet applied, each in its own transaction, one process
        at a time (an advisory lock); their names."""
        applied: list[str] = []
        try:
            db = psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self._where}: {exc}") from exc
        with db:
            try:
                db.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
                db.execute(
                    "CREATE TABLE IF NOT EXISTS migrations "
                    "(name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
                done = {r[0] for r in db.execute("SELECT name FROM migrations")}
            except psycopg.Error as exc:
                raise MigrationError(f"cannot read migrations of {self._where}: {exc}") from exc
            for name, step in pending_migrations(done, MIGRATIONS, str(self._where)):
                try:
                    with db.transaction():
                        step(db)
                        db.execute("INSERT INTO migrations (name) VALUES (%s)", (name,))
                except psycopg.Error as exc:
                    raise MigrationError(f"migration {name} failed: {exc}") from exc
                applied.append(name)
        return applied

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
        serialization failure (the transaction was rolled back, so it is safe)."""
        for attempt in range(_RETRIES + 1):
            try:
                with self._connection() as conn, conn.transaction():
                    return body(conn)
            except StoreError as exc:
                retry = isinstance(
                    exc.__cause__,
                    psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure,
                )
                if not retry or attempt == _RETRIES:
                    raise
        raise AssertionError("unreachable")

    # -- protocol -----------------------------------------------------------------------

    def write(
        self,
        upserts: Sequence[Memory] = (),
        deletes: Sequence[Memory] = (),
        state: Sequence[State] = (),
    ) -> None:
        """Insert or replace ``upserts``, delete ``deletes`` and put ``state``, in one
        transaction; each user whose memories changed gets a new revision."""
        if not upserts and not deletes and not state:
            return
        # Read every item before the transaction: a bad one raises here, nothing written.
        rows: dict[tuple[str, str], tuple[tuple[Any, ...], Counter[str], int]] = {}
        for memory in upserts:
            counts = Counter(tokenize(memory.content))
            length = sum(counts.values())
            rows[(memory.user_id, memory.id)] = (_to_row(memory, length), counts, length)
        counted = {
            (m.user_id, m.id): (int(m.access_count), _utc(m.last_accessed_at)) for m in upserts
        }
        removed = {(m.user_id, m.id) for m in deletes}
        for key in removed:
            rows.pop(key, None)  # upserted then deleted in the same write: deleted
            counted.pop(key, None)
        accesses = [
            (u, i, n, at) for (u, i), (n, at) in sorted(counted.items()) if n or at is not None
        ]
        latest = {(s.user_id, s.namespace, s.key): s.encoded() for s in state}  # last wins
        # sorted, like every set of rows a write locks: concurrent writes never deadlock
        documents = [(*where, latest[where]) for where in sorted(latest)]
        changed = sorted({u for u, _ in rows} | {u for u, _ in removed})
        touched = sorted(rows.keys() | removed)
        now = datetime.now(UTC)

        def body(db: Conn) -> None:
            with db.cursor(binary=True) as cur:
                # 1. Queue behind other writers of these users (sorted: no deadlock).
                cur.executemany(
                    "INSERT INTO revisions (user_id, revision) VALUES (%s, 1) "
                    "ON CONFLICT (user_id) DO UPDATE SET revision = revisions.revision + 1",
                    [(u,) for u in changed],
                )
                # 2. Lock the rows this write replaces or deletes, in key order.
                old: dict[tuple[str, str], tuple[str, int]] = {}
                for part in _chunks(touched):
                    cur.execute(
                        "SELECT m.user_id, m.id, m.content, m.doc_length FROM memories m "
                        "JOIN unnest(%s::text[], %s::text[]) AS k(u, i) "
                        "ON m.user_id = k.u AND m.id = k.i "
                        "ORDER BY m.user_id, m.id FOR UPDATE OF m",
                        ([u for u, _ in part], [i for _, i in part]),
                    )
                    old.update({(u, i): (c, n) for u, i, c, n in cur.fetchall()})
                # 3. What changes: rows, postings, and each user's document statistics.
                stale = [k for k in old if k in removed or old[k][0] != rows[k][0][3]]
                fresh = [k for k, (row, _, _) in rows.items() if k not in old or k in stale]
                delta: Counter[tuple[str, str]] = Counter()
                for key in stale:
                    delta[(key[0], "documents")] -= 1
                    delta[(key[0], "total_length")] -= old[key][1]
                for key in fresh:
                    delta[(key[0], "documents")] += 1
                    delta[(key[0], "total_length")] += rows[key][2]
                for part in _chunks(sorted(removed)):
                    cur.execute(
                        "DELETE FROM memories m USING unnest(%s::text[], %s::text[]) AS k(u, i) "
                        "WHERE m.user_id = k.u AND m.id = k.i",
                        ([u for u, _ in part], [i for _, i in part]),
                    )
                for part in _chunks(stale):
                    cur.execute(
                        "DELETE FROM postings p USING unnest(%s::text[], %s::text[]) AS k(u, i) "
                        "WHERE p.user_id = k.u AND p.memory_id = k.i",
                        ([u for u, _ in part], [i for _, i in part]),
                    )
                if rows:
                    cur.executemany(_UPSERT, [row for row, _, _ in rows.values()])
                # access counts are replaced with the memory (we hold its row lock)
                for part in _chunks(sorted(old)):
                    cur.execute(
                        "DELETE FROM access a USING unnest(%s::text[], %s::text[]) AS k(u, i) "
                        "WHERE a.user_id = k.u AND a.id = k.i",
                        ([u for u, _ in part], [i for _, i in part]),
                    )
                cur.executemany(
                    "INSERT INTO access (user_id, id, access_count, last_accessed_at) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (user_id, id) DO UPDATE SET "
                    "access_count = EXCLUDED.access_count, "
                    "last_accessed_at = EXCLUDED.last_accessed_at",
                    accesses,
                )
                if fresh:
                    with cur.copy(
                        "COPY postings (user_id, term, memory_id, tf, doc_length) FROM STDIN"
                    ) as copy:
                        for user_id, memory_id in fresh:
                            _, counts, length = rows[(user_id, memory_id)]
                            for term, tf in counts.items():
                                copy.write_row((user_id, term, memory_id, tf, length))
                cur.executemany(
                    "UPDATE revisions SET documents = documents + %s, "
                    "total_length = total_length + %s WHERE user_id = %s",
                    [
                        (delta[(u, "documents")], delta[(u, "total_length")], u)
                        for u in changed
                        if delta[(u, "documents")] or delta[(u, "total_length")]
                    ],
                )
                cur.executemany(
                    "INSERT INTO state (user_id, namespace, key, value, updated_at) "
                    "VALUES (%s, %s, %s, %s::json, %s) ON CONFLICT (user_id, namespace, key) "
                    "DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at",
                    [(u, ns, k, v, now) for u, ns, k, v in documents if v is not None],
                )
                cur.executemany(
                    "DELETE FROM state WHERE user_id = %s AND namespace = %s AND key = %s",
                    [(u, ns, k) for u, ns, k, v in documents if v is None],
                )

        self._transaction(body)

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        """The user's memories with these ids, in the order given; unknown ids skipped."""
        if not ids:
            return []
        found = {m.id: m for _, m in self._fetch(user_id, list(dict.fromkeys(ids)))}
        return [found[i] for i in ids if i in found]

    def _fetch(self, user_id: str, ids: Sequence[str]) -> list[tuple[str, Memory]]:
        """The user's memories with these (distinct) ids, each with its row version."""
        fetched: list[tuple[str, Memory]] = []
        for part in _chunks(ids):
            for row in self._read(
                f"SELECT {_SELECT_COLUMNS}, {_VERSION} FROM memories m {_WITH_ACCESS} "
                "WHERE m.user_id = %s AND m.id = ANY(%s::text[])",
                (user_id, part),
            ):
                fetched.append((row[-1], _from_row(row)))
        return fetched

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        """The user's memories passing ``flt``, most recently updated first (ties: the
        larger id first, so pages are stable)."""
        where, params = _filter_sql(flt)
        listing = self._read(
            f"SELECT m.id, {_VERSION} FROM memories m {_WITH_ACCESS} "
            f"WHERE m.user_id = %s{where} "
            "ORDER BY m.updated_at DESC, m.id DESC LIMIT %s OFFSET %s",
            (user_id, *params, limit, max(0, offset)),
        )
        return self._decoded(user_id, listing)

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

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories most cosine-similar to ``vector`` among those passing ``flt``,
        best first, with their cosine similarity (1 − pgvector's cosine distance)."""
        query = np.asarray(vector, dtype=np.float32)
        if k <= 0 or query.ndim != 1 or query.shape[0] == 0:
            return []
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            indexed = self._indexed(cur, user_id, query.shape[0])
            rows: list[Any] = []
            if indexed:
                cur.execute(*_search_sql(user_id, query, k, flt, indexed=True))
                rows = cur.fetchall()
            if not indexed or len(rows) < k:
                cur.execute(*_search_sql(user_id, query, k, flt, indexed=False))
                rows = cur.fetchall()
        rows.sort(key=lambda r: r[-1])  # relaxed_order: the index may return near-sorted rows
        return [(_from_row(r), 1.0 - float(r[-1])) for r in rows]

    def _indexed(self, cur: psycopg.Cursor[Any], user_id: str, dim: int) -> bool:
        """Whether a search of this user goes through the HNSW index (module docstring)."""
        if dim != INDEXED_DIM:
            return False
        # the table's size as the planner knows it (ANALYZE, autovacuum): no count needed
        cur.execute(
            "SELECT r.documents, greatest(c.reltuples, 0) FROM revisions r, pg_class c "
            "WHERE r.user_id = %s AND c.oid = 'memories'::regclass",
            (user_id,),
        )
        found = cur.fetchone()
        return found is not None and found[0] >= max(
            self.exact_search_below, self.indexed_share * found[1]
        )

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
            text, params = _search_sql(user_id, query, k, flt, indexed=indexed)
            prefix = "EXPLAIN (ANALYZE, BUFFERS) " if analyze else "EXPLAIN "
            cur.execute(prefix + text, params)
            return "\n".join(r[0] for r in cur.fetchall())

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories passing ``flt`` with the highest BM25 score for ``text`` over
        the user's own term statistics; the scores equal :class:`LexicalIndex`'s."""
        # LexicalIndex.scores sums the terms in this set's order; so does the SQL (``ord``).
        terms = list(set(tokenize(text)))
        if k <= 0 or not terms:
            return []
        where, params = _filter_sql(flt)
        rows = self._read(
            f"""WITH q AS (
                    SELECT t.term, t.ord FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, ord)
                ),
                st AS (
                    SELECT documents, total_length::real / documents::real AS avgdl
                    FROM revisions WHERE user_id = %s AND documents > 0
                ),
                w AS (
                    SELECT q.term, q.ord,
                        ln(1.0::float8 + ((st.documents - d.df)::float8 + 0.5::float8)
                            / (d.df::float8 + 0.5::float8))::real AS idf
                    FROM q CROSS JOIN st
                    CROSS JOIN LATERAL (
                        SELECT count(*) AS df FROM postings p
                        WHERE p.user_id = %s AND p.term = q.term
                    ) d
                    WHERE d.df > 0
                ),
                s AS (
                    SELECT p.memory_id,
                        sum(((w.idf * p.tf::real) * {K1 + 1.0}::real)
                            / (p.tf::real + {K1}::real * ({1.0 - B}::real
                               + ({B}::real * p.doc_length::real) / st.avgdl))
                            ORDER BY w.ord) AS score
                    FROM w JOIN postings p ON p.user_id = %s AND p.term = w.term
                    CROSS JOIN st
                    GROUP BY p.memory_id
                )
                SELECT {_SELECT_COLUMNS}, r.score
                FROM (SELECT s.memory_id, s.score FROM s ORDER BY s.score DESC, s.memory_id) r
                -- best scores first, a row lookup each until k pass the filter: the full
                -- rows of the (often thousands of) lower-scored matches are never read
                CROSS JOIN LATERAL (
                    SELECT * FROM memories m
                    WHERE m.user_id = %s AND m.id = r.memory_id{where}
                ) m
                {_WITH_ACCESS}
                ORDER BY r.score DESC, r.memory_id
                LIMIT %s""",
            (terms, user_id, user_id, user_id, user_id, *params, k),
        )
        return [(_from_row(r), float(r[-1])) for r in rows]

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        """Add one to the access count of each id (once per occurrence) and stamp it; the
        revision does not change."""
        if not ids:
            return
        times = Counter(ids)
        wanted = sorted(times)
        when = as_utc(at)

        def body(db: Conn) -> None:
            with db.cursor(binary=True) as cur:
                # Every context() counts its accesses: do not wait for the WAL flush. A crash
                # can lose the last fraction of a second of counts, never a memory.
                cur.execute("SET LOCAL synchronous_commit = off")
                # The memories must exist and stay while we count: a shared lock, taken in
                # id order like write()'s exclusive one, so the two never deadlock.
                cur.execute(
                    "SELECT m.id FROM memories m WHERE m.user_id = %s "
                    "AND m.id = ANY(%s::text[]) ORDER BY m.id FOR KEY SHARE",
                    (user_id, wanted),
                )
                present = [r[0] for r in cur.fetchall()]
                if not present:
                    return
                cur.execute(
                    "INSERT INTO access (user_id, id, access_count, last_accessed_at) "
                    "SELECT %s, x.id, x.n, %s FROM unnest(%s::text[], %s::bigint[]) AS x(id, n) "
                    "ORDER BY x.id ON CONFLICT (user_id, id) DO UPDATE SET "
                    "access_count = access.access_count + EXCLUDED.access_count, "
                    "last_accessed_at = EXCLUDED.last_accessed_at",
                    (user_id, when, present, [times[i] for i in present]),
                )

        self._transaction(body)

    def count(self, user_id: str, flt: MemoryFilter = ALL) -> int:
        """How many of the user's memories pass ``flt``."""
        where, params = _filter_sql(flt)
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
        for part in _chunks(list(hashes)):
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

    def expire_state(self, user_id: str, namespace: str, before: datetime) -> int:
        """Delete the user's documents in ``namespace`` written before ``before``; how many."""
        when = as_utc(before)

        def body(db: Conn) -> int:
            cursor = db.execute(
                "DELETE FROM state WHERE user_id = %s AND namespace = %s AND updated_at < %s",
                (user_id, namespace, when),
            )
            return int(cursor.rowcount)

        return self._transaction(body)

    def state_documents(self, user_id: str | None = None) -> list[State]:
        """Every state document (of one user, or of all), for copying a store; not part of
        the protocol."""
        rows = self._read(
            "SELECT user_id, namespace, key, value FROM state "
            "WHERE %s::text IS NULL OR user_id = %s ORDER BY user_id, namespace, key",
            (user_id, user_id),
        )
        return [State(u, ns, k, dict(v)) for u, ns, k, v in rows]

    def users(self) -> list[str]:
        """Every user id with at least one memory, sorted."""
        return [
            r[0]
            for r in self._read(
                "SELECT user_id FROM revisions WHERE documents > 0 ORDER BY user_id"
            )
        ]

    def close(self) -> None:
        """Close the pool's connections (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.close()


# -- SQL builders and row conversion ------------------------------------------------------

_UPSERT = (
    f"INSERT INTO memories ({', '.join(_INSERT_COLUMNS)}) VALUES ("
    + ", ".join(
        "%s::text[]" if c == "domains" else "%s::json" if c == "provenance" else "%s"
        for c in _INSERT_COLUMNS
    )
    + ") ON CONFLICT (user_id, id) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in _INSERT_COLUMNS if c not in ("user_id", "id"))
)


def _filter_sql(flt: MemoryFilter) -> tuple[str, list[Any]]:
    """``AND …`` clauses over the alias ``m`` for every field of ``flt``, and their values."""
    clauses: list[str] = []
    params: list[Any] = []
    if flt.project is not None:
        clauses.append("m.project = %s")
        params.append(flt.project)
    if flt.memory_types is not None:
        clauses.append("m.memory_type = ANY(%s::text[])")
        params.append([t.value for t in flt.memory_types])
    if flt.kinds is not None:
        clauses.append("m.kind = ANY(%s::text[])")
        params.append([k.value for k in flt.kinds])
    if flt.session_id is not None:
        clauses.append("m.session_id = %s")
        params.append(flt.session_id)
    if flt.key is not None:
        clauses.append("m.key = %s")
        params.append(flt.key)
    if not flt.include_compressed:
        clauses.append("NOT m.compressed")
    if not flt.include_muted:
        clauses.append("NOT m.muted")
    if not flt.include_superseded:
        clauses.append("m.superseded_by IS NULL")
    if flt.min_importance is not None:
        clauses.append("m.importance >= %s")
        params.append(float(flt.min_importance))
    if flt.pinned is not None:
        clauses.append("m.pinned = %s")
        params.append(bool(flt.pinned))
    return "".join(f" AND {c}" for c in clauses), params


def _search_sql(
    user_id: str, query: Vector, k: int, flt: MemoryFilter, *, indexed: bool
) -> tuple[str, list[Any]]:
    """The vector search: the HNSW form orders by the index's own expression; the exact
    form by a plain distance the index cannot serve (so the planner reads the user's rows
    through a b-tree), with insertion order breaking ties."""
    where, params = _filter_sql(flt)
    dim = query.shape[0]
    if indexed:
        distance = f"(m.embedding::vector({dim}) <=> %s::vector({dim}))"
        dims = f"vector_dims(m.embedding) = {dim}"  # a literal: proves the partial index
        order = "distance"
    else:
        distance = "(m.embedding <=> %s::vector)"
        dims = f"vector_dims(m.embedding) = {int(dim)}"
        order = "distance, m.seq"
    # the k nearest first, then their access counts: the join never sits between the
    # index scan and its LIMIT
    text = (
        f"SELECT {_SELECT_COLUMNS}, m.distance FROM ("
        f"SELECT m.*, {distance} AS distance FROM memories m "
        f"WHERE m.user_id = %s AND m.embedding IS NOT NULL AND {dims}{where} "
        f"ORDER BY {order} LIMIT %s"
        f") m {_WITH_ACCESS} ORDER BY m.distance, m.seq"
    )
    return text, [query, user_id, *params, k]


def _chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "<unparsable PostgreSQL URL>"
    params.pop("password", None)
    return make_conninfo("", **params)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else as_utc(value)


def _to_row(m: Memory, doc_length: int) -> tuple[Any, ...]:
    return (
        m.id, m.user_id, m.project, m.content, m.memory_type.value, m.kind.value,
        list(m.domains), m.session_id, _utc(m.created_at), _utc(m.updated_at),
        _utc(m.event_at), m.key, float(m.importance), float(m.confidence),
        float(m.usefulness), bool(m.pinned), bool(m.muted), _utc(m.promoted_at),
        bool(m.compressed), bool(m.compression_source),
        m.source_session_id, json.dumps(m.provenance.to_dict()), m.content_hash,
        None if m.embedding is None else np.asarray(m.embedding, dtype=np.float32),
        m.superseded_by, doc_length,
    )  # fmt: skip


def _from_row(r: Sequence[Any]) -> Memory:
    return Memory(
        id=r[0], user_id=r[1], project=r[2], content=r[3],
        memory_type=MemoryType(r[4]), kind=Kind(r[5]), domains=tuple(r[6]),
        session_id=r[7], created_at=r[8].astimezone(UTC), updated_at=r[9].astimezone(UTC),
        event_at=_from_ts(r[10]), key=r[11], importance=r[12], confidence=r[13],
        usefulness=r[14], access_count=r[15], last_accessed_at=_from_ts(r[16]), pinned=r[17],
        muted=r[18], promoted_at=_from_ts(r[19]), compressed=r[20], compression_source=r[21],
        source_session_id=r[22], provenance=_provenance(r[23]), content_hash=r[24],
        embedding=r[25], superseded_by=r[26],
    )  # fmt: skip


_NO_PROVENANCE = json.dumps(Provenance().to_dict())


def _provenance(text: str) -> Provenance:
    return Provenance() if text == _NO_PROVENANCE else Provenance.from_dict(json.loads(text))


def _from_ts(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)
