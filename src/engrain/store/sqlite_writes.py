"""The SQLite store's writes inside an open ``BEGIN IMMEDIATE`` transaction
(``sqlite_connection.SQLiteConnection._transaction``): key claims checked, patches applied
to the rows as they are, and state documents resolved and written. The transaction holds
the file's write lock from its start, so what these read is what every other process last
committed and nothing is written by another process in between."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from engrain.model import Memory
from engrain.store import sqlite_rows, sqlite_uses
from engrain.store.base import KeyClaim, Patch, State, counted
from engrain.store.sqlite_rows import ROW_COLUMNS, SELECT


def check_claims(db: sqlite3.Connection, claims: Sequence[KeyClaim]) -> None:
    """Check each claim against the rows under its key as the open write transaction sees
    them (index ``memories_user_key``); :class:`KeyChangedError` rolls the write back."""
    for claim in claims:
        column, value = ("id", claim.found) if claim.by_id else ("key", claim.filter.key)
        rows = db.execute(f"{SELECT} WHERE m.user_id = ? AND m.{column} = ?",
                          (claim.user_id, value)).fetchall()  # fmt: skip
        claim.check(m.id for m in map(sqlite_rows.from_row, rows) if claim.filter.matches(m))


def apply_patches(
    db: sqlite3.Connection,
    patches: Sequence[Patch],
    staged: dict[tuple[str, str], Memory],
) -> dict[tuple[str, str], Memory]:
    """Apply ``patches`` inside the open transaction to the rows as they are now (or as
    this write's upserts left them); the rewritten memories by key. Missing rows are
    skipped: nothing is inserted."""
    patched: dict[tuple[str, str], Memory] = {}
    assignments = ", ".join(f"{c} = ?" for c in ROW_COLUMNS[2:])
    for patch in patches:
        current = patched.get(patch.where) or staged.get(patch.where)
        if current is None:
            found = db.execute(f"{SELECT} WHERE m.user_id = ? AND m.id = ?", patch.where).fetchall()
            current = sqlite_rows.from_row(found[0]) if found else None
        if current is None:
            continue
        memory = counted(patch.apply(current))
        row = sqlite_uses.stored(sqlite_rows.to_row(memory))
        if (memory.access_count, memory.last_accessed_at) != (
            current.access_count, current.last_accessed_at
        ):  # fmt: skip
            sqlite_uses.put(db, [memory], sqlite_rows.dt)
        # UPDATE, not INSERT OR REPLACE: the row keeps its rowid, hence its place
        db.execute(
            f"UPDATE memories SET {assignments} WHERE user_id = ? AND id = ?",
            (*row[2:], memory.user_id, memory.id),
        )
        patched[patch.where] = memory
    return patched


def _resolved(db: sqlite3.Connection, change: State) -> tuple[State, str | None]:
    """``change`` resolved against its document as the open transaction reads it."""
    found = db.execute(
        "SELECT value FROM state WHERE user_id = ? AND namespace = ? AND key = ?",
        (change.user_id, change.namespace, change.key),
    ).fetchall()
    doc = change.resolved(json.loads(found[0][0]) if found else None)
    return doc, doc.encoded()


def write_state(
    db: sqlite3.Connection, documents: Sequence[tuple[State, str | None]], now: str | None
) -> None:
    """Write each state document (its encoded value), or delete it where that is ``None``,
    stamped ``now``, inside the open transaction; a ``change`` is resolved first against
    the document as the transaction reads it (it holds the write lock: no other process
    writes in between)."""
    documents = [_resolved(db, s) if s.change else (s, v) for s, v in documents]
    db.executemany(
        "INSERT OR REPLACE INTO state VALUES (?, ?, ?, ?, ?)",
        [(s.user_id, s.namespace, s.key, v, now) for s, v in documents if v is not None],
    )
    db.executemany(
        "DELETE FROM state WHERE user_id = ? AND namespace = ? AND key = ?",
        [(s.user_id, s.namespace, s.key) for s, v in documents if v is None],
    )
