"""A LangGraph ``BaseStore`` over engrain, for an agent's long-term memory.

Namespaces map to engrain's scopes: ``namespace[0]`` is the user, ``namespace[1]`` (when
there is one) the project, and the whole namespace with the item's key and value rides in
the memory's provenance metadata under ``"langgraph"``. So ``("ada",)`` is user ``ada``
outside any project, ``("ada", "memories")`` user ``ada`` in project ``memories``, and
``("ada", "memories", "work")`` the same user and project, the third label kept in the
metadata (searches by that prefix filter on it). What an agent puts is an ordinary memory
of the user: ``Engine.context(message, user_id="ada")`` injects it like any other.

Each item is one memory whose id is derived from the namespace and the key, written with
``Engine.import_records`` (a ``memory`` record: restored as given, no dedup against the
user's other memories, so two keys with the same text stay two items), which makes a put
with the same namespace and key a replacement (``created_at`` kept) and a delete a
``forget``. Its text, the part engrain embeds, is the value's fields named by the put's
``index`` (or the store's), else its ``"content"`` string, else the value as JSON;
``index=False`` stores it muted: never injected, never ranked, still read by ``get`` and by
searches without a query. A search with a ``query`` ranks the namespace's items by
``Engine.recall`` (its score in ``SearchItem.score``); without one, items come most
recently updated first. Within one ``batch`` the reads see the store as it was before the
batch's writes (as LangGraph's ``InMemoryStore``), and the last write of a key wins.
TTLs are not supported (``supports_ttl = False``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)
from langgraph.store.base.embed import get_text_at_path

from engrain import validate
from engrain.aio import AsyncEngine
from engrain.engine import Engine
from engrain.errors import NotFoundError, ValidationError
from engrain.model import Kind, Memory, utcnow

__all__ = ["METADATA_KEY", "EngrainStore"]

#: The key of a memory's provenance metadata that holds its LangGraph namespace, key and
#: value.
METADATA_KEY = "langgraph"

#: A token budget no search reaches: a store search ranks, it does not fit a prompt.
UNLIMITED_TOKENS = 2**31 - 1

Namespace = tuple[str, ...]


class EngrainStore(BaseStore):
    """LangGraph's long-term memory store, kept in engrain.

    >>> store = EngrainStore(Engine())
    >>> store.put(("ada", "memories"), "editor", {"content": "Ada indents with tabs"})
    >>> store.search(("ada", "memories"), query="how does Ada indent?")

    ``engine`` is an :class:`~engrain.Engine` (or an :class:`~engrain.AsyncEngine`, whose
    engine is used from worker threads); ``index`` names the value fields to embed when a
    put names none (LangGraph's ``index.fields``); ``kind`` is the kind of every memory the
    store writes (``fact`` by default; ``preference`` makes them procedural, placed first
    at recall).
    """

    supports_ttl = False

    def __init__(
        self,
        engine: Engine | AsyncEngine,
        *,
        index: Sequence[str] | None = None,
        kind: Kind | str = Kind.FACT,
    ) -> None:
        self.engine = engine.sync if isinstance(engine, AsyncEngine) else engine
        if index is not None and (isinstance(index, str) or not all(
            isinstance(path, str) and path for path in index
        )):  # fmt: skip
            raise ValidationError("index must be a list of field paths, such as ['content']")
        self.index = None if index is None else list(index)
        self.kind = validate.kind(kind)

    # -- the two methods LangGraph asks for ---------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """One result per op, in order. The reads (``GetOp``, ``SearchOp``,
        ``ListNamespacesOp``) see the store as it was before the batch; then the writes
        (``PutOp``) are validated together and made, the last per key winning: puts in one
        ``import_records`` call, deletes in one ``forget`` call per user. A bad put raises
        :class:`ValidationError` and writes nothing."""
        listed = list(ops)
        for op in listed:
            validate_op_namespace(op)
        results: list[Result] = []
        writes: dict[tuple[Namespace, str], PutOp] = {}
        for op in listed:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._namespaces(op))
            elif isinstance(op, PutOp):
                writes[(tuple(op.namespace), op.key)] = op
                results.append(None)
            else:
                raise ValidationError(f"not a store operation: {type(op).__name__}")
        if writes:
            self._write(list(writes.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread, so embedding and store I/O never stall the
        event loop."""
        return await asyncio.to_thread(self.batch, list(ops))

    # -- reads ----------------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        user, _ = _scope(op.namespace)
        try:
            memory = self.engine.get(memory_id(op.namespace, op.key), user)
        except NotFoundError:
            return None
        return _item(memory)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        check_filter(op.filter)
        prefix = tuple(op.namespace_prefix)
        project = prefix[1] if len(prefix) > 1 else None
        found: list[tuple[Memory, Entry, float | None]] = []
        for user in self._users(prefix[:1]):
            memories = self.engine.list(user, project=project, limit=None)
            entries = [(m, e) for m, e in _entries(memories, prefix)
                       if matches(e.value, op.filter)]  # fmt: skip
            scores: dict[str, float] = {}
            if op.query and entries:
                # recall's top k then holds at least the page's items, whatever else the
                # user has in the project (other memories, items the filter refused)
                wanted = op.offset + op.limit + len(memories) - len(entries)
                scores = self._ranks(op.query, user, project, min(wanted, len(memories)))
            found += [(m, e, scores.get(m.id)) for m, e in entries]
        if op.query:  # ranked first, best first; the rest (muted) after, newest first
            found.sort(key=lambda f: (f[2] is None, -(f[2] or 0.0)))
        page = found[op.offset : op.offset + op.limit]
        return [SearchItem(e.namespace, e.key, dict(e.value), m.created_at, m.updated_at, score)
                for m, e, score in page]  # fmt: skip

    def _ranks(self, query: str, user: str, project: str | None, top_k: int) -> dict[str, float]:
        """Recall's score of the user's ``top_k`` best memories (in ``project``) for
        ``query``, within no token budget."""
        result = self.engine.recall(query, user, top_k=max(top_k, 1),
                                    token_budget=UNLIMITED_TOKENS, project=project)  # fmt: skip
        return {s.memory.id: float(s.score) for s in result.scored}

    def _namespaces(self, op: ListNamespacesOp) -> list[Namespace]:
        conditions = op.match_conditions or ()
        users = next(((c.path[0],) for c in conditions
                      if c.match_type == "prefix" and c.path and c.path[0] != "*"), ())  # fmt: skip
        names = {e.namespace for user in self._users(users)
                 for _, e in _entries(self.engine.list(user, limit=None), ())}  # fmt: skip
        kept = {ns for ns in names if all(namespace_matches(c, ns) for c in conditions)}
        if op.max_depth is not None:
            kept = {ns[: op.max_depth] for ns in kept}
        return sorted(kept)[op.offset : op.offset + op.limit]

    def _users(self, first: Namespace) -> Sequence[str]:
        """The user a namespace prefix names, or every user with memories."""
        return first if first else self.engine.users()

    # -- writes ---------------------------------------------------------------------------------

    def _write(self, puts: Sequence[PutOp]) -> None:
        now = utcnow()
        records: list[dict[str, Any]] = []
        forgotten: dict[str, list[str]] = defaultdict(list)
        for op in puts:
            if op.ttl is not None:
                raise ValidationError("ttl: EngrainStore does not expire items (ttl=None)")
            user, project = _scope(op.namespace)
            mid = memory_id(op.namespace, op.key)
            if op.value is None:  # checked now: a bad delete must not follow a made put
                forgotten[validate.user_id(user, "namespace[0]")].append(mid)
            else:
                records.append(self._record(op, user, project, mid, now))
        if records:
            self.engine.import_records(records, now=now)
        for user, ids in forgotten.items():
            self.engine.forget(ids, user)

    def _record(
        self, op: PutOp, user: str, project: str | None, mid: str, now: datetime
    ) -> dict[str, Any]:
        """The ``memory`` import record of a put: a new item, or the replacement of the
        item with this namespace and key (which keeps its ``created_at``)."""
        value = _value(op.value)
        try:
            created = self.engine.get(mid, user).created_at
        except NotFoundError:
            created = now
        entry = {"namespace": list(op.namespace), "key": op.key, "value": value}
        return {
            "type": "memory", "id": mid, "user_id": user, "project": project,
            "content": self._text(value, op.index), "kind": self.kind.value,
            "memory_type": self.kind.default_memory_type.value,
            "created_at": created.isoformat(), "updated_at": now.isoformat(),
            "muted": op.index is False, "provenance": {"metadata": {METADATA_KEY: entry}},
        }  # fmt: skip

    def _text(self, value: Mapping[str, Any], index: Sequence[str] | bool | None) -> str:
        """What engrain embeds for a value: the fields ``index`` (else the store's) names,
        else its ``"content"`` string, else the value as JSON."""
        paths = list(index) if isinstance(index, Sequence) else self.index
        texts = [t for path in paths or () for t in get_text_at_path(value, path) if t.strip()]
        if texts:
            return "\n".join(texts)
        content = value.get("content")
        if isinstance(content, str) and content.strip():
            return content
        return json.dumps(value, sort_keys=True, ensure_ascii=False)


def memory_id(namespace: Sequence[str], key: str) -> str:
    """The id of the memory holding the item ``key`` of ``namespace``: the same namespace
    and key always give the same id, so a put replaces and a delete finds it."""
    path = json.dumps([list(namespace), key], ensure_ascii=False)
    return "lg-" + hashlib.sha256(path.encode("utf-8")).hexdigest()[:40]


def matches(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    """Whether a stored value passes a search filter, as LangGraph's stores read one: each
    field equal (nested mappings and lists compared inside), or an operator mapping
    (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``)."""
    return not flt or all(_compare(value.get(k), wanted) for k, wanted in flt.items())


def check_filter(flt: Any) -> None:
    """Refuse a filter naming an operator :func:`matches` does not know, before any read
    (an empty namespace would otherwise accept it silently)."""
    if isinstance(flt, Mapping):
        for key, wanted in flt.items():
            if str(key).startswith("$") and key not in _OPERATORS:
                raise ValidationError(f"filter: unknown operator {key!r} "
                                      f"(use {', '.join(_OPERATORS)})")  # fmt: skip
            check_filter(wanted)
    elif isinstance(flt, list | tuple):
        for wanted in flt:
            check_filter(wanted)
    elif flt is not None and not isinstance(flt, str | int | float | bool):
        raise ValidationError(f"filter: {type(flt).__name__} is not a JSON value")


def namespace_matches(condition: MatchCondition, namespace: Namespace) -> bool:
    """Whether ``namespace`` starts (``prefix``) or ends (``suffix``) with the condition's
    path, ``"*"`` matching any label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValidationError(
            f"match_type must be 'prefix' or 'suffix', not {condition.match_type!r}"
        )
    return all(wanted in ("*", label) for label, wanted in pairs)


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: bool(a == b),
    "$ne": lambda a, b: bool(a != b),
    "$gt": lambda a, b: float(a) > float(b),
    "$gte": lambda a, b: float(a) >= float(b),
    "$lt": lambda a, b: float(a) < float(b),
    "$lte": lambda a, b: float(a) <= float(b),
}


def _compare(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if any(str(k).startswith("$") for k in wanted):
            return all(_operator(op, actual, operand) for op, operand in wanted.items())
        return isinstance(actual, Mapping) and all(
            _compare(actual.get(k), v) for k, v in wanted.items()
        )
    if isinstance(wanted, list | tuple):
        return (isinstance(actual, list | tuple) and len(actual) == len(wanted)
                and all(_compare(a, w) for a, w in zip(actual, wanted, strict=True)))  # fmt: skip
    return bool(actual == wanted)


def _operator(name: str, actual: Any, operand: Any) -> bool:
    try:
        return _OPERATORS[name](actual, operand)
    except (TypeError, ValueError):  # a missing or non-numeric field is not greater than 3
        return False


def _scope(namespace: Sequence[str]) -> tuple[str, str | None]:
    """The user and project a namespace names: its first and second labels."""
    if not namespace:
        raise ValidationError("namespace must name the user first: (user_id, [project, ...])")
    return namespace[0], namespace[1] if len(namespace) > 1 else None


def _value(value: Mapping[str, Any] | None) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(f"value must be a mapping, not {type(value).__name__}")
    return validate.metadata(value, "value")


class Entry(NamedTuple):
    """What a memory's metadata says of its LangGraph item."""

    namespace: Namespace
    key: str
    value: Mapping[str, Any]


def _entry(memory: Memory) -> Entry | None:
    """The LangGraph item a memory holds, or ``None`` for a memory the store did not write."""
    entry = memory.provenance.metadata.get(METADATA_KEY)
    if not isinstance(entry, Mapping):
        return None
    return Entry(tuple(entry["namespace"]), str(entry["key"]), entry["value"])


def _item(memory: Memory) -> Item | None:
    entry = _entry(memory)
    if entry is None:
        return None
    return Item(value=dict(entry.value), key=entry.key, namespace=entry.namespace,
                created_at=memory.created_at, updated_at=memory.updated_at)  # fmt: skip


def _entries(memories: Iterable[Memory], prefix: Namespace) -> Iterator[tuple[Memory, Entry]]:
    """The store's items among ``memories`` whose namespace starts with ``prefix`` (no
    ``Item`` built: a search builds only its page's)."""
    for memory in memories:
        entry = _entry(memory)
        if entry is not None and entry.namespace[: len(prefix)] == prefix:
            yield memory, entry
