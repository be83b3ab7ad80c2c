"""What reading a note's stated end costs a ``context()`` call (issue 12, session 23:
``GateOptions.stated_span``, ``recall/spans.py``).

Three measures, the calling thread's CPU time (``time.thread_time``), medians over
alternating rounds:

* ``parse_us``: one context note's :func:`~engrain.recall.spans.stated_end` with the cache
  cleared before each (what a note costs the first time a process scores it), over the
  gating evaluation's 52 context notes;
* ``cached_us``: the same look-up once cached (every later call);
* ``off_us`` / ``on_us``: ``score_batch.gated_columns`` on one pool (the evaluation's memories of
  every set, ``--pool`` of them, context notes included) with the option off and on, the
  cache warm, in alternating order, and the median of each round's ratio.

Usage: ``python bench/stated_span_cost.py [--rounds 7] [--pool 400]
[--out bench/results/stated-span-cost.json]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, machine_info, write_json
from gating import SETS, USER, load_data

from engrain import Kind
from engrain.model import Memory
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.score import Query, gated_weights
from engrain.recall.score_batch import gated_columns
from engrain.recall.spans import _stated_end, stated_end


def memories() -> list[Memory]:
    """Every memory of the evaluation's sets, as imported (muted and superseded ones too)."""
    out = []
    for name in SETS:
        for rows in load_data(name=name).projects.values():
            for row in rows:
                out.append(Memory.from_dict({"user_id": USER, "memory_type": "semantic", **row}))
    return out


def _cpu(run: Callable[[], Any], repeat: int) -> float:
    """Thread CPU microseconds of one ``run``, the mean of ``repeat``."""
    start = time.thread_time()
    for _ in range(repeat):
        run()
    return (time.thread_time() - start) / repeat * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pool", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=200, help="calls per timed run")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    every = memories()
    notes = [m for m in every if m.kind is Kind.CONTEXT]
    pool = [(m, 0.5, 0.0) for m in every[: args.pool]]
    in_pool = sum(m.kind is Kind.CONTEXT for m, _, _ in pool)
    classification = Classification(
        complexity=Complexity.MODERATE, intent=Intent.QUESTION, domains=(), turn=0,
        has_code=False, references_history=False, signals=(),
    )  # fmt: skip
    weights = gated_weights(classification)
    off = Query(classification, weights, NOW)
    on = Query(classification, weights, NOW, stated_span=True)

    def parse_all() -> None:
        for m in notes:
            _stated_end.cache_clear()
            stated_end(m.content, m.when)

    def cached_all() -> None:
        for m in notes:
            stated_end(m.content, m.when)

    rows: dict[str, list[float]] = {"parse_us": [], "cached_us": [], "off_us": [], "on_us": []}
    cached_all()
    for number in range(args.rounds):
        rows["parse_us"].append(_cpu(parse_all, max(1, args.repeat // 20)) / len(notes))
        cached_all()
        rows["cached_us"].append(_cpu(cached_all, args.repeat) / len(notes))
        order = (("off_us", off), ("on_us", on))
        for key, query in order if number % 2 == 0 else order[::-1]:  # alternating
            rows[key].append(_cpu(lambda q=query: gated_columns(pool, q), args.repeat))
    medians = {k: round(statistics.median(v), 2) for k, v in rows.items()}
    ratios = [b / a for a, b in zip(rows["off_us"], rows["on_us"], strict=True)]
    report = {
        "benchmark": "stated-span-cost", "rounds": args.rounds, "notes": len(notes),
        "pool": len(pool), "context_notes_in_pool": in_pool, "median": medians,
        "ratio_on_off": round(statistics.median(ratios), 4),
        "runs": {k: [round(x, 2) for x in v] for k, v in rows.items()},
        "machine": machine_info(),
    }  # fmt: skip
    print(f"{len(notes)} context notes: parse {medians['parse_us']:.1f} us a note uncached, "
          f"{medians['cached_us']:.2f} us cached")  # fmt: skip
    print(f"gated_columns on {len(pool)} memories ({in_pool} context notes): "
          f"off {medians['off_us']:.1f} us, on {medians['on_us']:.1f} us "
          f"(ratio {report['ratio_on_off']:.3f})")  # fmt: skip
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
