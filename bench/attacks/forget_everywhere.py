"""Attack: forget a memory, then look for its words everywhere a user or another process
can still read them.

One SQLite store (hash embedder, approximate index at any size), user ``ada``: filler
facts; a decision holding marker ``Quorvex`` (pinned, so every compiled tier holds it) and
a conflicting decision that does not; four conversation sessions, the first with a turn
holding marker ``Zembrilo``, the two oldest compressed into summaries (the first's summary
quotes the marker's turn). Before the forget, everything that can keep a memory's words is
made: tiers 1 and 2 compiled (``tiers``), contexts served at tiers 1, 2 and 3 and through
the proxy (recorded, one rated helpful). Then the decision and the marker's turn are
forgotten, and each place is read for either marker:

- the engine: ``context()`` at tiers 1, 2, 3 (right away and after the background
  rebuild), ``recall()`` with and without compressed memories, ``explain()``,
  ``preview()`` at each tier, ``tiers()``, the stored tier sets (what the inspector's tiers
  page shows, read without compiling), ``contexts()``, ``export_records()``, ``review()``,
  ``relations()`` of the conflict partner, ``browse(text=marker)`` (BM25), ``list()``;
- a live ``serve`` app: the inspector's memories (searched), tiers, activity, conflicts
  and try pages, and the block the proxy injects for a small, a middle and a large model;
- a new process on the same file (its working set, BM25 index and approximate index read
  from the file): ``recall()`` of the marker's own sentence, ``context()``, ``browse``;
- the store's files (``store.db``, ``-wal``) as bytes: informational (SQLite's free pages
  are outside the contract), reported, not counted.

A recorded context is history: its record keeps the forgotten id, but ``contexts()`` lists
only memories still stored, so neither marker may show there. Exits 0 only when no place
shows a marker and no call failed. Prints (and with ``--json`` writes) a JSON summary.

    PYTHONPATH=src .venv/bin/python bench/attacks/forget_everywhere.py \\
        [--json bench/results/attack-forget-everywhere-s23-h2.json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, hash_engine, private_environment
from served import Served

from engrain import Engine
from engrain.keys import KeyRing
from engrain.server import create_app
from engrain.server.proxy import ProxyConfig

USER = "ada"
DECIDED = "Quorvex"  # in a pinned decision
SAID = "Zembrilo"  # in a conversation turn, quoted by its session's summary
MARKERS = (DECIDED, SAID)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=11)
QUESTION = "what is the vault code for Project Falcon, and my passport number?"
MODELS = {"tier 1": "gpt-4", "tier 2": "mistral-small", "tier 3": "gpt-4o"}
WINDOWS = {"tier 1": 8_000, "tier 2": 32_000, "tier 3": None}


def make_engine(db: Path) -> Engine:
    # the summaries' erasure is asked for (by default a summary is a memory of its own and
    # keeps the words of a source forgotten after it: docs/decisions.md)
    return hash_engine(db, auto_compress=False, max_chunk_tokens=20, min_chunk_tokens=0,
                       sessions_to_compress=2, forget_summaries=True)  # fmt: skip


def seed(engine: Engine) -> dict[str, str]:
    """The user's memories; the ids of the two memories to forget and the partner."""
    for i in range(30):
        engine.remember(
            f"Filler {i}: the team builds module{i} with tool{i} in region R{i}.", USER, now=T0
        )
    doomed = engine.remember(
        f"The vault code for Project Falcon is 4417 ({DECIDED} keeps it).",
        USER,
        kind="decision",
        pinned=True,
        now=T0,
    )
    partner = engine.remember(
        "The vault code for Project Falcon is 9921.", USER, kind="decision", now=T0
    )
    people = ["Harold", "Ingrid", "Tomasz", "Beatriz"]
    topics = ["database failover", "office lease", "quarterly hiring", "garden fence"]
    for s in range(4):
        turns = [
            {"speaker": "user", "text": f"We met {people[s]} about the {topics[s]}."},
            {"speaker": "assistant", "text": f"Noted: {people[s]} has the {topics[s]}."},
        ]
        if s == 0:
            turns.append(
                {
                    "speaker": "user",
                    "text": f"My passport number is {SAID} 55120, valid to March 2031.",
                }
            )
        engine.ingest_conversation(turns, USER, session_id=f"s{s}", now=T0 + timedelta(days=s))
    engine.compress(USER, force=True, now=T0 + timedelta(days=10))
    said = [m for m in engine.list(USER, limit=None) if SAID in m.content]
    turn = next(m.id for m in said if m.kind.value != "summary")
    return {"decided": doomed.memory_id, "said": turn, "partner": partner.memory_id}


