"""engrain's HTTP server (FastAPI + uvicorn): the ``server`` extra,
``pip install 'engrain[server]'``. Nothing in the core imports this package.

>>> from engrain.server import create_app
>>> app = create_app(Engine())        # serve it with uvicorn, or ``engrain serve``

``create_app`` and ``MCP_PATH`` are looked up on first use, so that importing one small
module of the package (:mod:`engrain.server.mounting`, which :mod:`engrain.mcp` uses) does
not import FastAPI and every route.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engrain.server.app import MCP_PATH, create_app

__all__ = ["MCP_PATH", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from engrain.server import app

        return getattr(app, name)
    raise AttributeError(f"module 'engrain.server' has no attribute {name!r}")
