"""Attack: the proxy between a careless caller and a sloppy upstream: headers beyond ASCII,
malformed streams and replies, and a message longer than ``max_text_chars``.

A fake OpenAI-compatible upstream (uvicorn in a thread) answers by the mode the caller's
``X-Attack-Mode`` header names; the proxy (``create_app(..., proxy=...)``, SQLite, hash
embedder) is called with ``httpx`` and the ``openai`` SDK. Modes:

* ``utf8-reply-header`` / ``raw-reply-header``: a reply header in UTF-8 / in no encoding;
* ``utf8-caller-header``: the caller sends ``X-Title`` in UTF-8 (an app name);
* ``sse-garbage``: a 200 stream of events that are not JSON, not objects, ``choices`` not a
  list, a ``delta`` that is a number, then a ``finish_reason``;
* ``sse-no-newline``: a whole stream whose last event has no blank line after it;
* ``json-list`` / ``json-null-content`` / ``wrong-content-type``: a 200 whose JSON is a list,
  whose content is null, or whose body is JSON sent as ``text/html``;
* ``too-large``: the caller's latest message is longer than ``max_text_chars``.

Rules: the proxy never answers 5xx of its own (the upstream's status comes back); headers
pass byte for byte both ways; an exchange is recorded only when the answer was text from a
whole reply, and only once; a too-large message goes up unchanged with ``X-Engrain-Memory:
too_large`` and is not recorded; the proxy answers the next request.

Prints a JSON summary; exits 0 only when every rule held.

    PYTHONPATH=src .venv/bin/python bench/attacks/proxy_headers.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish
from served import Served

from engrain import Engine
from engrain.config import Settings
from engrain.keys import KeyRing
from engrain.server import create_app
from engrain.server.proxy import ProxyConfig

ANSWER = "the locker code is nine nine one"
NOTE = "日本語 ☕".encode()
RAW = b"\xff\x80 no encoding"
TITLE = "Café ☕ app".encode()
#: mode -> (whether its exchange is recorded, whether the caller streams)
MODES: dict[str, tuple[bool, bool]] = {
    "whole": (True, False),
    "utf8-reply-header": (True, False),
    "raw-reply-header": (True, True),
    "utf8-caller-header": (True, True),
    "sse-garbage": (False, True),
    "sse-no-newline": (True, True),
    "json-list": (False, False),
    "json-null-content": (False, False),
    "wrong-content-type": (True, False),
    "too-large": (False, False),
}
seen_titles: list[bytes] = []


def _event(data: Any) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _delta(piece: str | None, finish: str | None = None) -> dict[str, Any]:
    delta = {} if piece is None else {"content": piece}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def _stream(mode: str) -> AsyncIterator[bytes]:
    if mode == "sse-garbage":
        yield b"data: {not json\n\n"
        yield _event([1, 2])
        yield _event({"choices": "x"})
        yield _event({"choices": [{"index": 0, "delta": 5}]})
        yield _event({"choices": [7, None]})
        yield _event(_delta(None, "stop"))
        yield b"data: [DONE]\n\n"
        return
    words = ANSWER.split(" ")
    for i, word in enumerate(words):
        yield _event(_delta(word if i == 0 else " " + word))
    yield _event(_delta(None, "stop"))
    yield b"data: [DONE]" if mode == "sse-no-newline" else b"data: [DONE]\n\n"


async def upstream_chat(request: Request) -> Response:
    body = json.loads(await request.body())
    mode = request.headers.get("x-attack-mode", "whole")
    seen_titles.extend(v for k, v in request.headers.raw if k == b"x-title")
    whole = {"choices": [{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": ANSWER}}]}  # fmt: skip
    reply: Response
    if body.get("stream"):
        reply = StreamingResponse(_stream(mode), media_type="text/event-stream")
    elif mode == "json-list":
        reply = JSONResponse([whole])
    elif mode == "json-null-content":
        reply = JSONResponse({"choices": [{"index": 0, "message": {"content": None}}]})
    elif mode == "wrong-content-type":
        reply = Response(json.dumps(whole).encode(), 200, media_type="text/html")
    else:
        reply = JSONResponse(whole)
    if mode == "utf8-reply-header":
        reply.raw_headers.append((b"x-upstream-note", NOTE))
    if mode == "raw-reply-header":
        reply.raw_headers.append((b"x-upstream-note", RAW))
    return reply


def call(http: httpx.Client, key: str, mode: str, text: str, stream: bool) -> dict[str, Any]:
    headers = [(b"authorization", f"Bearer {key}".encode()), (b"x-attack-mode", mode.encode())]
    if mode == "utf8-caller-header":
        headers.append((b"x-title", TITLE))
    body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": text}]}
    try:
        with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            size = sum(len(c) for c in r.iter_bytes())
            memory = r.headers.get("x-engrain-memory")
            note = dict(r.headers.raw).get(b"x-upstream-note")
            return {"status": r.status_code, "bytes": size, "memory": memory, "note": note}
    except httpx.HTTPError as exc:
        return {"status": "broken", "error": type(exc).__name__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    upstream = Served(Starlette(routes=[Route("/v1/chat/completions", upstream_chat,
                                              methods=["POST"])]))  # fmt: skip
    broken: list[str] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="h6-proxy-headers-") as tmp:
        settings = Settings(embedder="hash", data_dir=Path(tmp), max_text_chars=5_000)
        engine = Engine(f"sqlite:///{tmp}/store.db", settings=settings)
        ring = KeyRing(engine.store)
        config = ProxyConfig(upstream=upstream.url + "/v1", upstream_key="sk-test")
        app = create_app(engine, ring, proxy=config)
        proxy = Served(app)
        recorder = app.state.proxy.recorder
        try:
            with httpx.Client(base_url=proxy.url, timeout=60) as http:
                for mode, (recorded, stream) in MODES.items():
                    user = f"user-{mode}"
                    key = ring.create([user])[0]
                    engine.remember(f"{user} keeps a locker at the gym", user)
                    before = len(engine.list(user))
                    text = f"what is my {mode} locker code?"
                    if mode == "too-large":
                        text = "a pasted log line that says nothing\n" * 200
                    answer = call(http, key, mode, text, stream)
                    twice = call(http, key, mode, text, stream)  # the same turn again
                    recorder.drain()
                    rows = [m.content for m in engine.list(user)][: len(engine.list(user)) - before]
                    problems = []
                    if answer.get("status") != 200 or twice.get("status") != 200:
                        problems.append(f"status {answer.get('status')}/{twice.get('status')}")
                    if recorded != (len(rows) == 1) or len(rows) > 1:
                        problems.append(f"{len(rows)} memories recorded, expected "
                                        f"{int(recorded)}")  # fmt: skip
                    if recorded and rows and ANSWER not in rows[0]:
                        problems.append("the recorded answer is not whole")
                    if mode == "utf8-reply-header" and answer.get("note") != NOTE:
                        problems.append(f"reply header came back as {answer.get('note')!r}")
                    if mode == "raw-reply-header" and answer.get("note") != RAW:
                        problems.append(f"reply header came back as {answer.get('note')!r}")
                    if mode == "utf8-caller-header" and seen_titles[-1:] != [TITLE]:
                        problems.append(f"X-Title went up as {seen_titles[-1:]!r}")
                    if mode == "too-large" and answer.get("memory") != "too_large":
                        problems.append(f"X-Engrain-Memory {answer.get('memory')!r}")
                    results[mode] = {**answer, "note": repr(answer.get("note")),
                                     "recorded": len(rows), "problems": problems}  # fmt: skip
                    if problems:
                        broken.append(mode)
                # the SDK, after all that: the proxy still answers, plain and streamed
                key = ring.create(["user-sdk"])[0]
                client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0)
                said = [{"role": "user", "content": "what is my sdk locker code?"}]
                plain = client.chat.completions.create(model="m", messages=said)  # type: ignore[arg-type]
                pieces = client.chat.completions.create(model="m", messages=said, stream=True)  # type: ignore[arg-type]
                streamed = "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
                sdk_ok = plain.choices[0].message.content == ANSWER and streamed == ANSWER
                results["sdk-after"] = {"ok": sdk_ok}
                if not sdk_ok:
                    broken.append("sdk-after")
        finally:
            proxy.stop()
            upstream.stop()
            engine.close()
    summary = {"attack": "proxy_headers", "modes": len(results), "broken": broken,
               "results": results, "ok": not broken}  # fmt: skip
    finish(summary, args.json)


if __name__ == "__main__":
    main()
