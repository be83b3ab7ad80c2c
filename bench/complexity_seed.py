"""Where the complexity read and the complexity labelled disagree, and what the seed's table
says of each disagreement (issue 12).

The relevance-gating seed names a level for some intents and none for others:

- **debugging** is complex ("Why is this test failing?", "Debug this error");
- **analysis** is complex or deep ("analysis" in both rows; "Review this system design");
- a **question** is simple ("Quick questions, single concepts");
- **generation** is moderate ("Standard development tasks"), complex when it is multi-file
  work, simple when it is a single concept: the message's scope decides, which the table
  does not read for us;
- **discussion** and **continuation** have no row (the budget table's "Deep — architecture
  discussions" names only one kind of discussion).

Every labelled message of the nine gating sets' tune halves and the three
``classify-train`` files is read by this process's engrain as the gate reads it (the rules,
then the intent model's second opinion on its MiniLM vector:
:func:`classify_lopo.classify_rows`); held halves are never read here. Each disagreement
falls in one of four kinds (:func:`seed_verdict`):

- ``rules follow the seed``: the level read is the seed's for the labelled intent, the
  label's is not (the writer reads the message otherwise than the table);
- ``label follows the seed``: the label is the seed's, the level read is not (a rule
  could follow the table there);
- ``neither``: both levels are outside the seed's for that intent;
- ``silent``: the table names no level for the intent (or, for generation, names them all).

Usage::

    PYTHONPATH=src .venv/bin/python bench/complexity_seed.py [--vectors /tmp/….npy] \\
        [--out bench/results/complexity-seed-….json]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from classify_lopo import classify_rows
from common import machine_info, write_json
from complexity_lopo import EXTRA, load_rows, vectors_of

#: The levels the seed's table names for an intent; None where it names none, or all.
SEED_LEVELS: dict[str, frozenset[str] | None] = {
    "debugging": frozenset({"complex"}),
    "analysis": frozenset({"complex", "deep"}),
    "question": frozenset({"simple"}),
    "generation": None,
    "discussion": None,
    "continuation": None,
}
VERDICTS = ("rules follow the seed", "label follows the seed", "neither", "silent")


def seed_verdict(intent: str, label: str, read: str) -> str:
    """What the seed's table says of a message labelled ``intent`` / ``label`` and read at
    ``read`` (the two levels differ): one of :data:`VERDICTS`."""
    levels = SEED_LEVELS.get(intent)
    if levels is None:
        return "silent"
    if read in levels and label not in levels:
        return "rules follow the seed"
    if label in levels and read not in levels:
        return "label follows the seed"
    return "neither"


def scored(rows: Sequence[dict[str, Any]]) -> list[int]:
    """The rows read here: the tune halves and the training files, never a held half, and
    no trivial label (the trivial rules are measured by ``bench/short_messages.py``)."""
    return [
        i for i, r in enumerate(rows)
        if (r["split"] == "tune" or r["group"] in EXTRA) and r["complexity"] != "trivial"
    ]  # fmt: skip


def disagreements(
    rows: Sequence[dict[str, Any]], reads: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Per place (``tune`` halves, ``train`` files): every disagreement counted by labelled
    intent, (label → read) and seed verdict, and listed."""
    out: dict[str, Any] = {}
    for place in ("tune", "train"):
        idx = [i for i in scored(rows) if (rows[i]["group"] in EXTRA) == (place == "train")]
        by: Counter[tuple[str, str, str, str]] = Counter()
        listed = []
        for i in idx:
            row, read = rows[i], reads[i]["shipped"][1]
            if read == row["complexity"]:
                continue
            verdict = seed_verdict(row["intent"], row["complexity"], read)
            by[(row["intent"], row["complexity"], read, verdict)] += 1
            listed.append({"id": row["id"], "group": row["group"], "intent": row["intent"],
                           "label": row["complexity"], "read": read, "verdict": verdict,
                           "text": row["text"][:160]})  # fmt: skip
        out[place] = {
            "n": len(idx),
            "agree": len(idx) - len(listed),
            "by_verdict": dict(Counter(d["verdict"] for d in listed)),
            "by_intent": [
                {"intent": k[0], "label": k[1], "read": k[2], "verdict": k[3], "n": v}
                for k, v in sorted(by.items())
            ],
            "messages": listed,
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=Path, default=Path("/tmp/classify-lopo-vectors.npy"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = load_rows()
    reads = classify_rows(rows, vectors_of(rows, args.vectors))
    report = {"machine": machine_info(), "disagreements": disagreements(rows, reads)}
    for place, part in report["disagreements"].items():
        print(f"\n{place}: {part['agree']} of {part['n']} as labelled; "
              f"disagreements by the seed's table: {part['by_verdict']}")  # fmt: skip
        for c in part["by_intent"]:
            print(f"  {c['intent']:13} {c['label']:>8} → {c['read']:<8} {c['n']:3}  {c['verdict']}")
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
