"""The conversation's turn before the message (``previous``, issue 12): the rule that decides
when it is used (``recall/previous.py``), the engine (a continuation finds the earlier turn's
subject, a self-contained message is answered exactly as without it, bad input is refused
and writes nothing), and every layer that passes it: ``AsyncEngine``, HTTP ``/v1/context``
and ``/v1/explain`` (``httpx``, and the HTTP client), MCP's tools (the SDK's
``ClientSession``), the CLI and the proxy (the ``openai`` SDK, the user turn before the
latest)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest

from engrain import AsyncEngine, Engine
from engrain.client import Client
from engrain.embed import HashEmbedder
from engrain.errors import EmptyInputError, InputTooLargeError, ValidationError
from engrain.keys import KeyRing
from engrain.recall.classify import classify
from engrain.recall.gate import GateOptions
from engrain.recall.previous import joined_text, joined_vector, reading
from engrain.server import create_app
from engrain.server.proxy.inject import parse
from engrain.store import MemoryStore

from .aio import run_async
from .conftest import make_settings
from .test_cli import Invoke, invoke, json_lines, ok  # noqa: F401  (fixtures)
from .test_mcp import Live, live  # noqa: F401  (the live MCP server fixture)
from .test_mcp import ok as tool_ok
from .test_proxy import Proxied
from .test_server import LiveServer

SECRET = "The Stripe webhook signing secret lives in AWS Secrets Manager under ledgerly/prod."
PDF = "Invoices are rendered to PDF with WeasyPrint in the pdf worker."
MEMORIES = [
    (SECRET, "fact"),
    ("The coffee machine on the third floor needs descaling every Friday.", "fact"),
    (PDF, "fact"),
    ("Deploys go through Argo CD: merging to main deploys staging.", "decision"),
    ("Celery queues: default, billing, webhooks and emails.", "fact"),
    ("Marta owns payments and Jonas owns infrastructure.", "context"),
]
BEFORE = "Where does the Stripe webhook signing secret live?"
FOLLOW_UP = "and how is it rotated?"
OWN_SUBJECT = "Which tool renders the invoice PDFs?"
NEW_TOPIC = "unrelated, but which tool renders the invoice PDFs?"


def engine_with_memories(tmp_path: Path, user: str = "u") -> Engine:
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(),
                    embedder=HashEmbedder())  # fmt: skip
    remember(engine, user)
    return engine


def remember(engine: Engine, user: str) -> None:
    for content, kind in MEMORIES:
        engine.remember(content, user, kind)


def contents(found: Any) -> list[str]:
    return [m.content for m in found.memories]


# -- the rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "used", "reason"),
    [
        ("and the refresh ones?", True, "a continuation"),
        ("good, now the tests for it", True, "a continuation"),
        ("what if the gateway was offline for two weeks though", True, "a continuation"),
        ("which box do I run it on?", True, "a short follow-up pointing back"),
        ("what's its URL?", True, "a short follow-up pointing back"),
        ("on the login node?", True, "a fragment continuing the question"),
        ("Which tool renders the invoice PDFs?", False, "self-contained"),
        ("How do I restart the billing worker after a deploy?", False, "self-contained"),
        ("unrelated, but who owns infrastructure here?", False, "opens a new topic"),
        ("Different question: which Stripe API version do we pin?", False, "opens a new topic"),
        ("by the way, what time is the demo on Friday?", False, "opens a new topic"),
        ("never mind that, who owns the Grafana dashboards?", False, "opens a new topic"),
        ("hm, and if the self-test fails twice in a row?", True, "a continuation"),
        ("is that enough for 16 workers?", True, "a continuation"),  # the classifier's anaphor
        ("do we still use exact alarms there?", True, "a short follow-up pointing back"),
        ("where does the app read that from?", True, "a short follow-up pointing back"),
        # a relative "that", an expletive "it", a pronoun in a message naming its subject
        ("Write a hook that returns the current streak for a habit", False, "self-contained"),
        ("Who gets paged when one of the billing monitors fires?", False, "self-contained"),
        ("Should 3.0 keep reading config.yaml or finally drop it?", False, "self-contained"),
        ("hi there", False, "a greeting"),
        ("Separate thing: what's the current champion model's WAPE?", False, "opens a new topic"),
        # long enough to name its own subject, though it says "it"
        ("Can you explain how the invoice numbering works for German customers and why it "
         "needs a counter table per account?", False, "self-contained"),
    ],
)  # fmt: skip
def test_reading_uses_the_previous_turn_only_where_the_message_leans_on_it(
    message: str, used: bool, reason: str
) -> None:
    read = reading(message, classify(message, turn=1))
    assert (read.used, read.reason) == (used, reason)
    assert read.note().startswith("previous turn used" if used else "previous turn not used")


def test_previous_weight_is_within_0_and_1_and_0_turns_the_lending_off(tmp_path: Path) -> None:
    for bad in (-0.1, 1.5):
        with pytest.raises(ValidationError, match="previous_weight"):
            GateOptions(previous_weight=bad)
    engine = engine_with_memories(tmp_path)
    off = engine.options.update(previous_weight=0.0)
    assert SECRET not in contents(engine.context(FOLLOW_UP, "u", previous=BEFORE, options=off))
    half = engine.options.update(previous_weight=0.5)
    assert SECRET in contents(engine.context(FOLLOW_UP, "u", previous=BEFORE, options=half))


def test_joined_vector_weighs_both_turns_the_same_and_is_a_unit_vector() -> None:
    message = np.array([3.0, 0.0, 0.0], dtype=np.float32)
    previous = np.array([0.0, 0.5, 0.0], dtype=np.float32)
    joined = joined_vector(message, previous)
    assert joined.dtype == np.float32
    assert float(np.linalg.norm(joined)) == pytest.approx(1.0)
    assert joined[0] == pytest.approx(joined[1])  # lengths do not matter, directions do
    zero = np.zeros(3, dtype=np.float32)
    assert np.allclose(joined_vector(message, zero), [1.0, 0.0, 0.0])
    assert joined_text("and it?", "the secret") == "the secret\nand it?"


# -- the engine ----------------------------------------------------------------------------


def test_a_continuation_finds_the_previous_turns_subject(tmp_path: Path) -> None:
    engine = engine_with_memories(tmp_path)
    alone = engine.context(FOLLOW_UP, "u", turn=1)
    assert SECRET not in contents(alone)
    found = engine.context(FOLLOW_UP, "u", previous=BEFORE)
    assert SECRET in contents(found)
    gated = engine.explain(FOLLOW_UP, "u", previous=BEFORE)
    assert gated.classification.intent.value == "continuation"
    assert gated.classification.turn == 1  # a previous turn means a turn before
    assert any(s.startswith("previous turn used (a continuation)")
               for s in gated.to_dict()["classification"]["signals"])  # fmt: skip
    assert "previous turn" in gated.timings_ms
    previewed = engine.preview(FOLLOW_UP, "u", previous=BEFORE)
    assert SECRET in contents(previewed)


@pytest.mark.parametrize("message", [OWN_SUBJECT, NEW_TOPIC])
def test_a_self_contained_message_is_answered_as_without_previous(
    tmp_path: Path, message: str
) -> None:
    engine = engine_with_memories(tmp_path)
    now = datetime.now(UTC)  # one moment for both: recency is the same
    plain = engine.explain(message, "u", turn=1, now=now)
    given = engine.explain(message, "u", turn=1, previous=BEFORE, now=now)
    assert contents(given) == contents(plain) == [PDF]
    assert given.text == plain.text
    assert [(d.item.memory.id, d.item.score, d.reason) for d in given.decisions] == [
        (d.item.memory.id, d.item.score, d.reason) for d in plain.decisions
    ]
    assert given.classification.signals[:-1] == plain.classification.signals
    assert given.classification.signals[-1].startswith("previous turn not used")
    assert given.budget == plain.budget


@pytest.mark.parametrize(
    ("previous", "error"),
    [(3, ValidationError), (["a"], ValidationError), ("   ", EmptyInputError),
     ("x" * 10_001, InputTooLargeError)],
)  # fmt: skip
def test_bad_previous_is_refused_and_writes_nothing(
    tmp_path: Path, previous: object, error: type[Exception]
) -> None:
    engine = Engine(settings=make_settings(tmp_path, max_text_chars=10_000),
                    store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
    remember(engine, "u")
    before = {m.id: m.access_count for m in engine.list("u")}
    for call in (engine.context, engine.explain):
        with pytest.raises(error, match="previous"):
            call(FOLLOW_UP, "u", previous=previous)  # type: ignore[operator]
    assert {m.id: m.access_count for m in engine.list("u")} == before
    assert engine.contexts("u") == []


def test_async_engine_passes_previous(tmp_path: Path) -> None:
    async def main() -> list[str]:
        async with AsyncEngine(settings=make_settings(tmp_path), store=MemoryStore(),
                               embedder=HashEmbedder()) as aio:  # fmt: skip
            remember(aio.sync, "u")
            gated = await aio.explain(FOLLOW_UP, "u", previous=BEFORE)
            assert gated.classification.signals[-1].startswith("previous turn used")
            return contents(await aio.context(FOLLOW_UP, "u", previous=BEFORE))

    assert SECRET in run_async(main())


# -- HTTP, the client, MCP, the CLI ----------------------------------------------------------


@pytest.fixture
def http(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A live server over the memories: its URL and a key for user ``u``."""
    engine = engine_with_memories(tmp_path)
    ring = KeyRing(engine.store)
    key = ring.create(["u"])[0]
    server = LiveServer(create_app(engine, ring))
    yield server.url, key
    server.stop()
    engine.close()


