"""The storage protocol every backend implements, and the filter it takes.

Small on purpose: backends differ in how they keep rows and search vectors, not in what
they promise. The contract test suite (``tests/test_store_contract.py``) runs one set of
tests against every backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from types import MappingProxyType, UnionType
from typing import (
    Any,
    Protocol,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    runtime_checkable,
)

from engrain.errors import KeyChangedError, MigrationError, ValidationError
from engrain.model import Kind, Memory, MemoryFields, MemoryType, Vector
from engrain.store.reads import Begin
from engrain.tokens import spaced_count

#: A memory row's columns, in the order both SQL backends store them (the order of migration
#: 001's table, then the columns later migrations added).
MEMORY_COLUMNS = (
    "id", "user_id", "project", "content", "memory_type", "kind", "domains", "session_id",
    "created_at", "updated_at", "event_at", "key", "importance", "confidence", "usefulness",
    "access_count", "last_accessed_at", "pinned", "muted", "promoted_at", "compressed",
    "compression_source", "source_session_id", "provenance", "content_hash", "embedding",
    "superseded_by", "content_tokens",
)  # fmt: skip


@dataclass(frozen=True)
class MemoryFilter:
    """Which of a user's memories a query sees. ``None`` means "any"."""

    project: str | None = None
    memory_types: tuple[MemoryType, ...] | None = None
    kinds: tuple[Kind, ...] | None = None
    session_id: str | None = None
    key: str | None = None
    include_compressed: bool = True
    include_muted: bool = True
    include_superseded: bool = True
    min_importance: float | None = None
    pinned: bool | None = None

    def update(self, **changes: Any) -> MemoryFilter:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    def matches(self, memory: Memory) -> bool:
        """Whether ``memory`` passes this filter (the reference semantics for backends)."""
        return (
            (self.project is None or memory.project == self.project)
            and (self.memory_types is None or memory.memory_type in self.memory_types)
            and (self.kinds is None or memory.kind in self.kinds)
            and (self.session_id is None or memory.session_id == self.session_id)
            and (self.key is None or memory.key == self.key)
            and (self.include_compressed or not memory.compressed)
            and (self.include_muted or not memory.muted)
            and (self.include_superseded or memory.superseded_by is None)
            and (self.min_importance is None or memory.importance >= self.min_importance)
            and (self.pinned is None or memory.pinned == self.pinned)
        )


ALL = MemoryFilter()


@dataclass(frozen=True)
class State:
    """A small JSON document a user owns beside their memories, by namespace and key:
    compiled tiers, learned co-occurrence, the memories each context injected. Written with
    :meth:`Store.write` (``value=None`` deletes it), read with :meth:`Store.get_state`.

    With ``change``, the document written is ``change(current)``, ``current`` being the
    document as the write's transaction finds it (``None`` if there is none; a result of
    ``None`` deletes it), and ``value`` is not used: a read-modify-write that no other
    process's write of the document can slip into (feedback's counts, ``feedback.py``).
    ``change`` runs inside the transaction, so it must be quick, pure and touch nothing
    else; each store resolves the document under the lock that orders writers of it."""

    user_id: str
    namespace: str
    key: str
    value: Mapping[str, Any] | None
    change: Callable[[Mapping[str, Any] | None], Mapping[str, Any] | None] | None = None

    def resolved(self, current: Mapping[str, Any] | None) -> State:
        """The plain document this one writes over ``current``: ``change(current)`` for a
        document made with ``change``, else itself."""
        if self.change is None:
            return self
        return State(self.user_id, self.namespace, self.key, self.change(current))

    def encoded(self) -> str | None:
        """The value as JSON text (``None`` for a delete); :class:`ValidationError` if it is
        not JSON, or if the document is a ``change`` not resolved yet."""
        if self.change is not None:
            raise ValidationError(f"state {self.namespace}/{self.key} is a change: "
                                  "resolve it inside the write's transaction")  # fmt: skip
        if self.value is None:
            return None
        try:
            return json.dumps(dict(self.value), sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                f"state {self.namespace}/{self.key} is not a JSON object: {exc}"
            ) from exc


@dataclass(frozen=True)
class KeyRecord:
    """An API key as a store keeps it: the public ``id``, the SHA-256 ``digest`` (hex) of
    its secret — never the secret — and its scope. Keys are store-wide, not per user, so
    every process over one store sees the same keys (see :mod:`engrain.keys`)."""

    id: str
    digest: str
    name: str | None
    users: tuple[str, ...]
    projects: tuple[str, ...]
    admin: bool
    created_at: datetime
    revoked_at: datetime | None = None


