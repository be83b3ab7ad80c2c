"""An OpenAI-compatible proxy with memory: ``POST /v1/chat/completions`` and
``GET /v1/models`` on the engrain server, forwarded to an upstream (OpenAI, Ollama, vLLM,
llama.cpp, LM Studio). ``docs/proxy.md`` has the whole story.

A thin layer over the engine, one module per step:

* :mod:`.config`: where the upstream is and how the proxy behaves (:class:`ProxyConfig`).
* :mod:`.inject`: the request's latest user message, turn and conversation id, and the
  request with the memory block put in.
* :mod:`.upstream`: the httpx client, the headers that go up and come back, the errors.
* :mod:`.record`: the assistant's answer (whole or from stream deltas) and the
  background recording of each turn, once.
* :mod:`.routes`: the two routes: authenticate, one ``context()``, forward, record.
"""

from engrain.server.proxy.config import ProxyConfig
from engrain.server.proxy.routes import install

__all__ = ["ProxyConfig", "install"]
