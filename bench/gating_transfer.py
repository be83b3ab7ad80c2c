"""Has what was tuned on the gating evaluation's tune halves reached its held halves?
(issue 12, session 19)

Each blind set (``pulse``, ``sensor``, ``quill``, ``strata``: written by sessions that had not
seen the gate) was first answered by the code of the day it landed, before anything was tuned
on it (``bench/results/gating-<set>-first-look.json``). This reads those first looks and a
later report of ``bench/gating.py`` and prints, per set and pooled over the sets, the gated
profile's must-include recall on each half with the labels it counts and its standard error
(``sqrt(p (1 - p) / n)``), then and now. A gain in the tune halves that the held halves do
not share is a rule for the messages it was fitted to, not for a project nobody has seen.
It answers no message: it reads reports only.

Usage: ``python bench/gating_transfer.py [--now bench/results/gating.json]
[--sets pulse,sensor,quill,strata] [--out bench/results/gating-transfer.json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_json

RESULTS = Path(__file__).resolve().parent / "results"
BLIND = ("pulse", "sensor", "quill", "strata", "harbor", "brightfall", "meridian", "kestrel",
         "anvil", "wrench")  # fmt: skip
HALVES = ("tune", "held")


def set_messages(report: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    """The gated profile's answered messages of set ``name`` in a ``bench/gating.py``
    report (``main`` is the report's own block, every other set under ``sets``)."""
    block = report if name == "main" else report["sets"][name]
    return list(block["profiles"]["gated"]["messages"])


def recall(messages: Sequence[Mapping[str, Any]], half: str) -> dict[str, Any]:
    """Must-include recall of the ``half``'s messages: labels found, labels, the rate and
    its standard error (None without labels)."""
    mine = [m for m in messages if m["split"] == half]
    found = sum(len(m["included"]) for m in mine)
    labels = found + sum(len(m["missed"]) for m in mine)
    rate = found / labels if labels else None
    error = math.sqrt(rate * (1.0 - rate) / labels) if rate is not None else None
    return {"found": found, "labels": labels, "recall": rate, "standard_error": error}


def pooled(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The cells' labels pooled into one recall (:func:`recall`'s shape)."""
    found = sum(c["found"] for c in cells)
    labels = sum(c["labels"] for c in cells)
    rate = found / labels if labels else None
    error = math.sqrt(rate * (1.0 - rate) / labels) if rate is not None else None
    return {"found": found, "labels": labels, "recall": rate, "standard_error": error}


def compare(
    first: Mapping[str, Mapping[str, Any]], now: Mapping[str, Any], sets: Sequence[str]
) -> dict[str, Any]:
    """Per set (``first``: each set's first-look report) and pooled: each half's recall at
    the first look and now, and the change."""
    out: dict[str, Any] = {}
    for name in sets:
        then_rows, now_rows = set_messages(first[name], name), set_messages(now, name)
        out[name] = {half: {"first_look": recall(then_rows, half), "now": recall(now_rows, half)}
                     for half in HALVES}  # fmt: skip
    out["pooled"] = {
        half: {when: pooled([out[name][half][when] for name in sets])
               for when in ("first_look", "now")}
        for half in HALVES
    }  # fmt: skip
    for cell in out.values():
        for half in HALVES:
            then, later = cell[half]["first_look"]["recall"], cell[half]["now"]["recall"]
            cell[half]["change"] = None if then is None or later is None else later - then
    return out


def _fmt(cell: Mapping[str, Any]) -> str:
    if cell["recall"] is None:
        return "-"
    return f"{cell['recall']:.3f} ±{cell['standard_error']:.3f} ({cell['labels']})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--now", type=Path, default=RESULTS / "gating.json",
                        help="a later bench/gating.py report")  # fmt: skip
    parser.add_argument("--sets", default=",".join(BLIND))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    now = json.loads(args.now.read_text())
    sets = [name for name in args.sets.split(",") if name == "main" or name in now["sets"]]
    for name in sorted(set(args.sets.split(",")) - set(sets)):
        print(f"{name}: not in {args.now}, left out")
    first = {name: json.loads((RESULTS / f"gating-{name}-first-look.json").read_text())
             for name in sets}  # fmt: skip
    result = compare(first, now, sets)
    print("must-include recall ± standard error (labels): first look → now, change")
    for name, cell in result.items():
        for half in HALVES:
            c = cell[half]
            change = "-" if c["change"] is None else f"{c['change']:+.3f}"
            print(f"{name:7} {half:4} {_fmt(c['first_look'])} → {_fmt(c['now'])}  {change}")
    if args.out:
        write_json(args.out, {"now": str(args.now), "sets": sets, "transfer": result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