def _expected(annotation: Any) -> tuple[tuple[type, ...], bool]:
    """The runtime types a Memory field's annotation allows, and whether ``None`` is one."""
    nullable = False
    if get_origin(annotation) in (UnionType, Union):
        nullable = type(None) in get_args(annotation)
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    origin = get_origin(annotation)
    if origin is not None:  # tuple[str, ...], np.ndarray[...]
        return (origin,), nullable
    return ((int, float) if annotation is float else (annotation,)), nullable


#: The Memory fields a :class:`Patch` may set (all but the row's identity and what the
#: store derives from the content, ``content_tokens``), with the types each accepts.
PATCHABLE: dict[str, tuple[tuple[type, ...], bool]] = {
    name: _expected(hint)
    for name, hint in get_type_hints(Memory).items()
    if name in {f.name for f in fields(Memory)} - {"id", "user_id", "content_tokens"}
}


def counted(memory: Memory) -> Memory:
    """``memory`` with its ``content_tokens`` (:func:`~engrain.tokens.spaced_count` of its
    content), counted here if it carries none: what every store writes and keeps. A
    content that is not a string is left for the store to refuse (its write's error)."""
    if memory.content_tokens is not None or not isinstance(memory.content, str):
        return memory
    return memory.evolve(content_tokens=spaced_count(memory.content))


def _check_value(name: str, value: Any) -> None:
    if isinstance(value, Toward):
        if name not in TOWARD_FIELDS:
            raise ValidationError(f"a patch cannot move {name} toward a value")
        for number in (value.target, value.rate):
            if (
                isinstance(number, bool)
                or not isinstance(number, int | float)
                or not (0 <= number <= 1)
            ):
                raise ValidationError(f"a patch moves {name} by {value!r}, not within [0, 1]")
        return
    allowed, nullable = PATCHABLE[name]
    if value is None and nullable:
        return
    wrong_bool = isinstance(value, bool) and bool not in allowed  # True is an int
    items_ok = not isinstance(value, tuple) or all(isinstance(v, str) for v in value)
    if wrong_bool or not isinstance(value, allowed) or not items_ok:
        raise ValidationError(f"a patch sets {name} to {value!r}, not a valid {name}")


@dataclass(frozen=True)
class Toward:
    """A patch's value for a number in [0, 1]: the field moved ``rate`` of the way to
    ``target`` from the value the row holds when the write applies the patch, inside its
    transaction (clamped to [0, 1]). Moves by other processes meanwhile add up instead of
    one overwriting another (a feedback's usefulness, ``feedback.py``)."""

    target: float
    rate: float

    def of(self, current: float) -> float:
        """``current`` moved: ``current + rate × (target − current)`` within [0, 1]."""
        return min(1.0, max(0.0, current + self.rate * (self.target - current)))


#: The fields a :class:`Patch` may move with :class:`Toward`: numbers in [0, 1], never null.
TOWARD_FIELDS = frozenset({"usefulness"})


@dataclass(frozen=True)
class Patch:
    """Set some fields of one existing memory, in the write's transaction; a memory that
    no longer exists (forgotten) is left alone — a forget wins over any concurrent change.

    ``changes`` maps :class:`~engrain.model.Memory` field names (any but ``id`` and
    ``user_id``) to new values, typed as on ``Memory``, or (for :data:`TOWARD_FIELDS`) to a
    :class:`Toward`, a move from the value the row holds then; another key, or a value of
    another type, is a :class:`ValidationError` when the patch is made, before any I/O."""

    user_id: str
    memory_id: str
    changes: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not isinstance(self.changes, Mapping):
            raise ValidationError(f"patch changes must be a mapping, not {self.changes!r}")
        if unknown := sorted(set(self.changes) - PATCHABLE.keys()):
            raise ValidationError(
                f"a patch cannot set {', '.join(map(repr, unknown))}: "
                "it sets Memory fields other than id and user_id"
            )
        for name, value in self.changes.items():
            _check_value(name, value)
        # a private read-only copy: a caller mutating its dict later changes nothing here
        object.__setattr__(self, "changes", MappingProxyType(dict(self.changes)))

    @property
    def where(self) -> tuple[str, str]:
        """The row it changes: ``(user_id, memory_id)``."""
        return (self.user_id, self.memory_id)

    def apply(self, memory: Memory) -> Memory:
        """``memory`` with these changes applied (a :class:`Toward` from its value)."""
        return memory.evolve(**{
            name: value.of(getattr(memory, name)) if isinstance(value, Toward) else value
            for name, value in self.changes.items()
        })  # fmt: skip


