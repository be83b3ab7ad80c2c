"""Screenshots of the web inspector for the docs: ``docs/img/inspector-*.png``.

    python bench/screenshots.py [--out docs/img] [--embedder minilm|hash]

Loads the demo's memories (``examples/memories.jsonl``: Ada, a backend engineer, and what
she taught her assistant) into an in-memory store, adds a contradiction and a
near-duplicate for the review queue, serves three messages (one with feedback) for the
activity page and compiles the tiers; then serves the app on a loopback port, signs in
with a new API key in headless Debian Chromium (Playwright, ``/usr/bin/chromium``) and
captures each page at 1280×800 (the "Try a message" page down to its first candidates),
and the "Try a message" page at phone width (390×844), scrolled to its candidates.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from engrain import Engine, Settings
from engrain.store import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import demo  # noqa: E402  (examples/demo.py: the demo's records and how they load)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking"]
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
#: Height of the "Try a message" capture (the whole page lists every candidate).
TALL = 1500
MESSAGES = (
    "Why did the Stripe webhook fail last week, and how do we retry it safely?",
    "Which Python version and framework does the backend use?",
    "How should I format money amounts in the invoice API?",
)
TRY = "How do we handle a failed Stripe webhook?"


def seed(engine: Engine) -> None:
    """The demo's memories, a conflict, a near-duplicate, three contexts, the tiers."""
    demo.load(engine, demo.read_records(ROOT / "examples" / "memories.jsonl"), demo.USER)
    now = demo.NOW
    engine.remember("The staging database is db-staging-2 in eu-west-1", demo.USER,
                    project=demo.PROJECT, now=now - timedelta(days=30))  # fmt: skip
    engine.remember("The staging database is db-staging-3 in eu-west-1", demo.USER,
                    project=demo.PROJECT, now=now)  # fmt: skip
    engine.remember("Invoices are rendered to PDF by the invoice-renderer worker", demo.USER,
                    project=demo.PROJECT, now=now - timedelta(days=20))  # fmt: skip
    engine.remember("Invoices are rendered to PDF by the invoice renderer worker.", demo.USER,
                    "decision", project=demo.PROJECT, now=now)  # fmt: skip
    contexts = [engine.context(m, demo.USER, token_budget=600, now=now + timedelta(minutes=9 * i))
                for i, m in enumerate(MESSAGES)]  # fmt: skip
    engine.feedback(demo.USER, contexts[0].id, helpful=True)
    engine.tiers(demo.USER, rebuild=True, now=now)


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(engine: Engine) -> tuple[Any, str, str]:
    """The app on a loopback port in a thread: (server, base URL, an API key's secret)."""
    import uvicorn

    from engrain.server.app import create_app

    app = create_app(engine)
    secret = app.state.keys.create([demo.USER], name="screenshots")[0]
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))  # fmt: skip
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}", secret


def capture(base: str, secret: str, out: Path, engine: Engine) -> list[Path]:
    """Sign in and capture every page; the files written."""
    from playwright.sync_api import sync_playwright

    first = engine.list(demo.USER, limit=1)[0].id
    shots: list[tuple[str, str, dict[str, int], str | bool]] = [
        ("inspector-memories.png", "/ui/memories", LAPTOP, False),
        ("inspector-memory.png", f"/ui/memories/{first}", LAPTOP, False),
        ("inspector-try.png", f"/ui/try?message={quote(TRY)}", LAPTOP, "tall"),
        ("inspector-tiers.png", "/ui/tiers", LAPTOP, False),
        ("inspector-conflicts.png", "/ui/conflicts", LAPTOP, False),
        ("inspector-activity.png", "/ui/activity", LAPTOP, False),
        ("inspector-phone.png", f"/ui/try?message={quote(TRY)}", PHONE, "#try-candidates"),
    ]
    written = []
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for name, path, viewport, frame in shots:
            context = browser.new_context(viewport=viewport)
            page = context.new_page()
            page.goto(f"{base}/ui/signin?next={quote('/ui' + path[3:], safe='/')}")
            page.fill("#key", secret)
            page.click("button[type=submit]")
            page.wait_for_load_state("networkidle")
            if frame == "tall":  # the block, the decision and the first candidates
                page.screenshot(path=str(out / name), full_page=True,
                                clip={"x": 0, "y": 0, "width": viewport["width"],
                                      "height": TALL})  # fmt: skip
            else:
                if frame:
                    page.locator(frame).evaluate("element => element.scrollIntoView()")
                page.screenshot(path=str(out / name))
            written.append(out / name)
            context.close()
        browser.close()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Seed, serve, capture."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--embedder", choices=("minilm", "hash"), default="minilm")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="engrain-shots-") as tmp:
        settings = Settings(data_dir=Path(tmp), embedder=args.embedder)
        engine = Engine(settings=settings, store=MemoryStore())
        seed(engine)
        server, base, secret = serve(engine)
        try:
            for path in capture(base, secret, args.out, engine):
                print(path)
        finally:
            server.should_exit = True
            engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
