"""The client's twins of the inspector's engine calls (browse, relations, review, resolve,
contexts, preview, users) against a live server on loopback: the same result types with
the same contents as the engine's own, a browse cursor that pages through the client, the
engine's errors, and a bad argument refused before any request is sent."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engrain import wire
from engrain.activity import ContextRecord
from engrain.browse import Page, Relations
from engrain.client import AsyncClient
from engrain.errors import NotFoundError, PermissionDeniedError, ValidationError
from engrain.preview import Preview
from engrain.review import FlaggedPair, Resolution, Resolved

from .aio import run_async
from .conftest import NOW
from .test_client import Counting, Served

pytestmark = pytest.mark.filterwarnings("ignore::engrain.validate.UserIdWarning")

LATER = NOW + timedelta(hours=1)
QUESTION = "which port does the API listen on?"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """ada: a conflicting pair in ``web``, three notes in ``home``, one recorded context;
    bob: one memory."""
    s = Served(tmp_path)
    e = s.engine
    e.remember("The API listens on port 8080", "ada", project="web", now=NOW)
    e.remember("The API listens on port 9090", "ada", project="web", now=LATER)
    for i, text in enumerate(["The garden hose is in the shed", "The rake hangs by the door",
                              "Tomatoes get water every morning"]):  # fmt: skip
        e.remember(text, "ada", project="home", now=NOW + timedelta(minutes=i))
    e.remember("bob drinks his coffee black", "bob", now=NOW)
    e.context(QUESTION, "ada", project="web", now=LATER)
    yield s
    s.close()


def _untimed(preview: Preview) -> dict[str, Any]:
    data = wire.dump_preview(preview)
    return {**data, "gated": {**data["gated"], "timings_ms": None}}


def test_reads_give_the_engines_types_and_contents(served: Served) -> None:
    e = served.engine
    with served.client("ada") as c:
        page = c.browse("ada", text="port API", sort="relevance", limit=5)
        assert isinstance(page, Page)
        assert wire.dump_page(page) == wire.dump_page(e.browse("ada", text="port API", limit=5))
        newest = page.memories[0].id
        rel = c.relations(newest, "ada")
        assert isinstance(rel, Relations) and len(rel.conflicts) == 1
        assert wire.dump_relations(rel) == wire.dump_relations(e.relations(newest, "ada"))
        queue = c.review("ada", limit=None)
        assert [type(p) for p in queue] == [FlaggedPair]
        assert [wire.dump_flagged_pair(p) for p in queue] == [
            wire.dump_flagged_pair(p) for p in e.review("ada", limit=None)
        ]
        records = c.contexts("ada", project="web", limit=5)
        assert [type(r) for r in records] == [ContextRecord]
        assert records == e.contexts("ada", project="web", limit=5)
        assert [m.id for m in records[0].memories] == [m.id for m in
                                                      e.contexts("ada")[0].memories]  # fmt: skip
        preview = c.preview(QUESTION, "ada", project="web", token_budget=300, now=LATER)
        assert isinstance(preview, Preview)
        expected = e.preview(QUESTION, "ada", project="web", token_budget=300, now=LATER)
        assert _untimed(preview) == _untimed(expected)
        assert c.users() == ["ada"]
    with served.client("admin") as admin:
        assert admin.users() == e.users() == ["ada", "bob"]


def test_a_browse_cursor_pages_through_the_client(served: Served) -> None:
    whole = served.engine.browse("ada", sort="importance", limit=200).memories
    seen: list[str] = []
    with served.client("ada") as c:
        page = c.browse("ada", sort="importance", limit=2)
        while True:
            assert page.total == 5 and len(page.memories) <= 2
            seen += [m.id for m in page.memories]
            if page.next_cursor is None:
                break
            page = c.browse("ada", sort="importance", limit=2, cursor=page.next_cursor)
        assert seen == [m.id for m in whole]
        home = c.browse("ada", projects=["home"], kinds=["fact"], pinned=False)
        assert home.total == 3 and {m.project for m in home.memories} == {"home"}


def test_resolve_through_the_client(served: Served) -> None:
    with served.client("ada") as c:
        pair = c.review("ada")[0]
        done = c.resolve(pair.first.id, pair.second.id, "ada", "correct", now=LATER)
        assert done == Resolved(Resolution.CORRECT, (pair.first.id,),
                                superseded=(pair.second.id,))  # fmt: skip
        assert served.engine.get(pair.second.id, "ada").superseded_by == pair.first.id
        assert c.relations(pair.first.id, "ada").corrects[0].id == pair.second.id
        assert c.review("ada") == []


def test_the_engines_errors_and_no_request_for_a_bad_argument(served: Served) -> None:
    bobs = served.engine.list("bob")[0].id
    sent = Counting()
    with served.client("ada", transport=sent) as c:
        with pytest.raises(NotFoundError):
            c.relations(bobs, "ada")
        with pytest.raises(NotFoundError):
            c.resolve(bobs, served.engine.list("ada")[0].id, "ada", "keep")
        with pytest.raises(PermissionDeniedError):
            c.browse("bob")
        with pytest.raises(PermissionDeniedError):
            c.review("bob")
        with pytest.raises(ValidationError):
            c.resolve(bobs, bobs, "ada", "both")  # the server's check
        asked = len(sent.sent)
        cursor = c.browse("ada", limit=1).next_cursor
        assert cursor is not None
        for bad in (lambda: c.browse("ada", sort="random"),
                    lambda: c.browse("ada", sort="used", cursor=cursor),  # another order's
                    lambda: c.browse("ada", cursor="bm90IGEgY3Vyc29y"),
                    lambda: c.review("ada", limit=0),
                    lambda: c.contexts("ada", limit=0),
                    lambda: c.resolve("a", "b", "ada", "merge"),
                    lambda: c.preview("   ", "ada")):  # fmt: skip
            with pytest.raises(ValidationError):
                bad()
        assert len(sent.sent) == asked + 1  # only the browse that gave the cursor


def test_the_async_client_is_a_twin(served: Served) -> None:
    async def run() -> list[Any]:
        async with AsyncClient(served.url, served.keys["ada"]) as c:
            page = await c.browse("ada", limit=3)
            more = await c.browse("ada", limit=3, cursor=page.next_cursor)
            queue = await c.review("ada")
            preview = await c.preview(QUESTION, "ada", token_budget=300, now=LATER)
            return [wire.dump_page(page), wire.dump_page(more),
                    [wire.dump_flagged_pair(p) for p in queue], _untimed(preview),
                    await c.contexts("ada"), await c.users()]  # fmt: skip

    e = served.engine
    first = e.browse("ada", limit=3)
    assert run_async(run()) == [
        wire.dump_page(first), wire.dump_page(e.browse("ada", limit=3, cursor=first.next_cursor)),
        [wire.dump_flagged_pair(p) for p in e.review("ada")],
        _untimed(e.preview(QUESTION, "ada", token_budget=300, now=LATER)),
        e.contexts("ada"), ["ada"],
    ]  # fmt: skip
