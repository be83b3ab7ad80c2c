"""The OpenAI-compatible proxy through real HTTP on loopback, with the real ``openai`` SDK
(sync, async, streaming) as the client and a fake upstream (a FastAPI app under uvicorn in
a thread) that records every request it receives and answers canned completions.

What a user would notice: the block lands where configured and nothing else in the
request changes; trivial messages inject nothing; a small model gets the compiled tier 1;
an exchange is recorded once and found by the next request; memory failures, upstream
errors and timeouts; both auth modes; one user's key never reaches another's memory; the
upstream key never shows in a response or a log line.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import ConfigError, StoreError
from engrain.keys import KeyRing
from engrain.server import create_app
from engrain.server.proxy import ProxyConfig
from engrain.server.proxy.inject import parse, with_memory
from engrain.server.proxy.record import AnswerReader, Exchange, Recorder
from engrain.store import MemoryStore
from engrain.tiers.cache import wrap
from engrain.tiers.registry import Tier

from .aio import run_async
from .conftest import make_settings
from .test_server import LiveServer

UPSTREAM_KEY = "sk-upstream-" + secrets.token_urlsafe(24)
ANSWER = "Helix it is: modal editing with tree-sitter built in."
SYSTEM = "You are a terse assistant."


class FakeUpstream:
    """An OpenAI-compatible endpoint that records what it receives. ``status`` and
    ``error`` make it fail; ``hold`` makes it wait (for the timeout test) until released."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.status = 200
        self.error: dict[str, Any] = {}
        self.answer = ANSWER
        self.hold: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.cut: int | None = None  # a stream ends cleanly after this many pieces
        self.reply_headers: list[tuple[bytes, bytes]] = []  # added to every reply, raw
        app = FastAPI()
        app.add_api_route("/v1/chat/completions", self.chat, methods=["POST"])
        app.add_api_route("/v1/models", self.models, methods=["GET"])
        self.live = LiveServer(app)
        self.url = self.live.url + "/v1"

    async def chat(self, request: Request) -> Response:
        raw = await request.body()
        self.received.append({"headers": dict(request.headers), "raw": raw,
                              "body": json.loads(raw)})  # fmt: skip
        self.loop = asyncio.get_running_loop()
        if self.hold is not None:
            await asyncio.wait_for(self.hold.wait(), 30)  # released by the test
        if self.status != 200:
            return JSONResponse(self.error, self.status, headers={"x-request-id": "up-err"})
        body = json.loads(raw)
        reply: Response
        if body.get("stream"):
            reply = StreamingResponse(self._events(body["model"]), media_type="text/event-stream",
                                      headers={"x-request-id": "up-1"})  # fmt: skip
        else:
            reply = JSONResponse(self._completion(body["model"]), headers={"x-request-id": "up-1"})
        reply.raw_headers.extend(self.reply_headers)
        return reply

    def _completion(self, model: str) -> dict[str, Any]:
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000,
                "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": self.answer}}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 9,
                          "total_tokens": 18}}  # fmt: skip

    async def _events(self, model: str) -> AsyncIterator[bytes]:
        words = self.answer.split(" ")
        for i, word in enumerate(words):
            if i == self.cut:
                return  # closed cleanly, mid-answer: no finish_reason, no [DONE]
            piece = word if i == 0 else " " + word
            chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                     "created": 1700000000, "model": model,
                     "choices": [{"index": 0, "delta": {"content": piece},
                                  "finish_reason": None}]}  # fmt: skip
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": "fake-small", "object": "model", "created": 0, "owned_by": "test"},
            {"id": "fake-large", "object": "model", "created": 0, "owned_by": "test"}]}  # fmt: skip

    def release(self) -> None:
        if self.hold is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self.hold.set)

    def last(self) -> dict[str, Any]:
        return self.received[-1]


