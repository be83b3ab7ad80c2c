"""Page timings of the web inspector at 100,000 memories, against a live ``engrain serve``.

    python bench/ui.py --out bench/results/ui.json [--memories 100000] [--requests 40]

One user gets ``--memories`` memories in a fresh SQLite store: the seeded texts of
``bench/latency.py`` (``common.make_notes``), written through ``engine.store.write`` in
batches. The first 10,000 carry their real all-MiniLM-L6-v2 vectors (cached between runs
by ``bench/latency.py`` and ``bench/load.py``); each later memory reuses the vector of the
note 10,000 places earlier plus a little noise (renormalised), so a run embeds at most
10,000 texts instead of 100,000: a page's cost depends on how many memories there are,
not on what their vectors mean. A few pairs of conflicting facts and some recorded
contexts give the conflicts and activity pages something to show.

Then ``engrain serve`` starts as a real subprocess (one worker, the real MiniLM embedder)
on a free 127.0.0.1 port; one ``httpx.Client`` signs in through the form (the session
cookie, as a browser does) and, after an untimed warm-up (the first page loads the user's
working set), requests each page ``--requests`` times, one at a time:

* ``memories_first_page`` — ``GET /ui/memories`` (50 most recently updated);
* ``memories_sort_used``, ``memories_sort_importance`` — the same table sorted by uses
  (counted uses change no store revision: the counts are checked on every page) and by
  importance;
* ``memories_search`` — ``GET /ui/memories?q=…`` with a different word or two each time;
* ``memory_page`` — ``GET /ui/memories/<id>`` of a different memory each time;
* ``try_message`` — ``GET /ui/try?message=…`` with a different question each time (the
  server embeds it and runs the whole gating pipeline with every candidate explained);
* ``tiers``, ``conflicts``, ``activity`` — the other pages as they are.

Latencies are wall-clock times of whole requests (HTTP on loopback included); each page
must answer 200. Reported: p50, p95 (and the rest of ``common.summarize``) per page, the
bytes of the last answer, and how long writing the store and the first page took.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common
import load
import numpy as np

from engrain import Engine, Settings
from engrain.keys import KeyRing

USER = "ui-bench"
#: How many distinct notes carry their own real vector; the rest reuse them.
REAL_VECTORS = 10_000
NOISE = 0.05
WRITE_BATCH = 2_000
#: Page timings the issue aims for; reported beside the measurements, never asserted.
TARGETS = {"p95_ms": 300.0}
CONFLICTS = (
    ("The {s} listens on port {a}", "The {s} listens on port {b}"),
    ("The {s} keeps {a} days of logs", "The {s} keeps {b} days of logs"),
)


def say(message: str) -> None:
    """Progress on stderr."""
    print(message, file=sys.stderr, flush=True)


def corpus(size: int, seed: int) -> tuple[list[common.Note], Any, dict[str, Any]]:
    """``size`` notes and their vectors: real ones for the first :data:`REAL_VECTORS`,
    reused with noise beyond."""
    from engrain.embed.minilm import MiniLMEmbedder

    notes = common.make_notes(size, seed=seed)
    real = min(size, REAL_VECTORS)
    cache = Path(tempfile.gettempdir()) / "engrain-bench"
    embedder = MiniLMEmbedder()
    base, embed_s, cached = common.embed_corpus(embedder, [n.text for n in notes[:real]],
                                                cache_dir=cache)  # fmt: skip
    rng = np.random.default_rng(seed)
    rows = np.arange(size) % real
    vectors = base[rows] + (rows != np.arange(size))[:, None] * rng.normal(
        0.0, NOISE, (size, base.shape[1])
    ).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return notes, vectors.astype(np.float32), {
        "seed": seed, "notes": size, "real_vectors": real, "noise": NOISE,
        "embedder": embedder.model_id, "embedding_seconds": round(embed_s, 1),
        "vectors_from_cache": cached,
    }  # fmt: skip


def fill(url: str, workdir: Path, notes: Sequence[common.Note], vectors: Any) -> tuple[str, float]:
    """Write the user's memories, a few conflicting pairs and some contexts; an API key's
    secret and the seconds the bulk write took."""
    settings = Settings(url=url, data_dir=workdir, embedder="minilm")
    with Engine(settings=settings) as engine:
        memories = common.make_memories(notes, vectors, USER)
        start = time.perf_counter()
        for offset in range(0, len(memories), WRITE_BATCH):
            engine.store.write(memories[offset : offset + WRITE_BATCH])
        seconds = time.perf_counter() - start
        rng = random.Random(5)
        for first, second in CONFLICTS:
            system = rng.choice(common.SYSTEMS)
            a, b = rng.sample(range(1000, 9999), 2)
            engine.remember(first.format(s=system, a=a, b=b), USER, now=common.NOW)
            engine.remember(second.format(s=system, a=a, b=b), USER, now=common.NOW)
        for question in common.make_queries(5, seed=99):
            engine.context(question, USER, token_budget=800, now=common.NOW)
        secret = KeyRing(engine.store).create([USER], name="bench-ui")[0]
    return secret, seconds


def sign_in(client: Any, secret: str) -> None:
    """Sign in through the form; the client keeps the session cookie."""
    answer = client.post("/ui/signin", data={"key": secret, "next": "/ui/memories"})
    if answer.status_code != 303:
        raise RuntimeError(f"sign-in answered {answer.status_code}: {answer.text[:300]}")


def timed(client: Any, urls: Sequence[str]) -> tuple[list[float], int]:
    """Milliseconds of each GET (each must answer 200) and the size of the last answer."""
    times = []
    size = 0
    for url in urls:
        start = time.perf_counter()
        answer = client.get(url)
        times.append((time.perf_counter() - start) * 1000.0)
        if answer.status_code != 200:
            raise RuntimeError(f"GET {url} answered {answer.status_code}: {answer.text[:300]}")
        size = len(answer.content)
    return times, size


def page_urls(client: Any, requests: int, seed: int) -> dict[str, list[str]]:
    """The URLs each page is timed with: searches, memory ids and messages that differ
    from one request to the next."""
    from urllib.parse import quote

    rng = random.Random(seed)
    questions = common.make_queries(requests + 5, seed=seed + 1)
    words = sorted({w for q in questions for w in re.findall(r"[a-z]{5,}", q.lower())})
    first = client.get("/ui/memories").text
    ids = list(dict.fromkeys(re.findall(r'/ui/memories/([0-9a-f]{32})"', first)))
    pages = [first]
    for word in words[: requests // 2]:  # memory ids from several searches: spread out
        pages.append(client.get(f"/ui/memories?q={quote(word)}").text)
        ids += re.findall(r'/ui/memories/([0-9a-f]{32})"', pages[-1])
    ids = list(dict.fromkeys(ids))
    rng.shuffle(ids)
    searches = [" ".join(rng.sample(words, rng.choice((1, 2)))) for _ in range(requests)]
    return {
        "memories_first_page": ["/ui/memories"] * requests,
        "memories_sort_used": ["/ui/memories?sort=used"] * requests,
        "memories_sort_importance": ["/ui/memories?sort=importance"] * requests,
        "memories_search": [f"/ui/memories?q={quote(s)}" for s in searches],
        "memory_page": [f"/ui/memories/{i}" for i in (ids * requests)[:requests]],
        "try_message": [f"/ui/try?message={quote(q)}" for q in questions[5 : 5 + requests]],
        "tiers": ["/ui/tiers"] * requests,
        "conflicts": ["/ui/conflicts"] * requests,
        "activity": ["/ui/activity"] * requests,
    }


def run(size: int, requests: int, seed: int) -> dict[str, Any]:
    """The whole benchmark: the report."""
    import httpx

    notes, vectors, corpus_info = corpus(size, seed)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="engrain-ui-bench-") as tmp:
        workdir = Path(tmp)
        url = f"sqlite:///{workdir / 'ui.db'}"
        say(f"writing {size:,} memories")
        secret, write_s = fill(url, workdir, notes, vectors)
        say("starting engrain serve")
        with (
            load.running_server(url, workdir, "minilm", 1) as server,
            httpx.Client(base_url=server.url, timeout=120.0) as client,
        ):
            sign_in(client, secret)
            start = time.perf_counter()
            timed(client, ["/ui/memories"])
            first_ms = (time.perf_counter() - start) * 1000.0
            urls = page_urls(client, requests, seed)
            for name, page in urls.items():
                timed(client, page[:2])  # untimed: the first of each kind warms its path
                say(f"timing {name} ({len(page)} requests)")
                times, size_bytes = timed(client, page)
                results[name] = {**common.summarize(times), "requests": len(times),
                                 "bytes": size_bytes}  # fmt: skip
            log_errors = server.log_errors()
            start_s = server.start_seconds
    return {
        "memories": size,
        "pages": results,
        "targets": TARGETS,
        "write_seconds": round(write_s, 2),
        "server_start_seconds": round(start_s, 2),
        "first_page_cold_ms": round(first_ms, 1),
        "server_log_errors": log_errors,
        "settings": {
            "requests": requests,
            "client": "one httpx.Client, sequential requests",
            "server": "engrain serve, 1 worker, 127.0.0.1, SQLite",
        },
        "corpus": corpus_info,
        "machine": common.machine_info(),
    }


def print_table(report: dict[str, Any]) -> None:
    """The timings, for a terminal."""
    print()
    print(f"inspector pages, one user with {report['memories']:,} memories (SQLite, loopback)")
    print(f"{'page':<22}{'p50 ms':>10}{'p95 ms':>10}{'KB':>8}")
    for name, row in report["pages"].items():
        print(f"{name:<22}{row['p50_ms']:>10.1f}{row['p95_ms']:>10.1f}{row['bytes'] / 1024:>8.1f}")
    print(f"first page after start (loads the working set): {report['first_page_cold_ms']:.0f} ms")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, run, write and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=40, help="timed requests per page")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.memories < 10 or args.requests < 2:
        parser.error("--memories must be at least 10 and --requests at least 2")
    report = run(args.memories, args.requests, args.seed)
    common.write_json(args.out, report)
    print_table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
