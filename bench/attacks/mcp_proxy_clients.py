"""Attack: MCP and the proxy under concurrent clients of look-alike users, then SIGTERM.

``engrain serve --workers 2`` runs as a child on a SQLite file with the proxy on
(``ENGRAIN_PROXY_UPSTREAM``: a fake OpenAI-compatible upstream served by this script).
Six users whose ids differ by case, one character or a URL character each get a key and a
token word no other user's memory holds, and at once:

- **MCP** (the SDK's ``ClientSession`` over streamable HTTP at ``/mcp``, two sessions per
  user, each its own connection): ``remember`` a fact carrying the token, ``context``,
  ``pin`` one of its own acknowledged memories, ``forget`` another, in a loop;
- **the proxy** (one ``httpx`` thread per user): ``POST /v1/chat/completions`` with the
  token in the user's message, streamed and not in turn. The upstream notes every body
  the proxy sends up (the injected memory included) and answers with the token.

After ``--seconds`` the server gets SIGTERM while every client goes on until it stops
answering. The rules: no 5xx and no MCP tool error (nor protocol failure) before the
signal; no answer (MCP text, the block sent upstream, the proxy's reply) for one user holds
another user's token; every memory whose ``remember`` was acknowledged and whose
``forget`` was not is in the store afterwards (and pinned if its ``pin`` was
acknowledged), no memory whose ``forget`` was acknowledged is; the server exits gracefully
within 60 s; ``integrity_check`` ok; the next ``serve`` on the file answers.

Prints a JSON summary; exits 0 only when every rule held.

    PYTHONPATH=src .venv/bin/python bench/attacks/mcp_proxy_clients.py [--seconds 20] \\
        [--json bench/results/attack-mcp-proxy-clients-s25-h4.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, round_environment
from serve_sigterm import cli, start
from served import Served, free_port

USERS = ("alice", "Alice", "al_ce", "alice%", "alice_", "aIice")


def token(n: int) -> str:
    """User ``n``'s token: a word no other user's memory holds."""
    return f"zq{n}x{'kvw'[n % 3]}tok"


TOKENS = [token(n) for n in range(len(USERS))]


def leaked(text: str, n: int) -> list[str]:
    """The other users' tokens in ``text`` (an answer for user ``n``)."""
    return [t for k, t in enumerate(TOKENS) if k != n and t in text]


class Upstream:
    """The fake upstream: notes what the proxy sends up, answers with the user's token."""

    def __init__(self) -> None:
        self.leaks: list[str] = []
        self.requests = 0

    async def chat(self, request: Request) -> Response:
        raw = (await request.body()).decode()
        body = json.loads(raw)
        self.requests += 1
        said = body["messages"][-1]["content"]
        n = next((k for k, t in enumerate(TOKENS) if t in said), -1)
        if n >= 0 and leaked(raw, n):
            self.leaks.append(f"sent up for {USERS[n]}: {leaked(raw, n)}")
        answer = f"noted {TOKENS[n] if n >= 0 else ''} and the parcel goes to locker nine"
        if body.get("stream"):
            return StreamingResponse(self._events(answer), media_type="text/event-stream")
        message = {"role": "assistant", "content": answer}
        return JSONResponse(
            {"choices": [{"index": 0, "finish_reason": "stop", "message": message}]}
        )

    async def _events(self, answer: str) -> Any:
        words = answer.split(" ")
        for i, word in enumerate(words):
            delta = {"content": word + ("" if i == len(words) - 1 else " ")}
            yield f"data: {json.dumps({'choices': [{'index': 0, 'delta': delta}]})}\n\n".encode()
            await asyncio.sleep(0.01)
        end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        yield f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode()


