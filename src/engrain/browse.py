"""The browse stage: a page of one user's memories for people to look through (the web
inspector's table), with filters, a text search, a sort and a keyset cursor.

**An index per revision.** The user's memories are read once per store revision (any
add, edit or delete changes it) into column arrays (:class:`_Index`: time, importance,
project, type, kind, the flags, conflicting or not, domains on demand); every filter and
order of a page is then a numpy operation, a few milliseconds at 100,000 memories. After a
change only the memories that changed are read again (the working-set stores hand out the
same objects for the others). A
search is the store's own BM25 (:meth:`Store.lexical_search`): only memories sharing a
word with the text are found, best first. Counted uses change no revision, so the
``used`` order keeps its own columns and checks them on every page: a working-set store's
mapping (:meth:`~engrain.store.sqlite.SQLiteStore.working_set`) is a new one after any
counted use, here or in another process, and then only the rows touched are read again.
The memories of a page are read as stored now.

**Keyset, not offset.** A cursor is the sort key of the last memory shown (its time,
count, importance or score, then its id: every key is unique), so the next page starts
right after that memory whatever was added or forgotten meanwhile: nothing is shown twice
or skipped because rows moved.
"""

from __future__ import annotations

import base64
import json
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from itertools import repeat
from operator import attrgetter, is_not, methodcaller, ne
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain import validate
from engrain.corrections import CONFLICTS_WITH, CORRECTS, conflicts_of
from engrain.errors import ValidationError
from engrain.model import Kind, Memory, MemoryType
from engrain.store import MemoryFilter, Store

#: The largest page.
MAX_LIMIT = 200
DEFAULT_LIMIT = 50

_NEVER = float("-inf")  # the sort value of "never used": below every real time


class Sort(StrEnum):
    """The orders a page can be in, each descending."""

    #: most recently written first (the default without a search)
    UPDATED = "updated"
    #: most injected first, then most recently used
    USED = "used"
    #: most important first, then most recently written
    IMPORTANCE = "importance"
    #: best BM25 match first (the default with a search)
    RELEVANCE = "relevance"


@dataclass(frozen=True)
class Browse:
    """What one page shows. ``None`` means "any" for every filter; ``muted``,
    ``superseded``, ``conflicting`` and ``pinned`` are ``True`` (only those) or ``False``
    (none of those). ``projects`` limits the page to these projects (a project-limited
    key's), on top of ``project``."""

    text: str | None = None
    memory_types: tuple[MemoryType, ...] | None = None
    kinds: tuple[Kind, ...] | None = None
    domain: str | None = None
    project: str | None = None
    pinned: bool | None = None
    muted: bool | None = None
    superseded: bool | None = None
    conflicting: bool | None = None
    sort: Sort | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None
    projects: tuple[str, ...] | None = None

    @classmethod
    def checked(
        cls,
        *,
        text: object = None,
        memory_types: object = None,
        kinds: object = None,
        domain: object = None,
        project: object = None,
        pinned: object = None,
        muted: object = None,
        superseded: object = None,
        conflicting: object = None,
        sort: object = None,
        limit: object = None,
        cursor: object = None,
        projects: object = None,
        max_chars: int | None = None,
    ) -> Browse:
        """The page these arguments ask for, every one validated (:class:`ValidationError`
        naming the field). An empty or blank ``text`` is no search."""
        if text is not None and not (isinstance(text, str) and not text.strip()):
            text = validate.text(text, "text", max_chars=max_chars)
        else:
            text = None
        types = validate.memory_types(memory_types)
        kind_list = None if kinds is None else _kinds(kinds)
        tags = validate.domains(domain, "domain")
        if len(tags) > 1:
            raise ValidationError("domain: name one domain")
        allowed = None if projects is None else tuple(validate.identifiers(projects, "projects"))
        return cls(
            text=text,
            memory_types=tuple(types) if types else None,
            kinds=tuple(kind_list) if kind_list else None,
            domain=tags[0] if tags else None,
            project=validate.optional_identifier(project, "project"),
            pinned=_optional_flag(pinned, "pinned"),
            muted=_optional_flag(muted, "muted"),
            superseded=_optional_flag(superseded, "superseded"),
            conflicting=_optional_flag(conflicting, "conflicting"),
            sort=_sort(sort),
            limit=_limit(limit),
            cursor=validate.optional_identifier(cursor, "cursor"),
            projects=allowed,
        )

    def update(self, **changes: Any) -> Browse:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    @property
    def order(self) -> Sort:
        """The sort in effect: the one asked for, else relevance with a search and the
        time of writing without."""
        if self.sort is not None:
            if self.sort is Sort.RELEVANCE and not self.text:
                return Sort.UPDATED  # nothing to be relevant to
            return self.sort
        return Sort.RELEVANCE if self.text else Sort.UPDATED


