"""The feedback loop: usefulness from explicit feedback, co-occurrence from good contexts.

- **Usefulness** (the ``composite`` profile's input, default 0.5) moves toward the feedback
  target by a fixed share: ``u ← u + rate × (target − u)`` with ``rate = 0.2`` (setting
  ``feedback_rate``), target 1.0 for helpful, 0.0 for unhelpful, or a score in [0, 1]. It
  stays in [0, 1] by construction, and after *n* identical feedbacks it has covered
  ``1 − 0.8ⁿ`` of the way (half after 3, 90% after 10): one bad day cannot bury a memory.
- **Co-occurrence** counts, for each pair of memories injected together in a context that
  got positive feedback (target above 0.5), how many such contexts they shared. At
  recall, a candidate's bonus (the ``gated`` profile's co-occurrence term, up to +0.10)
  is ``min(1, n / 5)`` where *n* is its largest count with one of the five best-scoring
  candidates: knowledge that keeps working together surfaces together.
- **Context ids**: every ``context()`` that injects memories records which ones under its
  id (kept ``context_retention_days``), so feedback can point at the context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import combinations
from typing import Any

from engrain import validate
from engrain.errors import NotFoundError, ValidationError
from engrain.store.base import Patch, State, Store, Toward

#: Share of the distance to the target one feedback covers (``feedback_rate``).
FEEDBACK_RATE = 0.2
#: Targets above this are positive: they teach co-occurrence.
POSITIVE = 0.5
#: Positive contexts shared at which the co-occurrence bonus is full.
COOCCURRENCE_PLATEAU = 5
#: How many of the best-scoring candidates anchor the co-occurrence bonus.
ANCHORS = 5

#: State namespaces and keys.
CONTEXTS = "contexts"
COOCCURRENCE = "cooccurrence"
PAIRS = "pairs"

Pairs = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True)
class FeedbackResult:
    """What one feedback changed: each memory's usefulness before and after, and how many
    pairs of memories learned one more shared positive context."""

    target: float
    usefulness: dict[str, tuple[float, float]] = field(default_factory=dict)
    pairs_learned: int = 0


def expire(store: Store, user_id: str, now: datetime, retention_days: int) -> int:
    """Drop the user's context records written more than ``retention_days`` before ``now``
    (as the store stamped them); how many."""
    retention = timedelta(days=retention_days)
    if now - datetime.min.replace(tzinfo=UTC) <= retention:
        return 0  # a ``now`` near year 1 has nothing older to drop
    return store.expire_state(user_id, CONTEXTS, now - retention)


def check_document(namespace: str, key: str, value: Mapping[str, Any]) -> None:
    """Refuse a state document of :data:`COOCCURRENCE` or :data:`CONTEXTS` (an import's)
    in another shape than this module writes: every call reading it would fail. The
    co-occurrence document is ``{"pairs": {id: {id: count}}}`` under the key ``pairs``; a
    context record ``{"memory_ids": [id, …], "at": ISO time, "feedback": [target, …],
    "learned": bool}`` (the last two optional)."""
    if namespace == COOCCURRENCE:
        if key != PAIRS:
            raise ValidationError(f"key: the {COOCCURRENCE} document's key is {PAIRS!r}")
        pairs = value.get(PAIRS, {})
        if not isinstance(pairs, Mapping) or not all(
            isinstance(counts, Mapping) and all(type(n) is int and n >= 0 for n in counts.values())
            for counts in pairs.values()
        ):
            raise ValidationError(f"value.{PAIRS} must map memory ids to {{id: count}} objects "
                                  "of counts >= 0")  # fmt: skip
    elif namespace == CONTEXTS:
        ids = value.get("memory_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValidationError("value.memory_ids must be a list of memory ids")
        if not isinstance(value.get("at"), str) or validate.timestamp(value["at"], "at") is None:
            raise ValidationError("value.at must be an ISO-8601 time")
        targets = value.get("feedback", [])
        if not isinstance(targets, list):
            raise ValidationError("value.feedback must be a list of numbers in [0, 1]")
        for i, target in enumerate(targets):
            validate.unit(target, f"value.feedback[{i}]")
        if not isinstance(value.get("learned", False), bool):
            raise ValidationError("value.learned must be true or false")


def feedback_target(helpful: bool | None, score: float | None) -> float:
    """The usefulness target of one feedback: exactly one of ``helpful`` or ``score``."""
    if (helpful is None) == (score is None):
        raise ValidationError("give exactly one of helpful (true/false) or score (0..1)")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            raise ValidationError("score must be a number between 0 and 1")
        return float(score)
    return 1.0 if helpful else 0.0


def updated_usefulness(current: float, target: float, rate: float = FEEDBACK_RATE) -> float:
    """``current`` moved ``rate`` of the way to ``target``, clamped to [0, 1]."""
    return Toward(target, rate).of(current)


def learn_pairs(doc: Mapping[str, Any] | None, ids: Sequence[str]) -> dict[str, Any]:
    """The co-occurrence document with one more shared positive context for every pair of
    ``ids`` (stored both ways, so a lookup is one dict access)."""
    pairs: dict[str, dict[str, int]] = {
        k: dict(v) for k, v in ((doc or {}).get(PAIRS) or {}).items()
    }
    for a, b in combinations(sorted(set(ids)), 2):
        pairs.setdefault(a, {})[b] = pairs.get(a, {}).get(b, 0) + 1
        pairs.setdefault(b, {})[a] = pairs.get(b, {}).get(a, 0) + 1
    return {PAIRS: pairs}


def forget_pairs(doc: Mapping[str, Any] | None, ids: Sequence[str]) -> dict[str, Any] | None:
    """The document without the deleted ``ids`` (``None`` if it had none of them)."""
    pairs = (doc or {}).get(PAIRS) or {}
    gone = set(ids)
    if not gone & (set(pairs) | {o for v in pairs.values() for o in v}):
        return None
    kept = {
        k: {o: n for o, n in v.items() if o not in gone} for k, v in pairs.items() if k not in gone
    }
    return {PAIRS: {k: v for k, v in kept.items() if v}}


def _without(doc: Mapping[str, Any] | None, ids: Sequence[str]) -> Mapping[str, Any] | None:
    kept = forget_pairs(doc, ids)
    return doc if kept is None else kept


def unlearned(store: Store, user_id: str, ids: Sequence[str]) -> list[State]:
    """What forgetting ``ids`` writes to the co-occurrence document: a change dropping
    their pairs from the document as the forget's write finds it (so a lesson another
    process writes meanwhile is kept), or nothing if the document holds none of them now."""
    if forget_pairs(store.get_state(user_id, COOCCURRENCE, PAIRS), ids) is None:
        return []
    return [State(user_id, COOCCURRENCE, PAIRS, None, change=partial(_without, ids=list(ids)))]


def cooccurrence_bonus(pairs: Pairs, candidate: str, anchors: Sequence[str]) -> float:
    """The candidate's bonus in [0, 1]: its largest shared-context count with an anchor
    (another of the best-scoring candidates) over :data:`COOCCURRENCE_PLATEAU`."""
    mine = pairs.get(candidate)
    if not mine:
        return 0.0
    best = max((mine.get(a, 0) for a in anchors if a != candidate), default=0)
    return min(1.0, best / COOCCURRENCE_PLATEAU)


def given(
    record: Mapping[str, Any] | None, *, target: float, learned: bool
) -> dict[str, Any] | None:
    """The context record with one more feedback (``target``), marked learned once a
    feedback taught its pairs; ``None`` (nothing written) if the record is gone."""
    if record is None:
        return None
    return {**record, "feedback": [*record.get("feedback", []), target],
            "learned": bool(record.get("learned")) or learned}  # fmt: skip


def context_record(memory_ids: Sequence[str], at: datetime) -> dict[str, Any]:
    """What a context id remembers: the memories it injected, and when."""
    return {"memory_ids": list(memory_ids), "at": at.isoformat(), "feedback": []}


@dataclass(frozen=True)
class Feedback:
    """What one feedback writes: usefulness patches and state documents, and its result."""

    result: FeedbackResult
    patches: tuple[Patch, ...] = ()
    state: tuple[State, ...] = ()


def plan(
    store: Store,
    user_id: str,
    context_id: str | None,
    memory_ids: Sequence[str],
    target: float,
    rate: float = FEEDBACK_RATE,
) -> Feedback:
    """The changes of one feedback toward ``target`` on the memories of ``context_id``
    (:class:`NotFoundError` if unknown or expired) and ``memory_ids``: each memory still
    there moves its usefulness; a positive first feedback on a context teaches its pairs,
    and the context record remembers the feedback.

    The writes are moves from what the store holds when they are written (a
    :class:`~engrain.store.base.Toward` usefulness, ``change`` documents), not values
    computed from this read: feedback given at once by other processes adds up instead of
    being overwritten (``bench/attacks/feedback_race.py``). The result's usefulness pairs
    are this read's."""
    ids = list(memory_ids)
    record = None
    if context_id is not None:
        record = store.get_state(user_id, CONTEXTS, context_id)
        if record is None:
            raise NotFoundError(f"no context {context_id!r} for user {user_id!r} "
                                "(unknown, or older than context_retention_days)")  # fmt: skip
        ids = list(dict.fromkeys([*record["memory_ids"], *ids]))
    found = store.get(user_id, ids)
    usefulness = {m.id: (m.usefulness, updated_usefulness(m.usefulness, target, rate))
                  for m in found}  # fmt: skip
    move = Toward(target, rate)
    patches = tuple(Patch(user_id, i, {"usefulness": move}) for i in usefulness)
    state: list[State] = []
    learned = 0
    if record is not None and context_id is not None:
        alive = [m.id for m in found if m.id in record["memory_ids"]]
        if target > POSITIVE and not record.get("learned") and len(alive) > 1:
            lesson = partial(learn_pairs, ids=alive)
            state.append(State(user_id, COOCCURRENCE, PAIRS, None, change=lesson))
            learned = len(alive) * (len(alive) - 1) // 2
        noted = partial(given, target=target, learned=learned > 0)
        state.append(State(user_id, CONTEXTS, context_id, None, change=noted))
    return Feedback(FeedbackResult(target, usefulness, learned), patches, tuple(state))


class StartedPairs(Mapping[str, Mapping[str, int]]):
    """The user's co-occurrence pairs as a mapping read when first looked at: the gate's
    read of them (``Engine._gate``) starts with its other reads (on a store that overlaps
    them) instead of one round trip before them, and is waited for only when scoring
    needs it (a trivial message never does)."""

    def __init__(self, read: Callable[[], Mapping[str, Any] | None]) -> None:
        self._read = read
        self._pairs: Mapping[str, Mapping[str, int]] | None = None

    def _resolved(self) -> Mapping[str, Mapping[str, int]]:
        if self._pairs is None:
            self._pairs = (self._read() or {}).get(PAIRS) or {}
        return self._pairs

    def __getitem__(self, key: str) -> Mapping[str, int]:
        return self._resolved()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolved())

    def __len__(self) -> int:
        return len(self._resolved())
