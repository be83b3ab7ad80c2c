"""Attack: the proxy in front of a hostile upstream, and a caller that leaves mid-stream.

A fake OpenAI-compatible upstream (uvicorn in a thread) answers each request by the mode
its user message names: a whole stream; a stream closed cleanly mid-answer (no
``finish_reason``, no ``[DONE]``); an error event inside a 200 stream; a connection
dropped mid-stream; a slow stream; a 500 / 503 with a JSON body; a 200 whose body is not
JSON; a 200 JSON reply of 9 MB; a 307 redirect to another host. The proxy (the app
``engrain serve --upstream`` runs, SQLite, hash embedder) serves a fresh user per mode,
and a caller that reads two events of a whole stream and disconnects. Rules:

* an exchange is recorded (exactly once) only when the upstream's answer was whole;
* after a broken stream, the retry of the same turn with a whole answer is recorded, whole;
* no redirect is followed (the caller gets the 307 as sent);
* every call ends, and the proxy answers the next request.

Prints a JSON summary; exits 0 only when every rule held.

    PYTHONPATH=src .venv/bin/python bench/attacks/proxy_upstream.py [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
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

ANSWER = "the answer has eight words and ends here"
#: mode -> whether its exchange must be recorded
MODES = {
    "whole": True,
    "slow": True,
    "cut": False,
    "error-event": False,
    "dropped": False,
    "status-500": False,
    "status-503": False,
    "not-json": False,
    "huge-json": False,
    "redirect": False,
}


def _event(piece: str | None, finish: str | None = None) -> bytes:
    delta = {} if piece is None else {"content": piece}
    chunk = {"object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return f"data: {json.dumps(chunk)}\n\n".encode()


async def _stream(mode: str) -> AsyncIterator[bytes]:
    words = ANSWER.split(" ")
    for i, word in enumerate(words):
        if i == 4 and mode == "cut":
            return
        if i == 4 and mode == "error-event":
            yield b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
            return
        if i == 4 and mode == "dropped":
            raise RuntimeError("connection dropped mid-stream")  # uvicorn aborts the body
        if mode == "slow":
            await asyncio.sleep(0.2)
        yield _event(word if i == 0 else " " + word)
    yield _event(None, "stop")
    yield b"data: [DONE]\n\n"


async def upstream_chat(request: Request) -> Response:
    body = json.loads(await request.body())
    mode = request.headers.get("x-attack-mode", "whole")
    if mode.startswith("status-"):
        return JSONResponse({"error": {"message": "down"}}, int(mode[7:]))
    if mode == "not-json":
        return Response(b"<html>gateway says hi", 200, media_type="application/json")
    if mode == "huge-json":
        content = "x" * (9 << 20)
        return JSONResponse({"choices": [{"index": 0, "message": {"content": content}}]})
    if mode == "redirect":
        return Response(b"", 307, headers={"location": "http://127.0.0.1:9/v1/chat/completions"})
    if body.get("stream"):
        return StreamingResponse(_stream(mode), media_type="text/event-stream")
    message = {"role": "assistant", "content": ANSWER}
    return JSONResponse({"choices": [{"index": 0, "finish_reason": "stop", "message": message}]})


def ask(http: httpx.Client, key: str, mode: str, turn_text: str) -> dict[str, Any]:
    """One streamed (or, for the JSON modes, plain) chat request; what came back. The mode
    goes up as a header, so a retry is the same turn (same messages)."""
    stream = mode not in ("not-json", "huge-json")
    body = {"model": "m", "stream": stream, "user": "u",
            "messages": [{"role": "user", "content": turn_text}]}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}", "X-Attack-Mode": mode}
    try:
        with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            size = sum(len(c) for c in r.iter_bytes())
            return {"status": r.status_code, "bytes": size}
    except httpx.HTTPError as exc:  # a dropped stream ends the caller's read with an error
        return {"status": "broken", "error": type(exc).__name__}


def recorded(engine: Engine, user: str) -> list[str]:
    return [m.content for m in engine.list(user)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    upstream = Served(Starlette(routes=[Route("/v1/chat/completions", upstream_chat,
                                              methods=["POST"])]))  # fmt: skip
    broken: list[str] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="h7-proxy-") as tmp:
        settings = Settings(embedder="hash", data_dir=Path(tmp))
        engine = Engine(f"sqlite:///{tmp}/store.db", settings=settings)
        ring = KeyRing(engine.store)
        config = ProxyConfig(upstream=upstream.url + "/v1", upstream_key="sk-test")
        app = create_app(engine, ring, proxy=config)
        proxy = Served(app)
        recorder = app.state.proxy.recorder
        try:
            with httpx.Client(base_url=proxy.url, timeout=60) as http:
                for mode, whole in MODES.items():
                    user = f"user-{mode}"
                    key = ring.create([user])[0]
                    answer = ask(http, key, mode, f"my {mode} locker number is 41")
                    recorder.drain()
                    rows = recorded(engine, user)
                    ok = len(rows) == (1 if whole else 0) and all(ANSWER in r for r in rows)
                    if mode == "redirect":
                        ok = ok and answer["status"] == 307
                    if not whole:  # the retry, whole this time, must be recorded whole
                        retry = ask(http, key, "whole", f"my {mode} locker number is 41")
                        recorder.drain()
                        again = recorded(engine, user)
                        answer["retry"] = retry
                        ok = ok and len(again) == 1 and ANSWER in again[0]
                        rows = again
                    results[mode] = {**answer, "recorded": rows, "ok": ok}
                    if not ok:
                        broken.append(mode)
                # a caller that leaves after two events: nothing recorded, proxy still answers
                key = ring.create(["user-leaves"])[0]
                said = [{"role": "user", "content": "my bike is red"}]
                body = {"model": "m", "stream": True, "user": "u", "messages": said}
                headers = {"Authorization": f"Bearer {key}", "X-Attack-Mode": "slow"}
                with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
                    for n, _ in enumerate(r.iter_lines()):
                        if n >= 2:
                            break
                time.sleep(2.5)  # the rest of the slow stream would have come by now
                recorder.drain()
                left = recorded(engine, "user-leaves")
                after = ask(http, key, "whole", "my bike is red")
                ok = left == [] and after["status"] == 200
                results["caller-leaves"] = {"recorded_after_leaving": left, "next": after, "ok": ok}
                if not results["caller-leaves"]["ok"]:
                    broken.append("caller-leaves")
        finally:
            proxy.stop()
            upstream.stop()
            engine.close()
    summary = {
        "attack": "proxy_upstream",
        "modes": len(results),
        "broken": broken,
        "results": results,
        "ok": not broken,
    }
    finish(summary, args.json)


if __name__ == "__main__":
    main()