@dataclass(frozen=True)
class KeyClaim:
    """What a write's plan assumed about a procedural key: that ``found`` is a live memory
    passing ``filter`` (a filter naming the key: the planner's lookup), or, with ``found``
    ``None``, that no memory passes it. :meth:`Store.write` checks every claim inside its
    transaction, once it holds the lock that orders the user's writers, and raises
    :class:`KeyChangedError` (writing nothing) if one no longer holds: two engines
    remembering one new key at once then leave one memory, not two.

    With ``by_id`` (:meth:`live`) the claim is about one memory rather than a key: that
    the memory ``found`` is still stored and passes ``filter`` (a correction's target
    not superseded meanwhile, the two memories of a pair being resolved still there)."""

    user_id: str
    filter: MemoryFilter
    found: str | None
    by_id: bool = False

    @classmethod
    def live(cls, memory: Memory) -> KeyClaim:
        """The claim that ``memory`` is still as a plan read it: stored, and not
        superseded if it was not."""
        flt = ALL if memory.superseded_by is not None else ALL.update(include_superseded=False)
        return cls(memory.user_id, flt, memory.id, by_id=True)

    def check(self, live: Iterable[str]) -> None:
        """Raise :class:`KeyChangedError` unless ``live`` (the ids passing ``filter`` now;
        with ``by_id``, ``found`` if it does) is what the plan assumed."""
        ids = set(live)
        if (self.found in ids) if self.found is not None else not ids:
            return
        what = (f"memory {self.found!r}" if self.by_id
                else f"the memory under key {self.filter.key!r}")  # fmt: skip
        raise KeyChangedError(
            f"{what} of user {self.user_id!r} changed while this call was planned: "
            "nothing was written"
        )


@runtime_checkable
class Store(Protocol):
    """Where memories live. Every method is scoped to one ``user_id``: a user never sees
    another user's memories. Multi-row writes are atomic: all of them or none."""

    def write(
        self,
        upserts: Sequence[Memory] = (),
        deletes: Sequence[Memory] = (),
        state: Sequence[State] = (),
        patches: Sequence[Patch] = (),
        claims: Sequence[KeyClaim] = (),
    ) -> None:
        """Insert or replace ``upserts`` (by id), apply ``patches``, delete ``deletes`` and
        put (or, with ``value=None``, delete) ``state``, in one transaction. Each user whose
        memories changed gets a new :meth:`revision`. Every :class:`KeyClaim` in ``claims``
        is checked first, inside the transaction, ordered with every other write of its
        user (of any process); one that no longer holds raises :class:`KeyChangedError`
        and nothing is written.

        ``upserts`` write whole memories (new ones, imports). ``patches`` change fields of
        existing rows only: each row is read and rewritten inside the transaction with just
        its ``changes`` applied (to the row as this write's upserts left it), so concurrent
        changes of other fields are kept; a row that does not exist is skipped, never
        inserted. ``deletes`` come last: a memory deleted here stays deleted."""
        ...

    def revision(self, user_id: str) -> int:
        """A number that changes whenever the user's memories are added, edited or deleted
        (by this process or another); 0 for a user never written. Access counting does not
        change it."""
        ...

    def get_state(self, user_id: str, namespace: str, key: str) -> dict[str, Any] | None:
        """The state document at ``(namespace, key)``, or ``None``."""
        ...

    def states(self, user_id: str, namespace: str | None = None) -> list[State]:
        """Every state document of the user (in ``namespace``, or in all), sorted by
        namespace and key."""
        ...

    def expire_state(self, user_id: str, namespace: str, before: datetime) -> int:
        """Delete the user's state documents in ``namespace`` last written before ``before``;
        how many."""
        ...

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        """The user's memories with these ids, in the order given; unknown ids are skipped."""
        ...

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        """The user's memories passing ``flt``, most recently updated first."""
        ...

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories most cosine-similar to ``vector`` among those passing ``flt``,
        best first, with their similarity."""
        ...

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories passing ``flt`` with the highest BM25 score for ``text`` (user's
        own term statistics), best first, with their score; memories sharing no term with
        ``text`` are never returned."""
        ...

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        """Increment the access count (atomically, once per occurrence of the id) and set
        the last access time of these memories; unknown or deleted ids are skipped."""
        ...

    def record_uses(
        self, user_id: str, ids: Sequence[str], at: datetime, state: Sequence[State] = ()
    ) -> None:
        """:meth:`record_access` of ``ids`` and the ``state`` documents (put or, with
        ``value=None``, deleted as :meth:`write` does) in one transaction: a ``context()``'s
        counted uses and its record (``recall/uses.py``), both or neither. The revision does
        not change; a document that is not JSON is a :class:`ValidationError` before
        anything is counted."""
        ...

    def count(self, user_id: str, flt: MemoryFilter = ALL) -> int:
        """How many of the user's memories pass ``flt``."""
        ...

    def centroid(self, user_id: str) -> Vector | None:
        """The mean embedding of the user's memories, or ``None`` if there are none."""
        ...

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        """Embedding cache lookup: content hash → vector, for the hashes known."""
        ...

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        """Embedding cache write."""
        ...

    def users(self) -> list[str]:
        """Every user id with at least one memory."""
        ...

    def put_key(self, record: KeyRecord) -> bool:
        """Store a new API key; ``False`` (and nothing written) if a key with its id is
        already stored."""
        ...

    def key_record(self, digest: str) -> KeyRecord | None:
        """The key whose secret hashes to ``digest`` (revoked or not), or ``None``. Always
        read from the store, never from a cache: another process's revocation counts at
        once."""
        ...

    def key_records(self) -> list[KeyRecord]:
        """Every key, revoked ones included, oldest first (ties by id)."""
        ...

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        """Mark the key ``key_id`` revoked at ``at`` (a key already revoked keeps its first
        revocation time); ``False`` if there is no such key."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...


@runtime_checkable
class FoundSearch(Protocol):
    """A store whose searches can give each match as its fields
    (:class:`~engrain.model.MemoryFields`) instead of a built memory: a row of its working
    set is read from its columns when asked and built only if the caller returns it
    (``store/found.py``). The gate uses these when a store has them (SQLite); any other
    store's memories are their own fields."""

    def search_found(
        self,
        user_id: str,
        vector: Vector,
        searches: Sequence[tuple[int, MemoryFilter]],
        begin: Begin | None = None,
    ) -> list[list[tuple[MemoryFields, float]]]:
        """``search(user_id, vector, k, flt)`` for each ``(k, flt)``, as fields; work that
        can run beside the calling thread's (another index's walk and its rows' read) begun
        with ``begin``
        (``store/reads.py``), if given."""
        ...

    def lexical_found(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[MemoryFields, float]]:
        """``lexical_search(user_id, text, k, flt)``, as fields."""
        ...


