"""The service docs say what the code does, checked in process so they cannot drift:
``docs/http-api.md``'s route tables are the app's OpenAPI routes (each with the query
parameters, answer fields and error statuses the doc names) and its examples answer as
printed; ``docs/mcp.md``'s tool table is the server's ``list_tools``; ``docs/api.md``'s
table has every public method of ``Engine`` and ``AsyncEngine`` with errors that exist and
an example that calls it; every ``engrain`` command and option a doc under ``docs/`` names
exists. The README's own checks are in
``tests/test_readme.py``."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient

from engrain import Engine, Settings, errors
from engrain.aio import AsyncEngine
from engrain.cli.app import cli
from engrain.client import Client
from engrain.embed import HashEmbedder
from engrain.keys import KeyRing
from engrain.mcp import build_server, fixed_user
from engrain.server import create_app
from engrain.store import MemoryStore

from .conftest import make_settings

DOCS = Path(__file__).resolve().parents[1] / "docs"
HTTP_API = (DOCS / "http-api.md").read_text()
#: ``engrain [-u U | --opt V …] COMMAND [SUB]`` in a code span (as tests/test_readme.py reads)
COMMAND = r"(?<![\w.\-/])engrain((?: -u \w+| --[\w-]+(?: \S+)?)*) ([a-z][\w-]*)( [a-z]+)?"
MCP = (DOCS / "mcp.md").read_text()
API = (DOCS / "api.md").read_text()


@dataclass(frozen=True)
class Row:
    """One route of a table of ``docs/http-api.md``: method, OpenAPI path, the answer cell."""

    method: str
    path: str
    answer: str
    line: str


def route_rows() -> list[Row]:
    """Every row of the doc's route tables; ``POST /v1/memories/{id}/pin``, ``/mute`` is
    two routes, and the doc's ``{id}`` is the schema's ``{memory_id}``."""
    rows = []
    for line in HTTP_API.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        found = re.fullmatch(r"`(GET|POST|PATCH|DELETE|PUT) (/\S*)`(.*)", cells[0])
        if not line.startswith("| `") or found is None:
            continue
        method, path = found.group(1), found.group(2).replace("{id}", "{memory_id}")
        paths = [path]
        for other in re.findall(r"`(/\w+)`", found.group(3)):  # `/mute`: the last segment
            paths.append(path.rsplit("/", 1)[0] + other)
        rows += [Row(method, p, cells[-1], line) for p in paths]
    return rows


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    """The HTTP app in process over a memory store, with a key for alice."""
    tmp = tmp_path_factory.mktemp("docs")
    engine = Engine(settings=make_settings(tmp), store=MemoryStore(), embedder=HashEmbedder())
    ring = KeyRing(engine.store)
    key = ring.create(["alice"])[0]
    engine.remember("How to indent this code: four spaces, never tabs", "alice", "preference")
    with TestClient(create_app(engine, ring)) as client:
        yield client, key
    engine.close()


@pytest.fixture(scope="module")
def openapi(served: tuple[TestClient, str]) -> dict[str, Any]:
    document: dict[str, Any] = served[0].get("/openapi.json").json()
    return document


def schema(openapi: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = openapi["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]
    return found


def test_the_route_tables_are_the_apps_routes(openapi: dict[str, Any]) -> None:
    documented = {(row.method, row.path) for row in route_rows()}
    served = {(m.upper(), p) for p, ops in openapi["paths"].items() for m in ops}
    assert len(documented) > 20, "the doc's route tables were not found"
    assert documented - served == set(), "documented, not served"
    assert served - documented == set(), "served, not documented"


def test_each_get_route_names_its_query_parameters(openapi: dict[str, Any]) -> None:
    missing = []
    for row in route_rows():
        operation = openapi["paths"].get(row.path, {}).get(row.method.lower(), {})
        for parameter in operation.get("parameters", []):  # a row not served: the test above
            name = parameter["name"]
            if parameter["in"] != "query" or name == "user_id":  # user_id: its own section
                continue
            if not re.search(rf"`\??{name}[`=]", row.line):
                missing.append(f"{row.method} {row.path}: {name}")
    assert missing == []


def test_each_answer_names_exactly_the_fields_the_route_returns(openapi: dict[str, Any]) -> None:
    """Where a row lists its answer's fields (`text`, `tokens`, …), they are the response
    model's properties, no more and no fewer (a body or filter list after them aside)."""
    wrong, checked = [], 0
    for row in route_rows():
        answer = re.split(r"; body|\(filters|, or \d{3}", row.answer)[0]
        named = set(re.findall(r"`([a-z_]+)`", answer))
        operation = openapi["paths"].get(row.path, {}).get(row.method.lower(), {})
        responses = operation.get("responses", {})
        content = responses.get("200", responses.get("201", {})).get("content", {})
        ref = content.get("application/json", {}).get("schema", {})
        if not named or "$ref" not in ref:
            continue
        checked += 1
        fields = set(schema(openapi, ref).get("properties", {}))
        if named != fields:
            wrong.append(f"{row.method} {row.path}: doc {sorted(named)}, served {sorted(fields)}")
    assert checked >= 10 and wrong == []


