"""engrain as a client of an engrain server: :class:`Client` and :class:`AsyncClient` have
the methods, arguments and result types of :class:`~engrain.Engine` and
:class:`~engrain.AsyncEngine`, over HTTP, so an application moves from an embedded engine to
a server by changing one line::

    from engrain.client import Client
    memory = Client("http://127.0.0.1:8420", api_key="egk_...")   # was: Engine()

It needs httpx, the ``client`` extra (``pip install 'engrain[client]'``); ``import
engrain`` never imports it. ``docs/client.md`` lists what differs from the engine.
"""

from __future__ import annotations

try:
    import httpx  # noqa: F401  (checked here, so the message names the extra)
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "engrain.client needs httpx, which the 'client' extra installs: "
        "pip install 'engrain[client]'"
    ) from exc

from engrain.client.aio import AsyncClient
from engrain.client.sync import Client, Records

__all__ = ["AsyncClient", "Client", "Records"]
