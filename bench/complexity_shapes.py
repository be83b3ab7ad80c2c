"""The classifier's complexity errors by message shape, against both readers (issue 12).

For every labelled message the rules were written against — the gating sets' tune halves and
the three ``classify-train`` files; the held halves only with ``--held`` — each ``--tree``
(the first is the baseline) reads the complexity in a process of its own with that tree's
``src`` (the shipped pipeline: rules then the intent model, :mod:`classify_lopo`), and this
bench reports:

- ``confusion``: per group, labelled level × read level (the writer's labels);
- ``shapes``: per message shape (:func:`shapes_of`: a one-line failure report, a tool's
  error quoted, code present, scope words, a multi-part ask, a follow-up, a discussion, and
  the length bands), how many messages, how many read as the writer labels them, as the
  second reader labels them (``bench/gating/second-reading.jsonl``: main, pulse, sensor,
  ``classify-train-2`` and ``-3``), and as both label them where they agree; and the
  writer's errors by direction (read lower / higher);
- ``seed_signals``: for each of the seed's classification signals (message < 50 characters,
  code blocks, "we" / "our" / "before", turn > 5, technical jargon) the share of each level
  with the signal and without it, by the writers, by the second reader and by the tree: where
  the tree weighs a signal differently from the seed's table and from the readers.

A rule is worth having when it agrees with *both* readers more (the ``both`` column), on the
projects it was not drawn from (``bench/classify_lopo.py``).

    .venv/bin/python bench/complexity_shapes.py --tree base=/tmp/s23-base --tree new=. \\
        [--vectors /tmp/….npy] [--out bench/results/complexity-shapes-….json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from classify_lopo import run_tree
from common import machine_info, write_json
from complexity_lopo import load_rows, vectors_of

DATA = Path(__file__).resolve().parent / "gating"
LEVELS = ("trivial", "simple", "moderate", "complex", "deep")
#: Words that widen a request's scope past one unit ("across the codebase", "the whole
#: platform", "end to end").
SCOPE = re.compile(
    r"\b(?:whole|entire|across|everywhere|end[- ]to[- ]end|system[- ]wide|codebase|"
    r"all (?:the |our )?(?:services|microservices|sites|repos|modules|endpoints|tables|"
    r"pipelines|jobs))\b",
    re.I,
)
#: What the shape table counts per shape (:func:`shape_table`).
COUNTS = ("n", "writer", "n_second", "second", "n_both", "both", "lower", "higher")
_CODE = re.compile(r"```|`[^`\n]+`")
#: A list of parts after a colon or in three comma-separated items, several questions, or a
#: numbered or bulleted list.
_PARTS = re.compile(r":\s*[^:]+,[^,]+|(?:,[^,?]+){2,}|\?.+\?|^\s*(?:\d+[.)]|[-*])\s", re.M | re.S)
_HISTORY = re.compile(r"\b(?:we|our|us|before|earlier|previously|last time)\b", re.I)
#: An error's own text: an exception or error class, a compiler's code, an upper-case error
#: constant ("CERTIFICATE_VERIFY_FAILED", "ERESOLVE"), a pod's failure state.
_ERROR_TEXT = re.compile(
    r"[\w.]*(?:Error|Exception)\b|\bERROR\b|\bFAILED\b|error\[E\d+\]|"
    r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|\bE[A-Z]{4,}\b|CrashLoopBackOff|OOMKilled|^panic:"
)


def shapes_of(row: Mapping[str, Any]) -> list[str]:
    """The shapes of a labelled message (its writer's ``intent`` and its ``text``), one
    message in several; the same for every tree."""
    text = str(row["text"])
    one_line = "\n" not in text.strip()
    code = bool(_CODE.search(text))
    out = []
    if row["intent"] == "debugging" and one_line and not code:
        out.append("one-line failure report")
    if row["intent"] == "debugging" and one_line and _ERROR_TEXT.search(text):
        out.append("one line with an error's text")
    if code:
        out.append("code present")
    if SCOPE.search(text):
        out.append("scope words")
    if _PARTS.search(text):
        out.append("multi-part ask")
    if row["intent"] == "continuation":
        out.append("follow-up")
    if row["intent"] == "discussion":
        out.append("discussion")
    out.append(length_band(len(text)))
    out.append("every message")
    return out


def length_band(length: int) -> str:
    """The seed's 50 characters, one line (90), a snippet's prose (200), a long message
    (400): "length 50–89" and so on."""
    low = 0
    for limit in (50, 90, 200, 400):
        if length < limit:
            return f"length {low}–{limit - 1}"
        low = limit
    return "length ≥ 400"


def seed_signals(row: Mapping[str, Any], signals: Sequence[str]) -> dict[str, bool]:
    """The seed's classification signals in a message."""
    text = str(row["text"])
    return {
        "message < 50 characters": len(text) < 50,
        "code block": "```" in text,
        "code (inline or block)": bool(_CODE.search(text)),
        "we / our / before": bool(_HISTORY.search(text)),
        "turn > 5": int(row.get("turn", 0)) > 5,
        "technical jargon": "jargon" in signals,
    }


def second_reading() -> dict[str, str]:
    """The second reader's complexity by message id."""
    path = DATA / "second-reading.jsonl"
    return {
        r["id"]: r["complexity"]
        for r in (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    }


def confusion(rows: Sequence[Mapping[str, Any]], read: Sequence[str]) -> dict[str, Any]:
    """Labelled level → read level → count, and the share read as labelled."""
    table = {a: dict.fromkeys(LEVELS, 0) for a in LEVELS}
    for row, got in zip(rows, read, strict=True):
        table[row["complexity"]][got] += 1
    right = sum(table[level][level] for level in LEVELS)
    return {"matrix": table, "n": len(rows), "as_labelled": round(right / max(len(rows), 1), 3)}


def shape_table(
    rows: Sequence[Mapping[str, Any]], read: Sequence[str], second: Mapping[str, str]
) -> dict[str, dict[str, int]]:
    """Per shape: ``n``; read as the writer labels (``writer``), as the second reader
    labels (``second`` of ``n_second``), as both label where they agree (``both`` of
    ``n_both``); the writer's errors read lower and higher."""
    out: dict[str, dict[str, int]] = {}
    for row, got in zip(rows, read, strict=True):
        other = second.get(str(row["id"]))
        for shape in shapes_of(row):
            cell = out.setdefault(shape, dict.fromkeys(COUNTS, 0))
            cell["n"] += 1
            cell["writer"] += got == row["complexity"]
            if got != row["complexity"]:
                lower = LEVELS.index(got) < LEVELS.index(row["complexity"])
                cell["lower" if lower else "higher"] += 1
            if other is not None:
                cell["n_second"] += 1
                cell["second"] += got == other
                if other == row["complexity"]:
                    cell["n_both"] += 1
                    cell["both"] += got == other
    return dict(sorted(out.items()))


def intent_misses(
    rows: Sequence[Mapping[str, Any]], reads: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, int]]:
    """Per reading (the rules alone, the shipped pipeline): "labelled → read" → count of the
    intents read otherwise than labelled."""
    out: dict[str, dict[str, int]] = {}
    for reading in ("rules", "shipped"):
        misses = Counter(
            f"{row['intent']} → {read[reading][0]}"
            for row, read in zip(rows, reads, strict=True)
            if read[reading][0] != row["intent"]
        )
        out[reading] = dict(misses.most_common())
    return out


def signal_table(
    rows: Sequence[Mapping[str, Any]], read: Sequence[str], signals: Sequence[Sequence[str]],
    second: Mapping[str, str],
) -> dict[str, dict[str, dict[str, Any]]]:  # fmt: skip
    """Per seed signal, with and without it: each reading's share of every level."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    flags = [seed_signals(r, s) for r, s in zip(rows, signals, strict=True)]
    for name in flags[0] if flags else {}:
        out[name] = {}
        for present in (True, False):
            idx = [i for i, f in enumerate(flags) if f[name] is present]
            readings = {
                "writer": [rows[i]["complexity"] for i in idx],
                "second": [second[str(rows[i]["id"])] for i in idx if str(rows[i]["id"]) in second],
                "tree": [read[i] for i in idx],
            }
            out[name]["with" if present else "without"] = {
                who: {"n": len(levels), **_shares(levels)} for who, levels in readings.items()
            }
    return out


def _shares(levels: Sequence[str]) -> dict[str, float]:
    counts = Counter(levels)
    return {lv: round(counts[lv] / len(levels), 3) if levels else 0.0 for lv in LEVELS[1:]}


def report(
    rows: Sequence[Mapping[str, Any]], reads: Sequence[Mapping[str, Any]],
    second: Mapping[str, str],
) -> dict[str, Any]:  # fmt: skip
    """One tree's confusion matrices, shape table and seed-signal table over ``rows``."""
    read = [str(r["shipped"][1]) for r in reads]
    signals = [list(r["signals"]) for r in reads]
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(str(row["group"]), []).append(i)
    labelled = [i for i, r in enumerate(rows) if r["complexity"] != "trivial"]
    pick = [rows[i] for i in labelled]
    return {
        "confusion": {
            g: confusion([rows[i] for i in idx], [read[i] for i in idx])
            for g, idx in groups.items()
        },
        "intent_confusion": {
            g: intent_misses([rows[i] for i in idx], [reads[i] for i in idx])
            for g, idx in groups.items()
        },
        "shapes": shape_table(pick, [read[i] for i in labelled], second),
        "seed_signals": signal_table(
            pick, [read[i] for i in labelled], [signals[i] for i in labelled], second
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Read every tune and training message with every tree; print and write the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="name=path")
    parser.add_argument("--held", action="store_true", help="also read the held halves")
    parser.add_argument("--vectors", type=Path, default=Path("/tmp/classify-lopo-vectors.npy"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    trees = dict(t.split("=", 1) for t in args.tree)
    rows = load_rows()
    vectors_of(rows, args.vectors)  # computed once, read by every tree's process
    keep = [i for i, r in enumerate(rows) if args.held or r["split"] != "held"]
    second = second_reading()
    out: dict[str, Any] = {"trees": trees, "held": args.held, "reports": {}}
    for name, path in trees.items():
        reads = run_tree(Path(path).resolve() / "src", args.vectors)
        out["reports"][name] = report([rows[i] for i in keep], [reads[i] for i in keep], second)
    out["machine"] = machine_info()
    _print(out)
    write_json(args.out, out)
    return 0


def _print(out: Mapping[str, Any]) -> None:
    names = list(out["reports"])
    print("complexity as labelled per group: " + " → ".join(names))
    first = out["reports"][names[0]]["confusion"]
    for group in first:
        cells = " → ".join(
            f"{out['reports'][n]['confusion'][group]['as_labelled']:.3f}" for n in names
        )
        print(f"  {group:<18} n={first[group]['n']:<4} {cells}")
    print("\nshapes (non-trivial): n, as the writer / second reader / both label it, "
          "writer's errors lower/higher")  # fmt: skip
    for shape in out["reports"][names[0]]["shapes"]:
        parts = []
        for n in names:
            c = out["reports"][n]["shapes"][shape]
            parts.append(f"{c['writer']}/{c['n']}  2nd {c['second']}/{c['n_second']}  both "
                         f"{c['both']}/{c['n_both']}  ↓{c['lower']} ↑{c['higher']}")  # fmt: skip
        print(f"  {shape:<40} " + "  |  ".join(parts))
    print("\nintents read otherwise than labelled (shipped; rules alone)")
    for group, cell in out["reports"][names[-1]]["intent_confusion"].items():
        shipped = ", ".join(f"{k} {v}" for k, v in cell["shipped"].items()) or "none"
        rules = ", ".join(f"{k} {v}" for k, v in list(cell["rules"].items())[:4]) or "none"
        print(f"  {group:<18} {shipped}  (rules: {rules})")
    print("\nseed signals: share complex or deep, with / without (writer, second, tree)")
    for name, cell in out["reports"][names[-1]]["seed_signals"].items():
        line = []
        for side in ("with", "without"):
            who = cell[side]
            shares = [f"{w} {who[w]['complex'] + who[w]['deep']:.2f}"
                      for w in ("writer", "second", "tree")]  # fmt: skip
            line.append(" ".join(shares) + f" (n {who['writer']['n']})")
        print(f"  {name:<26} with: {line[0]:<44} without: {line[1]}")


if __name__ == "__main__":
    raise SystemExit(main())
