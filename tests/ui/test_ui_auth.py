"""Signing in to the inspector and what protects a session: a refused key, the cookie's
flags, sign-out, a revoked key, CSRF on every change, no open redirect, security headers,
and the user picker (an admin key picks any user, another key only its own)."""

from __future__ import annotations

from typing import Any

import httpx

from .conftest import Site, sign_in


def test_a_bad_key_is_refused_with_a_message(page: Any, site: Site) -> None:
    page.goto(f"{site.url}/ui/memories")
    assert "/ui/signin?next=/ui/memories" in page.url
    page.get_by_label("API key").fill("egr_not-a-real-key")
    page.get_by_role("button", name="Sign in").click()
    alert = page.get_by_role("alert")
    assert "unknown API key" in alert.inner_text()
    assert "/ui/signin" in page.url
    assert page.context.cookies() == []


def test_sign_in_then_out(page: Any, site: Site) -> None:
    sign_in(page, site)
    assert page.get_by_role("heading", level=1).inner_text() == "Memories of alice"
    cookie = next(c for c in page.context.cookies() if c["name"] == "engrain_ui")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui/"
    assert site.keys["alice"] not in cookie["value"]  # the secret never leaves the form
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/ui/signin")
    page.goto(f"{site.url}/ui/memories/{site.ids['tabs']}")
    assert f"/ui/signin?next=/ui/memories/{site.ids['tabs']}" in page.url
    assert "tabs over spaces" not in page.content()


def test_a_change_without_the_csrf_token_is_refused(site: Site) -> None:
    memory = site.memory("The staging database is called pebble")
    with site.client() as http:
        for data in ({"pinned": "yes"}, {"pinned": "yes", "csrf": "forged"}):
            answer = http.post(f"/ui/memories/{memory}/pin", data=data)
            assert answer.status_code == 403
            assert "security token" in answer.text
        answer = http.post(f"/ui/memories/{memory}/forget", data={"confirmed": "yes"})
        assert answer.status_code == 403
        answer = http.post(
            f"/ui/memories/{memory}/pin",
            headers={"Sec-Fetch-Site": "cross-site"},
            data={"pinned": "yes", "csrf": http.csrf},
        )  # type: ignore[attr-defined]
        assert answer.status_code == 403
        assert http.post("/ui/signout", data={}).status_code == 403
        assert http.get("/ui/memories").status_code == 200  # still signed in
    stored = site.engine.get(memory, "alice")
    assert not stored.pinned and stored.content == "The staging database is called pebble"


def test_a_get_changes_nothing(site: Site) -> None:
    memory = site.memory("The printer on floor 3 jams on A3 paper")
    with site.client() as http:
        for action in ("pin", "mute", "forget"):
            assert http.get(f"/ui/memories/{memory}/{action}").status_code == 405
    stored = site.engine.get(memory, "alice")
    assert not stored.pinned and not stored.muted


def test_a_revoked_key_stops_at_the_next_request(site: Site) -> None:
    secret, key = site.ring.create(["alice"])
    with httpx.Client(base_url=site.url, timeout=30) as http:
        assert http.post("/ui/signin", data={"key": secret}).status_code == 303
        assert http.get("/ui/memories").status_code == 200
        site.ring.revoke(key.id)
        answer = http.get("/ui/memories")
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/ui/signin?next=")
        refused = http.post("/ui/signin", data={"key": secret})
        assert refused.status_code == 401 and "revoked" in refused.text


def test_a_tampered_cookie_is_no_session(site: Site) -> None:
    with site.client() as http:
        value = http.cookies["engrain_ui"]
        payload, mac = value.split(".")
        http.cookies.clear()
        http.cookies.set("engrain_ui", payload + "." + mac[::-1], path="/ui/")
        assert http.get("/ui/memories").status_code == 303


def test_sign_in_never_redirects_off_the_site(site: Site) -> None:
    with httpx.Client(base_url=site.url, timeout=30) as http:
        refused = http.post(
            "/ui/signin", data={"key": site.keys["alice"]}, headers={"Sec-Fetch-Site": "cross-site"}
        )  # another site's form
        assert refused.status_code == 403 and "engrain_ui" not in http.cookies
        for target in ("https://evil.example/", "//evil.example/ui/x", "/ui\\..\\x", "/v1/x"):
            answer = http.post("/ui/signin", data={"key": site.keys["alice"], "next": target})
            assert answer.headers["location"] == "/ui/memories", target


def test_pages_carry_the_security_headers(site: Site) -> None:
    for path in ("/ui/signin", "/ui/static/inspector.css"):
        headers = httpx.get(site.url + path).headers
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "same-origin"
        assert headers["x-content-type-options"] == "nosniff"


def test_an_admin_picks_a_user_and_a_key_only_its_own(site: Site) -> None:
    with site.client("admin") as http:
        answer = http.post(
            "/ui/user",
            data={
                "user_id": "bob",
                "csrf": http.csrf,  # type: ignore[attr-defined]
                "next": "/ui/memories?q=x",
            },
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/memories"
        assert "vault code is 4417" in http.get("/ui/memories").text
    with site.client("alice") as http:
        answer = http.post("/ui/user", data={"user_id": "bob", "csrf": http.csrf})  # type: ignore[attr-defined]
        assert answer.status_code == 403
        assert "vault code" not in http.get("/ui/memories").text
