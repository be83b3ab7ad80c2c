"""The proxy's configuration: the upstream and its key, the timeout, where memory goes
and whether exchanges are recorded."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from engrain.config import Settings
from engrain.errors import ConfigError

#: The largest chat request the proxy reads (32 MiB), where every other route takes 1 MiB:
#: how large a request is, is the upstream's to judge (a vision request carries its images
#: base64-encoded, and one image of 20 MiB, the most OpenAI's and Azure's APIs take,
#: is 26.7 MiB so), and the proxy holds the body only to add memory to it.
CHAT_BODY_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ProxyConfig:
    """How the proxy reaches its upstream and treats each request.

    ``upstream`` is the base URL an OpenAI client would be given (``…/v1``): the proxy
    forwards ``POST /v1/chat/completions`` to ``{upstream}/chat/completions``.
    ``upstream_key`` is sent upstream as ``Authorization: Bearer`` when the caller
    authenticates with its engrain key in ``Authorization``; it never appears in a log
    line, a response or this object's ``repr``. ``max_body_bytes`` bounds a chat request's
    body (:data:`CHAT_BODY_BYTES`; past it, 413)."""

    upstream: str
    upstream_key: str | None = field(default=None, repr=False)
    timeout: float = 120.0
    inject: Literal["system", "append"] = "system"
    record: bool = True
    max_body_bytes: int = CHAT_BODY_BYTES

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"the proxy upstream must be an http(s) URL, not {self.upstream!r}")
        if not self.timeout > 0:
            raise ConfigError(f"the proxy timeout must be positive, not {self.timeout!r}")
        if isinstance(self.max_body_bytes, bool) or not (
            isinstance(self.max_body_bytes, int) and self.max_body_bytes > 0
        ):
            raise ConfigError(f"the proxy's max_body_bytes must be a positive number of bytes, "
                              f"not {self.max_body_bytes!r}")  # fmt: skip
        if self.inject not in ("system", "append"):
            raise ConfigError(f"proxy_inject must be 'system' or 'append', not {self.inject!r}")
        object.__setattr__(self, "upstream", self.upstream.rstrip("/"))

    @classmethod
    def from_settings(
        cls, settings: Settings, environ: Mapping[str, str] | None = None
    ) -> ProxyConfig | None:
        """The proxy the settings describe (``None`` without ``proxy_upstream``). The key is
        read from the environment variable ``proxy_upstream_key_env`` names; a name given
        but unset is a :class:`ConfigError` (the proxy would otherwise go up keyless)."""
        if settings.proxy_upstream is None:
            return None
        env = os.environ if environ is None else environ
        key = None
        name = settings.proxy_upstream_key_env
        if name is not None:
            key = env.get(name) or None
            if key is None:
                raise ConfigError(f"the upstream key variable {name} is not set or is empty")
        return cls(settings.proxy_upstream, key, settings.proxy_timeout,
                   settings.proxy_inject, settings.proxy_record)  # fmt: skip

    def url(self, path: str) -> str:
        """The upstream URL of ``path`` (relative to the ``/v1`` base)."""
        return f"{self.upstream}/{path.lstrip('/')}"
