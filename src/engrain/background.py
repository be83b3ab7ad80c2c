"""One background thread per engine for work no caller should wait on: recompiling stale
tiers and compressing old sessions. A job is keyed (e.g. ``("tiers", user, project)``), so
a burst of requests for the same work runs it once; failures are logged, never raised into
a request, and leave things as they were (a stale cache, uncompressed sessions)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)


class Worker:
    """A single worker thread with keyed, deduplicated jobs."""

    def __init__(self, name: str = "engrain-background") -> None:
        self._name = name
        self._pending: dict[Hashable, Future[Any]] = {}
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, key: Hashable, job: Callable[[], Any]) -> Future[Any]:
        """Run ``job`` in the background unless the job of that ``key`` is already queued
        or running (then its future is returned)."""
        with self._lock:
            running = self._pending.get(key)
            if running is not None and not running.done():
                return running
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=self._name)
            future = self._executor.submit(self._logged, key, job)
            self._pending[key] = future
            return future

    @staticmethod
    def _logged(key: Hashable, job: Callable[[], Any]) -> Any:
        try:
            return job()
        except Exception:
            log.exception("background job %r failed", key)
            raise

    def wait(self, timeout: float | None = None) -> None:
        """Block until every job submitted so far is done (failed ones included)."""
        with self._lock:
            pending = list(self._pending.values())
        for future in pending:
            try:
                future.result(timeout)
            except Exception:  # already logged
                continue

    def close(self) -> None:
        """Finish the jobs under way and stop the thread."""
        self.wait()
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