@dataclass(frozen=True)
class Page:
    """One page of memories: the memories in order, how many match in all, and the cursor
    of the next page (``None`` on the last)."""

    memories: list[Memory]
    total: int
    next_cursor: str | None
    sort: Sort


Key = tuple[Any, ...]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: A search shows at most this many of its best matches (among those passing the
#: store-side filters): enough to page through, and a common word's 50,000 matches are
#: not all scored into rows.
MAX_SEARCH = 1000


@dataclass
class _Index:
    """Column arrays of one user's memories at one store revision, in the store's order
    (most recently updated first, ties by larger id first): every filter and order of a
    page is a numpy operation over them. Rebuilt after any change of the user's memories
    (the store's :meth:`~Store.revision`); counted uses change no revision, so the
    ``used`` order reads them afresh."""

    revision: int
    memories: list[Memory]
    ids: list[str]
    position: dict[str, int]
    #: the (updated, id) order as an integer: every sort key ends with it
    rank: IntArray
    updated: FloatArray
    importance: FloatArray
    project: npt.NDArray[np.object_]
    memory_type: npt.NDArray[np.int8]
    kind: npt.NDArray[np.int8]
    pinned: BoolArray
    muted: BoolArray
    superseded: BoolArray
    conflicting: BoolArray
    domain_masks: dict[str, BoolArray] = field(default_factory=dict)
    #: the ``used`` order's columns (access counts, last use), the memory objects they
    #: were read from and the working-set mapping those came from (``None``: a full
    #: query), one tuple replaced at once: :meth:`usage` re-reads only what changed
    usage_of: tuple[object, list[Memory], IntArray, FloatArray] | None = None

    @classmethod
    def build(cls, memories: list[Memory], revision: int) -> _Index:
        """The index of ``memories``, given in the store's order. Column by column with
        ``map`` and ``attrgetter`` (C loops): 100,000 memories in a few tens of ms."""
        n = len(memories)
        types = {t: i for i, t in enumerate(MemoryType)}
        kinds = {k: i for i, k in enumerate(Kind)}
        ids = list(map(attrgetter("id"), memories))
        metadata = map(attrgetter("provenance.metadata"), memories)
        return cls(
            revision=revision, memories=memories, ids=ids,
            position=dict(zip(ids, range(n), strict=True)),
            rank=np.arange(n - 1, -1, -1, dtype=np.int64),
            updated=np.fromiter(map(methodcaller("timestamp"), map(attrgetter("updated_at"),
                                                                   memories)), np.float64, n),
            importance=np.fromiter(map(attrgetter("importance"), memories), np.float64, n),
            project=np.array(list(map(attrgetter("project"), memories)), dtype=object),
            memory_type=np.fromiter(map(types.__getitem__, map(attrgetter("memory_type"),
                                                               memories)), np.int8, n),
            kind=np.fromiter(map(kinds.__getitem__, map(attrgetter("kind"), memories)),
                             np.int8, n),
            pinned=np.fromiter(map(attrgetter("pinned"), memories), bool, n),
            muted=np.fromiter(map(attrgetter("muted"), memories), bool, n),
            superseded=np.fromiter(map(attrgetter("superseded_by"), memories), object, n)
            != None,  # noqa: E711 (elementwise)
            conflicting=np.fromiter(map(bool, map(methodcaller("get", CONFLICTS_WITH),
                                                  metadata)), bool, n),
        )  # fmt: skip

    def updated_to(self, memories: list[Memory], revision: int) -> _Index:
        """The index of ``memories`` (the store's order at ``revision``), reusing this
        one's columns for every memory still the same object: a working-set store hands
        out the objects it keeps, so after an edit only the rows written are read again.
        A store that decodes rows anew on every query gets a full :meth:`build`."""
        n = len(memories)
        ids = list(map(attrgetter("id"), memories))
        old = np.fromiter(map(self.position.get, ids, repeat(-1, n)), np.int64, n)
        kept = self.memories
        same = np.fromiter(
            (r >= 0 and kept[r] is m for m, r in zip(memories, old.tolist(), strict=True)), bool, n
        )
        changed = np.flatnonzero(~same)
        if len(changed) > n // 4:
            return _Index.build(memories, revision)
        fresh = _Index.build([memories[i] for i in changed], revision)
        columns: dict[str, Any] = {}
        for name in _COLUMNS:
            column = getattr(self, name)[np.maximum(old, 0)]
            column[changed] = getattr(fresh, name)
            columns[name] = column
        masks = {}
        for tag, mask in self.domain_masks.items():
            masks[tag] = mask[np.maximum(old, 0)]
            masks[tag][changed] = fresh.domain(tag)
        usage = None
        known = self.usage_of
        if known is not None:  # a row whose object is not the one read is re-read (a new
            # row's stand-in, another memory, never is its object)
            _, previous, access, last = known
            rows = np.maximum(old, 0)
            usage = (None, list(map(previous.__getitem__, rows.tolist())), access[rows],
                     last[rows])  # fmt: skip
        return _Index(
            revision=revision, memories=memories, ids=ids,
            position=dict(zip(ids, range(n), strict=True)),
            rank=np.arange(n - 1, -1, -1, dtype=np.int64), domain_masks=masks, **columns,
            usage_of=usage,
        )  # fmt: skip

    def usage(self, store: Store, user_id: str) -> tuple[IntArray, FloatArray]:
        """The access count and last use (POSIX seconds, :data:`_NEVER` if never) of each
        row as stored now: counted uses change no revision. A store keeping a working set
        (:meth:`~engrain.store.sqlite.SQLiteStore.working_set`, the memory store's too)
        hands out a new mapping
        after any change, counted uses and other processes' commits included, and a new
        object for each memory touched: an unchanged mapping costs nothing, a changed one
        re-reads only the rows whose object changed. Other stores are queried in full."""
        working_set = getattr(store, "working_set", None)
        source: object = None
        if callable(working_set):
            rows: Mapping[str, Memory] = working_set(user_id)
            source = rows
            known = self.usage_of
            if known is not None and known[0] is rows:
                return known[2], known[3]
            current = list(map(rows.get, self.ids, self.memories))  # forgotten since: as read
        else:
            current = _current(store, user_id, self)
        n = len(current)
        known = self.usage_of
        if known is None:
            access = np.fromiter(map(attrgetter("access_count"), current), np.int64, n)
            last = _times(map(attrgetter("last_accessed_at"), current), n)
        else:
            _, previous, access, last = known
            changed = np.flatnonzero(np.fromiter(map(is_not, current, previous), bool, n))
            if len(changed):
                access, last = access.copy(), last.copy()
                touched = [current[i] for i in changed.tolist()]
                access[changed] = [m.access_count for m in touched]
                last[changed] = _times((m.last_accessed_at for m in touched), len(touched))
        self.usage_of = (source, current, access, last)
        return access, last

    def domain(self, tag: str) -> BoolArray:
        """The rows of memories tagged ``tag``."""
        mask = self.domain_masks.get(tag)
        if mask is None:
            n = len(self.memories)
            mask = np.fromiter((tag in m.domains for m in self.memories), bool, n)
            self.domain_masks[tag] = mask
        return mask

    def mask(self, request: Browse) -> BoolArray:
        """The rows passing every filter of ``request`` but the search."""
        mask = np.ones(len(self.memories), dtype=bool)
        if request.project is not None:
            mask &= self.project == request.project
        if request.projects is not None:
            mask &= np.isin(self.project, np.array(request.projects, dtype=object))
        if request.memory_types is not None:
            codes = [i for i, t in enumerate(MemoryType) if t in request.memory_types]
            mask &= np.isin(self.memory_type, codes)
        if request.kinds is not None:
            mask &= np.isin(self.kind, [i for i, k in enumerate(Kind) if k in request.kinds])
        if request.domain is not None:
            mask &= self.domain(request.domain)
        for wanted, column in ((request.pinned, self.pinned), (request.muted, self.muted),
                               (request.superseded, self.superseded),
                               (request.conflicting, self.conflicting)):  # fmt: skip
            if wanted is not None:
                mask &= column if wanted else ~column
        return mask

    def store_filter(self, request: Browse) -> MemoryFilter:
        """The part of ``request``'s filters a store's search applies itself."""
        return MemoryFilter(
            project=request.project, memory_types=request.memory_types, kinds=request.kinds,
            pinned=request.pinned, include_muted=request.muted is not False,
            include_superseded=request.superseded is not False,
        )  # fmt: skip


#: The columns :meth:`_Index.updated_to` carries over.
_COLUMNS = ("updated", "importance", "project", "memory_type", "kind", "pinned", "muted",
            "superseded", "conflicting")  # fmt: skip

#: The index of each store's recently browsed users (a store that is closed and dropped
#: takes its entries with it).
_INDEXES: weakref.WeakKeyDictionary[Store, dict[str, _Index]] = weakref.WeakKeyDictionary()
_INDEXED_USERS = 8
_index_lock = threading.Lock()


def _index(store: Store, user_id: str) -> _Index:
    """The user's index at the store's current revision (built now if it changed)."""
    revision = store.revision(user_id)
    try:
        with _index_lock:
            cached = _INDEXES.setdefault(store, {}).get(user_id)
    except TypeError:  # a store that cannot be weakly referenced: no index kept
        return _Index.build(store.query(user_id), revision)
    if cached is not None and cached.revision == revision:
        return cached
    memories = store.query(user_id)
    if cached is None:
        built = _Index.build(memories, revision)
    else:
        built = cached.updated_to(memories, revision)
    with _index_lock:
        users = _INDEXES.setdefault(store, {})
        users.pop(user_id, None)
        if len(users) >= _INDEXED_USERS:
            users.pop(next(iter(users)))
        users[user_id] = built
    return built


def index_of(store: Store, user_id: str) -> _Index:
    """The column arrays of the user's memories at the store's current revision (kept
    between calls, refreshed after any change): for other stages that filter on flags,
    such as the review queue's conflicts."""
    return _index(store, user_id)


def browse(store: Store, user_id: str, request: Browse) -> Page:
    """The page ``request`` asks for of ``user_id``'s memories (arguments already
    validated: :meth:`Browse.checked`)."""
    order = request.order
    index = _index(store, user_id)
    mask = index.mask(request)
    scores = np.zeros(len(index.memories), dtype=np.float64)
    if request.text:
        found = np.zeros(len(index.memories), dtype=bool)
        for memory, score in store.lexical_search(
            user_id, request.text, MAX_SEARCH, index.store_filter(request)
        ):
            row = index.position.get(memory.id)
            if row is not None:  # None: written after the index was read
                found[row] = True
                scores[row] = score
        mask &= found
    rows = np.flatnonzero(mask)
    columns = [*_sort_columns(order, index, rows, scores, store, user_id), index.updated[rows]]
    if request.cursor is not None:
        keep = _after(index, rows, columns, decode_cursor(request.cursor, order))
        rows, columns = rows[keep], [c[keep] for c in columns]
    # descending by each column in turn; the rank orders equal times by id
    ranked = np.lexsort((index.rank[rows], *reversed(columns)))[::-1][: request.limit + 1]
    shown = ranked[: request.limit]
    # as stored now: usage counted since the index was built included
    memories = store.get(user_id, [index.memories[rows[i]].id for i in shown])
    cursor = None
    if len(ranked) > request.limit:
        last = shown[-1]
        key = (*(c[last].item() for c in columns), index.memories[rows[last]].id)
        cursor = encode_cursor(order, key)
    return Page(memories, int(mask.sum()), cursor, order)


def _sort_columns(
    order: Sort, index: _Index, rows: IntArray, scores: FloatArray, store: Store, user_id: str
) -> list[npt.NDArray[Any]]:
    """The sort columns of ``rows`` for ``order`` before the time of writing, most
    significant first."""
    if order is Sort.USED:  # counted uses change no revision: read them now
        access, last = index.usage(store, user_id)
        return [access[rows], last[rows]]
    if order is Sort.IMPORTANCE:
        return [index.importance[rows]]
    if order is Sort.RELEVANCE:
        return [scores[rows]]
    return []


def _current(store: Store, user_id: str, index: _Index) -> list[Memory]:
    """The memories of ``index``'s rows as stored now (a memory forgotten meanwhile: as the
    index has it). From the working set when the store keeps one (no SQL, one dictionary
    look-up per row), else from a full query."""
    cached = getattr(store, "cached", None)
    current: list[Memory] = cached(user_id, index.ids) if callable(cached) else store.query(user_id)
    if len(current) != len(index.ids) or any(map(ne, map(attrgetter("id"), current),
                                                 index.ids)):  # fmt: skip
        known = {m.id: m for m in current}
        current = [known.get(i, m) for i, m in zip(index.ids, index.memories, strict=True)]
    return current


def _after(index: _Index, rows: IntArray, columns: list[npt.NDArray[Any]], after: Key) -> BoolArray:
    """Which of ``rows`` come after the cursor ``after`` in the descending order: their
    key (the columns, then the id) is smaller."""
    equal = np.ones(len(rows), dtype=bool)
    below = np.zeros(len(rows), dtype=bool)
    for column, value in zip(columns, after[:-1], strict=True):
        below |= equal & (column < value)
        equal &= column == value
    for i in np.flatnonzero(equal):  # the same key up to the id: a handful of rows at most
        below[i] = index.memories[rows[i]].id < after[-1]
    return below


def encode_cursor(order: Sort, key: Key) -> str:
    """The opaque cursor after the memory whose sort key is ``key``."""
    raw = json.dumps([order.value, *key], separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str, order: Sort) -> Key:
    """The sort key a cursor carries; :class:`ValidationError` if it is not one of this
    order's (edited by hand, or from a page sorted another way)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise ValidationError("cursor: not a cursor of this list") from exc
    number = (int, float)
    shapes: dict[Sort, tuple[type | tuple[type, ...], ...]] = {
        Sort.UPDATED: (number, str),
        Sort.USED: (int, number, number, str),
        Sort.IMPORTANCE: (number, number, str),
        Sort.RELEVANCE: (number, number, str),
    }
    shape = shapes[order]
    if (
        not isinstance(value, list)
        or len(value) != len(shape) + 1
        or value[0] != order.value
        or any(isinstance(v, bool) or not isinstance(v, t)
               for v, t in zip(value[1:], shape, strict=True))
    ):  # fmt: skip
        raise ValidationError("cursor: not a cursor of this list")
    return tuple(value[1:])


def facets(store: Store, user_id: str) -> tuple[list[str], list[str]]:
    """The projects and the domains the user's memories have, sorted: what the filters
    offer."""
    projects: set[str] = set()
    domains: set[str] = set()
    for memory in store.query(user_id):
        if memory.project is not None:
            projects.add(memory.project)
        domains.update(memory.domains)
    return sorted(projects), sorted(domains)


@dataclass(frozen=True)
class Relations:
    """How one memory stands to the others: those it is flagged as conflicting with,
    those it superseded (corrected), and the one that superseded it."""

    conflicts: list[Memory]
    corrects: list[Memory]
    corrected_by: Memory | None


def relations(store: Store, memory: Memory) -> Relations:
    """The :class:`Relations` of ``memory`` among the memories still stored: what it
    corrects is the memory its ``corrects`` record names, if that one still names it back
    (``superseded_by``)."""
    user = memory.user_id
    named = memory.provenance.metadata.get(CORRECTS)
    found = store.get(user, [named]) if isinstance(named, str) and named else []
    corrects = [m for m in found if m.superseded_by == memory.id]
    by = store.get(user, [memory.superseded_by]) if memory.superseded_by else []
    return Relations(store.get(user, list(conflicts_of(memory))), corrects, by[0] if by else None)


def _times(values: Iterable[datetime | None], n: int) -> FloatArray:
    """POSIX seconds of each time (``None``: never, before every time). A double holds a
    microsecond time exactly enough to order it, and JSON writes it back exactly."""
    return np.fromiter((_NEVER if v is None else v.timestamp() for v in values), np.float64, n)


def _optional_flag(value: object, field: str) -> bool | None:
    return None if value is None else validate.flag(value, field)


def _kinds(value: object) -> list[Kind]:
    if isinstance(value, str):
        return [validate.kind(value, "kinds")]
    if isinstance(value, bytes | bytearray | Mapping) or not isinstance(value, Sequence):
        raise ValidationError("kinds must be a list of kinds")
    return [validate.kind(v, f"kinds[{i}]") for i, v in enumerate(value)]


def _sort(value: object) -> Sort | None:
    if value is None or isinstance(value, Sort):
        return value
    if not isinstance(value, str):
        raise ValidationError("sort must be one of: " + ", ".join(s.value for s in Sort))
    try:
        return Sort(value.strip().lower())
    except ValueError:
        allowed = ", ".join(s.value for s in Sort)
        raise ValidationError(f"sort: unknown sort {value!r}; expected one of: {allowed}") from None


def _limit(value: object) -> int:
    if value is None:
        return DEFAULT_LIMIT
    return min(validate.integer(value, "limit", minimum=1), MAX_LIMIT)