class Proxied:
    """A live engrain server with the proxy in front of a live fake upstream."""

    def __init__(self, tmp_path: Path) -> None:
        self.upstream = FakeUpstream()
        settings = make_settings(tmp_path, model_windows={"house-model": 4_096})
        self.engine = Engine(settings=settings, store=MemoryStore(), embedder=HashEmbedder())
        self.ring = KeyRing(self.engine.store)
        self.keys = {u: self.ring.create([u])[0] for u in ("alice", "bob", "carol", "dave",
                                                            "erin", "frank")}  # fmt: skip
        self.keys["admin"] = self.ring.create(admin=True)[0]
        self.servers: list[LiveServer] = []
        self.apps: list[Any] = []
        self.url = self.serve()
        self.engine.remember("my favourite code editor is helix, with its modal editing",
                             "alice", "preference")  # fmt: skip

    def serve(self, **proxy: Any) -> str:
        """A proxy server over the same engine; its OpenAI base URL."""
        config = ProxyConfig(**{"upstream": self.upstream.url, "upstream_key": UPSTREAM_KEY,
                                **proxy})  # fmt: skip
        app = create_app(self.engine, self.ring, proxy=config)
        self._count_submissions(app.state.proxy.recorder)
        self.apps.append(app)
        live = LiveServer(app)
        self.servers.append(live)
        return live.url + "/v1"

    def client(self, user: str = "alice", **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=self.keys[user], max_retries=0, **kw)

    def recorder(self, index: int = 0) -> Any:
        return self.apps[index].state.proxy.recorder

    def _count_submissions(self, recorder: Any) -> None:
        """Count the exchanges handed to ``recorder``: the proxy hands one over after the
        reply's last byte is sent, so a client can finish before it is queued."""
        submit, recorder.submitted = recorder.submit, 0

        def counted(exchange: Any) -> None:
            submit(exchange)
            recorder.submitted += 1  # one event loop submits: no lock needed

        recorder.submit = counted

    def settle(self, submitted: int, index: int = 0) -> None:
        """Wait (up to 30 s) until ``recorder(index)`` has been handed ``submitted``
        exchanges in all, then until they are recorded."""
        recorder, deadline = self.recorder(index), time.monotonic() + 30
        while recorder.submitted < submitted and time.monotonic() < deadline:
            time.sleep(0.01)
        assert recorder.submitted >= submitted, "the proxy never queued the exchange"
        recorder.drain()

    def close(self) -> None:
        for live in self.servers:
            live.stop()
        self.upstream.live.stop()
        self.engine.close()


@pytest.fixture(scope="module")
def px(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    service = Proxied(tmp_path_factory.mktemp("proxy"))
    yield service
    service.close()


def chat(text: str, system: str | None = SYSTEM) -> list[dict[str, Any]]:
    messages = [] if system is None else [{"role": "system", "content": system}]
    return [*messages, {"role": "user", "content": text}]


QUESTION = "which code editor should I use for this refactor?"
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look up.",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]  # fmt: skip


# -- injection ---------------------------------------------------------------------------


def test_block_is_injected_as_a_system_message_and_nothing_else_changes(px: Proxied) -> None:
    raw = px.client().chat.completions.with_raw_response.create(
        model="gpt-4o", messages=chat(QUESTION), temperature=0.3, tools=TOOLS,
        response_format={"type": "text"}, extra_body={"vendor_knob": {"a": [1, 2.5]}},
        extra_headers={"X-Engrain-Record": "false"},
    )  # fmt: skip
    completion = raw.parse()
    assert completion.choices[0].message.content == ANSWER
    assert raw.headers["x-engrain-memory"] == "injected"
    assert raw.headers["x-engrain-context-id"]
    assert raw.headers["x-upstream-request-id"] == "up-1"
    sent = px.upstream.last()["body"]
    messages = sent.pop("messages")
    assert messages[0] == {"role": "system", "content": SYSTEM}
    assert messages[1]["role"] == "system" and "helix" in messages[1]["content"]
    assert messages[1]["content"].startswith("<memory>")
    assert messages[2] == {"role": "user", "content": QUESTION}
    assert sent == {"model": "gpt-4o", "temperature": 0.3, "tools": TOOLS,
                    "response_format": {"type": "text"},
                    "vendor_knob": {"a": [1, 2.5]}}  # fmt: skip
    headers = px.upstream.last()["headers"]
    assert headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert not [h for h in headers if h.startswith("x-engrain")]


def test_append_mode_extends_the_existing_system_message(px: Proxied) -> None:
    url = px.serve(inject="append", record=False)
    client = openai.OpenAI(base_url=url, api_key=px.keys["alice"], max_retries=0)
    client.chat.completions.create(model="gpt-4o", messages=chat(QUESTION))
    messages = px.upstream.last()["body"]["messages"]
    assert len(messages) == 2
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].startswith(SYSTEM + "\n\n<memory>")
    assert "helix" in messages[0]["content"]
    assert messages[1] == {"role": "user", "content": QUESTION}


def test_a_trivial_message_injects_nothing_and_goes_up_byte_for_byte(px: Proxied) -> None:
    body = {"model": "gpt-4o", "messages": chat("thanks!"), "seed": 7}
    raw = json.dumps(body, indent=1).encode()  # an odd layout the proxy must not redo
    reply = httpx.post(f"{px.url}/chat/completions", content=raw,
                       headers={"Authorization": f"Bearer {px.keys['alice']}",
                                "Content-Type": "application/json"})  # fmt: skip
    assert reply.status_code == 200
    assert reply.headers["x-engrain-memory"] == "empty"
    assert "x-engrain-context-id" not in reply.headers
    assert px.upstream.last()["raw"] == raw


