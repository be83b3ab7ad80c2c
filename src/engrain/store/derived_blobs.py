"""A derived index's bytes in the SQLite store, whatever their size (issue 18, docs/scale.md
"One user of 1,000,000 on SQLite", defect 2).

SQLite refuses a value of more than 1,000,000,000 bytes (``SQLITE_MAX_LENGTH``): a float16
approximate index of more than ~1.09 M vectors, or a columns' image of more than ~1.87 M
memories, could not be saved, and every new process rebuilt it (45 min at a million). Here
the bytes of one derived index (one ``kind`` of one user) are kept in rows of
``derived_indexes``:

- **Up to** :data:`PART_BYTES`: in the row ``(user, kind)`` itself, as before (a store
  written by an earlier version reads the same; an earlier version reads these).
- **Larger**: that row holds a *manifest* (a magic, the number of parts, the total length
  and a random name for this write), and the bytes are cut into parts of
  :data:`PART_BYTES` kept in rows ``(user, "<kind>#<name>:<part number>")``. No schema
  change (the table's key is already ``(user_id, kind)``): no migration, so no saved image
  goes stale with an upgrade.

**Never torn, never mixed.** A write replaces the manifest and every part, and removes
the parts of earlier writes, in the caller's one transaction. A read is one ``SELECT`` (one
snapshot of the file, even outside a transaction) of the manifest and the parts, and is
accepted only if every part of this write's name is there, with the lengths the manifest
gives; anything else (a part missing, a stale part, a damaged manifest) reads as nothing
saved, and the caller rebuilds. The bytes themselves are still framed and checked by their
own format (``ann.dump``, ``columns.dump``, ``lexical_file.dump``), and another user's rows
are never read (the key starts with the user id).
"""

from __future__ import annotations

import os
import sqlite3
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast
from urllib.parse import quote

from engrain.store import sqlite_open

#: Bytes per row: well under SQLite's 1,000,000,000-byte limit, and what a read or a write
#: copies at a time beyond the whole.
PART_BYTES = 256 * 1024 * 1024

_MAGIC = b"ENGRPRT1"
_MANIFEST = struct.Struct("<8sIQ16s")  # magic, parts, total length, this write's name
_NAME_BYTES = 16


def _part_prefix(kind: str) -> tuple[str, str]:
    """The range of ``kind`` values holding the parts of ``kind`` (``kind#…``)."""
    return f"{kind}#", f"{kind}$"  # "$" follows "#": every "kind#…" sorts between


