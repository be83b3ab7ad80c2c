"""A memory's counted uses on SQLite: the narrow ``uses`` table (migration 006, issue 18).

A ``context()`` counts each memory it injects (:meth:`Store.record_uses`). Until 006 that
count and the last use's time were two columns of the memory's row, and SQLite rewrites a
whole row to change one column: ~2.2 KB with the vector, ~3 ms of CPU for a call's 100
uses at 100,000 memories (docs/scale.md, sessions 14 and 15). They now live in ``uses``, one
narrow row per memory keyed by ``(user_id, id)``, written with the memory and deleted with
it, so a count is a plain ``UPDATE`` of rows that exist (an upsert probing ``memories`` for
each id cost ~50% more, session 15).

Readers see the memory as before: every statement that reads whole memories selects
:data:`SELECT_LIST` from :data:`JOINED` (the row and its uses), and the working set's counts
are read from ``uses`` alone (:func:`read`). Writers, all inside the caller's transaction:

- :func:`count`: the uses of a call, ``access_count + n`` in SQL on the rows that exist (a
  forgotten memory has none: it is not brought back); increments from any thread or
  process add up;
- :func:`put`: memories written whole (new, imported, replaced) or patched with other uses
  get their row with the counts they carry, as the wide row did;
- :func:`delete`: a deleted memory's row goes with it (an id used again starts from 0).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from engrain.model import Memory
from engrain.store.base import MEMORY_COLUMNS

#: The fields ``uses`` holds (``Memory`` field names, as ``MEMORY_COLUMNS`` lists them).
USE_COLUMNS = ("access_count", "last_accessed_at")
#: The columns of a ``memories`` row since 006 (``MEMORY_COLUMNS`` without the uses).
ROW_COLUMNS = tuple(c for c in MEMORY_COLUMNS if c not in USE_COLUMNS)
_USE_POSITIONS = frozenset(MEMORY_COLUMNS.index(c) for c in USE_COLUMNS)
#: A memory's row with its uses: select :data:`SELECT_LIST` from it.
JOINED = "memories m LEFT JOIN uses u ON u.user_id = m.user_id AND u.id = m.id"
_VALUES = {"access_count": "coalesce(u.access_count, 0)", "last_accessed_at": "u.last_accessed_at"}
#: Every column of ``MEMORY_COLUMNS``, in that order, from :data:`JOINED`.
SELECT_LIST = ", ".join(_VALUES.get(c, f"m.{c}") for c in MEMORY_COLUMNS)

#: A count as one statement run per id: the same text every call, so compiled once per
#: connection (sqlite3's statement cache). ``id IN (…)`` with one ``?`` per id was a new
#: text for nearly every call (a call's number of ids varies), compiled each time, and its
#: list went through an ephemeral index: ~85 ids (a 7,500-token call) cost 0.93 ms for the
#: statement and 0.54 for the commit, against 0.43 and 0.34 ms this way; ~18 ids 0.26 /
#: 0.11 against 0.10 / 0.08 (thread CPU medians, a copy of the 100,000-memory store,
#: `bench/uses_sql.py`; docs/scale.md, session 18).
_COUNT = (
    "UPDATE uses SET access_count = access_count + ?, last_accessed_at = ? "
    "WHERE user_id = ? AND id = ?"
)

Read = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


def migrate(db: sqlite3.Connection) -> None:
    """Migration 006: the uses out of ``memories`` into ``uses`` (a row per memory), then
    the two columns dropped (SQLite rewrites each row once, keeping its rowid). Runs in the
    migration's transaction: all of it or nothing."""
    db.execute(
        """CREATE TABLE uses (
            user_id TEXT NOT NULL,
            id TEXT NOT NULL,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed_at TEXT,
            PRIMARY KEY (user_id, id)
        ) WITHOUT ROWID"""
    )
    db.execute("INSERT INTO uses SELECT user_id, id, access_count, last_accessed_at FROM memories")
    db.execute("ALTER TABLE memories DROP COLUMN access_count")
    db.execute("ALTER TABLE memories DROP COLUMN last_accessed_at")


def stored(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A memory's row in ``MEMORY_COLUMNS`` order as ``memories`` stores it
    (:data:`ROW_COLUMNS`)."""
    return tuple(v for i, v in enumerate(row) if i not in _USE_POSITIONS)


def count(db: sqlite3.Connection, user_id: str, uses: Counter[str], at: str | None) -> None:
    """Add each id's number of ``uses`` to its memory's count and set its last use to
    ``at``, inside the open transaction; ids of no memory of the user match no row. One
    prepared statement run once per id (:data:`_COUNT`)."""
    db.executemany(_COUNT, [(n, at, user_id, memory_id) for memory_id, n in uses.items()])


def put(db: sqlite3.Connection, memories: Iterable[Memory], encode: Callable[[Any], Any]) -> None:
    """Set the uses of these memories (rows just written) to the counts and times they
    carry, inside the open transaction; ``encode`` makes a time's stored text."""
    db.executemany(
        "INSERT OR REPLACE INTO uses VALUES (?, ?, ?, ?)",
        [(m.user_id, m.id, m.access_count, encode(m.last_accessed_at)) for m in memories],
    )


def delete(db: sqlite3.Connection, keys: Iterable[tuple[str, str]]) -> None:
    """Delete the uses of these ``(user_id, id)`` (memories deleted), in the open
    transaction."""
    db.executemany("DELETE FROM uses WHERE user_id = ? AND id = ?", list(keys))


def read(read: Read, user_id: str) -> list[tuple[str, int, str | None]]:
    """``(id, count, last use)`` of each of the user's memories."""
    rows = read("SELECT id, access_count, last_accessed_at FROM uses WHERE user_id = ?",
                (user_id,))  # fmt: skip
    return cast("list[tuple[str, int, str | None]]", rows)
