"""The memories table and a memory's page in Chromium: only the signed-in user's
memories, search, filters and pages; pin, mute, forget, edit and mark as correction, each
seen through the HTTP API afterwards; another user's memory never shown whatever URL is
typed; readable without JavaScript and at phone width; user text shown, never run."""

from __future__ import annotations

import re
from typing import Any

import httpx

from .conftest import ALICE_NOTES, Site, sign_in


def _rows(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("table.memories td.content-cell a").all_inner_texts()]


def test_the_table_shows_only_your_memories_in_pages(page: Any, site: Site) -> None:
    sign_in(page, site)
    first = _rows(page)
    assert len(first) == 50
    total = site.engine.store.count("alice")  # other tests add memories of their own
    assert total >= ALICE_NOTES + 4
    assert page.locator("#count").inner_text().startswith(f"{total} memories match")
    page.get_by_role("link", name="Next page").click()
    second = _rows(page)
    assert second and not set(first) & set(second)
    everything = "\n".join(first + second)
    assert "tabs over spaces" in everything and "vault code" not in everything
    if total <= 100:
        assert page.get_by_role("link", name="Next page").count() == 0


def test_search_and_filters(page: Any, site: Site) -> None:
    sign_in(page, site)
    page.get_by_label("Search").fill("port")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url("**q=port**")
    assert sorted(_rows(page)) == ["The web API listens on port 8080",
                                   "The web API listens on port 9090"]  # fmt: skip
    page.get_by_label("Search").fill("")
    page.get_by_label("Kind").select_option("preference")  # applies at once (the script)
    page.wait_for_url("**kind=preference**")
    assert _rows(page) == ["Alice prefers tabs over spaces in Python files"]
    page.goto(f"{site.url}/ui/memories?conflicting=yes&domain=ops&project=web")
    assert len(_rows(page)) == 2 and page.locator(".badge.conflict").count() == 2
    page.goto(f"{site.url}/ui/memories?pinned=yes")
    assert "Deploys happen on Fridays after the standup" in _rows(page)
    page.goto(f"{site.url}/ui/memories?q=vault")  # bob's words: nothing of his
    assert _rows(page) == [] and "No memory matches" in page.content()


def test_pin_mute_and_forget_are_seen_through_the_api(page: Any, site: Site) -> None:
    memory = site.memory("The nightly backup runs at 02:30 UTC", kind="fact")
    sign_in(page, site)
    page.goto(f"{site.url}/ui/memories/{memory}")
    page.get_by_role("button", name="Pin").click()
    assert "Pinned" in page.get_by_role("status").inner_text()
    page.get_by_role("button", name="Mute").click()
    assert "Muted" in page.get_by_role("status").inner_text()
    seen = site.api("GET", f"/v1/memories/{memory}").json()
    assert seen["pinned"] is True and seen["muted"] is True
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Forget…").click()
    page.wait_for_url("**/ui/memories?done=forgotten")
    assert site.api("GET", f"/v1/memories/{memory}").status_code == 404


def test_forget_without_javascript_asks_on_a_page_first(chromium: Any, site: Site) -> None:
    memory = site.memory("The office wifi is called heron-5")
    context = chromium.new_context(java_script_enabled=False)
    page = context.new_page()
    try:
        sign_in(page, site)
        page.goto(f"{site.url}/ui/memories/{memory}")
        page.get_by_role("button", name="Forget…").click()
        assert page.get_by_role("heading", level=1).inner_text() == "Forget this memory?"
        assert site.api("GET", f"/v1/memories/{memory}").status_code == 200  # not yet
        page.get_by_role("button", name="Forget it").click()
        page.wait_for_url("**done=forgotten")
        assert site.api("GET", f"/v1/memories/{memory}").status_code == 404
    finally:
        context.close()


def test_edit_and_mark_as_correction(page: Any, site: Site) -> None:
    old = site.memory("The release train leaves every second Tuesday", kind="decision")
    new = site.memory("Releases are cut from the main branch by the on-call", kind="fact")
    sign_in(page, site)
    page.goto(f"{site.url}/ui/memories/{new}")
    page.locator("#edit summary").click()
    page.get_by_label("Content").fill("The release train leaves every Thursday")
    page.get_by_label("Importance (0 to 1)").fill("0.7")
    page.get_by_role("button", name="Save").click()
    assert "Saved" in page.get_by_role("status").inner_text()
    page.locator("#correct summary").click()
    page.get_by_label("Id of the memory this one corrects").fill(old)
    page.get_by_role("button", name="Mark as correction").click()
    assert "Marked as the correction" in page.get_by_role("status").inner_text()
    assert "Corrects The release train leaves every second Tuesday" in page.inner_text("main")
    edited = site.api("GET", f"/v1/memories/{new}").json()
    assert edited["content"] == "The release train leaves every Thursday"
    assert edited["importance"] == 0.7
    assert site.api("GET", f"/v1/memories/{old}").json()["superseded_by"] == new


