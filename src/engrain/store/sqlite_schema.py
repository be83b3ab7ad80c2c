"""The SQLite store's schema: its named, ordered migrations (``store/sqlite.py`` applies
them, each in its own ``BEGIN IMMEDIATE`` transaction: ``sqlite_connection.py``).

001 to 005 are here; 006 (the narrow ``uses`` table) is ``sqlite_uses.migrate`` and 007
(the token counts) ``sqlite_tokens.migrate``. Append only; never edit one that has shipped:
001 and 002 write their ``memories`` table from one column list, each to the letter of the
statement it shipped with (SQLite keeps that text in ``sqlite_master``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from engrain.store import sqlite_tokens, sqlite_uses
from engrain.store.base import MEMORY_COLUMNS

#: The columns of 001's ``memories`` after ``id``, as 001 and 002 create them.
_FIELDS_001 = """
            user_id TEXT NOT NULL,
            project TEXT,
            content TEXT NOT NULL,
            memory_type TEXT NOT NULL,
            kind TEXT NOT NULL,
            domains TEXT NOT NULL DEFAULT '[]',
            session_id TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            event_at TEXT,
            key TEXT,
            importance REAL NOT NULL,
            confidence REAL NOT NULL,
            usefulness REAL NOT NULL,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed_at TEXT,
            pinned INTEGER NOT NULL DEFAULT 0,
            muted INTEGER NOT NULL DEFAULT 0,
            promoted_at TEXT,
            compressed INTEGER NOT NULL DEFAULT 0,
            compression_source INTEGER NOT NULL DEFAULT 0,
            source_session_id TEXT,
            provenance TEXT NOT NULL DEFAULT '{}',
            content_hash TEXT NOT NULL,
            embedding BLOB"""


def _create_memories(db: sqlite3.Connection, name: str, *, keyed_by_user: bool) -> None:
    """Create 001's ``memories`` table as ``name``: keyed by ``id`` alone (001), or by
    ``(user_id, id)`` (002)."""
    if keyed_by_user:
        table = (f"CREATE TABLE {name} (\n            id TEXT NOT NULL,{_FIELDS_001},\n"
                 "            PRIMARY KEY (user_id, id)\n        )")  # fmt: skip
    else:
        table = f"CREATE TABLE {name} (\n            id TEXT PRIMARY KEY,{_FIELDS_001}\n        )"
    db.execute(table)


def _index_memories(db: sqlite3.Connection) -> None:
    """The indexes of 001's ``memories``, by user (002 creates them again)."""
    db.execute("CREATE INDEX memories_user_updated ON memories (user_id, updated_at)")
    db.execute("CREATE INDEX memories_user_key ON memories (user_id, key)")
    db.execute("CREATE INDEX memories_user_session ON memories (user_id, session_id)")


def _m001_initial(db: sqlite3.Connection) -> None:
    _create_memories(db, "memories", keyed_by_user=False)
    _index_memories(db)
    db.execute(
        """CREATE TABLE embedding_cache (
            model_id TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (model_id, content_hash)
        )"""
    )


def _m002_user_scoped_ids(db: sqlite3.Connection) -> None:
    # 001 keyed rows by id alone, so one user's upsert of an id replaced another user's
    # memory. Ids are per user, as in the protocol (and MemoryStore); SQLite cannot change
    # a primary key in place, so the table is rebuilt with rows kept in rowid order.
    _create_memories(db, "memories_002", keyed_by_user=True)
    columns = ", ".join(MEMORY_COLUMNS[:26])  # the columns of 001
    db.execute(
        f"INSERT INTO memories_002 ({columns}) SELECT {columns} FROM memories ORDER BY rowid"
    )
    db.execute("DROP TABLE memories")
    db.execute("ALTER TABLE memories_002 RENAME TO memories")
    _index_memories(db)


def _m003_corrections_and_state(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE memories ADD COLUMN superseded_by TEXT")
    db.execute(
        """CREATE TABLE state (
            user_id TEXT NOT NULL,
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (user_id, namespace, key)
        )"""
    )
    db.execute("CREATE TABLE revisions (user_id TEXT PRIMARY KEY, revision INTEGER NOT NULL)")


def _m004_api_keys(db: sqlite3.Connection) -> None:
    # Store-wide, not per user: one key may act for several users. The digest is unique
    # and indexed: a request's key is found by the hash of the secret it presents.
    db.execute(
        """CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            digest TEXT NOT NULL UNIQUE,
            name TEXT,
            users TEXT NOT NULL DEFAULT '[]',
            projects TEXT NOT NULL DEFAULT '[]',
            admin INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            revoked_at TEXT
        )"""
    )


def _m005_derived_indexes(db: sqlite3.Connection) -> None:
    # Indexes derived from a user's rows, kept between processes (a large user's
    # approximate vector index and BM25 index, store/ann.py and store/lexical_file.py):
    # written in one transaction, so never torn; checked against the rows when read.
    db.execute(
        """CREATE TABLE derived_indexes (
            user_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            data BLOB NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (user_id, kind)
        )"""
    )


#: Named, ordered migrations. Append only; never edit one that has shipped.
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("001_initial", _m001_initial),
    ("002_user_scoped_ids", _m002_user_scoped_ids),
    ("003_corrections_and_state", _m003_corrections_and_state),
    ("004_api_keys", _m004_api_keys),
    ("005_derived_indexes", _m005_derived_indexes),
    ("006_uses", sqlite_uses.migrate),
    ("007_content_tokens", sqlite_tokens.migrate),
]
