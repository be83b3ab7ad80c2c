"""Which users' rows the two HNSW graphs hold: those of users large enough to be searched
through them (migration 015).

A user with fewer than a store's ``exact_search_below`` memories (2,000 by default) is
searched exactly, through the ``(user_id, …)`` b-tree (``plans.py``): the pool's and the
learnings' graphs never serve its searches, yet every one of its rows was inserted into
both, ~1.7 ms of the server's CPU a row on LoCoMo dev, ~45% of the server's work in an
ingest (``docs/ingest.md``, "Session 27 … (h7)"), and each such row is one more node a
larger user's filtered walk steps over.

So each user has a flag, ``revisions.graphed``, and each row the same, ``memories.graphed``;
both HNSW indexes are partial on ``graphed``:

* a new user starts ungraphed (a writer whose ``exact_search_below`` is 0 graphs it at
  once); its rows are written with the user's flag (:data:`UPSERT_GRAPHED`, read in the
  write's transaction, which holds the user's revision row);
* the write that takes the user to ``exact_search_below`` memories or more (the writer's
  setting) flips the flag and marks every row of the user graphed in the same transaction
  (:data:`FLIP`): the rows enter the graphs then, in one batch; the flag never goes back;
* a search plan reads the flag with the user's size (``searches._graph_rows``): an
  ungraphed user is searched exactly whatever a process's ``exact_search_below`` says,
  and the indexed form says ``AND m.graphed`` (``sql.search_sql``), which is what lets the
  planner prove the partial indexes' predicate; for a graphed user every row is graphed,
  so it is the same set of rows.

Every process reads the flag from the database, so processes with other settings agree on
which form finds every row; the flag and the rows change in the writing transaction, so a
reader sees the user graphed with all its rows in the graphs, or neither. Rows written by
any other path (a bulk ``COPY``) take the column's default, graphed, as before.

A database migrated with more than :data:`REBUILD_MAX` memories keeps its indexes as they
were (every row in them, as before: searches and writes stay correct, the saving comes
with a rebuild, ``REINDEX INDEX CONCURRENTLY`` after ``DROP``/``CREATE`` by hand, see
``docs/postgres.md``); a migration's transaction holds the table's writers, and rebuilding
a graph of 100,000 rows takes minutes.
"""

from __future__ import annotations

import logging
from typing import Final

from engrain.store.postgres.codec import Conn

log = logging.getLogger(__name__)

#: The migration that adds the flags and makes both graphs partial on them.
MIGRATION: Final = "015_graphed_users"
#: The most memories a database may hold for the migration to rebuild its two graphs
#: partial (the bound migration 009 fills rows under, for the same reason: the
#: migration's transaction holds the table's writers meanwhile).
REBUILD_MAX: Final = 10_000

#: A write's new and replaced rows take their user's flag as the write will leave it: the
#: revision row, which the write holds (it upserted it first), says whether the user is
#: graphed, or will be once this write's change of its memories (the first ``%s``) brings
#: ``documents`` to the threshold (the second): a write taking a user past it inserts its
#: own rows into the graphs once, and :data:`FLIP` marks the rows written before.
GRAPHED_VALUE: Final = (
    "(SELECT r.graphed OR r.documents + %s >= %s FROM revisions r WHERE r.user_id = %s)"
)

#: Graph the users of this write (``%s``: their ids) that now hold at least ``%s``
#: memories (``documents``, as this write left it) and are not yet: their flag, then every
#: row of theirs not yet graphed, in the write's transaction (it holds their revision rows,
#: which every writer of the user takes first, so no deadlock). Updating ``graphed`` is not
#: a key change: it waits for no ``FOR KEY SHARE`` lock of an access count.
FLIP: Final = (
    "WITH flipped AS (UPDATE revisions SET graphed = true "
    "WHERE user_id = ANY(%s::text[]) AND NOT graphed AND documents >= %s RETURNING user_id) "
    "UPDATE memories m SET graphed = true FROM flipped f "
    "WHERE m.user_id = f.user_id AND NOT m.graphed"
)


def migrate(db: Conn, definitions: dict[str, str]) -> None:
    """Migration 015, in the migrator's transaction: the flags (every user and row there
    now graphed: they are in the graphs), new users ungraphed by default; both graphs
    (``definitions``: index name → its ``CREATE INDEX``, partial on ``graphed``) rebuilt so,
    each with the ``ef_construction`` it was built with, while the table holds at most
    :data:`REBUILD_MAX` memories."""
    db.execute("ALTER TABLE revisions ADD COLUMN graphed boolean NOT NULL DEFAULT true")
    db.execute("ALTER TABLE revisions ALTER COLUMN graphed SET DEFAULT false")
    db.execute("ALTER TABLE memories ADD COLUMN graphed boolean NOT NULL DEFAULT true")
    (rows,) = db.execute("SELECT count(*) FROM memories").fetchone() or (0,)
    if rows > REBUILD_MAX:
        log.warning(
            "migration 015 left both HNSW graphs holding every row (%d memories): writes of "
            "users searched exactly still enter them until they are rebuilt partial on "
            "`graphed` (docs/postgres.md)",
            rows,
        )
        return
    for name, sql in definitions.items():
        ef = built_ef(db, name)
        db.execute(f"DROP INDEX IF EXISTS {name}")
        db.execute(with_ef(sql, ef))


def built_ef(db: Conn, name: str) -> int | None:
    """The ``ef_construction`` index ``name`` was built with, if set (``None``: default)."""
    row = db.execute(
        "SELECT o.option_value FROM pg_class c, pg_options_to_table(c.reloptions) o "
        "WHERE c.oid = to_regclass(%s) AND o.option_name = 'ef_construction'",
        (name,),
    ).fetchone()
    return None if row is None else int(str(row[0]))


def with_ef(sql: str, ef: int | None) -> str:
    """``sql`` (an HNSW ``CREATE INDEX … WHERE …``) built with ``ef_construction`` ``ef``."""
    if ef is None:
        return sql
    head, _, where = sql.partition(" WHERE ")
    return f"{head} WITH (ef_construction = {int(ef)}) WHERE {where}"
