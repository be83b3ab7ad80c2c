"""BM25's term sums on PostgreSQL, one term at a time: ``np.add.at(out, docs, weight)`` (this
tree's ``bm25.scores``, session 28) against ``out[docs] += weight`` (the code before it), by
the length of the term's posting list, on a question set's real rows.

Each question's rows are read once (``bm25.STATISTICS``, one connection), its lists decoded
and numbered as ``bm25.scores`` does; then for every term, ``--repeats`` times, alternating
which goes first, each add runs on its own copy of the score array as it stands before that
term (the terms before it added), timed on the calling thread's CPU clock. The two results
are compared bit for bit (a term's memories are distinct, so both add each posting once, in
the same float32 operation). Printed and written: the median µs of each add by list-length
bin, and a question's sum of the per-term medians.

    python bench/pg_add_at.py --url 'postgresql://postgres:@/big?host=/tmp/h4-pg100k' \\
        --out bench/results/pg-add-at-100k-s29-h4.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from engrain.store.lexical import tokenize
from engrain.store.postgres import bm25, postings

#: Upper bounds of the list-length bins (postings of one term in one question).
BINS = (256, 1024, 4096, 16384, 65536, 1 << 40)


def _terms(rows: list[Any], terms: list[str]) -> tuple[list[Any], np.ndarray[Any, Any]]:
    """Each term's (docs, weight) in ``bm25.scores``' order, and the score array's zeros."""
    documents, total = int(rows[0][0]), int(rows[0][1])
    unpack = postings.current().unpack
    by_term: dict[str, list[Any]] = {}
    for row in rows:
        by_term.setdefault(row[2], []).append(row)
    lists = []
    for term in terms:
        mine = by_term.get(term)
        if mine:
            lists.append((int(mine[0][3]), unpack([r[4] for r in mine], [r[5] for r in mine])))
    numbers, size, _ = bm25._numbered([p.seqs for _, p in lists])
    average = np.float32(total) / np.float32(documents)
    out = []
    for (df, found), docs in zip(lists, numbers, strict=True):
        idf = math.log(1.0 + (documents - df + 0.5) / (df + 0.5))
        out.append((docs, bm25.weights(found, idf, average)))
    return out, np.zeros(size, dtype=np.float32)


def _timed(add: Any, start: np.ndarray[Any, Any], docs: Any, weight: Any) -> tuple[float, Any]:
    out = start.copy()
    began = time.thread_time_ns()
    add(out, docs, weight)
    return (time.thread_time_ns() - began) / 1e3, out


def _at(out: Any, docs: Any, weight: Any) -> None:
    np.add.at(out, docs, weight)


def _fancy(out: Any, docs: Any, weight: Any) -> None:
    out[docs] += weight


def measure(url: str, user: str, seed: int, questions: int, repeats: int) -> dict[str, Any]:
    texts = [sorted(set(tokenize(t))) for t in common.make_queries(questions, seed=seed)]
    texts = [t for t in texts if t]
    by_bin: dict[int, dict[str, list[float]]] = {b: {"add_at": [], "fancy": []} for b in BINS}
    sums = {"add_at": [], "fancy": []}  # type: dict[str, list[float]]
    identical = terms_seen = 0
    with psycopg.connect(url, autocommit=True) as db, db.cursor(binary=True) as cur:
        for terms in texts:
            cur.execute(bm25.STATISTICS, (terms, user))
            rows = cur.fetchall()
            if not rows:
                continue
            lists, out = _terms(rows, terms)
            question = {"add_at": 0.0, "fancy": 0.0}
            for docs, weight in lists:
                spent: dict[str, list[float]] = {"add_at": [], "fancy": []}
                results = {}
                for r in range(repeats):
                    order = (("add_at", _at), ("fancy", _fancy))
                    for name, add in order if r % 2 == 0 else order[::-1]:
                        us, results[name] = _timed(add, out, docs, weight)
                        spent[name].append(us)
                same = np.array_equal(results["add_at"].view(np.int32),
                                      results["fancy"].view(np.int32))  # fmt: skip
                identical += same
                terms_seen += 1
                where = next(b for b in BINS if len(docs) <= b)
                for name in spent:
                    median = statistics.median(spent[name])
                    by_bin[where][name].append(median)
                    question[name] += median
                out = results["add_at"]
            for name in question:
                sums[name].append(question[name])
    bins = {}
    low = 0
    for b in BINS:
        got = by_bin[b]
        if got["add_at"]:
            bins[f"{low + 1}-{b if b < 1 << 40 else 'more'}"] = {
                "terms": len(got["add_at"]),
                "add_at_us_median": round(statistics.median(got["add_at"]), 2),
                "fancy_us_median": round(statistics.median(got["fancy"]), 2),
                "ratio_of_medians": round(
                    statistics.median(got["add_at"]) / statistics.median(got["fancy"]), 3
                ),
            }
        low = b
    return {
        "seed": seed,
        "questions": len(sums["add_at"]),
        "terms": terms_seen,
        "bit_identical_terms": identical,
        "by_list_length": bins,
        "question_us_median": {k: round(statistics.median(v), 1) for k, v in sums.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--seeds", default="7,99")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    runs = [measure(args.url, args.user, int(s), args.questions, args.repeats)
            for s in args.seeds.split(",")]  # fmt: skip
    report = {"runs": runs, "load_average_1m": os.getloadavg()[0], "machine": common.machine_info()}
    for run in runs:
        print(f"seed {run['seed']}: {run['questions']} questions, {run['terms']} terms, "
              f"{run['bit_identical_terms']} bit-identical; a question "
              f"{run['question_us_median']}")  # fmt: skip
        for span, row in run["by_list_length"].items():
            print(f"  {span:>14}: {row['terms']:4d} terms, add.at "
                  f"{row['add_at_us_median']:8.2f} µs, fancy {row['fancy_us_median']:8.2f} µs, "
                  f"{row['ratio_of_medians']}")  # fmt: skip
    print(f"load {report['load_average_1m']:.1f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
