"""What a change to the classifier changes, text by text, on every text the project holds
(issue 12).

    python bench/classify_changes.py --tree base=/tmp/s28-base --tree new=. \
        [--vectors /tmp/classify-changes-vectors.npy] [--out bench/results/classify-changes-….json]

Each ``--tree`` (the first is the baseline) reads every text below in a process of its own
(``PYTHONPATH=<tree>/src``), as the gate does: the rules
(:func:`engrain.recall.classify.classify`) and the shipped pipeline (the rules, then the
acknowledgement and intent models on the text's MiniLM vector,
:func:`engrain.recall.intent_model.refine`). The texts, by kind:

- ``labelled``: every labelled message of the gating sets and training files
  (``bench/complexity_lopo.py``'s rows), by set and half;
- ``trivial``: every gating set's trivial replies (``trivial*.jsonl``), by set and half;
- ``short``: the two short-message sets, labelled ``trivial`` or ``not``, by half;
- ``locomo``: every distinct question and turn of LoCoMo's development split (questions
  are what ``bench/locomo.py`` classifies; the turns are what a chat's user writes).

For each tree and kind: how many texts read trivial, how many read as labelled (a trivial
reply or short message read trivial, a labelled message's intent and complexity), and the
worse error counted on its own — a text that needs memory (a labelled non-trivial message, a
short message labelled ``not``) read trivial. Then every text whose shipped reading differs
from the baseline's, with both readings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine_info, write_json
from complexity_lopo import load_rows

DATA = Path(__file__).resolve().parent / "gating"
LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"
SHORT_SETS = ("short-messages", "short-messages-2")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def texts(locomo: Path) -> list[dict[str, Any]]:
    """Every text, with its ``kind``, ``group``, ``split``, ``turn`` and labels (``intent`` and
    ``complexity``; a short message's complexity is ``trivial`` or ``not``)."""
    rows: list[dict[str, Any]] = [
        {"kind": "labelled", "id": r["id"], "group": r["group"], "split": r["split"],
         "text": r["text"], "turn": r.get("turn", 0), "intent": r["intent"],
         "complexity": r["complexity"]}
        for r in load_rows()
    ]  # fmt: skip
    for path in sorted(DATA.glob("trivial*.jsonl")):
        group = path.stem.split("-", 1)[1] if "-" in path.stem else "main"
        rows += [{"kind": "trivial", "id": r["id"], "group": group, "split": r.get("split", ""),
                  "text": r["text"], "turn": r.get("turn", 0), "intent": "greeting",
                  "complexity": "trivial"} for r in _jsonl(path)]  # fmt: skip
    for name in SHORT_SETS:
        rows += [{"kind": "short", "id": r["id"], "group": name, "split": r.get("split", ""),
                  "text": r["text"], "turn": r.get("turn", 0), "intent": "",
                  "complexity": "trivial" if r["label"] == "trivial" else "not"}
                 for r in _jsonl(DATA / f"{name}.jsonl") if "text" in r]  # fmt: skip
    if locomo.exists():
        questions: set[str] = set()
        turns: set[str] = set()
        for sample in json.loads(locomo.read_text()):
            questions.update(q["question"] for q in sample["qa"])
            for key, session in sample["conversation"].items():
                if key.startswith("session_") and isinstance(session, list):
                    turns.update(t["text"] for t in session)
        for i, text in enumerate(sorted(questions | turns)):
            group = "question" if text in questions else "turn"
            rows.append({"kind": "locomo", "id": f"locomo-{i}", "group": group, "split": "",
                         "text": text, "turn": 0, "intent": "", "complexity": ""})  # fmt: skip
    return rows


def vectors_of(rows: Sequence[dict[str, Any]], cache: Path) -> Any:
    """Every text's MiniLM vector (from ``cache`` when it holds as many rows)."""
    import numpy as np

    if cache.exists():
        cached = np.load(cache)
        if len(cached) == len(rows):
            return cached
    from engrain.embed.minilm import MiniLMEmbedder

    vectors = np.asarray(MiniLMEmbedder().embed([r["text"] for r in rows]), dtype=np.float64)
    np.save(cache, vectors)
    return vectors


def read_all(rows: Sequence[dict[str, Any]], vectors: Any) -> list[list[str]]:
    """Every row read by the engrain on the path: rules and shipped intent and complexity."""
    from engrain.recall import intent_model as im
    from engrain.recall.classify import classify

    model = im.load()
    embedder = model.embedder if model else None
    out = []
    for row, vector in zip(rows, vectors, strict=True):
        rules = classify(row["text"], turn=row["turn"])
        shipped = im.refine(rules, row["text"], vector, embedder)
        out.append([rules.intent.value, rules.complexity.value, shipped.intent.value,
                    shipped.complexity.value])  # fmt: skip
    return out


def run_tree(src: Path, locomo: Path, vectors: Path) -> list[list[str]]:
    """:func:`read_all` in a process with ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, __file__, "--worker", str(locomo), str(vectors)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return list(json.loads(done.stdout))


def summary(rows: Sequence[dict[str, Any]], reads: Sequence[list[str]]) -> dict[str, Any]:
    """Per kind, group and split: texts, read trivial, read as labelled, and (the worse
    error) texts needing memory read trivial."""
    counts: dict[str, Counter[str]] = {}
    for row, read in zip(rows, reads, strict=True):
        key = f"{row['kind']}/{row['group']}/{row['split'] or '-'}"
        c = counts.setdefault(key, Counter())
        trivial = read[3] == "trivial"
        c["texts"] += 1
        c["read_trivial"] += trivial
        if row["kind"] == "labelled":
            c["intent_as_labelled"] += read[2] == row["intent"]
            c["complexity_as_labelled"] += read[3] == row["complexity"]
        if row["kind"] in ("trivial", "short") and row["complexity"] == "trivial":
            c["trivial_read_trivial"] += trivial
        if row["complexity"] not in ("trivial", "") and trivial:
            c["needs_memory_read_trivial"] += 1
    return {key: dict(c) for key, c in sorted(counts.items())}


def changes(rows: Sequence[dict[str, Any]], base: Sequence[list[str]], new: Sequence[list[str]]
            ) -> list[dict[str, Any]]:  # fmt: skip
    """Every text whose shipped or rules reading differs between ``base`` and ``new``."""
    return [
        {"kind": row["kind"], "group": row["group"], "split": row["split"], "id": row["id"],
         "text": row["text"], "labelled": [row["intent"], row["complexity"]],
         "base": b, "new": n}
        for row, b, n in zip(rows, base, new, strict=True) if b != n
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Read every text with every tree, print the changes and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="name=path (≥ 2)")
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    parser.add_argument("--vectors", type=Path,
                        default=Path("/tmp/classify-changes-vectors.npy"))  # fmt: skip
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    trees = dict(t.split("=", 1) for t in args.tree)
    rows = texts(args.locomo)
    vectors_of(rows, args.vectors)  # computed once, read by every tree's process
    reads = {name: run_tree(Path(path).resolve() / "src", args.locomo, args.vectors)
             for name, path in trees.items()}  # fmt: skip
    names = list(trees)
    report: dict[str, Any] = {
        "trees": trees,
        "summary": {n: summary(rows, reads[n]) for n in names},
        "changes": {n: changes(rows, reads[names[0]], reads[n]) for n in names[1:]},
        "machine": machine_info(),
    }
    _print(report, names)
    write_json(args.out, report)
    return 0


def _print(report: dict[str, Any], names: Sequence[str]) -> None:
    base = report["summary"][names[0]]
    for n in names[1:]:
        print(f"\n{names[0]} → {n}, by kind/group/split (only those that differ):")
        for key, after in report["summary"][n].items():
            before = base.get(key, {})
            if before != after:
                print(f"  {key}: {before} → {after}")
        moved = Counter(c["kind"] for c in report["changes"][n])
        print(f"  texts read differently: {dict(moved)}")
        for c in report["changes"][n]:
            print(
                f"    {c['kind']} {c['group']} {c['split'] or '-'} {c['id']} labelled "
                f"{'/'.join(x for x in c['labelled'] if x) or '-'}: shipped "
                f"{'/'.join(c['base'][2:])} → {'/'.join(c['new'][2:])} {c['text'][:80]!r}"
            )


def _worker(locomo: Path, vectors: Path) -> int:
    import numpy as np

    print(json.dumps(read_all(texts(locomo), np.load(vectors))))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        raise SystemExit(_worker(Path(sys.argv[2]), Path(sys.argv[3])))
    raise SystemExit(main())
