"""Attack: the same bad value through every surface, and the same verdict from each.

One SQLite store (hash embedder) is served by :func:`engrain.server.serve_app` on a loopback
port; each case (a value at or past one of ``validate.py``'s limits) goes through every
surface that can carry it: the Python ``Engine``, ``engrain.client.Client``, raw HTTP
(``httpx``), the MCP tools in process (``build_server(...).call_tool``) and the CLI (a
subprocess on the same store). Each answer is a verdict, ``ok`` or the error's code; a case
breaks a rule when its surfaces disagree (one accepts what another refuses, or they refuse
with different codes), when a refusal
wrote (the store's rows, before and after), or when anything answers outside the error tree
(a traceback, a 5xx, an exception that is not an ``EngrainError``).

Prints a JSON summary; exits 0 only when no case broke a rule.

    PYTHONPATH=src .venv/bin/python bench/attacks/surface_limits.py [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import deep, finish
from http_junk import LiveServer

from engrain import Engine
from engrain.client import Client
from engrain.config import Settings
from engrain.errors import EngrainError
from engrain.keys import KeyRing
from engrain.mcp import build_server, fixed_user
from engrain.server.app import serve_app

BIG = 2**31  # one past the integer bound every surface shares (validate.MAX_INT)
TOP = 2**31 - 1
USER = "alice"


# name -> {surface: call}; a call is (method or route or tool or argv, arguments)
CASES: dict[str, dict[str, Any]] = {
    "context token_budget 2**31": {
        "python": ("context", {"message": "which port?", "token_budget": BIG}),
        "http": ("POST", "/v1/context", {"message": "which port?", "token_budget": BIG}),
        "mcp": ("context", {"message": "which port?", "token_budget": BIG}),
        "cli": ["context", "which port?", "--budget", str(BIG)],
    },
    "context token_budget 2**31-1": {
        "python": ("context", {"message": "which port?", "token_budget": TOP}),
        "http": ("POST", "/v1/context", {"message": "which port?", "token_budget": TOP}),
        "mcp": ("context", {"message": "which port?", "token_budget": TOP}),
        "cli": ["context", "which port?", "--budget", str(TOP)],
    },
    "recall top_k 2**31": {
        "python": ("recall", {"query": "which port?", "top_k": BIG}),
        "http": ("POST", "/v1/recall", {"query": "which port?", "top_k": BIG}),
        "mcp": ("recall", {"query": "which port?", "top_k": BIG}),
        "cli": ["recall", "which port?", "--top-k", str(BIG)],
    },
    "context context_window 2**31": {
        "python": ("context", {"message": "which port?", "context_window": BIG}),
        "http": ("POST", "/v1/context", {"message": "which port?", "context_window": BIG}),
        "cli": ["context", "which port?", "--window", str(BIG)],
    },
    "context turn 2**31": {
        "python": ("context", {"message": "which port?", "turn": BIG}),
        "http": ("POST", "/v1/context", {"message": "which port?", "turn": BIG}),
    },
    "list_memories offset 2**31": {
        "python": ("list", {"offset": BIG}),
        "mcp": ("list_memories", {"offset": BIG}),
    },
    "domain tag of 257 characters": {
        "python": ("remember", {"content": "the API port is 8080", "domains": ["d" * 257]}),
        "http": (
            "POST",
            "/v1/memories",
            {"content": "the API port is 8080", "domains": ["d" * 257]},
        ),
        "mcp": ("remember", {"content": "the API port is 8080", "domains": ["d" * 257]}),
        "cli": ["remember", "the API port is 8080", "--domain", "d" * 257],
    },
    "domain tag of 256 characters": {
        "python": ("remember", {"content": "the API port is 8081", "domains": ["e" * 256]}),
        "http": (
            "POST",
            "/v1/memories",
            {"content": "the API port is 8081", "domains": ["e" * 256]},
        ),
        "mcp": ("remember", {"content": "the API port is 8081", "domains": ["e" * 256]}),
        "cli": ["remember", "the API port is 8081", "--domain", "e" * 256],
    },
    "metadata of 250,000 characters": {
        "python": (
            "remember",
            {"content": "the staging port is 5433", "metadata": {"n": "n" * 250_000}},
        ),
        "http": (
            "POST",
            "/v1/memories",
            {"content": "the staging port is 5433", "metadata": {"n": "n" * 250_000}},
        ),
    },
    "metadata 100 levels deep": {
        "python": ("remember", {"content": "the staging port is 5434", "metadata": deep(100)}),
        "http": (
            "POST",
            "/v1/memories",
            {"content": "the staging port is 5434", "metadata": deep(100)},
        ),
    },
    "metadata 64 levels deep": {
        "python": ("remember", {"content": "the staging port is 5435", "metadata": deep(64)}),
        "http": (
            "POST",
            "/v1/memories",
            {"content": "the staging port is 5435", "metadata": deep(64)},
        ),
    },
    "message over max_text_chars": {
        "python": ("context", {"message": "port " * 50_000}),
        "http": ("POST", "/v1/context", {"message": "port " * 50_000}),
        "mcp": ("context", {"message": "port " * 50_000}),
    },
    "content of control characters only": {
        "python": ("remember", {"content": "\x00\x07\u200b"}),
        "http": ("POST", "/v1/memories", {"content": "\x00\x07\u200b"}),
        "mcp": ("remember", {"content": "\x00\x07\u200b"}),
        "cli": ["remember", "\x07\u200b"],  # an argv cannot hold a NUL
    },
    "user id of spaces": {
        "python": ("remember", {"content": "the API port is 8082", "user_id": "  "}),
        "http": ("POST", "/v1/memories", {"content": "the API port is 8082", "user_id": "  "}),
        "cli": ["-u", "  ", "remember", "the API port is 8082"],
    },
    # session 21 (h9): the model is the engine's to judge on every surface
    "an unknown model with context_window": {
        "python": ("context", {"message": "which port?", "model": "house-7b",
                               "context_window": 4_096}),
        "http": ("POST", "/v1/context", {"message": "which port?", "model": "house-7b",
                                         "context_window": 4_096}),
        "cli": ["context", "which port?", "--model", "house-7b", "--window", "4096"],
    },
    "a model spelled as a provider does": {
        "python": ("context", {"message": "which port?", "model": "openai/GPT-4o"}),
        "http": ("POST", "/v1/context", {"message": "which port?", "model": "openai/GPT-4o"}),
        "cli": ["context", "which port?", "--model", "openai/GPT-4o"],
    },
    "an unknown model alone": {
        "python": ("context", {"message": "which port?", "model": "house-7b"}),
        "http": ("POST", "/v1/context", {"message": "which port?", "model": "house-7b"}),
        "cli": ["context", "which port?", "--model", "house-7b"],
    },
}  # fmt: skip
# the client speaks the Python API's names over HTTP: every Python case runs through it too
for surfaces in CASES.values():
    surfaces["client"] = surfaces["python"]
# a speaker's NUL: accepted everywhere, and never stored (checked on the rows)
SPEAKER = {"turns": [{"speaker": "a\x00da", "text": "the cache port is 6379"}]}


class Rows:
    """The store's rows, as a digest to compare before and after a call."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def digest(self) -> str:
        with sqlite3.connect(self.db) as c:
            tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            h = hashlib.sha256()
            for table in sorted(tables):
                if table.startswith("sqlite_") or table in ("uses", "contexts", "state"):
                    continue  # a context() counts uses: reads that write by design
                for row in c.execute(f'SELECT * FROM "{table}" ORDER BY 1'):
                    h.update(repr(row).encode())
            return h.hexdigest()


