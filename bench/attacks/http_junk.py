"""Attack: junk through every HTTP route (and the MCP tools) of a live ``engrain serve`` app.

uvicorn serves :func:`engrain.server.serve_app` in a thread on a loopback port (SQLite store,
hash embedder); ``httpx`` sends, for every route, each body field replaced in turn by junk
(wrong types, negatives, huge numbers, NaN-like strings, lone surrogates as JSON escapes,
NUL, deep nesting, look-alike ids), plus malformed whole bodies (not JSON, not an object,
deep JSON, wrong content type). Every answer must be a success or a documented JSON error
(status < 500, the error shape, no traceback), and a refused write must write nothing
(the store's rows, counted before and after, are unchanged).

Prints a JSON summary; exits 0 only when no call broke a rule.

    PYTHONPATH=src .venv/bin/python bench/attacks/http_junk.py [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import socket
import sqlite3
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish

from engrain import Engine
from engrain.config import Settings
from engrain.keys import KeyRing
from engrain.server.app import serve_app

JUNK: list[Any] = [
    None,
    -1,
    0,
    2**70,
    -(2**70),
    1e308,
    -1.5,
    True,
    "",
    " ",
    "\u200b",
    "\ud800",
    "a\u0000b",
    "NaN",
    "-Infinity",
    [],
    [None],
    {},
    {"a": 1},
    "x" * 300,
    "é" * 257,
    [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
]
DEEP = "[" * 100_000 + "]" * 100_000


class LiveServer:
    def __init__(self, app: Any) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)  # fmt: skip
        self.thread.start()
        for _ in range(1000):
            if self.server.started:
                break
            threading.Event().wait(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def bodies(memory_id: str) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(method, path, query, json body) of every route taking input, acting for alice."""
    q = {"user_id": "alice"}
    return [
        (
            "POST",
            "/v1/memories",
            {},
            {
                "user_id": "alice",
                "content": "likes green tea",
                "memory_type": "preference",
                "importance": 0.5,
                "domains": ["food"],
                "metadata": {"a": 1},
                "project": "p",
                "pinned": False,
                "kind": "fact",
            },
        ),
        (
            "POST",
            "/v1/ingest",
            {},
            {
                "user_id": "alice",
                "text": "I moved to Lyon in 2024.",
                "session_id": "s1",
                "project": "p",
            },
        ),
        (
            "POST",
            "/v1/conversations",
            {},
            {
                "user_id": "alice",
                "session_id": "s2",
                "turns": [
                    {
                        "speaker": "alice",
                        "text": "My sister Mia visits from Oslo.",
                        "turn_id": "t1",
                        "at": "2026-01-02T03:04:05Z",
                    }
                ],
            },
        ),
        (
            "POST",
            "/v1/context",
            {},
            {
                "user_id": "alice",
                "message": "Where are my notes?",
                "token_budget": 500,
                "model": "gpt-4o",
                "project": "p",
                "now": "2026-01-02T03:04:05Z",
            },
        ),
        (
            "POST",
            "/v1/recall",
            {},
            {"user_id": "alice", "query": "notes", "limit": 5, "memory_types": ["preference"]},
        ),
        ("POST", "/v1/explain", {}, {"user_id": "alice", "message": "Where are my notes?"}),
        ("POST", "/v1/preview", {}, {"user_id": "alice", "message": "Where are my notes?"}),
        (
            "PATCH",
            f"/v1/memories/{memory_id}",
            q,
            {"importance": 0.9, "content": "new text", "domains": ["x"], "metadata": {"b": 2}},
        ),
        ("POST", f"/v1/memories/{memory_id}/pin", q, {"value": True}),
        ("POST", f"/v1/memories/{memory_id}/mute", q, {"value": False}),
        (
            "POST",
            "/v1/feedback",
            {},
            {
                "user_id": "alice",
                "memory_ids": [memory_id],
                "helpful": True,
                "score": 0.5,
                "context_id": "c",
            },
        ),
        ("POST", "/v1/forget", {}, {"user_id": "alice", "memory_ids": ["no-such-id"]}),
        ("POST", "/v1/browse", {}, {"user_id": "alice", "text": "notes", "limit": 3}),
        ("POST", "/v1/review/resolve", {}, {"user_id": "alice", "memory_id": memory_id}),
    ]


