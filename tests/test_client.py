"""engrain.client through real HTTP on loopback (uvicorn in a thread, as tests/test_server.py
serves it): every error status comes back as the engine's error class, transport failures
as engrain errors, bad arguments refused before any request with the engine's own error,
list pages followed, export → import round trips (and a refused import writes nothing),
the key never shown, and the core importing no httpx."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from engrain import Engine, ImportResult, Memory, Outcome
from engrain import errors as e
from engrain.client import AsyncClient, Client, Records, calls
from engrain.embed import HashEmbedder
from engrain.errors import EngrainError
from engrain.keys import KeyRing
from engrain.server import create_app
from engrain.store import MemoryStore

from .aio import run_async
from .conftest import NOW, make_settings
from .test_server import LiveServer


class Served:
    """An engine behind a live server on loopback, with keys for alice, bob, ada and an
    admin."""

    def __init__(self, tmp_path: Path, **settings: Any) -> None:
        self.engine = Engine(settings=make_settings(tmp_path, **settings), store=MemoryStore(),
                             embedder=HashEmbedder())  # fmt: skip
        ring = KeyRing(self.engine.store)
        self.keys = {u: ring.create([u])[0] for u in ("alice", "bob", "ada")}
        self.keys["admin"] = ring.create(admin=True)[0]
        self.live = LiveServer(create_app(self.engine, ring))
        self.url = self.live.url

    def client(self, key: str = "alice", **kw: Any) -> Client:
        return Client(self.url, self.keys[key], **kw)

    def close(self) -> None:
        self.live.stop()
        self.engine.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path)
    yield s
    s.close()


class Counting(httpx.HTTPTransport):
    """A real transport that remembers every request it sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return super().handle_request(request)


# -- errors of every status ------------------------------------------------------------------


def test_the_servers_refusals_are_the_engines_error_classes(tmp_path: Path) -> None:
    s = Served(tmp_path, max_text_chars=50)
    try:
        with s.client() as alice:
            with pytest.raises(e.NotFoundError):
                alice.get("0" * 32, "alice")
            with pytest.raises(e.NotFoundError):
                alice.feedback("alice", "no-such-context", helpful=True)
            with pytest.raises(e.PermissionDeniedError, match="may not act for user 'bob'"):
                alice.remember("bob's secret", "bob")
            with pytest.raises(e.PermissionDeniedError):
                alice.context("what does alice like?", "Alice")  # a look-alike user
            with pytest.raises(e.InputTooLargeError, match="max_text_chars"):
                alice.remember("x" * 51, "alice")  # the server's limit, unknown to a client
        with Client(s.url, "egk_" + "x" * 43) as stranger, pytest.raises(e.AuthenticationError):
            stranger.list("alice")
        assert s.engine.list("alice") == [] and s.engine.list("bob") == []
    finally:
        s.close()


def _crafted(request: Request) -> Response:
    """An answer of the status and body the path asks for."""
    status = int(request.path_params["status"])
    code = request.path_params["code"]
    if code == "html":
        return PlainTextResponse("<html>bad gateway</html>", status)
    return JSONResponse({"error": code, "message": f"said {code}", "status": status,
                         "request_id": "r1"}, status)  # fmt: skip


@pytest.fixture(scope="module")
def crafted() -> Iterator[str]:
    """A live server answering ``/{status}/{code}/...`` with that error."""
    app = Starlette(routes=[Route("/{status:int}/{code}/{rest:path}", _crafted,
                                 methods=["GET", "POST", "PATCH"])])  # fmt: skip
    live = LiveServer(app)
    yield live.url
    live.stop()


STATUSES = [
    (400, "invalid_input", e.ValidationError),
    (400, "empty_input", e.EmptyInputError),
    (400, "unknown_value", e.UnknownValueError),
    (401, "unauthenticated", e.AuthenticationError),
    (403, "forbidden", e.PermissionDeniedError),
    (404, "not_found", e.NotFoundError),
    (405, "method_not_allowed", e.EngrainError),
    (413, "input_too_large", e.InputTooLargeError),
    (422, "invalid_input", e.ValidationError),
    (422, "empty_input", e.EmptyInputError),  # a schema's refusal carries the engine's code
    (422, "input_too_large", e.InputTooLargeError),
    (500, "error", e.EngrainError),
    (502, "llm_error", e.LLMError),
    (503, "store_error", e.StoreError),
    (503, "embedding_error", e.EmbeddingError),
    (503, "something_new", e.StoreError),  # a code this client does not know: by status
    (404, "html", e.NotFoundError),  # not engrain's body (a wrong URL): by status
    (502, "html", e.EngrainError),
]


