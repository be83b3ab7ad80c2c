"""Activity, in Chromium and over HTTP: recent contexts with their memories and feedback,
and feedback given from the page (through ``Engine.feedback``)."""

from __future__ import annotations

from typing import Any

import pytest

from . import helpers_pages
from .helpers_pages import Live, client, signed_in, text_of

live = helpers_pages.live  # the fixtures this module uses
browser = helpers_pages.browser


def _served(live: Live, user: str = "ada") -> tuple[str, list[str]]:
    """A context served to ``user``: its id and the ids of the memories it injected."""
    e = live.engine
    e.remember("The API listens on port 8080", user)
    e.remember("The API is written with FastAPI", user)
    ctx = e.context("Tell me about the API: which port and which framework?", user,
                    token_budget=500)  # fmt: skip
    assert ctx.memories
    return ctx.id, [m.id for m in ctx.memories]


def test_feedback_from_the_activity_page(browser: Any, live: Live) -> None:
    context_id, injected = _served(live)
    page = signed_in(browser, live, live.key("ada"))
    page.get_by_role("link", name="Activity").click()
    card = page.locator(f'article[data-context-id="{context_id}"]')
    assert "port 8080" in card.inner_text()
    assert "none yet" in card.inner_text()
    card.get_by_role("button", name="Helpful", exact=True).click()
    page.wait_for_selector("text=Thanks: feedback recorded.")
    card = page.locator(f'article[data-context-id="{context_id}"]')
    assert "Feedback: helpful" in card.inner_text()
    assert live.engine.contexts("ada")[0].feedback == (1.0,)
    for memory_id in injected:
        assert live.engine.get(memory_id, "ada").usefulness == pytest.approx(0.6)


@pytest.mark.parametrize("case", ["no csrf", "another user", "no answer"])
def test_refused_feedback_changes_nothing(live: Live, case: str) -> None:
    context_id, injected = _served(live)
    http = client(live, live.key("bob") if case == "another user" else live.key("ada"))
    data = {"csrf": http.csrf, "context_id": context_id, "helpful": "no"}
    if case == "no csrf":
        del data["csrf"]
    elif case == "no answer":
        del data["helpful"]
    answer = http.post("/ui/activity/feedback", data=data)
    assert answer.status_code == {"no csrf": 403, "another user": 404}.get(case, 400)
    assert live.engine.contexts("ada")[0].feedback == ()
    assert all(live.engine.get(i, "ada").usefulness == 0.5 for i in injected)


def test_only_the_users_own_contexts_are_listed(live: Live) -> None:
    _served(live, "bob")
    mine, _ = _served(live, "ada")
    page = client(live, live.key("ada")).get("/ui/activity").text
    assert mine in page and page.count("data-context-id=") == 1
    assert "none yet" in text_of(page)
