"""The optional LLM: an OpenAI-compatible chat-completions client.

Used only where the specification allows one (tier 1 prose, large tier 2 clusters, session
summaries), never required. Any server that speaks ``POST {base}/chat/completions`` works:
Ollama (``http://localhost:11434/v1``), vLLM, llama.cpp's server, OpenAI. Configured by the
``llm_url``, ``llm_model`` and ``llm_api_key`` settings; without ``llm_url`` there is no LLM
and every caller uses its rule-based path.

Timeouts and transient failures (connection errors, 408, 429, 5xx) are retried with
exponential backoff; what still fails raises :class:`~engrain.errors.LLMError`, which the
callers turn into a logged warning and the rule-based result. Nothing is ever lost to an
LLM failure: the caller's data is written either way.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engrain.errors import ConfigError, LLMError

#: Statuses worth another try: timeouts, rate limits, server trouble.
RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class LLMClient:
    """A chat-completions endpoint. ``complete(prompt)`` returns the reply text."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 30.0
    retries: int = 2
    backoff: float = 0.5
    temperature: float = 0.2
    max_tokens: int = 512

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"llm_url must be an http(s) URL, not {self.base_url!r}")
        if not self.model:
            raise ConfigError("llm_model must name the model the endpoint serves")
        if self.timeout <= 0 or self.retries < 0:
            raise ConfigError("llm_timeout must be > 0 and llm_retries >= 0")

    @property
    def endpoint(self) -> str:
        """The chat-completions URL."""
        base = self.base_url.rstrip("/")
        return base if base.endswith("/chat/completions") else base + "/chat/completions"

    def complete(self, prompt: str, *, system: str | None = None) -> str:
        """The model's reply to ``prompt`` (one user message, optional system message)."""
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        body = {
            "model": self.model, "messages": messages, "temperature": self.temperature,
            "max_tokens": self.max_tokens, "stream": False,
        }  # fmt: skip
        data = self._post(body)
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"malformed reply from {self.endpoint}: no choices[0].message") from exc
        if not isinstance(content, str):
            raise LLMError(f"malformed reply from {self.endpoint}: content is not text")
        return content.strip()

    __call__ = complete

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        payload = json.dumps(body).encode("utf-8")
        last = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            request = urllib.request.Request(self.endpoint, payload, headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if exc.code in RETRYABLE_STATUS:
                    continue
                raise LLMError(f"{self.endpoint} refused the request: HTTP {exc.code}") from exc
            except TimeoutError as exc:
                last = f"timed out after {self.timeout:g} s"
                del exc
                continue
            except (urllib.error.URLError, ConnectionError, OSError) as exc:
                last = f"cannot reach it ({getattr(exc, 'reason', exc)})"
                continue
            except http.client.HTTPException as exc:  # a cut-off body, a garbled status line
                last = f"broken reply ({exc!r})"
                continue
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise LLMError(f"malformed reply from {self.endpoint}: not JSON") from exc
            if not isinstance(data, dict):
                raise LLMError(f"malformed reply from {self.endpoint}: not a JSON object")
            return data
        raise LLMError(f"{self.endpoint} failed after {self.retries + 1} attempts: {last}")


def make_llm(
    url: str | None,
    model: str | None,
    api_key: str | None = None,
    *,
    timeout: float = 30.0,
    retries: int = 2,
) -> LLMClient | None:
    """The configured client, or ``None`` when no ``url`` is set (rule-based everywhere)."""
    if not url:
        return None
    if not model:
        raise ConfigError("llm_url is set but llm_model is not")
    return LLMClient(url, model, api_key, timeout=timeout, retries=retries)


#: What the rest of engrain needs of an LLM: a prompt in, text out.
Complete = Callable[[str], str]
