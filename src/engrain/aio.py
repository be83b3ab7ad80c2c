"""The async twin of :class:`~engrain.engine.Engine`: the same methods and arguments,
awaitable. Each call runs the engine's method in a worker thread (``asyncio.to_thread``),
so embedding and store I/O never stall the event loop; concurrent tasks share one engine
under its concurrency rules (``docs/concurrency.md``). ``tests/test_async_parity.py``
keeps the two in step."""

from __future__ import annotations

import asyncio
import builtins
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from engrain.config import Settings
from engrain.embed import Embedder
from engrain.engine import Engine
from engrain.recall import Reranker
from engrain.store import Store

P = ParamSpec("P")
R = TypeVar("R")


def _threaded(
    method: Callable[Concatenate[Engine, P], R],
) -> Callable[Concatenate[AsyncEngine, P], Awaitable[R]]:
    """The async twin of an Engine method: the same call, run in a worker thread."""

    async def run(self: AsyncEngine, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self.sync, *args, **kwargs)

    functools.update_wrapper(run, method)
    return run


class AsyncEngine:
    """The async twin of :class:`Engine`: the same methods and arguments, awaitable. Blocking
    work (embedding, SQLite) runs in worker threads so the event loop never stalls."""

    def __init__(
        self,
        url: str | None = None,
        *,
        settings: Settings | None = None,
        store: Store | None = None,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.sync = Engine(url, settings=settings, store=store, embedder=embedder,
                           reranker=reranker)  # fmt: skip

    async def __aenter__(self) -> AsyncEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    close = _threaded(Engine.close)
    ingest = _threaded(Engine.ingest)
    ingest_conversation = _threaded(Engine.ingest_conversation)
    ingest_conversations = _threaded(Engine.ingest_conversations)
    remember = _threaded(Engine.remember)
    recall = _threaded(Engine.recall)
    context = _threaded(Engine.context)
    explain = _threaded(Engine.explain)
    preview = _threaded(Engine.preview)
    get = _threaded(Engine.get)
    list = _threaded(Engine.list)
    browse = _threaded(Engine.browse)
    relations = _threaded(Engine.relations)
    users = _threaded(Engine.users)
    update = _threaded(Engine.update)
    pin = _threaded(Engine.pin)
    mute = _threaded(Engine.mute)
    forget = _threaded(Engine.forget)
    review = _threaded(Engine.review)
    resolve = _threaded(Engine.resolve)
    contexts = _threaded(Engine.contexts)
    import_records = _threaded(Engine.import_records)
    tiers = _threaded(Engine.tiers)
    compress = _threaded(Engine.compress)
    feedback = _threaded(Engine.feedback)
    wait = _threaded(Engine.wait)

    async def export_records(self, user_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Every memory and learned state document as lossless records (a list: the export
        runs in one worker call)."""
        return await asyncio.to_thread(lambda: list(self.sync.export_records(user_id)))
