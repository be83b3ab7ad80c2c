"""Attack: junk arguments to every MCP tool through the SDK's real ``ClientSession``.

A live ``engrain serve`` app (uvicorn in a thread, SQLite store, hash embedder) is reached
over streamable HTTP at ``/mcp`` with a one-user API key. Every tool is called with each
argument replaced in turn by junk (wrong types, negatives, huge numbers, empty and
invisible strings, lone surrogates, NUL, deep nesting, another user's id). Every call must
succeed or come back as a tool error whose text starts with one of engrain's error codes
(never the SDK's wrapping of an unexpected exception), and a refused call writes nothing.

Prints a JSON summary; exits 0 only when no call broke a rule.

    PYTHONPATH=src .venv/bin/python bench/attacks/mcp_junk.py [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish
from http_junk import LiveServer

from engrain import Engine
from engrain.config import Settings
from engrain.keys import KeyRing
from engrain.server.app import serve_app

JUNK: list[Any] = [
    None,
    -1,
    0,
    2**70,
    1e308,
    -0.5,
    True,
    "",
    " ",
    "\u200b",
    "a\x00b",
    "NaN",  # the client cannot send a lone surrogate
    [],
    [None],
    {},
    {"a": {"b": 1}},
    "x" * 300,
    "bob",
    "é" * 257,
    json.loads("[" * 40 + "]" * 40),
]
CODES = (
    "invalid_input",
    "empty_input",
    "input_too_large",
    "unknown_value",
    "not_found",
    "unauthenticated",
    "forbidden",
)


def calls(memory_id: str) -> dict[str, dict[str, Any]]:
    return {
        "remember": {
            "content": "prefers tabs",
            "kind": "preference",
            "memory_type": None,
            "project": "p",
            "domains": ["code"],
            "importance": 0.5,
        },
        "feedback": {"context_id": "c1", "helpful": True, "memory_ids": [memory_id]},
        "context": {"message": "how do I indent?", "project": "p", "token_budget": 500},
        "recall": {"query": "indent", "limit": 5},
        "explain": {"message": "how do I indent?"},
        "list_memories": {"project": "p", "limit": 10},
        "forget": {"memory_ids": ["no-such-id"]},
        "pin": {"memory_id": memory_id},
        "mute": {"memory_id": memory_id},
    }


def rows(db: Path) -> list[Any]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT * FROM memories ORDER BY id").fetchall()


async def run(url: str, key: str, db: Path, memory_id: str, engine: Engine) -> dict[str, Any]:
    failures: list[dict[str, Any]] = []
    outcomes = {"ok": 0, "engrain_error": 0}
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as client,
        streamable_http_client(url + "/mcp", http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        for tool, base in calls(memory_id).items():
            if tool not in tools:
                failures.append({"tool": tool, "problem": "tool missing"})
                continue
            for field in [*base, "user_id"]:
                for junk in JUNK:
                    engine.wait()
                    before = rows(db)
                    args = {**base, field: junk}
                    try:
                        result = await session.call_tool(tool, args)
                    except Exception as exc:  # a protocol failure is a defect too
                        failures.append(
                            {
                                "tool": tool,
                                "args": repr(args)[:200],
                                "problem": f"raised {type(exc).__name__}: {exc}"[:300],
                            }
                        )
                        continue
                    text = " ".join(getattr(c, "text", "") for c in result.content)
                    if not result.is_error:
                        outcomes["ok"] += 1
                        continue
                    outcomes["engrain_error"] += 1
                    problem = None
                    if not text.startswith(CODES):
                        problem = "tool error without an engrain code"
                    elif rows(db) != before:
                        problem = "a refused call wrote"
                    if problem:
                        failures.append(
                            {
                                "tool": tool,
                                "args": repr(args)[:200],
                                "problem": problem,
                                "text": text[:300],
                            }
                        )
    return {"outcomes": outcomes, "failures": failures}


def attack() -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="h8-mcp-junk-"))
    db = work / "engrain.db"
    engine = Engine(settings=Settings(data_dir=work, url=f"sqlite:///{db}", embedder="hash"))  # type: ignore[arg-type]
    ring = KeyRing(engine.store)
    key = ring.create(["alice"])[0]
    ring.create(["bob"])
    memory_id = engine.remember("alice indents with tabs", "alice", "preference").memory_id
    assert memory_id is not None
    live = LiveServer(serve_app(engine, ring))
    try:
        found = asyncio.run(run(live.url, key, db, memory_id, engine))
    finally:
        live.stop()
        engine.close()
    failures = found["failures"]
    return {
        "attack": "mcp_junk",
        "outcomes": found["outcomes"],
        "failures": len(failures),
        "examples": failures[:25],
        "ok": not failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    summary = attack()
    finish(summary, args.json)


if __name__ == "__main__":
    main()
