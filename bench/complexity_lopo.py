"""Complexity and intent on a project nobody tuned on: leave one project out (issue 12).

Every labelled message of ``bench/gating/`` belongs to one *group*: the seven gating sets
(main = ``messages.jsonl``, pulse, sensor, quill, strata, harbor, brightfall; each with a
``tune`` and a ``held`` half) and the three ``classify-train*`` files. For each gating set
``S`` the learned parts are fitted on every other group's rows (the other sets' tune halves
and the three ``classify-train`` files; never a held half, never a row of ``S``) and scored
on ``S``'s tune half (``--held``: also on its held half, read once at the end). Meridian,
the eighth set, kestrel, the ninth, anvil, the tenth, and wrench, the eleventh, joined after
the choice was made on the seven: they are scored the same way, never fitted on and kept out
of the pooled numbers (:data:`FRESH`). Readings compared, each as the gate makes it from the
message and its MiniLM vector:

- ``rules``: :func:`engrain.recall.classify.classify` alone. Not fitted, but the rules were
  written against main's tune half and tuned on the other sets' tune halves
  (``docs/decisions.md``): their tune-half numbers are in-sample, their held ones are not;
- ``shipped``: the rules with the shipped intent model's second opinion
  (:func:`engrain.recall.intent_model.refine`), what ``bench/gating.py`` measures; the
  shipped model was fitted on main's and pulse's tune halves (in-sample there);
- ``intent LOPO, shipped files``: the same pipeline with the intent model refitted
  (``bench/train_classifier.py``'s fit, the same features) on the shipped model's files
  without ``S``: the honest transfer of the pipeline as it ships (on the five sets the
  shipped model never saw it is the shipped model);
- ``intent LOPO``: the same, the intent model fitted on every other group's rows (the
  other sets' tune halves too);
- ``learned``: ``intent LOPO``'s intent, and the complexity from a multinomial logistic
  regression over the intent model's features (vector, the rules' verdict and signals,
  the message's shape) plus that intent, fitted on the same rows (their intents the
  in-sample ones of the intent model fitted there); a message the rules read as trivial
  stays trivial;
- ``learned, no vector``: the same without the embedding (the rules' cues and the shape
  only: 80 features instead of 464);
- ``learned, seed writers`` / ``no vector, seed writers``: fitted on the seed-following
  writers' rows only (the six blind sets and ``classify-train-3``; main and the first two
  train files label one-line failures and scoped discussions lower);
- ``… second opinion@t``: ``intent LOPO``'s complexity unless that learned model puts at
  least ``t`` of its probability on another level (every ``t`` of :data:`THRESHOLDS`).

Also, where ``second-reading.jsonl`` covers the set (main, pulse, sensor), each reading on
the messages whose two human readings agree (``agreed``) and against the second reader.

Usage::

    .venv/bin/python bench/complexity_lopo.py [--held] [--out bench/results/….json]
        [--vectors /tmp/….npy]   # cache the MiniLM vectors between runs
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine_info, write_json
from train_classifier import fit_softmax, scores

from engrain.embed.minilm import MiniLMEmbedder
from engrain.recall import intent_model as im
from engrain.recall.classify import Classification, Complexity, classify

DATA = Path(__file__).resolve().parent / "gating"
#: gating set → its labelled file (tune and held halves)
SETS = {
    "main": "messages", "pulse": "messages-pulse", "sensor": "messages-sensor",
    "quill": "messages-quill", "strata": "messages-strata", "harbor": "messages-harbor",
    "brightfall": "messages-brightfall",
}  # fmt: skip
#: a set that joined after the learned models were chosen on the seven: scored like them,
#: never fitted on, outside the pooled numbers (nothing was tuned on it, rules included)
FRESH = {"meridian": "messages-meridian", "kestrel": "messages-kestrel",
         "anvil": "messages-anvil", "wrench": "messages-wrench"}  # fmt: skip
#: files without halves, always in the training rows of every left-out set
EXTRA = ("classify-train", "classify-train-2", "classify-train-3")
#: the probabilities the learned model must put on another level to overrule the rules
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
#: the groups the shipped intent model was fitted on (``bench/train_classifier.py``)
SHIPPED_FROM = ("main", "pulse", *EXTRA)
#: the groups written from the seed's tables (``bench/complexity_families.py``'s
#: seed-following writers); the earlier writers are main and the first two train files
SEED_FOLLOWING = ("pulse", "sensor", "quill", "strata", "harbor", "brightfall",
                  "classify-train-3")  # fmt: skip
LEARNED = ("learned", "learned, no vector", "learned, seed writers", "no vector, seed writers")
#: the second opinion whose changes are listed, message by message
SHOWN = "learned, no vector second opinion@0.7"
READINGS = ("rules", "shipped", "intent LOPO, shipped files", "intent LOPO", *LEARNED, *(
    f"{name} second opinion@{t}" for name in LEARNED for t in THRESHOLDS))  # fmt: skip


def load_rows() -> list[dict[str, Any]]:
    """Every labelled message with its ``group`` and ``split`` ("" for the extra files)."""
    rows = []
    for group, name in [*SETS.items(), *FRESH.items(), *((n, n) for n in EXTRA)]:
        for line in (DATA / f"{name}.jsonl").read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows.append({**row, "group": group, "split": row.get("split", "")})
    return rows


def vectors_of(rows: Sequence[dict[str, Any]], cache: Path | None) -> np.ndarray:
    """The MiniLM vector of every row's text (from ``cache`` when it holds as many)."""
    if cache is not None and cache.exists():
        cached = np.load(cache)
        if len(cached) == len(rows):
            return np.asarray(cached, dtype=np.float64)
    vectors = np.asarray(MiniLMEmbedder().embed([r["text"] for r in rows]), dtype=np.float64)
    if cache is not None:
        np.save(cache, vectors)
    return vectors


