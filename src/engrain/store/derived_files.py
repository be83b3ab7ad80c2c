"""A large derived index's bytes kept in a file beside the SQLite database as well (issue
18, session 28; docs/scale.md "Session 28: the million on SQLite, measured and opened").

A derived index (the approximate indexes, the columns' image, the BM25 copy) is kept in
rows of ``derived_indexes`` (``store/derived_blobs.py``). Reading ~1 GB of them back through
SQLite's overflow pages was most of a million-memory user's cold start (~2.5 ms of CPU a
MB). A copy of those bytes in a plain file is read at the speed of a ``read``. The rows stay
what is kept; the file is only a faster way to get the same bytes:

- **A pointer, written with the bytes.** A write of ``kind`` of :data:`FILE_MIN_BYTES` or
  more also writes, in the same transaction, a pointer row (kind ``<kind>#~file``) holding
  the bytes' CRC-32, length and a random token of this write; the file is named by them
  (and the user's hash and the kind: :func:`file_name`). The pointer's kind sorts among
  the parts of ``kind`` in ``derived_blobs``, so every write of ``kind`` (this version's or
  an earlier one's, which knows nothing of files) deletes it with the old parts: a pointer
  never outlives the bytes it was written for.
- **Read only when whole, and only this database's.** A reader reads the pointer (one
  small row), opens the file it names, and uses the file's bytes only if they are of the
  pointer's length and CRC-32: then they are the bytes the rows held when the pointer was
  read (as one ``SELECT`` of the rows would have returned them). The token in the name
  means a file another database wrote (a stale directory left beside another database of
  the same name), even of the same CRC-32 and length, is never opened. Anything else — no
  pointer, an earlier version's pointer (no token), no file, a file cut short or changed —
  reads the rows as before. What is returned is then checked by its own format as every
  saved copy is (an index against its stamp's CRC, the image against the file's revision,
  BM25 against the texts' fingerprint).
- **Written in the pointer's transaction, moved into place.** A file is written whole
  under a temporary name in the directory and moved over its name (``os.replace``) inside
  the write transaction that writes its pointer (the file's write lock held): a reader sees
  no file or a whole one, and no file whose pointer is yet to commit is ever in the
  directory while another writer holds the lock. It is read into the process (not mapped),
  so nobody changing it later can change what a process reads.
- **Swept.** Every save of a file, and every store opened on a directory that exists,
  removes in its write transaction the files no pointer names (:func:`sweep`): the kind's
  earlier copies, a killed save's, a deleted user's left by a process that died.
- **Removed with the user.** A write that deletes a user's last memory deletes the user's
  rows of ``derived_indexes`` in its transaction and the user's files after it commits
  (:func:`remove_user`); a save begun before that writes nothing for a user with no memory.
- **Made on a read.** A store written before files (or whose file was lost) has rows and no
  pointer: a process that reads such bytes writes the file and the pointer in a write
  transaction that first checks that the row is still the one it read (its time of write,
  length and head): a write of the kind since makes it write neither.

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
_MAGIC = b"ENGRFIL2"
_POINTER = struct.Struct("<8sIQ16s")  # magic, CRC-32, length, the write's random token
_TOKEN_BYTES = 16
#: A temporary file older than this is a writer's that died: removed by the next write.
STALE_SECONDS = 3_600.0
_SUFFIX = ".bin"


@dataclass(frozen=True)
class Pointer:
    """The bytes a pointer row vouches for: their CRC-32 and length, and the random token
    of the write that made their file (in its name: a file of another database, or of
    another write of the same bytes, never has it)."""

    crc: int
    length: int
    token: bytes

    def dump(self) -> bytes:
        """The pointer row's value."""
        return _POINTER.pack(_MAGIC, self.crc, self.length, self.token)

    @classmethod
    def load(cls, data: bytes | None) -> Pointer | None:
        """The pointer in a row's value (``None``: none, or not one; an earlier version's,
        without a token, is none: its bytes are read from the rows and get a file again)."""
        if data is None or len(data) != _POINTER.size:
            return None
        magic, crc, length, token = _POINTER.unpack(data)
        return cls(crc, length, token) if magic == _MAGIC else None

    @classmethod
    def of(cls, data: bytes) -> Pointer:
        """A pointer to ``data``, for a new file of them (a new token)."""
        return cls(zlib.crc32(data), len(data), os.urandom(_TOKEN_BYTES))


