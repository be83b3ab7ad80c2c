"""A forgotten memory is gone from what was made from it (``forgotten.py``, session 23 h2,
``bench/attacks/forget_everywhere.py``): the session summary written from it (with
``Settings.forget_summaries``; by default a summary is a memory of its own and stays), and a
stored tier set holding it; also when the summary or the tier set is committed by another engine
between the forget's read and its write, or after it."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.model import Kind, Memory
from engrain.store import MemoryStore, Store
from engrain.tiers.cache import NAMESPACE

from .conftest import NOW, make_settings

MARKER = "Zembrilo"
LATER = NOW + timedelta(days=30)


def engine_on(store: Store, tmp_path: Path, *, forget_summaries: bool = True) -> Engine:
    """An engine of its own (its own lock, as another process has) over ``store``; each
    turn of a session is a memory of its own (small chunks); summaries go with their
    forgotten sources unless ``forget_summaries=False`` (the default setting)."""
    settings = make_settings(
        tmp_path,
        forget_summaries=forget_summaries,
        auto_compress=False,
        max_chunk_tokens=20,
        sessions_to_compress=2,
        min_chunk_tokens=0,
    )
    return Engine(settings=settings, store=store, embedder=HashEmbedder())


def sessions(engine: Engine, count: int = 4) -> None:
    """``count`` sessions of "ada"; the first holds the marker in a turn of its own."""
    people = ["Harold", "Ingrid", "Tomasz", "Beatriz", "Oluwaseun", "Keiko"]
    topics = [
        "database failover",
        "office lease",
        "quarterly hiring",
        "garden fence",
        "printer drivers",
        "violin lessons",
    ]
    for s in range(count):
        turns = [
            {"speaker": "user", "text": f"We met {people[s]} about the {topics[s]} today."},
            {"speaker": "assistant", "text": f"Noted: {people[s]} handles the {topics[s]}."},
        ]
        if s == 0:
            turns.append(
                {
                    "speaker": "user",
                    "text": f"My passport number is {MARKER} 55120, valid to March 2031.",
                }
            )
        engine.ingest_conversation(turns, "ada", session_id=f"s{s}", now=NOW + timedelta(days=s))


def holders(engine: Engine, marker: str = MARKER) -> list[Memory]:
    return [m for m in engine.list("ada", limit=None) if marker in m.content]


def everywhere(engine: Engine, marker: str = MARKER) -> dict[str, bool]:
    """Where ``marker`` can still be read after its memory was forgotten."""
    query = f"passport number {marker} 55120"
    return {
        "list": bool(holders(engine, marker)),
        "recall": any(
            marker in m.content
            for m in engine.recall(query, "ada", include_compressed=True).memories
        ),
        "context": marker in engine.context(query, "ada", now=LATER).text,
        "export": marker in json.dumps(list(engine.export_records("ada")), default=str),
        "stored tiers": marker
        in json.dumps([s.value for s in engine.store.states("ada", NAMESPACE)]),
    }


def test_forgetting_a_compressed_memory_forgets_the_summary_written_from_it(
    store: Store, tmp_path: Path
) -> None:
    engine = engine_on(store, tmp_path)
    sessions(engine)
    report = engine.compress("ada", force=True, now=LATER)
    assert "s0" in report.sessions
    source = next(m for m in holders(engine) if m.kind is not Kind.SUMMARY)
    assert source.compressed
    summary = next(m for m in holders(engine) if m.kind is Kind.SUMMARY)
    siblings = [m.id for m in engine.list("ada", session_id="s0", limit=None) if m.id != source.id]
    assert siblings  # the session holds more than the marker's memory

    assert engine.forget(source.id, "ada") == 1
    assert not any(everywhere(engine).values()), everywhere(engine)
    assert engine.store.get("ada", [summary.id]) == []
    # the session's other memories are recalled on their own again, and compressed anew
    assert not any(m.compressed for m in engine.store.get("ada", siblings))
    again = engine.compress("ada", force=True, now=LATER)
    assert "s0" in again.sessions
    assert all(MARKER not in m.content for m in engine.list("ada", limit=None))


def test_forgetting_a_summary_s_source_keeps_other_summaries(store: Store, tmp_path: Path) -> None:
    engine = engine_on(store, tmp_path)
    sessions(engine)
    engine.compress("ada", force=True, now=LATER)
    before = {m.id for m in engine.list("ada", limit=None) if m.kind is Kind.SUMMARY}
    assert len(before) == 2  # s0 and s1
    source = next(m for m in holders(engine) if m.kind is not Kind.SUMMARY)
    engine.forget(source.id, "ada")
    after = {m.id for m in engine.list("ada", limit=None) if m.kind is Kind.SUMMARY}
    assert len(after) == 1 and after < before


def test_a_stored_tier_set_holding_a_forgotten_memory_is_dropped(
    store: Store, tmp_path: Path
) -> None:
    engine = engine_on(store, tmp_path)
    kept = engine.remember(
        "We deploy from the main branch every Tuesday.", "ada", kind="decision", now=NOW
    ).memory_id
    doomed = engine.remember(
        f"The vault code is 4417, ask {MARKER}.", "ada", kind="decision", now=NOW
    ).memory_id
    compiled = engine.tiers("ada", now=NOW)
    assert MARKER in json.dumps(compiled.to_dict())
    engine.forget(doomed, "ada")
    assert engine.tier_cache.stored("ada", None) is None  # what the inspector's page shows
    assert not any(everywhere(engine).values()), everywhere(engine)
    rebuilt = engine.tiers("ada", now=NOW)
    assert kept in {i for part in rebuilt.tiers.values() for i in part.memory_ids}


def test_a_forget_of_a_memory_no_tier_holds_keeps_the_stored_set(
    store: Store, tmp_path: Path
) -> None:
    engine = engine_on(store, tmp_path)
    engine.remember(
        "We deploy from the main branch every Tuesday.", "ada", kind="decision", now=NOW
    )
    other = engine.remember("lunch was soup", "ada", kind="event", now=NOW).memory_id
    engine.tiers("ada", now=NOW)
    engine.forget(other, "ada")
    assert engine.tier_cache.stored("ada", None) is not None  # stale, kept


class Hooked:
    """``store`` whose ``method`` runs ``before`` once, the first time it is called with
    arguments ``when`` accepts, then does its own work (another engine's write landing
    at that moment)."""

    def __init__(
        self, store: Store, method: str, when: Callable[..., bool], before: Callable[[], Any]
    ) -> None:
        self._store, self._method, self._when, self._before = store, method, when, before
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._store, name)
        if name != self._method:
            return real

        def hooked(*args: Any, **kwargs: Any) -> Any:
            if not self.fired and self._when(*args, **kwargs):
                self.fired = True
                self._before()
            return real(*args, **kwargs)

        return hooked


def test_a_summary_written_after_its_source_was_forgotten_is_removed(
    store: Store, tmp_path: Path
) -> None:
    """A compression that read the session before a forget and writes after it."""
    other = engine_on(store, tmp_path)
    sessions(other)
    source = next(m for m in holders(other))
    hooked = Hooked(
        store, "write", lambda *a, **k: bool(a and a[0]), lambda: other.forget(source.id, "ada")
    )
    compressing = engine_on(hooked, tmp_path)  # type: ignore[arg-type]
    compressing.compress("ada", force=True, now=LATER)
    assert hooked.fired
    assert not any(everywhere(other).values()), everywhere(other)
    assert not any(m.compressed for m in other.list("ada", session_id="s0", limit=None))


def test_a_summary_committed_between_a_forgets_read_and_write_is_removed(
    store: Store, tmp_path: Path
) -> None:
    other = engine_on(store, tmp_path)
    sessions(other)
    source = next(m for m in holders(other))
    hooked = Hooked(
        store,
        "write",
        lambda *a, **k: bool(k.get("deletes")),
        lambda: other.compress("ada", force=True, now=LATER),
    )
    forgetting = engine_on(hooked, tmp_path)  # type: ignore[arg-type]
    assert forgetting.forget(source.id, "ada") == 1
    assert hooked.fired
    assert not any(everywhere(other).values()), everywhere(other)


def test_a_tier_set_compiled_before_a_forget_and_stored_after_it_is_dropped(
    store: Store, tmp_path: Path
) -> None:
    other = engine_on(store, tmp_path)
    doomed = other.remember(
        f"The vault code is 4417, ask {MARKER}.", "ada", kind="decision", now=NOW
    ).memory_id
    hooked = Hooked(
        store, "write", lambda *a, **k: bool(k.get("state")), lambda: other.forget(doomed, "ada")
    )
    compiling = engine_on(hooked, tmp_path)  # type: ignore[arg-type]
    compiling.tiers("ada", now=NOW)
    assert hooked.fired
    assert other.tier_cache.stored("ada", None) is None
    assert not any(everywhere(other).values()), everywhere(other)


def test_compiled_tier_sets_held_in_process_are_bounded(tmp_path: Path) -> None:
    """A process serving many users keeps :data:`HELD_SETS` compiled sets, the least
    recently served dropped (session 23 h2, ``bench/attacks/many_users.py``: every user's
    set, memories included, stayed for the life of the process); a dropped set is read
    from the store when next served."""
    from engrain.tiers.cache import HELD_SETS

    engine = engine_on(MemoryStore(), tmp_path)
    users = [f"user{n}" for n in range(HELD_SETS + 8)]
    for user in users:
        engine.remember(f"{user} deploys on Tuesdays.", user, kind="decision", now=NOW)
        engine.tiers(user, now=NOW)
    assert engine.tier_cache.fresh(users[0], None) is not None  # read back from the store
    assert len(engine.tier_cache._fresh) == HELD_SETS
    assert (users[0], "*") in engine.tier_cache._fresh  # served last: kept
    assert (users[1], "*") not in engine.tier_cache._fresh


def test_by_default_a_summary_stays_when_a_memory_it_was_written_from_is_forgotten(
    store: Store, tmp_path: Path
) -> None:
    """``forget_summaries`` off (the default): the forget removes the memory it names and
    nothing else a user stored or listed; the summary keeps its id and its sources stay
    compressed."""
    engine = engine_on(store, tmp_path, forget_summaries=False)
    assert not make_settings(tmp_path).forget_summaries  # the default
    sessions(engine)
    engine.compress("ada", force=True, now=LATER)
    source = next(m for m in holders(engine) if m.kind is not Kind.SUMMARY)
    summary = next(m for m in holders(engine) if m.kind is Kind.SUMMARY)
    siblings = [m.id for m in engine.list("ada", session_id="s0", limit=None)
                if m.id not in (source.id, summary.id)]  # fmt: skip

    assert engine.forget(source.id, "ada") == 1
    assert engine.store.get("ada", [source.id]) == []
    assert [m.id for m in engine.store.get("ada", [summary.id])] == [summary.id]
    assert all(m.compressed for m in engine.store.get("ada", siblings))
