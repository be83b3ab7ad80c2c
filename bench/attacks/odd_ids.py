"""Attack: memories whose ids hold URL characters, reached through every path that names one.

``import_records`` (and ``POST /v1/import``, ``engrain import``) take any id of at most 256
characters without control characters: ``a/b``, ``../x``, ``x/pin``, ``..``, ``a?b``, ``a#b``,
``a%2Fb``, ``y/relations``. A live ``engrain serve`` app (uvicorn in a thread, SQLite, hash
embedder) then serves, for each such memory next to a plain one:

* the HTTP API through :class:`engrain.client.Client`: get, pin, mute, update, relations,
  forget of the odd id; each must succeed on *that* memory and change no other;
* the web inspector as a browser without JavaScript would: signed in, the memories table is
  searched for the memory's text, its link followed (it must show that memory), and its
  page's Pin form posted to the action as written (resolved like a browser: a ``#`` ends
  the URL, a ``?`` starts its query); exactly that memory must be pinned.

Prints a JSON summary; exits 0 only when every odd id was reached and nothing else changed.

    PYTHONPATH=src .venv/bin/python bench/attacks/odd_ids.py [--json out.json]
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
import tempfile
import threading
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin

import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish

from engrain import Engine
from engrain.client import Client
from engrain.config import Settings
from engrain.errors import EngrainError
from engrain.keys import KeyRing
from engrain.server.app import serve_app

#: Ids an import accepts that mean something in a URL path (the plain memory is "victim").
ODD_IDS = [
    "a/b",
    "../x",
    "a/../b",
    "victim/pin",
    "victim/forget",
    "victim?",
    "victim#",
    "..",
    ".",
    "a?b#c",
    "a%2Fb",
    "%",
    "a b;c",
    "y/relations",
]
#: Ids ending in an action's segment: their own routes (GET, PATCH, DELETE …/{id}, the
#: inspector's page) are, by the URL alone, that action of another id, so the server leaves
#: them to the action routes and the lists (``engrain.server.paths``; documented).
ACTIONS = ("pin", "mute", "relations", "edit", "forget", "correct")  # as in server/paths.py
SHADOWED = {i for i in ODD_IDS if i.endswith(tuple(f"/{a}" for a in ACTIONS))}
#: Ids no browser can put in a URL's path: WHATWG URL parsing reads a segment ``%2E`` or
#: ``%2E%2E`` as ``.`` / ``..`` and removes it (documented: the API and the lists reach them).
BROWSER_DOTS = {".", ".."}


class Live:
    """The app ``engrain serve`` runs, served by uvicorn in a thread on a loopback port."""

    def __init__(self, engine: Engine) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        app = serve_app(engine, KeyRing(engine.store))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]})
        self.thread.start()
        while not self.server.started:
            threading.Event().wait(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def seed(engine: Engine) -> dict[str, str]:
    """The plain memory and one memory per odd id, imported; content by id."""
    engine.remember("template memory", "alice", "fact")
    template = next(iter(engine.export_records("alice")))
    base = {k: v for k, v in template.items() if k not in ("state", "embedding", "id")}
    engine.forget(template["id"], "alice")
    contents = {i: f"memory {n} called {i} ({'plain' if i == 'victim' else 'odd'})"
                for n, i in enumerate(["victim", *ODD_IDS])}  # fmt: skip
    engine.import_records([{**base, "id": i, "content": c} for i, c in contents.items()])
    return contents


def flags(engine: Engine) -> dict[str, tuple[bool, bool, float, bool]]:
    """Every memory's pinned, muted, importance and whether it still exists, by id."""
    rows = {m.id: m for m in engine.list("alice", limit=1000)}
    return {i: (m.pinned, m.muted, round(m.importance, 3), True) for i, m in rows.items()}


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return sorted(i for i in before.keys() | after.keys() if before.get(i) != after.get(i))


