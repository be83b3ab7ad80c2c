"""The SQLite store's per-user working sets kept current: each cached working set with the
user's revision it holds, checked against the file when another connection has committed
(``PRAGMA data_version``), and brought in line with this process's own commits.

Everything here runs under the connection's lock (``sqlite_connection.py``), so caches
change in commit order; a working set itself (``store/cache.py``) is read unlocked.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from engrain.model import Memory
from engrain.store import sqlite_uses
from engrain.store.cache import UserCache
from engrain.store.sqlite_connection import SQLiteConnection
from engrain.store.sqlite_rows import IN_CHUNK

log = logging.getLogger(__name__)

#: Users whose memories stay cached in process (least recently used are dropped first).
CACHED_USERS = 64


class VersionedCaches(SQLiteConnection):
    """The connection, and the working sets cached over it with what each holds."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(path)
        self._caches: OrderedDict[str, UserCache] = OrderedDict()
        self._data_version = -1
        #: The user's revision each cached working set holds (read with it, or left by
        #: this process's own write), and the ``data_version`` it was last known current
        #: at: ``_current`` keeps a working set while its revision holds.
        self._cache_revisions: dict[str, int] = {}
        self._verified: dict[str, int] = {}

    def revision(self, user_id: str) -> int:
        """The user's revision: changes with every write of their memories; 0 if never."""
        rows = self._read("SELECT revision FROM revisions WHERE user_id = ?", (user_id,))
        return int(rows[0][0]) if rows else 0

    def _sync_version(self) -> None:
        """Note the file's ``data_version``: it changes when another connection commits (our
        own commits are applied to the caches directly). A working set is checked against
        it when next used (:meth:`_current`). Called under the lock."""
        # fetchall, not fetchone: a statement left unfinished keeps a read snapshot open on
        # the connection, and the next BEGIN IMMEDIATE then fails at once (BUSY_SNAPSHOT)
        # as soon as another process has committed
        self._data_version = self._read("PRAGMA data_version")[0][0]

    def _current(self, user_id: str) -> UserCache | None:
        """The user's cached working set if it holds what the file holds now, else
        ``None`` (dropped: reloaded by the caller). Called under the lock.

        Checked only when another connection has committed since it was last checked: it
        is kept if the user's revision is still the one it was read or last written at
        (every write of the user's rows bumps it but counted uses, whose counts are then
        read again: the user's rows of the narrow ``uses``, ~0.16 s at 100,000 with their
        mapping to rows, instead of a ~0.7 s reload). Every read here is at or after the
        ``data_version`` it is marked checked at, so a commit landing meanwhile is checked
        next time. Users not used are not checked at all."""
        self._sync_version()
        cache = self._caches.get(user_id)
        if cache is None:
            return None
        version = self._data_version
        if self._verified.get(user_id) == version:
            return cache
        revision = self._revisions_of(self._db, [user_id], read=self._read).get(user_id, 0)
        if revision == self._cache_revisions.get(user_id) and cache.recount(
            sqlite_uses.read(self._read, user_id)
        ):
            self._verified[user_id] = version
            return cache
        del self._caches[user_id]
        return None

    @staticmethod
    def _revisions_of(
        db: sqlite3.Connection,
        users: Sequence[str],
        read: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]] | None = None,
    ) -> dict[str, int]:
        """The revision of each of ``users`` that has one (in the open transaction of
        ``db``, or through ``read``)."""
        out: dict[str, int] = {}
        for start in range(0, len(users), IN_CHUNK):
            part = list(users[start : start + IN_CHUNK])
            sql = (f"SELECT user_id, revision FROM revisions WHERE user_id IN "
                   f"({', '.join('?' for _ in part)})")  # fmt: skip
            rows = read(sql, part) if read is not None else db.execute(sql, part).fetchall()
            out.update((str(u), int(r)) for u, r in rows)
        return out

    def _apply_to_caches(
        self, written: dict[tuple[str, str], Memory], removed: set[tuple[str, str]]
    ) -> None:
        """Bring the cached working sets in line with a write just committed (under the
        lock, so caches change in commit order). The write is committed: a working set that
        cannot be brought in line (memory ran out while copying its arrays) is dropped and
        read again from the rows on next use, never reported as the write's failure (the
        caller would be told a stored write failed: session 26's ``memory_limit.py``)."""
        by_user: dict[str, list[Memory]] = {}
        for (user, memory_id), memory in written.items():
            if (user, memory_id) not in removed:
                by_user.setdefault(user, []).append(memory)
        for user, memories in by_user.items():
            self._in_line(user, upserts=memories)
        gone: dict[str, list[str]] = {}
        for user, memory_id in removed:
            gone.setdefault(user, []).append(memory_id)
        for user, memory_ids in gone.items():
            self._in_line(user, deletes=memory_ids)

    def _in_line(
        self,
        user: str,
        upserts: Sequence[Memory] = (),
        deletes: Sequence[str] = (),
        used: tuple[Sequence[str], datetime] | None = None,
    ) -> None:
        """Apply the rows written (``upserts``), removed (``deletes``) or counted (``used``:
        the ids, once per use, and when) to the user's working set, if one is held, or drop
        it if that fails (after a commit: a context's counted uses too, whose copy of the
        counts' arrays may run out of memory as a write's does)."""
        if user not in self._caches:
            return
        try:
            cache = self._caches[user]
            if upserts:
                cache.upsert(upserts)
            if deletes:
                cache.delete(deletes)
            if used is not None:
                cache.touch(*used)
        except Exception as exc:  # MemoryError above all: the rows hold the truth
            self._caches.pop(user, None)
            log.warning("a working set was dropped after a write (%s: %s): it is read "
                        "again from the store", type(exc).__name__, exc)  # fmt: skip
