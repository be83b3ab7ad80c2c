"""schemathesis against the live OpenAPI document: a server on loopback (uvicorn in a
thread, as in ``test_server.py``), the ``schemathesis run`` command in a subprocess reading
``/openapi.json`` from it, every check (``--checks all``), every phase (examples,
coverage, fuzzing, stateful), authenticated with a real API key. The run must report no
server error, no response outside its schema, no valid request refused and no invalid one
accepted.

``make test`` runs a bounded number of examples per operation (``SCHEMA_EXAMPLES``);
``make test-schema`` runs many more (``ENGRAIN_SCHEMA_EXAMPLES``, see docs/http-api.md).

This module is also the run's hooks module (``SCHEMATHESIS_HOOKS``): it teaches
schemathesis to send the NDJSON body of ``POST /v1/import`` as text, and leaves out the
requests the engine refuses for a model it does not know (:func:`refused_for_its_model`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine, validate
from engrain.embed import HashEmbedder
from engrain.errors import UnknownValueError, ValidationError
from engrain.keys import KeyRing
from engrain.server import create_app
from engrain.store import MemoryStore
from engrain.tiers import registry

from .conftest import make_settings
from .test_server import LiveServer

pytestmark = pytest.mark.filterwarnings("ignore::engrain.validate.UserIdWarning")

ROOT = Path(__file__).resolve().parent.parent

#: One check does not apply to two operations, and only that one is turned off, there:
#: ``POST /v1/import`` takes NDJSON text whose lines are records of five types checked by
#: the engine (``engrain/records.py``); a JSON Schema for a text body can say "a string"
#: but not which strings are records, so "a schema-valid body must be accepted" cannot
#: hold for it. Every other check runs on it (a 5xx, a response outside its schema, a
#: 405 without Allow, an accepted body of the wrong type would all fail the run).
CONFIG = """
[checks]
enabled = true  # every check, as `--checks all`

[[operations]]
include-path = "/v1/import"
checks.positive_data_acceptance.enabled = false

