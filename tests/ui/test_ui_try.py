"""Try a message, in Chromium and over HTTP: the exact block, the classification, the
budget and every candidate with its verdict, for the signed-in user only, and nothing
written."""

from __future__ import annotations

import re
from typing import Any

from . import helpers_pages
from .helpers_pages import PHONE, Live, client, signed_in, text_of

live = helpers_pages.live  # the fixtures this module uses
browser = helpers_pages.browser

QUESTION = "Which port does the API listen on?"


def _seed(live: Live) -> dict[str, str]:
    e = live.engine
    return {
        "port": e.remember("The API listens on port 8080", "ada").memory_id or "",
        "deploy": e.remember("Deploys happen on Fridays", "ada", "decision").memory_id or "",
        "tabs": e.remember("I prefer tabs over spaces", "ada", "preference").memory_id or "",
        "bob": e.remember("Bob's API listens on port 7070", "bob").memory_id or "",
    }


def test_try_a_message_shows_the_block_the_budget_and_the_selected_memories(
    browser: Any, live: Live
) -> None:
    ids = _seed(live)
    page = signed_in(browser, live, live.key("ada"))
    page.get_by_role("link", name="Try a message").click()
    page.get_by_label("Message").fill(QUESTION)
    page.get_by_role("button", name="Try it").click()
    page.wait_for_selector("#try-summary")
    assert "500-token budget" in page.inner_text("#try-summary")
    assert "simple: 500" in page.inner_text("#try-budget-steps")
    assert page.inner_text("#try-intent") == "question"
    # each hint sits under its own field, not run into the next field's label
    hint = page.locator("#try-message-hint").bounding_box()
    label = page.locator("label[for=try-previous]").bounding_box()
    field = page.locator("#try-message").bounding_box()
    assert hint is not None and label is not None and field is not None
    assert field["y"] + field["height"] <= hint["y"] < hint["y"] + hint["height"] <= label["y"]
    assert "[SEMANTIC] The API listens on port 8080" in page.inner_text("#try-text")
    selected = page.locator("tr.selected")
    assert selected.count() == 1
    assert selected.get_attribute("data-memory-id") == ids["port"]
    assert "Selected" in selected.inner_text()
    rows = page.locator("tr[data-memory-id]")
    assert rows.count() == 3  # ada's three memories, never bob's
    assert "7070" not in page.inner_text("body")  # bob's memory; ids (random hex) are not text
    assert "below" in page.locator(f'tr[data-memory-id="{ids["tabs"]}"]').inner_text()
    # trying wrote nothing: no use counted, no context recorded
    assert live.engine.get(ids["port"], "ada").access_count == 0
    assert live.engine.contexts("ada") == []


def test_a_small_model_shows_its_tier_and_a_budget_overrides(live: Live) -> None:
    _seed(live)
    http = client(live, live.key("ada"))
    small = http.get("/ui/try", params={"message": QUESTION, "model": "gpt-4"})
    assert small.status_code == 200
    shown = text_of(small.text)
    assert "Tier 1 (compiled DNA summary)" in shown and "of a 480-token budget" in shown
    assert "not compiled yet" in shown
    fixed = http.get("/ui/try", params={"message": QUESTION, "budget": "1200", "model": ""})
    assert "Tier 3 (relevance-gated)" in text_of(fixed.text)
    assert "of a 1200-token budget" in text_of(fixed.text)
    for budget in ("lots", "²", "٣"):  # Unicode's digits were a 500 (int() refuses "²")
        bad = http.get("/ui/try", params={"message": QUESTION, "budget": budget})
        assert bad.status_code == 400 and "whole number of tokens" in bad.text
    huge = http.get("/ui/try", params={"message": QUESTION, "budget": "9" * 12})
    assert huge.status_code == 400 and "token_budget must be" in huge.text  # the engine's


def test_a_project_limited_key_tries_only_in_its_project(live: Live) -> None:
    e = live.engine
    e.remember("The web API listens on port 8080", "ada", project="web")
    e.remember("The billing API listens on port 9090", "ada", project="billing")
    http = client(live, live.key("ada", projects=("web",)))
    mine = http.get("/ui/try", params={"message": QUESTION})
    assert "8080" in mine.text and "9090" not in mine.text
    other = http.get("/ui/try", params={"message": QUESTION, "project": "billing"})
    assert other.status_code == 403 and "9090" not in other.text


def test_try_works_at_phone_width_without_javascript(browser: Any, live: Live) -> None:
    _seed(live)
    page = signed_in(browser, live, live.key("ada"), viewport=PHONE, javascript=False)
    page.goto(f"{live.url}/ui/try")
    page.get_by_label("Message").fill(QUESTION)
    page.get_by_role("button", name="Try it").click()
    page.wait_for_selector("tr.selected")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


FOLLOW_UP = "and on staging?"


def test_a_continuation_is_tried_with_the_turn_before(browser: Any, live: Live) -> None:
    ids = _seed(live)
    page = signed_in(browser, live, live.key("ada"))
    page.goto(f"{live.url}/ui/try")
    page.get_by_label("Message").fill(FOLLOW_UP)
    page.get_by_role("button", name="Try it").click()
    page.wait_for_selector("#try-summary")
    assert ids["port"] not in page.locator("tr.selected").evaluate_all(
        "rows => rows.map(r => r.dataset.memoryId)"
    )
    page.get_by_label("Turn before").fill(QUESTION)
    page.get_by_role("button", name="Try it").click()
    page.wait_for_selector(f'tr.selected[data-memory-id="{ids["port"]}"]')
    assert "[SEMANTIC] The API listens on port 8080" in page.inner_text("#try-text")
    assert "previous turn used (a continuation)" in page.content()
    assert page.get_by_label("Turn before").input_value() == QUESTION  # kept in the form
    assert live.engine.contexts("ada") == []  # trying wrote nothing


def test_the_turn_before_is_escaped_and_validated_like_the_message(live: Live) -> None:
    _seed(live)
    http = client(live, live.key("ada"))
    earlier = "<script>alert(1)</script> the API port?"
    marked = http.get("/ui/try", params={"message": FOLLOW_UP, "previous": earlier})
    assert marked.status_code == 200 and "<script>alert(1)" not in marked.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; the API port?" in marked.text
    long = http.get("/ui/try", params={"message": FOLLOW_UP, "previous": "x" * 4_001})
    assert long.status_code == 422  # which field and why (base: "check these fields: previous")
    assert "previous: String should have at most 4000 characters" in text_of(long.text)
    # a blank turn before is no turn before: the message is tried alone
    blank = http.get("/ui/try", params={"message": FOLLOW_UP, "previous": "   "})
    alone = http.get("/ui/try", params={"message": FOLLOW_UP})
    assert blank.status_code == 200 and "previous turn" not in text_of(blank.text)
    assert _selected(blank.text) == _selected(alone.text) and _selected(alone.text)


def _selected(html: str) -> list[str]:
    return re.findall(r'<tr class="selected"[^>]*data-memory-id="([^"]+)"', html)
