"""``Engine.ingest_conversations`` (issue 18): several sessions in one call, the next one
embedded while this one is planned and written. What is stored is what one
``ingest_conversation`` per session stores; a malformed session refuses the whole call; a
session that fails later writes nothing of itself, the ones before it stay whole."""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from engrain import AsyncEngine, Engine
from engrain.embed import HashEmbedder
from engrain.embed.base import Matrix
from engrain.errors import EmbeddingError, StoreError, ValidationError
from engrain.model import IngestReport, Memory, Turn
from engrain.store import MemoryFilter, MemoryStore
from engrain.store.sqlite import SQLiteStore

from .aio import run_async
from .conftest import NOW, make_settings

USERS = ("u0", "u1", "u2")


def _sessions(count: int, users: Sequence[str] = USERS) -> list[dict[str, Any]]:
    rng = random.Random(count)
    said = ["I moved to Lisbon in 2021", "my sister Ana is a nurse", "I prefer tea to coffee",
            "we ran the Berlin marathon", "the garden needs water", "see you Friday"]  # fmt: skip
    sessions = []
    for s in range(count):
        turns = [Turn(("ada", "bob")[i % 2], f"{rng.choice(said)} (s{s}, t{i})", f"D{s}:{i}")
                 for i in range(rng.randint(1, 12))]  # fmt: skip
        restated = [Turn("ada", "I moved to Lisbon in 2021 and I love the light there")]
        sessions.append({"turns": turns + restated, "user_id": users[s % len(users)],
                         "session_id": f"session_{s}", "now": NOW})  # fmt: skip
    return sessions


def _stored(store: Any, users: Sequence[str] = USERS) -> list[tuple[object, ...]]:
    rows = []
    for user in users:
        for m in store.query(user, MemoryFilter(), limit=1000):
            assert m.embedding is not None
            rows.append((m.user_id, m.session_id, m.content, m.importance, m.memory_type,
                         m.provenance.turn_ids, m.created_at, m.event_at,
                         m.embedding.tobytes()))  # fmt: skip
    return sorted(rows, key=repr)


def _outcomes(reports: Sequence[IngestReport]) -> list[list[tuple[object, ...]]]:
    return [[(o.action, o.content, o.importance, o.turn_ids) for o in r.outcomes]
            for r in reports]  # fmt: skip


def _engine(tmp_path: Path, store: Any, embedder: Any = None) -> Engine:
    return Engine(settings=make_settings(tmp_path, min_chunk_tokens=0), store=store,
                  embedder=embedder or HashEmbedder())  # fmt: skip


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_the_sessions_are_stored_as_calls_per_session_store_them(
    tmp_path: Path, backend: str
) -> None:
    sessions = _sessions(9)

    def new_store(name: str) -> Any:
        return MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / f"{name}.db")

    serial_store, piped_store = new_store("serial"), new_store("piped")
    serial = _engine(tmp_path, serial_store)
    expected = [serial.ingest_conversation(**s) for s in sessions]
    reports = _engine(tmp_path, piped_store).ingest_conversations(sessions)
    assert _outcomes(reports) == _outcomes(expected)
    assert any(o.action == "merged" for r in reports for o in r.outcomes)  # dedup across calls
    assert _stored(piped_store) == _stored(serial_store)


def test_no_sessions_is_an_empty_list(tmp_path: Path) -> None:
    assert _engine(tmp_path, MemoryStore()).ingest_conversations([]) == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"turns": [Turn("ada", "hello")]}, r"sessions\[3\] has no 'user_id'"),
        ({"turns": [Turn("ada", "hi")], "user_id": "u0", "session": "x"}, "unknown keys"),
        ({"turns": [], "user_id": "u0"}, r"sessions\[3\]"),
        ({"turns": [Turn("ada", "hi")], "user_id": ""}, r"sessions\[3\]"),
        ({"turns": [Turn("ada", "hi")], "user_id": "u0", "now": "today"}, r"sessions\[3\]"),
        ("not a session", r"sessions\[3\] must be a mapping"),
    ],
)
def test_a_malformed_session_refuses_the_call_before_anything_is_written(
    tmp_path: Path, bad: object, message: str
) -> None:
    sessions: list[Any] = _sessions(5)
    sessions[3] = bad
    store = MemoryStore()
    with pytest.raises(ValidationError, match=message):
        _engine(tmp_path, store).ingest_conversations(sessions)
    assert _stored(store) == []


