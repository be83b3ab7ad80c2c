"""How often two careful readers agree on a message's intent and complexity (issue 12).

The gating evaluation's labelled messages were labelled by several writers (one per file);
``bench/gating/second-reading.jsonl`` is a second reading of the same 642 messages, made
blind (the seed's tables only, no file's labels, no classifier output). This script
measures, per file and split (``all``, and ``tune`` / ``held`` where the file has them):

- the agreement of the two readings: intent and complexity exact, complexity within one
  level (trivial < simple < moderate < complex < deep), Cohen's kappa for both and a
  linearly weighted kappa for complexity (an ordinal scale), and the confusion matrices
  (rows: the writer's label, columns: the second reading's);
- the classifier against each reading: the rules alone (``engrain.recall.classify``) and
  what the gate decides with the shipped intent model (``Engine.explain()``'s
  classification on an empty engine: the classification does not depend on the store), and
  on the messages where the two readings agree (the labels two readers share);
- pooled over every file, the commonest disagreements with their message ids.

The intent model was trained on ``classify-train-2``, ``classify-train-3`` and the ``tune``
halves of ``messages`` and ``messages-pulse`` (``bench/train_classifier.py``): its numbers
there are in-sample, and each block says so (``model_in_sample``).

Usage::

    .venv/bin/python bench/label_agreement.py [--out bench/results/label-agreement.json]
        [--embedder minilm|hash] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, machine_info, open_engine, write_json
from train_classifier import FILES as MODEL_FILES
from train_classifier import HALVED

from engrain.embed import make_embedder
from engrain.recall.classify import Complexity, Intent, classify

DATA = Path(__file__).resolve().parent / "gating"
SECOND = DATA / "second-reading.jsonl"
#: The labelled files the second reading covers, in report order.
FILES = ("messages", "messages-pulse", "messages-sensor", "classify-train-2",
         "classify-train-3")  # fmt: skip
LEVELS: tuple[str, ...] = tuple(c.value for c in Complexity)
INTENTS: tuple[str, ...] = tuple(i.value for i in Intent)
USER = "dev"
#: How many of the commonest disagreements the report lists, and ids per disagreement.
PATTERNS, PATTERN_IDS = 8, 12


@dataclass(frozen=True)
class Message:
    """One labelled message read twice (and, once measured, by the classifier)."""

    id: str
    file: str
    split: str  # "tune", "held" or "" when the file has no split
    text: str
    turn: int
    writer: tuple[str, str]  # (intent, complexity) in the file
    second: tuple[str, str]  # (intent, complexity) in the second reading


Reading = tuple[str, str]


def agreement(a: Sequence[str], b: Sequence[str]) -> float | None:
    """The share of positions where ``a`` and ``b`` hold the same label (None if empty)."""
    if len(a) != len(b):
        raise ValueError("two readings of different lengths")
    if not a:
        return None
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def within_one(a: Sequence[str], b: Sequence[str], levels: Sequence[str] = LEVELS) -> float | None:
    """The share of positions where the ordinal labels ``a`` and ``b`` are at most one
    level of ``levels`` apart (None if empty)."""
    if len(a) != len(b):
        raise ValueError("two readings of different lengths")
    if not a:
        return None
    rank = {level: i for i, level in enumerate(levels)}
    return sum(abs(rank[x] - rank[y]) <= 1 for x, y in zip(a, b, strict=True)) / len(a)


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """Cohen's kappa of two readings: (observed - chance agreement) / (1 - chance), chance
    from each reader's own label shares. None when empty or when both readers used one and
    the same label for everything (chance agreement 1: kappa undefined)."""
    observed = agreement(a, b)
    if observed is None:
        return None
    n = len(a)
    count_a, count_b = Counter(a), Counter(b)
    chance = sum(count_a[label] * count_b[label] for label in count_a) / (n * n)
    if chance >= 1.0:
        return None
    return (observed - chance) / (1.0 - chance)


def weighted_kappa(a: Sequence[str], b: Sequence[str],
                   levels: Sequence[str] = LEVELS) -> float | None:  # fmt: skip
    """Cohen's kappa with linear disagreement weights |i - j| / (k - 1) over the ordered
    ``levels``: 1 - observed weighted disagreement / chance weighted disagreement. None
    when empty or when chance disagreement is zero."""
    if len(a) != len(b):
        raise ValueError("two readings of different lengths")
    if not a or len(levels) < 2:
        return None
    rank = {level: i for i, level in enumerate(levels)}
    span = len(levels) - 1
    n = len(a)
    observed = sum(abs(rank[x] - rank[y]) for x, y in zip(a, b, strict=True)) / (n * span)
    count_a, count_b = Counter(rank[x] for x in a), Counter(rank[y] for y in b)
    chance = sum(count_a[i] * count_b[j] * abs(i - j)
                 for i in count_a for j in count_b) / (n * n * span)  # fmt: skip
    if chance == 0:
        return None
    return 1.0 - observed / chance


def confusion(rows: Sequence[str], cols: Sequence[str], labels: Sequence[str]) -> list[list[int]]:
    """The confusion matrix: cell [i][j] counts positions with ``rows`` = labels[i] and
    ``cols`` = labels[j]."""
    index = {label: i for i, label in enumerate(labels)}
    matrix = [[0] * len(labels) for _ in labels]
    for x, y in zip(rows, cols, strict=True):
        matrix[index[x]][index[y]] += 1
    return matrix


def _share(hits: Sequence[bool]) -> float | None:
    return sum(hits) / len(hits) if hits else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def readings_block(first: Sequence[Reading], second: Sequence[Reading]) -> dict[str, Any]:
    """The agreement of two readings of the same messages, intent and complexity."""
    fi, fc = [r[0] for r in first], [r[1] for r in first]
    si, sc = [r[0] for r in second], [r[1] for r in second]
    return {
        "intent": {"agreement": _round(agreement(fi, si)), "kappa": _round(cohen_kappa(fi, si))},
        "complexity": {
            "exact": _round(agreement(fc, sc)), "within_one": _round(within_one(fc, sc)),
            "kappa": _round(cohen_kappa(fc, sc)), "weighted_kappa": _round(weighted_kappa(fc, sc)),
        },
    }  # fmt: skip


def classifier_block(predicted: Sequence[Reading], first: Sequence[Reading],
                     second: Sequence[Reading]) -> dict[str, Any]:  # fmt: skip
    """The classifier's readings against each human reading, against either, and on the
    messages where the two human readings agree."""
    out: dict[str, Any] = {}
    for axis, k in (("intent", 0), ("complexity", 1)):
        p, f, s = [r[k] for r in predicted], [r[k] for r in first], [r[k] for r in second]
        agreed = [i for i in range(len(p)) if f[i] == s[i]]
        out[axis] = {
            "vs_writers": _round(agreement(p, f)),
            "vs_second": _round(agreement(p, s)),
            "vs_either": _round(_share([p[i] in (f[i], s[i]) for i in range(len(p))])),
            "agreed_n": len(agreed),
            "on_agreed": _round(agreement([p[i] for i in agreed], [f[i] for i in agreed])),
        }  # fmt: skip
    return out


def block(messages: Sequence[Message], predicted: Mapping[str, Mapping[str, Reading]]
          ) -> dict[str, Any]:  # fmt: skip
    """Every measure for one group of messages; ``predicted`` maps a classifier's name to
    its reading of each message id."""
    first = [m.writer for m in messages]
    second = [m.second for m in messages]
    return {
        "n": len(messages),
        "readings": readings_block(first, second),
        "complexity_confusion": {
            "rows": "writer", "cols": "second reading", "labels": list(LEVELS),
            "matrix": confusion([r[1] for r in first], [r[1] for r in second], LEVELS),
        },
        "intent_confusion": {
            "rows": "writer", "cols": "second reading", "labels": list(INTENTS),
            "matrix": confusion([r[0] for r in first], [r[0] for r in second], INTENTS),
        },
        "classifier": {
            name: classifier_block([by_id[m.id] for m in messages], first, second)
            for name, by_id in predicted.items()
        },
    }  # fmt: skip


def patterns(messages: Sequence[Message], axis: int,
             limit: int = PATTERNS) -> list[dict[str, Any]]:  # fmt: skip
    """The commonest (writer → second reading) disagreements on ``axis`` (0 intent,
    1 complexity), each with its count, its files, the writer's intents and up to
    :data:`PATTERN_IDS` ids."""
    groups: dict[tuple[str, str], list[Message]] = {}
    for m in messages:
        if m.writer[axis] != m.second[axis]:
            groups.setdefault((m.writer[axis], m.second[axis]), []).append(m)
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:limit]
    return [
        {"writer": w, "second": s, "n": len(ms), "files": dict(Counter(m.file for m in ms)),
         "writer_intents": dict(Counter(m.writer[0] for m in ms).most_common()),
         "ids": [m.id for m in ms[:PATTERN_IDS]]}
        for (w, s), ms in ranked
    ]  # fmt: skip


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]  # fmt: skip


def load(root: Path = DATA, second: Path = SECOND) -> list[Message]:
    """Every labelled message of :data:`FILES` with its second reading; a message the
    second reading lacks (or an id it has that no file holds) is an error."""
    reading = {r["id"]: (r["intent"], r["complexity"]) for r in _jsonl(second)}
    out: list[Message] = []
    for name in FILES:
        for row in _jsonl(root / f"{name}.jsonl"):
            if row["id"] not in reading:
                raise ValueError(f"{row['id']} ({name}) has no second reading")
            out.append(Message(row["id"], name, row.get("split", ""), row["text"],
                               int(row.get("turn", 0)), (row["intent"], row["complexity"]),
                               reading.pop(row["id"])))  # fmt: skip
    if reading:
        raise ValueError(f"second readings of unknown messages: {sorted(reading)[:5]}")
    for m in out:
        for label, known in ((m.writer[0], INTENTS), (m.second[0], INTENTS),
                             (m.writer[1], LEVELS), (m.second[1], LEVELS)):  # fmt: skip
            if label not in known:
                raise ValueError(f"{m.id}: unknown label {label!r}")
    return out


def rules_reading(messages: Sequence[Message]) -> dict[str, Reading]:
    """The rules' reading of each message (``classify`` with the message's turn)."""
    out = {}
    for m in messages:
        c = classify(m.text, turn=m.turn)
        out[m.id] = (c.intent.value, c.complexity.value)
    return out


def gate_reading(messages: Sequence[Message], embedder_name: str) -> dict[str, Reading]:
    """The gate's reading of each message: ``Engine.explain()``'s classification on an
    empty engine with ``embedder_name``'s embedder (with MiniLM, the shipped intent model
    gives its second opinion, as in ``bench/gating.py``)."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="label-agreement-") as tmp:
        engine = open_engine(Path(tmp), embedder=make_embedder(embedder_name))
        try:
            for m in messages:
                c = engine.explain(m.text, USER, turn=m.turn, now=NOW).classification
                out[m.id] = (c.intent.value, c.complexity.value)
        finally:
            engine.close()
    return out


