"""BM25's posting blocks on PostgreSQL in three formats, side by side on one corpus: what a
question's statement costs the server, the client receiving its rows, and the client
decoding and scoring them; the bytes a posting; the answers compared bit for bit.

- **legacy**: the blocks before migration 014 (14 bytes a posting: seq, tf, length),
  read and scored by the tree at ``--baseline-src`` (its ``bm25.STATISTICS`` and
  ``scores``) on ``--legacy-url`` (a database at 013);
- **packed**: this tree's (``postings.PACKED``, 7 bytes: the seq's low 32 bits, tf in one
  byte, length in two, escaped where they do not fit) on ``--packed-url``, the same corpus
  migrated by 014;
- **fixed10**: a candidate not taken, 10 bytes (the seq's low 32 bits, tf int2, length
  int4, no escape), in a table this bench fills from the packed blocks in the packed
  database (``bench_fixed10_blocks``, dropped at the end).

For each question (``common.make_queries``, two seeds; nothing tuned) the formats run
alternating, each pass over the question set: the backend's CPU (``/proc``, the server on
this machine) a question for the pass, the calling thread's CPU receiving the rows
(``execute`` + ``fetchall``) and decoding and scoring them (``scores(…).best(n)`` and the
match count). Medians over the repeats, then over the questions.

    python bench/pg_posting_format.py \\
        --legacy-url 'postgresql://postgres:@/big?host=/tmp/h5-pg100k' \\
        --packed-url 'postgresql://postgres:@/big_mig?host=/tmp/h5-pg100k' \\
        --baseline-src /tmp/s27-base/src --out bench/results/pg-posting-format-100k-s27-h5.json
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from engrain.store.lexical import tokenize
from engrain.store.postgres import bm25, postings
from engrain.store.postgres.postings import BlockFormat, Postings

#: The 10-byte candidate's record.
FIXED10_RECORD = np.dtype([("low", ">u4"), ("tf", ">i2"), ("length", ">i4")])


def _pack10(seqs: Any, tfs: Any, lengths: Any) -> tuple[bytes, npt.NDArray[np.int64]]:
    out = np.empty(len(seqs), dtype=FIXED10_RECORD)
    out["low"] = np.asarray(seqs, dtype=np.int64) & 0xFFFF_FFFF
    out["tf"] = np.minimum(np.asarray(tfs, dtype=np.int64), postings.MAX_TF)
    out["length"] = lengths
    return out.tobytes(), (np.arange(len(out), dtype=np.int64) + 1) * FIXED10_RECORD.itemsize


def _unpack10(first_seqs: Sequence[int], datas: Sequence[bytes]) -> Postings:
    records = np.frombuffer(b"".join(datas), dtype=FIXED10_RECORD)
    seqs = records["low"].astype(np.int64)
    if first_seqs and max(first_seqs) >> postings.EPOCH_BITS:
        counts = [len(d) // FIXED10_RECORD.itemsize for d in datas]
        high = np.asarray(first_seqs, dtype=np.int64) >> postings.EPOCH_BITS << 32
        seqs += np.repeat(high, counts)
    return Postings(seqs, records["tf"], records["length"])


FIXED10 = BlockFormat("bench_fixed10_blocks", _pack10, _unpack10, True, FIXED10_RECORD.itemsize)


def _baseline(src: Path) -> Any:
    """The ``bm25`` module of the tree at ``src``, under another name."""
    spec = importlib.util.spec_from_file_location(
        "bm25_before", src / "engrain" / "store" / "postgres" / "bm25.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bm25_before"] = module  # a dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def fill_fixed10(url: str) -> None:
    """``bench_fixed10_blocks``: the packed blocks in the 10-byte candidate format."""
    with psycopg.connect(url) as db:
        db.execute("DROP TABLE IF EXISTS bench_fixed10_blocks")
        db.execute(
            'CREATE TABLE bench_fixed10_blocks (user_id text COLLATE "C" NOT NULL, '
            'term text COLLATE "C" NOT NULL, first_seq bigint NOT NULL, data bytea NOT NULL, '
            "PRIMARY KEY (user_id, term, first_seq)) WITH (fillfactor = 50)"
        )
        db.execute("ALTER TABLE bench_fixed10_blocks ALTER COLUMN data SET STORAGE PLAIN")
        with db.cursor(name="read") as blocks, db.cursor() as out:
            blocks.execute("SELECT user_id, term, first_seq, data FROM packed_blocks")
            while batch := blocks.fetchmany(5_000):
                with out.copy("COPY bench_fixed10_blocks FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["text", "text", "int8", "bytea"])
                    for user_id, term, first, data in batch:
                        found = postings.unpack([first], [bytes(data)])
                        data = _pack10(found.seqs, found.tfs, found.lengths)[0]
                        copy.write_row((user_id, term, first, data))
        db.execute("ANALYZE bench_fixed10_blocks")


class Side:
    """One format: its connection, statement and scoring."""

    def __init__(self, name: str, url: str, sql: str, score: Any) -> None:
        self.name, self.sql, self.score = name, sql, score
        self.db = psycopg.connect(url, autocommit=True)
        self.cur = self.db.cursor(binary=True)
        row = self.db.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        self.stat = Path(f"/proc/{row[0]}/schedstat")

    def backend(self) -> float:
        """The backend's CPU so far, s (``schedstat``: nanoseconds)."""
        return int(self.stat.read_text().split()[0]) / 1e9

    def close(self) -> None:
        self.db.close()


