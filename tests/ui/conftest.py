"""Fixtures of the sign-in and memory pages' tests: one live app per test session (uvicorn
in a thread on a free loopback port, a temporary SQLite store, the hash embedder) with
keys for alice, bob and an admin and seeded memories, and the one headless Chromium of the
process (shared with the analysis pages' tests: the sync Playwright API allows one
Playwright per thread). Without ``/usr/bin/chromium`` the browser tests are skipped.

Tests that change a memory change their own (made with :meth:`Site.memory`), so they do
not depend on one another's order.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.keys import KeyRing
from engrain.model import Kind, Memory, MemoryType
from engrain.store.sqlite import SQLiteStore

from ..conftest import NOW, make_settings
from .helpers_pages import CHROMIUM, served

#: Alice's seeded memories beyond one page of the table (50), so there is a next page.
ALICE_NOTES = 56


@dataclass
class Site:
    """The served app: its address, engine, keys (secrets by name) and seeded ids."""

    url: str
    engine: Engine
    ring: KeyRing
    keys: dict[str, str] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)

    def memory(self, content: str, user: str = "alice", **kw: Any) -> str:
        """A new memory of ``user`` (``remember``); its id."""
        out = self.engine.remember(content, user, **kw)
        assert out.action == "stored" and out.memory_id is not None, out
        return out.memory_id

    def api(self, method: str, path: str, key: str = "alice", **kw: Any) -> httpx.Response:
        """A call of the HTTP API with ``key``'s bearer secret."""
        headers = {"Authorization": f"Bearer {self.keys[key]}"}
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **kw)

    @contextlib.contextmanager
    def client(self, key: str = "alice") -> Iterator[httpx.Client]:
        """An HTTP client signed in to the UI with ``key`` (no browser); its ``csrf``
        attribute holds the session's token."""
        with httpx.Client(base_url=self.url, timeout=30) as http:
            answer = http.post("/ui/signin", data={"key": self.keys[key]})
            assert answer.status_code == 303, answer.text
            token = re.search(r'name="csrf" value="([^"]+)"', http.get("/ui/memories").text)
            assert token is not None
            http.csrf = token.group(1)  # type: ignore[attr-defined]
            yield http


def _seed(engine: Engine, site: Site) -> None:
    remember = engine.remember
    site.ids["tabs"] = (
        remember(
            "Alice prefers tabs over spaces in Python files",
            "alice",
            "preference",
            domains=["code"],
            now=NOW,
        ).memory_id
        or ""
    )
    site.ids["port"] = (
        remember(
            "The web API listens on port 8080", "alice", project="web", domains=["ops"], now=NOW
        ).memory_id
        or ""
    )
    site.ids["port2"] = (
        remember(
            "The web API listens on port 9090", "alice", project="web", domains=["ops"], now=NOW
        ).memory_id
        or ""
    )
    site.ids["pinned"] = (
        remember(
            "Deploys happen on Fridays after the standup", "alice", "decision", pinned=True, now=NOW
        ).memory_id
        or ""
    )
    texts = [f"Reading note {i}: chapter {i} of the garden book" for i in range(ALICE_NOTES)]
    vectors = engine.embedder.embed(texts)
    engine.store.write([  # written as is: near-duplicates of one another, never merged
        Memory.new("alice", text, MemoryType.EPISODIC, Kind.EVENT, session_id="reading",
                   now=NOW - timedelta(minutes=i), embedding=vector)
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    ])  # fmt: skip
    site.ids["bob"] = remember("Bob's vault code is 4417 and his cat is Miso", "bob",
                               "fact", now=NOW).memory_id or ""  # fmt: skip


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The app ``engrain serve`` runs (web inspector included) on a free loopback port,
    over a temporary SQLite store with alice's, bob's and an admin's keys."""
    from engrain.server.app import create_app

    tmp = tmp_path_factory.mktemp("ui")
    engine = Engine(settings=make_settings(tmp), store=SQLiteStore(tmp / "ui.db"),
                    embedder=HashEmbedder())  # fmt: skip
    ring = KeyRing(engine.store)
    app = create_app(engine, ring, ui_secret="ui-test-secret-" + "y" * 16)
    try:
        with served(app) as url:
            built = Site(url, engine, ring)
            built.keys = {"alice": ring.create(["alice"])[0], "bob": ring.create(["bob"])[0],
                          "admin": ring.create(admin=True)[0]}  # fmt: skip
            _seed(engine, built)
            yield built
    finally:
        engine.close()


@pytest.fixture(scope="package")
def chromium() -> Iterator[Any]:
    """The headless Debian Chromium of this test process (shared with the analysis pages'
    tests through ``helpers_pages``), stopped once the tests of ``tests/ui`` are done: until
    then the sync API keeps its event loop set in this thread, where ``asyncio.run`` would
    refuse to run."""
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium: Debian's chromium package (make chromium)")
    from . import helpers_pages

    yield helpers_pages._shared_browser()
    helpers_pages.stop_shared()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies) and page at laptop size."""
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(10_000)
    tab = context.new_page()
    yield tab
    context.close()


def sign_in(page: Any, site: Site, key: str = "alice") -> None:
    """Sign ``page`` in through the form with ``key``; it lands on the memories table."""
    page.goto(f"{site.url}/ui/signin")
    page.get_by_label("API key").fill(site.keys[key])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/ui/memories")
