"""Migration 007 on SQLite: a memory's ``content_tokens`` kept with its row (issue 18).

A ``context()`` counted the line of every memory it considered with cl100k, and on
questions a process had not seen most lines were new to it: ~80 counts, 1.4-1.8 ms of a
slow call (docs/scale.md, session 15). A line is its prefix and the content after a space
(``[SEMANTIC] …``), and a space after a character other than whitespace always starts a
cl100k piece, so the line's count is the prefix's (a handful of distinct strings, counted
once per process) plus ``count_tokens(" " + content)``: the count this column keeps,
written with the content by every write (``store.base.counted``) and filled here for the
rows written before it.
"""

from __future__ import annotations

import sqlite3

from engrain.tokens import spaced_count

#: The SQL function the fill calls (registered on the migrating connection only).
_FUNCTION = "engrain_spaced_count"


def migrate(db: sqlite3.Connection) -> None:
    """Migration 007: the column, filled for every row in one statement inside the
    migration's transaction (all rows or none; an older engrain then refuses the file)."""
    db.create_function(_FUNCTION, 1, spaced_count, deterministic=True)
    try:
        db.execute("ALTER TABLE memories ADD COLUMN content_tokens INTEGER")
        db.execute(f"UPDATE memories SET content_tokens = {_FUNCTION}(content)")
    finally:
        db.create_function(_FUNCTION, 1, None)
