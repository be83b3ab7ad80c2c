"""Attack: script in everything a user can send, shown by the web inspector in a real browser.

A SQLite store (hash embedder) is filled, through the public API only, with text meant to
run in a page: memory content, domains, project, session and key, metadata keys and values,
a user id, a conflicting pair, recorded contexts (messages sent to ``context()``), feedback,
compiled tiers, and a memory id. Then headless Chromium (Playwright, ``/usr/bin/chromium``)
signs in with an admin key, opens every page of the inspector for that user (memories with
searches and filters made of payloads, each memory page, try with payloads as message and
turn before, tiers, conflicts, activity, a missing memory's 404) and submits the edit form
with a payload, and the sign-in page with a ``next`` that leaves the site.

Every payload, when it runs, sets ``window.__pwned``; a template payload would print 49.
Rules: no page ever runs one (``window.__pwned`` stays unset, no dialog opens, no element
with an inline ``on…`` handler or a ``javascript:`` URL appears in any page), every payload
that a page shows is shown as the text that was sent, and the sign-in never sends the
browser off the site.

Prints a JSON summary; exits 0 only when no page ran anything.

    PYTHONPATH=src .venv/bin/python bench/attacks/inspector_script.py [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish
from http_junk import LiveServer

from engrain import Engine
from engrain.config import Settings
from engrain.keys import KeyRing
from engrain.server import create_app

CHROMIUM = "/usr/bin/chromium"
RUN = "window.__pwned=(window.__pwned||[]).concat(['{tag}'])"
#: name -> payload; ``{tag}`` names where it was planted
PAYLOADS = {
    "script": "<script>" + RUN + "</script>",
    "img": '"><img src=x onerror="' + RUN + '">',
    "svg": "'><svg onload=\"" + RUN + '">',
    "textarea": "</textarea><script>" + RUN + "</script>",
    "title": "</title><script>" + RUN + "</script>",
    "js-url": "javascript:" + RUN,
    "style": '<style>*{{}}</style><div style="background:url(javascript:' + RUN + ')">',
    "template": "{{{{7*7}}}} {{% raw %}}",
}
USER = 'eve"><script>window.__pwned=["user"]</script>'


def planted(where: str) -> dict[str, str]:
    """Every payload, tagged with ``where`` it was planted."""
    return {name: p.format(tag=f"{where}:{name}") for name, p in PAYLOADS.items()}


def seed(engine: Engine) -> dict[str, Any]:
    """Payloads in everything a user can send; what was planted, by where."""
    plants: dict[str, Any] = {"content": [], "ids": []}
    for name, payload in planted("content").items():
        out = engine.remember(
            f"note {name}: {payload}",
            USER,
            "decision",
            domains=[planted("domain")[name][:200]],
            project=planted("project")[name][:200],
            session_id=planted("session")[name][:200],
            key=planted("key")[name][:200],
            metadata={planted("mkey")[name][:200]: planted("mvalue")[name]},
        )
        plants["content"].append(f"note {name}: {payload}")
        plants["ids"].append(out.memory_id)
    # a conflicting pair (numbers differ), a correction, recorded contexts with feedback
    engine.remember(f"the deploy port is 8080 {planted('pair')['img']}", USER, "fact")
    engine.remember(f"the deploy port is 9090 {planted('pair')['script']}", USER, "fact")
    for name, payload in planted("message").items():
        context = engine.context(f"which deploy port and note {name}? {payload}", USER)
        if context.context_id:
            engine.feedback(USER, context.context_id, helpful=True)
    # a memory whose id is a payload (ids are opaque strings: import takes any)
    record = dict(next(iter(engine.export_records(USER))))
    record.pop("state", None)
    record.update(id='x"><svg onload="window.__pwned=[1]">', content="a memory with an odd id")
    engine.import_records([record])
    plants["ids"].append(record["id"])
    engine.tiers(USER, rebuild=True)
    return plants


def pages(url: str, plants: dict[str, Any]) -> list[str]:
    """Every page to open, for the viewed user."""
    ui = url + "/ui"
    out = [f"{ui}/memories", f"{ui}/tiers", f"{ui}/conflicts", f"{ui}/activity",
           f"{ui}/memories/{quote('<script>nope</script>', safe='')}"]  # fmt: skip
    out += [f"{ui}/memories/{quote(i, safe='')}" for i in plants["ids"]]
    for payload in planted("query").values():
        out.append(f"{ui}/memories?" + urlencode({"q": payload}))
        out.append(f"{ui}/memories?" + urlencode({"domain": payload, "project": payload}))
        out.append(f"{ui}/try?" + urlencode({"message": payload, "previous": payload}))
        out.append(f"{ui}/activity?" + urlencode({"context_id": payload}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from playwright.sync_api import sync_playwright

    broken: list[dict[str, Any]] = []
    visited: list[dict[str, Any]] = []
    dialogs: list[str] = []
    with tempfile.TemporaryDirectory(prefix="h6-inspector-") as tmp:
        settings = Settings(embedder="hash", data_dir=Path(tmp))
        engine = Engine(f"sqlite:///{tmp}/store.db", settings=settings)
        plants = seed(engine)
        ring = KeyRing(engine.store)
        admin = ring.create(admin=True)[0]
        live = LiveServer(create_app(engine, ring, ui_secret="s" * 32))
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_page()
                page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
                page.goto(live.url + "/ui/signin?next=" + quote("//evil.example/x", safe=""))
                page.fill("input[name=key]", admin)
                page.click("button[type=submit]")
                page.wait_for_load_state()
                if not page.url.startswith(live.url + "/ui/"):
                    broken.append({"page": "signin", "problem": f"sent to {page.url}"})
                page.fill("#user-picker", USER)  # the admin views the hostile user
                page.press("#user-picker", "Enter")
                page.wait_for_load_state()
                page.goto(f"{live.url}/ui/memories")
                body = page.inner_text("body")
                # the payloads must be on the pages, as text, or the attack proved nothing
                missing = [c[:40] for c in plants["content"] if c[:40] not in body]
                if missing or "{{7*7}}" not in body:
                    broken.append({"page": "/ui/memories", "problem": f"not shown: {missing}"})
                for target in pages(live.url, plants):
                    page.goto(target)
                    found = inspect(page)
                    visited.append({"page": target[len(live.url) :][:120], **found})
                    if found["ran"] or found["handlers"] or found["js_urls"]:
                        broken.append({"page": target[len(live.url) :][:200], **found})
                # the edit form, sent by the browser with a payload as content and domains
                page.goto(f"{live.url}/ui/memories/{quote(plants['ids'][0], safe='')}")
                page.click("#edit summary")
                page.fill("#e-content", PAYLOADS["script"].format(tag="edited"))
                page.fill("#e-domains", PAYLOADS["img"].format(tag="edited-domain"))
                page.click("form[action$='/edit'] button[type=submit]")
                page.wait_for_load_state()
                found = inspect(page)
                shown = PAYLOADS["script"].format(tag="edited") in page.inner_text("body")
                visited.append({"page": "edit form", **found, "shown_as_text": shown})
                if found["ran"] or found["handlers"] or not shown:
                    broken.append({"page": "edit form", **found, "shown_as_text": shown})
                text = page.inner_text("body")
                browser.close()
        finally:
            live.stop()
            engine.close()
    if dialogs:
        broken.append({"page": "any", "problem": f"dialogs opened: {dialogs}"})
    summary = {"attack": "inspector_script", "pages": len(visited), "broken": broken,
               "visited": visited, "last_page_chars": len(text), "ok": not broken}  # fmt: skip
    finish(summary, args.json)


def inspect(page: Any) -> dict[str, Any]:
    """What ran in ``page`` and what could: the tags that set ``window.__pwned``, elements
    with an inline handler, links or sources with a ``javascript:`` URL."""
    ran = page.evaluate("window.__pwned || []")
    handlers = page.evaluate(
        """[...document.querySelectorAll('*')].flatMap(e => [...e.attributes]
            .filter(a => a.name.startsWith('on')).map(a => e.tagName + ' ' + a.name))"""
    )
    js_urls = page.evaluate(
        """[...document.querySelectorAll('[href],[src],[action],[formaction]')]
            .flatMap(e => ['href','src','action','formaction'].map(n => e.getAttribute(n) || ''))
            .filter(v => v.trim().toLowerCase().startsWith('javascript:'))"""
    )
    return {"status_title": page.title()[:60], "ran": ran, "handlers": handlers,
            "js_urls": js_urls}  # fmt: skip


if __name__ == "__main__":
    main()