def directory(database: Path) -> Path | None:
    """Where the files of the database at ``database`` are kept (``None``: in memory)."""
    if str(database) == ":memory:":
        return None
    return database.with_name(database.name + "-derived")


def file_name(user_id: str, kind: str, pointer: Pointer) -> str:
    """The file holding the bytes ``pointer`` names, of ``user_id``'s derived index ``kind``."""
    head = f"{_stem(user_id, kind)}-{pointer.crc:08x}-{pointer.length}"
    return f"{head}-{pointer.token.hex()}{_SUFFIX}"


def _stem(user_id: str, kind: str) -> str:
    return f"{_user(user_id)}-{kind}"


def _user(user_id: str) -> str:
    """The part of a file's name that tells whose it is: a hash of the user id."""
    return hashlib.blake2b(user_id.encode(), digest_size=12).hexdigest()


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


def sweep(db: sqlite3.Connection, where: Path) -> None:
    """Remove every file in ``where`` that no pointer row names: the user's earlier files of
    a kind just written again, a deleted user's files (:func:`remove_user`) left by a
    process that died before removing them, an earlier version's files; and temporary
    ones a writer that died left (older than :data:`STALE_SECONDS`: an earlier version
    wrote its files outside the write lock). Run in the caller's write transaction (the
    file's write lock held): every file this version writes is written in the transaction
    that writes its pointer, so none named by a pointer yet to commit can be here."""
    named = {
        file_name(user_id, kind.removesuffix(POINTER_SUFFIX), pointer)
        for user_id, kind, data in db.execute(
            "SELECT user_id, kind, data FROM derived_indexes WHERE kind GLOB ?",
            ("*" + POINTER_SUFFIX,),
        )
        if (pointer := Pointer.load(bytes(data))) is not None
    }
    now = time.time()
    with suppress(OSError):  # no directory: nothing to sweep
        for path in where.iterdir():
            if path.name in named or not _is_ours(path.name):
                continue
            with suppress(OSError):  # another process removed it first
                if path.name.endswith(_SUFFIX) or now - path.stat().st_mtime > STALE_SECONDS:
                    path.unlink()


def remove_user(where: Path, user_id: str) -> None:
    """Remove every file of the user in ``where`` (every kind, temporary ones too): after
    the transaction that deleted the user's last memory and derived rows commits."""
    user = _user(user_id)
    with suppress(OSError):
        for path in where.glob(f"{user}-*"):
            if _is_ours(path.name):
                with suppress(OSError):  # another process removed it first
                    path.unlink()


def _is_ours(name: str) -> bool:
    """Whether ``name`` is one of a derived index's files (:func:`file_name`, or an earlier
    version's without a token), or a temporary copy of one: ``<user hash>-<kind>-<crc>-
    <length>[-<token>].bin``, then ``<random>.tmp`` for a temporary one. Nothing else in the
    directory is touched."""
    head, found, tail = name.partition(_SUFFIX)
    if not found or (tail and not tail.endswith(".tmp")):
        return False
    user, _, rest = head.partition("-")
    if len(user) != 24 or not _hex(user):
        return False
    parts = rest.split("-")
    if len(parts) >= 4 and len(parts[-1]) == 2 * _TOKEN_BYTES and _hex(parts[-1]):
        parts = parts[:-1]  # the token (an earlier version's names have none)
    return len(parts) >= 3 and len(parts[-2]) == 8 and _hex(parts[-2]) and parts[-1].isdigit()


def _hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)
