"""Conflicts and duplicates, in Chromium and over HTTP: a flagged pair is resolved from the
page and the change is seen through the engine; refused changes write nothing."""

from __future__ import annotations

from typing import Any

import pytest

from engrain.errors import NotFoundError

from . import helpers_pages
from .helpers_pages import Live, client, signed_in, text_of

live = helpers_pages.live  # the fixtures this module uses
browser = helpers_pages.browser


def _pair(live: Live, user: str = "ada", project: str | None = None) -> tuple[str, str]:
    """Two conflicting facts; (older, newer)."""
    e = live.engine
    old = e.remember("The API listens on port 8080", user, project=project).memory_id
    new = e.remember("The API listens on port 9090", user, project=project).memory_id
    assert old and new
    return old, new


def test_resolve_a_conflict_in_the_browser_and_see_it_through_the_engine(
    browser: Any, live: Live
) -> None:
    old, new = _pair(live)
    page = signed_in(browser, live, live.key("ada"))
    page.get_by_role("link", name="Conflicts").click()
    pair = page.locator("article.pair")
    assert pair.count() == 1
    assert "different numbers" in pair.inner_text()
    assert pair.get_attribute("data-first") == new
    pair.get_by_label("The newer corrects the older").check()
    pair.get_by_role("button", name="Resolve").click()
    page.wait_for_selector("#conflicts-empty")
    assert "Marked as a correction." in page.inner_text("main")
    assert live.engine.get(old, "ada").superseded_by == new
    assert live.engine.get(new, "ada").provenance.metadata.get("corrects") == old
    assert live.engine.review("ada") == []
    text = live.engine.context("Which port does the API listen on?", "ada", token_budget=500).text
    assert "9090" in text and "8080" not in text


def test_keep_the_older_forgets_the_newer(live: Live) -> None:
    old, new = _pair(live)
    http = client(live, live.key("ada"))
    answer = http.post(
        "/ui/conflicts/resolve",
        data={"csrf": http.csrf, "first": new, "second": old, "choice": "keep-second"},
    )
    assert answer.status_code == 303
    with pytest.raises(NotFoundError):
        live.engine.get(new, "ada")
    assert "conflicts_with" not in live.engine.get(old, "ada").provenance.metadata
    assert "Kept one, forgot the other." in text_of(http.get(answer.headers["location"]).text)


@pytest.mark.parametrize("case", ["no csrf", "another user", "no choice", "unknown choice"])
def test_a_refused_resolution_changes_nothing(live: Live, case: str) -> None:
    old, new = _pair(live)
    secret = live.key("bob") if case == "another user" else live.key("ada")
    http = client(live, secret)
    data = {"csrf": http.csrf, "first": new, "second": old, "choice": "keep-first"}
    if case == "no csrf":
        del data["csrf"]
    elif case == "no choice":
        del data["choice"]
    elif case == "unknown choice":
        data["choice"] = "merge"
    answer = http.post("/ui/conflicts/resolve", data=data)
    assert answer.status_code == {"no csrf": 403, "another user": 404}.get(case, 400)
    assert live.engine.get(old, "ada").superseded_by is None
    assert live.engine.get(new, "ada").id == new
    assert len(live.engine.review("ada")) == 1


def test_another_users_pairs_never_show(live: Live) -> None:
    _pair(live, "bob")
    page = client(live, live.key("ada")).get("/ui/conflicts")
    assert "Nothing to review" in text_of(page.text) and "8080" not in page.text


def test_a_project_limited_key_sees_and_resolves_only_its_projects_pairs(live: Live) -> None:
    _, web_new = _pair(live, project="web")
    bill_old, bill_new = _pair(live, project="billing")
    http = client(live, live.key("ada", projects=("web",)))
    page = http.get("/ui/conflicts").text
    assert web_new in page and bill_new not in page
    assert http.get("/ui/conflicts", params={"project": "billing"}).status_code == 403
    answer = http.post(
        "/ui/conflicts/resolve",
        data={"csrf": http.csrf, "first": bill_new, "second": bill_old, "choice": "keep-first"},
    )
    assert answer.status_code == 404
    assert live.engine.get(bill_old, "ada").id == bill_old