def verdict(call: Callable[..., Any], kwargs: dict[str, Any]) -> str:
    try:
        call(**kwargs)
    except EngrainError as exc:
        return exc.code
    except Exception as exc:  # outside the error tree: a broken rule
        return f"!{type(exc).__name__}: {str(exc)[:120]}"
    return "ok"


def over_http(client: httpx.Client, method: str, path: str, body: dict[str, Any]) -> str:
    r = client.request(method, path, json={**body, "user_id": body.get("user_id", USER)})
    if r.status_code < 400:
        return "ok"
    answer = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    if r.status_code >= 500 or "error" not in answer or "Traceback" in r.text:
        return f"!{r.status_code}: {r.text[:120]}"
    return str(answer["error"])


def over_mcp(server: Any, tool: str, args: dict[str, Any]) -> str:
    result = asyncio.run(server.call_tool(tool, args))
    if not result.is_error:
        return "ok"
    content = result.structured_content or {}
    return str(content.get("error", "!no error code"))


def over_cli(env: dict[str, str], argv: list[str]) -> str:
    cmd = [sys.executable, "-m", "engrain.cli", "--json", "-u", USER, *argv]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        return "ok"
    if "Traceback" in done.stderr or done.returncode not in (1, 2, 3):
        return f"!exit {done.returncode}: {done.stderr[-200:]}"
    try:
        return str(json.loads(done.stderr.strip().splitlines()[-1])["error"])
    except (ValueError, KeyError, IndexError):
        return f"!exit {done.returncode}: {done.stderr[-200:]}"