def write(db: sqlite3.Connection, user_id: str, kind: str, data: bytes, updated_at: str) -> None:
    """Save ``data`` as the user's derived index ``kind`` (replacing what was saved), in the
    caller's transaction: in one row if it fits :data:`PART_BYTES`, else as a manifest and
    parts. The parts of any earlier write are removed."""
    low, high = _part_prefix(kind)
    db.execute(
        "DELETE FROM derived_indexes WHERE user_id = ? AND kind > ? AND kind < ?",
        (user_id, low, high),
    )
    size = PART_BYTES
    if len(data) <= size:
        db.execute(
            "INSERT OR REPLACE INTO derived_indexes VALUES (?, ?, ?, ?)",
            (user_id, kind, data, updated_at),
        )
        return
    name = os.urandom(_NAME_BYTES // 2).hex()
    parts = -(-len(data) // size)
    manifest = _MANIFEST.pack(_MAGIC, parts, len(data), name.encode("ascii"))
    db.execute(
        "INSERT OR REPLACE INTO derived_indexes VALUES (?, ?, ?, ?)",
        (user_id, kind, manifest, updated_at),
    )
    view = memoryview(data)
    for number in range(parts):
        db.execute(
            "INSERT INTO derived_indexes VALUES (?, ?, ?, ?)",
            (user_id, f"{low}{name}:{number:08d}", view[number * size : (number + 1) * size],
             updated_at),
        )  # fmt: skip


def read(db: sqlite3.Connection, user_id: str, kind: str) -> bytes | None:
    """The bytes :func:`write` saved as the user's derived index ``kind``, or ``None``
    (none saved, or parts missing or not of the manifest's write). One statement: the
    manifest and its parts are of the same commit."""
    low, high = _part_prefix(kind)
    rows = db.execute(
        "SELECT kind, data FROM derived_indexes WHERE user_id = ? "
        "AND (kind = ? OR (kind > ? AND kind < ?)) ORDER BY kind",
        (user_id, kind, low, high),
    )
    try:  # closed even when not read to its end: an open statement pins its snapshot
        head = rows.fetchone()
        if head is None or head[0] != kind:
            return None
        data = bytes(head[1])
        if len(data) != _MANIFEST.size or not data.startswith(_MAGIC):
            return data  # one row: the bytes themselves
        _, parts, total, name = _MANIFEST.unpack(data)
        return _assembled(rows, f"{low}{name.decode('ascii', 'replace')}:", parts, total)
    finally:
        rows.close()


def read_apart(path: Path, user_id: str, kind: str, *, read_only: bool = False) -> bytes | None:
    """:func:`read` on a connection of its own to the file at ``path``, opened and closed
    here: a store reads a derived index of tens of MB this way without holding its own
    connection (and its lock) for the copy, so a caller's reads are not queued behind it
    (the first ``context()`` of a new process waited for the approximate index's copy, read
    beside it by the index job: ~0.1 s quiet, up to 0.5 s under load). The one statement
    reads one snapshot of the file as :func:`read` does; what it returns is checked by its
    own format as before, so a copy newer than the caller's snapshot is just as safe. Not
    for an in-memory database (another connection would not see it). ``read_only``: the
    store was opened on a read-only mount, and so is this connection."""
    with apart(path, read_only=read_only) as db:
        return read(db, user_id, kind)


@contextmanager
def apart(path: Path, *, read_only: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection of its own to the file at ``path`` (:func:`read_apart`), closed after."""
    uri = sqlite_open.read_only_uri(path) if read_only else f"file:{quote(str(path))}?mode=rw"
    db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0)
    try:
        yield db
    finally:
        db.close()


def read_identified(
    db: sqlite3.Connection, user_id: str, kind: str
) -> tuple[bytes | None, tuple[object, ...] | None]:
    """:func:`read`, and the :func:`identity` of the rows read, in one read transaction
    (``db`` not in one)."""
    db.execute("BEGIN")
    try:
        return read(db, user_id, kind), identity(db, user_id, kind)
    finally:
        db.execute("COMMIT")


def identity(db: sqlite3.Connection, user_id: str, kind: str) -> tuple[object, ...] | None:
    """What tells one write of the user's ``kind`` from another: its head row's time of
    write, length and first bytes (a manifest's: its write's random name); ``None``: none."""
    row = db.execute(
        "SELECT updated_at, length(data), substr(data, 1, 64) FROM derived_indexes "
        "WHERE user_id = ? AND kind = ?",
        (user_id, kind),
    ).fetchone()
    return None if row is None else tuple(row)


def _assembled(rows: sqlite3.Cursor, prefix: str, parts: int, total: int) -> bytes | None:
    """The parts named ``prefix<number>`` of ``rows`` (in order) put together, or ``None``
    unless there are exactly ``parts`` of them, numbered from 0, ``total`` bytes in all."""
    out = bytearray(total)
    at = number = 0
    for part_kind, blob in rows:
        if not part_kind.startswith(prefix):
            continue  # a part of another write (none should be left): not this one's
        if part_kind != f"{prefix}{number:08d}" or at + len(blob) > total:
            return None
        out[at : at + len(blob)] = blob
        at += len(blob)
        number += 1
    if number != parts or at != total:
        return None
    # A bytearray, typed as the bytes it stands for: ``bytes(out)`` would copy up to a
    # gigabyte once more while opening; every reader (struct, memoryview, numpy, BytesIO,
    # slices decoded) reads it as bytes, and nothing writes to it.
    return cast(bytes, out)
