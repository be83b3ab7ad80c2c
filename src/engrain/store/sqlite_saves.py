"""The SQLite store's derived indexes saved for the next process: where each is kept (rows
of ``derived_indexes``), the threads that save them, the saved image of a working set's
columns refreshed after its rows were patched, and the stamps that let a large user's
saved indexes be adopted without reading the vectors (``store/ann_stamp.py``).

A save runs on its own thread (:meth:`DerivedSaves._later`), which
:meth:`~engrain.store.sqlite.SQLiteStore.close` waits for. It encodes outside the store's
lock and writes in one non-durable ``BEGIN IMMEDIATE`` transaction that first checks,
under the file's write lock, that what it saves is still what the rows hold (the
``data_version`` or the user's revision it read): a save that lost a race writes nothing.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from engrain.errors import EngrainError, StoreError
from engrain.store import (
    ann_kinds,
    columns,
    derived_blobs,
    derived_files,
    heap,
    image_refresh,
    sqlite_rows,
    sqlite_stamps,
)
from engrain.store.ann import IndexSlot, Stash
from engrain.store.columns import Stamp
from engrain.store.sqlite_connection import reason
from engrain.store.sqlite_versions import CACHED_USERS, VersionedCaches
from engrain.threads import started

#: A working set whose rows were patched saves its image again at most this often (and
#: when the store closes): at 100,000 memories a save costs ~0.5 s of CPU off the caller.
IMAGE_REFRESH_SECONDS = 60.0
#: The share of a process's time one user's image refreshes may take: the next refresh
#: waits at least the last one's duration divided by this (a 1 s refresh at 100,000
#: memories: every 60 s; a 10 s one at 1,000,000: every 500 s), so a large user's
#: background re-encoding cannot hold the interpreter for a tenth of every minute.
IMAGE_REFRESH_SHARE = 0.02


class DerivedSaves(VersionedCaches):
    """The cached working sets, and what this process saves of them: approximate indexes
    (``ann_min``: from this many vectors, ``None``: never; built on a background thread
    with ``ann_background``), BM25 indexes, column images and index stamps."""

    def __init__(self, path: Path | str, ann_min: int | None, ann_background: bool) -> None:
        super().__init__(path)
        self._ann_min = ann_min
        self._ann_background = ann_background
        self._slots: OrderedDict[str, IndexSlot] = OrderedDict()
        self._saves: list[threading.Thread] = []
        #: Guards :attr:`_saves` (and the close's flag as :meth:`_later` reads it) apart from
        #: the store's lock: a pool thread reading a derived index while the loading thread
        #: holds that lock and waits for it starts a save (its file) without it.
        self._saves_lock = threading.Lock()
        #: Users whose working set has rows patched since it was loaded (its image is
        #: stale), users with rows inserted, replaced or deleted since (the image cannot be
        #: saved from the working set), and when each image was last refreshed.
        self._stale_images: set[str] = set()
        self._reshaped: set[str] = set()
        self._refreshed: dict[str, float] = {}
        self._refresh_cost: dict[str, float] = {}  # seconds the user's last refresh took

    def _stash_bytes(self, user_id: str, kind: str) -> bytes | None:
        """The bytes saved as the user's derived index ``kind`` (``None``: none)."""
        return self._stash(user_id, kind).read()

    def _stamp_indexes(self, user_id: str) -> None:
        """Stamp the user's saved indexes with the revision the file holds, if this
        process's working set is current at it and its record says an index holds every
        row it should, unchanged since saved or loaded (``store/ann_stamp.py``): checked
        again in the transaction that writes the stamps. Runs on a saving thread."""
        with self._lock:
            # not brought up to date (a recount at a million rows takes seconds): a working
            # set behind the file's revision is not stamped, checked below
            cache = self._caches.get(user_id)
            slot = self._slots.get(user_id)
            revision = self._cache_revisions.get(user_id)
            if cache is None or slot is None or revision is None or user_id in self._reshaped:
                return
            snapshot, held = cache.held_indexes()
            if not held:
                return
            names = tuple(r[0] for r in self._read("SELECT name FROM migrations ORDER BY name"))
            stamps = sqlite_stamps.made(snapshot, held, slot, Stamp(revision, names))
            if not stamps:
                return
            with self._transaction(durable=False) as db:
                now = self._revisions_of(db, [user_id]).get(user_id, 0)
                if now != revision or any(index.saved is None for _, index in held):
                    return  # written since, or patched: the stamps would vouch wrongly
                sqlite_stamps.write(db, user_id, stamps, datetime.now(UTC).isoformat())

    def _note_image_writes(self, reshaped: set[str], patched: set[str]) -> None:
        """Record a committed write's effect on the users' saved images (under the lock):
        rows inserted, replaced or deleted (``reshaped``: they get new rowids, so the image
        is saved again only by the next process that reads the rows), or rows patched in
        place (the image is saved from the working set, on another thread, at most every
        :meth:`_refresh_interval` seconds and when the store closes)."""
        self._reshaped |= reshaped
        now = time.monotonic()
        for user_id in patched - self._reshaped:
            cache = self._caches.get(user_id)
            if cache is None or len(cache) < columns.PERSIST_MIN_ROWS:
                continue
            self._stale_images.add(user_id)
            if now - self._refreshed.get(user_id, now) >= self._refresh_interval(user_id):
                self._refreshed[user_id] = now
                self._later(partial(self._refresh_image, user_id), "engrain-columns")

    def _refresh_interval(self, user_id: str) -> float:
        """Seconds between two refreshes of the user's image: :data:`IMAGE_REFRESH_SECONDS`,
        or longer when the last one took more than :data:`IMAGE_REFRESH_SHARE` of that."""
        cost = self._refresh_cost.get(user_id, 0.0)
        return max(IMAGE_REFRESH_SECONDS, cost / IMAGE_REFRESH_SHARE)

    def _refresh_image(self, user_id: str) -> None:
        """Save the user's image from this process's working set if that holds what the
        rows hold: only rows of the loaded image patched since (the rowids are the
        image's), and no other process has committed since the working set was current
        (``PRAGMA data_version``, checked again in the transaction that writes it); the
        image is stamped with the revision read at that point. Otherwise nothing is saved:
        the next process reads the rows, as before. Runs on a saving thread."""
        with self._lock:
            cache = self._current(user_id)  # another process's write drops it
            if cache is None or user_id in self._reshaped or user_id not in self._stale_images:
                return
            arrays = cache.snapshot.arrays
            seen = self._data_version
            stamp = Stamp(self.revision(user_id),
                          tuple(r[0] for r in self._read("SELECT name FROM migrations "
                                                         "ORDER BY name")))  # fmt: skip
        if arrays is None:
            return
        started = time.monotonic()
        table = image_refresh.patched_columns(arrays.rows, arrays.ids, sqlite_rows.to_row)
        if table is None:
            return
        data = columns.dump(table, stamp)
        with self._lock:
            self._refresh_cost[user_id] = time.monotonic() - started
        with self._transaction(durable=False) as db:
            now = db.execute("PRAGMA data_version").fetchall()[0][0]
            current = self._caches.get(user_id)
            rows = None if current is None or current.snapshot.arrays is None \
                else current.snapshot.arrays.rows  # fmt: skip
            if now != seen or current is not cache or rows is None \
                    or not image_refresh.same_rows(arrays.rows, rows):  # fmt: skip
                return  # written since: this image would be stale or wrong
            derived_blobs.write(db, user_id, "columns", data, datetime.now(UTC).isoformat())
            self._stale_images.discard(user_id)

    def _slot(self, user_id: str) -> IndexSlot | None:
        """The user's approximate index in this process (kept when the working set is
        dropped after another process's commit: it is checked against the new one)."""
        if self._ann_min is None:
            return None
        slot = self._slots.get(user_id)
        if slot is None:
            part = IndexSlot(
                self._stash(user_id, ann_kinds.STASH_KIND), self._ann_min, self._ann_background
            )  # the learnings' (store/ann_kinds.py)
            slot = IndexSlot(self._stash(user_id, "usearch"), self._ann_min, self._ann_background,
                             part)  # fmt: skip
            self._slots[user_id] = slot
            while len(self._slots) > CACHED_USERS:
                self._slots.popitem(last=False)[1].close()
        else:
            self._slots.move_to_end(user_id)
        return slot

    def _stash(self, user_id: str, kind: str) -> Stash:
        """Where the user's derived index ``kind`` is kept: a row of ``derived_indexes``, or
        several for one of more than ``derived_blobs.PART_BYTES`` (SQLite refuses a value of
        more than 1,000,000,000 bytes); a large one in a file beside the database too
        (``store/derived_files.py``), read from there when whole."""

        def read() -> bytes | None:
            try:
                if str(self.path) != ":memory:":  # without the store's lock (the copy: ~50 MB)
                    return self._read_apart(user_id, kind)
                with self._lock:
                    return derived_blobs.read(self._db, user_id, kind)
            except sqlite3.Error as exc:
                raise StoreError(f"read from {self.path} failed: {reason(exc)}") from exc

        def write(data: bytes) -> None:
            where = self._files()
            kept = None
            if where is not None and len(data) >= derived_files.FILE_MIN_BYTES:
                kept = derived_files.write(where, user_id, kind, data)
            at = datetime.now(UTC).isoformat()
            with self._transaction(durable=False) as db:
                derived_blobs.write(db, user_id, kind, data, at)
                if kept is not None:
                    derived_files.write_pointer(db, user_id, kind, kept, at)
            if where is not None and kept is not None:
                derived_files.sweep(where, user_id, kind, kept)

        # the thread is named after the index ("engrain-bm25"): tests wait for it by name
        return Stash(read, write, lambda job: self._later(job, f"engrain-{kind}"))

    def _files(self) -> Path | None:
        """Where this store writes its derived indexes' files (``None``: nowhere, in memory
        or on a read-only mount)."""
        return None if self.read_only else derived_files.directory(self.path)

    def _read_apart(self, user_id: str, kind: str) -> bytes | None:
        """The user's derived index ``kind`` read on a connection of its own
        (``derived_blobs.read_apart``): from its file if the pointer read names one that is
        whole, else from the rows; bytes read from the rows that should have a file get one
        on another thread (``store/derived_files.py``)."""
        where = derived_files.directory(self.path)
        with derived_blobs.apart(self.path, read_only=self.read_only) as db:
            pointer = derived_files.read_pointer(db, user_id, kind)
            if pointer is not None and where is not None:
                data = derived_files.read(where, user_id, kind, pointer)
                if data is not None:
                    return data
            data, identity = derived_blobs.read_identified(db, user_id, kind)
        if data is not None and identity is not None and self._files() is not None \
                and len(data) >= derived_files.FILE_MIN_BYTES:  # fmt: skip
            self._later(partial(self._file_of, user_id, kind, data, identity),
                        f"engrain-{kind}-file")  # fmt: skip
        return data

    def _file_of(self, user_id: str, kind: str, data: bytes, identity: tuple[object, ...]) -> None:
        """Write the file of the user's ``kind`` (``data``, read from the rows whose head row
        was ``identity``), and its pointer if the rows are still those. Runs on a saving
        thread."""
        where = self._files()
        kept = None if where is None else derived_files.write(where, user_id, kind, data)
        if where is None or kept is None:
            return
        with self._transaction(durable=False) as db:
            if derived_blobs.identity(db, user_id, kind) != identity:
                return  # written since: the file is not of the rows (the next write sweeps it)
            derived_files.write_pointer(db, user_id, kind, kept, datetime.now(UTC).isoformat())
        derived_files.sweep(where, user_id, kind, kept)

    def _later(self, job: Callable[[], None], name: str) -> None:
        """Run ``job`` (saving a derived index) on its own thread; :meth:`close` waits for
        it, so a store closed right after a load still leaves the index for the next
        process. A job whose write fails (the store closed meanwhile) saves nothing: the
        next process builds it again."""

        def run() -> None:
            with suppress(EngrainError):
                job()
            heap.release()  # the saved copy's bytes (tens of MB for a large user)

        thread = threading.Thread(target=run, name=name, daemon=False)
        with self._saves_lock:
            if self._closed:
                return
            self._saves = [t for t in self._saves if t.is_alive()] + [thread]
        started(thread)  # not started: not saved (the next process builds it)
