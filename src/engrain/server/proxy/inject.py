"""A chat-completions request as the proxy reads it, and the same request with memory.

Only ``messages`` is ever changed, by one message or one appended paragraph; every other
field (tools, response_format, temperature, fields this module has never heard of) goes up
as the caller sent it. A body that is not a JSON object with a ``messages`` list is
forwarded as it came, without memory: the upstream answers it as it would anyway.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

#: Roles whose messages instruct the model; the block goes after them (or into the first).
SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True)
class ChatRequest:
    """What the proxy needs from one request body.

    ``message`` is the text of the latest user message (``None``: nothing to look up),
    ``previous`` the text of the user message before it (``None``: none, or no text; the
    user's turn, not the assistant's: it names what the user asked about, in the user's
    words, where an answer is long and says what the model said), ``turn`` how many user
    messages came before it (0 for the first), ``conversation`` an
    id of the conversation that every request of it shares (a hash of its system prompt
    and first user message), ``user`` the body's standard ``user`` field."""

    raw: bytes
    body: dict[str, Any] | None
    model: str | None = None
    message: str | None = None
    previous: str | None = None
    turn: int = 0
    conversation: str | None = None
    stream: bool = False
    user: str | None = None


def parse(raw: bytes) -> ChatRequest:
    """Read ``raw``; a body the proxy cannot read is kept as is, with nothing extracted."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep, a number too long
        return ChatRequest(raw, None)
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return ChatRequest(raw, None)
    messages = [m for m in body["messages"] if isinstance(m, Mapping)]
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    message = text_of(messages[users[-1]].get("content")) if users else None
    previous = text_of(messages[users[-2]].get("content")) if len(users) > 1 else None
    model, user = body.get("model"), body.get("user")
    return ChatRequest(
        raw, body,
        model=model if isinstance(model, str) and model.strip() else None,
        message=message if message and message.strip() else None,
        previous=previous if previous and previous.strip() else None,
        turn=max(len(users) - 1, 0),
        conversation=conversation_id(messages, users[0]) if users else None,
        stream=body.get("stream") is True,
        user=user if isinstance(user, str) and user.strip() else None,
    )  # fmt: skip


def text_of(content: object) -> str | None:
    """The text of a message's ``content``: the string, or the text parts of a list of
    content parts joined by newlines (images and audio have none)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p["text"] for p in content
                 if isinstance(p, Mapping) and p.get("type") == "text"
                 and isinstance(p.get("text"), str)]  # fmt: skip
        return "\n".join(texts) if texts else None
    return None


def conversation_id(messages: Sequence[Mapping[str, Any]], first_user: int) -> str:
    """An id every request of one conversation shares: the hash of its instructions (the
    system messages before its first user message) and its first user message. Chat
    clients resend the whole history each turn, so the pair stays the same."""
    parts = [f"{m.get('role')}\x1f{text_of(m.get('content')) or ''}"
             for m in messages[: first_user + 1]
             if m.get("role") in SYSTEM_ROLES or m is messages[first_user]]  # fmt: skip
    digest = hashlib.sha256("\x1e".join(parts).encode("utf-8", "surrogatepass"))
    return "chat-" + digest.hexdigest()[:24]


def with_memory(body: Mapping[str, Any], block: str, mode: Literal["system", "append"]) -> bytes:
    """The request body with ``block`` in it: as a system message after the leading
    system (and developer) messages, or appended to the first of them (a system message
    is added at the front if there is none). Nothing else changes."""
    messages = list(body["messages"])
    leading = 0
    while leading < len(messages) and _role(messages[leading]) in SYSTEM_ROLES:
        leading += 1
    if mode == "append" and leading:
        messages[0] = _appended(messages[0], block)
    else:
        at = 0 if mode == "append" else leading
        messages.insert(at, {"role": "system", "content": block})
    updated = {**body, "messages": messages}
    return json.dumps(updated, ensure_ascii=False, separators=(",", ":")).encode()


def _role(message: object) -> object:
    return message.get("role") if isinstance(message, Mapping) else None


def _appended(message: Mapping[str, Any], block: str) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": block}]}
    text = content if isinstance(content, str) else ""
    return {**message, "content": f"{text}\n\n{block}" if text else block}
