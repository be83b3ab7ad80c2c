"""The pool's HNSW graph rebuilt with a wide candidate list, and the walk it allows.

The pool's graph (``memories_embedding_hnsw``, migration 001) is built with pgvector's
default ``ef_construction`` (64); a search then walks it with at least 4 candidates per row
asked for and 200 below 200,000 rows (``EF_PER_ROW``, ``EF_BY_GRAPH_ROWS``). Built with
:data:`WIDE_EF_CONSTRUCTION` (200), a walk of 150 finds at least as many of the exact 50
nearest (R@50 at 100,000 real-vector memories 0.9959 / 0.9930 on two question sets, against
0.9906 / 0.9884 today) for ~0.9 ms less of the server's CPU a search
(``WIDE_EF_BY_GRAPH_ROWS``; docs/postgres.md, "Session 18 … (h3)").

No migration rebuilds it: each memory's insert into a graph built wide costs more of the
server's CPU (2.4 → 5.4 ms a memory at 100,000, session 18), which a small store's ingest
feels and its searches (exact below 2,000 memories) never repay. An operator of a
large user runs :func:`rebuild` once (``engrain migrate --pool-graph``): the graph is built
beside the one in use (``CREATE INDEX CONCURRENTLY``: readers and writers go on) and
swapped in by name in one short transaction. Every row of the graph swapped in was inserted
with the wide list, and it keeps ``ef_construction`` as a storage parameter, so the
parameter says how the graph in use was built; a store reads it (:data:`BUILT_SQL`) with
its search plan and walks accordingly (``ef_for_search``).
"""

from __future__ import annotations

import logging

import psycopg
import psycopg.errors

from engrain.errors import StoreError
from engrain.store.postgres.schema import HNSW_INDEX_SQL, connect

log = logging.getLogger(__name__)

#: The index :func:`rebuild` replaces (what migration 001 creates).
POOL_INDEX = "memories_embedding_hnsw"
#: The name it is built under before the swap; an interrupted build leaves it invalid,
#: and the next :func:`rebuild` drops it first.
BUILDING = "memories_embedding_hnsw_wide"
#: pgvector's ``ef_construction`` when an index sets none.
DEFAULT_EF_CONSTRUCTION = 64
#: The candidate list :func:`rebuild` builds the pool's graph with.
WIDE_EF_CONSTRUCTION = 200
#: The ``ef_construction`` the pool's graph in use was built with (one catalog row).
BUILT_SQL = (
    f"SELECT coalesce((SELECT o.option_value::int FROM pg_class c, "
    f"pg_options_to_table(c.reloptions) o WHERE c.oid = to_regclass('{POOL_INDEX}') "
    f"AND o.option_name = 'ef_construction'), {DEFAULT_EF_CONSTRUCTION})"
)
#: One rebuild at a time per database (an advisory lock apart from the migrations': a
#: store opening meanwhile migrates without waiting for the build).
_REBUILD_LOCK = 0x656E67_67726170  # "eng" "grap"
#: How long the swap waits for the table's readers and writers before giving up.
SWAP_LOCK_TIMEOUT = "10s"


def wide_index_sql(name: str) -> str:
    """The pool's index (:data:`HNSW_INDEX_SQL`'s definition) named ``name``, built
    concurrently with :data:`WIDE_EF_CONSTRUCTION`."""
    head, _, rest = HNSW_INDEX_SQL.partition(" ON memories ")
    using, _, where = rest.partition(" WHERE ")
    assert head == f"CREATE INDEX IF NOT EXISTS {POOL_INDEX}" and where, HNSW_INDEX_SQL
    return (
        f"CREATE INDEX CONCURRENTLY {name} ON memories {using} "
        f"WITH (ef_construction = {WIDE_EF_CONSTRUCTION}) WHERE {where}"
    )


def built_with(db: psycopg.Connection[tuple[object, ...]]) -> int:
    """The ``ef_construction`` the pool's graph in use was built with."""
    row = db.execute(BUILT_SQL).fetchone()
    return DEFAULT_EF_CONSTRUCTION if row is None else int(str(row[0]))


def rebuild(url: str, where: str, *, maintenance_work_mem: str | None = None) -> bool:
    """Build the pool's graph with :data:`WIDE_EF_CONSTRUCTION` beside the one in use and
    swap it in (module docstring); ``False`` if the graph in use is built so already.
    ``maintenance_work_mem`` (e.g. ``"1GB"``) lets pgvector build it in memory (190 MB at
    100,000 memories); otherwise the server's setting holds. Raises :class:`StoreError`
    if another rebuild of this database runs or the build or swap fails; the graph in use
    is then the one before, unchanged."""
    with connect(url, where) as db:
        try:
            (locked,) = db.execute(
                "SELECT pg_try_advisory_lock(%s)", (_REBUILD_LOCK,)
            ).fetchone() or (False,)
            if not locked:
                raise StoreError(f"another rebuild of the pool's graph runs at {where}")
            if built_with(db) >= WIDE_EF_CONSTRUCTION:
                return False
            db.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {BUILDING}")  # an interrupted one
            if maintenance_work_mem is not None:
                db.execute(
                    "SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,)
                )
            log.info("building the pool's HNSW graph with ef_construction %d", WIDE_EF_CONSTRUCTION)
            db.execute(wide_index_sql(BUILDING))
            with db.transaction():
                db.execute(f"SET LOCAL lock_timeout = '{SWAP_LOCK_TIMEOUT}'")
                db.execute(f"DROP INDEX IF EXISTS {POOL_INDEX}")  # none: this one is it
                db.execute(f"ALTER INDEX {BUILDING} RENAME TO {POOL_INDEX}")
        except psycopg.Error as exc:
            raise StoreError(f"rebuilding the pool's graph at {where} failed: {exc}") from exc
    return True
