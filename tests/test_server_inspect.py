"""The inspector's reads and curation over HTTP (``routes_inspect.py``): each route answers
what the engine answers, a key acts only for its users (another user's memory is 404,
another user's queue 403), a project-limited key stays in its projects, a bad request is
422 (or the engine's 400) and writes nothing, and a preview writes nothing at all."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from engrain import Engine, wire
from engrain.embed import HashEmbedder
from engrain.keys import KeyRing
from engrain.server import create_app
from engrain.store import MemoryStore

from .conftest import NOW, make_settings

LATER = NOW + timedelta(hours=1)


class Inspected:
    """An app over a fresh engine: ada has a conflicting pair in project ``web`` and a
    memory in ``home``, bob one memory; keys for ada, bob, both, an admin and ada's
    ``web`` project only."""

    def __init__(self, tmp_path: Path) -> None:
        self.engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(),
                             embedder=HashEmbedder())  # fmt: skip
        ring = KeyRing(self.engine.store)
        self.keys = {u: ring.create([u])[0] for u in ("ada", "bob")}
        self.keys["ada+bob"] = ring.create(["ada", "bob"])[0]
        self.keys["admin"] = ring.create(admin=True)[0]
        self.keys["ada/web"] = ring.create(["ada"], projects=["web"])[0]
        self.old = self._id("The API listens on port 8080", "ada", "web", NOW)
        self.new = self._id("The API listens on port 9090", "ada", "web", LATER)
        self.home = self._id("The garden hose is in the shed", "ada", "home", NOW)
        self.bobs = self._id("bob drinks his coffee black", "bob", None, NOW)
        self.http = TestClient(create_app(self.engine, ring))

    def _id(self, content: str, user: str, project: str | None, now: Any) -> str:
        memory_id = self.engine.remember(content, user, project=project, now=now).memory_id
        assert memory_id is not None
        return memory_id

    def call(self, method: str, path: str, key: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.keys.get(key, key)}"}
        return self.http.request(method, path, headers=headers, **kw)

    def ok(self, method: str, path: str, key: str = "ada", **kw: Any) -> Any:
        r = self.call(method, path, key, **kw)
        assert r.status_code == 200, r.text
        return r.json()

    def snapshot(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "embedding"}
                for r in self.engine.export_records()]  # fmt: skip


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Inspected]:
    service = Inspected(tmp_path)
    yield service
    service.http.close()
    service.engine.close()


def _untimed(preview: dict[str, Any]) -> dict[str, Any]:
    return {**preview, "gated": {**preview["gated"], "timings_ms": None}}


def test_each_read_answers_what_the_engine_answers(svc: Inspected) -> None:
    e = svc.engine
    page = svc.ok("POST", "/v1/browse", json={"text": "port API", "limit": 5})
    assert page == wire.dump_page(e.browse("ada", text="port API", limit=5))
    assert page["sort"] == "relevance" and page["total"] == 2
    filtered = svc.ok("POST", "/v1/browse", json={"project": "home", "kinds": ["fact"]})
    assert [m["id"] for m in filtered["memories"]] == [svc.home]
    assert svc.ok("GET", f"/v1/memories/{svc.new}/relations") == wire.dump_relations(
        e.relations(svc.new, "ada")
    )
    review = svc.ok("GET", "/v1/review", params={"limit": 10})
    assert review == {"pairs": [wire.dump_flagged_pair(p) for p in e.review("ada", limit=10)]}
    assert [(p["first"]["id"], p["second"]["id"], p["reason"]) for p in review["pairs"]] == [
        (svc.new, svc.old, "conflict")
    ]
    e.context("which port does the API listen on?", "ada", project="web", now=LATER)
    contexts = svc.ok("GET", "/v1/contexts", params={"project": "web"})
    assert contexts == {"contexts": [wire.dump_context_record(c)
                                     for c in e.contexts("ada", project="web")]}  # fmt: skip
    body = {"message": "which port does the API listen on?", "token_budget": 400,
            "now": LATER.isoformat()}  # fmt: skip
    preview = svc.ok("POST", "/v1/preview", json=body)
    expected = e.preview(body["message"], "ada", token_budget=400, now=LATER)
    assert _untimed(preview) == _untimed(wire.dump_preview(expected))
    assert preview["memories"], "the preview holds the memories about the port"


def test_browse_pages_follow_the_cursor_to_the_end(svc: Inspected) -> None:
    seen: list[str] = []
    body: dict[str, Any] = {"limit": 1, "sort": "updated"}
    while True:
        page = svc.ok("POST", "/v1/browse", json=body)
        assert page["total"] == 3
        seen += [m["id"] for m in page["memories"]]
        if page["next_cursor"] is None:
            break
        body["cursor"] = page["next_cursor"]
    assert seen == [m.id for m in svc.engine.browse("ada", sort="updated").memories]
    assert len(seen) == 3
    wrong_order = {"limit": 1, "sort": "importance", "cursor": body["cursor"]}
    r = svc.call("POST", "/v1/browse", "ada", json=wrong_order)
    assert r.status_code == 400 and r.json()["error"] == "invalid_input"


def test_a_key_acts_only_for_its_own_users(svc: Inspected) -> None:
    before = svc.snapshot()
    for method, path, kw in [
        ("POST", "/v1/browse", {"json": {"user_id": "bob"}}),
        ("GET", "/v1/review", {"params": {"user_id": "bob"}}),
        ("GET", "/v1/contexts", {"params": {"user_id": "bob"}}),
        ("POST", "/v1/preview", {"json": {"message": "coffee?", "user_id": "bob"}}),
        ("GET", f"/v1/memories/{svc.bobs}/relations", {"params": {"user_id": "bob"}}),
        ("POST", "/v1/review/resolve", {"json": {"memory_id": svc.bobs, "other_id": svc.old,
                                                 "user_id": "bob", "resolution": "keep"}}),
    ]:  # fmt: skip
        assert svc.call(method, path, "ada", **kw).status_code == 403, path
    # bob's ids named for ada: unknown to her, exactly like missing ones
    r = svc.call("GET", f"/v1/memories/{svc.bobs}/relations", "ada")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    resolve = {"memory_id": svc.old, "other_id": svc.bobs, "resolution": "keep"}
    assert svc.call("POST", "/v1/review/resolve", "ada", json=resolve).status_code == 404
    assert svc.snapshot() == before
    assert svc.ok("POST", "/v1/browse", "bob")["total"] == 1
    assert svc.call("GET", "/v1/review", "egk_not-a-key").status_code == 401
    no_key = svc.http.get("/v1/users")
    assert no_key.status_code == 401


def test_users_lists_only_the_users_a_key_holds(svc: Inspected) -> None:
    assert svc.ok("GET", "/v1/users", "ada") == {"users": ["ada"]}
    assert svc.ok("GET", "/v1/users", "ada+bob") == {"users": ["ada", "bob"]}
    assert svc.ok("GET", "/v1/users", "admin") == {"users": svc.engine.users()}
    assert set(svc.engine.users()) == {"ada", "bob"}


def test_a_project_limited_key_stays_in_its_projects(svc: Inspected) -> None:
    before = svc.snapshot()
    page = svc.ok("POST", "/v1/browse", "ada/web", json={})
    assert {m["id"] for m in page["memories"]} == {svc.old, svc.new} and page["total"] == 2
    assert svc.ok("POST", "/v1/browse", "ada/web", json={"text": "garden hose"})["total"] == 0
    for body in ({"project": "home"}, {"projects": ["web", "home"]}):
        assert svc.call("POST", "/v1/browse", "ada/web", json=body).status_code == 403
    assert svc.call("GET", f"/v1/memories/{svc.home}/relations", "ada/web").status_code == 404
    resolve = {"memory_id": svc.new, "other_id": svc.home, "resolution": "keep"}
    assert svc.call("POST", "/v1/review/resolve", "ada/web", json=resolve).status_code == 404
    assert svc.call("GET", "/v1/contexts", "ada/web", params={"project": "home"}).status_code == 403
    preview = {"message": "where is the garden hose?", "project": "home"}
    assert svc.call("POST", "/v1/preview", "ada/web", json=preview).status_code == 403
    assert svc.snapshot() == before
    pairs = svc.ok("GET", "/v1/review", "ada/web")["pairs"]
    assert [(p["first"]["id"], p["second"]["id"]) for p in pairs] == [(svc.new, svc.old)]


def test_a_project_limited_key_sees_no_relation_outside_its_projects(svc: Inspected) -> None:
    svc.engine.resolve(svc.home, svc.old, "ada", "correct", now=LATER)  # across projects
    full = svc.ok("GET", f"/v1/memories/{svc.old}/relations", "ada")
    assert full["corrected_by"]["id"] == svc.home
    limited = svc.ok("GET", f"/v1/memories/{svc.old}/relations", "ada/web")
    assert limited["corrected_by"] is None
    assert [m["id"] for m in limited["conflicts"]] == [m["id"] for m in full["conflicts"]]


def test_resolve_makes_one_change_and_answers_what_it_did(svc: Inspected) -> None:
    body = {"memory_id": svc.new, "other_id": svc.old, "resolution": "keep"}
    assert svc.ok("POST", "/v1/review/resolve", "ada/web", json=body) == {
        "resolution": "keep", "kept": [svc.new], "forgotten": [svc.old], "superseded": []
    }  # fmt: skip
    assert [m.id for m in svc.engine.list("ada", project="web")] == [svc.new]
    assert svc.ok("GET", "/v1/review")["pairs"] == []
    again = svc.call("POST", "/v1/review/resolve", "ada", json=body)
    assert again.status_code == 404 and again.json()["error"] == "not_found"


def test_bad_requests_are_refused_and_write_nothing(svc: Inspected) -> None:
    before = svc.snapshot()
    for method, path, kw in [
        ("POST", "/v1/browse", {"json": {"sort": "random"}}),
        ("POST", "/v1/browse", {"json": {"limit": 0}}),
        ("POST", "/v1/browse", {"json": {"colour": "red"}}),
        ("POST", "/v1/browse", {"json": {"pinned": "yes"}}),
        ("POST", "/v1/browse", {"json": {"projects": []}}),
        ("GET", "/v1/review", {"params": {"limit": 0}}),
        ("GET", "/v1/contexts", {"params": {"limit": "many"}}),
        ("POST", "/v1/preview", {"json": {"message": "  "}}),
        ("POST", "/v1/review/resolve", {"json": {"memory_id": svc.new, "other_id": svc.old,
                                                 "resolution": "merge"}}),
        ("POST", "/v1/review/resolve", {"json": {"memory_id": svc.new, "other_id": svc.old}}),
    ]:  # fmt: skip
        r = svc.call(method, path, "ada", **kw)
        assert r.status_code == 422, (path, kw, r.text)
    same = {"memory_id": svc.new, "other_id": svc.new, "resolution": "both"}
    r = svc.call("POST", "/v1/review/resolve", "ada", json=same)
    assert r.status_code == 400 and r.json()["error"] == "invalid_input"
    r = svc.call("POST", "/v1/preview", "ada", json={"message": "hi", "model": "no-such-model"})
    assert r.status_code == 400 and r.json()["error"] == "unknown_value"  # the engine's refusal
    not_a_cursor = {"cursor": "bm90IGEgY3Vyc29y"}
    assert svc.call("POST", "/v1/browse", "ada", json=not_a_cursor).status_code == 400
    assert svc.snapshot() == before


def test_a_preview_writes_nothing(svc: Inspected) -> None:
    before = svc.snapshot()
    for body in ({"message": "which port does the API listen on?"},
                 {"message": "which port does the API listen on?", "model": "gpt-4o"},
                 {"message": "which port?", "context_window": 8000, "turn": 3}):  # fmt: skip
        svc.ok("POST", "/v1/preview", json=body)
    assert svc.snapshot() == before
    assert svc.engine.contexts("ada") == []
