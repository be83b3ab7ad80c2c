"""Two reviewers resolve one pair at once (docs/concurrency.md, session 24, h2;
``bench/attacks/resolve_race.py``).

``resolve`` read the pair, planned and wrote under the engine's lock, which orders one
process's threads only. Two engines resolving one pair in opposite directions both
wrote: ``keep`` / ``keep`` forgot **both** memories (each call reporting the one the other
forgot as kept), ``correct`` / ``correct`` left each superseded by the other, nothing
served. Now the pair as planned goes with the write as claims (``KeyClaim.live``): the
second write is refused and planned again, and refused as the second of two sequential
calls is. Each test runs on the in-memory, SQLite and PostgreSQL stores."""

from __future__ import annotations

import pytest

from engrain import Engine, review
from engrain.errors import KeyChangedError, NotFoundError, ValidationError
from engrain.store import KeyClaim, Store

from .conftest import NOW
from .test_store_contract import mem
from .two_engines import between

pytestmark = pytest.mark.filterwarnings("ignore::engrain.validate.UserIdWarning")

USER = "ada"


def _pair(engine: Engine) -> tuple[str, str]:
    x = engine.remember("alpha: the standup starts at nine", USER, now=NOW).memory_id
    y = engine.remember("beta: lunch is in the blue room", USER, now=NOW).memory_id
    assert x is not None and y is not None and x != y
    return x, y


def _live(engine: Engine) -> list[str]:
    return sorted(m.id for m in engine.list(USER) if m.superseded_by is None)


def test_keep_against_keep_in_the_other_order_is_refused_and_one_memory_stays(
    engine: Engine, other: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    x, y = _pair(engine)
    monkeypatch.setattr(review, "plan", review.plan)  # restored after the test
    between(review, "plan", lambda: other.resolve(y, x, USER, "keep", now=NOW))
    with pytest.raises(NotFoundError):
        engine.resolve(x, y, USER, "keep", now=NOW)
    assert _live(engine) == [y]


def test_correct_against_correct_in_the_other_order_is_refused(
    engine: Engine, other: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    x, y = _pair(engine)
    monkeypatch.setattr(review, "plan", review.plan)
    between(review, "plan", lambda: other.resolve(y, x, USER, "correct", now=NOW))
    with pytest.raises(ValidationError, match="already superseded"):
        engine.resolve(x, y, USER, "correct", now=NOW)
    assert _live(engine) == [y]


def test_keep_planned_before_the_others_correction_keeps_its_memory(
    engine: Engine, other: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's ``y`` corrects ``x`` between A's plan and write; A's keep of ``x`` is planned
    again and keeps ``x`` over ``y`` as it would one after the other."""
    x, y = _pair(engine)
    monkeypatch.setattr(review, "plan", review.plan)
    plans = between(review, "plan", lambda: other.resolve(y, x, USER, "correct", now=NOW))
    done = engine.resolve(x, y, USER, "keep", now=NOW)
    assert len(plans) == 3  # A, B, A again
    assert (done.kept, done.forgotten) == ((x,), (y,))
    assert _live(engine) == [x]


def test_keep_of_a_memory_the_other_superseded_brings_it_back(engine: Engine) -> None:
    x, y = _pair(engine)
    engine.resolve(y, x, USER, "correct", now=NOW)
    engine.resolve(x, y, USER, "keep", now=NOW)
    assert _live(engine) == [x]
    assert engine.get(x, USER).superseded_by is None


def test_keep_of_a_memory_a_third_superseded_is_refused_and_writes_nothing(
    engine: Engine,
) -> None:
    x, y = _pair(engine)
    z = engine.remember("gamma: parking is behind the north gate", USER, now=NOW).memory_id
    assert z is not None
    engine.resolve(z, x, USER, "correct", now=NOW)
    before = sorted((m.id, m.superseded_by) for m in engine.list(USER))
    with pytest.raises(ValidationError, match="already superseded"):
        engine.resolve(x, y, USER, "keep", now=NOW)
    assert sorted((m.id, m.superseded_by) for m in engine.list(USER)) == before


def test_a_claim_on_a_memory_changed_meanwhile_refuses_the_write(store: Store) -> None:
    """The store's side: a by-id claim holds while its memory is stored (and, if it was
    not superseded, still is not); otherwise the write is refused and writes nothing."""
    a, b, c = mem("a", USER), mem("b", USER), mem("c", USER)
    store.write([a, b])
    claim = KeyClaim.live(a)
    store.write([c], claims=[claim])  # holds
    store.write(patches=[review.Patch(USER, a.id, {"superseded_by": b.id})])
    with pytest.raises(KeyChangedError, match=f"memory {a.id!r}"):
        store.write(deletes=[b], claims=[claim])
    assert sorted(m.id for m in store.query(USER)) == sorted([a.id, b.id, c.id])
    store.write(deletes=[b], claims=[KeyClaim.live(store.get(USER, [a.id])[0])])  # as read now
    store.write(deletes=[c])
    with pytest.raises(KeyChangedError):
        store.write([mem("d", USER)], claims=[KeyClaim.live(c)])
    assert [m.id for m in store.query(USER)] == [a.id]
