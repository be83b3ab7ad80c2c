"""The optional LLM against a real (local, scripted) OpenAI-compatible server: the request it
sends, retries and timeouts, malformed replies, configuration, and the engine's two users of
it (session compression and tier 1) with their rule-based fallbacks."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engrain import ConfigError, Engine, Kind, LLMError, MemoryType, Turn
from engrain.compress import SUMMARY_PROMPT, sessions, summarize
from engrain.embed import HashEmbedder
from engrain.llm import LLMClient, make_llm
from engrain.store import MemoryStore
from engrain.tiers import Tier
from engrain.tiers.compile import sentence
from engrain.tokens import count_tokens

from .conftest import NOW, make_settings

USER = "ada"
MODEL = "test-model"


# -- the scripted server -----------------------------------------------------------------------


@dataclass(frozen=True)
class Behaviour:
    """What the server does with one request: wait ``delay`` seconds, then answer with
    ``status`` and either ``raw`` bytes or a chat completion whose content is ``reply``;
    ``truncate`` announces a longer body than it sends, then hangs up."""

    reply: Any = "ok"
    status: int = 200
    delay: float = 0.0
    raw: bytes | None = None
    truncate: bool = False


def reply(text: Any) -> Behaviour:
    return Behaviour(reply=text)


def status(code: int) -> Behaviour:
    return Behaviour(status=code)


#: How long a server that "never answers" takes to: a client that waited for its reply
#: takes at least this long, one that timed out far less whatever the machine's load (a
#: bound of 2.5 s on two 0.3 s timeouts and a 0.5 s backoff failed under load, not for a
#: wait). The server's handler ends at once when the fixture stops it.
NEVER = 60.0


def sleep(seconds: float = NEVER) -> Behaviour:
    return Behaviour(delay=seconds)


def raw(body: bytes) -> Behaviour:
    return Behaviour(raw=body)


def truncated() -> Behaviour:
    return Behaviour(raw=b'{"choices": [{"mess', truncate=True)


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeLLM:
    """A chat-completions server on 127.0.0.1: behaviours are taken from ``script`` in
    order, then ``default``; every request is recorded in ``requests``."""

    url: str = ""
    script: list[Behaviour] = field(default_factory=list)
    default: Behaviour = field(default_factory=Behaviour)
    requests: list[Received] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def will(self, *behaviours: Behaviour, then: Behaviour | None = None) -> None:
        with self.lock:
            self.script.extend(behaviours)
            if then is not None:
                self.default = then

    def next(self, request: Received) -> Behaviour:
        with self.lock:
            self.requests.append(request)
            return self.script.pop(0) if self.script else self.default

    @property
    def prompts(self) -> list[str]:
        return [r.body["messages"][-1]["content"] for r in self.requests]


def completion(content: Any) -> bytes:
    return json.dumps({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
    }).encode()  # fmt: skip


def _handler(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length)
            try:
                body: Any = json.loads(data)
            except ValueError:
                body = data
            behaviour = fake.next(Received("POST", self.path, dict(self.headers.items()), body))
            if behaviour.delay and fake.stop.wait(behaviour.delay):
                return  # the test is over
            payload = behaviour.raw
            if behaviour.status != 200:
                payload = json.dumps({"error": {"message": "scripted failure"}}).encode()
            elif payload is None:
                payload = completion(behaviour.reply)
            try:
                self.send_response(behaviour.status)
                self.send_header("Content-Type", "application/json")
                length = len(payload) + (1000 if behaviour.truncate else 0)
                self.send_header("Content-Length", str(length))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up (timeout): nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def llm_server() -> Iterator[FakeLLM]:
    """A fresh scripted chat-completions server per test, shut down afterwards."""
    fake = FakeLLM()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield fake
    fake.stop.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


def client(url: str, **kwargs: Any) -> LLMClient:
    options: dict[str, Any] = {"backoff": 0.01, "timeout": 5.0, **kwargs}
    return LLMClient(url, MODEL, **options)


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- the client ---------------------------------------------------------------------------------


def test_completion_sends_the_openai_request(llm_server: FakeLLM) -> None:
    llm_server.will(reply("  Deploys happen on Tuesdays.  "))
    llm = client(f"{llm_server.url}/v1", api_key="sk-test")
    assert llm.complete("Summarise this.", system="Be terse.") == "Deploys happen on Tuesdays."
    [request] = llm_server.requests
    assert request.method == "POST"
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.headers["Content-Type"] == "application/json"
    assert request.body["model"] == MODEL
    assert request.body["stream"] is False
    assert request.body["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Summarise this."},
    ]


def test_completion_without_key_or_system(llm_server: FakeLLM) -> None:
    llm_server.will(reply("fine"))
    llm = client(f"{llm_server.url}/v1")
    assert llm("Hello there") == "fine"  # __call__ is complete
    [request] = llm_server.requests
    assert "Authorization" not in request.headers
    assert request.body["messages"] == [{"role": "user", "content": "Hello there"}]


@pytest.mark.parametrize("suffix", ["/v1", "/v1/", "/v1/chat/completions", "/v1/chat/completions/"])
def test_base_url_forms(llm_server: FakeLLM, suffix: str) -> None:
    llm_server.will(reply("yes"))
    assert client(llm_server.url + suffix).complete("ping") == "yes"
    assert [r.path for r in llm_server.requests] == ["/v1/chat/completions"]


@pytest.mark.parametrize("code", [500, 429, 503])
def test_transient_failure_is_retried(llm_server: FakeLLM, code: int) -> None:
    llm_server.will(status(code), reply("second time lucky"))
    assert client(llm_server.url + "/v1", retries=2).complete("go") == "second time lucky"
    assert len(llm_server.requests) == 2
    assert llm_server.requests[0].body == llm_server.requests[1].body


def test_no_retries_means_one_request(llm_server: FakeLLM) -> None:
    llm_server.will(status(500), reply("never reached"))
    with pytest.raises(LLMError, match="1 attempts: HTTP 500"):
        client(llm_server.url + "/v1", retries=0).complete("go")
    assert len(llm_server.requests) == 1


def test_retries_exhausted(llm_server: FakeLLM) -> None:
    llm_server.will(then=status(502))
    with pytest.raises(LLMError, match="failed after 3 attempts: HTTP 502"):
        client(llm_server.url + "/v1", retries=2).complete("go")
    assert len(llm_server.requests) == 3


@pytest.mark.parametrize("code", [401, 400, 404])
def test_client_errors_are_not_retried(llm_server: FakeLLM, code: int) -> None:
    llm_server.will(status(code), reply("never reached"))
    with pytest.raises(LLMError, match=f"HTTP {code}") as err:
        client(llm_server.url + "/v1", retries=3, api_key="wrong").complete("go")
    assert "refused" in str(err.value)
    assert len(llm_server.requests) == 1


def test_timeout_is_retried_then_raises(llm_server: FakeLLM) -> None:
    llm_server.will(then=sleep())
    llm = client(llm_server.url + "/v1", timeout=0.3, retries=1)
    start = time.monotonic()
    with pytest.raises(LLMError, match="timed out") as err:
        llm.complete("go")
    elapsed = time.monotonic() - start
    assert "2 attempts" in str(err.value)
    assert 0.55 < elapsed < NEVER  # both attempts waited their timeout, neither the reply
    assert len(llm_server.requests) == 2


def test_slow_first_reply_then_success(llm_server: FakeLLM) -> None:
    llm_server.will(sleep(5.0), reply("after the timeout"))
    llm = client(llm_server.url + "/v1", timeout=0.3, retries=1)
    assert llm.complete("go") == "after the timeout"
    assert len(llm_server.requests) == 2


MALFORMED = {
    "html": b"<html>Bad Gateway</html>",
    "empty": b"",
    "no-choices": json.dumps({"id": "x", "object": "chat.completion"}).encode(),
    "empty-choices": json.dumps({"choices": []}).encode(),
    "no-message": json.dumps({"choices": [{"index": 0}]}).encode(),
    "list": json.dumps(["not", "an", "object"]).encode(),
    "int-content": completion(42),
    "null-content": completion(None),
    "list-content": completion(["a", "list"]),
}


@pytest.mark.parametrize("body", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_reply(llm_server: FakeLLM, body: bytes) -> None:
    llm_server.will(raw(body))
    with pytest.raises(LLMError, match="malformed"):
        client(llm_server.url + "/v1", retries=2).complete("go")
    assert len(llm_server.requests) == 1  # a malformed reply is not a transient failure


def test_truncated_reply_is_an_llm_error(llm_server: FakeLLM) -> None:
    llm_server.will(then=truncated())
    with pytest.raises(LLMError, match="broken reply"):
        client(llm_server.url + "/v1", retries=1).complete("go")


def test_unreachable_endpoint() -> None:
    llm = client(f"http://127.0.0.1:{closed_port()}/v1", retries=2, timeout=1.0)
    with pytest.raises(LLMError, match="failed after 3 attempts: cannot reach it"):
        llm.complete("anyone there?")


def test_make_llm() -> None:
    assert make_llm(None, MODEL) is None
    assert make_llm("", MODEL) is None
    assert make_llm(None, None) is None
    with pytest.raises(ConfigError, match="llm_model"):
        make_llm("http://localhost:11434/v1", None)
    with pytest.raises(ConfigError, match="llm_model"):
        make_llm("http://localhost:11434/v1", "")
    for url in ("ftp://localhost/v1", "localhost:11434/v1", "file:///etc/passwd"):
        with pytest.raises(ConfigError, match="http"):
            make_llm(url, MODEL)
    llm = make_llm("https://api.example.com/v1/", MODEL, "sk-x", timeout=7.5, retries=4)
    assert llm is not None
    assert (llm.model, llm.api_key, llm.timeout, llm.retries) == (MODEL, "sk-x", 7.5, 4)
    assert llm.endpoint == "https://api.example.com/v1/chat/completions"
    with pytest.raises(ConfigError):
        LLMClient("http://localhost/v1", MODEL, timeout=0)
    with pytest.raises(ConfigError):
        LLMClient("http://localhost/v1", MODEL, retries=-1)


# -- through the engine -------------------------------------------------------------------------

SESSIONS = {
    "s1": [
        ("Ada", "We moved the billing service to PostgreSQL 16 on March 3."),
        ("Bob", "Grace Hopper owns the migration and the rollback plan."),
        ("Ada", "Thanks, sounds good!"),
    ],
    "s2": [
        ("Ada", "The invoice API now returns 429 after 100 requests per minute."),
        ("Bob", "Linus asked for the limit to be raised to 250 for the Acme account."),
    ],
    "s3": [
        ("Ada", "Next week we ship the Kubernetes autoscaler with 12 replicas."),
        ("Bob", "Margaret will review the Helm chart on Friday."),
    ],
}


def llm_engine(tmp_path: Path, url: str, **overrides: Any) -> Engine:
    settings = make_settings(
        tmp_path, llm_url=url, llm_model=MODEL, compression_threshold=1, sessions_to_compress=2,
        auto_compress=False, **overrides,
    )  # fmt: skip
    return Engine(settings=settings, store=MemoryStore(), embedder=HashEmbedder())


def load_sessions(engine: Engine) -> None:
    for day, (sid, lines) in enumerate(SESSIONS.items()):
        at = NOW - timedelta(days=30 - day)
        turns = [Turn(speaker, text, f"{sid}-t{i}", at + timedelta(minutes=i))
                 for i, (speaker, text) in enumerate(lines)]  # fmt: skip
        engine.ingest_conversation(turns, USER, sid, now=at)


def test_compress_with_llm(tmp_path: Path, llm_server: FakeLLM) -> None:
    llm_server.will(reply("Billing moved to PostgreSQL 16."), reply("Invoice API limits: 429."))
    engine = llm_engine(tmp_path, llm_server.url + "/v1")
    try:
        load_sessions(engine)
        before = engine.list(USER, limit=None)
        assert not llm_server.requests  # ingestion never calls the LLM
        report = engine.compress(USER, force=True, now=NOW)
        assert report.sessions == ("s1", "s2")
        assert report.summarized_by == ("llm", "llm")
        assert len(llm_server.requests) == 2
        for request, sid in zip(llm_server.requests, ("s1", "s2"), strict=True):
            assert request.path == "/v1/chat/completions"
            assert request.body["model"] == MODEL
            prompt = request.body["messages"][-1]["content"]
            assert prompt.startswith("Summarize the following conversation into 2-3 sentences")
            assert prompt.startswith(SUMMARY_PROMPT.split("{")[0])
            for _, text in SESSIONS[sid]:
                assert text in prompt
        by_session = {str(m.source_session_id): m for m in engine.list(USER, kind="summary")}
        assert set(by_session) == {"s1", "s2"}
        expected = {"s1": "Billing moved to PostgreSQL 16.", "s2": "Invoice API limits: 429."}
        for sid, summary in by_session.items():
            assert summary.id in report.summaries
            assert summary.content == expected[sid]
            assert summary.kind is Kind.SUMMARY
            assert summary.memory_type is MemoryType.SEMANTIC
            assert summary.compression_source is True
            assert summary.provenance.metadata["summarized_by"] == "llm"
            assert set(summary.provenance.turn_ids) == {
                f"{sid}-t{i}" for i in range(len(SESSIONS[sid]))
            }
        after = engine.list(USER, limit=None)
        assert len(after) == len(before) + 2
        for m in after:
            if m.memory_type is MemoryType.EPISODIC:
                assert m.compressed is (m.session_id in {"s1", "s2"})
    finally:
        engine.close()


@pytest.mark.parametrize(
    "failure",
    [
        "timeout", "malformed", "error", "empty",
        "truncated",
    ],
)  # fmt: skip
def test_compress_falls_back_to_extractive(
    tmp_path: Path, llm_server: FakeLLM, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    behaviour = {
        "timeout": sleep(), "malformed": raw(b'{"choices": oops'),
        "error": status(500), "empty": reply("   "), "truncated": truncated(),
    }[failure]  # fmt: skip
    llm_server.will(then=behaviour)
    engine = llm_engine(tmp_path, llm_server.url + "/v1", llm_timeout=0.3, llm_retries=0)
    try:
        load_sessions(engine)
        before = engine.list(USER, limit=None)
        due = sessions(before)[:2]
        expected = {s.session_id: summarize(s)[0] for s in due}
        assert all(expected.values())
        start = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="engrain.compress"):
            report = engine.compress(USER, force=True, now=NOW)
        assert time.monotonic() - start < NEVER  # no session waited for the reply
        assert report.summarized_by == ("extractive", "extractive")
        assert len(llm_server.requests) == 2  # asked once per session (no retries)
        warnings = [r for r in caplog.records
                    if r.name == "engrain.compress" and r.levelno == logging.WARNING]  # fmt: skip
        assert len(warnings) == 2
        summaries = engine.list(USER, kind="summary")
        assert {m.source_session_id for m in summaries} == {"s1", "s2"}
        for summary in summaries:
            assert summary.provenance.metadata["summarized_by"] == "extractive"
            assert summary.content == expected[str(summary.source_session_id)]
            assert summary.compression_source is True
            assert summary.memory_type is MemoryType.SEMANTIC
        after = engine.list(USER, limit=None)
        assert len(after) == len(before) + len(summaries)
        assert {m.id for m in before} <= {m.id for m in after}  # nothing lost
        originals = [m for m in after if m.memory_type is MemoryType.EPISODIC]
        assert originals
        for m in originals:
            assert m.compressed is (m.session_id in {"s1", "s2"})
    finally:
        engine.close()


INVARIANTS = [
    "Never deploy on Fridays.",
    "Every database migration must be reversible.",
    "All money amounts are stored as integer cents.",
]


def remember_invariants(engine: Engine) -> None:
    for text in INVARIANTS:
        engine.remember(text, USER, "invariant", now=NOW)


def test_tier1_compiled_by_llm(tmp_path: Path, llm_server: FakeLLM) -> None:
    prose = "Deploys never happen on Fridays; migrations reverse; money is integer cents."
    llm_server.will(reply(f"  {prose}\n"))
    engine = llm_engine(tmp_path, llm_server.url + "/v1")
    try:
        remember_invariants(engine)
        dna = engine.tiers(USER, now=NOW).tiers[Tier.DNA]
        assert dna.compiled_by == "llm"
        assert dna.text == prose
        assert dna.tokens == count_tokens(prose)
        assert len(dna.memory_ids) == len(INVARIANTS)
        [request] = llm_server.requests  # tier 2 has no large cluster: no call for it
        prompt = request.body["messages"][-1]["content"]
        assert prompt.startswith("Compress these project rules and patterns")
        for text in INVARIANTS:
            assert f"- {text}" in prompt
    finally:
        engine.close()


@pytest.mark.parametrize(
    "failure", ["too-long", "empty", "error", "timeout", "malformed", "truncated"]
)
def test_tier1_falls_back_to_rules(
    tmp_path: Path, llm_server: FakeLLM, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    behaviour = {
        "too-long": reply("deploy " * 600), "empty": reply(""), "error": status(503),
        "timeout": sleep(5.0), "malformed": raw(b"not json"), "truncated": truncated(),
    }[failure]  # fmt: skip
    llm_server.will(then=behaviour)
    engine = llm_engine(tmp_path, llm_server.url + "/v1", llm_timeout=0.3, llm_retries=0)
    try:
        remember_invariants(engine)
        with caplog.at_level(logging.WARNING, logger="engrain.tiers.compile"):
            dna = engine.tiers(USER, now=NOW).tiers[Tier.DNA]
        assert len(llm_server.requests) == 1
        assert dna.compiled_by == "rules"
        assert sorted(engine.get(i, USER).content for i in dna.memory_ids) == sorted(INVARIANTS)
        rules = " ".join(sentence(engine.get(i, USER).content) for i in dna.memory_ids)
        assert dna.text == rules
        assert "deploy deploy" not in dna.text
        assert any(r.name == "engrain.tiers.compile" for r in caplog.records)
    finally:
        engine.close()


def test_no_llm_configured_means_rules_and_extractive(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, compression_threshold=1, auto_compress=False)
    engine = Engine(settings=settings, store=MemoryStore(), embedder=HashEmbedder())
    try:
        assert engine.llm is None
        remember_invariants(engine)
        load_sessions(engine)
        assert engine.tiers(USER, now=NOW).tiers[Tier.DNA].compiled_by == "rules"
        assert engine.compress(USER, force=True, now=NOW).summarized_by == ("extractive",)
    finally:
        engine.close()
