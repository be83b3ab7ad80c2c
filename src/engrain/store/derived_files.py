"""A large derived index's bytes kept in a file beside the SQLite database as well (issue
18, session 28; docs/scale.md "Session 28: the million on SQLite, measured and opened").

A derived index (the approximate indexes, the columns' image, the BM25 copy) is kept in
rows of ``derived_indexes`` (``store/derived_blobs.py``). Reading ~1 GB of them back through
SQLite's overflow pages was most of a million-memory user's cold start (~2.5 ms of CPU a
MB). A copy of those bytes in a plain file is read at the speed of a ``read``. The rows stay
what is kept; the file is only a faster way to get the same bytes:

- **A pointer, written with the bytes.** A write of ``kind`` of :data:`FILE_MIN_BYTES` or
  more also writes, in the same transaction, a pointer row (kind ``<kind>#~file``) holding
  the bytes' CRC-32 and length; the file is named by them (and the user's hash and the
  kind: :func:`file_name`). The pointer's kind sorts among the parts of ``kind`` in
  ``derived_blobs``, so every write of ``kind`` (this version's or an earlier one's, which
  knows nothing of files) deletes it with the old parts: a pointer never outlives the bytes
  it was written for.
- **Read only when whole.** A reader reads the pointer (one small row), opens the file it
  names, and uses the file's bytes only if they are of the pointer's length and CRC-32:
  then they are the bytes the rows held when the pointer was read (as one ``SELECT`` of the
  rows would have returned them). Anything else — no pointer, no file, a file cut short,
  changed, or left by a killed save (a temporary name, never the pointer's) — reads the
  rows as before. What is returned is then checked by its own format as every saved copy
  is (an index against its stamp's CRC, the image against the file's revision, BM25
  against the texts' fingerprint).
- **Written beside, moved into place.** A file is written whole under a temporary name in
  the directory and moved over its name (``os.replace``): a reader sees no file or a whole
  one. It is read into the process (not mapped), so nobody changing it later can change
  what a process reads. Files of the same user and kind that the new pointer does not name
  are removed after the write commits (a process that still opens one finds it gone and
  reads the rows).
- **Made on a read.** A store written before files (or whose file was lost) has rows and no
  pointer: a process that reads such bytes writes the file and then the pointer, in a write
  transaction that first checks that the row is still the one it read (its time of write,
  length and head): a write of the kind since makes it write no pointer.

Where: the directory ``<database>-derived`` beside the file (made readable by its owner
only: the files hold what the rows hold). None for an in-memory database; on a read-only
mount files are read, never written. Failing to read or write a file is logged and costs
a read through SQLite, never a call.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import stat
import struct
import time
import zlib
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from engrain.store.replace_file import replace_file

log = logging.getLogger(__name__)

#: Bytes from which a derived index is kept in a file too: below, SQLite reads it in ~20 ms.
FILE_MIN_BYTES = 8 * 1024 * 1024
#: The pointer's kind is ``<kind>`` + this: it sorts among ``derived_blobs``'s parts of
#: ``kind`` (``<kind>#<hex name>:<number>``; ``~`` after every hex digit), so every write of
#: ``kind`` deletes it.
POINTER_SUFFIX = "#~file"
_MAGIC = b"ENGRFIL1"
_POINTER = struct.Struct("<8sIQ")  # magic, CRC-32, length
#: A temporary file older than this is a writer's that died: removed by the next write.
STALE_SECONDS = 3_600.0
_SUFFIX = ".bin"


@dataclass(frozen=True)
class Pointer:
    """The bytes a pointer row vouches for: their CRC-32 and length."""

    crc: int
    length: int

    def dump(self) -> bytes:
        """The pointer row's value."""
        return _POINTER.pack(_MAGIC, self.crc, self.length)

    @classmethod
    def load(cls, data: bytes | None) -> Pointer | None:
        """The pointer in a row's value (``None``: none, or not one)."""
        if data is None or len(data) != _POINTER.size:
            return None
        magic, crc, length = _POINTER.unpack(data)
        return cls(crc, length) if magic == _MAGIC else None

    @classmethod
    def of(cls, data: bytes) -> Pointer:
        """The pointer to ``data``."""
        return cls(zlib.crc32(data), len(data))


def directory(database: Path) -> Path | None:
    """Where the files of the database at ``database`` are kept (``None``: in memory)."""
    if str(database) == ":memory:":
        return None
    return database.with_name(database.name + "-derived")


