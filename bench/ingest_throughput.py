"""Ingest throughput of the engine against the raw embedder, on the same texts, in one run.

    python bench/ingest_throughput.py --out bench/results/ingest.json [--texts 2000]
    python bench/ingest_throughput.py --paths locomo --backend postgres --repeat 3
    python bench/ingest_throughput.py --paths locomo --compare /tmp/base/src --repeat 3
    python bench/ingest_throughput.py --paths locomo --compare int8 --repeat 1
    python bench/ingest_throughput.py --paths locomo --feed sessions --compare /tmp/base/src
    python bench/ingest_throughput.py --paths locomo --replay /tmp/v.npz --compare /tmp/base/src

``memory`` (issue 18's resident memory): in a fresh process, the RSS after the imports
(engrain, numpy, onnxruntime; cl100k is loaded at import), after an ``Engine`` (a
``MemoryStore``, the default embedder) has embedded one query, and after 300 more; then
the latency of one query's embedding (wall and the calling thread's CPU, p50/p95),
alternating with ``--compare`` like ``locomo``.

``locomo`` (issue 18's target): every session of LoCoMo dev through ``ingest_conversation``,
one call per session, on a fresh store (SQLite, or a private PostgreSQL with ``--backend
postgres``), in turns per second of wall time and CPU seconds of the process. Each run is a
fresh process; ``--repeat`` runs give the median. ``--compare SRC`` runs the same
measurement with ``PYTHONPATH=SRC`` (another checkout's ``src``, e.g. a ``git worktree`` of
the previous commit) alternately with this one, so before and after share the machine's
load; the CPU seconds are the steadier comparison on a busy machine. ``--replay FILE``
replaces the model by the vectors it gave each text (recorded into ``FILE`` by one run of
this checkout with the real model when ``FILE`` does not exist): every other step runs as
it does, on the same vectors and so the same dedup candidates and stored rows, and the CPU
seconds are then those of everything that is not the model, ~2 s instead of ~27, steady
enough on a busy machine to show a change of a few percent of it.

The inputs are realistic notes (one paragraph, 20–80 words) and multi-paragraph texts
(3–8 paragraphs), generated from a seed. Two engine paths are measured, each on a fresh
SQLite file so the embedding cache starts empty:

* ``ingest``: one ``Engine.ingest(text)`` call per input (clean, chunk, embed, importance,
  route, dedup, write);
* ``ingest_conversation``: the single-paragraph notes as turns, ``--turns`` per call.

Both go through the real all-MiniLM-L6-v2. Chunking means the engine embeds chunk texts,
not the inputs, so each engine run records exactly the texts it handed to the model, and
the raw embedder (``MiniLMEmbedder().embed``) is then timed on those same texts — in
batches of ``--batch`` (its best case) and in the engine's own call grouping. The headline
ratio is engine chunks/s ÷ raw batched chunks/s (target ≥ 0.9).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import common

from engrain import Engine
from engrain.embed.base import Matrix
from engrain.embed.minilm import DIM, MODEL_ID, MiniLMEmbedder
from engrain.model import Turn

USER = "bench-user"
TARGET_RATIO = 0.9
LOCOMO_TARGET = {"sqlite": 400, "postgres": 300}  # issue 18, turns/s


class RecordingEmbedder:
    """Delegates to the real embedder and remembers every batch it was given and how long
    the model took on it."""

    def __init__(self, inner: MiniLMEmbedder) -> None:
        self.inner = inner
        self.calls: list[list[str]] = []
        self.seconds = 0.0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> Matrix:
        start = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls.append(list(texts))

    @property
    def texts(self) -> list[str]:
        return [t for call in self.calls for t in call]


def engine_run(
    name: str,
    workdir: Path,
    embedder: MiniLMEmbedder,
    feed: Any,
    inputs: int,
) -> tuple[dict[str, Any], RecordingEmbedder]:
    """Run ``feed(engine)`` on a fresh store and describe the throughput and where the
    time went."""
    recorder = RecordingEmbedder(embedder)
    before = embedder.texts_embedded
    engine = common.open_engine(workdir, f"{name}.db", embedder=recorder)  # type: ignore[arg-type]
    spent: dict[str, float] = {}
    store = engine.store
    targets = [
        (store, "write", "store_write"),
        (store, "query", "store_query"),  # the dedup window and key lookups
        (store, "centroid", "centroid"),  # novelty; rebuilds the user's matrix after writes
        (store, "cached_embeddings", "cache_lookup"),
        (store, "cache_embeddings", "cache_write"),
    ]
    with engine, common.timing(targets, spent):
        start = time.perf_counter()
        outcomes = feed(engine)
        seconds = time.perf_counter() - start
    chunks = len(recorder.texts)
    assert embedder.texts_embedded - before == chunks  # nothing bypassed the recorder
    stages = {k: round(v / 1000.0, 3) for k, v in sorted(spent.items())}
    stages["embed_model"] = round(recorder.seconds, 3)
    stages["other"] = round(seconds - recorder.seconds - sum(spent.values()) / 1000.0, 3)
    return {
        "inputs": inputs,
        "calls": len(recorder.calls),
        "chunks_embedded": chunks,
        "seconds": round(seconds, 3),
        "inputs_per_s": round(inputs / seconds, 2),
        "chunks_per_s": round(chunks / seconds, 2),
        "outcomes": outcomes,
        "stage_seconds": stages,
    }, recorder


def raw_runs(embedder: MiniLMEmbedder, recorder: RecordingEmbedder, batch: int) -> dict[str, Any]:
    """The raw embedder on exactly the texts the engine embedded: in ``batch``-sized calls,
    and in the engine's own calls."""
    texts = recorder.texts
    start = time.perf_counter()
    for offset in range(0, len(texts), batch):
        embedder.embed(texts[offset : offset + batch])
    batched = time.perf_counter() - start
    start = time.perf_counter()
    for call in recorder.calls:
        embedder.embed(call)
    same_calls = time.perf_counter() - start
    return {
        "texts": len(texts),
        "batch": batch,
        "seconds": round(batched, 3),
        "texts_per_s": round(len(texts) / batched, 2),
        "same_calls_seconds": round(same_calls, 3),
        "same_calls_texts_per_s": round(len(texts) / same_calls, 2),
    }


LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"


#: The embedder's mode here: ``onnx_split`` (single-threaded runs, a call split over the
#: cores), the setting for a process that mostly ingests; ``ENGRAIN_ONNX_SPLIT=0`` measures
#: the default intra-op session instead.
SPLIT = os.environ.get("ENGRAIN_ONNX_SPLIT", "1").lower() not in ("0", "false", "no")
#: ``ENGRAIN_ONNX_INT8=1`` / ``0`` picks the int8 or the float graph (unset: the checkout's
#: default; a checkout without the choice runs its float graph either way).
INT8 = os.environ.get("ENGRAIN_ONNX_INT8")
#: ``--compare int8``: no other checkout, this one's float graph (before) against its int8
#: graph (after), alternating like any comparison.
INT8_SIDES = Path("int8")
#: ``ENGRAIN_BENCH_PIPELINE=1``: ``locomo`` feeds all the sessions to one
#: ``Engine.ingest_conversations`` call (where the checkout has it; the run records which
#: feed it used) instead of one ``ingest_conversation`` per session.
PIPELINE = os.environ.get("ENGRAIN_BENCH_PIPELINE", "0").lower() not in ("0", "false", "no")
#: ``--compare pipeline``: this checkout's per-session calls (before) against
#: ``ingest_conversations`` (after), alternating.
PIPELINE_SIDES = Path("pipeline")
#: ``ENGRAIN_BENCH_REPLAY``: ``locomo`` embeds with the vectors recorded in this file
#: (:class:`ReplayEmbedder`) instead of the model; ``ENGRAIN_BENCH_RECORD``: it records the
#: real model's vectors into this file.
REPLAY = os.environ.get("ENGRAIN_BENCH_REPLAY")
RECORD = os.environ.get("ENGRAIN_BENCH_RECORD")


