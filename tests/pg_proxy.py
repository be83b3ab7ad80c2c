"""A TCP proxy in front of the test server's Unix socket that breaks a connection at its
``COMMIT``: the way to make a write's connection fail after (or just before) the server
received the commit, at a known point, with a real server.

The proxy reads the client's stream as protocol messages (after the startup packet, which
has no type byte; the URL turns SSL and GSS encryption off so there is no negotiation).
Armed with a :class:`Break`, the first ``Parse`` of ``COMMIT`` it sees is handled so:

* ``AFTER``: passed on, with whatever the client sends in the next moment (its ``Sync``);
  then both sockets are closed, the server's answer never reaching the client (the server
  commits: its ``Execute`` of ``COMMIT`` ends the transaction);
* ``AFTER_AND_AWAY``: as ``AFTER``, then every other connection is closed and new ones are
  refused (the server is away for the check);
* ``BEFORE``: not passed on; both sockets closed (the server rolls the transaction back);
* ``HOLD``: not passed on; the client's socket is closed and the server's kept open, so the
  server's transaction stays open, holding what it wrote, until :meth:`PgProxy.close`.
"""

from __future__ import annotations

import contextlib
import enum
import select
import socket
import struct
import threading
import time
from urllib.parse import parse_qs, urlsplit

from psycopg.conninfo import make_conninfo


class Break(enum.Enum):
    AFTER = "after"
    AFTER_AND_AWAY = "after_and_away"
    BEFORE = "before"
    HOLD = "hold"


def _socket_path(server_url: str) -> str:
    parts = urlsplit(server_url)
    host = parse_qs(parts.query)["host"][0]
    return f"{host}/.s.PGSQL.{parts.port or 5432}"


class PgProxy:
    """Listens on 127.0.0.1; :attr:`url` is ``server_url`` through it."""

    def __init__(self, server_url: str) -> None:
        self._target = _socket_path(server_url)
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.url = make_conninfo(
            server_url, host="127.0.0.1", port=str(port), sslmode="disable",
            gssencmode="disable",
        )  # fmt: skip
        self._lock = threading.Lock()
        self._armed: Break | None = None
        self._away = False
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._held: list[socket.socket] = []
        self.broken = threading.Event()  # set once the armed break happened
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, how: Break) -> None:
        with self._lock:
            self._armed = how
            self.broken.clear()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for client, server in self._pairs:
                _close(client, server)
            for server in self._held:
                _close(server)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                away = self._away
            if away:
                _close(client)
                continue
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self._target)
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _take(self) -> Break | None:
        with self._lock:
            how, self._armed = self._armed, None
            return how

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        pending = b""
        started = False  # the startup packet has been passed on
        # a socket another thread closed (close(), AFTER_AND_AWAY): select's ValueError
        with contextlib.suppress(OSError, ValueError):
            while True:
                ready, _, _ = select.select([client, server], [], [])
                if server in ready:
                    data = server.recv(65536)
                    if not data:
                        break
                    client.sendall(data)
                if client not in ready:
                    continue
                data = client.recv(65536)
                if not data:
                    break
                pending += data
                out, pending, started, commit_at = _split(pending, started)
                how = None if commit_at is None else self._take()
                if how is None or commit_at is None:
                    server.sendall(out)
                    continue
                self._break(how, client, server, out[:commit_at], out[commit_at:] + pending)
                return
        _close(client, server)

    def _break(
        self, how: Break, client: socket.socket, server: socket.socket, before: bytes,
        rest: bytes,
    ) -> None:  # fmt: skip
        server.sendall(before)
        if how is Break.BEFORE:
            _close(client, server)
            self.broken.set()
            return
        if how is Break.HOLD:
            _close(client)
            with self._lock:
                self._held.append(server)
            self.broken.set()
            return
        server.sendall(rest)
        client.settimeout(0.3)  # the client's Sync, if it comes apart
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            try:
                more = client.recv(65536)
            except OSError:
                break
            if not more:
                break
            server.sendall(more)
        time.sleep(0.2)  # the server reads the commit before it sees the connection end
        if how is Break.AFTER_AND_AWAY:
            with self._lock:
                self._away = True
                pairs = list(self._pairs)
            for pair in pairs:
                _close(*pair)
        _close(client, server)
        self.broken.set()


def _split(data: bytes, started: bool) -> tuple[bytes, bytes, bool, int | None]:
    """The whole messages of ``data`` (and what is left of a partial one), whether the
    startup packet has passed, and the offset in the former of a ``Parse`` of ``COMMIT``."""
    at = 0
    commit_at = None
    if not started:
        if len(data) < 4:
            return b"", data, False, None
        (length,) = struct.unpack(">I", data[:4])
        if len(data) < length:
            return b"", data, False, None
        at, started = length, True
    while len(data) - at >= 5:
        kind = data[at : at + 1]
        (length,) = struct.unpack(">I", data[at + 1 : at + 5])
        if len(data) - at < 1 + length:
            break
        body = data[at + 5 : at + 1 + length]
        if commit_at is None and kind == b"P" and body.split(b"\x00")[1] == b"COMMIT":
            commit_at = at
        at += 1 + length
    return data[:at], data[at:], started, commit_at


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
