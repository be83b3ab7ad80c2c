"""What ``import engrain`` loads: the asynchronous engine only when asked for (issue 18)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import engrain


def test_import_engrain_leaves_asyncio_out() -> None:
    """A fresh interpreter: ``import engrain`` does not import asyncio (~1.6 MB resident);
    asking for ``AsyncEngine`` does."""
    code = (
        "import sys, engrain\n"
        "print('asyncio' in sys.modules)\n"
        "engrain.AsyncEngine\n"
        "print('asyncio' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )  # fmt: skip
    assert done.stdout.split() == ["False", "True"]


def test_async_engine_is_the_aio_modules_and_unknown_names_raise() -> None:
    from engrain import AsyncEngine
    from engrain.aio import AsyncEngine as Direct

    assert AsyncEngine is Direct is engrain.AsyncEngine
    assert "AsyncEngine" in engrain.__all__
    with pytest.raises(AttributeError):
        _ = engrain.NoSuchThing  # type: ignore[attr-defined]


def test_the_mcp_package_loads_no_fastapi() -> None:
    """``engrain mcp`` over stdio needs the SDK, not the HTTP app: ``engrain.mcp`` takes
    ``mount`` from ``engrain.server.mounting`` (Starlette only), and ``engrain.server``
    imports its app only when ``create_app`` is asked for."""
    code = (
        "import sys, engrain.mcp\n"
        "print(sorted({'fastapi', 'engrain.server.app'} & set(sys.modules)))\n"
        "from engrain.server import create_app\n"
        "print('fastapi' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "True"]
