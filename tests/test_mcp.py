"""The MCP server through the SDK's real ``ClientSession``: over stdio (``engrain mcp`` as a
subprocess, as a desktop assistant starts it) and over streamable HTTP (the ASGI app mounted
in a Starlette app served by uvicorn on loopback), with API keys from :class:`KeyRing`."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
import uvicorn
from click.testing import CliRunner
from fastapi.testclient import TestClient
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from starlette.applications import Starlette

from engrain import Engine, validate
from engrain.cli.app import cli
from engrain.embed import HashEmbedder
from engrain.errors import EmptyInputError
from engrain.keys import KeyRing
from engrain.mcp import build_server, fixed_user, mount, streamable_http_app
from engrain.server.app import serve_app
from engrain.server.mcp import LaterMCP
from engrain.store.sqlite import SQLiteStore

from .conftest import make_settings

TOOLS = {"remember", "context", "recall", "explain", "list_memories", "forget", "pin", "mute",
         "feedback"}  # fmt: skip
TABS = "Prefers tabs over spaces in Python"
K8S = "The deploy target is Kubernetes on Google Cloud"

Session = Callable[[ClientSession], Awaitable[None]]


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured result of a successful call (its text is the same JSON)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    text = result.content[0].text  # type: ignore[union-attr]
    assert json.loads(text) == result.structured_content
    return result.structured_content


def failed(result: CallToolResult) -> str:
    """The error code of a failed call; its text starts with the code, no traceback."""
    assert result.is_error
    assert result.structured_content is not None
    code = str(result.structured_content["error"])
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith(f"{code}: ") and "Traceback" not in text
    return code


# -- stdio ---------------------------------------------------------------------------------


def run_stdio(tmp_path: Path, body: Session, *args: str) -> None:
    """Start ``python -m engrain.cli mcp ARGS`` and run ``body`` in a session with it."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "engrain.cli", "mcp", *args, "--url", f"sqlite:///{tmp_path / 'm.db'}"],
        # counted uses in the call's transaction: the tests read the file between calls, and a
        # good call's counts written after it returns would look like the next call's write
        env={
            "ENGRAIN_EMBEDDER": "hash",
            "ENGRAIN_DATA_DIR": str(tmp_path),
            "ENGRAIN_DEFER_USES": "off",
            # the SDK passes only a few variables on: a tree run with PYTHONPATH=src (a
            # worktree over another checkout's .venv) must serve its own code
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        },
    )

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await body(session)

    anyio.run(main)


def test_stdio_serves_every_tool_and_the_tiers(tmp_path: Path) -> None:
    async def body(s: ClientSession) -> None:
        listed = (await s.list_tools()).tools
        assert {t.name for t in listed} == TOOLS
        resources = {str(r.uri) for r in (await s.list_resources()).resources}
        assert resources == {"engrain://tiers/1", "engrain://tiers/2"}

        # the agent's flow: remember, then the context for a related message holds it
        stored = ok(await s.call_tool("remember", {"content": TABS, "kind": "preference"}))
        assert stored["action"] == "stored"
        tabs = stored["memory_id"]
        k8s = ok(await s.call_tool("remember", {"content": K8S, "project": "infra"}))
        found = ok(await s.call_tool("context", {"message": "How should I indent my Python?"}))
        assert TABS in found["text"] and tabs in [m["id"] for m in found["memories"]]

        fed = ok(await s.call_tool("feedback", {"context_id": found["context_id"],
                                                "helpful": True}))  # fmt: skip
        assert fed["usefulness"][tabs] > 0.5
        recalled = ok(await s.call_tool("recall", {"query": "Kubernetes deploy target"}))
        assert recalled["memories"][0]["memory"]["id"] == k8s["memory_id"]
        listed_infra = ok(await s.call_tool("list_memories", {"project": "infra"}))
        assert [m["content"] for m in listed_infra["memories"]] == [K8S]
        why = ok(await s.call_tool("explain", {"message": "How should I indent my Python?"}))
        assert any(c["content"] == TABS for c in why["explanation"]["candidates"])
        assert ok(await s.call_tool("pin", {"memory_id": tabs}))["memory"]["pinned"] is True
        assert ok(await s.call_tool("mute", {"memory_id": k8s["memory_id"]}))["memory"]["muted"]

        tier1 = (await s.read_resource("engrain://tiers/1")).contents[0]
        tier2 = (await s.read_resource("engrain://tiers/2")).contents[0]
        assert "tabs over spaces" in tier1.text  # type: ignore[union-attr]
        assert "tabs over spaces" in tier2.text  # type: ignore[union-attr]

        gone = ok(await s.call_tool("forget", {"memory_ids": [tabs]}))
        assert gone == {"forgotten": 1, "requested": 1}
        again = ok(await s.call_tool("context", {"message": "How should I indent my Python?"}))
        assert TABS not in again["text"]

    run_stdio(tmp_path, body, "--user", "alice")