def training_rows(
    groups: np.ndarray, splits: np.ndarray, left_out: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows fitted on when ``left_out`` is scored: every other group's rows but the
    held halves; those of the seed-following writers; those of the shipped model's files."""
    train = (groups != left_out) & (splits != "held") & ~np.isin(groups, list(FRESH))
    return (train, train & np.isin(groups, SEED_FOLLOWING),
            train & np.isin(groups, SHIPPED_FROM))  # fmt: skip


def label_shares(
    rows: Sequence[dict[str, Any]], second: dict[str, str]
) -> dict[str, dict[str, dict[str, dict[str, int]]]]:
    """Per group and labelled intent, how many messages each reader put at each complexity
    (``writer``; ``second`` where the second reading covers the message): where the writers
    part from each other and from the seed's table (debugging and analysis: complex)."""
    out: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
    for row in rows:
        cell = out.setdefault(row["group"], {}).setdefault(row["intent"], {})
        writer = cell.setdefault("writer", {})
        writer[row["complexity"]] = writer.get(row["complexity"], 0) + 1
        if row["id"] in second:
            other = cell.setdefault("second", {})
            other[second[row["id"]]] = other.get(second[row["id"]], 0) + 1
    return out


def softmax(model: im.Model, x: np.ndarray) -> np.ndarray:
    """Each row's class probabilities under ``model``."""
    logits = ((x - model.mean) / model.scale) @ model.weights + model.bias
    logits -= logits.max(axis=1, keepdims=True)
    prob = np.exp(logits)
    return np.asarray(prob / prob.sum(axis=1, keepdims=True))


def read_set(
    rows: Sequence[dict[str, Any]], rules: Sequence[Classification], x: np.ndarray,
    shape_only: np.ndarray, train: np.ndarray, seed: np.ndarray, shipped: np.ndarray,
    test: np.ndarray,
) -> dict[str, list[tuple[str, str]]]:  # fmt: skip
    """(intent, complexity) of every ``test`` row under each LOPO reading: the intent model
    fitted on the ``train`` rows, the complexity models on them or on the ``seed`` rows
    (the seed-following writers' among them); ``intent LOPO, shipped files``: the intent
    model fitted on the ``shipped`` rows (the shipped model's files among ``train``); each
    second opinion at every threshold of
    :data:`THRESHOLDS` (``"second opinion@0.6"``)."""
    y_intent = np.array([im.INTENTS.index(im.Intent(r["intent"])) for r in rows])
    y_level = np.array([im.COMPLEXITIES.index(Complexity(r["complexity"])) for r in rows])
    intent_model = fit_softmax(x[train], y_intent[train], len(im.INTENTS))
    eye = np.eye(len(im.INTENTS))
    read_all = eye[scores(intent_model, x)]  # in-sample on the train rows, as shipped
    tested = np.flatnonzero(test)
    lopo = []
    for index in tested:
        intent = im.INTENTS[int(read_all[index].argmax())]
        refined = _refined(rules[index], rows[index]["text"], intent)
        lopo.append((refined.intent.value, refined.complexity.value))
    out: dict[str, list[tuple[str, str]]] = {"intent LOPO": lopo}
    narrow = fit_softmax(x[shipped], y_intent[shipped], len(im.INTENTS))
    out["intent LOPO, shipped files"] = [
        (r.intent.value, r.complexity.value)
        for r in (_refined(rules[i], rows[i]["text"], im.INTENTS[int(k)])
                  for i, k in zip(tested, scores(narrow, x[test]), strict=True))
    ]  # fmt: skip
    for name, features, fitted in (
        ("learned", x, train), ("learned, no vector", shape_only, train),
        ("learned, seed writers", x, seed), ("no vector, seed writers", shape_only, seed),
    ):  # fmt: skip
        model = fit_softmax(np.hstack([features[fitted], read_all[fitted]]), y_level[fitted],
                            len(im.COMPLEXITIES))  # fmt: skip
        prob = softmax(model, np.hstack([features[test], read_all[test]]))
        trivial = [rules[i].complexity is Complexity.TRIVIAL for i in tested]
        best = [im.COMPLEXITIES[int(p.argmax())].value for p in prob]
        out[name] = [(i, lv if t else b) for (i, lv), t, b in zip(lopo, trivial, best,
                                                                 strict=True)]  # fmt: skip
        for threshold in THRESHOLDS:
            out[f"{name} second opinion@{threshold}"] = [
                (i, b if not t and p.max() >= threshold else lv)
                for (i, lv), t, b, p in zip(lopo, trivial, best, prob, strict=True)
            ]
    return out


def _refined(rules: Classification, text: str, intent: im.Intent) -> Classification:
    """The gate's reading with the model's ``intent`` (a DECIDED intent kept, as shipped)."""
    if im.DECIDED.intersection(rules.signals):
        return rules
    return im.with_intent(rules, text, intent)


def main(argv: Sequence[str] | None = None) -> int:
    """Read every set with every reading, print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--held", action="store_true", help="also score the held halves")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--vectors", type=Path, default=None)
    args = parser.parse_args(argv)

    rows = load_rows()
    vectors = vectors_of(rows, args.vectors)
    embedder = im.load()
    rules = [classify(r["text"], turn=r.get("turn", 0)) for r in rows]
    x = np.stack([im.features(c, r["text"], v) for r, c, v in zip(rows, rules, vectors,
                                                                   strict=True)])  # fmt: skip
    shape_only = x[:, vectors.shape[1] :]
    groups = np.array([r["group"] for r in rows])
    splits = np.array([r["split"] for r in rows])
    shipped = [
        im.refine(c, r["text"], v, embedder.embedder if embedder else None)
        for r, c, v in zip(rows, rules, vectors, strict=True)
    ]
    second = _second_reading()
    scored = ("tune", "held") if args.held else ("tune",)
    report: dict[str, Any] = {"thresholds": list(THRESHOLDS), "sets": {}, "changed": {}}
    pooled: dict[str, dict[str, Counter[str]]] = {s: {} for s in scored}
    for name in (*SETS, *FRESH):
        train, seed, narrow = training_rows(groups, splits, name)
        for split in scored:
            test = (groups == name) & (splits == split)
            reads = read_set(rows, rules, x, shape_only, train, seed, narrow, test)
            idx = np.flatnonzero(test)
            reads["rules"] = [(rules[i].intent.value, rules[i].complexity.value) for i in idx]
            reads["shipped"] = [(shipped[i].intent.value, shipped[i].complexity.value)
                                for i in idx]  # fmt: skip
            entry = {}
            for reading in READINGS:
                hits = _hits([rows[i] for i in idx], reads[reading], second)
                if name in SETS:
                    pooled[split].setdefault(reading, Counter()).update(hits)
                entry[reading] = _rates(hits)
            report["sets"].setdefault(name, {})[split] = entry
            report["changed"].setdefault(name, {})[split] = [
                f"{rows[i]['id']} {rows[i]['complexity']}: {b[1]} → {a[1]} {rows[i]['text'][:70]!r}"
                for i, a, b in zip(idx, reads[SHOWN], reads["intent LOPO"], strict=True)
                if a[1] != b[1]
            ]
    report["pooled"] = {s: {r: _rates(c) for r, c in p.items()} for s, p in pooled.items()}
    report["label_shares"] = label_shares(rows, second)
    report["machine"] = machine_info()
    _print(report, scored)
    write_json(args.out, report)
    return 0


def _second_reading() -> dict[str, str]:
    """Message id → the second reader's complexity."""
    lines = (DATA / "second-reading.jsonl").read_text().splitlines()
    return {row["id"]: row["complexity"] for row in map(json.loads, filter(str.strip, lines))}


def _hits(
    rows: Sequence[dict[str, Any]], got: Sequence[tuple[str, str]], second: dict[str, str]
) -> Counter[str]:
    """Counts: rows, intents and complexities as labelled; rows the second reader read,
    complexities as the second reader read them; rows both readers agree on, complexities
    as they agree."""
    hits: Counter[str] = Counter(n=len(rows))
    for row, (intent, level) in zip(rows, got, strict=True):
        hits["intent"] += intent == row["intent"]
        hits["complexity"] += level == row["complexity"]
        other = second.get(row["id"])
        if other is not None:
            hits["second_n"] += 1
            hits["vs_second"] += level == other
            if other == row["complexity"]:
                hits["agreed_n"] += 1
                hits["on_agreed"] += level == other
    return hits


def _rates(hits: Counter[str]) -> dict[str, float | int | None]:
    def rate(part: str, whole: str) -> float | None:
        return round(hits[part] / hits[whole], 3) if hits[whole] else None

    return {"n": hits["n"], "intent": rate("intent", "n"),
            "complexity": rate("complexity", "n"), "second_n": hits["second_n"],
            "vs_second": rate("vs_second", "second_n"), "agreed_n": hits["agreed_n"],
            "on_agreed": rate("on_agreed", "agreed_n")}  # fmt: skip


def _print(report: dict[str, Any], scored: Sequence[str]) -> None:
    for split in scored:
        print(f"\n{split} halves, complexity (intent) as labelled, each set left out;"
              " pooled: complexity, on agreed (n), against the second reader")  # fmt: skip
        names = (*SETS, *FRESH)
        print(f"{'reading':<40}" + "".join(f"{s:>11}" for s in names) + "   pooled (the seven)")
        for reading in READINGS:
            cells = [report["sets"][s][split][reading] for s in names]
            pool = report["pooled"][split][reading]
            print(f"{reading:<40}" + "".join(
                f"{c['complexity']:>5.3f} ({c['intent']:.2f})" for c in cells
            ) + f"   {pool['complexity']:.3f} ({pool['intent']:.3f}) agreed {pool['on_agreed']}"
                f" ({pool['agreed_n']}) second {pool['vs_second']}")  # fmt: skip
    for name, by_split in report["changed"].items():
        for split, lines in by_split.items():
            for line in lines:
                print(f"  {SHOWN} {name} {split}: {line}")


if __name__ == "__main__":
    raise SystemExit(main())