def queries(memory_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    q = {"user_id": "alice"}
    return [
        ("GET", "/v1/memories", {**q, "limit": 10, "offset": 0, "memory_type": "fact"}),
        ("GET", f"/v1/memories/{memory_id}", q),
        ("GET", f"/v1/memories/{memory_id}/relations", q),
        ("GET", "/v1/review", q),
        ("GET", "/v1/contexts", {**q, "limit": 5}),
        ("GET", "/v1/tiers", {**q, "project": "p"}),
        ("GET", "/v1/export", q),
        ("DELETE", f"/v1/memories/{memory_id}x", q),
    ]


QUERY_JUNK = [
    "",
    " ",
    "-1",
    "1e999",
    "99999999999999999999999",
    "\u200b",
    "a\x00b",
    "%ff",
    "é" * 300,
    "../../etc/passwd",
    "NaN",
    "true",
]


class Checker:
    def __init__(self, db: Path) -> None:
        self.db = db
        self.calls = 0
        self.by_status: dict[int, int] = {}
        self.failures: list[dict[str, Any]] = []

    def rows(self) -> tuple[Any, ...]:
        with sqlite3.connect(self.db) as conn:
            memories = conn.execute("SELECT * FROM memories ORDER BY id").fetchall()
        return tuple(memories)

    def check(self, what: str, response: httpx.Response, before: tuple[Any, ...] | None) -> None:
        self.calls += 1
        status = response.status_code
        self.by_status[status] = self.by_status.get(status, 0) + 1
        problem = None
        if status >= 500 and status != 503:
            problem = "server error"
        elif status >= 400:
            try:
                body = response.json()
            except ValueError:
                body = None
            shape = (
                {"jsonrpc", "error"}
                if what.startswith("POST /mcp")
                else {"error", "message", "status"}
            )  # /mcp answers JSON-RPC errors (its protocol)
            if not isinstance(body, dict) or not shape <= set(body):
                problem = "error without the documented shape"
            elif "Traceback" in str(body.get("message")):
                problem = "traceback in message"
            elif before is not None and self.rows() != before:
                problem = "a refused call wrote"
        if problem:
            self.failures.append(
                {
                    "call": what[:300],
                    "status": status,
                    "problem": problem,
                    "body": response.text[:300],
                }
            )


def send_json(
    client: httpx.Client, method: str, path: str, query: dict[str, Any], raw: str
) -> httpx.Response:
    """One request with ``raw`` as its JSON body, whatever ``raw`` holds."""
    return client.request(method, path, params=query, content=raw,
                          headers={"content-type": "application/json"})  # fmt: skip


def attack(seed: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="h8-http-junk-"))
    db = work / "engrain.db"
    settings = Settings(data_dir=work, url=f"sqlite:///{db}", embedder="hash")  # type: ignore[arg-type]
    engine = Engine(settings=settings)
    ring = KeyRing(engine.store)
    admin = ring.create(admin=True)[0]
    memory_id = engine.remember(
        "alice keeps her notes in org-mode", "alice", "preference"
    ).memory_id
    assert memory_id is not None
    engine.wait()
    live = LiveServer(serve_app(engine, ring))
    checker = Checker(db)
    headers = {"Authorization": f"Bearer {admin}"}
    with httpx.Client(base_url=live.url, timeout=60, headers=headers) as client:
        for method, path, query, body in bodies(memory_id):
            for field in list(body):
                for junk in JUNK:
                    engine.wait()
                    before = checker.rows()
                    raw = json.dumps({**body, field: junk})
                    r = send_json(client, method, path, query, raw)
                    checker.check(
                        f"{method} {path} {field}={raw[:120]}",
                        r,
                        before if r.status_code >= 400 else None,
                    )
            for raw in [
                "not json",
                "[]",
                "null",
                "1",
                '"s"',
                DEEP,
                '{"user_id": "alice"',
                json.dumps(body).replace('"alice"', '"\\ud800"'),
                '{"user_id": {"$ne": 1}}',
                "{" * 5000,
            ]:
                engine.wait()
                before = checker.rows()
                r = send_json(client, method, path, query, raw)
                checker.check(
                    f"{method} {path} body={raw[:80]}", r, before if r.status_code >= 400 else None
                )
        for method, path, query in queries(memory_id):
            for name in list(query):
                for junk in QUERY_JUNK:
                    engine.wait()
                    before = checker.rows()
                    r = client.request(method, path, params={**query, name: junk})
                    checker.check(
                        f"{method} {path} {name}={junk[:60]!r}",
                        r,
                        before if r.status_code >= 400 else None,
                    )
        for raw in [
            "x",
            "[]",
            DEEP,
            '{"type": "remember"}',
            '{"type": "remember", "user_id": "alice", "content": "\\ud800"}',
            '{"type": "memory", "content": 1}',
        ]:
            before = checker.rows()
            r = client.post("/v1/import", content=raw + "\n")
            checker.check(
                f"POST /v1/import {raw[:80]}", r, before if r.status_code >= 400 else None
            )
        # MCP at /mcp: JSON-RPC junk straight to the endpoint
        mcp_headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        for raw in [
            "x",
            "[]",
            DEEP,
            '{"jsonrpc": "2.0", "id": 1, "method": 5}',
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": 7}',
        ]:
            r = client.post("/mcp", content=raw, headers=mcp_headers)
            checker.check(f"POST /mcp {raw[:80]}", r, None)
    live.stop()
    engine.close()
    return {
        "attack": "http_junk",
        "seed": seed,
        "calls": checker.calls,
        "by_status": dict(sorted(checker.by_status.items())),
        "failures": len(checker.failures),
        "examples": checker.failures[:25],
        "ok": not checker.failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    summary = attack(args.seed)
    finish(summary, args.json)


if __name__ == "__main__":
    main()