def file_name(user_id: str, kind: str, pointer: Pointer) -> str:
    """The file holding the bytes ``pointer`` names, of ``user_id``'s derived index ``kind``."""
    return f"{_stem(user_id, kind)}-{pointer.crc:08x}-{pointer.length}{_SUFFIX}"


def _stem(user_id: str, kind: str) -> str:
    user = hashlib.blake2b(user_id.encode(), digest_size=12).hexdigest()
    return f"{user}-{kind}"


def pointer_kind(kind: str) -> str:
    """The kind of ``kind``'s pointer row."""
    return kind + POINTER_SUFFIX


def read_pointer(db: sqlite3.Connection, user_id: str, kind: str) -> Pointer | None:
    """The pointer saved for the user's ``kind`` (``None``: none)."""
    row = db.execute(
        "SELECT data FROM derived_indexes WHERE user_id = ? AND kind = ?",
        (user_id, pointer_kind(kind)),
    ).fetchone()
    return None if row is None else Pointer.load(bytes(row[0]))


def write_pointer(
    db: sqlite3.Connection, user_id: str, kind: str, pointer: Pointer, updated_at: str
) -> None:
    """Save ``pointer`` for the user's ``kind`` in the caller's transaction (after the bytes
    it names: their write deletes any earlier pointer)."""
    db.execute(
        "INSERT OR REPLACE INTO derived_indexes VALUES (?, ?, ?, ?)",
        (user_id, pointer_kind(kind), pointer.dump(), updated_at),
    )


def read(where: Path, user_id: str, kind: str, pointer: Pointer) -> bytes | None:
    """The bytes ``pointer`` names, from their file in ``where``, if it is a regular file
    holding exactly them (length and CRC-32); ``None`` otherwise (the caller reads the rows)."""
    path = where / file_name(user_id, kind, pointer)
    try:  # never a pipe or a device (opening a pipe would wait for a writer forever)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("derived index file %s unreadable (%s): reading the rows", path.name, exc)
        return None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_size != pointer.length:
            return None
        data = os.read(fd, pointer.length)
        while len(data) < pointer.length:  # a read returns at most ~2 GB
            more = os.read(fd, pointer.length - len(data))
            if not more:
                return None
            data += more
    except OSError as exc:
        log.warning("derived index file %s unreadable (%s): reading the rows", path.name, exc)
        return None
    finally:
        os.close(fd)
    if len(data) != pointer.length or zlib.crc32(data) != pointer.crc:
        return None
    return data


def write(where: Path, user_id: str, kind: str, data: bytes) -> Pointer | None:
    """Keep ``data`` (the user's ``kind``) in its file in ``where``: written whole under a
    temporary name, then moved over its name. The pointer naming it; ``None``: a failure,
    logged, never raised (the rows are what is kept)."""
    pointer = Pointer.of(data)
    target = where / file_name(user_id, kind, pointer)
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        replace_file(target, lambda out: out.write(data))
    except OSError as exc:
        log.warning("derived index file not written (%s): reading the rows instead", exc)
        return None
    return pointer


def sweep(where: Path, user_id: str, kind: str, keep: Pointer | None) -> None:
    """Remove the user's files of ``kind`` other than ``keep``'s, and temporary ones a
    writer that died left (older than :data:`STALE_SECONDS`)."""
    stem = _stem(user_id, kind)
    kept = None if keep is None else file_name(user_id, kind, keep)
    now = time.time()
    with suppress(OSError):
        for path in where.glob(f"{stem}-*"):
            if path.name == kept or not path.name.startswith(stem + "-"):
                continue
            rest = path.name[len(stem) + 1 :]
            if not _is_ours(rest):
                continue  # another kind whose name starts with this one's
            with suppress(OSError):  # another process removed it first
                if rest.endswith(_SUFFIX) or now - path.stat().st_mtime > STALE_SECONDS:
                    path.unlink()


def _is_ours(rest: str) -> bool:
    """Whether a file name's part after ``<user>-<kind>-`` is ``<crc>-<length>.bin`` (or a
    temporary copy of one): ``usearch-learnings``'s files also start with ``usearch-``."""
    head = rest.split(_SUFFIX, 1)[0]
    crc, _, length = head.partition("-")
    return len(crc) == 8 and all(c in "0123456789abcdef" for c in crc) and length.isdigit()
