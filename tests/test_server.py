"""The HTTP server through real HTTP on loopback: uvicorn in a thread on a free port, httpx
as the client. The auth matrix (every endpoint × no key, another user's key, the right
key, an admin key), isolation of look-alike users, every error shape, import → export,
pagination, limits, metrics and the OpenAPI document."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import EmptyInputError, EngrainError, UnknownValueError
from engrain.keys import KeyRing
from engrain.server import create_app
from engrain.store import MemoryStore
from engrain.validate import MAX_ID_CHARS, MAX_INT

from .conftest import make_settings

pytestmark = pytest.mark.filterwarnings("ignore::engrain.validate.UserIdWarning")

ALICE_LOOKALIKES = ["Alice", "alice ", "ａlice"]  # capital, trailing space, fullwidth a


class LiveServer:
    """An ASGI app served by uvicorn in a daemon thread on a free loopback port."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # uvicorn leaves Nagle on for sockets handed to it (with host/port it does not):
        # a response's start and body then wait for a delayed ACK, 40 ms per request on
        # a kept-alive connection. Accepted sockets inherit the option from this one.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)  # fmt: skip
        self.thread.start()
        started = threading.Event()
        for _ in range(500):  # wait for the startup flag (bounded: 500 × 10 ms)
            if self.server.started or started.wait(0.01) or self.server.started:
                break
        assert self.server.started, "uvicorn did not start"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def make_engine(tmp_path: Path, embedder: Any = None) -> Engine:
    return Engine(settings=make_settings(tmp_path), store=MemoryStore(),
                  embedder=embedder or HashEmbedder())  # fmt: skip


class Service:
    """One live server with keys for alice, bob, the look-alikes, an admin and two
    limited keys, and one memory of alice's."""

    def __init__(self, tmp_path: Path, **limits: Any) -> None:
        self.engine = make_engine(tmp_path)
        ring = KeyRing(self.engine.store)
        self.keys = {u: ring.create([u])[0] for u in ["alice", "bob", *ALICE_LOOKALIKES]}
        self.keys["admin"] = ring.create(admin=True)[0]
        self.keys["alice+bob"] = ring.create(["alice", "bob"])[0]
        self.keys["alice/work"] = ring.create(["alice"], projects=["work"])[0]
        self.live = LiveServer(create_app(self.engine, ring, **limits))
        self.client = httpx.Client(base_url=self.live.url, timeout=30)
        out = self.engine.remember("alice keeps her notes in org-mode", "alice", "preference")
        assert out.memory_id is not None
        self.alice_memory = out.memory_id

    def call(self, method: str, path: str, key: str | None = None, **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}))
        if key is not None:
            headers["Authorization"] = f"Bearer {self.keys.get(key, key)}"
        return self.client.request(method, path, headers=headers, **kw)

    def close(self) -> None:
        self.client.close()
        self.live.stop()
        self.engine.close()


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    service = Service(tmp_path_factory.mktemp("server"))
    yield service
    service.close()