def test_a_small_model_gets_the_compiled_tier_1_text(px: Proxied) -> None:
    for text, kind in [("erin is allergic to peanuts", "fact"),
                       ("erin works as a nurse on night shifts", "fact"),
                       ("I prefer short answers without emojis", "preference"),
                       ("always answer in British English", "invariant")]:  # fmt: skip
        px.engine.remember(text, "erin", kind)
    compiled = px.engine.tiers("erin", rebuild=True)
    assert compiled.tiers[Tier.DNA].text  # compiled: enough memories for tier 1
    px.client("erin").chat.completions.create(
        model="llama3.1:8b", messages=chat("what snacks could I take to my night shift?"),
        extra_headers={"X-Engrain-Record": "false"})  # fmt: skip
    injected = px.upstream.last()["body"]["messages"][1]
    assert injected == {"role": "system", "content": wrap(compiled.tiers[Tier.DNA].text)}


def test_the_model_is_judged_as_the_engine_judges_it(px: Proxied) -> None:
    """A model the server's ``model_windows`` setting adds gets its tier, as in Python and
    over ``POST /v1/context``; a model nobody knows goes up with the settings' tier (the
    proxy never refuses a chat for its memory)."""
    px.keys["ines"] = px.ring.create(["ines"])[0]
    for text, kind in [("ines is allergic to peanuts", "fact"),
                       ("ines works as a nurse on night shifts", "fact"),
                       ("I prefer short answers without emojis", "preference"),
                       ("always answer in British English", "invariant")]:  # fmt: skip
        px.engine.remember(text, "ines", kind)
    compiled = px.engine.tiers("ines", rebuild=True)
    question = "what snacks could I take to my night shift?"
    assert px.engine.preview(question, "ines", model="house-model").tier == Tier.DNA
    dna = {"role": "system", "content": wrap(compiled.tiers[Tier.DNA].text)}
    for model, tier1 in (("house-model", True), ("no-such-model", False)):
        px.client("ines").chat.completions.create(
            model=model, messages=chat(question), extra_headers={"X-Engrain-Record": "false"}
        )
        injected = px.upstream.last()["body"]["messages"][1]
        assert (injected == dna) is tier1, model
        assert injected["role"] == "system" and "<memory>" in injected["content"], model


# -- recording ---------------------------------------------------------------------------


def test_an_exchange_is_recorded_once_and_found_by_the_next_request(px: Proxied) -> None:
    px.upstream.answer = "Congratulations on adopting Biscuit the greyhound!"
    first = chat("I just adopted a retired greyhound named Biscuit")
    before = px.recorder().submitted
    try:
        for _ in range(2):  # a retried identical request records nothing more
            px.client("carol").chat.completions.create(model="gpt-4o", messages=first)
        px.settle(before + 2)
    finally:
        px.upstream.answer = ANSWER
    recorded = px.engine.list("carol")
    assert len(recorded) == 1
    assert "Biscuit" in recorded[0].content and "Congratulations" in recorded[0].content
    follow = [*first, {"role": "assistant", "content": "Congratulations!"},
              {"role": "user", "content": "what is the name of my greyhound again?"}]  # fmt: skip
    px.client("carol").chat.completions.create(
        model="gpt-4o", messages=follow, extra_headers={"X-Engrain-Record": "false"}
    )
    block = px.upstream.last()["body"]["messages"][1]
    assert block["role"] == "system" and "Biscuit" in block["content"]


def test_recording_opt_out_and_setting(px: Proxied) -> None:
    px.client("dave").chat.completions.create(
        model="gpt-4o", messages=chat("my locker code at the gym is 4711"),
        extra_headers={"X-Engrain-Record": "false"})  # fmt: skip
    url = px.serve(record=False)
    client = openai.OpenAI(base_url=url, api_key=px.keys["dave"], max_retries=0)
    client.chat.completions.create(model="gpt-4o", messages=chat("my bike lock code is 1234"))
    px.recorder().drain()
    px.recorder(-1).drain()
    assert px.engine.list("dave") == []