def test_stdio_errors_are_tool_errors_with_the_engine_code(tmp_path: Path) -> None:
    async def body(s: ClientSession) -> None:
        assert failed(await s.call_tool("forget", {"memory_ids": ["no-such-id"]})) == "not_found"
        assert failed(await s.call_tool("pin", {"memory_id": "no-such-id"})) == "not_found"
        bad_kind = {"content": "x", "kind": "bogus"}
        assert failed(await s.call_tool("remember", bad_kind)) == "unknown_value"
        assert failed(await s.call_tool("context", {"message": "  "})) == "empty_input"
        assert failed(await s.call_tool("feedback", {"helpful": True})) == "invalid_input"
        # the process serves alice only: naming another user is refused
        other = {"content": TABS, "user_id": "bob"}
        assert failed(await s.call_tool("remember", other)) == "forbidden"
        with pytest.raises(MCPError, match="no tier '3'"):
            await s.read_resource("engrain://tiers/3")
        # the server is still up after every error
        assert ok(await s.call_tool("list_memories", {}))["memories"] == []

    run_stdio(tmp_path, body, "--user", "alice")


#: JSON values for any tool argument: wrong types, empty, blank, invisible, NUL, huge,
#: negative, past every bound, unknown names, lists with one bad element.
JUNK: list[Any] = [
    None, "", "   ", "\u200b", "\x00", "a\x00b", "x" * 200_001, "bogus", -1, 0, 1.5, 2**31,
    10**400, -1e308, True, [], [None], ["ok", ""], ["ok", 7], {}, {"a": {"b": [1]}},
]  # fmt: skip


#: The codes a bad argument may get: the schema's or the engine's refusals, an unknown id, a
#: user this process does not serve.
REFUSALS = {"invalid_input", "empty_input", "input_too_large", "unknown_value", "not_found",
            "forbidden"}  # fmt: skip