# the browse cursor is the engine's keyset cursor (base64 JSON): no schema can say which
# strings are valid ones, so a made-up cursor gets the engine's 400
[[operations]]
include-path = "/v1/browse"
checks.positive_data_acceptance.enabled = false
"""

#: The routes whose ``model`` the engine judges against the registry and the server's
#: ``model_windows`` setting, unless ``context_window`` or ``token_budget`` is given.
MODEL_ROUTES = ("/v1/context", "/v1/preview")


def refused_for_its_model(path: str, body: object) -> bool:
    """Whether the engine refuses ``body`` (schema-valid or not) for the one rule no JSON
    Schema can state: a model it does not know, alone. Which names it knows is the
    registry's normalising lookup (``GPT-4o``, ``openai/gpt-4o-2024-08-06``) plus a
    server's settings: the schema says "an id", and ``tests/test_server.py::
    test_the_engine_judges_the_model_as_in_python`` holds the rule itself."""
    if path not in MODEL_ROUTES or not isinstance(body, dict):
        return False
    model = body.get("model")
    if not isinstance(model, str) or body.get("context_window") or body.get("token_budget"):
        return False
    try:
        validate.identifier(model, "model")
    except ValidationError:
        return False  # the schema's own refusal: schemathesis checks it
    try:
        registry.context_window(model)
    except UnknownValueError:
        return True
    return False


def stored(url: str, secret: str) -> str:
    """A digest of everything the key's user has in the store: ``GET /v1/export``
    (memories with every field, the learned state documents, the recorded contexts)."""
    request = urllib.request.Request(
        f"{url}/v1/export", headers={"Authorization": f"Bearer {secret}"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return hashlib.sha256(answer.read()).hexdigest()


if os.environ.get("SCHEMATHESIS_HOOKS") == __name__:  # loaded by the schemathesis run
    import schemathesis as st

    st.serializer.alias("application/x-ndjson", "text/plain")
    _BEFORE: dict[str, str] = {}

    @st.hook
    def filter_case(context: object, case: Any) -> bool:
        """Leave out the cases :func:`refused_for_its_model` (the engine's 400)."""
        return not refused_for_its_model(case.operation.path, case.body)

    @st.hook
    def before_call(context: object, case: Any, kwargs: dict[str, Any]) -> None:
        """The store as it is before each request, for :func:`a_refusal_writes_nothing`."""
        _BEFORE["digest"] = stored(os.environ["ENGRAIN_SCHEMA_URL"],
                                   os.environ["ENGRAIN_SCHEMA_KEY"])  # fmt: skip

    @st.check
    def a_refusal_writes_nothing(ctx: object, response: Any, case: Any) -> None:
        """A 4xx answer left the store as it was (session 24, h3). The engine runs no
        background work here (``Live``), so any change is the refused request's."""
        if not 400 <= response.status_code < 500 or "digest" not in _BEFORE:
            return
        after = stored(os.environ["ENGRAIN_SCHEMA_URL"], os.environ["ENGRAIN_SCHEMA_KEY"])
        if after != _BEFORE["digest"]:
            raise AssertionError(f"a {response.status_code} answer changed the store")


#: Examples per operation and phase in ``make test`` (the run stays well under a minute).
SCHEMA_EXAMPLES = 15
#: A fixed seed: the bounded run is the same run every time; the long run varies it.
SEED = 20260115


def examples() -> int:
    """How many examples per operation: ``ENGRAIN_SCHEMA_EXAMPLES`` (``make test-schema``)
    or the bounded default."""
    return int(os.environ.get("ENGRAIN_SCHEMA_EXAMPLES", SCHEMA_EXAMPLES))


class Live:
    """A server over a fresh engine, a key for one user, and one memory of that user (so
    the routes naming an id have something to find)."""

    def __init__(self, tmp_path: Path) -> None:
        # nothing in the background (no compression, no tier compiled after a context), so
        # the store changes only within a request: what a_refusal_writes_nothing relies on
        self.engine = Engine(settings=make_settings(tmp_path, auto_compress=False,
                                                    force_tier3=True),
                             store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
        ring = KeyRing(self.engine.store)
        self.secret, _ = ring.create(["alice"])
        self.engine.remember("alice keeps her notes in org-mode", "alice", "preference")
        self.server = LiveServer(create_app(self.engine, ring))

    def close(self) -> None:
        self.server.stop()
        self.engine.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    service = Live(tmp_path)
    yield service
    service.close()


def schemathesis(live: Live, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``schemathesis run`` against the live server's own document, every check."""
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config),
        "run", f"{live.server.url}/openapi.json",
        "--header", f"Authorization: Bearer {live.secret}",
        "--max-examples", str(examples()),
        "--workers", "1",
        "--generation-database", "none",  # nothing learned carries over between runs
        "--no-color",
        "--output-sanitize", "false",  # show token_budget & co. in a failure (a test key)
        "--report", "junit", "--report-dir", str(tmp_path / "report"),
        *extra,
    ]  # fmt: skip
    if "ENGRAIN_SCHEMA_EXAMPLES" not in os.environ:
        command += ["--seed", str(SEED)]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": __name__,
        "ENGRAIN_SCHEMA_URL": live.server.url,
        "ENGRAIN_SCHEMA_KEY": live.secret,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(command, capture_output=True, text=True, timeout=3000, cwd=tmp_path,
                          env=env)  # fmt: skip


def test_schemathesis_finds_nothing(live: Live, tmp_path: Path) -> None:
    run = schemathesis(live, tmp_path)
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]


def test_a_stored_memory_links_to_every_route_taking_its_id(live: Live) -> None:
    """``POST /v1/memories`` links its answer's ``memory_id`` to each route of one memory
    (OpenAPI links), so the run's stateful phase works on memories it stored rather than
    on made-up ids only (session 24, h3); each link names an operation that is served."""
    document = create_app(live.engine).openapi()
    operations = {op["operationId"]: path for path, ops in document["paths"].items()
                  for op in ops.values()}  # fmt: skip
    links = document["paths"]["/v1/memories"]["post"]["responses"]["201"]["links"]
    linked = {operations[link["operationId"]] for link in links.values()}
    by_id = {path for path in document["paths"] if path.startswith("/v1/memories/{memory_id}")}
    assert linked == by_id