def test_http_context_and_explain_take_previous(http: tuple[str, str]) -> None:
    url, key = http
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:
        alone = client.post("/v1/context", json={"message": FOLLOW_UP, "turn": 1}).json()
        body = {"message": FOLLOW_UP, "previous": BEFORE}
        found = client.post("/v1/context", json=body).json()
        assert SECRET not in alone["text"] and SECRET in found["text"]
        why = client.post("/v1/explain", json=body).json()
        assert any(s.startswith("previous turn used") for s in why["classification"]["signals"])
        for bad in ("", 7):
            refused = client.post("/v1/context", json={"message": FOLLOW_UP, "previous": bad})
            assert refused.status_code == 422 and "previous" in refused.text
        openapi = client.get("/openapi.json").json()["components"]["schemas"]
        assert "previous" in openapi["ContextRequest"]["properties"]
        assert "previous" in openapi["ExplainRequest"]["properties"]


def test_the_http_client_passes_previous(http: tuple[str, str]) -> None:
    url, key = http
    with Client(url, api_key=key) as client:
        assert SECRET in client.context(FOLLOW_UP, "u", previous=BEFORE).text
        assert SECRET in client.preview(FOLLOW_UP, "u", previous=BEFORE).text
        gated = client.explain(FOLLOW_UP, "u", previous=BEFORE)
        assert any(s.startswith("previous turn used") for s in gated.classification.signals)
        with pytest.raises(EmptyInputError):
            client.context(FOLLOW_UP, "u", previous=" ")