def assert_error(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The one error shape: code, message, status, request id (the header's)."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "message", "status", "request_id"}
    assert body["status"] == status
    assert body["request_id"] == r.headers["x-request-id"]
    assert "Traceback" not in body["message"]
    if code is not None:
        assert body["error"] == code
    return body


# -- the auth matrix -----------------------------------------------------------------------


def endpoints(memory_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every authenticated endpoint, acting for alice (user in the body or the query)."""
    q = {"params": {"user_id": "alice"}}
    return [
        ("POST", "/v1/memories", {"json": {"user_id": "alice", "content": "likes green tea"}}),
        (
            "POST",
            "/v1/ingest",
            {
                "json": {
                    "user_id": "alice",
                    "text": "I moved to Lyon in 2024 and started working at a bakery.",
                }
            },
        ),
        (
            "POST",
            "/v1/conversations",
            {
                "json": {
                    "user_id": "alice",
                    "turns": [
                        {
                            "speaker": "alice",
                            "text": "My sister Mia is visiting from Oslo next week.",
                        }
                    ],
                }
            },
        ),
        ("POST", "/v1/context", {"json": {"user_id": "alice", "message": "Where are my notes?"}}),
        ("POST", "/v1/recall", {"json": {"user_id": "alice", "query": "notes"}}),
        ("POST", "/v1/explain", {"json": {"user_id": "alice", "message": "Where are my notes?"}}),
        ("GET", "/v1/memories", q),
        ("GET", f"/v1/memories/{memory_id}", q),
        ("PATCH", f"/v1/memories/{memory_id}", {**q, "json": {"importance": 0.9}}),
        ("POST", f"/v1/memories/{memory_id}/pin", {**q, "json": {"value": True}}),
        ("POST", f"/v1/memories/{memory_id}/mute", {**q, "json": {"value": False}}),
        (
            "POST",
            "/v1/feedback",
            {"json": {"user_id": "alice", "memory_ids": [memory_id], "helpful": True}},
        ),
        ("GET", "/v1/tiers", q),
        ("GET", "/v1/export", q),
        (
            "POST",
            "/v1/import",
            {
                "content": json.dumps(
                    {"type": "remember", "user_id": "alice", "content": "imported line"}
                )
                + "\n"
            },
        ),
        ("POST", "/v1/forget", {"json": {"user_id": "alice", "memory_ids": ["no-such-id"]}}),
        ("DELETE", "/v1/memories/no-such-id", q),
        ("POST", "/v1/browse", {"json": {"user_id": "alice", "text": "notes"}}),
        ("GET", f"/v1/memories/{memory_id}/relations", q),
        ("GET", "/v1/review", q),
        ("GET", "/v1/contexts", q),
        ("POST", "/v1/preview", {"json": {"user_id": "alice", "message": "Where are my notes?"}}),
    ]


ENDPOINT_IDS = [f"{m} {p}" for m, p, _ in endpoints("{id}")]


@pytest.mark.parametrize("index", range(len(ENDPOINT_IDS)), ids=ENDPOINT_IDS)
def test_auth_matrix(svc: Service, index: int) -> None:
    method, path, kw = endpoints(svc.alice_memory)[index]
    r = svc.call(method, path, None, **kw)
    assert_error(r, 401, "unauthenticated")
    assert r.headers["www-authenticate"] == "Bearer"
    assert_error(svc.call(method, path, "egk_" + "x" * 43, **kw), 401, "unauthenticated")
    assert_error(svc.call(method, path, "bob", **kw), 403, "forbidden")
    assert_error(svc.call(method, path, "Alice", **kw), 403, "forbidden")
    expected = 404 if method == "DELETE" else (201 if path == "/v1/memories"
                                               and method == "POST" else 200)  # fmt: skip
    for key in ("alice", "admin", "alice+bob"):
        r = svc.call(method, path, key, **kw)
        assert r.status_code == expected, (key, r.text)


def test_the_user_may_be_left_out_when_the_key_holds_one(svc: Service) -> None:
    r = svc.call("GET", "/v1/memories", "alice")
    assert r.status_code == 200
    assert svc.alice_memory in [m["id"] for m in r.json()["memories"]]
    assert_error(svc.call("GET", "/v1/memories", "alice+bob"), 400, "invalid_input")
    assert_error(svc.call("GET", "/v1/memories", "admin"), 400, "invalid_input")


def test_a_project_limited_key(svc: Service) -> None:
    r = svc.call("POST", "/v1/memories", "alice/work", json={"content": "standup at 9:30"})
    assert r.status_code == 201
    work_id = r.json()["memory_id"]
    assert svc.engine.get(work_id, "alice").project == "work"  # the key's only project
    assert_error(
        svc.call(
            "POST",
            "/v1/context",
            "alice/work",
            json={"message": "when is standup?", "project": "home"},
        ),
        403,
    )
    listed = svc.call("GET", "/v1/memories", "alice/work").json()["memories"]
    assert [m["id"] for m in listed] == [work_id]
    # alice's memory outside the project is invisible by id, like a missing one
    for method in ("GET", "DELETE"):
        assert_error(svc.call(method, f"/v1/memories/{svc.alice_memory}", "alice/work"), 404)
    assert_error(svc.call("GET", "/v1/export", "alice/work"), 403, "forbidden")


def test_a_project_limited_key_cannot_touch_another_projects_memory(tmp_path: Path) -> None:
    """Every route naming a memory by id treats one of another project as missing."""
    service = Service(tmp_path)
    try:
        home = service.engine.remember("alice waters the plants on sunday", "alice",
                                       project="home").memory_id  # fmt: skip
        assert home is not None
        before = service.engine.get(home, "alice")
        path = f"/v1/memories/{home}"
        for method, route, kw in [
            ("GET", path, {}), ("PATCH", path, {"json": {"content": "rewritten"}}),
            ("POST", path + "/pin", {}), ("POST", path + "/mute", {}), ("DELETE", path, {}),
        ]:  # fmt: skip
            assert_error(service.call(method, route, "alice/work", **kw), 404, "not_found")
        r = service.call("POST", "/v1/forget", "alice/work", json={"memory_ids": [home]})
        assert r.json() == {"forgotten": 0}  # as for a missing id
        r = service.call("POST", "/v1/feedback", "alice/work",
                         json={"memory_ids": [home], "helpful": False})  # fmt: skip
        assert r.status_code == 200 and r.json()["usefulness"] == {}
        # a context made for the home project (by an unlimited key) is unknown to this key
        ctx = service.call(
            "POST",
            "/v1/context",
            "alice",
            json={"message": "when do I water the plants?", "project": "home", "token_budget": 500},
        )
        assert home in [m["id"] for m in ctx.json()["memories"]]
        assert_error(
            service.call(
                "POST",
                "/v1/feedback",
                "alice/work",
                json={"context_id": ctx.json()["context_id"], "helpful": False},
            ),
            404,
            "not_found",
        )
        after = service.engine.get(home, "alice")
        assert (after.content, after.pinned, after.muted, after.usefulness) == (
            before.content,
            before.pinned,
            before.muted,
            before.usefulness,
        )
        # the same key still acts on its own project's memories by id
        work = service.call(
            "POST", "/v1/memories", "alice/work", json={"content": "deploys happen on thursday"}
        ).json()["memory_id"]
        assert service.call("POST", f"/v1/memories/{work}/pin", "alice/work").json()["pinned"]
        r = service.call("POST", "/v1/forget", "alice/work", json={"memory_ids": [work, home]})
        assert r.json() == {"forgotten": 1}
        assert service.engine.get(home, "alice").content == before.content
    finally:
        service.close()


def test_a_revoked_key_is_refused(tmp_path: Path) -> None:
    service = Service(tmp_path)
    try:
        ring = KeyRing(service.engine.store)
        secret, key = ring.create(["carol"])
        assert service.call("GET", "/v1/memories", secret).status_code == 200
        ring.revoke(key.id)
        assert_error(service.call("GET", "/v1/memories", secret), 401, "unauthenticated")
    finally:
        service.close()


# -- isolation -----------------------------------------------------------------------------


def test_look_alike_users_never_see_each_other(svc: Service) -> None:
    secrets = {}
    for user in ALICE_LOOKALIKES:
        r = svc.call("POST", "/v1/memories", user, json={"content": f"secret of {user!r}: "
                                                         f"notes in {user!r}-mode"})  # fmt: skip
        assert r.status_code == 201
        secrets[user] = r.json()["memory_id"]
    for user in ["alice", *ALICE_LOOKALIKES]:
        mine = {m["id"] for m in svc.call("GET", "/v1/memories", user).json()["memories"]}
        others = set(secrets.values()) - {secrets.get(user)}
        assert not mine & others, user
        assert all(m["user_id"] == user for m in
                   svc.call("GET", "/v1/memories", user).json()["memories"])  # fmt: skip
        ctx = svc.call(
            "POST",
            "/v1/context",
            user,
            json={"message": "where are my notes?", "token_budget": 2000},
        ).json()
        assert all(m["user_id"] == user for m in ctx["memories"])
        for other in others:
            assert_error(svc.call("GET", f"/v1/memories/{other}", user), 404, "not_found")
            assert_error(svc.call("PATCH", f"/v1/memories/{other}", user,
                                  json={"content": "overwritten"}), 404)  # fmt: skip
            assert_error(svc.call("POST", f"/v1/memories/{other}/pin", user), 404)
            assert_error(svc.call("DELETE", f"/v1/memories/{other}", user), 404)
    # alice's memory survived every attempt, unchanged
    kept = svc.engine.get(svc.alice_memory, "alice")
    assert kept.content == "alice keeps her notes in org-mode"
    for user, memory_id in secrets.items():
        assert svc.engine.get(memory_id, user).content.startswith("secret of")


def test_an_id_counted_after_composing_like_the_engine_does(svc: Service) -> None:
    """256 decomposed "é" (512 code points) are the 256-character user the API, CLI and
    MCP accept; HTTP composed ids only after counting and refused it (session 17, h8)."""
    composed, decomposed = "\u00e9" * 256, "e\u0301" * 256
    stored = svc.call("POST", "/v1/memories", "admin",
                      json={"user_id": decomposed, "content": "likes long names"})  # fmt: skip
    assert stored.status_code == 201, stored.text
    [memory] = svc.engine.list(composed)
    assert memory.id == stored.json()["memory_id"]
    for user in (decomposed, composed):
        listed = svc.call("GET", "/v1/memories", "admin", params={"user_id": user})
        assert [m["id"] for m in listed.json()["memories"]] == [memory.id]
        got = svc.call("GET", f"/v1/memories/{memory.id}", "admin", params={"user_id": user})
        assert got.status_code == 200, got.text
    assert_error(svc.call("POST", "/v1/memories", "admin",
                          json={"user_id": "\u00e9" * 257, "content": "x"}), 422)  # fmt: skip
    svc.engine.forget(memory.id, composed)


#: Ids an import takes that mean something in a URL path (session 18, h7).
ODD_IDS = ["a/b", "../x", "x/pin", "..", ".", "a?b#c", "a%2Fb", "y/relations"]


def imported(engine: Engine, user: str, ids: list[str]) -> None:
    """One memory per id (``import_records`` takes any id), its content naming it."""
    engine.remember("template", user, "fact")
    template = next(iter(engine.export_records(user)))
    engine.forget(template["id"], user)
    base = {k: v for k, v in template.items() if k not in ("state", "embedding", "id")}
    engine.import_records([{**base, "id": i, "content": f"odd id {i}"} for i in ids])


def test_a_memory_whose_id_holds_url_characters_is_reached_by_every_route(svc: Service) -> None:
    """An id with ``/`` (or of dots only) once matched no route or another one: such a
    memory could be listed but not read, pinned, muted, edited or deleted over HTTP."""
    from urllib.parse import quote

    imported(svc.engine, "bob", ODD_IDS)
    for memory_id in ODD_IDS:
        path = "/v1/memories/" + quote(memory_id, safe="").replace(".", "%2E")
        q = {"user_id": "bob"}
        own_route = not memory_id.endswith(("/pin", "/relations"))  # those are y's actions
        if own_route:
            got = svc.call("GET", path, "bob", params=q)
            assert got.status_code == 200 and got.json()["content"] == f"odd id {memory_id}"
        relations = svc.call("GET", path + "/relations", "bob", params=q)
        assert relations.status_code == 200, (memory_id, relations.text)
        for action in ("pin", "mute"):
            done = svc.call("POST", f"{path}/{action}", "bob", params=q)
            assert done.status_code == 200 and done.json()["id"] == memory_id, done.text
        if own_route:
            patched = svc.call("PATCH", path, "bob", params=q, json={"importance": 0.25})
            assert patched.status_code == 200 and patched.json()["importance"] == 0.25
            assert svc.call("DELETE", path, "bob", params=q).json()["forgotten"] == 1
        else:  # PATCH …/x/pin is no change of a memory "x/pin" but a wrong method
            assert svc.call("PATCH", path, "bob", params=q, json={}).status_code == 405
            body = {"user_id": "bob", "memory_ids": [memory_id]}
            assert svc.call("POST", "/v1/forget", "bob", json=body).status_code == 200
    assert svc.engine.list("bob") == []


def test_the_client_reaches_a_memory_whose_id_is_dots_or_holds_a_slash(svc: Service) -> None:
    """``Client.get(".")`` once sent ``/v1/memories/.``, which HTTP clients shorten to
    ``/v1/memories/``: a ``KeyError`` outside the error tree."""
    from engrain.client import Client

    imported(svc.engine, "bob", [".", "..", "a/b"])
    with Client(svc.live.url, svc.keys["bob"]) as client:
        for memory_id in (".", "..", "a/b"):
            assert client.get(memory_id, "bob").content == f"odd id {memory_id}"
            assert client.pin(memory_id, "bob").pinned
        assert client.forget([".", "..", "a/b"], "bob") == 3


def test_a_key_naming_a_look_alike_user_is_refused(svc: Service) -> None:
    for user in ALICE_LOOKALIKES:
        assert_error(svc.call("GET", "/v1/memories", "alice", params={"user_id": user}), 403)
        assert_error(svc.call("POST", "/v1/memories", user,
                              json={"user_id": "alice", "content": "x"}), 403)  # fmt: skip


def test_export_holds_only_the_keys_users(svc: Service) -> None:
    for key, users in (("alice", {"alice"}), ("alice+bob", {"alice", "bob"})):
        svc.call("POST", "/v1/memories", "bob", json={"content": "bob likes chess"})
        lines = svc.call("GET", "/v1/export", key).text.splitlines()
        assert lines and {json.loads(line)["user_id"] for line in lines} <= users
    everyone = svc.call("GET", "/v1/export", "admin").text.splitlines()
    assert {json.loads(line)["user_id"] for line in everyone} >= {"alice", "bob", "Alice"}


# -- error shapes ----------------------------------------------------------------------------


def test_error_shapes(svc: Service) -> None:
    # the schema states what the engine takes: an unknown kind or blank text is 422 there
    assert_error(
        svc.call("POST", "/v1/memories", "alice", json={"content": "x", "kind": "bogus"}),
        422,
        "invalid_input",
    )
    assert_error(svc.call("POST", "/v1/memories", "alice", json={"content": "   "}), 422,
                 "empty_input")  # fmt: skip
    assert_error(svc.call("PATCH", f"/v1/memories/{svc.alice_memory}", "alice",
                          json={"content": None}), 422)  # fmt: skip
    assert_error(
        svc.call(
            "POST", "/v1/feedback", "alice", json={"memory_ids": ["x"], "helpful": True, "score": 1}
        ),
        422,
    )
    assert_error(svc.call("POST", "/v1/memories", "alice", json={"kind": "fact"}), 422,
                 "invalid_input")  # fmt: skip
    assert_error(svc.call("POST", "/v1/memories", "alice", json={"content": "x", "typo": 1}),
                 422)  # fmt: skip
    json_header = {"content-type": "application/json"}
    bad_json = assert_error(svc.call("POST", "/v1/context", "alice", content=b"{not json",
                                     headers=json_header), 422)  # fmt: skip
    assert bad_json["message"].startswith("body: invalid JSON (")  # was "0: JSON decode error"
    wrong_type = assert_error(svc.call("POST", "/v1/context", "alice",
                                       json={"message": "hi", "top_k": "ten"}), 422)  # fmt: skip
    assert wrong_type["message"] == "top_k: must be a JSON number"  # no "Value error, "
    assert_error(svc.call("GET", "/v1/memories", "alice", params={"limit": 0}), 422)
    assert_error(svc.call("GET", "/v1/memories", "alice", params={"cursor": "garbage!"}), 422)
    assert_error(
        svc.call("POST", "/v1/feedback", "alice", json={"context_id": "nope", "helpful": True}),
        404,
        "not_found",
    )
    assert_error(svc.call("GET", "/v1/no-such-route", "alice"), 404, "not_found")
    r = svc.call("PUT", "/v1/memories", "alice")
    assert_error(r, 405)
    assert r.headers["allow"] == "GET, POST"  # both routes of the path, not the first only
    r = svc.call("PUT", f"/v1/memories/{svc.alice_memory}", "alice")
    assert r.headers["allow"] == "DELETE, GET, PATCH"


@pytest.mark.parametrize(
    "media", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
def test_a_json_body_sent_as_another_media_type_is_told_so(svc: Service, media: str) -> None:
    """FastAPI reads a body as JSON only when it is sent as JSON; base told a client that
    sent a correct object as ``text/plain`` (curl's ``-d`` sends a form) "body: Input should
    be a valid dictionary or object to extract fields from". Nothing is written."""
    before = svc.engine.list("alice")
    body = json.dumps({"content": "sent as the wrong media type"}).encode()
    r = svc.call("POST", "/v1/memories", "alice", content=body, headers={"content-type": media})
    error = assert_error(r, 422, "invalid_input")
    assert error["message"] == (
        "body: must be JSON sent with Content-Type: application/json (this request's "
        f"Content-Type is {media!r})"
    )
    assert svc.engine.list("alice") == before


def test_a_body_without_a_content_type_is_told_to_send_one(svc: Service) -> None:
    r = svc.call("POST", "/v1/context", "alice", content=b'{"message": "which port?"}')
    error = assert_error(r, 422, "invalid_input")
    assert error["message"].endswith("(this request's Content-Type is missing)")
    r = svc.call("POST", "/v1/context", "alice", json=[1])  # JSON, but not an object
    assert "Content-Type" not in assert_error(r, 422)["message"]


#: Values the request schema refuses (a remember's fields, then a forget's and a browse's
#: lists), each with the code the engine gives the same value in Python.
SCHEMA_REFUSALS = [
    ({"content": ""}, "empty_input"),
    ({"content": " \u200b\x07 "}, "empty_input"),
    ({"user_id": " "}, "empty_input"),
    ({"project": ""}, "empty_input"),
    ({"user_id": "\u00e9" * (MAX_ID_CHARS + 1)}, "input_too_large"),
    ({"project": "e\u0301" * (MAX_ID_CHARS + 1)}, "input_too_large"),  # composed: 257
    ({"domains": ["d" * (MAX_ID_CHARS + 1)]}, "input_too_large"),
    ({"user_id": "a\x00"}, "invalid_input"),
    ({"project": "\u200b"}, "invalid_input"),
    ({"domains": ["a\x00b"]}, "invalid_input"),
]


@pytest.mark.parametrize(("given", "code"), SCHEMA_REFUSALS,
                         ids=[f"{next(iter(g))}-{c}" for g, c in SCHEMA_REFUSALS])  # fmt: skip
def test_a_schema_refusal_carries_the_engines_code(
    svc: Service, given: dict[str, Any], code: str
) -> None:
    """A value the schema refuses (422) carries the code the engine gives the same value
    (``empty_input``, ``input_too_large``, ``invalid_input``), not always
    ``invalid_input``: a client tells them apart the same way on every surface."""
    body = {"content": "a note", "user_id": "alice", **given}
    with pytest.raises(EngrainError) as refused:
        svc.engine.remember(body.pop("content"), body.pop("user_id"), **body)
    assert refused.value.code == code
    sent = {"content": "a note", "user_id": "alice", **given}
    assert_error(svc.call("POST", "/v1/memories", "admin", json=sent), 422, code)


def test_a_schema_refusal_of_a_list_or_a_query_carries_the_engines_code(svc: Service) -> None:
    """An empty list and a query parameter are mapped the same way; with several wrong
    values, the first one's code (the engine stops at the first)."""
    with pytest.raises(EmptyInputError):
        svc.engine.forget([], "alice")
    assert_error(svc.call("POST", "/v1/forget", "alice", json={"memory_ids": []}),
                 422, "empty_input")  # fmt: skip
    long = "\u00e9" * (MAX_ID_CHARS + 1)
    assert_error(svc.call("GET", "/v1/memories", "admin", params={"user_id": long}), 422,
                 "input_too_large")  # fmt: skip
    both = svc.call("POST", "/v1/memories", "alice", json={"content": " ", "project": long})
    body = assert_error(both, 422, "empty_input")
    assert body["message"].startswith("content: ") and "; project: " in body["message"]


def test_the_engine_judges_the_model_as_in_python(tmp_path: Path) -> None:
    """``model`` is the engine's to judge, over HTTP as in Python: a model the server's
    ``model_windows`` setting adds picks its tier, an unknown model with ``context_window``
    or ``token_budget`` is taken (they win), and an unknown model alone is the engine's
    400 ``unknown_value``, in its words, writing nothing. (A pattern built from the
    registry refused the first two with 422.)"""
    settings = make_settings(tmp_path, model_windows={"house-model": 4_096})
    engine = Engine(settings=settings, store=MemoryStore(), embedder=HashEmbedder())
    ring = KeyRing(engine.store)
    key = ring.create(["alice"])[0]
    engine.remember("alice keeps her notes in org-mode", "alice", "preference")
    live = LiveServer(create_app(engine, ring))
    try:
        with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {key}"},
                          timeout=30) as client:  # fmt: skip
            for given in ({"model": "house-model"}, {"model": "openai/GPT-4o-2024-08-06"},
                          {"model": "no-such", "context_window": 4_096},
                          {"model": "no-such", "token_budget": 500}):  # fmt: skip
                expected = engine.preview("where are my notes?", "alice", **given).tier
                for path in ("/v1/preview", "/v1/context"):
                    r = client.post(path, json={"message": "where are my notes?", **given})
                    assert r.status_code == 200, (path, given, r.text)
                    served = r.json()  # a context may stand in with tier 3 while tiers compile
                    assert served["tier"] == expected or served["fallback"], (path, given)
            assert engine.preview("hi", "alice", model="house-model").tier == 1  # its window
            with pytest.raises(UnknownValueError) as refused:
                engine.preview("where are my notes?", "alice", model="no-such")
            before = engine.contexts("alice")
            for path in ("/v1/preview", "/v1/context"):
                r = client.post(path, json={"message": "where are my notes?", "model": "no-such"})
                body = assert_error(r, 400, "unknown_value")
                assert body["message"] == refused.value.message
            assert engine.contexts("alice") == before
            r = client.post("/v1/context", json={"message": "hi", "model": " "})
            assert_error(r, 422, "empty_input")  # an id's rule, as the engine's: model is empty
    finally:
        live.stop()
        engine.close()


def test_a_wrong_path_or_method_says_which_and_what_is_there(svc: Service) -> None:
    """A client pointed at a wrong base URL (``http://host:8420/api``) or using the wrong
    method learns which request missed and where the routes are, not just "Not Found"."""
    body = assert_error(svc.call("POST", "/api/v1/context", "alice", json={}), 404, "not_found")
    assert body["message"].startswith("no route POST /api/v1/context;")
    assert "/v1/" in body["message"] and "/openapi.json lists them" in body["message"]
    body = assert_error(svc.call("PUT", "/v1/context", "alice"), 405, "method_not_allowed")
    assert body["message"] == "PUT /v1/context: method not allowed; this path takes POST"
    long = "/x" + "%07" * 500  # decoded: 500 control characters
    body = assert_error(svc.call("GET", long, "alice"), 404, "not_found")
    assert "\x07" not in body["message"] and len(body["message"]) < 300


def test_refusals_say_what_was_wrong_in_the_engines_words(svc: Service) -> None:
    """A pattern's refusal says what it asks, not the pattern (hundreds of escaped code
    points); a body FastAPI cannot read says why, not "There was an error parsing the
    body"; the limits are the engine's, once (validate.py), and a refusal writes nothing."""
    before = svc.engine.list("alice")
    body = assert_error(svc.call("POST", "/v1/memories", "alice",
                                 json={"content": "x", "user_id": " "}), 422)  # fmt: skip
    assert body["message"] == "user_id: is empty"
    body = assert_error(svc.call("POST", "/v1/memories", "alice",
                                 json={"content": "x", "user_id": "a\x00"}), 422)  # fmt: skip
    assert body["message"] == "user_id: is empty or contains control or invisible characters"
    body = assert_error(svc.call("POST", "/v1/memories", "alice", json={"content": "\u200b "}),
                        422)  # fmt: skip
    assert body["message"] == "content: is empty (no visible characters)"
    json_header = {"content-type": "application/json"}
    deep = b'{"content": "x", "metadata": ' + b'{"a": ' * 5_000 + b"1" + b"}" * 5_001
    body = assert_error(svc.call("POST", "/v1/memories", "alice", content=deep,
                                 headers=json_header), 400, "invalid_input")  # fmt: skip
    assert body["message"] == "body: JSON nested too deeply to read"
    digits = b'{"message": "hi", "top_k": ' + b"9" * 5_000 + b"}"
    body = assert_error(svc.call("POST", "/v1/context", "alice", content=digits,
                                 headers=json_header), 400, "invalid_input")  # fmt: skip
    assert body["message"] == "body: a number in the JSON has too many digits to read"
    latin1 = '{"content": "café au lait"}'.encode("latin-1")  # base: "(UnicodeDecodeError)"
    body = assert_error(svc.call("POST", "/v1/memories", "alice", content=latin1,
                                 headers=json_header), 400, "invalid_input")  # fmt: skip
    assert body["message"] == ("body: not valid UTF-8 (byte 0xe9 at position 16): send JSON "
                               "as UTF-8")  # fmt: skip
    nested: dict[str, Any] = {}
    for _ in range(99):
        nested = {"a": nested}
    body = assert_error(svc.call("POST", "/v1/memories", "alice",
                                 json={"content": "x y z", "metadata": nested}), 400)  # fmt: skip
    assert body["message"] == "metadata is nested deeper than 64 levels"
    big = {"content": "x y z", "metadata": {"notes": "n" * 200_000}}  # 0.2 MB: under 1 MB
    body = assert_error(svc.call("POST", "/v1/memories", "alice", json=big), 413,
                        "input_too_large")  # fmt: skip
    assert body["message"].startswith("metadata has 200,013 characters as JSON; the limit is")
    assert svc.engine.list("alice") == before
    # any cursor the schema lets through is a position: past the last memory, an empty page
    page = svc.call("GET", "/v1/memories", "alice", params={"cursor": "9" * 15})
    assert page.status_code == 200 and page.json() == {"memories": [], "next_cursor": None}


def test_the_schema_states_the_engines_limits(svc: Service) -> None:
    schemas = svc.call("GET", "/openapi.json").json()["components"]["schemas"]

    def given(model: str, field: str) -> dict[str, Any]:  # the branch that is not null
        branches = schemas[model]["properties"][field]["anyOf"]
        return next(b for b in branches if b["type"] != "null")

    assert given("ContextRequest", "token_budget")["maximum"] == MAX_INT
    assert given("RecallRequest", "top_k")["maximum"] == MAX_INT
    assert given("RememberRequest", "domains")["items"]["maxLength"] == MAX_ID_CHARS


def test_request_ids_are_echoed_or_made(svc: Service) -> None:
    r = svc.call("GET", "/healthz", headers={"X-Request-ID": "trace-42.a_b"})
    assert r.headers["x-request-id"] == "trace-42.a_b"
    r = svc.call("GET", "/healthz", headers={"X-Request-ID": "bad id\twith tab"})
    assert r.headers["x-request-id"] != "bad id\twith tab" and len(r.headers["x-request-id"]) == 32


def test_bodies_over_the_limit_are_413(tmp_path: Path) -> None:
    service = Service(tmp_path, max_body_bytes=2_000, max_import_bytes=3_000)
    try:
        big = {"content": "x" * 5_000}
        assert_error(service.call("POST", "/v1/memories", "alice", json=big), 413,
                     "input_too_large")  # fmt: skip

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
            yield b'{"content": "'
            for _ in range(10):
                yield b"y" * 500
            yield b'"}'

        assert_error(service.call("POST", "/v1/memories", "alice", content=chunks(),
                                  headers={"content-type": "application/json"}), 413)  # fmt: skip
        before = service.engine.list("alice", limit=None)
        record = json.dumps({"type": "remember", "user_id": "alice", "content": "z" * 100})
        body = ((record + "\n") * 40).encode()
        assert_error(service.call("POST", "/v1/import", "alice", content=iter([body])), 413)
        assert service.engine.list("alice", limit=None) == before  # nothing half-imported
    finally:
        service.close()


class GatedEmbedder(HashEmbedder):
    """Blocks every embedding until the test opens the gate (no wall-clock assertions)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def embed(self, texts: Any) -> Any:
        self.gate.wait(30)
        return super().embed(texts)


def test_a_request_past_the_time_limit_is_503(tmp_path: Path) -> None:
    embedder = GatedEmbedder()
    engine = make_engine(tmp_path, embedder)
    ring = KeyRing(engine.store)
    secret, _ = ring.create(["alice"])
    live = LiveServer(create_app(engine, ring, request_timeout=0.2))
    try:
        r = httpx.post(f"{live.url}/v1/memories", json={"content": "slow to embed"},
                       headers={"Authorization": f"Bearer {secret}"}, timeout=30)  # fmt: skip
        assert_error(r, 503, "timeout")
        embedder.gate.set()
        # The server still answers. /healthz is under the same 0.2 s limit, which a loaded
        # machine can pass too, so a 503 timeout there is retried (the failure is the same).
        for _ in range(20):
            health = httpx.get(f"{live.url}/healthz", timeout=30)
            if health.status_code != 503:
                break
            assert_error(health, 503, "timeout")
        assert health.status_code == 200
    finally:
        embedder.gate.set()
        live.stop()
        engine.close()


def test_store_failure_is_503_on_readyz(tmp_path: Path) -> None:
    class Broken(MemoryStore):
        def revision(self, user_id: str) -> int:
            raise OSError("disk gone")

    engine = Engine(settings=make_settings(tmp_path), store=Broken(), embedder=HashEmbedder())
    live = LiveServer(create_app(engine))
    try:
        assert httpx.get(f"{live.url}/healthz").json() == {"status": "ok"}
        assert_error(httpx.get(f"{live.url}/readyz"), 503, "store_error")
    finally:
        live.stop()
        engine.close()


def test_a_closed_engine_is_not_ready(tmp_path: Path) -> None:
    """Every call of a closed engine is 503 `store_error`; readiness said 200 (base) when
    its store still answered a read (the memory store does after close)."""
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(),
                    embedder=HashEmbedder())  # fmt: skip
    secret = KeyRing(engine.store).create(["ada"])[0]
    live = LiveServer(create_app(engine))
    try:
        assert httpx.get(f"{live.url}/readyz").json() == {"status": "ok"}
        engine.close()
        body = assert_error(httpx.get(f"{live.url}/readyz"), 503, "store_error")
        assert body["message"] == "the engine is closed: nothing was done"
        called = httpx.post(f"{live.url}/v1/memories", json={"content": "x y z"},
                            headers={"Authorization": f"Bearer {secret}"})  # fmt: skip
        assert assert_error(called, 503, "store_error")["message"] == body["message"]
        assert httpx.get(f"{live.url}/healthz").json() == {"status": "ok"}  # the process lives
    finally:
        live.stop()


# -- data paths -------------------------------------------------------------------------------


def test_pagination_walks_every_memory_once(tmp_path: Path) -> None:
    service = Service(tmp_path)
    try:
        for i in range(6):
            service.call("POST", "/v1/memories", "bob", json={"content": f"bob fact {i} " * 3})
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            params = {"limit": 4, **({"cursor": cursor} if cursor else {})}
            page = service.call("GET", "/v1/memories", "bob", params=params).json()
            seen += [m["id"] for m in page["memories"]]
            pages += 1
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages == 2
        assert sorted(seen) == sorted(m.id for m in service.engine.list("bob", limit=None))
        assert len(seen) == len(set(seen)) == 6
    finally:
        service.close()


def test_import_then_export_round_trip(tmp_path: Path) -> None:
    source = Service(tmp_path / "a")
    target = Service(tmp_path / "b")
    try:
        source.call(
            "POST",
            "/v1/ingest",
            "alice",
            json={"text": "I adopted a cat named Pixel in March; she hates rain."},
        )
        exported = source.call("GET", "/v1/export", "alice").content
        assert exported.count(b"\n") >= 2
        target.call("DELETE", f"/v1/memories/{target.alice_memory}", "alice")
        r = target.call("POST", "/v1/import", "alice", content=exported,
                        headers={"content-type": "application/x-ndjson"})  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["memories"] == exported.count(b"\n")
        assert target.call("GET", "/v1/export", "alice").content == exported
        # a record of a user the key does not hold: refused, nothing written
        stray = json.dumps({"type": "remember", "user_id": "bob", "content": "sneaky"})
        ok = json.dumps({"type": "remember", "user_id": "alice", "content": "fine"})
        assert_error(target.call("POST", "/v1/import", "alice",
                                 content=f"{ok}\n{stray}\n"), 403)  # fmt: skip
        assert_error(target.call("POST", "/v1/import", "alice", content=b"{oops\n"), 400)
        # nested past the JSON parser's depth: a 400 naming the line, not a 500 (s17 h8)
        deep = f"{ok}\n".encode() + b"[" * 100_000 + b"]" * 100_000 + b"\n"
        body = assert_error(target.call("POST", "/v1/import", "alice", content=deep), 400)
        assert body["message"] == "line 2: JSON nested too deeply"
        # bad JSON says why, and a number past Python's conversion limit is named as such
        # (both were "not a JSON object"; session 24, h3)
        body = assert_error(target.call("POST", "/v1/import", "alice", content=b"{oops\n"), 400)
        assert body["message"].startswith("line 1: invalid JSON: Expecting property name")
        huge = '{"type": "remember", "user_id": "alice", "importance": ' + "9" * 5_000 + "}"
        body = assert_error(target.call("POST", "/v1/import", "alice", content=huge), 400)
        assert body["message"] == "line 1: a number in the JSON has more than 4,300 digits"
        assert target.call("GET", "/v1/export", "alice").content == exported
    finally:
        source.close()
        target.close()


def test_an_import_refusal_names_the_line_of_the_body(svc: Service) -> None:
    """The engine counts records; a body has lines, blank ones too. Base said "record 2"
    of a body whose bad record is line 4, and a record of another user's named no line."""
    ok = json.dumps({"type": "remember", "user_id": "alice", "content": "imported fine"})
    bad = json.dumps({"type": "remember", "user_id": "alice", "content": "x", "kind": "rumour"})
    before = svc.engine.list("alice")
    body = f"{ok}\n\n\n{bad}\n".encode()
    error = assert_error(svc.call("POST", "/v1/import", "alice", content=body), 400)
    assert error["message"].startswith("line 4: kind: unknown kind 'rumour'")
    stray = json.dumps({"type": "remember", "user_id": "bob", "content": "sneaky"})
    error = assert_error(svc.call("POST", "/v1/import", "alice", content=f"{ok}\n\n{stray}\n"),
                         403)  # fmt: skip
    assert error["message"].startswith("line 3: API key ")
    assert svc.engine.list("alice") == before


def test_context_then_feedback(svc: Service) -> None:
    ctx = svc.call(
        "POST",
        "/v1/context",
        "alice",
        json={"message": "which mode do I keep notes in?", "token_budget": 500},
    )
    body = ctx.json()
    assert ctx.status_code == 200
    assert {"text", "context_id", "tokens", "budget", "memories"} <= set(body)
    assert body["budget"] == 500
    if body["memories"]:
        fb = svc.call(
            "POST",
            "/v1/feedback",
            "alice",
            json={"context_id": body["context_id"], "helpful": True},
        )
        assert fb.status_code == 200, fb.text
        assert set(fb.json()["usefulness"]) == {m["id"] for m in body["memories"]}


def test_pin_and_mute_flip_the_flags(svc: Service) -> None:
    path = f"/v1/memories/{svc.alice_memory}"
    assert svc.call("POST", path + "/mute", "alice").json()["muted"] is True
    assert svc.call("POST", path + "/mute", "alice", json={"value": False}).json()["muted"] is False
    assert svc.call("POST", path + "/pin", "alice", json={"value": True}).json()["pinned"] is True
    assert svc.engine.get(svc.alice_memory, "alice").pinned is True


# -- public endpoints ---------------------------------------------------------------------------


def test_health_metrics_and_openapi(svc: Service) -> None:
    assert svc.call("GET", "/healthz").json() == {"status": "ok"}
    assert svc.call("GET", "/readyz").json() == {"status": "ok"}
    svc.call("GET", "/v1/memories", "alice")
    text = svc.call("GET", "/metrics").text
    assert 'engrain_http_requests_total{method="GET",route="/v1/memories",status="200"}' in text
    assert "engrain_http_request_duration_seconds_bucket" in text
    assert svc.alice_memory not in text  # routes by template, never by id
    doc = svc.call("GET", "/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    op = doc["paths"]["/v1/context"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "ContextRequest"
    )
    assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "ContextOut"
    )
    for status in ("400", "401", "403", "413", "422", "503"):
        assert op["responses"][status]["content"]["application/json"]["schema"]["$ref"].endswith(
            "ErrorOut"
        )
    assert "HTTPBearer" in doc["components"]["securitySchemes"]


def test_a_query_parameter_given_twice_is_refused_and_writes_nothing(svc: Service) -> None:
    """FastAPI keeps the last of a repeated parameter without a word (base: this DELETE
    forgot bob's memory); none of the API's query parameters is a list, so a repeat is
    a 422, as the CLI refuses an option given twice."""
    bobs = svc.engine.remember("bob's build runs on Jenkins", "bob").memory_id
    assert bobs is not None
    path = f"/v1/memories/{bobs}"
    twice = [("user_id", "alice"), ("user_id", "bob")]
    body = assert_error(svc.call("DELETE", path, "alice+bob", params=twice), 422, "invalid_input")
    assert body["message"] == "query.user_id: given 2 times; give it once"
    assert svc.engine.get(bobs, "bob").content == "bob's build runs on Jenkins"
    for method, route in [("GET", "/v1/memories"), ("GET", "/v1/review"), ("GET", path),
                          ("GET", "/v1/export"), ("POST", f"{path}/pin")]:  # fmt: skip
        assert_error(svc.call(method, route, "alice+bob", params=twice), 422, "invalid_input")
    assert not svc.engine.get(bobs, "bob").pinned
    limits = [("user_id", "bob"), ("limit", "1"), ("limit", "1")]
    body = assert_error(svc.call("GET", "/v1/memories", "bob", params=limits), 422)
    assert body["message"] == "query.limit: given 2 times; give it once"
    once = svc.call("GET", "/v1/memories", "bob", params=[("user_id", "bob"), ("limit", "1")])
    assert [m["id"] for m in once.json()["memories"]] == [bobs]
    assert svc.call("GET", "/healthz", params=[("a", "1"), ("a", "2")]).status_code == 200
    svc.engine.forget([bobs], "bob")
