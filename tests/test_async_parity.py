"""Engine and AsyncEngine stay twins: the same public methods, the same signatures, the same
results."""

from __future__ import annotations

import inspect
from datetime import timedelta
from pathlib import Path

from engrain import AsyncEngine, Engine
from engrain.embed import HashEmbedder
from engrain.store import MemoryStore

from .aio import run_async
from .conftest import NOW, make_settings

LATER = NOW + timedelta(minutes=1)


def _public(cls: type) -> dict[str, object]:
    return {n: m for n, m in vars(cls).items() if not n.startswith("_") and callable(m)}


def test_same_public_methods_and_signatures() -> None:
    sync, async_ = _public(Engine), _public(AsyncEngine)
    assert set(sync) == set(async_)
    for name, method in sync.items():
        twin = async_[name]
        assert inspect.iscoroutinefunction(twin), name
        # same parameters; export_records returns a list instead of a lazy iterator
        params = inspect.signature(method).parameters  # type: ignore[arg-type]
        assert params == inspect.signature(twin).parameters, name  # type: ignore[arg-type]
        assert inspect.getdoc(twin), name


def test_same_results(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    sync = Engine(settings=settings, store=MemoryStore(), embedder=HashEmbedder())

    async def run() -> tuple[list[str], str]:
        async with AsyncEngine(settings=settings, store=MemoryStore(),
                               embedder=HashEmbedder()) as eng:  # fmt: skip
            out = await eng.remember("The API listens on port 8080", "ada", now=NOW)
            await eng.remember("Deploys happen on Fridays", "ada", now=LATER)
            ctx = await eng.context("which port?", "ada")
            records = await eng.export_records("ada")
            assert out.memory_id in {r["id"] for r in records if r["type"] == "memory"}
            return [m.content for m in await eng.list("ada")], ctx.text

    sync.remember("The API listens on port 8080", "ada", now=NOW)
    sync.remember("Deploys happen on Fridays", "ada", now=LATER)
    expected = ([m.content for m in sync.list("ada")], sync.context("which port?", "ada").text)
    assert run_async(run()) == expected


def test_new_arguments_are_twins(tmp_path: Path) -> None:
    """Issue 12's arguments (usage and mutes on remember, ``now`` on pin and mute, remember
    records on import) behave the same on both."""
    settings = make_settings(tmp_path)
    record = {"type": "remember", "user_id": "ada", "content": "Invoices are gapless",
              "kind": "invariant", "pinned": True, "access_count": 3,
              "at": "2025-01-01T00:00:00Z"}  # fmt: skip

    def sync_run() -> list[tuple[object, ...]]:
        eng = Engine(settings=settings, store=MemoryStore(), embedder=HashEmbedder())
        out = eng.remember("Deploys go out on Tuesdays", "ada", "decision", access_count=4,
                           muted=True, now=NOW)  # fmt: skip
        eng.pin(out.memory_id or "", "ada", now=LATER)
        eng.import_records([record], now=NOW)
        return [(m.content, m.kind, m.pinned, m.muted, m.access_count, m.updated_at)
                for m in eng.list("ada")]  # fmt: skip

    async def async_run() -> list[tuple[object, ...]]:
        async with AsyncEngine(settings=settings, store=MemoryStore(),
                               embedder=HashEmbedder()) as eng:  # fmt: skip
            out = await eng.remember("Deploys go out on Tuesdays", "ada", "decision",
                                     access_count=4, muted=True, now=NOW)  # fmt: skip
            await eng.pin(out.memory_id or "", "ada", now=LATER)
            await eng.import_records([record], now=NOW)
            return [(m.content, m.kind, m.pinned, m.muted, m.access_count, m.updated_at)
                    for m in await eng.list("ada")]  # fmt: skip

    expected = sync_run()
    assert run_async(async_run()) == expected
    assert {row[0]: row[2:] for row in expected}["Deploys go out on Tuesdays"] == (
        True,
        True,
        4,
        NOW,
    )
