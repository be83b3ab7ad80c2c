"""A private Chroma server for the test session, and store URLs over it.

``chroma run`` starts the first time a test asks for ``chroma_server``, on loopback at a
free port with its data in a temporary directory, and is stopped and deleted when the
session ends. Each test gets its own collection (and its own sidecar in ``tmp_path``), so
stores opened in different tests never see each other. Without the ``chroma`` extra the
tests skip.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

_collections = itertools.count()

#: How long the server may take to answer its first heartbeat.
START_TIMEOUT = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _chroma_command() -> list[str]:
    script = Path(sys.executable).with_name("chroma")
    if not script.exists():
        pytest.skip("the chroma command is not installed (pip install 'engrain[chroma]')")
    return [str(script)]


def start_server(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``chroma run`` on loopback with its data in ``directory``; the process and its
    ``host:port`` once it answers a heartbeat."""
    import httpx

    port = _free_port()
    log = open(directory / "server.log", "wb")  # noqa: SIM115 (closed with the process)
    process = subprocess.Popen(
        [*_chroma_command(), "run", "--path", str(directory / "data"),
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"chroma run exited with {process.returncode}: "
                f"{(directory / 'server.log').read_text(errors='replace')[-2000:]}"
            )
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1).is_success:
                return process, f"127.0.0.1:{port}"
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_server(process)
    raise RuntimeError(f"chroma run did not answer within {START_TIMEOUT:.0f} s")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """Stop the server started by :func:`start_server` (its whole process group)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="session")
def chroma_server() -> Iterator[str]:
    """``host:port`` of the session's Chroma server; started once, stopped and deleted at
    the end of the session."""
    pytest.importorskip("chromadb")
    directory = Path(tempfile.mkdtemp(prefix="engrain-chroma-"))
    process, address = start_server(directory)
    try:
        yield address
    finally:
        stop_server(process)
        shutil.rmtree(directory, ignore_errors=True)


def http_url(address: str, sidecar: Path) -> str:
    """A ``chroma+http://`` URL on the server at ``address`` with a collection of its own
    and the sidecar at ``sidecar``."""
    collection = f"t{os.getpid()}-{next(_collections)}"
    return f"chroma+http://{address}?collection={collection}&state={sidecar}"


@pytest.fixture
def chroma_http_url(chroma_server: str, tmp_path: Path) -> str:
    """A URL naming a fresh collection on the session's server, sidecar in ``tmp_path``."""
    return http_url(chroma_server, tmp_path / "chroma-state.db")