def test_the_error_table_holds_every_status_the_schema_declares(openapi: dict[str, Any]) -> None:
    table = HTTP_API.split("## Errors", 1)[1].split("###", 1)[0]
    documented = {int(s) for s in re.findall(r"^\| (\d{3}) \|", table, re.M)}
    declared = {
        int(status)
        for ops in openapi["paths"].values()
        for op in ops.values()
        for status in op["responses"]
        if int(status) >= 400
    }
    assert declared and declared - documented == set()


def test_the_examples_answer_as_printed(served: tuple[TestClient, str]) -> None:
    client, key = served
    auth = {"Authorization": f"Bearer {key}"}
    # the curl example at the top: the context route with only a message, for the key's user
    body = re.search(r"-d '(\{.*?\})'", HTTP_API)
    assert body is not None
    answer = client.post("/v1/context", headers=auth, json=json.loads(body.group(1)))
    assert answer.status_code == 200 and "four spaces" in answer.json()["text"]
    # the error shape, with the message of the doc's example
    example = re.search(r"```json\n(\{\"error\".*?\})\n```", HTTP_API, re.S)
    assert example is not None
    shown = json.loads(example.group(1))
    got = client.get("/v1/memories/x", headers=auth)
    assert got.status_code == shown["status"]
    assert set(got.json()) == set(shown)
    assert {k: got.json()[k] for k in ("error", "message")} == {
        k: shown[k] for k in ("error", "message")
    }
    # the routes that need no key, and one that does
    keyless = re.search(r"Every request except (.*?) needs", HTTP_API, re.S)
    assert keyless is not None
    for method, path in re.findall(r"`(?:(GET) )?(/[\w./]+)`", keyless.group(1)):
        assert client.request(method or "GET", path).status_code == 200, path
    assert client.post("/v1/context", json={"message": "x"}).status_code == 401