def attack() -> dict[str, Any]:
    warnings.simplefilter("ignore")  # the spaces user's UserIdWarning
    work = Path(tempfile.mkdtemp(prefix="h8-surface-limits-"))
    db = work / "engrain.db"
    settings = Settings(data_dir=work, url=f"sqlite:///{db}", embedder="hash")  # type: ignore[arg-type]
    engine = Engine(settings=settings)
    ring = KeyRing(engine.store)
    key = ring.create([USER])[0]
    engine.remember("the API listens on port 8080", USER)
    live = LiveServer(serve_app(engine, ring))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAIN_")}
    env.update(
        ENGRAIN_URL=f"sqlite:///{db}",
        ENGRAIN_EMBEDDER="hash",
        ENGRAIN_DATA_DIR=str(work),
        HOME=str(work),
    )
    mcp = build_server(engine, fixed_user(USER))
    rows = Rows(db)
    results: dict[str, dict[str, str]] = {}
    broken: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {key}"}
    with (
        httpx.Client(base_url=live.url, timeout=120, headers=headers) as http,
        Client(live.url, key) as client,
    ):
        for name, surfaces in CASES.items():
            answers: dict[str, str] = {}
            for surface, call in surfaces.items():
                engine.wait()
                before = rows.digest()
                if surface in ("python", "client"):
                    target = engine if surface == "python" else client
                    method, args = call
                    answers[surface] = verdict(getattr(target, method), {"user_id": USER, **args})
                elif surface == "http":
                    answers[surface] = over_http(http, *call)
                elif surface == "mcp":
                    answers[surface] = over_mcp(mcp, *call)
                else:
                    answers[surface] = over_cli(env, call)
                engine.wait()
                if answers[surface] != "ok" and rows.digest() != before:
                    broken.append({"case": name, "surface": surface, "problem": "a refusal wrote"})
                if answers[surface].startswith("!"):
                    broken.append({"case": name, "surface": surface, "problem": answers[surface]})
            results[name] = answers
            if len({a == "ok" for a in answers.values()}) > 1:
                broken.append({"case": name, "problem": "surfaces disagree", "answers": answers})
            elif len(set(answers.values())) > 1:  # all refuse, in different words (session 21)
                broken.append({"case": name, "problem": "codes differ", "answers": answers})
        engine.ingest_conversation(SPEAKER["turns"], USER)
        client.ingest_conversation(SPEAKER["turns"], USER)
        http.post("/v1/conversations", json={**SPEAKER, "user_id": USER})
    nul = [m.content for m in engine.list(USER, limit=1000) if "\x00" in m.content]
    if nul:
        broken.append(
            {"case": "speaker with a NUL", "problem": "stored with its NUL", "contents": nul}
        )
    results["speaker with a NUL"] = {
        "python": "ok",
        "client": "ok",
        "http": "ok",
        "stored with a NUL": str(len(nul)),
    }
    live.stop()
    engine.close()
    return {
        "attack": "surface_limits",
        "cases": len(results),
        "results": results,
        "broken": broken,
        "ok": not broken,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    finish(attack(), args.json)


if __name__ == "__main__":
    main()