def _pass(side: Side, texts: list[list[str]], user: str, n: int) -> dict[str, Any]:
    """One pass of ``side`` over the questions."""
    receive, decode, sizes, answers = [], [], [], []
    before = side.backend()
    for terms in texts:
        start = time.thread_time()
        side.cur.execute(side.sql, (terms, user))
        rows = side.cur.fetchall()
        middle = time.thread_time()
        scored = side.score(terms, rows)
        answers.append((scored.best(n), len(scored)))
        decode.append((time.thread_time() - middle) * 1e3)
        receive.append((middle - start) * 1e3)
        sizes.append(sum(len(r[-1]) for r in rows))
    server = (side.backend() - before) / len(texts) * 1e3
    return {"server": server, "receive": receive, "decode": decode, "bytes": sizes,
            "answers": answers}  # fmt: skip


def _same(a: tuple[dict[int, float], int], b: tuple[dict[int, float], int]) -> bool:
    bits = [np.asarray(list(x.values()), dtype=np.float32).view(np.int32) for x in (a[0], b[0])]
    return list(a[0]) == list(b[0]) and np.array_equal(*bits) and a[1] == b[1]


def measure(sides: list[Side], user: str, seed: int, questions: int, n: int,
            repeats: int) -> dict[str, Any]:  # fmt: skip
    """One question set, every side, alternating pass by pass."""
    texts = [sorted(set(tokenize(t))) for t in common.make_queries(questions, seed=seed)]
    passes: dict[str, list[dict[str, Any]]] = {s.name: [] for s in sides}
    for r in range(repeats):
        for side in sides if r % 2 == 0 else list(reversed(sides)):
            passes[side.name].append(_pass(side, texts, user, n))
    out: dict[str, Any] = {"seed": seed, "questions": len(texts), "repeats": repeats}
    # the legacy side's bytes / 14: the postings the questions read
    out["postings_total"] = sum(passes[sides[0].name][0]["bytes"]) // 14
    reference = passes[sides[0].name][0]["answers"]
    for side in sides:
        done = passes[side.name]

        def per_question(key: str, done: list[dict[str, Any]] = done) -> float:
            return statistics.median(
                statistics.median(p[key][q] for p in done) for q in range(len(texts))
            )

        out[side.name] = {
            "server_cpu_ms_median": statistics.median(p["server"] for p in done),
            "receive_cpu_ms_median": per_question("receive"),
            "decode_score_cpu_ms_median": per_question("decode"),
            "bytes_median": statistics.median(done[0]["bytes"]),
            "bytes_total": sum(done[0]["bytes"]),
            "identical_to_" + sides[0].name: sum(
                _same(a, b) for a, b in zip(reference, done[0]["answers"], strict=True)),
        }  # fmt: skip
    return out


def sizes(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as db:
        row = db.execute(
            "SELECT pg_database_size(current_database()), "
            "coalesce(pg_total_relation_size(to_regclass('posting_blocks')), 0), "
            "coalesce(pg_total_relation_size(to_regclass('packed_blocks')), 0), "
            "coalesce(pg_total_relation_size(to_regclass('bench_fixed10_blocks')), 0)"
        ).fetchone()
        assert row is not None
        return dict(zip(("database", "posting_blocks", "packed_blocks", "fixed10_blocks"),
                        (int(x) for x in row), strict=True))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--legacy-url", required=True)
    parser.add_argument("--packed-url", required=True)
    parser.add_argument("--baseline-src", type=Path, required=True)
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--seeds", default="7,99")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--n", type=int, default=100, help="the depth asked: 2 × the pool (50)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-fixed10", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    before = _baseline(args.baseline_src)
    if not args.no_fixed10:
        fill_fixed10(args.packed_url)
    report: dict[str, Any] = {
        "legacy_url": args.legacy_url.split("?")[0], "packed_url": args.packed_url.split("?")[0],
        "sizes": {"legacy": sizes(args.legacy_url), "packed": sizes(args.packed_url)},
    }  # fmt: skip
    sides = [
        Side("legacy", args.legacy_url, before.STATISTICS, before.scores),
        Side("packed", args.packed_url, bm25.statistics_sql(postings.PACKED), bm25.scores),
    ]
    if not args.no_fixed10:
        sides.append(Side("fixed10", args.packed_url, bm25.statistics_sql(FIXED10),
                          lambda t, r: bm25.scores(t, r, FIXED10)))  # fmt: skip
    try:
        report["sets"] = [
            measure(sides, args.user, s, args.questions, args.n, args.repeats)
            for s in (int(x) for x in args.seeds.split(","))
        ]
    finally:
        for side in sides:
            side.close()
        if not args.no_fixed10:
            with psycopg.connect(args.packed_url, autocommit=True) as db:
                db.execute("DROP TABLE IF EXISTS bench_fixed10_blocks")
    for one in report["sets"]:
        print(f"seed {one['seed']}, {one['questions']} questions:")
        for side in sides:
            s = one[side.name]
            print(f"  {side.name:8s} server {s['server_cpu_ms_median']:.2f} ms, receive "
                  f"{s['receive_cpu_ms_median']:.2f} ms, decode+score "
                  f"{s['decode_score_cpu_ms_median']:.2f} ms, {s['bytes_median']:,.0f} bytes, "
                  f"{s['bytes_total'] / one['postings_total']:.2f} bytes a posting, "
                  f"identical {s['identical_to_legacy']}/{one['questions']}")  # fmt: skip
    report["load"] = [load, os.getloadavg()[0]]
    print(f"sizes {report['sizes']}; load {report['load']}")
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