def api_attack(engine: Engine, client: Client, memory_id: str) -> dict[str, Any]:
    """Each call of the client on ``memory_id``: what it did and whom it changed."""
    out: dict[str, Any] = {}
    calls = [
        ("get", lambda: client.get(memory_id, "alice").id == memory_id),
        ("relations", lambda: client.relations(memory_id, "alice") is not None),
        ("pin", lambda: client.pin(memory_id, "alice").pinned),
        ("mute", lambda: client.mute(memory_id, "alice").muted),
        ("update", lambda: client.update(memory_id, "alice", importance=0.123).id == memory_id),
        ("forget", lambda: client.forget(memory_id, "alice") == 1),
    ]
    for name, call in calls:
        if name in ("get", "update") and memory_id in SHADOWED:
            continue
        before = flags(engine)
        try:
            result = call()
        except EngrainError as exc:
            out[name] = {"ok": False, "error": type(exc).__name__}
            continue
        except Exception as exc:  # not in the error tree: a defect of its own
            out[name] = {"ok": False, "error": f"not EngrainError: {type(exc).__name__}"}
            continue
        others = [i for i in changed(before, flags(engine)) if i != memory_id]
        out[name] = {"ok": bool(result) and not others, "others_changed": others}
    return out


def browser_join(base: str, href: str) -> str:
    """``href`` resolved against ``base`` as a browser does: fragment dropped, and a path
    segment of dots spelled ``%2E`` read as a dot segment (the URL Standard)."""
    dots = re.sub(r"(?<=/)(?:%2[eE]|\.){1,2}(?=/|$|\?|#)",
                  lambda m: m.group(0).replace("%2E", ".").replace("%2e", "."), href)  # fmt: skip
    return urldefrag(urljoin(base, dots)).url


def ui_attack(engine: Engine, http: httpx.Client, memory_id: str, text: str) -> dict[str, Any]:
    """Find the memory in the table, follow its link, post its page's Pin form."""
    table = http.get("/ui/memories", params={"q": text})
    links = re.findall(r'<a href="([^"]*)">([^<]*)</a>', table.text)
    href = next((unescape(h) for h, label in links if unescape(label) == text), None)
    if href is None:
        return {"ok": False, "error": "not in the table"}
    url = browser_join(str(table.url), href)
    shown = http.get(url)
    if text not in unescape(shown.text):
        return {"ok": False, "error": f"its link shows another page ({shown.status_code})"}
    form = re.search(r'<form method="post" action="([^"]*/pin)">', shown.text)
    token = re.search(r'name="csrf" value="([^"]+)"', shown.text)
    if form is None or token is None:
        return {"ok": False, "error": "no pin form"}
    action = browser_join(url, unescape(form.group(1)))
    before = flags(engine)
    answer = http.post(action, data={"csrf": token.group(1), "pinned": "yes"})
    moved = changed(before, flags(engine))
    return {"ok": moved == [memory_id], "status": answer.status_code, "changed": moved}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="h7-odd-ids-") as tmp:
        settings = Settings(embedder="hash", data_dir=Path(tmp))
        engine = Engine(f"sqlite:///{tmp}/store.db", settings=settings)
        contents = seed(engine)
        key = KeyRing(engine.store).create(["alice"])[0]
        live = Live(engine)
        results: dict[str, Any] = {}
        try:
            with httpx.Client(base_url=live.url, timeout=30) as http:
                assert http.post("/ui/signin", data={"key": key}).status_code == 303
                for memory_id in ODD_IDS:  # the inspector first: the API forgets them
                    results[memory_id] = {"ui": ui_attack(engine, http, memory_id,
                                                          contents[memory_id])}  # fmt: skip
            client = Client(live.url, key)
            for memory_id in ODD_IDS:
                results[memory_id]["api"] = api_attack(engine, client, memory_id)
            client.close()
            victim_left = "victim" in flags(engine)
        finally:
            live.stop()
            engine.close()
    failures = []
    for memory_id, outcome in results.items():
        if not outcome["ui"]["ok"] and memory_id not in BROWSER_DOTS | SHADOWED:
            failures.append(f"{memory_id} ui")
        failures += [f"{memory_id} api.{call}" for call, r in outcome["api"].items() if not r["ok"]]
    summary = {
        "attack": "odd_ids",
        "ids": len(ODD_IDS),
        "calls": sum(len(r["api"]) + 1 for r in results.values()),
        "failures": len(failures),
        "failed": failures,
        "victim_still_there": victim_left,
        "ui_unreachable_by_design": {i: results[i]["ui"] for i in sorted(BROWSER_DOTS | SHADOWED)},
        "results": results,
        "ok": not failures and victim_left,
    }
    finish(summary, args.json)


if __name__ == "__main__":
    main()