@pytest.mark.parametrize("sessions", ["u0", {"turns": [], "user_id": "u0"}, 42])
def test_sessions_must_be_a_list(tmp_path: Path, sessions: object) -> None:
    with pytest.raises(ValidationError, match="list of sessions"):
        _engine(tmp_path, MemoryStore()).ingest_conversations(sessions)  # type: ignore[arg-type]


class _FailsOn(HashEmbedder):
    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word

    def embed(self, texts: Sequence[str]) -> Matrix:
        if any(self.word in t for t in texts):
            raise EmbeddingError("the model failed")
        return super().embed(texts)


def _sessions_written(store: Any) -> set[str | None]:
    return {m.session_id for u in USERS for m in store.query(u, MemoryFilter(), limit=1000)}


def test_a_session_whose_embedding_fails_writes_nothing_of_itself(tmp_path: Path) -> None:
    sessions = _sessions(5)
    sessions[3]["turns"] = [Turn("ada", "poison pill"), *sessions[3]["turns"]]
    store = MemoryStore()
    with pytest.raises(EmbeddingError) as caught:
        _engine(tmp_path, store, _FailsOn("poison")).ingest_conversations(sessions)
    assert _sessions_written(store) == {"session_0", "session_1", "session_2"}
    assert "the 3 sessions before sessions[3] were stored" in "".join(caught.value.__notes__)
    # the three stored sessions are whole: what three calls store
    alone = MemoryStore()
    for session in sessions[:3]:
        _engine(tmp_path, alone).ingest_conversation(**session)
    assert _stored(store) == _stored(alone)


class _RefusesSession(MemoryStore):
    """A store whose write of one session's memories fails (the server refusing it)."""

    def __init__(self, session_id: str) -> None:
        super().__init__()
        self.session_id = session_id

    def write(self, upserts: Sequence[Memory] = (), *args: Any, **kwargs: Any) -> None:
        if any(m.session_id == self.session_id for m in upserts):
            raise StoreError("the server refused the write")
        super().write(upserts, *args, **kwargs)


def test_a_session_whose_write_fails_writes_nothing_and_stops_the_call(tmp_path: Path) -> None:
    store = _RefusesSession("session_2")
    with pytest.raises(StoreError):
        _engine(tmp_path, store).ingest_conversations(_sessions(6))
    assert _sessions_written(store) == {"session_0", "session_1"}


def test_threads_ingesting_sessions_of_their_own_users_store_what_one_thread_stores(
    tmp_path: Path,
) -> None:
    groups = [_sessions(8, users=(f"a{t}", f"b{t}")) for t in range(3)]
    everyone = [u for t in range(3) for u in (f"a{t}", f"b{t}")]
    alone = MemoryStore()
    for group in groups:
        _engine(tmp_path, alone).ingest_conversations(group)
    shared = MemoryStore()
    engine = _engine(tmp_path, shared)
    errors: list[BaseException] = []

    def run(group: list[dict[str, Any]]) -> None:
        try:
            engine.ingest_conversations(group)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(g,)) for g in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert _stored(shared, everyone) == _stored(alone, everyone)


def test_the_async_engine_has_it(tmp_path: Path) -> None:
    async def run() -> list[IngestReport]:
        async with AsyncEngine(settings=make_settings(tmp_path, min_chunk_tokens=0),
                               store=MemoryStore(), embedder=HashEmbedder()) as engine:  # fmt: skip
            return await engine.ingest_conversations(_sessions(3))

    reports = run_async(run())
    assert [len(r.outcomes) > 0 for r in reports] == [True, True, True]
