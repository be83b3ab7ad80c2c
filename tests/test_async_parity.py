"""Engine and AsyncEngine stay twins: the same public methods, the same signatures, the same
results."""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta
from pathlib import Path

from engrain import AsyncEngine, Engine
from engrain.embed import HashEmbedder
from engrain.store import MemoryStore

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
    assert asyncio.run(run()) == expected
