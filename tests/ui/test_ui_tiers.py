"""Tiers, in Chromium and over HTTP: the stored tiers with their budget use, fresh or
stale, and the rebuild button (a POST with the CSRF token)."""

from __future__ import annotations

from typing import Any

from . import helpers_pages
from .helpers_pages import Live, client, signed_in, text_of

live = helpers_pages.live  # the fixtures this module uses
browser = helpers_pages.browser


def _seed(live: Live) -> None:
    e = live.engine
    e.remember("Always run the linter before committing", "ada", "invariant")
    e.remember("Money amounts are integers in cents", "ada", "invariant")
    e.remember("Bob's staging database is called blue", "bob", "invariant")


def test_rebuild_in_the_browser_then_stale_after_a_change(browser: Any, live: Live) -> None:
    _seed(live)
    page = signed_in(browser, live, live.key("ada"))
    page.get_by_role("link", name="Tiers").click()
    assert "Not compiled yet" in page.inner_text("#tiers-status")
    assert live.engine.tier_cache.stored("ada", None) is None  # viewing compiles nothing
    page.get_by_role("button", name="Compile now").click()
    page.wait_for_selector("#tier-1-text")
    assert "Tiers compiled." in page.inner_text("main")
    assert "fresh" in page.inner_text("#tiers-status")
    dna = page.inner_text("#tier-1-text")
    assert "linter" in dna and "cents" in dna and "blue" not in dna
    assert "of 4" in page.inner_text("#tier-1-use")  # tokens of the tier's budget
    live.engine.remember("Feature flags are removed within two releases", "ada", "invariant")
    page.reload()
    assert "stale" in page.inner_text("#tiers-status")
    page.get_by_role("button", name="Rebuild now").click()
    page.wait_for_selector("text=Tiers compiled.")
    assert "fresh" in page.inner_text("#tiers-status")
    assert "Feature flags" in page.inner_text("#tier-2-text")


def test_a_rebuild_without_the_csrf_token_compiles_nothing(live: Live) -> None:
    _seed(live)
    http = client(live, live.key("ada"))
    assert http.post("/ui/tiers/rebuild", data={"project": ""}).status_code == 403
    assert live.engine.tier_cache.stored("ada", None) is None
    done = http.post("/ui/tiers/rebuild", data={"csrf": http.csrf, "project": "web"})
    assert done.status_code == 303 and done.headers["location"].endswith("project=web&rebuilt=1")
    assert live.engine.tier_cache.stored("ada", "web") is not None
    assert "Empty" in text_of(http.get(done.headers["location"]).text)  # no memory in web


def test_a_tier_of_one_memory_says_memory(live: Live) -> None:
    live.engine.remember("Money amounts are integers in cents", "cy", "invariant")
    http = client(live, live.key("cy"))
    done = http.post("/ui/tiers/rebuild", data={"csrf": http.csrf, "project": ""})
    assert done.status_code == 303
    page = http.get(done.headers["location"]).text
    assert 'id="tier-1-count">1 memory<' in page
