"""``/metrics`` labels every request by the template of the route that answered it — the
API's, the inspector's pages under ``/ui`` (they once counted as ``/memories``, without
the mount's path, and its static files and ``/ui`` itself as ``<unmatched>``), the
OpenAPI document and MCP — so a dashboard can tell them apart and ids never become
series; only a path no route serves is ``<unmatched>``."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from starlette.testclient import TestClient

from engrain.server.app import serve_app
from engrain.server.ui import ROUTERS, UI_PATH

from .test_server import make_engine

_PARAM = re.compile(r"\{[^}]+\}")
#: Routes outside the OpenAPI document and the inspector's page routers, with a path to ask.
OTHERS = {
    "/metrics": "/metrics",
    "/docs": "/docs",
    "/openapi.json": "/openapi.json",
    "/ui": "/ui",
    "/ui/static/{path}": "/ui/static/inspector.css",
    "/mcp": "/mcp",
}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    engine = make_engine(tmp_path_factory.mktemp("metrics"))
    with TestClient(serve_app(engine)) as test_client:
        yield test_client
    engine.close()


def _labels(client: TestClient) -> set[tuple[str, str]]:
    text = client.get("/metrics").text
    return set(re.findall(r'engrain_http_requests_total\{method="(\w+)",route="([^"]*)"', text))


def _routes(client: TestClient) -> list[tuple[str, str]]:
    """(method, template) of every route a user can reach."""
    app = client.app
    found = [
        (method.upper(), template)
        for template, operations in app.openapi()["paths"].items()  # type: ignore[attr-defined]
        for method in operations
    ]
    for router in ROUTERS:
        for route in router.routes:
            for method in sorted(getattr(route, "methods", None) or ()):
                found.append((method, UI_PATH + route.path_format))  # type: ignore[attr-defined]
    found += [("GET", template) for template in OTHERS]
    return found


def test_every_route_is_labelled_by_its_template(client: TestClient) -> None:
    routes = _routes(client)
    assert ("GET", "/ui/memories/{memory_id}") in routes and len(routes) > 40
    for method, template in routes:
        path = OTHERS.get(template) or _PARAM.sub("x1", template)
        client.request(method, path, follow_redirects=False)
    labels = _labels(client)
    missing = [(m, t) for m, t in routes if (m, t) not in labels]
    assert not missing
    assert not any(route == "<unmatched>" for _, route in labels)
    assert not any("x1" in route for _, route in labels)  # templates, never raw paths


def test_a_path_no_route_serves_is_unmatched(client: TestClient) -> None:
    for path in ("/nope", "/ui/nope", "/v2/memories"):
        assert client.get(path).status_code == 404
    assert ("GET", "<unmatched>") in _labels(client)


def test_a_wrong_method_is_labelled_by_the_route_it_reached(client: TestClient) -> None:
    assert client.request("PUT", "/v1/context").status_code == 405
    assert ("PUT", "/v1/context") in _labels(client)


def test_memory_ids_in_the_inspector_s_paths_are_not_series(client: TestClient) -> None:
    for memory_id in ("a1", "b2", "notes/2024"):
        client.get(f"/ui/memories/{memory_id}", follow_redirects=False)
    labels = {route for _, route in _labels(client)}
    assert "/ui/memories/{memory_id}" in labels
    assert not any("a1" in route or "2024" in route for route in labels)


def test_the_ui_path_redirects_to_the_mount(client: TestClient) -> None:
    answer = client.get("/ui", follow_redirects=False)
    assert answer.status_code == 307 and answer.headers["location"].endswith("/ui/")