def leaks(text: str) -> list[str]:
    return [m for m in MARKERS if m in text]


def dump(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def engine_places(e: Engine, ids: dict[str, str]) -> dict[str, Callable[[], str]]:
    """Each place the engine answers from, as a function returning what it shows."""
    places: dict[str, Callable[[], str]] = {}
    for tier, window in WINDOWS.items():
        places[f"context {tier}"] = lambda w=window: (
            e.context(QUESTION, USER, context_window=w, now=NOW).text
        )
        places[f"preview {tier}"] = lambda w=window: dump(
            e.preview(QUESTION, USER, context_window=w, now=NOW).to_dict()
        )
    places |= {
        "recall": lambda: dump([m.content for m in e.recall(QUESTION, USER).memories]),
        "recall compressed": lambda: dump(
            [m.content for m in e.recall(QUESTION, USER, include_compressed=True).memories]
        ),
        "explain": lambda: dump(e.explain(QUESTION, USER, now=NOW).to_dict()),
        "stored tier sets": lambda: dump([s.value for s in e.store.states(USER, "tiers")]),
        "tiers()": lambda: dump(e.tiers(USER, now=NOW).to_dict()),
        "contexts()": lambda: dump([c.to_dict() for c in e.contexts(USER, limit=100)]),
        "export_records()": lambda: dump(list(e.export_records(USER))),
        "review()": lambda: dump([vars(p) for p in e.review(USER)]),
        "relations(partner)": lambda: dump(repr(e.relations(ids["partner"], USER))),
        "browse(marker)": lambda: dump(
            [m.content for t in MARKERS for m in e.browse(USER, text=t).memories]
        ),
        "list()": lambda: dump([m.content for m in e.list(USER, limit=None)]),
    }
    return places


def read_places(places: dict[str, Callable[[], str]], tag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, read in places.items():
        try:
            out[f"{tag}: {name}"] = leaks(read())
        except Exception as exc:  # any failure is a finding
            out[f"{tag}: {name}"] = f"failed: {type(exc).__name__}: {exc}"
    return out


class Upstream:
    """A model endpoint that keeps every request's messages and answers one line."""

    def __init__(self) -> None:
        self.received: list[Any] = []
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        self.received.append(json.loads(await request.body())["messages"])
        message = {"role": "assistant", "content": "Noted."}
        return JSONResponse(
            {"choices": [{"index": 0, "finish_reason": "stop", "message": message}]}
        )


def served_places(url: str, key: str, upstream: Upstream) -> dict[str, Callable[[], str]]:
    """The inspector's pages and the proxy's injected block, read over HTTP."""
    ui = httpx.Client(base_url=url, timeout=60, follow_redirects=True)
    assert ui.post("/ui/signin", data={"key": key}).status_code == 200

    def page(path: str, **params: str) -> Callable[[], str]:
        def read() -> str:
            answer = ui.get(path, params=params)
            answer.raise_for_status()
            # the search box and the count line echo ``q``: everything else is read
            shown = re.sub(r'value="[^"]*"|<p id="count".*?</p>', "", answer.text, flags=re.S)
            return unescape(re.sub(r"<[^>]+>", " ", shown))

        return read

    def injected(model: str) -> Callable[[], str]:
        def read() -> str:
            body = {
                "model": model,
                "user": USER,
                "messages": [{"role": "user", "content": QUESTION}],
            }
            answer = httpx.post(
                url + "/v1/chat/completions",
                json=body,
                timeout=60,
                headers={"Authorization": f"Bearer {key}"},
            )
            answer.raise_for_status()
            return dump(upstream.received[-1])

        return read

    places = {f"inspector memories ?q={t}": page("/ui/memories", q=t) for t in MARKERS}
    places |= {
        "inspector tiers": page("/ui/tiers"),
        "inspector activity": page("/ui/activity"),
        "inspector conflicts": page("/ui/conflicts"),
        "inspector try": page("/ui/try", message=QUESTION),
    }
    places |= {
        f"inspector try {tier}": page("/ui/try", message=QUESTION, model=model)
        for tier, model in MODELS.items()
    }
    places |= {f"proxy block {tier}": injected(model) for tier, model in MODELS.items()}
    return places


REOPENED = """
import json, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {here!r})
from forget_everywhere import QUESTION, USER, MARKERS, make_engine, leaks, NOW
from pathlib import Path
e = make_engine(Path({db!r}))
out = {{}}
sentence = "The vault code for Project Falcon is 4417 (Quorvex keeps it)."
said = "My passport number is Zembrilo 55120, valid to March 2031."
for name, read in {{
    "recall(own sentence)": lambda: json.dumps([m.content for q in (sentence, said)
        for m in e.recall(q, USER, top_k=50, include_compressed=True).memories]),
    "context tier 3": lambda: e.context(QUESTION, USER, now=NOW).text,
    "context tier 1": lambda: e.context(QUESTION, USER, context_window=8000, now=NOW).text,
    "browse(marker)": lambda: json.dumps([m.content for t in MARKERS
        for m in e.browse(USER, text=t).memories]),
    "approximate search": lambda: json.dumps([str(hit) for q in (sentence, said)
        for hit in e.store.search(USER, e.embedder.embed_query(q), 50)]),
}}.items():
    try:
        out["new process: " + name] = leaks(read())
    except Exception as exc:
        out["new process: " + name] = "failed: %s: %s" % (type(exc).__name__, exc)
e.close()
print(json.dumps(out))
"""


def new_process(db: Path, ids: dict[str, str]) -> dict[str, Any]:
    """A new process on the file: what it answers (its indexes loaded from the file)."""
    code = REOPENED.format(here=str(Path(__file__).parent), db=str(db))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        return {"new process": f"failed: {done.stderr[-400:]}"}
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    searched = found.get("new process: approximate search")
    if isinstance(searched, list):  # ids, not words: look for the forgotten ids instead
        found["new process: approximate search"] = [
            k for k in ("decided", "said") if ids[k] in done.stdout
        ]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    root, _ = private_environment("h2-forget-everywhere-")
    db = root / "store.db"
    engine = make_engine(db)
    ids = seed(engine)
    key = KeyRing(engine.store).create([USER])[0]
    upstream = Upstream()
    up = Served(upstream.app)
    proxy = ProxyConfig(upstream=up.url + "/v1")
    live = Served(create_app(engine, proxy=proxy, ui_secret="s" * 32))
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    try:
        # everything that can hold the words is made before the forget
        engine.tiers(USER, now=NOW)
        places = engine_places(engine, ids)
        served = served_places(live.url, key, upstream)
        first = engine.context(QUESTION, USER, now=NOW)
        engine.feedback(USER, first.context_id, helpful=True)
        before = read_places(
            {
                k: v
                for k, v in (places | served).items()
                if k.startswith(("context", "stored", "proxy", "inspector"))
            },
            "before",
        )
        engine.tiers(USER, rebuild=True, now=NOW)  # counted uses moved the revision
        forgotten = engine.forget([ids["decided"], ids["said"]], USER)
        stored_sets = read_places(
            {
                "stored tier sets": places["stored tier sets"],
                "inspector tiers": served["inspector tiers"],
            },
            "right after",
        )
        after = stored_sets | read_places(places | served, "after")
        engine.wait()
        after |= read_places(places | served, "after the rebuild")
    finally:
        live.stop()
        up.stop()
        engine.close()
    after |= new_process(db, ids)
    raw = b"".join(p.read_bytes() for p in root.rglob("store.db*") if p.is_file())
    in_file = [m for m in MARKERS if m.encode() in raw]
    made = sorted(k for k, v in before.items() if v)
    broken = {k: v for k, v in after.items() if v}
    summary = {
        "attack": "forget_everywhere",
        "forgotten": forgotten,
        "places_read": len(after),
        "markers_shown_before_the_forget": made,
        "shown_after_the_forget": broken,
        "markers_in_the_store_files": in_file,
        "ok": forgotten == 2 and not broken and len(made) >= 4,
    }
    finish(summary, args.json)


if __name__ == "__main__":
    main()
