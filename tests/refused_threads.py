"""Threads that cannot start, for tests of what a store or pool does when the process has no
room for another thread's stack."""

from __future__ import annotations

import threading

import pytest


def refuse_threads(prefix: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Threads whose name starts with ``prefix`` cannot start (as when the process is out
    of memory for their stacks); the names refused, as they are."""
    refused: list[str] = []
    start = threading.Thread.start

    def maybe(self: threading.Thread) -> None:
        if self.name.startswith(prefix):
            refused.append(self.name)
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", maybe)
    return refused
