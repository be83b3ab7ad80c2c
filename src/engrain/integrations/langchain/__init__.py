"""engrain in LangChain and LangGraph (``pip install 'engrain[langchain]'``):

- :class:`EngrainRetriever`, a ``BaseRetriever`` over ``Engine.recall`` (or ``context``)
  returning ``Document``\\ s with the memory's metadata;
- :class:`EngrainStore`, a LangGraph ``BaseStore`` for long-term memory whose namespaces
  map to users and projects (``(user_id, project, ...)``);
- :func:`with_memory` and :func:`memory_injector`, which put ``context()`` for the latest
  human message into a chat prompt as a system message.

``docs/integrations.md`` shows each with an example and lists the standard tests they pass.
"""

from __future__ import annotations

from engrain.integrations import require

require(["langchain_core", "langgraph.store.base"], "langchain")

from engrain.integrations.langchain.prompt import memory_injector, with_memory  # noqa: E402
from engrain.integrations.langchain.retriever import EngrainRetriever  # noqa: E402
from engrain.integrations.langchain.store import EngrainStore  # noqa: E402

__all__ = ["EngrainRetriever", "EngrainStore", "memory_injector", "with_memory"]
