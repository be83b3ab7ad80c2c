"""The PostgreSQL store's reads by id and listings (:meth:`Listings.query`), served from
this process's decoded rows and kept listings wherever the database says they still hold
(the package docstring, "Reads"): each row with its row version, each listing with the
user's revision and access clock, checked in the same call by one statement."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from engrain.model import Memory, as_utc
from engrain.store.base import ALL, MemoryFilter
from engrain.store.postgres.codec import from_row
from engrain.store.postgres.pooled import Pooled
from engrain.store.postgres.sql import CHANGES, FETCH, chunks, listing_sql

#: Past any access clock: :meth:`Listings._changes` lists no access rows.
_NO_CLOCK = 2**63 - 1


@dataclass(frozen=True)
class Listing:
    """A result of :meth:`Listings.query` as of the user's ``revision`` and access
    ``clock``."""

    revision: int
    clock: int
    memories: tuple[Memory, ...]

    def counted(self, clock: int, counts: Sequence[tuple[str, int, datetime | None]]) -> Listing:
        """This listing at access clock ``clock``, given the access rows stamped since
        (id, count, last access): the memories among them get their new counts."""
        if clock == self.clock:
            return self
        changed = {memory_id: (n, at) for memory_id, n, at in counts}
        memories = tuple(
            m
            if (hit := changed.get(m.id)) is None
            else replace(
                m, access_count=hit[0], last_accessed_at=None if hit[1] is None else as_utc(hit[1])
            )
            for m in self.memories
        )
        return Listing(self.revision, clock, memories)


class Listings(Pooled):
    """Reads by id and listings, with the rows and listings this process keeps
    (``cached_rows`` decoded rows at most)."""

    cached_rows: int
    _rows: OrderedDict[tuple[str, str], tuple[str, Memory]]
    _listings: OrderedDict[tuple[str, MemoryFilter, int | None, int], Listing]

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        """The user's memories with these ids, in the order given; unknown ids skipped."""
        if not ids:
            return []
        found = {m.id: m for _, m in self._fetch(user_id, list(dict.fromkeys(ids)))}
        return [found[i] for i in ids if i in found]

    def _fetch(self, user_id: str, ids: Sequence[str]) -> list[tuple[str, Memory]]:
        """The user's memories with these (distinct) ids, each with its row version."""
        fetched: list[tuple[str, Memory]] = []
        for part in chunks(ids):
            for row in self._read(FETCH, (user_id, part)):
                fetched.append((row[-1], from_row(row)))
        return fetched

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        """The user's memories passing ``flt``, most recently updated first (ties: the
        larger id first, so pages are stable). A listing read before is served again while
        the user's revision is unchanged, with the access counts made since (module
        docstring)."""
        key = (user_id, flt, limit, offset)
        with self._lock:
            cached = self._listings.get(key)
        if cached is not None:
            revision, clock, counts = self._changes(user_id, cached.clock)
            if revision == cached.revision:
                fresh = cached.counted(clock, counts)
                with self._lock:
                    self._listings[key] = fresh
                    self._listings.move_to_end(key)
                return list(fresh.memories)
        else:
            revision, clock, _ = self._changes(user_id, None)
        listing = self._read(*listing_sql(user_id, flt, limit, offset))
        memories = self._decoded(user_id, listing)
        if len(memories) <= self.cached_rows // 4:
            with self._lock:
                self._listings[key] = Listing(revision, clock, tuple(memories))
                self._listings.move_to_end(key)
                while sum(len(e.memories) for e in self._listings.values()) > self.cached_rows:
                    self._listings.popitem(last=False)
        return memories

    def _changes(
        self, user_id: str, since: int | None
    ) -> tuple[int, int, list[tuple[str, int, datetime | None]]]:
        """The user's revision and access clock, and (``since`` a clock) the access counts
        stamped after it, all from one snapshot."""
        after = _NO_CLOCK if since is None else since
        rows = self._read(CHANGES, (user_id, user_id, user_id, after))
        revision, clock = int(rows[0][0] or 0), int(rows[0][1] or 0)
        counts = [(r[2], int(r[3]), r[4]) for r in rows if r[2] is not None]
        return revision, clock, counts

    def _decoded(self, user_id: str, listing: Sequence[tuple[str, str]]) -> list[Memory]:
        """The memories of ``listing`` (id, row version), from the row cache where the
        version still matches, else read and cached."""
        found: dict[str, Memory] = {}
        with self._lock:
            for memory_id, version in listing:
                hit = self._rows.get((user_id, memory_id))
                if hit is not None and hit[0] == version:
                    found[memory_id] = hit[1]
                    self._rows.move_to_end((user_id, memory_id))
        missing = [memory_id for memory_id, _ in listing if memory_id not in found]
        fetched = self._fetch(user_id, missing)
        found.update((memory.id, memory) for _, memory in fetched)
        if fetched and self.cached_rows > 0:
            with self._lock:
                for version, memory in fetched:
                    self._rows[(user_id, memory.id)] = (version, memory)
                    self._rows.move_to_end((user_id, memory.id))
                while len(self._rows) > self.cached_rows:
                    self._rows.popitem(last=False)
        # a row deleted between the two reads is left out
        return [found[memory_id] for memory_id, _ in listing if memory_id in found]
