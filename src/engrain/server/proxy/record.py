"""After the reply: the assistant's answer (from the JSON reply, or assembled from a
stream's deltas as they pass) and the background recording of each conversation turn.

A turn is recorded once: the key is the user, project, conversation id and turn number,
claimed before the job is queued, so a retried identical request (same history, same
latest message) does not record the exchange twice. The claims are this process's own
(the most recent :data:`REMEMBERED_TURNS`); a retry reaching another worker process is
caught by the engine's near-duplicate merge instead. A failed recording is logged and its
claim released, so the next attempt of that turn records it.

The recording thread is a :class:`~engrain.threads.Pool`'s, started bounded (decision row
285): :meth:`Recorder.submit` runs on the server's event loop after a reply's last byte, and
``ThreadPoolExecutor`` waited there without a bound for a thread that might never say it
runs, or raised ``RuntimeError`` into the reply's stream when none could start. A turn
whose recording cannot be queued (no thread, or the recorder closed) is logged and its
claim released, as a failed recording's is.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from engrain.engine import Engine
from engrain.model import Turn
from engrain.threads import Pool

log = logging.getLogger("engrain.server.proxy")

#: Turns whose recording this process remembers, to skip a retry's second recording.
REMEMBERED_TURNS = 16_384
#: The most of a JSON (non-streamed) reply kept to read the answer from.
MAX_REPLY_BYTES = 8 << 20


class AnswerReader:
    """Collects the assistant's text from a reply as its bytes pass by: the first choice's
    ``message.content`` of a JSON reply, or its ``delta.content`` pieces of an SSE stream.

    A stream's answer counts only once the stream said it ended (``data: [DONE]``, or a
    ``finish_reason`` for the first choice) and sent no error event: an upstream that
    closes the connection cleanly in the middle of an answer, or reports an error in the
    stream (the status was 200 already), left half an answer, which recorded would stand
    for the whole one, and claim its turn so that the retry's full answer was dropped."""

    def __init__(self, content_type: str) -> None:
        self.streamed = content_type.split(";")[0].strip().lower() == "text/event-stream"
        self._buffer = bytearray()
        self._pieces: list[str] = []
        self._overflow = False
        self._ended = False  # a stream's end marker was seen
        self._failed = False  # a stream's error event was seen

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the reply."""
        if self._overflow:
            return
        self._buffer += chunk
        if self.streamed:
            *lines, rest = self._buffer.split(b"\n")
            self._buffer = bytearray(rest)
            for line in lines:
                self._event_line(bytes(line))
        elif len(self._buffer) > MAX_REPLY_BYTES:
            self._overflow = True
            self._buffer.clear()

    def text(self) -> str | None:
        """The answer's text, ``None`` if the reply had none (a tool call, an error)."""
        if self.streamed:
            self._event_line(bytes(self._buffer))
            self._buffer.clear()
            if not self._ended or self._failed:
                return None
            return "".join(self._pieces) or None
        if self._overflow:
            return None
        try:
            reply = json.loads(self._buffer)
            content = reply["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            return None
        return content if isinstance(content, str) and content else None

    def _event_line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self._ended = True
        if not data or data == b"[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if event.get("error") is not None:
            self._failed = True
        for choice in event.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                delta = choice.get("delta")
                piece = delta.get("content") if isinstance(delta, dict) else None
                if isinstance(piece, str):
                    self._pieces.append(piece)
                if choice.get("finish_reason"):
                    self._ended = True


@dataclass(frozen=True)
class Exchange:
    """One conversation turn to record."""

    user_id: str
    project: str | None
    conversation: str
    turn: int
    question: str
    answer: str

    @property
    def key(self) -> Hashable:
        """What makes two requests the same turn."""
        return (self.user_id, self.project, self.conversation, self.turn)

    def turns(self) -> list[Turn]:
        """The user's message and the assistant's answer, as the conversation path takes
        them; the turn ids name the conversation and the turn."""
        prefix = f"{self.conversation}:{self.turn}"
        return [Turn("user", self.question, f"{prefix}:user"),
                Turn("assistant", self.answer, f"{prefix}:assistant")]  # fmt: skip


class Recorder:
    """Records exchanges through ``engine.ingest_conversation`` on one background thread,
    each turn once."""

    def __init__(self, engine: Engine, remembered: int = REMEMBERED_TURNS) -> None:
        self.engine = engine
        self._remembered = remembered
        self._claimed: OrderedDict[Hashable, None] = OrderedDict()
        self._lock = threading.Lock()
        self._executor = Pool(1, "engrain-proxy-record")

    def submit(self, exchange: Exchange) -> bool:
        """Queue ``exchange`` unless its turn was recorded (or queued) already; whether it
        was queued. Never blocks on the recording itself, nor raises: a turn that cannot
        be queued is logged and left to its next attempt."""
        if not self._claim(exchange.key):
            return False
        try:
            self._executor.submit(self._record, exchange)
        except (RuntimeError, MemoryError) as exc:  # no thread could start, or it is shut
            self._unclaim(exchange, exc)
            return False
        return True

    def drain(self) -> None:
        """Wait until every exchange queued so far is recorded (tests, shutdown)."""
        self._executor.submit(lambda: None).result()

    def close(self) -> None:
        """Record what is queued, then stop the thread."""
        self._executor.shutdown(wait=True)

    def _claim(self, key: Hashable) -> bool:
        with self._lock:
            if key in self._claimed:
                self._claimed.move_to_end(key)
                return False
            self._claimed[key] = None
            while len(self._claimed) > self._remembered:
                self._claimed.popitem(last=False)
            return True

    def _record(self, exchange: Exchange) -> Any:
        try:
            return self.engine.ingest_conversation(
                exchange.turns(), exchange.user_id, exchange.conversation,
                project=exchange.project, metadata={"source": "proxy"},
            )  # fmt: skip
        except Exception as exc:  # a failed recording must never reach a request
            self._unclaim(exchange, exc)
            return None

    def _unclaim(self, exchange: Exchange, exc: BaseException) -> None:
        """``exchange`` was not recorded (``exc``): logged, its turn free for a retry."""
        log.warning("recording turn %d of %s for user %s failed: %s: %s",
                    exchange.turn, exchange.conversation, exchange.user_id,
                    type(exc).__name__, exc)  # fmt: skip
        with self._lock:
            self._claimed.pop(exchange.key, None)