def test_streaming_sync_passes_chunks_through_and_records_the_assembled_answer(
    px: Proxied,
) -> None:
    before = px.recorder().submitted
    with px.client("frank").chat.completions.with_streaming_response.create(
        model="gpt-4o", stream=True, messages=chat("I am training for the Lisbon marathon"),
    ) as response:  # fmt: skip
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-engrain-memory"] in ("empty", "injected")
        pieces = [c.choices[0].delta.content for c in response.parse() if c.choices]
    assert len(pieces) == len(ANSWER.split(" "))
    assert "".join(p or "" for p in pieces) == ANSWER
    assert px.upstream.last()["body"]["stream"] is True
    px.settle(before + 1)
    recorded = px.engine.list("frank")
    assert len(recorded) == 1 and "Lisbon marathon" in recorded[0].content
    assert "tree-sitter" in recorded[0].content  # the answer, assembled from the deltas


def test_a_stream_cut_off_records_nothing_and_its_retry_records_the_whole_answer(
    px: Proxied,
) -> None:
    """An upstream that ended its stream cleanly mid-answer once had the half answer
    recorded, and its turn claimed, so the retry's whole answer was never recorded
    (session 18, h7)."""
    px.keys.setdefault("gina", px.ring.create(["gina"])[0])
    messages = chat("I keep my climbing shoes in the blue locker")
    px.upstream.answer = "Noted: the blue locker holds your climbing shoes and chalk bag."
    before = px.recorder().submitted
    try:
        px.upstream.cut = 4
        with px.client("gina").chat.completions.with_streaming_response.create(
            model="gpt-4o", stream=True, messages=messages
        ) as response:
            pieces = [c.choices[0].delta.content for c in response.parse() if c.choices]
        assert len(pieces) == 4  # the caller got what the upstream sent
        px.upstream.cut = None
        with px.client("gina").chat.completions.with_streaming_response.create(
            model="gpt-4o", stream=True, messages=messages
        ) as response:
            assert len([c for c in response.parse() if c.choices]) > 4
        px.settle(before + 1)
    finally:
        px.upstream.answer, px.upstream.cut = ANSWER, None
    [recorded] = px.engine.list("gina")
    assert "chalk bag" in recorded.content  # the retry's whole answer, once


def test_async_client_plain_and_streaming(px: Proxied) -> None:
    async def run() -> tuple[str | None, str]:
        client = openai.AsyncOpenAI(base_url=px.url, api_key=px.keys["alice"], max_retries=0)
        async with client:
            plain = await client.chat.completions.create(
                model="gpt-4o", messages=chat(QUESTION),
                extra_headers={"X-Engrain-Record": "false"})  # fmt: skip
            stream = await client.chat.completions.create(
                model="gpt-4o", messages=chat(QUESTION), stream=True,
                extra_headers={"X-Engrain-Record": "false"})  # fmt: skip
            text = "".join([c.choices[0].delta.content or "" async for c in stream])
        return plain.choices[0].message.content, text

    plain, streamed = run_async(run())
    assert plain == ANSWER and streamed == ANSWER
    assert "helix" in px.upstream.last()["body"]["messages"][1]["content"]


# -- failures ----------------------------------------------------------------------------