class ReplayEmbedder:
    """The model's vectors for the texts it was given in a recorded run (``texts`` and
    ``vectors`` arrays of an ``.npz``), returned without running it; a text that was not
    recorded is an error (the run would no longer be the one measured)."""

    def __init__(self, path: Path) -> None:
        import numpy as np

        with np.load(path, allow_pickle=True) as data:
            self.table = dict(zip(data["texts"].tolist(), data["vectors"], strict=True))
        self.model_id = MODEL_ID
        self.dim = DIM
        self.calls = 0
        self.texts_embedded = 0

    def embed(self, texts: Sequence[str]) -> Matrix:
        """The recorded vectors of ``texts``, in order."""
        import numpy as np

        missing = [t for t in texts if t not in self.table]
        if missing:
            raise KeyError(f"{len(missing)} texts were not recorded, e.g. {missing[0][:60]!r}")
        self.calls += 1
        self.texts_embedded += len(texts)
        out: Matrix = np.array([self.table[t] for t in texts], dtype=np.float32)
        return out.reshape(len(texts), self.dim)


def save_vectors(recorder: RecordingEmbedder, path: Path) -> None:
    """Write the texts ``recorder`` saw and their vectors (embedded again: a text's vector
    depends on that text only) to ``path`` for :class:`ReplayEmbedder`."""
    import numpy as np

    texts = list(dict.fromkeys(recorder.texts))
    vectors = recorder.inner.embed(texts)
    np.savez(path, texts=np.array(texts, dtype=object), vectors=vectors)


