"""Client and Engine (and AsyncClient and AsyncEngine) are twins: the same public methods with
the same parameters (minus a documented list), and the same scenario gives the same results
from an in-process engine as from a client of a live server on loopback (ids aside:
contents, kinds, tokens, selections, scores and error classes)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engrain import AsyncEngine, Engine, EngrainError, Memory
from engrain.client import AsyncClient, Client
from engrain.embed import HashEmbedder
from engrain.recall.results import Context, Gated, RecallResult
from engrain.store import MemoryStore

from .aio import run_async
from .conftest import NOW, make_settings
from .test_client import Served

#: Engine methods a client does not have (docs/client.md says why; ``ingest_conversations``:
#: not served over HTTP yet, docs/ingest.md).
NOT_REMOTE = {"compress", "wait", "ingest_conversations"}
#: Engine parameters a client does not take (docs/client.md says why).
NOT_REMOTE_PARAMS = {"context": {"options"}, "explain": {"options"}, "tiers": {"now"},
                     "import_records": {"now"}}  # fmt: skip


def _public(cls: type) -> dict[str, Any]:
    return {n: m for n, m in vars(cls).items() if not n.startswith("_") and callable(m)}


@pytest.mark.parametrize(
    ("engine_cls", "client_cls"), [(Engine, Client), (AsyncEngine, AsyncClient)]
)
def test_same_public_methods_and_parameters(engine_cls: type, client_cls: type) -> None:
    engine, client = _public(engine_cls), _public(client_cls)
    assert set(client) == set(engine) - NOT_REMOTE
    for name, method in client.items():
        theirs = dict(inspect.signature(engine[name]).parameters)
        for dropped in NOT_REMOTE_PARAMS.get(name, ()):
            del theirs[dropped]
        assert dict(inspect.signature(method).parameters) == theirs, name
        assert inspect.iscoroutinefunction(method) == (client_cls is AsyncClient), name
        assert inspect.getdoc(method), name


# -- one scenario, both ways ------------------------------------------------------------------

LATER = NOW + timedelta(hours=1)


def memory_view(m: Memory) -> tuple[Any, ...]:
    return (m.content, m.kind, m.memory_type, m.domains, m.importance, m.confidence,
            round(m.usefulness, 6), m.access_count, m.pinned, m.muted, m.session_id,
            m.created_at, m.updated_at, m.event_at, m.key, m.provenance.metadata,
            m.content_hash)  # fmt: skip


def recall_view(r: RecallResult) -> tuple[Any, ...]:
    return ([memory_view(m) for m in r.memories], r.total_tokens, round(r.budget_used, 6),
            [(s.memory.content, round(s.score, 6), s.tokens) for s in r.scored])  # fmt: skip


def gated_view(g: Gated) -> tuple[Any, ...]:
    return (g.classification, g.budget, {k: round(v, 6) for k, v in g.weights.items()},
            [(s.memory.content, round(s.score, 6)) for s in g.selected], g.tokens_used, g.text,
            [(d.item.memory.content, d.selected, d.reason) for d in g.decisions])  # fmt: skip


def context_view(c: Context) -> tuple[Any, ...]:
    return (
        c.text,
        c.tokens,
        c.tier,
        c.fallback,
        [m.content for m in c.memories],
        recall_view(c.recall),
        None if c.gated is None else gated_view(c.gated),
    )


def error_of(call: Callable[[], Any]) -> type:
    with pytest.raises(EngrainError) as caught:
        call()
    return type(caught.value)


def scenario(m: Any) -> list[Any]:
    """Every remote method once or more, through an Engine or a Client (results as views)."""
    seen: list[Any] = []
    tabs = m.remember("alice indents Python with four spaces", "alice", "preference", now=NOW)
    deploy = m.remember("Deploys go out on Tuesdays after the standup", "alice", "decision",
                        domains=["ops"], metadata={"source": "wiki"}, now=NOW)  # fmt: skip
    seen += [(o.action, o.content, o.memory_type, o.reason) for o in (tabs, deploy)]
    seen.append(m.remember("Deploys go out on Tuesdays after the standup", "alice", "decision",
                           now=LATER).action)  # a near-duplicate: merged  # fmt: skip
    report = m.ingest("I moved to Lyon in 2024 and started working at a bakery near the "
                      "river. My manager is called Hugo.", "alice", "s1", now=NOW)  # fmt: skip
    seen.append([(o.action, o.content, o.memory_type) for o in report.outcomes])
    talk = m.ingest_conversation(
        [{"speaker": "alice", "text": "My sister Mia is visiting from Oslo next week."},
         {"speaker": "assistant", "text": "Lovely! Anything planned?"},
         {"speaker": "alice", "text": "A trip to the Alps, we booked a chalet in Chamonix."}],
        "alice", "s2", now=LATER,
    )  # fmt: skip
    seen.append([(o.action, o.content, o.turn_ids) for o in talk.outcomes])
    ctx = m.context("How should I indent this Python function?", "alice", now=LATER)
    seen.append(context_view(ctx))
    seen.append(
        context_view(
            m.context(
                "when do deploys go out?",
                "alice",
                token_budget=300,
                memory_types=["procedural", "semantic"],
                now=LATER,
            )
        )
    )
    seen.append(context_view(m.context("thanks!", "alice", model="gpt-4o-mini", now=LATER)))
    seen.append(recall_view(m.recall("who is visiting?", "alice", top_k=3, now=LATER)))
    seen.append(gated_view(m.explain("where do I work?", "alice", turn=2, now=LATER)))
    fb = m.feedback("alice", ctx.id, helpful=True)
    seen.append((fb.target, fb.pairs_learned, sorted(round(a, 6) for _, a in
                                                     fb.usefulness.values())))  # fmt: skip
    assert deploy.memory_id and tabs.memory_id
    seen.append(memory_view(m.pin(deploy.memory_id, "alice", now=LATER)))
    seen.append(memory_view(m.mute(tabs.memory_id, "alice", now=LATER)))
    seen.append(memory_view(m.update(deploy.memory_id, "alice", content="Deploys go out on "
                                     "Wednesdays", domains="ops", now=LATER)))  # fmt: skip
    seen.append(memory_view(m.get(deploy.memory_id, "alice")))
    tiers = m.tiers("alice", rebuild=True)
    seen.append({t: (c.text, c.tokens, len(c.memory_ids)) for t, c in tiers.tiers.items()})
    # the order of memories updated at the same time follows their ids, which differ
    seen.append(sorted((memory_view(x) for x in m.list("alice", limit=None)), key=repr))
    seen.append([x.content for x in m.list("alice", kind="decision")])
    seen.append(m.forget([tabs.memory_id, "0" * 32], "alice"))
    seen.append(error_of(lambda: m.get(tabs.memory_id, "alice")))
    seen.append(error_of(lambda: m.feedback("alice", "0" * 32, helpful=False)))
    seen.append(error_of(lambda: m.update("0" * 32, "alice", importance=0.5)))
    seen.append(error_of(lambda: m.remember("x", "alice", kind="nope")))
    records = list(m.export_records("alice"))
    seen.append(sorted((r["content"], r["kind"], r["pinned"], len(r["embedding"]))
                       for r in records))  # fmt: skip
    imported = m.import_records(
        [
            {
                "type": "remember",
                "user_id": "alice",
                "content": "alice is allergic to peanuts",
                "kind": "fact",
                "pinned": True,
            }
        ]
    )
    seen.append(imported)
    seen.append(sorted(x.content for x in m.list("alice", limit=None)))
    return seen


def test_client_and_engine_give_the_same_results(tmp_path: Path) -> None:
    engine = Engine(settings=make_settings(tmp_path / "local"), store=MemoryStore(),
                    embedder=HashEmbedder())  # fmt: skip
    expected = scenario(engine)
    served = Served(tmp_path / "served")
    try:
        with served.client() as client:
            got = scenario(client)
    finally:
        served.close()
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, i


async def async_scenario(m: Any) -> list[Any]:
    """A shorter scenario for the async twins."""
    out = await m.remember("The API listens on port 8080", "ada", "fact", now=NOW)
    await m.ingest("Ada's team ships the mobile app every second Thursday.", "ada", now=NOW)
    ctx = await m.context("which port does the API use?", "ada", token_budget=500, now=LATER)
    fb = await m.feedback("ada", ctx.id, score=0.8)
    pinned = await m.pin(out.memory_id, "ada", now=LATER)
    records = await m.export_records("ada")
    listed = await m.list("ada", limit=None)
    try:
        await m.get("0" * 32, "ada")
        missing: type | None = None
    except EngrainError as exc:
        missing = type(exc)
    return [out.action, context_view(ctx), (fb.target, fb.pairs_learned),
            memory_view(pinned), sorted(r["content"] for r in records),
            sorted((memory_view(x) for x in listed), key=repr), missing,
            await m.forget(out.memory_id, "ada")]  # fmt: skip


def test_async_client_and_async_engine_give_the_same_results(tmp_path: Path) -> None:
    async def local() -> list[Any]:
        async with AsyncEngine(settings=make_settings(tmp_path / "local"), store=MemoryStore(),
                               embedder=HashEmbedder()) as engine:  # fmt: skip
            return await async_scenario(engine)

    served = Served(tmp_path / "served")

    async def remote() -> list[Any]:
        async with AsyncClient(served.url, served.keys["ada"]) as client:
            return await async_scenario(client)

    try:
        assert run_async(remote()) == run_async(local())
    finally:
        served.close()