def test_the_mcp_tool_table_is_the_servers_tool_list(tmp_path: Path) -> None:
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())
    server = build_server(engine, fixed_user("ada"))
    tools = {tool.name: tool for tool in anyio.run(server.list_tools)}
    engine.close()
    table = MCP.split("## What the model gets", 1)[1].split("\n\n", 2)[1]
    documented = set()
    for line in table.splitlines()[2:]:
        documented |= set(re.findall(r"`(\w+)`", line.split("|")[1]))
    assert documented == set(tools)
    count = {"nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
    said = re.search(r"the (\w+) tools appear", MCP)
    assert said is not None and count[said.group(1)] == len(tools)
    # arguments the table names in its rows are the tool's arguments
    for line in table.splitlines()[2:]:
        name, *_, returns = (c.strip() for c in line.strip("|").split("|"))
        for argument in re.findall(r"\(`(\w+)`(?:, `(\w+)`)*\)", returns):
            for arg in filter(None, argument):
                tool = tools[re.findall(r"`(\w+)`", name)[0]]
                assert arg in tool.input_schema["properties"], (name, arg)


def test_every_engrain_command_a_doc_names_exists_with_its_options() -> None:
    named, unknown = 0, []
    for doc in sorted(DOCS.rglob("*.md")):
        text = doc.read_text()
        fenced = re.findall(r"```\w*\n(.*?)```", text, re.S)
        bare = re.sub(r"```\w*\n.*?```", "", text, flags=re.S)
        for span in [*re.findall(r"`([^`\n]+)`", bare), *"\n".join(fenced).splitlines()]:
            pattern = (
                r"(?<![\w.\-/])engrain((?: -u \w+| --[\w-]+(?: \S+)?)*) ([a-z][\w-]*)( [a-z]+)?"
            )
            for found in re.finditer(pattern, span):
                if re.search(r"\b(from|import) engrain", span[: found.end()]):
                    continue
                named += 1
                unknown += command_problems(found.group(2), (found.group(3) or "").strip(),
                                            span[found.end() :], doc.name)  # fmt: skip
    assert named > 30, "the docs name few engrain commands"
    assert unknown == []


#: Variables a shell example may use without setting them: the shell's own.
SHELL_VARIABLES = {"HOME", "PATH", "USER", "PWD"}


def test_a_shell_example_sets_what_it_uses_and_serves_in_the_background() -> None:
    """Each ``sh``/``bash``/``console`` example of the README and ``docs/`` runs as written,
    top to bottom, in a new shell: every ``$VAR`` it reads was set earlier in the page (or
    is the shell's own, or an ``ENGRAIN_*`` setting), and an ``engrain serve`` that more
    commands follow is started with ``&``. ``docs/http-api.md``'s first example curled with
    a ``$KEY`` nothing set, after an ``engrain serve`` that never returns (session 24,
    h3)."""
    problems, examples = [], 0
    for page in [DOCS.parent / "README.md", *sorted(DOCS.rglob("*.md"))]:
        assigned: set[str] = set()
        for body in re.findall(r"```(?:sh|bash|console|shell)\n(.*?)```", page.read_text(), re.S):
            examples += 1
            lines = [line.removeprefix("$ ").split(" #")[0].strip() for line in body.splitlines()]
            lines = [line for line in lines if line]
            for number, line in enumerate(lines):
                used = re.findall(r"\$\{?([A-Za-z_]\w*)", line)
                for name in used:
                    if name not in assigned | SHELL_VARIABLES and not name.startswith("ENGRAIN_"):
                        problems.append(f"{page.name}: ${name} is never set: {line}")
                assigned |= set(re.findall(r"(?:^|[\s;(&|])([A-Za-z_]\w*)=", line))
                serves = re.search(r"(?<![\w-])engrain serve\b", line)
                continued = line.endswith("\\")
                if serves and not line.endswith("&") and not continued and number < len(lines) - 1:
                    problems.append(f"{page.name}: engrain serve blocks what follows: {line}")
    assert examples > 10, "the shell examples were not found"
    assert problems == []


def command_problems(name: str, sub: str, rest: str, where: str) -> list[str]:
    """What of ``engrain NAME [SUB] --options…`` the CLI does not have."""
    command = cli.commands.get(name)
    if command is None:
        return [f"{where}: engrain {name}"]
    group = getattr(command, "commands", None)
    if group is not None and sub:
        if sub not in group:
            return [f"{where}: engrain {name} {sub}"]
        command = group[sub]
    params = [*command.params, *cli.params]
    flags = {
        o for p in params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]
    }
    options = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest.split("#")[0])
    return [f"{where}: engrain {name} {option}" for option in options if option not in flags]


def test_the_inspector_pages_the_doc_lists_are_served(served: tuple[TestClient, str]) -> None:
    """Each page of ``docs/inspector.md``'s table asks a visitor without a session to sign
    in (an unknown ``/ui`` path is 404), and a signed-in one gets the page."""
    client, key = served
    text = (DOCS / "inspector.md").read_text()
    pages = re.findall(r"^\| \*\*[^*]+\*\* `(/ui/[\w/]+)`", text, re.M)
    assert len(pages) >= 5, "the inspector's page table was not found"
    with TestClient(client.app) as visitor:
        assert visitor.get("/ui/no-such-page", follow_redirects=False).status_code == 404
        for page in pages:
            answer = visitor.get(page, follow_redirects=False)
            assert answer.status_code == 303, page
            assert answer.headers["location"].endswith(f"/ui/signin?next={page}")
        signed = visitor.post("/ui/signin", data={"key": key}, follow_redirects=False)
        assert signed.status_code == 303
        for page in pages:
            assert visitor.get(page).status_code == 200, page