class WalWatch:
    """The calling thread's ``store.write`` calls on a SQLite store (each an acknowledged,
    durable commit): how many extended the write-ahead log's file (an ``fdatasync`` that
    extends a file also waits for the filesystem's journal), its largest size, and their
    wall and thread CPU seconds (the wall above the CPU is mostly the wait for the disk)."""

    def __init__(self, store: Any) -> None:
        import threading

        self.log = Path(f"{store.path}-wal")
        self.caller = threading.get_ident()
        self.writes = self.extended = self.largest = 0
        self.wall = self.cpu = 0.0
        inner = store.write

        def write(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self.caller:
                return inner(*args, **kwargs)
            before = self._size()
            start, thread = time.perf_counter(), time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - start
                self.cpu += time.thread_time() - thread
                after = self._size()
                self.writes += 1
                self.extended += after > before
                self.largest = max(self.largest, after)

        store.write = write

    def _size(self) -> int:
        try:
            return self.log.stat().st_size
        except OSError:
            return 0

    def summary(self) -> dict[str, Any]:
        return {
            "writes": self.writes,
            "extended_the_log": self.extended,
            "largest_log_mb": round(self.largest / 2**20, 2),
            "write_wall_seconds": round(self.wall, 3),
            "write_thread_cpu_seconds": round(self.cpu, 3),
        }


def feed_locomo(engine: Engine, conversations: Sequence[Any]) -> dict[str, Any]:
    """Every session of ``conversations`` into ``engine`` (with :data:`PIPELINE`, in one
    ``ingest_conversations`` call when the engine has it); the outcome counts, the turns
    and the feed used."""
    import baselines as bl
    import locomo

    totals: dict[str, Any] = {"stored": 0, "merged": 0, "discarded": 0, "turns": 0}
    if not (PIPELINE and hasattr(engine, "ingest_conversations")):
        for conversation in conversations:
            for key, value in locomo.ingest(engine, conversation).items():
                totals[key] += value
        totals["feed"] = "ingest_conversation"
        return totals
    sessions = []
    for conversation in conversations:
        for session in conversation.sessions:
            at = locomo.parse_session_time(session.date_time)
            turns = [Turn(t.speaker, bl.memory_text(t)[len(t.speaker) + 2 :], t.dia_id, at)
                     for t in session.turns]  # fmt: skip
            sessions.append({"turns": turns, "user_id": conversation.conversation_id,
                             "session_id": f"session_{session.index}", "now": at})  # fmt: skip
            totals["turns"] += len(turns)
    for report in engine.ingest_conversations(sessions):
        for outcome in report.outcomes:
            totals[outcome.action] += 1
    totals["feed"] = "ingest_conversations"
    return totals


def stored_digest(store: Any, users: Sequence[str]) -> str:
    """A SHA-256 over every stored memory of ``users`` as the ingest decided it (content,
    type, kind, importance, session, turn ids, times, vector bytes; not the random ids),
    in a fixed order: equal digests mean the same rows were stored."""
    import hashlib

    from engrain.store import MemoryFilter

    digest = hashlib.sha256()
    for user in sorted(users):
        rows = []
        for m in store.query(user, MemoryFilter(), limit=None):
            vector = b"" if m.embedding is None else m.embedding.tobytes()
            rows.append(repr((m.user_id, m.session_id, m.content, m.memory_type.value,
                              m.kind.value, m.importance, m.provenance.turn_ids,
                              m.created_at, m.updated_at, m.event_at, vector.hex())))  # fmt: skip
        for row in sorted(rows):
            digest.update(row.encode())
    return digest.hexdigest()


def server_cpu_seconds(data_dir: Path) -> float | None:
    """The CPU seconds used so far by the PostgreSQL server whose data directory is
    ``data_dir`` (its postmaster, the children it reaped and the live ones; Linux
    ``/proc``); ``None`` when no such server runs."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, list[str]] = {}
    master = None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stats[int(entry)] = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if str(data_dir).encode() in f.read() and master is None:
                    master = int(entry)
        except OSError:
            continue
    if master is None or master not in stats:
        return None
    own = [fields for pid, fields in stats.items() if pid == master or int(fields[1]) == master]
    # utime, stime, cutime, cstime (fields 14-17 of stat; 11-14 after the command)
    return sum(sum(int(v) for v in fields[11:15]) for fields in own) / tick


def make_embedder() -> MiniLMEmbedder:
    """The embedder in :data:`SPLIT`'s mode and :data:`INT8`'s graph (a checkout without
    the mode or the graph: its default)."""
    parameters = inspect.signature(MiniLMEmbedder).parameters
    options: dict[str, Any] = {}
    if "split" in parameters:
        options["split"] = SPLIT
    if "int8" in parameters and INT8 is not None:
        options["int8"] = INT8.lower() not in ("0", "false", "no")
    return MiniLMEmbedder(**options)


def locomo_once(data: Path, backend: str, calls_out: Path | None = None) -> dict[str, Any]:
    """One timed ingest of every LoCoMo session (``ingest_conversation`` per session) into
    a fresh store, in this process, after the model has been loaded and warmed;
    ``calls_out``: the texts of each of the embedder's calls, in order, written there as
    JSON (``bench/ingest_floor.py`` runs the model alone on them)."""
    import baselines as bl
    import locomo

    from engrain import Settings

    conversations = bl.load_locomo(data)
    embedder: MiniLMEmbedder | ReplayEmbedder
    if REPLAY:
        embedder, warm = ReplayEmbedder(Path(REPLAY)), (0, 0)
    else:
        embedder, warm = make_embedder(), (1, 16)
        embedder.embed([n.text for n in common.make_notes(16, seed=5)])  # load and warm up
    recording = RECORD or calls_out is not None
    recorder = RecordingEmbedder(embedder) if recording else None  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory(prefix="engrain-locomo-ingest-") as tmp, \
            locomo.backend_stores(backend, Path(tmp)) as new_store:  # fmt: skip
        engine = Engine(settings=Settings(data_dir=Path(tmp)), store=new_store("ingest"),
                        embedder=recorder or embedder)  # type: ignore[arg-type]  # fmt: skip
        pg = Path(tmp) / "pg"  # where locomo.backend_stores starts the private server
        watch = WalWatch(engine.store) if backend == "sqlite" else None
        with engine:
            server = server_cpu_seconds(pg) if backend == "postgres" else None
            start, cpu = time.perf_counter(), time.process_time()
            serial = time.thread_time()
            totals = feed_locomo(engine, conversations)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            serial = time.thread_time() - serial
            after = server_cpu_seconds(pg) if server is not None else None
            engine.wait()
            digest = stored_digest(engine.store, [c.conversation_id for c in conversations])
    if recorder is not None and calls_out is not None:
        calls_out.write_text(json.dumps(recorder.calls), encoding="utf-8")
    if recorder is not None and RECORD:
        save_vectors(recorder, Path(RECORD))
    return {
        "turns": totals["turns"],
        "chunks": embedder.texts_embedded - warm[1],
        "calls": embedder.calls - warm[0],
        **({"model": "replayed"} if REPLAY else {}),
        "seconds": round(seconds, 3),
        "turns_per_s": round(totals["turns"] / seconds, 1),
        "cpu_seconds": round(cpu, 3),
        # the calling thread's CPU: chunking, planning, writing (and, pipelined, nothing of
        # the embedding); the model's runs are on the embedder's worker threads
        "calling_thread_cpu_seconds": round(serial, 3),
        "outcomes": {k: v for k, v in totals.items() if k not in ("turns", "feed")},
        "feed": totals["feed"],
        "stored_digest": digest,
        **({} if watch is None else {"wal": watch.summary()}),
        # the PostgreSQL server's CPU over the same interval (it shares the 2 cores)
        **(
            {}
            if after is None or server is None
            else {"server_cpu_seconds": round(after - server, 3)}
        ),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def alternate(
    repeat: int,
    compare: Path | None,
    args: list[str],
    report: Callable[[str, dict[str, Any]], None],
) -> dict[str, list[dict[str, Any]]]:
    """``repeat`` rounds of this script run with ``args`` in a fresh process per side: the
    ``compare`` checkout's (``before``) then this one's (``after``); each run's last line of
    output is its JSON result, passed to ``report`` as it comes."""
    sides: dict[str, Path | None] = {"after": None} if compare is None else {
        "before": compare, "after": None}  # fmt: skip
    graphs = {}
    if compare == INT8_SIDES:  # this checkout's float graph (before) against its int8 (after)
        sides, graphs = {"before": None, "after": None}, {"before": "0", "after": "1"}
    pipelined = {"before": "0", "after": "1"} if compare == PIPELINE_SIDES else {}
    if pipelined:  # this checkout's calls per session (before) against the pipeline (after)
        sides = {"before": None, "after": None}
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for _ in range(repeat):
        for side, src in sides.items():
            env = dict(os.environ)
            if src is not None:
                env["PYTHONPATH"] = str(src)
            if side in graphs:
                env["ENGRAIN_ONNX_INT8"] = graphs[side]
            if side in pipelined:
                env["ENGRAIN_BENCH_PIPELINE"] = pipelined[side]
            command = [sys.executable, __file__, *args]
            done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            run = json.loads(done.stdout.strip().splitlines()[-1])
            runs[side].append(run)
            report(side, run)
    return runs


def locomo_runs(data: Path, backend: str, repeat: int, compare: Path | None) -> dict[str, Any]:
    """``repeat`` runs of :func:`locomo_once`, each in a fresh process, alternating with the
    ``compare`` checkout's runs when given; medians of each side."""

    def report(side: str, run: dict[str, Any]) -> None:
        wal = run.get("wal")
        log = "" if wal is None else (
            f", log extended by {wal['extended_the_log']} of {wal['writes']} writes (largest "
            f"{wal['largest_log_mb']} MB), writes' wall {wal['write_wall_seconds']} s for "
            f"{wal['write_thread_cpu_seconds']} s of CPU")  # fmt: skip
        print(f"  locomo {backend} {side}: {run['turns_per_s']} turns/s, "
              f"cpu {run['cpu_seconds']} s, server cpu {run.get('server_cpu_seconds', '-')} s, "
              f"{run.get('feed', 'ingest_conversation')}, load {run['load_average_1m']}{log}",
              file=sys.stderr)  # fmt: skip

    runs = alternate(repeat, compare, ["--locomo-once", str(data), "--backend", backend], report)
    out: dict[str, Any] = {"backend": backend, "dataset": str(data), "repeat": repeat}
    for side, rows in runs.items():
        out[side] = {
            "turns": rows[0]["turns"],
            "chunks": rows[0]["chunks"],
            "calls": rows[0]["calls"],
            "outcomes": rows[0]["outcomes"],
            "median_turns_per_s": round(statistics.median(r["turns_per_s"] for r in rows), 1),
            "median_cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in rows), 2),
            "median_calling_thread_cpu_seconds": round(
                statistics.median(r["calling_thread_cpu_seconds"] for r in rows), 2
            ),
            **(
                {
                    "median_server_cpu_seconds": round(
                        statistics.median(r["server_cpu_seconds"] for r in rows), 2
                    )
                }
                if all("server_cpu_seconds" in r for r in rows)
                else {}
            ),
            **(
                {
                    "median_wal": {
                        key: statistics.median(r["wal"][key] for r in rows)
                        for key in rows[0]["wal"]
                    }
                }
                if all("wal" in r for r in rows)
                else {}
            ),
            "feed": rows[0].get("feed", "ingest_conversation"),
            "cpu_ms_per_turn": round(
                1000 * statistics.median(r["cpu_seconds"] for r in rows) / rows[0]["turns"], 3
            ),
            "runs": rows,
        }
    digests = {r.get("stored_digest") for rows in runs.values() for r in rows}
    out["stored_rows_identical"] = len(digests) == 1 and None not in digests
    if compare is not None:
        out["compare_src"] = str(compare)
        out["speedup_wall"] = round(
            out["after"]["median_turns_per_s"] / out["before"]["median_turns_per_s"], 2
        )
        out["cpu_ratio"] = round(
            out["after"]["median_cpu_seconds"] / out["before"]["median_cpu_seconds"], 2
        )
    return out


def memory_once(queries: int = 300) -> dict[str, Any]:
    """RSS at three points and one query's embedding latency, in this (fresh) process."""
    import engrain  # already imported by this script's own imports
    from engrain.store import MemoryStore

    steps = {"imports": common.status_mb("VmRSS")}
    texts = common.make_queries(queries + 21, seed=17)
    with tempfile.TemporaryDirectory(prefix="engrain-rss-") as tmp:
        engine = engrain.Engine(settings=engrain.Settings(data_dir=Path(tmp)), store=MemoryStore())
        with engine:
            engine.embedder.embed_query(texts[0])
            steps["engine_and_one_query"] = common.status_mb("VmRSS")
            inner = engine.embedder.inner  # type: ignore[attr-defined]
            for text in texts[1:21]:  # warm-up
                inner.embed([text])
            wall, cpu = [], []
            for text in texts[21:]:
                start, thread = time.perf_counter(), time.thread_time()
                inner.embed([text])
                cpu.append(1000 * (time.thread_time() - thread))
                wall.append(1000 * (time.perf_counter() - start))
            steps[f"after_{queries}_queries"] = common.status_mb("VmRSS")
    return {
        "rss_mb": steps,
        "query_embed_ms": {"wall": common.summarize(wall), "thread_cpu": common.summarize(cpu)},
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def memory_runs(repeat: int, compare: Path | None) -> dict[str, Any]:
    """``repeat`` fresh processes of :func:`memory_once` per side, alternating; medians."""
    runs = alternate(repeat, compare, ["--memory-once"], lambda side, run: None)
    out: dict[str, Any] = {"repeat": repeat}
    for side, rows in runs.items():
        out[side] = {
            "rss_mb": {
                k: statistics.median(r["rss_mb"][k] for r in rows) for k in rows[0]["rss_mb"]
            },
            "query_embed_ms": {
                kind: {
                    q: round(statistics.median(r["query_embed_ms"][kind][q] for r in rows), 2)
                    for q in ("p50_ms", "p95_ms")
                }
                for kind in ("wall", "thread_cpu")
            },
            "runs": rows,
        }
    if compare is not None:
        out["compare_src"] = str(compare)
    return out


def tally(reports: Sequence[Any]) -> dict[str, int]:
    """How many chunks were stored, merged and discarded over several ingest reports."""
    counts = {"stored": 0, "merged": 0, "discarded": 0}
    for report in reports:
        for outcome in report.outcomes:
            counts[outcome.action] += 1
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--texts", type=int, default=2000, help="inputs per engine path")
    parser.add_argument("--turns", type=int, default=50, help="turns per ingest_conversation")
    parser.add_argument("--batch", type=int, default=256, help="raw embedder batch size")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--paths", default="ingest,ingest_conversation,locomo",
                        help="comma-separated: ingest, ingest_conversation, locomo, "
                             "memory")  # fmt: skip
    parser.add_argument("--locomo", type=Path, default=LOCOMO, help="LoCoMo json for 'locomo'")
    parser.add_argument(
        "--backend",
        default="sqlite",
        help="where 'locomo' stores: sqlite, postgres or both (comma-separated)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of 'locomo' (median)")
    parser.add_argument("--compare", type=Path,
                        help="another checkout's src: before vs after; 'int8': this checkout's "
                             "float graph vs its int8 graph")  # fmt: skip
    parser.add_argument(
        "--feed",
        choices=("calls", "sessions"),
        default=None,
        help="'locomo': one ingest_conversation per session (calls, the "
        "default) or all sessions in one ingest_conversations where the "
        "checkout has it (sessions; a checkout without it: calls)",
    )
    parser.add_argument(
        "--replay",
        type=Path,
        default=None,
        help="'locomo': the model replaced by the vectors recorded in this "
        ".npz (recorded first, by this checkout, if it does not exist)",
    )
    parser.add_argument("--locomo-once", type=Path, help=argparse.SUPPRESS)  # one child run
    parser.add_argument("--memory-once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.feed is not None:  # the children read it (alternate() passes the environment)
        os.environ["ENGRAIN_BENCH_PIPELINE"] = "1" if args.feed == "sessions" else "0"
    if args.replay is not None and args.locomo_once is None:
        if not args.replay.exists():
            print(f"recording the model's vectors into {args.replay}", file=sys.stderr)
            env = {**os.environ, "ENGRAIN_BENCH_RECORD": str(args.replay)}
            subprocess.run([sys.executable, __file__, "--locomo-once", str(args.locomo),
                            "--backend", "sqlite"], env=env, check=True,
                           capture_output=True)  # fmt: skip
        os.environ["ENGRAIN_BENCH_REPLAY"] = str(args.replay)
    if args.locomo_once is not None:
        print(json.dumps(locomo_once(args.locomo_once, args.backend)))
        return 0
    if args.memory_once:
        print(json.dumps(memory_once()))
        return 0
    if min(args.texts, args.turns, args.batch, args.repeat) < 1:
        parser.error("--texts, --turns, --batch and --repeat must be positive")
    chosen = set(args.paths.split(","))
    if not chosen <= {"ingest", "ingest_conversation", "locomo", "memory"}:
        parser.error(f"unknown path in --paths {args.paths!r}")
    backends = args.backend.split(",")
    if not set(backends) <= set(LOCOMO_TARGET):
        parser.error(f"unknown backend in --backend {args.backend!r}")

    embedder = make_embedder()
    documents = common.make_documents(args.texts, seed=args.seed)
    turns_text = [n.text for n in common.make_notes(args.texts, seed=args.seed + 100)]
    embedder.embed([n.text for n in common.make_notes(64, seed=args.seed + 200)])  # warm-up

    def feed_ingest(engine: Engine) -> dict[str, int]:
        reports = []
        for i, text in enumerate(documents):
            reports.append(engine.ingest(text, USER, session_id=f"doc-{i}", now=common.NOW))
        return tally(reports)

    def feed_conversation(engine: Engine) -> dict[str, int]:
        reports = []
        for offset in range(0, len(turns_text), args.turns):
            part = turns_text[offset : offset + args.turns]
            turns = [
                {"speaker": ("ada", "assistant")[j % 2], "text": t, "turn_id": f"t{offset + j}"}
                for j, t in enumerate(part)
            ]
            reports.append(
                engine.ingest_conversation(turns, USER, f"conv-{offset}", now=common.NOW)
            )
        return tally(reports)

    multi = sum("\n\n" in d for d in documents)
    paths: dict[str, Any] = {}
    report: dict[str, Any] = {"paths": paths}
    if "memory" in chosen:
        print(f"memory: RSS and query latency, {args.repeat} runs a side", file=sys.stderr)
        report["memory"] = memory_runs(args.repeat, args.compare)
    if "locomo" in chosen:
        report["locomo"] = {}
        for backend in backends:
            print(f"locomo: {args.locomo.name} on {backend}, {args.repeat} runs", file=sys.stderr)
            report["locomo"][backend] = locomo_runs(args.locomo, backend, args.repeat,
                                                    args.compare)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="engrain-ingest-") as tmp:
        for name, feed, inputs, what in (
            ("ingest", feed_ingest, len(documents), f"{len(documents)} texts, one call each"),
            (
                "ingest_conversation",
                feed_conversation,
                len(turns_text),
                f"{len(turns_text)} turns, {args.turns} per call",
            ),
        ):
            if name not in chosen:
                continue
            print(f"{name}: {what}", file=sys.stderr)
            engine_result, recorder = engine_run(name, Path(tmp), embedder, feed, inputs)
            raw = raw_runs(embedder, recorder, args.batch)
            ratio = engine_result["chunks_per_s"] / raw["texts_per_s"]
            paths[name] = {
                "engine": engine_result,
                "raw": raw,
                "ratio": round(ratio, 3),
                "ratio_vs_same_calls": round(
                    engine_result["chunks_per_s"] / raw["same_calls_texts_per_s"], 3
                ),
                "meets_target": ratio >= TARGET_RATIO,
            }

    report.update(
        {
            "target": {"ratio": TARGET_RATIO, "locomo_turns_per_s": LOCOMO_TARGET},
            "corpus": {
                "seed": args.seed,
                "ingest_texts": len(documents),
                "multi_paragraph": multi,
                "ingest_words_mean": round(
                    sum(len(d.split()) for d in documents) / len(documents), 1
                ),
                "turns": len(turns_text),
                "turns_per_call": args.turns,
            },
            "machine": common.machine_info(),
            "embedder": embedder.model_id,
            "onnx_split": SPLIT,
        }
    )
    common.write_json(args.out, report)
    print_table(report)
    return 0


def print_table(report: dict[str, Any]) -> None:
    """Side by side: engine vs raw embedder on the same chunk texts; LoCoMo turns/s."""
    print_locomo(report)
    if not report["paths"]:
        return
    print()
    print(f"ingest throughput vs raw embedder (target ratio ≥ {report['target']['ratio']})")
    header = (
        f"{'path':<20} {'inputs/s':>9} {'chunks':>7} {'engine ch/s':>12} {'raw ch/s':>9} "
        f"{'ratio':>6} {'raw same-calls':>15} {'ratio':>6}"
    )
    print(header)
    for name, row in report["paths"].items():
        e, r = row["engine"], row["raw"]
        print(
            f"{name:<20} {e['inputs_per_s']:>9.1f} {e['chunks_embedded']:>7} "
            f"{e['chunks_per_s']:>12.1f} {r['texts_per_s']:>9.1f} {row['ratio']:>6.2f} "
            f"{r['same_calls_texts_per_s']:>15.1f} {row['ratio_vs_same_calls']:>6.2f}"
        )
    print()
    print("where the engine's time went (seconds)")
    for name, row in report["paths"].items():
        stages = ", ".join(f"{k} {v:.2f}" for k, v in row["engine"]["stage_seconds"].items())
        print(f"  {name}: total {row['engine']['seconds']:.2f} = {stages}")
    machine = report["machine"]
    print(
        f"\n{machine['cores']} cores, Python {machine['python']}, "
        f"load average {machine.get('load_average_1m', '?')}"
    )


def print_locomo(report: dict[str, Any]) -> None:
    """The LoCoMo ingest's medians, before and after when compared; then the memory path's."""
    for lo in report.get("locomo", {}).values():
        _print_locomo(lo)
    memory = report.get("memory")
    if memory:
        print(f"\nresident memory (MB), one query's embedding (ms), median of {memory['repeat']}")
        for side in ("before", "after"):
            if side in memory:
                row = memory[side]
                rss = ", ".join(f"{k} {v:.0f}" for k, v in row["rss_mb"].items())
                q = row["query_embed_ms"]
                wall, cpu = q["wall"], q["thread_cpu"]
                print(f"  {side:<7} {rss}; query wall p50/p95 {wall['p50_ms']}/"
                      f"{wall['p95_ms']}, thread cpu p50 {cpu['p50_ms']}")  # fmt: skip


def _print_locomo(lo: dict[str, Any]) -> None:
    print(
        f"\nLoCoMo dev through ingest_conversation on {lo['backend']} "
        f"(median of {lo['repeat']} runs, target {LOCOMO_TARGET[lo['backend']]} turns/s)"
    )
    print(f"  stored rows identical on every run: {lo.get('stored_rows_identical')}")
    for side in ("before", "after"):
        if side in lo:
            row = lo[side]
            server = row.get("median_server_cpu_seconds")
            print(f"  {side:<7} {row['median_turns_per_s']:>7.1f} turns/s  "
                  f"cpu {row['median_cpu_seconds']:.2f} s ({row['cpu_ms_per_turn']:.2f} "
                  f"ms/turn)"
                  + ("" if server is None else f", server cpu {server:.2f} s")
                  + f"  {row['turns']} turns, {row['chunks']} chunks, "
                    f"{row.get('feed', 'ingest_conversation')}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