def in_sample(file: str, split: str) -> bool | str:
    """Whether the shipped intent model was trained on ``file``'s ``split`` (``"all"``:
    the whole file): True, False, or ``"tune half"`` for the whole of a file it saw half of."""
    if file not in MODEL_FILES:
        return False
    if file not in HALVED:
        return True
    if split == "all":
        return "tune half"
    return split == "tune"


def report(messages: Sequence[Message], predicted: Mapping[str, Mapping[str, Reading]]
           ) -> dict[str, Any]:  # fmt: skip
    """The per-file, per-split and pooled measures, and the commonest disagreements."""
    files: dict[str, Any] = {}
    for name in FILES:
        rows = [m for m in messages if m.file == name]
        if not rows:
            continue
        parts: dict[str, Any] = {"all": block(rows, predicted)}
        parts["all"]["model_in_sample"] = in_sample(name, "all")
        for split in sorted({m.split for m in rows} - {""}, reverse=True):
            parts[split] = block([m for m in rows if m.split == split], predicted)
            parts[split]["model_in_sample"] = in_sample(name, split)
        files[name] = parts
    out_of_sample = [m for m in messages if in_sample(m.file, m.split or "all") is False]
    return {
        "files": files,
        "pooled": block(messages, predicted),
        "pooled_model_out_of_sample": block(out_of_sample, predicted),
        "patterns": {"intent": patterns(messages, 0), "complexity": patterns(messages, 1)},
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(result: Mapping[str, Any]) -> str:
    """A markdown table of the readings' agreement and the classifier per file and split."""
    lines = [
        "| file | split | n | intent agree | intent κ | cx exact | cx ±1 | cx κ | cx κw "
        "| rules i/c vs writer | rules i/c vs second | model i/c vs writer "
        "| model i/c vs second | model i/c on agreed |",
        "|---" * 14 + "|",
    ]
    groups: list[tuple[str, str, Mapping[str, Any]]] = [
        (name, split, part) for name, parts in result["files"].items()
        for split, part in parts.items()
    ]  # fmt: skip
    groups.append(("pooled", "all", result["pooled"]))
    groups.append(("pooled, model out of sample", "", result["pooled_model_out_of_sample"]))
    for name, split, part in groups:
        r, c = part["readings"], part["classifier"]

        def pair(who: str, key: str, c: Mapping[str, Any] = c) -> str:
            return f"{_fmt(c[who]['intent'][key])} / {_fmt(c[who]['complexity'][key])}"

        mark = {True: "*", "tune half": "½"}.get(part.get("model_in_sample", False), "")
        lines.append(
            f"| {name} | {split} | {part['n']} | {_fmt(r['intent']['agreement'])} "
            f"| {_fmt(r['intent']['kappa'])} | {_fmt(r['complexity']['exact'])} "
            f"| {_fmt(r['complexity']['within_one'])} | {_fmt(r['complexity']['kappa'])} "
            f"| {_fmt(r['complexity']['weighted_kappa'])} | {pair('rules', 'vs_writers')} "
            f"| {pair('rules', 'vs_second')} | {pair('model', 'vs_writers')}{mark} "
            f"| {pair('model', 'vs_second')}{mark} | {pair('model', 'on_agreed')}{mark} |"
        )
    return "\n".join(lines)


def run(embedder_name: str = "minilm", limit: int | None = None,
        gate: Callable[[Sequence[Message], str], dict[str, Reading]] = gate_reading
        ) -> dict[str, Any]:  # fmt: skip
    """Load, classify and measure; ``limit`` keeps the first N messages of each file."""
    messages = load()
    if limit is not None:
        kept: Counter[str] = Counter()
        limited = []
        for m in messages:
            if kept[m.file] < limit:
                kept[m.file] += 1
                limited.append(m)
        messages = limited
    predicted = {"rules": rules_reading(messages), "model": gate(messages, embedder_name)}
    return {
        "benchmark": "label_agreement",
        "second_reading": str(SECOND.relative_to(DATA.parent.parent)),
        "embedder": embedder_name,
        "model_trained_on": [f if f not in HALVED else f"{f} (tune half)" for f in MODEL_FILES],
        **report(messages, predicted),
        "machine": machine_info(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the table and the commonest disagreements, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parent
    parser.add_argument("--out", default=str(root / "results" / "label-agreement.json"))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    result = run(args.embedder, args.limit)
    print(table(result))
    print("(* the intent model was trained on these messages, ½ on half of them)")
    for axis in ("intent", "complexity"):
        print(f"\ncommonest {axis} disagreements (writer -> second reading):")
        for p in result["patterns"][axis]:
            print(
                f"  {p['writer']:>12} -> {p['second']:<12} {p['n']:>3}  {p['files']}"
                f"  intents {p['writer_intents']}"
            )
    write_json(Path(args.out), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