@pytest.mark.parametrize(("status", "code", "cls"), STATUSES,
                         ids=[f"{s}-{c}" for s, c, _ in STATUSES])  # fmt: skip
def test_every_error_status(crafted: str, status: int, code: str, cls: type) -> None:
    with (Client(f"{crafted}/{status}/{code}", "egk_secret") as client,
          pytest.raises(e.EngrainError) as caught):  # fmt: skip
        client.recall("anything", "ada")

    async def twin() -> EngrainError:
        async with AsyncClient(f"{crafted}/{status}/{code}", "egk_secret") as client:
            try:
                await client.recall("anything", "ada")
            except EngrainError as exc:
                return exc
        raise AssertionError("no error")

    for error in (caught.value, run_async(twin())):
        assert type(error) is cls
        if code == "html":
            assert "not an engrain error" in error.message
        else:
            assert error.message == f"said {code}"


def test_a_non_json_success_means_a_wrong_url(crafted: str) -> None:
    app = Starlette(routes=[Route("/{rest:path}", lambda r: PlainTextResponse("hello"),
                                  methods=["GET", "POST"])])  # fmt: skip
    live = LiveServer(app)
    try:
        with Client(live.url, "egk_secret") as client, pytest.raises(e.ConfigError):
            client.get("m1", "ada")
    finally:
        live.stop()


# -- transport failures and configuration ---------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_refused_connection_is_a_store_error() -> None:
    with (Client(f"http://127.0.0.1:{_free_port()}", "egk_secret") as client,
          pytest.raises(e.StoreError, match="cannot reach") as caught):  # fmt: skip
        client.remember("x", "ada")
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_a_server_that_never_answers_is_a_store_error() -> None:
    with socket.socket() as listening:  # accepts connections (backlog), never answers
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        url = f"http://127.0.0.1:{listening.getsockname()[1]}"
        with (Client(url, "egk_secret", timeout=0.2) as client,
              pytest.raises(e.StoreError, match="may still have taken effect")):  # fmt: skip
            client.context("hello there, what is my name?", "ada")


@pytest.mark.parametrize("url", ["", "localhost:8420", "ftp://host/", "http://", 42,
                                 "http://user:pw@host/"])  # fmt: skip
def test_a_bad_url_is_a_config_error(url: Any) -> None:
    with pytest.raises(e.ConfigError):
        Client(url, "egk_secret")
    with pytest.raises(e.ConfigError):
        AsyncClient(url, "egk_secret")


@pytest.mark.parametrize("key", ["", None, "egk_with space", "egk_\nInjected: 1", "egk_ключ"])
def test_a_bad_key_is_a_config_error_that_does_not_show_it(key: Any) -> None:
    with pytest.raises(e.ConfigError) as caught:
        Client("http://127.0.0.1:8420", key)
    if key:
        assert key not in str(caught.value)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "5", True])
def test_a_bad_timeout_is_a_config_error(timeout: Any) -> None:
    with pytest.raises(e.ConfigError, match="timeout"):
        Client("http://127.0.0.1:8420", "egk_secret", timeout=timeout)


