"""An explicit key meets ``corrects=``: one live memory per key (docs/concurrency.md,
session 24, h2; ``bench/attacks/key_corrects.py``).

A key is one entry (sessions 22–23); ``corrects=id`` supersedes that memory. Before, a
correction never looked at keys: ``remember(v2, key=K, corrects=X)`` left K's memory live
beside the new one (two live memories under K), and a correction of K's memory did not
take K, so the next ``remember(v3, key=K)`` stored a new memory and the correction's
value, superseded in meaning, was still served beside it. Now a correction takes its
target's key when it names none (and is of the target's kind, or a ``correction``), the
live memory holding the key a correction holds is superseded too, and both lookups go
with the write as claims, so another engine's write in between has the call planned
again. Each test runs on the in-memory, SQLite and PostgreSQL stores."""

from __future__ import annotations

from typing import Any

import pytest

from engrain import Engine
from engrain.errors import ValidationError
from engrain.model import Memory

from .conftest import NOW
from .two_engines import between

pytestmark = pytest.mark.filterwarnings("ignore::engrain.validate.UserIdWarning")

USER = "ada"
K = "timezone"
V1 = "My timezone is Pacific time in Seattle"
V2 = "Amber quartz falcon: the office clock follows Berlin"
V3 = "Cedar magnet lynx: we moved and the clock is Tokyo now"
OTHER = "Lunch is served at noon in the blue room"


def _live(engine: Engine) -> list[Memory]:
    return [m for m in engine.list(USER) if m.superseded_by is None]


def _under_key(engine: Engine) -> list[Memory]:
    return [m for m in _live(engine) if m.key == K]


def _history(memory: Memory) -> list[str]:
    return [h["content"] for h in memory.provenance.metadata.get("history", [])]


def _id(outcome: Any) -> str:
    assert outcome.memory_id is not None
    return str(outcome.memory_id)


def test_a_keyed_correction_supersedes_the_memory_holding_its_key(engine: Engine) -> None:
    held = _id(engine.remember(V1, USER, key=K, now=NOW))
    other = _id(engine.remember(OTHER, USER, now=NOW))
    fix = engine.remember(V2, USER, key=K, corrects=other, now=NOW)
    assert fix.reason == f"supersedes {other}; replaces {held} under key {K!r}"
    assert [m.id for m in _under_key(engine)] == [fix.memory_id]
    by_id = {m.id: m for m in engine.list(USER)}
    assert by_id[held].superseded_by == fix.memory_id
    assert by_id[other].superseded_by == fix.memory_id
    assert [m.content for m in _live(engine)] == [V2]


def test_a_keyed_correction_of_the_keys_memory_supersedes_it_once(engine: Engine) -> None:
    held = _id(engine.remember(V1, USER, key=K, now=NOW))
    fix = engine.remember(V2, USER, key=K, corrects=held, now=NOW)
    assert fix.reason == f"supersedes {held}"
    assert [m.id for m in _under_key(engine)] == [fix.memory_id]


@pytest.mark.parametrize("kind", ["fact", "correction"])
def test_a_correction_of_a_keyed_memory_takes_its_key(engine: Engine, kind: str) -> None:
    held = _id(engine.remember(V1, USER, key=K, now=NOW))
    fix = engine.remember(V2, USER, kind, corrects=held, now=NOW)
    assert [m.id for m in _under_key(engine)] == [fix.memory_id]
    later = engine.remember(V3, USER, key=K, now=NOW)  # the key's next value updates it
    assert (later.action, later.memory_id) == ("merged", fix.memory_id)
    (live,) = _live(engine)
    assert (live.content, live.key, _history(live)) == (V3, K, [V2])


def test_a_correction_of_another_kind_leaves_the_key_to_its_kind(engine: Engine) -> None:
    """A decision correcting a keyed fact is a decision of its own: the fact's entry is
    retired (superseded), and the decision holds no key (keys are per kind)."""
    held = _id(engine.remember(V1, USER, key=K, now=NOW))
    fix = engine.remember(V2, USER, "decision", corrects=held, now=NOW)
    (live,) = _live(engine)
    assert (live.id, live.key, live.kind.value) == (fix.memory_id, None, "decision")