Step = TypeVar("Step")


def pending_migrations(
    done: set[str], migrations: Sequence[tuple[str, Step]], where: str
) -> list[tuple[str, Step]]:
    """The named ``migrations`` not in ``done``, in order. A database that has applied a
    migration this version does not know was written by a newer engrain: refused with a
    :class:`MigrationError` rather than misread."""
    if unknown := done - {name for name, _ in migrations}:
        raise MigrationError(
            f"{where} was written by a newer engrain (migrations {sorted(unknown)})"
        )
    return [(name, step) for name, step in migrations if name not in done]


# Which writes may skip waiting for their log to reach the disk, on every backend that
# can choose (PostgreSQL: ``synchronous_commit = off`` for that transaction; SQLite: that
# transaction under ``PRAGMA synchronous=NORMAL`` instead of ``FULL``). Every other write
# (a memory written, changed or deleted, any other document, a key) is durable when its
# call returns, whatever crashes after: the process, the server, the machine or its
# filesystem (docs/reliability.md).

#: State namespaces whose documents, written alone, commit without waiting for the WAL
#: flush (``synchronous_commit = off`` for that transaction only): ``contexts``
#: (``engrain.feedback.CONTEXTS``), the record of what one ``context()`` injected, written
#: after every call. A crash of the database server (not of a client) can lose the records
#: of the last fraction of a second (``wal_writer_delay`` × 3 at most), never a memory: a
#: feedback on such a context is answered "no context" as for an expired one. The
#: transaction stays atomic, is visible to every reader at once, and any later commit
#: that waits for its flush (every other write) makes it durable too, since the WAL is
#: flushed in order: nothing durable can depend on a record that was lost.
LAZY_NAMESPACES = frozenset({"contexts"})
#: Patched fields that, written alone, commit without waiting for the WAL flush either:
#: ``promoted_at``, which only promotion sets (``recall.uses`` after a ``context()``,
#: ``tiers.cache`` when it compiles), a rule over the access counts (at least
#: ``tiers.PROMOTION_USES`` uses and not promoted yet). A promotion a server crash loses is
#: made again by the memory's next counted use or the next compile, as the counts that
#: call for it are themselves counted without waiting (``record_access``); it never loses
#: or changes a memory's content. Measured (session 15, 100,000 memories, load ~16): a
#: promotion's write 20.7 → 11.1 ms p50, alternating (docs/postgres.md, "Session 15").
LAZY_PATCH_FIELDS = frozenset({"promoted_at"})


def lazy_commit(
    upserts: Sequence[Memory],
    deletes: Sequence[Memory],
    state: Sequence[State],
    patches: Sequence[Patch],
) -> bool:
    """Whether a write may commit without waiting for the WAL flush: it writes no row and
    deletes none, its documents (if any) are all of :data:`LAZY_NAMESPACES` and its
    patches (if any) set only :data:`LAZY_PATCH_FIELDS`; and it writes something."""
    return (
        not upserts
        and not deletes
        and bool(state or patches)
        and all(s.namespace in LAZY_NAMESPACES for s in state)
        and all(p.changes.keys() <= LAZY_PATCH_FIELDS for p in patches)
    )
