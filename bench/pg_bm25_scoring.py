"""BM25's client side on PostgreSQL, this tree against an earlier one on one database: the
calling thread's CPU receiving a question's posting blocks and scoring them, the backend's
CPU for the statement, and the answers compared bit for bit.

- **before**: the tree at ``--baseline-src`` (its ``bm25.STATISTICS`` and ``scores``);
- **now**: this tree's;
- **aggregated** (``--aggregated``; a candidate measured and not taken): one row a term,
  its blocks joined by the server (``string_agg`` of the blocks' data, no order needed:
  a term's memories are distinct, so the scores do not depend on the blocks' order), scored
  by this tree (valid while every block's ``first_seq`` is below 2**32, which it checks).

For each question (``common.make_queries``, two seeds; nothing tuned) the sides run
alternating, pass by pass over the question set: the backend's CPU (``/proc/<pid>/
schedstat``, the server on this machine) a question for the pass, the calling thread's CPU
for ``execute`` + ``fetchall`` and for ``scores(…).best(n)`` with the match count. Medians
over the repeats, then over the questions.

    python bench/pg_bm25_scoring.py --url 'postgresql://postgres:@/big?host=/tmp/h3-pg1m' \\
        --baseline-src /tmp/s28-base/src --aggregated \\
        --out bench/results/pg-bm25-scoring-1m-s28-h3.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from pg_posting_format import Side, _baseline, _same

from engrain.store.lexical import tokenize
from engrain.store.postgres import bm25

#: The candidate's statement: a term's blocks joined by the server, the greatest
#: ``first_seq`` kept to check that no block needs its epoch.
AGGREGATED = """SELECT st.documents, st.total_length, d.term, d.df, max(b.first_seq),
        string_agg(b.data, ''::bytea)
    FROM revisions st
    CROSS JOIN unnest(%s::text[]) AS k(term)
    JOIN term_stats d ON d.user_id = st.user_id AND d.term = k.term
    JOIN packed_blocks b ON b.user_id = st.user_id AND b.term = d.term
    WHERE st.user_id = %s AND st.documents > 0 AND d.df > 0
    GROUP BY st.documents, st.total_length, d.term, d.df"""


def _aggregated_scores(terms: list[str], rows: list[Any]) -> bm25.Scored:
    """This tree's scoring of :data:`AGGREGATED`'s rows (each term one block, as it were)."""
    assert all(int(r[4]) < 1 << 32 for r in rows), "a block past 2**32 needs its epoch"
    return bm25.scores(terms, [(r[0], r[1], r[2], r[3], 0, r[5]) for r in rows])


def _pass(side: Side, texts: list[list[str]], user: str, n: int) -> dict[str, Any]:
    """One pass of ``side`` over the questions."""
    receive, score, answers, postings = [], [], [], []
    before = side.backend()
    for terms in texts:
        start = time.thread_time()
        side.cur.execute(side.sql, (terms, user))
        rows = side.cur.fetchall()
        middle = time.thread_time()
        scored = side.score(terms, rows)
        answers.append((scored.best(n), len(scored)))
        score.append((time.thread_time() - middle) * 1e3)
        receive.append((middle - start) * 1e3)
        postings.append(sum(len(r[-1]) for r in rows) // 7)
    server = (side.backend() - before) / len(texts) * 1e3
    return {"server": server, "receive": receive, "score": score, "answers": answers,
            "postings": postings}  # fmt: skip


def measure(sides: list[Side], user: str, seed: int, questions: int, n: int,
            repeats: int) -> dict[str, Any]:  # fmt: skip
    """One question set, every side, alternating pass by pass."""
    texts = [sorted(set(tokenize(t))) for t in common.make_queries(questions, seed=seed)]
    texts = [t for t in texts if t]
    passes: dict[str, list[dict[str, Any]]] = {s.name: [] for s in sides}
    for r in range(repeats):
        for side in sides if r % 2 == 0 else list(reversed(sides)):
            passes[side.name].append(_pass(side, texts, user, n))
    first = passes[sides[0].name][0]
    out: dict[str, Any] = {"seed": seed, "questions": len(texts), "repeats": repeats,
                           "postings_median": statistics.median(first["postings"])}  # fmt: skip
    for side in sides:
        done = passes[side.name]

        def per_question(key: str, done: list[dict[str, Any]] = done) -> float:
            return statistics.median(
                statistics.median(p[key][q] for p in done) for q in range(len(texts))
            )

        out[side.name] = {
            "server_cpu_ms_median": statistics.median(p["server"] for p in done),
            "receive_cpu_ms_median": per_question("receive"),
            "score_cpu_ms_median": per_question("score"),
            "identical_to_" + sides[0].name: sum(
                _same(a, b) for a, b in zip(first["answers"], done[0]["answers"], strict=True)),
        }  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--baseline-src", type=Path, required=True)
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--seeds", default="7,99")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--n", type=int, default=100, help="the depth asked: 2 × the pool (50)")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--aggregated", action="store_true", help="measure the candidate too")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    before = _baseline(args.baseline_src)
    sides = [Side("before", args.url, before.STATISTICS, before.scores),
             Side("now", args.url, bm25.STATISTICS, bm25.scores)]  # fmt: skip
    if args.aggregated:
        sides.append(Side("aggregated", args.url, AGGREGATED, _aggregated_scores))
    try:
        runs = [
            measure(sides, args.user, int(seed), args.questions, args.n, args.repeats)
            for seed in args.seeds.split(",")
        ]
    finally:
        for side in sides:
            side.close()
    report = {"runs": runs, "load_average_1m": os.getloadavg()[0], "machine": common.machine_info()}
    for run in runs:
        print(f"seed {run['seed']}: {run['questions']} questions, "
              f"~{run['postings_median']:,.0f} postings each")  # fmt: skip
        for side in sides:
            s = run[side.name]
            print(f"  {side.name:>10}: server {s['server_cpu_ms_median']:.2f} ms, receive "
                  f"{s['receive_cpu_ms_median']:.2f} ms, score {s['score_cpu_ms_median']:.2f} "
                  f"ms, identical {s['identical_to_' + sides[0].name]}")  # fmt: skip
    print(f"load {report['load_average_1m']:.1f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
