"""The PostgreSQL schema: named, ordered, transactional migrations (see the package
docstring for what each table holds and why)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
import psycopg.errors

from engrain.errors import MigrationError, StoreError
from engrain.store.base import pending_migrations
from engrain.store.postgres import (
    fill,
    graphed,
    outcome,
    repack,
    restem,
    restem_final_e,
    restem_plural,
)
from engrain.store.postgres.codec import Conn
from engrain.tokens import spaced_count

log = logging.getLogger(__name__)

#: The dimension the HNSW index serves (all-MiniLM-L6-v2). Vectors of other sizes are
#: stored and searched exactly.
INDEXED_DIM = 384
#: The HNSW index as migration 001 made it (every row with a 384-dimension vector).
_HNSW_001_SQL = (
    f"CREATE INDEX IF NOT EXISTS memories_embedding_hnsw ON memories "
    f"USING hnsw ((embedding::vector({INDEXED_DIM})) vector_cosine_ops) "
    f"WHERE vector_dims(embedding) = {INDEXED_DIM}"
)
#: The HNSW index since migration 015: the rows of graphed users only (``graphed.py``);
#: also used by bulk loaders that drop it and build it after a COPY.
HNSW_INDEX_SQL = f"{_HNSW_001_SQL} AND graphed"
#: The kinds recall searches on their own on every call (``recall.gate.LEARNING_KINDS``,
#: which a test holds equal): a search filtered to them walks a graph of their own.
LEARNING_KINDS = (
    "invariant", "pattern", "decision", "antipattern", "golden_path", "preference",
    "correction",
)  # fmt: skip
#: The HNSW index over those kinds only (``memories_learnings_hnsw``), as migration 004
#: made it.
_LEARNINGS_004_SQL = (
    f"CREATE INDEX IF NOT EXISTS memories_learnings_hnsw ON memories "
    f"USING hnsw ((embedding::vector({INDEXED_DIM})) vector_cosine_ops) "
    f"WHERE vector_dims(embedding) = {INDEXED_DIM} "
    f"AND kind IN ({', '.join(repr(k) for k in LEARNING_KINDS)})"
)
#: ... and since migration 015, of graphed users only (``graphed.py``).
LEARNINGS_INDEX_SQL = f"{_LEARNINGS_004_SQL} AND graphed"
#: The candidate list the learnings' graph is built with (pgvector's ``ef_construction``,
#: default 64): as wide as the list their search walked it with when it was chosen (4 per
#: row × the gate's 100 learnings = 400). On the 100,000-memory corpus (22,129 learnings,
#: 60 questions) the default's graph returned 0.968 of the exact 100 nearest at
#: ``ef_search`` 400, one built with 400 returned 0.992 (0.990 at 200); build 30 against
#: 21 s (``docs/postgres.md``, session 12). So built, it is walked with 3 per row since
#: session 15 (``LEARNINGS_EF_PER_ROW``).
LEARNINGS_EF_CONSTRUCTION = 400
_MIGRATION_LOCK = 0x656E67_7261696E  # "engrain": one migrator at a time per database


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
    db.execute(_HNSW_001_SQL)
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


def _m002_api_keys(db: Conn) -> None:
    # Store-wide, not per user: one key may act for several users. A request's key is
    # found by the hash of the secret it presents, hence the unique digest.
    db.execute(
        """CREATE TABLE api_keys (
            id text COLLATE "C" PRIMARY KEY,
            digest text COLLATE "C" NOT NULL UNIQUE,
            name text,
            users text[] COLLATE "C" NOT NULL DEFAULT '{}',
            projects text[] COLLATE "C" NOT NULL DEFAULT '{}',
            admin boolean NOT NULL DEFAULT false,
            created_at timestamptz NOT NULL,
            revoked_at timestamptz
        )"""
    )


def _m003_term_stats_access_clock(db: Conn) -> None:
    # Each user's document frequency per term, kept by every write in its own transaction:
    # BM25's idf is one index lookup per query term instead of counting its postings.
    # The stamp (from a sequence, never reused) changes whenever a posting of the term is
    # added or removed: a process that cached the term's posting list at a stamp knows it
    # is still the list while the stamp is unchanged (``bm25``).
    db.execute("CREATE SEQUENCE term_stamps")
    db.execute(
        """CREATE TABLE term_stats (
            user_id text COLLATE "C" NOT NULL,
            term text COLLATE "C" NOT NULL,
            df bigint NOT NULL,
            stamp bigint NOT NULL DEFAULT nextval('term_stamps'),
            PRIMARY KEY (user_id, term)
        )"""
    )
    db.execute(
        "INSERT INTO term_stats (user_id, term, df) "
        "SELECT user_id, term, count(*) FROM postings GROUP BY user_id, term"
    )
    # A per-user access clock, bumped by every access count (its row lock orders the counts
    # of one user), and the clock of each access row's last count: a cached listing learns
    # which access counts changed since it was read from one index range scan.
    db.execute(
        """CREATE TABLE access_clocks (
            user_id text COLLATE "C" PRIMARY KEY,
            clock bigint NOT NULL
        )"""
    )
    db.execute("ALTER TABLE access ADD COLUMN clock bigint NOT NULL DEFAULT 0")
    db.execute("CREATE INDEX access_user_clock ON access (user_id, clock)")


def _m004_learnings_index(db: Conn) -> None:
    # Recall asks for the nearest learnings (a fifth of a large user's memories) besides the
    # nearest of all: through the one graph, a filtered walk discards ~4,500 rows for 100
    # (39 ms at 100,000 memories, ~100 ms when it falls back to the exact form); a graph of
    # their own answers in ~5 ms. The planner picks it when the query's kinds imply its
    # predicate (the kinds are literals in every custom plan).
    db.execute(_LEARNINGS_004_SQL)


#: Migration 005's packing, as it shipped: postings ``(user_id, term, seq, tf, doc_length)``
#: of the query ``source`` into blocks of 256 legacy records (``postings.LEGACY_RECORD``).
LEGACY_PACK = """INSERT INTO posting_blocks (user_id, term, first_seq, data)
    SELECT user_id, term, min(seq),
        string_agg(int8send(seq) || int2send(least(tf, 32767)::int2) || int4send(doc_length),
                   ''::bytea ORDER BY seq)
    FROM (SELECT s.user_id, s.term, s.seq, s.tf, s.doc_length,
            (row_number() OVER (PARTITION BY s.user_id, s.term ORDER BY s.seq) - 1)
                / 256 AS block
          FROM ({source}) AS s) AS numbered
    GROUP BY user_id, term, block"""


def _m005_posting_blocks(db: Conn) -> None:
    # Posting lists in blocks of packed records (``bm25``): a question over a million
    # memories reads ~400,000 postings, which one row each made ~330 ms of index scan and
    # decoding; in blocks they are ~1,600 rows of bytes. ``seq`` numbers the postings; the
    # ids of the best are then read through ``memories_user_seq``.
    db.execute(
        """CREATE TABLE posting_blocks (
            user_id text COLLATE "C" NOT NULL,
            term text COLLATE "C" NOT NULL,
            first_seq bigint NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (user_id, term, first_seq)
        ) WITH (fillfactor = 50)"""
    )
    # kept in the row, uncompressed (random integers do not compress); room on the page
    # for a rewritten block to stay there (HOT)
    db.execute("ALTER TABLE posting_blocks ALTER COLUMN data SET STORAGE PLAIN")
    db.execute(
        LEGACY_PACK.format(
            source="SELECT p.user_id, p.term, m.seq, p.tf, p.doc_length FROM postings p "
            "JOIN memories m ON m.user_id = p.user_id AND m.id = p.memory_id"
        )
    )
    db.execute("CREATE INDEX memories_user_seq ON memories (user_id, seq)")
    db.execute("DROP TABLE postings")


def _m006_memories_fillfactor(db: Conn) -> None:
    # Room on each page for a changed row to stay there: a patch (a promotion, feedback's
    # usefulness, a pin) then updates the row in place (HOT) instead of inserting it anew
    # into every index, both HNSW graphs included. A row with a 384-dimension vector is
    # ~1.6-2 kB: at 80% a page keeps one such row free (at 90% a page of 1.8 kB rows is
    # full). Measured on the 100,000-memory corpus (rows ~2 kB) rewritten with room (3
    # rows a page instead of 3.9, the heap +29%): 30 of 30 promotions HOT against 2 of 30,
    # 4.3 against 19.9 ms a write (p50). Pages written before keep no room until the
    # table is rewritten (``VACUUM FULL memories``); this only sets a storage parameter.
    db.execute("ALTER TABLE memories SET (fillfactor = 80)")


def _m007_learnings_graph(db: Conn) -> None:
    # New learnings join the graph with the wider candidate list from now on. The graph
    # that exists is rebuilt here only while it fits in ``maintenance_work_mem``: pgvector
    # then builds in memory (seconds per 10,000 rows; writers wait on the table's lock
    # meanwhile, readers of the graph too). A larger one keeps working as it is, and is
    # rebuilt without blocking anyone by ``REINDEX INDEX CONCURRENTLY
    # memories_learnings_hnsw`` (docs/postgres.md, "Session 12"), which a migration's
    # transaction cannot run.
    db.execute(
        f"ALTER INDEX memories_learnings_hnsw SET (ef_construction = {LEARNINGS_EF_CONSTRUCTION})"
    )
    if learnings_graph_fits(db):
        db.execute("REINDEX INDEX memories_learnings_hnsw")
    else:
        log.warning(
            "the learnings' HNSW graph is larger than maintenance_work_mem: not rebuilt "
            "by migration 007; run `REINDEX INDEX CONCURRENTLY memories_learnings_hnsw` "
            "once for its full recall (docs/postgres.md)"
        )


def learnings_graph_fits(db: Conn) -> bool:
    """Whether the learnings' HNSW graph (its size on disk now) fits in the session's
    ``maintenance_work_mem``, so that pgvector rebuilds it in memory."""
    row = db.execute(
        "SELECT pg_relation_size('memories_learnings_hnsw'::regclass) <= "
        "(SELECT setting::bigint * 1024 FROM pg_settings WHERE name = 'maintenance_work_mem')"
    ).fetchone()
    return row is not None and bool(row[0])


def _m008_row_changes(db: Conn) -> None:
    # Which of a user's memories changed at which revision (a forget leaves ``gone``): a
    # working set in process (``working.py``) reads the rows changed since the revision it
    # holds as one indexed query, in the call, instead of listing every row's version.
    # Narrow and apart from ``memories``, so a patch still updates its row in place (HOT,
    # migration 006): an indexed ``revision`` column on ``memories`` would not. Empty when
    # created, and correct so: a row with no change row is older than any working set
    # loaded after this migration, and every write from here on stamps its rows
    # (``writes.write_body``); older trees, which would not, refuse a database at 008.
    db.execute(
        "CREATE TABLE row_changes (user_id text NOT NULL, id text NOT NULL, "
        "revision bigint NOT NULL, gone boolean NOT NULL, PRIMARY KEY (user_id, id))"
    )
    db.execute("CREATE INDEX row_changes_user_revision ON row_changes (user_id, revision)")


#: Rows migration 009 fills in its own transaction at most; a larger table is filled
#: afterwards, a batch per transaction, by ``engrain migrate`` or a store's background
#: filler (``fill.py``). Filling rewrites
#: every row, and a row whose page has no room for its new version enters every index
#: again, both HNSW graphs included: 5,000 rows with 384-dimension vectors took 22.8 s at
#: load ~20 (4.6 ms a row, a third of the updates HOT; docs/scale.md, "Session 16"), so
#: 10,000 rows hold the migration lock (and the table's writers) for ~45 s, 100,000 for
#: ~8 minutes: too long for an upgrade to block.
FILL_IN_MIGRATION_MAX = 10_000


def _m009_content_tokens(db: Conn) -> None:
    # A memory's content_tokens (``Memory.content_tokens``: cl100k tokens of " " + content)
    # kept with its row, so a call counts no line whose count is stored (SQLite's 007,
    # docs/scale.md "Session 16"); rows written from here on carry it
    # (``writes.write_body``); older trees refuse 009. A row without it (NULL) is counted
    # at call time, as before: a small table is filled here, in the migration's
    # transaction, a large one by a filler afterwards (``fill.py``; see
    # FILL_IN_MIGRATION_MAX).
    db.execute("ALTER TABLE memories ADD COLUMN content_tokens integer")
    (rows,) = db.execute("SELECT count(*) FROM memories").fetchone() or (0,)
    if rows <= FILL_IN_MIGRATION_MAX:
        while _fill_batch(db, 4_096):
            pass
    else:
        log.warning(
            "migration 009 left the token counts of %d memories to be filled: their lines "
            "are counted at call time until a store's background filler or "
            "`engrain migrate` fills them (a batch per transaction)",
            rows,
        )


def _fill_batch(db: Conn, size: int) -> int:
    """Count and write ``content_tokens`` for up to ``size`` rows that have none, inside
    the caller's transaction; how many were found. A row whose content changed since it
    was read (another content hash) is left for the next batch."""
    found = db.execute(
        "SELECT user_id, id, content, content_hash FROM memories "
        "WHERE content_tokens IS NULL LIMIT %s", (size,)
    ).fetchall()  # fmt: skip
    if found:
        db.execute(
            "UPDATE memories m SET content_tokens = v.n "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::int[]) AS v(u, i, h, n) "
            "WHERE m.user_id = v.u AND m.id = v.i AND m.content_hash = v.h "
            "AND m.content_tokens IS NULL",
            ([r[0] for r in found], [r[1] for r in found], [r[3] for r in found],
             [spaced_count(r[2]) for r in found]),
        )  # fmt: skip
    return len(found)


#: The two HNSW graphs as migration 015 rebuilds them, partial on ``graphed``.
_GRAPHS = {
    "memories_embedding_hnsw": HNSW_INDEX_SQL,
    "memories_learnings_hnsw": LEARNINGS_INDEX_SQL,
}

#: Named, ordered migrations. Append only; never edit one that has shipped.
MIGRATIONS: list[tuple[str, Callable[[Conn], None]]] = [
    ("001_initial", _m001_initial),
    ("002_api_keys", _m002_api_keys),
    ("003_term_stats_access_clock", _m003_term_stats_access_clock),
    ("004_learnings_index", _m004_learnings_index),
    ("005_posting_blocks", _m005_posting_blocks),
    ("006_memories_fillfactor", _m006_memories_fillfactor),
    ("007_learnings_graph", _m007_learnings_graph),
    ("008_row_changes", _m008_row_changes),
    ("009_content_tokens", _m009_content_tokens),
    (outcome.MIGRATION, outcome.migrate),
    (restem.MIGRATION, restem.migrate),
    (restem_final_e.MIGRATION, restem_final_e.migrate),
    (restem_plural.MIGRATION, restem_plural.migrate),
    (repack.MIGRATION, repack.migrate),
    (graphed.MIGRATION, lambda db: graphed.migrate(db, _GRAPHS)),
]


def connect(url: str, where: str) -> Conn:
    """An autocommit connection to the database at ``url`` for maintenance (``where``
    names it in messages, without its password); :class:`StoreError` if it cannot be
    reached."""
    try:
        return psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to PostgreSQL at {where}: {exc}") from exc


def migrate(url: str, where: str) -> list[str]:
    """Apply the migrations not yet applied to the database at ``url`` (``where`` names it
    in messages, without its password), each in its own transaction, one process at a time
    (an advisory lock); their names."""
    applied: list[str] = []
    with connect(url, where) as db:
        try:
            db.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
            db.execute(
                "CREATE TABLE IF NOT EXISTS migrations "
                "(name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r[0] for r in db.execute("SELECT name FROM migrations")}
        except psycopg.Error as exc:
            raise MigrationError(f"cannot read migrations of {where}: {exc}") from exc
        for name, step in pending_migrations(done, MIGRATIONS, where):
            try:
                with db.transaction():
                    step(db)
                    db.execute("INSERT INTO migrations (name) VALUES (%s)", (name,))
            except psycopg.Error as exc:
                raise MigrationError(f"migration {name} failed: {exc}") from exc
            applied.append(name)
        try:
            _mark_small_table_counted(db)
        except psycopg.Error as exc:
            raise MigrationError(f"cannot check the token counts of {where}: {exc}") from exc
    return applied


def _mark_small_table_counted(db: Conn) -> None:
    """Under the migrator's lock: a table of at most :data:`FILL_IN_MIGRATION_MAX` rows
    whose counts are not yet recorded as complete (``fill.pending``: one catalog row) gets
    any missing count and ``fill.CONSTRAINT`` in one transaction, so only a large table
    leaves work to a filler. (A table 009 filled holds every count: it just gets the
    constraint, at the first open of this tree.)"""
    if not fill.pending(db):
        return
    (rows,) = db.execute(
        "SELECT count(*) FROM (SELECT 1 FROM memories LIMIT %s) AS s",
        (FILL_IN_MIGRATION_MAX + 1,),
    ).fetchone() or (0,)
    if rows > FILL_IN_MIGRATION_MAX:
        return
    try:
        with db.transaction():
            # a transaction of another process holding the table: left to the filler
            # rather than this open waiting behind it (the constraint's lock is exclusive)
            db.execute(f"SET LOCAL lock_timeout = '{fill.LOCK_TIMEOUT}'")
            while _fill_batch(db, 4_096):
                pass
            fill.mark_counted(db)
    except psycopg.errors.LockNotAvailable:
        log.info("the token counts' constraint waits for the table: left to the filler")
