"""One background thread per engine for work no caller should wait on: recompiling stale
tiers and compressing old sessions. A job is keyed (e.g. ``("tiers", user, project)``), so
a burst of requests for the same work runs it once; a request that arrives while that job
is already running (and may have read the data before the request's write) runs it once
more afterwards, so no request is lost. Failures are logged, never raised into a request,
and leave things as they were (a stale cache, uncompressed sessions)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent import futures
from concurrent.futures import Future
from typing import Any

from engrain.threads import Pool, cannot_start

log = logging.getLogger(__name__)


class Worker:
    """A single worker thread with keyed, deduplicated jobs."""

    def __init__(self, name: str = "engrain-background") -> None:
        self._name = name
        self._pending: dict[Hashable, Future[Any]] = {}
        self._again: dict[Hashable, Callable[[], Any]] = {}  # asked for while running
        self._lock = threading.Lock()
        self._executor: Pool | None = None
        self._closed = False

    def submit(self, key: Hashable, job: Callable[[], Any]) -> Future[Any]:
        """Run ``job`` in the background. If the job of that ``key`` is queued, that run
        serves this request too (its future is returned); if it is running, it runs once
        more when it finishes. Once the worker is closed nothing runs (no thread starts
        again for a call that outlived its engine's ``close()``): the future is cancelled."""
        with self._lock:
            if self._closed:
                future: Future[Any] = Future()
                future.cancel()
                return future
            current = self._pending.get(key)
            if current is not None and not current.done():
                if current.running():
                    self._again[key] = job
                return current
            return self._start(key, job)

    def _start(self, key: Hashable, job: Callable[[], Any]) -> Future[Any]:
        if self._executor is None:
            # its thread started bounded: a call out of memory never hangs in its submit
            self._executor = Pool(1, self._name)
        try:
            future = self._executor.submit(self._logged, key, job)
        except (RuntimeError, MemoryError) as exc:  # out of memory as its thread starts
            if isinstance(exc, RuntimeError) and not cannot_start(exc):
                raise
            # after the call's commit: not run now (the next request of the key runs it);
            # the executor that holds it queued without a thread is left to the collector
            log.warning("background job %r not started (%s)", key, exc)
            self._executor = None
            failed: Future[Any] = Future()
            failed.cancel()
            return failed
        self._pending[key] = future
        return future

    def _logged(self, key: Hashable, job: Callable[[], Any]) -> Any:
        try:
            return job()
        except Exception:
            log.exception("background job %r failed", key)
            raise
        finally:
            with self._lock:
                again = self._again.pop(key, None)
                if again is not None and self._executor is not None:
                    self._start(key, again)
                else:  # its work is done: a finished job is not kept (one per key ever asked)
                    self._pending.pop(key, None)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every job submitted so far, and every re-run they asked for, is done
        (failed ones included), or ``timeout`` seconds have passed (``None``: no bound);
        whether they are done. The bound is the whole wait's, however many jobs and
        re-runs there are; a job's own ``TimeoutError`` is its failure, not the wait's."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                pending = [f for f in self._pending.values() if not f.done()]
            if not pending:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            futures.wait(pending, timeout=left)  # their errors are logged by the job

    def close(self) -> None:
        """Finish the jobs under way and stop the thread."""
        self.wait()
        with self._lock:  # taken out first: a finishing job then schedules no re-run
            executor, self._executor = self._executor, None
            self._again.clear()
            self._closed = True
        if executor is not None:
            executor.shutdown(wait=True)
