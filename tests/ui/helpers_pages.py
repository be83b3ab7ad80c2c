"""Fixtures of the analysis pages' browser tests (try, tiers, conflicts, activity): a live
``engrain`` app on a loopback port (uvicorn in a thread, the in-memory store and the hash
embedder) and one headless Debian Chromium per session, driven by Playwright.

Test modules import the fixtures they use (``from .helpers_pages import browser, live``).
Without ``/usr/bin/chromium`` the browser tests are skipped (``make chromium``)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.keys import KeyRing
from engrain.store import MemoryStore

from ..conftest import make_settings

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking"]
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@dataclass
class Live:
    """A served app: where it answers, its engine and its key ring."""

    url: str
    engine: Engine
    keys: KeyRing

    def key(self, *users: str, projects: tuple[str, ...] = ()) -> str:
        """A new API key's secret for ``users``."""
        return self.keys.create(list(users), projects=list(projects))[0]


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread on a free loopback socket (bound here, so no
    other process can take the port first); yields its base URL, stops it on exit."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    """``create_app`` (web inspector included) served by uvicorn on a free loopback port
    in a thread, over a fresh in-memory store."""
    from engrain.server.app import create_app

    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(),
                    embedder=HashEmbedder())  # fmt: skip
    app = create_app(engine, ui_secret="pages-test-secret-" + "x" * 16)
    try:
        with served(app) as url:
            yield Live(url, engine, app.state.keys)
    finally:
        engine.close()


#: The one Playwright and Chromium of this test process: the sync API allows a single
#: Playwright per thread, and every module naming :func:`browser` gets its own fixture,
#: so they (and ``conftest.chromium``) share this one.
_SHARED: dict[str, Any] = {}


def _shared_browser() -> Any:
    """The shared Chromium, launched on first use."""
    if "browser" not in _SHARED:
        from playwright.sync_api import sync_playwright

        playwright = sync_playwright().start()
        _SHARED["playwright"] = playwright
        _SHARED["browser"] = playwright.chromium.launch(executable_path=str(CHROMIUM),
                                                        args=CHROMIUM_ARGS)  # fmt: skip
    return _SHARED["browser"]


def stop_shared() -> None:
    """Close the shared Chromium and stop Playwright (idempotent). Until then the sync
    API's event loop stays set in this thread and ``asyncio.run`` refuses to run, so the
    browser tests come last in a session (``tests/ui`` sorts after ``tests/test_*``)."""
    browser = _SHARED.pop("browser", None)
    playwright = _SHARED.pop("playwright", None)
    if browser is not None:
        browser.close()
    if playwright is not None:
        playwright.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """The headless Debian Chromium of this test process, stopped at the session's end."""
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium (make chromium)")
    yield _shared_browser()
    stop_shared()


def signed_in(
    browser: Any,
    live: Live,
    secret: str,
    *,
    viewport: dict[str, int] = LAPTOP,
    javascript: bool = True,
) -> Any:
    """A new browser page signed in with ``secret`` (on the memories page)."""
    context = browser.new_context(viewport=viewport, java_script_enabled=javascript)
    page = context.new_page()
    page.goto(f"{live.url}/ui/signin")
    page.fill("#key", secret)
    page.click("button[type=submit]")
    page.wait_for_url("**/ui/memories**")
    return page


def client(live: Live, secret: str) -> Any:
    """An ``httpx.Client`` signed in with ``secret`` through the form (no browser: for the
    checks a browser adds nothing to); its ``csrf`` attribute holds the session's token."""
    import re

    import httpx

    http = httpx.Client(base_url=live.url, timeout=30.0)
    answer = http.post("/ui/signin", data={"key": secret, "next": "/ui/tiers"})
    assert answer.status_code == 303, answer.text
    page = http.get("/ui/tiers").text
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    http.csrf = found.group(1)  # type: ignore[attr-defined]
    return http


def text_of(html: str) -> str:
    """A page's text as a reader sees it: tags dropped, whitespace folded."""
    import re

    return " ".join(re.sub(r"<[^>]+>", " ", html).split()).replace(" -token", "-token")