def _rows(db: Path) -> str:
    """Every row of every table of the stdio server's SQLite file, as one string."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return repr([(t, sorted(map(repr, con.execute(f'SELECT * FROM "{t}"')))) for t in tables])


def test_stdio_any_bad_argument_of_any_tool_is_a_tool_error_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """Every tool, every argument of its schema (and a missing required one, and one it
    does not take) given each junk value: a successful call or a tool error in engrain's
    shape, never a crash of the ``engrain mcp`` process; a tool error writes nothing
    (session 24, h3)."""
    calls: list[tuple[str, dict[str, Any], str]] = []

    async def body(s: ClientSession) -> None:
        memory = ok(await s.call_tool("remember", {"content": TABS, "kind": "preference"}))
        block = ok(await s.call_tool("context", {"message": "How should I indent Python?"}))
        good = {"memory_id": memory["memory_id"], "memory_ids": [memory["memory_id"]],
                "context_id": block["context_id"], "message": "indent?", "query": "indent?",
                "content": K8S, "helpful": True}  # fmt: skip
        for tool in (await s.list_tools()).tools:
            schema = tool.input_schema
            required = {name: good.get(name, "x") for name in schema.get("required", [])}
            cases = [({}, "required"), ({**required, "token_budjet": 5}, "token_budjet")]
            for name in schema["properties"]:
                cases += [({**required, name: value}, name) for value in JUNK]
            for args, argument in cases:
                before = _rows(tmp_path / "m.db")
                result = await s.call_tool(tool.name, args)
                calls.append((tool.name, args, argument))
                if not result.is_error:
                    continue
                code = failed(result)
                error = result.structured_content or {}
                assert code in REFUSALS, (tool.name, args, error)
                assert set(error) == {"error", "status", "message"}, error
                assert 400 <= int(error["status"]) < 500, (tool.name, args, error)
                assert _rows(tmp_path / "m.db") == before, (tool.name, args, "wrote")
        # the process is still up and answers
        assert ok(await s.call_tool("list_memories", {}))["memories"]

    run_stdio(tmp_path, body, "--user", "alice")
    assert len(calls) > 500


def test_mcp_command_requires_a_user(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["mcp", "--url", f"sqlite:///{tmp_path / 'm.db'}"], env={"ENGRAIN_USER": None}
    )
    assert result.exit_code == 2
    assert "--user" in result.output and "ENGRAIN_USER" in result.output


#: The engine method each tool calls, and the tool's names for its arguments.
ENGINE_CALLS = {"remember": ("remember", {}), "context": ("context", {}),
                "recall": ("recall", {}), "explain": ("explain", {}),
                "list_memories": ("list", {}), "feedback": ("feedback", {}),
                "forget": ("forget", {}), "pin": ("pin", {"pinned": "pinned"}),
                "mute": ("mute", {"muted": "muted"})}  # fmt: skip


def test_a_tools_defaults_are_the_engines(tmp_path: Path) -> None:
    """An argument left out means what it means to Engine, the CLI and HTTP: list_memories
    without a limit lists 100 (base: 50), like engine.list, engrain list and GET
    /v1/memories."""
    engine = Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "m.db"),
                    embedder=HashEmbedder())  # fmt: skip
    with engine:
        for i in range(101):
            engine.remember(hashlib.sha256(str(i).encode()).hexdigest(), "alice")
        listed = [m.id for m in engine.list("alice")]
    assert len(listed) == 100

    async def body(s: ClientSession) -> None:
        for tool in (await s.list_tools()).tools:
            method, names = ENGINE_CALLS[tool.name]
            params = inspect.signature(getattr(Engine, method)).parameters
            for name, schema in tool.input_schema["properties"].items():
                param = params[names.get(name, name)]
                if "default" in schema and param.default is not inspect.Parameter.empty:
                    assert schema["default"] == param.default, f"{tool.name}.{name}"
        found = ok(await s.call_tool("list_memories", {}))["memories"]
        assert [m["id"] for m in found] == listed

    run_stdio(tmp_path, body, "--user", "alice")


def test_every_tool_and_argument_is_described_for_a_model(tmp_path: Path) -> None:
    engine = Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "m.db"),
                    embedder=HashEmbedder())  # fmt: skip
    with engine:
        tools = anyio.run(build_server(engine, fixed_user("alice")).list_tools)
    for tool in tools:
        assert tool.description and len(tool.description) > 80, tool.name
        assert tool.output_schema is not None, tool.name
        properties = tool.input_schema["properties"]
        assert "ctx" not in properties
        for name, schema in properties.items():
            assert schema.get("description"), f"{tool.name}.{name}"


# -- streamable HTTP -----------------------------------------------------------------------


@dataclass
class Live:
    """A server on loopback: its base URL and the secrets of its keys."""

    url: str
    secrets: dict[str, str]

    def session(self, key: str | None, path: str = "/mcp") -> Any:
        """A connected, initialized ClientSession using the key named ``key``."""
        headers = {} if key is None else {"Authorization": f"Bearer {self.secrets[key]}"}

        @asynccontextmanager
        async def connect() -> Any:
            async with (
                httpx2.AsyncClient(headers=headers, timeout=30) as client,
                streamable_http_client(self.url + path, http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                yield session

        return connect()


@pytest.fixture(params=["built", "later"])
def live(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Live]:
    """The MCP app mounted in a Starlette app, served by uvicorn on a free loopback port:
    built before the server starts, or (as ``engrain serve`` mounts it) on first request."""
    engine = Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "m.db"),
                    embedder=HashEmbedder())  # fmt: skip
    keys = KeyRing(engine.store)
    secrets = {
        "alice": keys.create(["alice"])[0],
        "bob": keys.create(["bob"])[0],
        "team": keys.create(["alice", "carol"])[0],
        "admin": keys.create(admin=True)[0],
        "revoked": (revoked := keys.create(["alice"]))[0],
    }
    keys.revoke(revoked[1].id)
    app = Starlette()
    mount(app, streamable_http_app(engine, keys) if request.param == "built"
          else LaterMCP(engine, keys))  # fmt: skip
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:  # bounded by the test timeout; a failed start ends the thread
        assert thread.is_alive(), "uvicorn did not start"
        thread.join(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield Live(f"http://127.0.0.1:{port}", secrets)
    server.should_exit = True
    thread.join()
    engine.close()


INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "0"}},
}  # fmt: skip
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize("key", [None, "unknown", "revoked"])
def test_http_refuses_a_request_without_a_valid_key(live: Live, key: str | None) -> None:
    headers = dict(MCP_HEADERS)
    if key is not None:
        secret = live.secrets.get(key, "egk_" + "A" * 43)
        headers["Authorization"] = f"Bearer {secret}"
    response = httpx.post(live.url + "/mcp", json=INITIALIZE, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthenticated"
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("path", ["/mcp", "/mcp/"])
def test_http_endpoint_answers_post_at_both_paths_without_redirect(live: Live, path: str) -> None:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {live.secrets['alice']}"}
    response = httpx.post(live.url + path, json=INITIALIZE, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["serverInfo"]["name"] == "engrain"


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_http_other_methods_answer_405_at_once(live: Live, method: str) -> None:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {live.secrets['alice']}"}
    response = httpx.request(method, live.url + "/mcp", headers=headers, timeout=10)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"] == "method_not_allowed"


def test_http_agent_flow_with_a_key_of_one_user(live: Live) -> None:
    async def main() -> None:
        async with live.session("alice") as s:
            assert {t.name for t in (await s.list_tools()).tools} == TOOLS
            stored = ok(await s.call_tool("remember", {"content": TABS, "kind": "preference"}))
            found = ok(await s.call_tool("context", {"message": "How do I indent Python?"}))
            assert TABS in found["text"]
            assert [m["id"] for m in found["memories"]] == [stored["memory_id"]]
            tier = (await s.read_resource("engrain://tiers/1")).contents[0]
            assert "tabs over spaces" in tier.text  # type: ignore[union-attr]

    anyio.run(main)


def test_http_arguments_of_the_wrong_type_are_invalid_input_and_write_nothing(
    live: Live,
) -> None:
    """Arguments the tool's schema refuses never reach the engine: the SDK's refusal is
    answered as engrain's invalid_input (the argument's name first, no input echoed, no
    pydantic link), like every other failed call (session 17, h8)."""

    async def main() -> None:
        async with live.session("alice") as s:
            before = ok(await s.call_tool("list_memories", {}))["memories"]
            for tool, args, field in [
                ("remember", {"content": TABS, "kind": 7}, "kind"),
                ("remember", {"content": ["x"] * 3}, "content"),
                ("context", {"message": {"deep": [[[[1]]]]}}, "message"),
                ("context", {"message": "indent?", "token_budget": "lots"}, "token_budget"),
                ("forget", {"memory_ids": 12}, "memory_ids"),
                ("pin", {}, "memory_id"),
                # the bounds every surface shares (validate.py), in the schema or the engine
                ("context", {"message": "indent?", "token_budget": 2**31}, "token_budget"),
                ("recall", {"query": "indent?", "top_k": 2**31}, "top_k"),
                ("list_memories", {"offset": 2**31}, "offset"),
                ("context", {"message": "indent?", "token_budjet": 50}, "token_budjet"),
            ]:
                result = await s.call_tool(tool, args)
                assert failed(result) == "invalid_input", (tool, args)
                message = str(result.structured_content["message"])  # type: ignore[index]
                assert message.startswith(f"{field}"), message
                assert "pydantic" not in message and "lots" not in message
            for tool, args, field in [
                ("remember", {"content": TABS, "domains": ["d" * 257]}, "domains[0]"),
                ("context", {"message": "indent?", "previous": "x " * 100_001}, "previous"),
            ]:
                result = await s.call_tool(tool, args)
                assert failed(result) == "input_too_large", (tool, args)
                message = str(result.structured_content["message"])  # type: ignore[index]
                assert message.startswith(f"{field}"), message
                assert "pydantic" not in message and "lots" not in message
            # an empty list the tool's schema refuses: the engine's code for it (forget([]))
            with pytest.raises(EmptyInputError):
                validate.identifiers([], "memory_ids")  # what Engine.forget checks ids with
            result = await s.call_tool("forget", {"memory_ids": []})
            assert failed(result) == "empty_input", result
            assert ok(await s.call_tool("list_memories", {}))["memories"] == before

    anyio.run(main)


def test_http_a_key_never_reaches_another_users_memory(live: Live) -> None:
    async def main() -> None:
        async with live.session("alice") as s:
            tabs = ok(await s.call_tool("remember", {"content": TABS}))["memory_id"]
        async with live.session("bob") as s:
            found = ok(await s.call_tool("context", {"message": "How do I indent Python?"}))
            assert found["memories"] == [] and TABS not in found["text"]
            assert ok(await s.call_tool("list_memories", {}))["memories"] == []
            assert failed(await s.call_tool("forget", {"memory_ids": [tabs]})) == "not_found"
            assert failed(await s.call_tool("pin", {"memory_id": tabs})) == "not_found"
            for user in ("alice", "alice ", "Alice", "alice\u200b"):
                call = await s.call_tool("list_memories", {"user_id": user})
                assert failed(call) in ("forbidden", "invalid_input"), user
            with pytest.raises(MCPError, match="forbidden"):
                await s.read_resource("engrain://tiers/1?user_id=alice")
        async with live.session("alice") as s:  # bob's calls changed nothing
            memory = ok(await s.call_tool("list_memories", {}))["memories"][0]
            assert memory["id"] == tabs and memory["pinned"] is False

    anyio.run(main)


def test_http_keys_of_several_users_and_admin_keys_name_the_user(live: Live) -> None:
    async def main() -> None:
        async with live.session("team") as s:
            code = failed(await s.call_tool("remember", {"content": K8S}))
            assert code == "invalid_input"  # which of its users? it must say
            ok(await s.call_tool("remember", {"content": K8S, "user_id": "carol"}))
            denied = await s.call_tool("remember", {"content": K8S, "user_id": "bob"})
            assert failed(denied) == "forbidden"
        async with live.session("admin") as s:
            carol = ok(await s.call_tool("list_memories", {"user_id": "carol"}))["memories"]
            assert [m["content"] for m in carol] == [K8S]
            assert ok(await s.call_tool("list_memories", {"user_id": "bob"}))["memories"] == []

    anyio.run(main)


def test_core_and_cli_start_without_the_server_extra(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "sys.modules['mcp'] = None  # as if the 'server' extra were not installed\n"
        "import engrain, engrain.cli.app\n"
        "assert not {'mcp', 'starlette', 'uvicorn'} & {m for m in sys.modules if sys.modules[m]}\n"
        "from engrain.cli import main\n"
        f"sys.argv = ['engrain', 'mcp', '--user', 'alice', '--data-dir', {str(tmp_path)!r}]\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr  # a set-up error: the README's exit table
    assert "pip install 'engrain[server]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_app_imports_the_mcp_sdk_on_the_first_mcp_request(tmp_path: Path) -> None:
    """``engrain serve`` answers before the SDK (its largest import) is loaded; the first
    ``/mcp`` request loads it and is served, as every later one (a fresh interpreter: this
    one has the SDK already)."""
    script = f"""