def test_mcp_context_and_explain_take_previous(live: Live) -> None:  # noqa: F811
    async def main() -> None:
        async with live.session("alice") as s:
            for content, kind in MEMORIES:
                tool_ok(await s.call_tool("remember", {"content": content, "kind": kind}))
            alone = tool_ok(await s.call_tool("context", {"message": FOLLOW_UP}))
            args = {"message": FOLLOW_UP, "previous": BEFORE}
            found = tool_ok(await s.call_tool("context", args))
            assert SECRET not in alone["text"] and SECRET in found["text"]
            why = tool_ok(await s.call_tool("explain", args))
            signals = why["explanation"]["classification"]["signals"]
            assert any(s.startswith("previous turn used") for s in signals)

    anyio.run(main)


def test_cli_previous(invoke: Invoke) -> None:  # noqa: F811
    for content, kind in MEMORIES:
        ok(invoke("--user", "u", "remember", content, "--kind", kind))
    assert SECRET not in ok(invoke("--user", "u", "context", FOLLOW_UP)).stdout
    shown = ok(invoke("--user", "u", "context", FOLLOW_UP, "--previous", BEFORE)).stdout
    assert SECRET in shown
    report = json_lines(invoke("--user", "u", "--json", "explain", FOLLOW_UP,
                               "--previous", BEFORE))[0]  # fmt: skip
    assert any(s.startswith("previous turn used") for s in report["classification"]["signals"])


# -- the proxy -----------------------------------------------------------------------------


def test_parse_takes_the_user_turn_before_the_latest() -> None:
    history = [{"role": "system", "content": "be brief"},
               {"role": "user", "content": [{"type": "text", "text": BEFORE}]},
               {"role": "assistant", "content": "In AWS Secrets Manager."},
               {"role": "user", "content": FOLLOW_UP}]  # fmt: skip
    later = parse(json.dumps({"model": "m", "messages": history}).encode())
    assert (later.message, later.previous, later.turn) == (FOLLOW_UP, BEFORE, 1)
    first = parse(json.dumps({"model": "m", "messages": history[:2]}).encode())
    assert first.previous is None
    blank = [*history[:1], {"role": "user", "content": "  "}, *history[2:]]
    assert parse(json.dumps({"messages": blank}).encode()).previous is None


def test_the_proxy_searches_a_continuation_with_the_turn_before(tmp_path: Path) -> None:
    px = Proxied(tmp_path)
    try:
        remember(px.engine, "frank")
        messages = [{"role": "user", "content": BEFORE},
                    {"role": "assistant", "content": "In AWS Secrets Manager."},
                    {"role": "user", "content": FOLLOW_UP}]  # fmt: skip
        px.client("frank").chat.completions.create(
            model="gpt-4o", messages=messages, extra_headers={"X-Engrain-Record": "false"}
        )
        sent = px.upstream.last()["body"]["messages"]
        assert sent[0]["role"] == "system" and SECRET in sent[0]["content"]
        assert sent[1:] == messages
        # the latest message alone would not have found it
        assert SECRET not in contents(px.engine.context(FOLLOW_UP, "frank", turn=1))
    finally:
        px.close()


def test_the_proxy_leaves_out_a_previous_turn_too_long_to_search(tmp_path: Path) -> None:
    px = Proxied(tmp_path)
    try:
        remember(px.engine, "frank")
        long = "word " * (px.engine.settings.max_text_chars // 5 + 1)
        reply = px.client("frank").chat.completions.with_raw_response.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": long}, {"role": "user", "content": OWN_SUBJECT}],
            extra_headers={"X-Engrain-Record": "false"},
        )
        assert reply.headers["x-engrain-memory"] == "injected"  # not "unavailable"
        assert PDF in px.upstream.last()["body"]["messages"][0]["content"]
    finally:
        px.close()