def test_two_keyed_corrections_leave_one_memory_under_the_key(engine: Engine) -> None:
    engine.remember(V1, USER, key=K, now=NOW)
    first = _id(engine.remember(OTHER, USER, now=NOW))
    second = _id(engine.remember("Parking is behind the north gate", USER, now=NOW))
    engine.remember(V2, USER, key=K, corrects=first, now=NOW)
    last = engine.remember(V3, USER, key=K, corrects=second, now=NOW)
    assert [m.content for m in _live(engine)] == [V3]
    assert [m.id for m in _under_key(engine)] == [last.memory_id]


def test_an_import_with_a_keyed_correction_leaves_one_memory_under_the_key(
    engine: Engine,
) -> None:
    """The same rule for the records of one import: a keyed correction supersedes the
    memory an earlier record of the import put under its key."""
    other = _id(engine.remember(OTHER, USER, now=NOW))
    records = [
        {"type": "remember", "user_id": USER, "content": V1, "key": K},
        {"type": "remember", "user_id": USER, "content": V2, "key": K, "corrects": other},
    ]
    engine.import_records(records, now=NOW)
    assert [m.content for m in _live(engine)] == [V2]
    assert [m.content for m in _under_key(engine)] == [V2]


# -- another engine writes between this engine's plan and its write --------------------------


def test_a_keyed_write_planned_before_a_correction_of_the_keys_memory_updates_it(
    engine: Engine, other: Engine
) -> None:
    """Engine A plans ``remember(v3, key=K)`` (K's memory found); B corrects that memory;
    A's claim no longer holds (the memory is superseded), A plans again and updates B's
    correction, which took K: one live memory, A's value with B's in its history."""
    held = _id(engine.remember(V1, USER, key=K, now=NOW))
    fix: list[Any] = []
    plans = between(
        engine.planner, "item", lambda: fix.append(other.remember(V2, USER, corrects=held, now=NOW))
    )
    outcome = engine.remember(V3, USER, key=K, now=NOW)
    assert [p.action for p in plans] == ["merged", "merged"]  # planned twice
    assert outcome.memory_id == fix[0].memory_id
    (live,) = _live(engine)
    assert (live.content, live.key, _history(live)) == (V3, K, [V2])


def test_a_keyed_correction_planned_before_another_takes_the_key_supersedes_both(
    engine: Engine, other: Engine
) -> None:
    """A plans a keyed correction of X (K's memory found); B's keyed correction of Z
    commits, superseding K's memory; A plans again and supersedes B's memory too."""
    engine.remember(V1, USER, key=K, now=NOW)
    x = _id(engine.remember(OTHER, USER, now=NOW))
    z = _id(engine.remember("Parking is behind the north gate", USER, now=NOW))
    between(engine.planner, "item", lambda: other.remember(V2, USER, key=K, corrects=z, now=NOW))
    outcome = engine.remember(V3, USER, key=K, corrects=x, now=NOW)
    assert [m.id for m in _live(engine)] == [outcome.memory_id]


@pytest.mark.parametrize("key", [K, None])
def test_a_correction_of_a_memory_another_engine_corrected_meanwhile_is_refused(
    engine: Engine, other: Engine, key: str | None
) -> None:
    """As one after the other: correcting a memory already superseded is refused, and
    writes nothing; B's correction is the one live value."""
    held = _id(engine.remember(V1, USER, key=key, now=NOW))
    fix: list[Any] = []
    between(
        engine.planner, "item", lambda: fix.append(other.remember(V2, USER, corrects=held, now=NOW))
    )
    with pytest.raises(ValidationError, match="already superseded"):
        engine.remember(V3, USER, corrects=held, now=NOW)
    assert [m.id for m in _live(engine)] == [fix[0].memory_id]