import sys
from fastapi.testclient import TestClient
from engrain import Engine
from engrain.config import Settings
from engrain.embed import HashEmbedder
from engrain.keys import KeyRing
from engrain.server.app import serve_app
from engrain.store.sqlite import SQLiteStore
loaded = lambda: sorted({{m.split(".")[0] for m in sys.modules}} & {{"mcp", "mcp_types"}})
engine = Engine(settings=Settings(data_dir={str(tmp_path)!r}),
                store=SQLiteStore({str(tmp_path / "m.db")!r}), embedder=HashEmbedder())
secret, _ = KeyRing(engine.store).create(["alice"])
headers = {{"Authorization": f"Bearer {{secret}}", "Accept": "application/json, text/event-stream"}}
listing = {{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}}
with TestClient(serve_app(engine)) as client:
    print(loaded(), client.get("/readyz").status_code,
          client.post("/v1/context", headers=headers, json={{"message": "hi"}}).status_code)
    first = client.post("/mcp", headers=headers, json=listing)
    again = client.post("/mcp/", headers=headers, json=listing)
    print(loaded(), first.status_code, again.status_code)
    print(sorted(t["name"] for t in first.json()["result"]["tools"]) ==
          sorted(t["name"] for t in again.json()["result"]["tools"]) != [])
engine.close()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[] 200 200",  # ready, and serving /v1, without the SDK
        "['mcp', 'mcp_types'] 200 200",
        "True",
    ]


def test_serve_apps_metrics_label_mcp_requests_with_the_path(tmp_path: Path) -> None:
    """``/mcp`` is a route of ``engrain serve``'s app: its requests count under
    ``route="/mcp"``, not ``<unmatched>`` (which a path of no route still gets)."""
    engine = Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "m.db"),
                    embedder=HashEmbedder())  # fmt: skip
    ring = KeyRing(engine.store)
    secret, _ = ring.create(["alice"])
    headers = {"Authorization": f"Bearer {secret}", "Accept": "application/json, text/event-stream"}
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    try:
        with TestClient(serve_app(engine, ring)) as client:
            for path in ("/mcp", "/mcp/"):
                assert client.post(path, headers=headers, json=listing).status_code == 200
            assert client.get("/no-such-path").status_code == 404
            text = client.get("/metrics").text
    finally:
        engine.close()
    assert 'engrain_http_requests_total{method="POST",route="/mcp",status="200"} 1' in text
    assert 'engrain_http_requests_total{method="POST",route="/mcp/",status="200"} 1' in text
    assert 'route="<unmatched>",status="404"' in text