class Log:
    """What the clients were told, shared by their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.remembered: dict[str, int] = {}  # acknowledged memory id -> user
        self.forgotten: set[str] = set()  # acknowledged forgets
        self.pinned: set[str] = set()
        self.failures: list[str] = []  # before the signal
        self.leaks: list[str] = []
        self.counts: dict[str, int] = {}
        self.signalled = threading.Event()

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def fail(self, what: str) -> None:
        if not self.signalled.is_set():
            with self.lock:
                self.failures.append(what[:300])


async def mcp_client(
    url: str, key: str, n: int, side: int, log: Log, stop: threading.Event
) -> None:
    rng = random.Random(n * 10 + side)
    mine: list[str] = []
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as client,
            streamable_http_client(url + "/mcp", http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            i = 0
            while not stop.is_set():
                i += 1
                step = i % 4
                if step in (1, 3) or len(mine) < 2:
                    text = f"{TOKENS[n]} side {side} fact {i}: locker {rng.randrange(10**6)}"
                    result = await session.call_tool("remember", {"content": text})
                    what = "remember"
                elif step == 2:
                    result = await session.call_tool(
                        "context", {"message": f"which locker did {TOKENS[n]} use?"}
                    )
                    what = "context"
                else:
                    target = mine.pop(rng.randrange(len(mine)))
                    if rng.random() < 0.5:
                        result = await session.call_tool("pin", {"memory_id": target})
                        what = "pin"
                        mine.append(target)
                    else:
                        result = await session.call_tool("forget", {"memory_ids": [target]})
                        what = "forget"
                text = " ".join(getattr(c, "text", "") for c in result.content)
                if result.is_error:
                    log.fail(f"mcp {USERS[n]} {what}: {text[:160]}")
                    if log.signalled.is_set():
                        return
                    continue
                log.count(f"mcp_{what}")
                if leaked(text, n):
                    log.leaks.append(f"mcp {what} for {USERS[n]}: {leaked(text, n)}")
                data = result.structured_content or {}
                with log.lock:
                    if what == "remember" and data.get("memory_id"):
                        if data.get("action") == "stored":
                            log.remembered[data["memory_id"]] = n
                            mine.append(data["memory_id"])
                    elif what == "pin":
                        log.pinned.add(target)
                    elif what == "forget":
                        log.forgotten.add(target)
    except Exception as exc:  # a protocol failure (not a tool error)
        log.fail(f"mcp {USERS[n]} side {side}: {type(exc).__name__}: {exc}")


def proxy_client(url: str, key: str, n: int, log: Log, stop: threading.Event) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        i = 0
        while not stop.is_set():
            i += 1
            stream = i % 2 == 0
            body = {"model": "m", "stream": stream, "messages": [
                {"role": "user", "content": f"{TOKENS[n]} asks about parcel {i}"}]}  # fmt: skip
            try:
                with http.stream("POST", "/v1/chat/completions", json=body) as r:
                    text = b"".join(r.iter_bytes()).decode(errors="replace")
                    status = r.status_code
            except httpx.HTTPError as exc:
                log.fail(f"proxy {USERS[n]}: {type(exc).__name__}")
                if log.signalled.is_set():
                    return
                continue
            if status != 200:
                log.fail(f"proxy {USERS[n]}: {status} {text[:120]}")
                if log.signalled.is_set():
                    return
                continue
            log.count("proxy_stream" if stream else "proxy_json")
            if leaked(text, n):
                log.leaks.append(f"proxy reply for {USERS[n]}: {leaked(text, n)}")


def attack(upstream: Upstream, fake: Served, seconds: float) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(prefix="h4-mcp-proxy-"))
    env = round_environment(d)
    env["ENGRAIN_PROXY_UPSTREAM"] = fake.url + "/v1"
    keys = [cli(env, "keys", "create", "--user", u).stdout.strip().splitlines()[-1] for u in USERS]
    port = free_port()
    server = start(env, port, 2, wait=300)  # two workers' start-up at load ~30
    url = f"http://127.0.0.1:{port}"
    log = Log()
    stop = threading.Event()

    def mcp_loop() -> None:
        async def all_sessions() -> None:
            await asyncio.gather(*(mcp_client(url, keys[n], n, side, log, stop)
                                   for n in range(len(USERS)) for side in (0, 1)))  # fmt: skip

        asyncio.run(all_sessions())

    threads = [threading.Thread(target=mcp_loop)] + [
        threading.Thread(target=proxy_client, args=(url, keys[n], n, log, stop))
        for n in range(len(USERS))
    ]
    for t in threads:
        t.start()
    time.sleep(seconds)
    log.signalled.set()
    server.send_signal(signal.SIGTERM)
    try:
        code: int | str = server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        code = "hung"
    stop.set()
    for t in threads:
        t.join(120)
    db = d / "store.db"
    with sqlite3.connect(db) as raw:
        rows = {r[0]: (r[1], bool(r[2])) for r in raw.execute(
            "SELECT id, user_id, pinned FROM memories")}  # fmt: skip
        integrity = raw.execute("PRAGMA integrity_check").fetchone()[0]
    kept = {i: u for i, u in log.remembered.items() if i not in log.forgotten}
    lost = [i for i in kept if i not in rows]
    back = [i for i in log.forgotten if i in rows]
    unpinned = [i for i in log.pinned - log.forgotten if i in rows and not rows[i][1]]
    wrong_user = [i for i, u in kept.items() if i in rows and rows[i][0] != USERS[u]]
    again = start(env, free_port(), 1, wait=300)
    again.send_signal(signal.SIGTERM)
    reopened = again.wait(60) in (0, -signal.SIGTERM)
    leaks = log.leaks + upstream.leaks
    graceful = code in (0, -signal.SIGTERM)
    summary = {
        "attack": "mcp_proxy_clients",
        "seconds": seconds,
        "answers": log.counts,
        "upstream_requests": upstream.requests,
        "acknowledged_memories": len(log.remembered),
        "acknowledged_forgets": len(log.forgotten),
        "acknowledged_pins": len(log.pinned),
        "rows": len(rows),
        "failures_before_signal": log.failures[:10],
        "failures_count": len(log.failures),
        "leaks": leaks[:10],
        "lost": lost[:10],
        "forgotten_but_stored": back[:10],
        "pinned_but_not": unpinned[:10],
        "stored_for_another_user": wrong_user[:10],
        "exit": code,
        "integrity": integrity,
        "reopened": reopened,
        "ok": not log.failures and not leaks and not lost and not back and not unpinned
        and not wrong_user and graceful and integrity == "ok" and reopened,
    }  # fmt: skip
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    upstream = Upstream()
    fake = Served(Starlette(routes=[Route("/v1/chat/completions", upstream.chat,
                                          methods=["POST"])]))  # fmt: skip
    try:
        summary = attack(upstream, fake, args.seconds)
    finally:
        fake.stop()  # uvicorn's thread would keep the process alive after an error
    finish(summary, args.json)


if __name__ == "__main__":
    main()