def test_the_proxy_settings_table_is_the_serve_flags_and_the_settings() -> None:
    table = (DOCS / "proxy.md").read_text().split("## Settings", 1)[1].split("\n\n")[2]
    serve = cli.commands["serve"]
    flags = {o for p in serve.params for o in getattr(p, "opts", []) + p.secondary_opts}
    rows = [line for line in table.splitlines()[2:] if line.startswith("| `--")]
    assert len(rows) == 5
    for row in rows:
        cells = re.split(r"(?<!\\)\|", row.strip("|"))  # `system\|append` is one cell
        flag_cell, setting_cell, default_cell = (c.strip() for c in cells)
        assert set(re.findall(r"--[\w-]+", flag_cell)) <= flags, flag_cell
        setting = re.findall(r"`(\w+)`", setting_cell)[0]
        default = Settings.model_fields[setting].default
        shown = {None: "none", True: "record"}.get(default, default)
        assert str(shown).removesuffix(".0") in default_cell, (setting, default)


def test_the_readmes_engine_and_client_signatures_are_the_constructors() -> None:
    """``Engine(url=None, *, settings=None, …)`` and ``Client(url, api_key)`` as the README
    prints them name the constructors' parameters, in order."""
    readme = (DOCS.parent / "README.md").read_text()
    shown = re.search(r"`Engine\((url=None, \*, [^)]*)\)`", readme)
    assert shown is not None, "the README does not print Engine's signature"
    names = [part.split("=")[0].strip() for part in shown.group(1).split(",") if "*" not in part]
    assert names == [p for p in inspect.signature(Engine).parameters]
    client = re.search(r"`Client\((url, api_key)\)`", readme)
    required = [
        p.name
        for p in inspect.signature(Client).parameters.values()
        if p.default is inspect.Parameter.empty
    ]
    assert client is not None and required == ["url", "api_key"]


def api_rows() -> dict[str, list[str]]:
    """``docs/api.md``'s table by method name: its cells (call, does, raises, example)."""
    rows = {}
    for line in API.splitlines():
        found = re.match(r"\| `(\w+)\(", line)
        if found:
            rows[found.group(1)] = [c.strip() for c in line.strip().strip("|").split("|")]
    return rows


def test_every_public_method_has_its_errors_and_an_example() -> None:
    """A reviewer's table: each public call of ``Engine`` and ``AsyncEngine`` (twins) says
    what it does, names only errors of the tree, and shows a line of Python that calls it."""
    rows = api_rows()
    public = {n for cls in (Engine, AsyncEngine) for n, f in vars(cls).items()
              if not n.startswith("_") and inspect.isfunction(f)}  # fmt: skip
    assert sorted(public - rows.keys()) == [], "public methods without a row in docs/api.md"
    assert sorted(rows.keys() - public) == [], "rows of docs/api.md for no method"
    tree = {n for n, c in vars(errors).items() if isinstance(c, type)
            and issubclass(c, errors.EngrainError)}  # fmt: skip
    for name, (_call, does, raises, example) in rows.items():
        assert does, name
        named = set(re.findall(r"`(\w+Error)`", raises))
        assert named <= tree, f"{name}: {sorted(named - tree)} are not engrain errors"
        assert named or raises.startswith("nothing"), f"{name}: its row names no error"
        [code] = re.findall(r"`([^`]+)`", example)
        assert re.search(rf"\b(engine|await engine)\.{name}\(", code), f"{name}: {code}"
        ast.parse(code)  # a line of Python as written


@pytest.mark.parametrize(("module", "doc"), [
    ("engrain.server", "http-api.md"), ("engrain.mcp", "mcp.md"),
    ("engrain.client", "client.md"), ("engrain.server.proxy", "proxy.md"),
])  # fmt: skip
def test_every_name_a_service_package_exports_is_in_its_doc(module: str, doc: str) -> None:
    """Each public name of the service packages is named in a code span of its page (base:
    engrain.mcp's serve_stdio, key_user, request_key, MCPApp, Resolver and EngrainMCP, the
    client's Records, the proxy's install and MCP_PATH were in no doc)."""
    text = (DOCS / doc).read_text()
    blocks = re.findall(r"```.*?```", text, flags=re.S)
    spans = blocks + re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    exported = importlib.import_module(module).__all__

    def named(name: str) -> bool:  # as code: called, an attribute, or the whole span
        return any(re.search(rf"(?<![\w-]){name}(?=[(.,)\]]|$)", s, re.M) for s in spans)

    missing = [n for n in exported if not named(n)]
    assert not missing, f"{module} exports {missing}, which docs/{doc} does not name"
