"""Background loads of what a PostgreSQL store holds in process per user: one load per key
at a time, paced, failures logged (issue 18, session 17).

The learnings searched in process (``learnings.py``) and the working sets (``working.py``)
both read a user's rows off the request path: a call that finds nothing held (or held
too far behind) is served by SQL and starts a load; the next calls are served from what
the load publishes. :class:`Loader` is what they share:

* **One load per key.** A load of a key starts only while none of that key runs (the
  owner's lock guards the record of each key's loads, :class:`Load`); loads of other keys
  run beside it, each in its own daemon thread (or in the calling thread: ``background``
  False, for tests).
* **Paced.** After a load that took ``took`` seconds, the next of that key starts no sooner
  than the owner's ``pause(took, full)`` later (:func:`four_times`: four times as long, so
  a key's loads take at most a fifth of a core, and at least a floor for a full load): a
  user another process writes to all the time is served by SQL, not reloaded without end.
  A loader with light loads (a delta instead of a full read, ``light_loads``) paces the
  two apart: its job marks a load light (``load.full = False``), a light load may start at
  once after a full one, and the job itself checks ``load.full_not_before`` before it
  reads everything again.
* **Failures** are logged, never raised into a call, and leave the key to SQL until the
  next load is due; after :meth:`Loader.close` a failure is not reported (the pool closed
  under the load) and no load starts. A load's thread that cannot start (memory or the
  process's threads ran out: ``threads.started``) is logged and leaves the key free: the
  next asking starts one.

Threads and processes: the owner's lock is held only to check and update a key's record,
never during a load, so a call that starts a load waits for nothing. A load publishes what
it read under the owner's lock only if it is newer than what is held (the owner's rule),
so two loads of one user in two processes, or one load that a newer delta overtook,
never replace newer rows by older ones; each process paces its own loads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from engrain.threads import started

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

#: A load is background work: the first calls after a store opens, served by SQL, run beside
#: it, so it must not take what they need. On the database its statements run on one core
#: (this, in its transaction): a large user's rows are read by a scan of the table, which
#: PostgreSQL otherwise spreads over parallel workers (at 1,000,000 memories three
#: processes, ~4 s of the server's CPU for each of the pool's seqs, the learnings' count and
#: their seqs: every core of a small server while the first call waits for its own
#: statements). In the process it holds the GIL for no long stretch: a held graph's check
#: reads the seqs as one value (``held_graph.Scope.seqs_sql``), not a row object each (a
#: million: ~0.45 s in psycopg's loop), and asks the graph about them a chunk at a time
#: (``held_graph.holds_every``). docs/postgres.md, "Session 26 … (h1)".
ONE_CORE = "SET LOCAL max_parallel_workers_per_gather = 0"


@dataclass
class Load:
    """A key's loads: the thread running one, when the next may start, when the next full
    one may (loaders with light loads), and whether the one running reads everything."""

    thread: threading.Thread | None = None
    not_before: float = 0.0
    full_not_before: float = 0.0
    full: bool = True


class Answering:
    """The calls a store is answering for an engine (``Engine``'s calls in flight:
    ``PostgresStore.answering``), and the loads their reads asked for meanwhile.

    A load serves the calls after the one that asked for it: that call is served by SQL
    whatever the load does, so the load begins once a call has answered (the first to end
    of those in flight, so that a server never without a call in flight still loads) rather
    than beside it, where it took the cores and the GIL the call was waiting for — at
    1,000,000 memories the first ``context()`` after a store opened took 0.82 s (median of
    7 at load 24-26) with its loads beside it, 0.43 s with them after it (docs/postgres.md,
    "Session 26 … (h1)"). Outside any call (a store used without an engine, tests,
    benchmarks) a load begins when asked.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._due: dict[Hashable, Callable[[], None]] = {}  # one start per what is loaded

    @contextmanager
    def call(self) -> Iterator[None]:
        """One call answered inside the ``with`` block; the loads asked for while it (or
        any other call) ran begin as it ends."""
        with self._lock:
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                due, self._due = self._due, {}
            for start in due.values():
                try:
                    start()
                except Exception:  # the call answered (and wrote): a load is never its error
                    log.exception("starting a load failed")

    def later(self, what: Hashable, start: Callable[[], None]) -> None:
        """``start()`` now if no call is being answered, else once one has been (once for
        each ``what``: asked again meanwhile, as the last asking says)."""
        with self._lock:
            if self._running:
                self._due[what] = start  # the last asking decides
                return
        start()


def four_times(took: float, floor: float) -> float:
    """Seconds before a key's next load may start after one that took ``took``: four times
    as long (its loads then take at most a fifth of a core), and at least ``floor``."""
    return max(floor, 4.0 * took)


class Loader(Generic[K]):
    """Starts ``job(key, load)`` in a thread, one per key at a time, paced by ``pause(took,
    full)`` (module docstring). ``lock`` is the owner's (the records are read and changed
    under it); ``what`` names what a load reads in the log of a failure; ``name`` is the
    threads'; ``answering`` (if given) holds the loads asked for during a call until a
    call has answered (:class:`Answering`)."""

    def __init__(
        self,
        lock: threading.Lock,
        job: Callable[[K, Load], None],
        pause: Callable[[float, bool], float],
        *,
        what: str,
        name: str,
        background: bool = True,
        light_loads: bool = False,
        answering: Answering | None = None,
    ) -> None:
        self._lock = lock
        self._job = job
        self._pause = pause
        self._what = what
        self._name = name
        self.background = background
        self._light_loads = light_loads
        self._loads: dict[K, Load] = {}
        self._closed = False
        self._answering = answering

    def start(self, key: K, wanted: Callable[[], bool] | None = None) -> None:
        """Start a load of ``key`` unless the loader is closed, ``wanted()`` (asked under
        the owner's lock) is false, a load of ``key`` runs, or its pause has not passed;
        during a call, once a call has answered (:class:`Answering`), and those asked
        then."""
        if self._answering is None:
            self._start(key, wanted)
        else:
            self._answering.later((self, key), lambda: self._start(key, wanted))

    def _start(self, key: K, wanted: Callable[[], bool] | None) -> None:
        with self._lock:
            if self._closed or (wanted is not None and not wanted()):
                return
            load = self._loads.setdefault(key, Load())
            if load.thread is not None or time.monotonic() < load.not_before:
                return
            thread = threading.Thread(
                target=self._run, args=(key, load), daemon=True, name=self._name
            )
            load.thread, load.full = thread, True
        if not self.background:
            self._run(key, load)
        elif not started(thread):  # out of memory or threads: the next asking starts one
            with self._lock:
                load.thread = None

    def _run(self, key: K, load: Load) -> None:
        started = time.monotonic()
        try:
            self._job(key, load)
        except Exception:  # a failed load leaves the key served by SQL
            if not self._closed:  # else the store closed under it: nothing to report
                log.exception("loading %s failed", self._what)
        finally:
            with self._lock:
                load.thread = None
                now = time.monotonic()
                pause = self._pause(now - started, load.full)
                if load.full and self._light_loads:  # light loads may start at once
                    load.full_not_before = now + pause
                else:
                    load.not_before = now + pause

    def get(self, key: K) -> Load | None:
        """The record of ``key``'s loads, if one ever started (read under the owner's
        lock)."""
        return self._loads.get(key)

    def close(self) -> None:
        """Start no more loads; a load running ends as its job decides (call under the
        owner's lock)."""
        self._closed = True