def test_the_key_is_never_shown(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    secret = served.keys["alice"]
    revoked_secret, revoked = KeyRing(served.engine.store).create(["alice"])
    KeyRing(served.engine.store).revoke(revoked.id)
    caplog.set_level(logging.DEBUG)
    shown: list[str] = []
    for key in (secret, revoked_secret):
        for client in (Client(served.url, key), AsyncClient(served.url, key)):
            shown += [repr(client), str(client)]
    with (Client(served.url, revoked_secret) as client,
          pytest.raises(e.AuthenticationError) as caught):  # fmt: skip
        client.list("alice")
    shown += [repr(caught.value), str(caught.value)]
    with (Client(f"http://127.0.0.1:{_free_port()}", secret) as client,
          pytest.raises(e.StoreError) as refused):  # fmt: skip
        client.list("alice")
    shown += [str(refused.value), repr(refused.value.__cause__)]
    shown += [r.getMessage() for r in caplog.records]
    assert caplog.records  # httpx did log the exchanges
    assert not [s for s in shown if secret in s or revoked_secret in s]


# -- arguments are refused before any request, as the engine refuses them ------------------------


BAD_CALLS: list[tuple[str, Callable[[Any], Any]]] = [
    ("empty content", lambda m: m.remember("  ", "ada")),
    ("unknown kind", lambda m: m.remember("x", "ada", kind="nope")),
    ("importance", lambda m: m.remember("x", "ada", importance=2)),
    ("no user", lambda m: m.recall("where?", "")),
    ("top_k", lambda m: m.recall("where?", "ada", top_k=0)),
    ("memory type", lambda m: m.recall("where?", "ada", memory_types=["dreams"])),
    ("turn", lambda m: m.context("where?", "ada", turn=-1)),
    ("window", lambda m: m.context("where?", "ada", context_window=0)),
    ("explain budget", lambda m: m.explain("where?", "ada", token_budget="9")),
    ("limit", lambda m: m.list("ada", limit=-1)),
    ("kind filter", lambda m: m.list("ada", kind="nope")),
    ("no target", lambda m: m.feedback("ada", "ctx")),
    ("no context", lambda m: m.feedback("ada", helpful=True)),
    ("score", lambda m: m.feedback("ada", "ctx", score=1.5)),
    ("no ids", lambda m: m.forget([], "ada")),
    ("bad field", lambda m: m.update("m1", "ada", colour="red")),
    ("bad flag", lambda m: m.pin("m1", "ada", "yes")),
    ("no turns", lambda m: m.ingest_conversation([], "ada")),
    ("bad time", lambda m: m.ingest("some text", "ada", event_at="yesterday")),
    ("bad records", lambda m: m.import_records("not records")),
    ("control id", lambda m: m.get("m\x00", "ada")),
    ("rebuild", lambda m: m.tiers("ada", rebuild="yes")),
]


@pytest.mark.parametrize("call", [c for _, c in BAD_CALLS], ids=[n for n, _ in BAD_CALLS])
def test_bad_arguments_fail_like_the_engine_before_any_request(
    mem_engine: Engine, call: Callable[[Any], Any]
) -> None:
    with pytest.raises(e.ValidationError) as expected:
        call(mem_engine)
    transport = Counting()
    with (Client(f"http://127.0.0.1:{_free_port()}", "egk_secret", transport=transport) as c,
          pytest.raises(e.ValidationError) as got):  # fmt: skip
        call(c)
    assert type(got.value) is type(expected.value)
    assert got.value.message == expected.value.message
    assert transport.sent == []


# -- list pages, export and import -------------------------------------------------------------


def test_list_follows_the_cursor_like_engine_list(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(25):
        served.engine.remember(f"alice fact number {i}: item {i * 7}", "alice",
                               "event" if i % 3 else "fact", now=NOW)  # fmt: skip
    monkeypatch.setattr(calls, "MAX_PAGE", 10)
    transport = Counting()
    with served.client(transport=transport) as alice:
        cases: list[dict[str, Any]] = [{"limit": None}, {"limit": 7, "offset": 12},
                                       {"limit": 100}, {"limit": 0}, {"offset": 30},
                                       {"kind": "fact", "limit": None}]  # fmt: skip
        for kw in cases:
            want = [m.id for m in served.engine.list("alice", **kw)]
            assert [m.id for m in alice.list("alice", **kw)] == want, kw
    pages = [r for r in transport.sent if r.url.path == "/v1/memories"]
    assert len(pages) == 3 + 2 + 3 + 1 + 3 + 1  # 25 in pages of 10; 19 in 10 + 9; …
    assert all(int(r.url.params["limit"]) <= 10 for r in pages)


def test_export_import_round_trip(served: Served, tmp_path: Path) -> None:
    with served.client() as alice:
        alice.remember("alice takes her coffee black", "alice", "preference", now=NOW)
        alice.ingest_conversation([{"speaker": "alice", "text": "We adopted a cat named Miso "
                                    "last spring."}], "alice", "s1", now=NOW)  # fmt: skip
        ctx = alice.context("How do I take my coffee?", "alice", now=NOW)
        assert ctx.context_id == ctx.id  # the HTTP API's name for it, on the client too
        alice.feedback("alice", ctx.context_id, helpful=True)
        stream = alice.export_records("alice")
        assert isinstance(stream, Records)  # lazy: read as iterated
        records = list(stream)
    assert records == list(served.engine.export_records("alice"))
    assert records[0]["embedding"] and records[0]["state"]

    other = Served(tmp_path / "other")
    try:
        with other.client("admin") as admin:
            result = admin.import_records(iter(records))
            assert result == ImportResult(
                memories=len(records),
                stored=0,
                merged=0,
                discarded=0,
                states=len(records[0]["state"]),
            )
            assert list(admin.export_records("alice")) == records
    finally:
        other.close()


def test_a_partial_export_can_be_closed(served: Served) -> None:
    for i in range(5):
        served.engine.remember(f"alice detail {i}", "alice", now=NOW + timedelta(minutes=i))
    with served.client() as alice:
        stream = alice.export_records("alice")
        first = next(stream)
        stream.close()
        assert first["content"] == "alice detail 0"
        assert len(list(alice.export_records())) == 5  # the key's users; the pool is free


def test_a_refused_import_writes_nothing(served: Served) -> None:
    good = {"type": "remember", "user_id": "alice", "content": "alice lives in Porto"}
    refused = [{**good, "content": f"refused record {i}"} for i in range(3)]
    sent: list[int] = []
    with served.client() as alice:
        with pytest.raises(e.ValidationError, match="record 3: must be a JSON object"):
            alice.import_records([*refused[:2], ["not", "a", "record"]], on_record=sent.append)
        assert sent == [1, 2]  # the upload stopped at the bad record, two lines sent
        with pytest.raises(e.PermissionDeniedError):
            alice.import_records([refused[0], {**refused[1], "user_id": "bob"}])
        with pytest.raises(e.ValidationError, match="record 2: not JSON"):
            alice.import_records([refused[0], {**refused[1], "metadata": {"when": object()}}])

        async def abort() -> None:
            async with AsyncClient(served.url, served.keys["alice"]) as twin:
                await twin.import_records([refused[2], 42])  # type: ignore[list-item]

        with pytest.raises(e.ValidationError, match="record 2: must be a JSON object"):
            run_async(abort())
        assert alice.import_records([good], on_record=sent.append).stored == 1
    assert sent == [1, 2, 1]
    # the engine imports in one transaction and one at a time: the good import came after
    assert [m.content for m in served.engine.list("alice")] == ["alice lives in Porto"]


def test_results_are_the_engines_types(served: Served) -> None:
    with served.client() as alice:
        out = alice.remember("alice plays the cello", "alice", "fact", now=NOW)
        assert isinstance(out, Outcome) and out.action == "stored" and out.memory_id
        memory = alice.get(out.memory_id, "alice")
        assert isinstance(memory, Memory) and memory.embedding is None  # vectors stay home
        assert memory.created_at == NOW
        assert alice.forget(out.memory_id, "alice") == 1
        assert alice.forget([out.memory_id, "0" * 32], "alice") == 0  # like the engine


# -- the extra ------------------------------------------------------------------------------


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_the_core_does_not_import_httpx() -> None:
    done = _python("import sys, engrain, engrain.wire; print('httpx' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_without_httpx_the_import_names_the_extra() -> None:
    done = _python("import sys; sys.modules['httpx'] = None\n"
                   "try:\n    from engrain.client import Client\n"
                   "except ImportError as exc:\n    print(exc)")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "pip install 'engrain[client]'" in done.stdout


def test_a_closed_client_refuses_like_a_closed_engine(served: Served) -> None:
    """After close(), every call raises the StoreError a closed Engine raises (httpx's own
    RuntimeError is not an engrain error) and sends nothing."""
    sent = Counting()
    client = served.client("ada", transport=sent)
    client.remember("The API listens on port 8080", "ada")
    client.close()
    calls_after = [lambda: client.remember("x", "ada"), lambda: client.list("ada"),
                   lambda: client.export_records("ada")]  # fmt: skip
    for call in calls_after:
        with pytest.raises(e.StoreError, match="the client is closed: nothing was done"):
            call()
    engine = Engine(settings=served.engine.settings, store=MemoryStore(), embedder=HashEmbedder())
    engine.close()
    with pytest.raises(e.StoreError, match="the engine is closed: nothing was done"):
        engine.list("ada")
    assert len(sent.sent) == 1
    assert [m.content for m in served.engine.list("ada")] == ["The API listens on port 8080"]

    async def run() -> None:
        async with AsyncClient(served.url, served.keys["ada"]) as aio:
            await aio.list("ada")
        for call in (lambda: aio.remember("y", "ada"), lambda: aio.export_records("ada")):
            with pytest.raises(e.StoreError, match="the client is closed: nothing was done"):
                await call()

    run_async(run())
    assert len(served.engine.list("ada")) == 1
