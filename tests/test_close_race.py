"""A call racing ``Engine.close()`` (``lifecycle.py``): close waits for the calls in flight,
nothing starts a thread after close, and a call that outlives close's wait raises
``EngrainError`` with nothing written. A call is held inside the planner by an event (the
hash embedder held at one marked text), so the order is forced, never timed."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain import Engine, lifecycle
from engrain.embed import HashEmbedder
from engrain.errors import EngrainError, StoreError
from engrain.store.memory import MemoryStore
from engrain.store.sqlite import SQLiteStore

from .conftest import make_settings

MARK = "heldmark"
#: the first session one short turn (one chunk, embedded on the planning thread and held
#: there), the second many chunks (embedded on the planner's side threads)
SESSIONS = [
    {"user_id": "ada", "session_id": "one",
     "turns": [{"speaker": "user", "text": f"{MARK} hello"}]},
    {
        "user_id": "ada",
        "session_id": "two",
        "turns": [
            {"speaker": "user" if i % 2 == 0 else "assistant",
             "text": f"turn{i}mark " + " ".join(f"w{i}x{j}" for j in range(30))}
            for i in range(8)
        ],
    },
]  # fmt: skip


class HeldEmbedder(HashEmbedder):
    """The hash embedder, held at the texts holding :data:`MARK` until released."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if any(MARK in t for t in texts):
            self.entered.set()
            self.release.wait()
        return super().embed(texts)


def embed_threads() -> set[threading.Thread]:
    """The live threads planners embed conversations on: the objects, not their idents (a
    thread's ident is reused by the next thread once it ends, so a new thread could be
    taken for one of another planner that ended meanwhile)."""
    return {t for t in threading.enumerate() if t.name.startswith("engrain-embed") and t.is_alive()}


def held_call(engine: Engine) -> tuple[threading.Thread, list[Any]]:
    """``ingest_conversations(SESSIONS)`` in a thread; its outcome lands in the list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(engine.ingest_conversations(SESSIONS))
        except EngrainError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def refused(engine: Engine) -> None:
    """Return once the engine refuses a new call (close() has begun)."""
    while True:
        try:
            engine.list("bob")
        except StoreError:
            return


def test_close_waits_for_a_call_in_flight_and_no_thread_outlives_it(tmp_path: Path) -> None:
    before = embed_threads()
    held = HeldEmbedder()
    engine = Engine(settings=make_settings(tmp_path, max_chunk_tokens=40),
                    store=SQLiteStore(tmp_path / "c.db"), embedder=held)  # fmt: skip
    call, outcome = held_call(engine)
    held.entered.wait()
    closing = threading.Thread(target=engine.close)
    closing.start()
    refused(engine)  # close() has begun while the call is inside the planner
    held.release.set()
    call.join()
    closing.join()
    assert not embed_threads() - before  # nothing restarted the side threads
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    with Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "c.db"),
                embedder=HashEmbedder()) as again:  # fmt: skip
        stored = {m.session_id for m in again.list("ada", limit=None)}
    assert stored == {"one", "two"}  # the call that raced close() completed whole


def test_a_call_that_outlives_the_wait_fails_cleanly_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "CLOSE_WAIT", 0.0)
    before = embed_threads()
    held = HeldEmbedder()
    engine = Engine(settings=make_settings(tmp_path, max_chunk_tokens=40),
                    store=SQLiteStore(tmp_path / "c.db"), embedder=held)  # fmt: skip
    call, outcome = held_call(engine)
    held.entered.wait()
    engine.close()  # waits 0 s: the call is still held inside the planner
    held.release.set()
    call.join()
    assert len(outcome) == 1 and isinstance(outcome[0], StoreError), outcome
    assert not embed_threads() - before  # the closed planner started no side thread
    with Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "c.db"),
                embedder=HashEmbedder()) as again:  # fmt: skip
        assert again.list("ada", limit=None) == []


def test_every_call_after_close_is_refused_and_writes_nothing() -> None:
    before = embed_threads()
    store = MemoryStore()  # a store that keeps working after close: the engine refuses
    engine = Engine(settings=make_settings(Path(".")), store=store, embedder=HashEmbedder())
    engine.remember("the crate ships on a pallet", "ada")
    engine.close()
    calls = {
        "remember": lambda: engine.remember("another fact", "ada"),
        "ingest_conversation": lambda: engine.ingest_conversation(SESSIONS[1]["turns"], "ada"),
        "context": lambda: engine.context("which crate?", "ada"),
        "list": lambda: engine.list("ada"),
        "compress": lambda: engine.compress("ada", force=True),
    }
    for call in calls.values():
        with pytest.raises(StoreError, match="closed"):
            call()
    assert not embed_threads() - before
    assert [m.content for m in store.query("ada")] == ["the crate ships on a pallet"]
