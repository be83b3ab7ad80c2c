"""Cancelled ``AsyncEngine`` calls and closing (session 23 h2, ``bench/attacks/async_cancel.py``):
a cancelled call finishes in its thread and writes all of its work or none, the engine keeps
answering, and ``close()`` returns with no thread of the engine left running."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from engrain import Engine
from engrain.aio import AsyncEngine
from engrain.embed import HashEmbedder
from engrain.store.sqlite import SQLiteStore

from .aio import run_async
from .conftest import make_settings

TURNS = [
    {
        "speaker": "user" if i % 2 == 0 else "assistant",
        "text": f"turn{i}mark " + " ".join(f"w{i}x{j}" for j in range(30)),
    }
    for i in range(12)
]


def embed_threads() -> set[threading.Thread]:
    """The live threads planners embed conversations on: the objects, not their idents (a
    thread's ident is reused by the next thread once it ends, so a new thread could be
    taken for one of another planner that ended meanwhile)."""
    return {t for t in threading.enumerate() if t.name.startswith("engrain-embed") and t.is_alive()}


def test_close_stops_the_threads_the_engine_started(tmp_path: Path) -> None:
    before = embed_threads()
    engine = Engine(
        settings=make_settings(tmp_path, max_chunk_tokens=40),
        store=SQLiteStore(tmp_path / "c.db"),
        embedder=HashEmbedder(),
    )
    engine.ingest_conversation(TURNS, "ada", session_id="s")
    started = embed_threads() - before
    assert started  # a conversation of several chunks embeds on the side threads
    engine.close()
    assert not embed_threads() & started  # the engine is still referenced: no collection


def test_a_cancelled_call_writes_all_or_nothing_and_close_returns(tmp_path: Path) -> None:
    async def attack() -> None:
        engine = AsyncEngine(
            settings=make_settings(tmp_path, max_chunk_tokens=40),
            store=SQLiteStore(tmp_path / "a.db"),
            embedder=HashEmbedder(),
        )
        for delay in (0.0, 0.001, 0.01):
            task = asyncio.ensure_future(
                engine.ingest_conversation(TURNS, "ada", session_id=f"s{delay}")
            )
            await asyncio.sleep(delay)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await engine.context("which turn holds w3x4?", "ada")  # the engine still answers
        await asyncio.wait_for(engine.close(), 60)

    run_async(attack())
    with Engine(
        settings=make_settings(tmp_path),
        store=SQLiteStore(tmp_path / "a.db"),
        embedder=HashEmbedder(),
    ) as engine:
        for delay in (0.0, 0.001, 0.01):
            stored = engine.list("ada", session_id=f"s{delay}", limit=None)
            marks = {w for m in stored for w in m.content.split() if w.startswith("turn")}
            assert len(marks) in (0, len(TURNS)), (delay, sorted(marks))
