"""The browse stage: a page of one user's memories for people to look through (the web
inspector's table), with filters, a text search, a sort and a keyset cursor.

The store narrows what its filter can say (project, type, kind, pinned, hiding muted or
superseded memories); a search is the store's BM25 over the user's memories
(:meth:`Store.lexical_search`), so only memories sharing a word with the text are found,
best first. What the store's filter cannot say (a domain, only muted, only superseded,
conflicting or not, the projects a project-limited key sees) is checked here. The page is
the first ``limit`` memories after the cursor in the chosen order.

**Keyset, not offset.** A cursor is the sort key of the last memory shown (its time,
count or score, then its id: every key is unique), so the next page starts right after
that memory whatever was added or forgotten meanwhile: nothing is shown twice or skipped
because rows moved, and a page costs one pass over the matches (``heapq``, no full sort),
not ``offset`` rows read and thrown away. On the SQLite and in-memory stores the matches
come from the user's working set in process, so no row is decoded.
"""

from __future__ import annotations

import base64
import heapq
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from engrain import validate
from engrain.corrections import conflicts_of
from engrain.errors import ValidationError
from engrain.model import Kind, Memory, MemoryType
from engrain.store import MemoryFilter, Store

#: The largest page.
MAX_LIMIT = 200
DEFAULT_LIMIT = 50

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
_NEVER = -(1 << 62)  # the sort value of "never used": below every real time


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

    def store_filter(self) -> MemoryFilter:
        """The part of this page's filters the store applies."""
        return MemoryFilter(
            project=self.project,
            memory_types=self.memory_types,
            kinds=self.kinds,
            pinned=self.pinned,
            include_muted=self.muted is not False,
            include_superseded=self.superseded is not False,
        )

    def matches(self, memory: Memory) -> bool:
        """Whether ``memory`` passes the filters the store does not apply."""
        return (
            (self.domain is None or self.domain in memory.domains)
            and (self.muted is not True or memory.muted)
            and (self.superseded is not True or memory.superseded_by is not None)
            and (self.conflicting is None or bool(conflicts_of(memory)) == self.conflicting)
            and (self.projects is None or memory.project in self.projects)
        )


@dataclass(frozen=True)
class Page:
    """One page of memories: the memories in order, how many match in all, and the cursor
    of the next page (``None`` on the last)."""

    memories: list[Memory]
    total: int
    next_cursor: str | None
    sort: Sort


Key = tuple[Any, ...]


def browse(store: Store, user_id: str, request: Browse) -> Page:
    """The page ``request`` asks for of ``user_id``'s memories (arguments already
    validated, :func:`checked`)."""
    order = request.order
    flt = request.store_filter()
    if request.text:
        hits = store.lexical_search(user_id, request.text, max(store.count(user_id, flt), 1), flt)
        scores = {m.id: score for m, score in hits}
        candidates: Iterable[Memory] = (m for m, _ in hits)
    else:
        scores = {}
        candidates = store.query(user_id, flt)
    matches = [m for m in candidates if request.matches(m)]
    key = sort_key(order, scores)
    after = None if request.cursor is None else decode_cursor(request.cursor, order)
    remaining = matches if after is None else [m for m in matches if key(m) < after]
    page = heapq.nlargest(request.limit + 1, remaining, key=key)
    more = len(page) > request.limit
    page = page[: request.limit]
    cursor = encode_cursor(order, key(page[-1])) if more and page else None
    return Page(page, len(matches), cursor, order)


def sort_key(order: Sort, scores: dict[str, float]) -> Callable[[Memory], Key]:
    """The descending sort key of ``order``: unique (it ends with the id), and made of
    JSON-exact values (integers, strings, BM25 scores) so a cursor restores it exactly."""
    if order is Sort.USED:
        return lambda m: (m.access_count, _micros(m.last_accessed_at), m.id)
    if order is Sort.IMPORTANCE:
        return lambda m: (m.importance, _micros(m.updated_at), m.id)
    if order is Sort.RELEVANCE:
        return lambda m: (scores.get(m.id, 0.0), m.id)
    return lambda m: (_micros(m.updated_at), m.id)


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
    shapes: dict[Sort, tuple[type | tuple[type, ...], ...]] = {
        Sort.UPDATED: (int, str),
        Sort.USED: (int, int, str),
        Sort.IMPORTANCE: ((int, float), int, str),
        Sort.RELEVANCE: ((int, float), str),
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
    """The :class:`Relations` of ``memory`` among the memories still stored."""
    user = memory.user_id
    corrects = [m for m in store.query(user) if m.superseded_by == memory.id]
    by = store.get(user, [memory.superseded_by]) if memory.superseded_by else []
    return Relations(store.get(user, list(conflicts_of(memory))), corrects, by[0] if by else None)


def _micros(value: datetime | None) -> int:
    return _NEVER if value is None else (value - _EPOCH) // _MICRO


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
