"""engrain's HTTP server (FastAPI + uvicorn): the ``server`` extra,
``pip install 'engrain[server]'``. Nothing in the core imports this package.

>>> from engrain.server import create_app
>>> app = create_app(Engine())        # serve it with uvicorn, or ``engrain serve``
"""

from engrain.server.app import MCP_PATH, create_app

__all__ = ["MCP_PATH", "create_app"]