def test_memory_failure_still_forwards_the_request(
    px: Proxied, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("the store is down")

    monkeypatch.setattr(px.engine, "context", broken)
    with caplog.at_level(logging.WARNING, logger="engrain"):
        raw = px.client().chat.completions.with_raw_response.create(
            model="gpt-4o", messages=chat(QUESTION), extra_headers={"X-Engrain-Record": "false"}
        )
    assert raw.parse().choices[0].message.content == ANSWER
    assert raw.headers["x-engrain-memory"] == "unavailable"
    assert px.upstream.last()["body"]["messages"] == chat(QUESTION)
    assert "memory unavailable" in caplog.text and "the store is down" in caplog.text


@pytest.mark.parametrize("stream", [False, True])
def test_a_message_over_max_text_chars_goes_up_unchanged_and_is_not_recorded(
    px: Proxied, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    """A pasted document longer than ``max_text_chars`` is the upstream's to judge, not
    engrain's to refuse: it goes up without memory, said as ``too_large`` (base said
    ``unavailable`` and logged a failure), and is not queued for a recording the engine
    would refuse (base queued it, logged the refusal and released the turn each time)."""
    long = "pasted log line with nothing to remember\n" * (
        px.engine.settings.max_text_chars // 40 + 1
    )
    before = len(px.engine.list("erin"))
    submitted = px.recorder().submitted
    with caplog.at_level(logging.INFO, logger="engrain"), httpx.Client(timeout=60) as client:
        reply = client.post(
            px.url + "/chat/completions",
            headers={"authorization": f"Bearer {px.keys['erin']}"},
            json={"model": "gpt-4o", "messages": chat(long), "stream": stream},
        )
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-engrain-memory"] == "too_large"
    assert px.upstream.last()["body"]["messages"] == chat(long)
    assert "memory unavailable" not in caplog.text
    assert len(px.engine.list("erin")) == before
    # an exchange is handed over after its reply's last byte: one more, whole, then count
    px.client("erin").chat.completions.create(model="gpt-4o", messages=chat(QUESTION))
    px.settle(submitted + 1)
    assert px.recorder().submitted == submitted + 1


@pytest.mark.parametrize("stream", [False, True])
def test_headers_beyond_ascii_pass_through_both_ways_byte_for_byte(
    px: Proxied, stream: bool
) -> None:
    """An app name in UTF-8 (``X-Title: Café``, as OpenRouter-style clients send) and a
    reply header in UTF-8 or in no encoding at all went through a decode and an encode as
    text: the proxy answered 500 and sent nothing upstream. Headers are bytes; they pass
    as the bytes they came as."""
    sent = "Café ☕".encode()
    px.upstream.reply_headers = [(b"x-upstream-note", "日本語".encode()), (b"x-raw", b"\xff\x80")]
    try:
        with httpx.Client(timeout=30) as client:
            reply = client.post(
                px.url + "/chat/completions",
                headers=[(b"authorization", f"Bearer {px.keys['alice']}".encode()),
                         (b"x-title", sent)],
                json={"model": "gpt-4o", "messages": chat(QUESTION), "stream": stream},
            )  # fmt: skip
    finally:
        px.upstream.reply_headers = []
    assert reply.status_code == 200, reply.text
    assert px.upstream.last()["headers"]["x-title"].encode("latin-1") == sent
    raw = dict(reply.headers.raw)
    assert raw[b"x-upstream-note"] == "日本語".encode()
    assert raw[b"x-raw"] == b"\xff\x80"
    assert reply.headers["x-engrain-memory"] == "injected"


@pytest.mark.parametrize("status", [400, 429, 500, 503])
def test_upstream_errors_pass_through_with_their_bodies(px: Proxied, status: int) -> None:
    error = {"error": {"message": f"upstream says {status}", "type": "x", "code": "c"}}
    px.upstream.status, px.upstream.error = status, error
    try:
        with pytest.raises(openai.APIStatusError) as caught:
            px.client().chat.completions.create(model="gpt-4o", messages=chat(QUESTION))
        reply = httpx.post(f"{px.url}/chat/completions",
                           json={"model": "gpt-4o", "messages": chat(QUESTION)},
                           headers={"Authorization": f"Bearer {px.keys['alice']}"})  # fmt: skip
    finally:
        px.upstream.status, px.upstream.error = 200, {}
    assert caught.value.status_code == status
    assert caught.value.body == error["error"]
    assert reply.status_code == status and reply.json() == error
    px.recorder().drain()
    assert [m for m in px.engine.list("alice") if "upstream says" in m.content] == []


def test_upstream_timeout_is_a_504_in_the_error_shape(px: Proxied) -> None:
    url = px.serve(timeout=0.3)
    px.upstream.hold = asyncio.Event()
    try:
        reply = httpx.post(f"{url}/chat/completions",
                           json={"model": "gpt-4o", "messages": chat(QUESTION)},
                           headers={"Authorization": f"Bearer {px.keys['alice']}"})  # fmt: skip
    finally:
        px.upstream.release()
        px.upstream.hold = None
    assert reply.status_code == 504
    body = reply.json()
    assert body["error"]["code"] == "upstream_timeout" and body["status"] == 504
    assert "upstream" in body["error"]["message"]  # OpenAI's shape on the proxy's routes
    assert body["request_id"] == reply.headers["x-request-id"]


def test_an_unreachable_upstream_is_a_502(px: Proxied) -> None:
    closed = LiveServer(FastAPI())
    closed.stop()  # its port now refuses connections
    engine_url = LiveServer(create_app(px.engine, px.ring, proxy=ProxyConfig(
        closed.url + "/v1", UPSTREAM_KEY, timeout=5)))  # fmt: skip
    px.servers.append(engine_url)
    with pytest.raises(openai.APIStatusError) as caught:
        openai.OpenAI(
            base_url=engine_url.url + "/v1", api_key=px.keys["alice"], max_retries=0
        ).chat.completions.create(model="gpt-4o", messages=chat("hi"))
    assert caught.value.status_code == 502
    assert caught.value.response.json()["error"]["type"] == "upstream_unavailable"
    assert caught.value.message.endswith(caught.value.response.json()["error"]["message"])


# -- auth --------------------------------------------------------------------------------


def test_second_mode_forwards_the_callers_own_upstream_key(px: Proxied) -> None:
    client = openai.OpenAI(base_url=px.url, api_key="sk-callers-own", max_retries=0,
                           default_headers={"X-Engrain-Key": px.keys["alice"]})  # fmt: skip
    out = client.chat.completions.create(model="gpt-4o", messages=chat(QUESTION),
                                         extra_headers={"X-Engrain-Record": "false"})  # fmt: skip
    assert out.choices[0].message.content == ANSWER
    received = px.upstream.last()
    assert received["headers"]["authorization"] == "Bearer sk-callers-own"
    assert "helix" in received["body"]["messages"][1]["content"]
    bad = openai.OpenAI(base_url=px.url, api_key="sk-callers-own", max_retries=0,
                        default_headers={"X-Engrain-Key": "egk_not-a-key"})  # fmt: skip
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="gpt-4o", messages=chat(QUESTION))


def test_keys_act_only_for_their_users(px: Proxied) -> None:
    count = len(px.upstream.received)
    with pytest.raises(openai.PermissionDeniedError):  # bob naming alice
        px.client("bob").chat.completions.create(
            model="gpt-4o", messages=chat(QUESTION), extra_headers={"X-Engrain-User": "alice"}
        )
    with pytest.raises(openai.AuthenticationError) as unknown:
        stranger = openai.OpenAI(base_url=px.url, api_key="egk_" + "x" * 43, max_retries=0)
        stranger.chat.completions.create(model="gpt-4o", messages=chat(QUESTION))
    assert "unknown API key" in str(unknown.value)  # the SDK reads OpenAI's error shape
    assert unknown.value.code == "unauthenticated"
    with pytest.raises(openai.BadRequestError) as unnamed:  # an admin key must name the user
        px.client("admin").chat.completions.create(model="gpt-4o", messages=chat(QUESTION))
    assert "user" in unnamed.value.message.removeprefix("Error code: 400 - ")
    assert len(px.upstream.received) == count  # refused before anything went up
    noheaders = {"X-Engrain-Record": "false"}
    px.client("bob").chat.completions.create(model="gpt-4o", messages=chat(QUESTION),
                                             user="alice", extra_headers=noheaders)  # fmt: skip
    assert "helix" not in json.dumps(px.upstream.last()["body"])  # bob's own memory: none
    px.client("admin").chat.completions.create(model="gpt-4o", messages=chat(QUESTION),
                                               user="alice", extra_headers=noheaders)  # fmt: skip
    assert "helix" in px.upstream.last()["body"]["messages"][1]["content"]
    assert px.upstream.last()["body"]["user"] == "alice"  # the field still goes up


def test_models_pass_through_and_need_a_key(px: Proxied) -> None:
    assert [m.id for m in px.client().models.list()] == ["fake-small", "fake-large"]
    refused = httpx.get(f"{px.url}/models")
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "unauthenticated"  # OpenAI's shape here
    # engrain's own routes keep engrain's shape on the same server
    own = httpx.get(px.url.removesuffix("/v1") + "/v1/memories", params={"user_id": "alice"})
    assert own.status_code == 401 and own.json()["error"] == "unauthenticated"


def test_the_upstream_key_never_leaks(px: Proxied, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []
    with caplog.at_level(logging.DEBUG):
        for status in (200, 500):
            px.upstream.status, px.upstream.error = status, {"error": {"message": "no"}}
            for stream in (False, True):
                body = {"model": "gpt-4o", "messages": chat(QUESTION), "stream": stream}
                key = {"Authorization": f"Bearer {px.keys['alice']}"}
                reply = httpx.post(f"{px.url}/chat/completions", json=body, headers=key)
                seen += [reply.text, repr(reply.headers)]
        px.upstream.status, px.upstream.error = 200, {}
        reply = httpx.post(f"{px.url}/chat/completions", json={"messages": []})
        seen += [reply.text, repr(reply.headers)]
        px.recorder().drain()
    config = ProxyConfig("http://127.0.0.1:9/v1", UPSTREAM_KEY)
    assert UPSTREAM_KEY in px.upstream.last()["headers"]["authorization"]  # it was sent
    assert all(UPSTREAM_KEY not in text for text in seen)
    assert UPSTREAM_KEY not in caplog.text and UPSTREAM_KEY not in repr(config)


# -- units -------------------------------------------------------------------------------


def test_parse_reads_turns_conversation_and_content_parts() -> None:
    history = [{"role": "system", "content": "be brief"},
               {"role": "user", "content": [{"type": "text", "text": "first"},
                                            {"type": "image_url", "image_url": {"url": "x"}}]},
               {"role": "assistant", "content": "ok"},
               {"role": "user", "content": "second"}]  # fmt: skip
    first = parse(json.dumps({"model": "m", "messages": history[:2]}).encode())
    later = parse(json.dumps({"model": "m", "messages": history, "stream": True}).encode())
    assert (first.message, first.turn, later.message, later.turn) == ("first", 0, "second", 1)
    assert first.conversation == later.conversation and later.stream
    other = parse(json.dumps({"messages": [{"role": "user", "content": "else"}]}).encode())
    assert other.conversation != first.conversation
    assert parse(b"not json").body is None and parse(b'{"messages": 3}').body is None
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert parse(deep).body is None  # past the parser's depth: forwarded as is (s17 h8)
    # an integer past Python's conversion limit (4,300 digits): json raises a bare
    # ValueError, which escaped as a 500 (session 24, h3); forwarded as is like the others
    huge = b'{"messages": [{"role": "user", "content": "hi"}], "n": ' + b"9" * 5_000 + b"}"
    assert parse(huge).body is None and parse(huge).raw == huge


def test_with_memory_places_the_block() -> None:
    body = {"messages": [{"role": "developer", "content": "d"}, {"role": "user", "content": "q"}],
            "n": 2}  # fmt: skip
    added = json.loads(with_memory(body, "<memory>m</memory>", "system"))
    assert [m["role"] for m in added["messages"]] == ["developer", "system", "user"]
    appended = json.loads(with_memory(body, "B", "append"))
    assert appended["messages"][0] == {"role": "developer", "content": "d\n\nB"}
    bare = {"messages": [{"role": "user", "content": "q"}]}
    assert json.loads(with_memory(bare, "B", "append"))["messages"][0] == {
        "role": "system", "content": "B"}  # fmt: skip
    assert body["messages"][0] == {"role": "developer", "content": "d"}  # not mutated


def test_answer_reader_assembles_deltas_split_across_chunks() -> None:
    events = b"".join(
        b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % piece
        for piece in (b"Hel", b"lo", b" world")) + b"data: [DONE]\n\n"  # fmt: skip
    reader = AnswerReader("text/event-stream; charset=utf-8")
    for i in range(0, len(events), 7):
        reader.feed(events[i : i + 7])
    assert reader.text() == "Hello world"
    plain = AnswerReader("application/json")
    plain.feed(b'{"choices":[{"message":{"content":null,"tool_calls":[]}}]}')
    assert plain.text() is None


def test_answer_reader_takes_a_stream_only_once_it_said_it_ended() -> None:
    piece = b'data: {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n'
    last = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
    error = b'data: {"error":{"message":"overloaded","type":"server_error"}}\n\n'
    cases = {
        piece: None,  # closed mid-answer
        piece + last: "Hel",  # a finish_reason ends it, [DONE] or not
        piece + b"data: [DONE]\n\n": "Hel",
        piece + error + b"data: [DONE]\n\n": None,  # an error event inside a 200 stream
        b'data: {"choices":[{"index":0,"delta":"junk","finish_reason":"stop"}]}\n\n': None,
    }
    for events, expected in cases.items():
        reader = AnswerReader("text/event-stream")
        reader.feed(events)
        assert reader.text() == expected, events


def test_config_from_settings(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, proxy_upstream="http://localhost:11434/v1/",
                             proxy_upstream_key_env="MY_KEY", proxy_inject="append")  # fmt: skip
    config = ProxyConfig.from_settings(settings, {"MY_KEY": "sk-1"})
    assert config is not None
    assert (config.upstream, config.upstream_key, config.inject) == (
        "http://localhost:11434/v1", "sk-1", "append")  # fmt: skip
    with pytest.raises(ConfigError, match="MY_KEY"):
        ProxyConfig.from_settings(settings, {})
    with pytest.raises(ConfigError):
        ProxyConfig("localhost:11434")
    assert ProxyConfig.from_settings(make_settings(tmp_path)) is None


def test_recording_does_not_block_the_reply(px: Proxied) -> None:
    gate = threading.Event()
    recorder = px.recorder()
    recorder._executor.submit(gate.wait, 30)  # the recording thread is busy
    try:
        out = px.client("bob").chat.completions.create(
            model="gpt-4o", messages=chat("I moved to Porto last spring")
        )
        assert out.choices[0].message.content == ANSWER  # answered while recording waits
    finally:
        gate.set()
    recorder.drain()
    assert any("Porto" in m.content for m in px.engine.list("bob"))


def test_a_turn_whose_recording_thread_cannot_start_is_left_to_its_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder's ``submit`` runs on the event loop after a reply's last byte. Its
    thread could not start (out of memory, the process's thread limit): the executor's
    ``RuntimeError`` went into the reply's stream and the turn stayed claimed, so its retry
    was dropped as a duplicate. Now it is not queued, and the retry records it."""
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())
    recorder = Recorder(engine)
    exchange = Exchange("erin", None, "conv-9", 1, "I keep bees on the roof of my flat",
                        "Rooftop hives need wind shelter.")  # fmt: skip
    start = threading.Thread.start

    def no_recording_thread(self: threading.Thread) -> None:
        if self.name.startswith("engrain-proxy-record"):
            raise RuntimeError("can't start new thread")
        start(self)

    try:
        monkeypatch.setattr(threading.Thread, "start", no_recording_thread)
        assert recorder.submit(exchange) is False
        monkeypatch.undo()
        assert engine.list("erin") == []
        assert recorder.submit(exchange) is True  # the retry: the turn was not kept claimed
        recorder.drain()
        assert [m.content for m in engine.list("erin") if "bees" in m.content]
    finally:
        recorder.close()
        engine.close()


def test_a_turn_handed_over_after_the_recorder_closed_is_not_raised(tmp_path: Path) -> None:
    """A stream that ends while the server shuts down hands its turn to a closed recorder:
    logged, not raised into the reply's stream."""
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())
    recorder = Recorder(engine)
    recorder.close()
    try:
        exchange = Exchange("frank", None, "conv-3", 1, "I switched to a standing desk",
                            "Alternate standing and sitting.")  # fmt: skip
        assert recorder.submit(exchange) is False
        assert engine.list("frank") == []
    finally:
        engine.close()


def test_a_request_with_an_image_larger_than_other_routes_bodies_goes_up(px: Proxied) -> None:
    """A vision request carries its image base64-encoded: a 1.5 MB screenshot is past the
    1 MiB every other route takes (base: 413, so an application that worked against its
    upstream broke behind the proxy). The chat route takes up to 32 MiB, the upstream's
    size to judge; past ProxyConfig.max_body_bytes it is a 413 in OpenAI's shape."""
    image = "data:image/png;base64," + base64.b64encode(secrets.token_bytes(1_500_000)).decode()
    question = [{"type": "text", "text": QUESTION},
                {"type": "image_url", "image_url": {"url": image}}]  # fmt: skip
    with px.client(default_headers={"X-Engrain-Record": "false"}) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": question}])  # fmt: skip
    assert raw.parse().choices[0].message.content == ANSWER
    assert raw.headers["x-engrain-memory"] == "injected"
    sent = px.upstream.last()["body"]["messages"]
    assert sent[-1]["content"][1]["image_url"]["url"] == image  # byte for byte
    assert "helix" in sent[0]["content"]  # the memory block for the question's text
    small, asked = px.serve(max_body_bytes=1_000_000), {"role": "user", "content": question}
    with (openai.OpenAI(base_url=small, api_key=px.keys["alice"], max_retries=0) as client,
          pytest.raises(openai.APIStatusError) as refused):  # fmt: skip
        client.chat.completions.create(model="gpt-4o", messages=[asked])
    assert refused.value.status_code == 413 and refused.value.code == "input_too_large"
    with pytest.raises(ConfigError, match="max_body_bytes"):
        ProxyConfig(px.upstream.url, max_body_bytes=0)


def test_a_user_named_in_utf8_in_the_header_is_that_user(px: Proxied) -> None:
    """curl, Node and browsers send a header's text as UTF-8: `X-Engrain-User: José` was
    read as 'JosÃ©' (Latin-1) and refused, 403 (base). Latin-1 bytes still name the user."""
    secret = px.ring.create(["José", "alice"])[0]
    px.engine.remember("José deploys with Ansible playbooks from the ops repository", "José")
    body = {"model": "gpt-4o", "messages": chat("which Ansible playbooks does José deploy with?")}
    for sent in ("José".encode(), "José".encode("latin-1")):
        headers = [(b"authorization", f"Bearer {secret}".encode()),
                   (b"x-engrain-user", sent), (b"x-engrain-record", b"false")]  # fmt: skip
        reply = httpx.post(f"{px.url}/chat/completions", json=body, headers=headers, timeout=30)
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-engrain-memory"] == "injected"
        assert "Ansible" in px.upstream.last()["body"]["messages"][1]["content"]
    other = [(b"authorization", f"Bearer {secret}".encode()), (b"x-engrain-user", b"Jos\xc3")]
    refused = httpx.post(f"{px.url}/chat/completions", json=body, headers=other, timeout=30)
    assert refused.status_code == 403 and "may not act for user" in refused.text