def test_another_users_memory_never_appears_whatever_the_url(page: Any, site: Site) -> None:
    bob = site.ids["bob"]
    sign_in(page, site)
    for path in (
        f"/ui/memories/{bob}",
        f"/ui/memories/{bob}?user_id=bob",
        f"/ui/memories/{bob.upper()}",
        "/ui/memories?q=vault&user_id=bob",
        "/ui/memories?user_id=bob&sort=used",
    ):
        response = page.goto(site.url + path)
        shown = page.inner_text("body")  # text, not markup: a random id may hold any digits
        assert "vault code" not in shown and "his cat" not in shown, path
        if path.startswith(f"/ui/memories/{bob}"):
            assert (
                response.status == 404
                and page.get_by_role("heading", level=1).inner_text() == "Not found"
            )
    with site.client("alice") as http:
        answer = http.post(f"/ui/memories/{bob}/pin", data={"csrf": http.csrf})  # type: ignore[attr-defined]
        assert answer.status_code == 404
        answer = http.post(
            f"/ui/memories/{site.ids['tabs']}/correct", data={"corrects": bob, "csrf": http.csrf}
        )  # type: ignore[attr-defined]
        assert answer.status_code == 404
    seen = site.api("GET", f"/v1/memories/{bob}", key="bob").json()
    assert seen["pinned"] is False and seen["superseded_by"] is None


def test_user_text_is_shown_never_run(page: Any, site: Site) -> None:
    memory = site.memory('My signature is <img src=x onerror="alert(1)"><script>alert(2)</script>')
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    sign_in(page, site)
    page.goto(f"{site.url}/ui/memories/{memory}")
    assert "<script>alert(2)</script>" in page.locator("#content").inner_text()
    page.goto(f"{site.url}/ui/memories?q=signature")
    assert dialogs == [] and page.locator("main img").count() == 0


def test_the_table_reads_at_phone_width_without_javascript(chromium: Any, site: Site) -> None:
    context = chromium.new_context(viewport={"width": 390, "height": 844},
                                   java_script_enabled=False)  # fmt: skip
    page = context.new_page()
    try:
        sign_in(page, site)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert page.get_by_role("link", name="Alice prefers tabs over spaces").is_visible()
        page.get_by_label("Kind").select_option("decision")
        page.get_by_role("button", name="Apply").click()  # no script: the button submits
        page.wait_for_url("**kind=decision**")
        assert "Deploys happen on Fridays after the standup" in _rows(page)
    finally:
        context.close()


def test_a_memory_page_shows_provenance_usage_and_merged_history(site: Site) -> None:
    def say(text: str, turn: str) -> Any:
        return site.engine.ingest_conversation(
            [{"speaker": "alice", "text": text, "turn_id": turn}], "alice",
            session_id="session-9", memory_type_hint="semantic",
        )  # fmt: skip

    memory = say("Our build server is called anvil and it runs Debian", "turn-17").stored[0]
    assert say("Our build server is called anvil and it runs Debian.", "turn-18").merged == [
        memory]  # fmt: skip
    site.engine.recall("build server anvil", "alice")  # one use
    with site.client() as http:
        facts = " ".join(http.get(f"/ui/memories/{memory}").text.split()).replace("> <", "><")
    assert "<code>turn-17</code>, <code>turn-18</code>" in facts and "session-9" in facts
    assert "Merged history" in facts and "and it runs Debian</li>" in facts
    assert "<dt>Injected</dt><dd>1 time</dd>" in facts


def test_a_project_limited_key_sees_only_its_projects(site: Site) -> None:
    secret = site.ring.create(["alice"], projects=["web"])[0]
    with httpx.Client(base_url=site.url, timeout=30) as http:
        assert http.post("/ui/signin", data={"key": secret}).status_code == 303
        table = http.get("/ui/memories").text
        assert "listens on port 8080" in table and "tabs over spaces" not in table
        assert "2 memories match" in table
        missing = http.get(f"/ui/memories/{site.ids['tabs']}")
        assert missing.status_code == 404 and "tabs over spaces" not in missing.text
        assert 'aria-label="Main"' in missing.text  # the error page keeps the navigation
        token = re.search(r'name="csrf" value="([^"]+)"', table)
        assert token is not None
        refused = http.post(f"/ui/memories/{site.ids['tabs']}/mute",
                            data={"csrf": token.group(1)})  # fmt: skip
        assert refused.status_code == 404
    assert site.engine.get(site.ids["tabs"], "alice").muted is False


def test_a_memory_whose_id_holds_url_characters_opens_and_changes_itself_only(
    page: Any, site: Site
) -> None:
    """Import takes any id. Links and forms once wrote the id into the URL as is: the link
    of ``V?`` opened memory ``V``, and ``V/x`` or ``notes/2024`` opened nothing (session
    18, h7). Every link and form now spells the id as one path segment."""
    from urllib.parse import quote

    site.keys.setdefault("carol", site.ring.create(["carol"])[0])
    victim = site.memory("Carol's plain memory, the victim", "carol")
    odd = [f"{victim}?", f"{victim}#", f"{victim}/x", "notes/2024"]
    template = next(r for r in site.engine.export_records("carol") if r["id"] == victim)
    base = {k: v for k, v in template.items() if k not in ("state", "embedding", "id")}
    site.engine.import_records([{**base, "id": i, "content": f"odd id {i}"} for i in odd])
    sign_in(page, site, "carol")
    for memory_id in odd:
        page.goto(f"{site.url}/ui/memories?q=odd")
        page.get_by_role("link", name=f"odd id {memory_id}", exact=True).click()
        page.wait_for_load_state()
        assert f"odd id {memory_id}" in page.locator("#content").inner_text(), memory_id
        page.get_by_role("button", name="Pin").click()
        assert "Pinned" in page.get_by_role("status").inner_text(), memory_id
        seen = site.api("GET", f"/v1/memories/{quote(memory_id, safe='')}", key="carol")
        assert seen.json()["pinned"] is True, memory_id
    assert site.api("GET", f"/v1/memories/{victim}", key="carol").json()["pinned"] is False
