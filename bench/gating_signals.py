"""Every typed learning ``explain()`` scored for the gating evaluation's labelled messages,
with its label (must-include, must-exclude or none), its verdict and its terms, and how well
each candidate matching signal separates the classes that matter (issue 12, session 28):

- **miss**: a must-include memory the gate did not inject; **hit**: one it injected;
- **leak**: a must-exclude memory it injected; **excluded**: one it rightly left out;
- **kept**: an unlabelled memory it injected (tokens no label asks for);
- **rejection**: an unlabelled memory it left out.

A signal that finds misses is high on them and low on the rejections (and excluded), so
for each signal the report gives the share of each class where it is non-zero, its mean,
the AUC of misses against rejections (0.5: no separation; ``relevance``, the calibrated
relevance the gate already uses, is the yardstick), and the lift curve: of the candidates
under their intent's threshold ("score x below y"), how many misses, must-exclude memories
and lines in all a term ``w × signal`` would lift over it, beside a shift of every score by
``w`` (what lowering the thresholds does).

Signals (computed here from the message and the project's rows, nothing fitted):

- ``entity``: the share of the memory's identifiers (paths, dotted or snake_case names,
  CamelCase, acronyms, words with digits, and their parts) that the message also has;
- ``tag_named``: the message names one of the memory's own tags (its row's ``domains``,
  :func:`engrain.recall.tags.names_a_tag`); ``tag_other``: it names none of them but names
  another learning's tag of the same project;
- ``kind_intent``: the memory's kind is one the message's intent lifts
  (``score.INTENT_TYPE_MULTIPLIER`` above 1);
- ``cooccur``: the cosine (idf-weighted) between the memory's words and the words the
  message's words co-occur with in the project's learnings (positive PMI, pairs seen twice
  or more): the project's own vocabulary;
- ``neighbour``: the best model cosine between the memory and the learnings the gate found
  clearly relevant to the message (calibrated relevance ≥ 0.6): a second hop.

Usage: ``python bench/gating_signals.py [--split tune] [--sets …] [--out …]``;
``--analyse dump.json`` recomputes the report from a written dump.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from common import NOW, write_json
from gating import SETS, USER, Projects, load_data

from engrain.embed import make_embedder
from engrain.model import Kind
from engrain.recall.classify import Intent
from engrain.recall.score import INTENT_TYPE_MULTIPLIER
from engrain.recall.tags import message_terms, names_a_tag
from engrain.store.lexical import tokenize, words

TERMS = ("calibrated_relevance", "cosine", "lexical", "lexical_no_evidence", "semantic",
         "type_boost", "boost_scale", "decay", "domain", "usage")  # fmt: skip


def dump(split: str, names: Sequence[str], embedder_name: str) -> list[dict[str, Any]]:
    """One row per (labelled message of ``split``, typed learning explain() scored)."""
    embedder = make_embedder(embedder_name)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="engrain-signals-") as tmp:
        for name in names:
            data = load_data(name=name)
            directory = Path(tmp) / name
            directory.mkdir()
            projects = Projects(data, embedder, directory)
            rows = {r["id"]: r for rs in data.projects.values() for r in rs}
            engines = {p: projects.fresh(p) for p in data.projects}
            for message in data.messages:
                if message["split"] != split:
                    continue
                project = message["project"]
                engine = engines[project]
                gated = engine.explain(message["text"], USER, project=project,
                                       turn=message.get("turn", 0), now=NOW)  # fmt: skip
                include, exclude = set(message["must_include"]), set(message["must_exclude"])
                seen = set()
                for d in gated.decisions:
                    mid = d.item.memory.id
                    if mid not in rows or mid in seen:
                        continue
                    seen.add(mid)
                    terms = gated.components.get(mid, {})
                    out.append({
                        "set": name, "project": project, "message": message["id"],
                        "text": message["text"], "intent": gated.classification.intent.value,
                        "labelled_intent": message["intent"], "memory": mid,
                        "kind": rows[mid]["kind"], "selected": d.selected,
                        "reason": d.reason, "score": round(d.item.score, 4),
                        "label": "include" if mid in include else
                        "exclude" if mid in exclude else "",
                        "terms": {t: round(terms[t], 4) for t in TERMS if t in terms},
                    })  # fmt: skip
                for mid in include - seen:
                    out.append({"set": name, "project": project, "message": message["id"],
                                "text": message["text"],
                                "intent": gated.classification.intent.value,
                                "labelled_intent": message["intent"], "memory": mid,
                                "kind": rows[mid]["kind"], "selected": False,
                                "reason": None, "score": None, "label": "include",
                                "terms": {}})  # fmt: skip
            for engine in engines.values():
                engine.close()
            print(f"{name}: {sum(1 for r in out if r['set'] == name)} rows", flush=True)
    return out


#: What marks an identifier: a separator inside a word, a lower-upper step, an acronym, a
#: digit beside letters.
_IDENTIFIER = (re.compile(r"[_/.]\w"), re.compile(r"[a-z][A-Z]"),
               re.compile(r"^[A-Z][A-Z0-9]+$"))  # fmt: skip
_PARTS = re.compile(r"[_./:-]+|(?<=[a-z])(?=[A-Z])")


def entities(text: str) -> set[str]:
    """The identifiers of ``text`` and their parts of three letters or more, lowercased."""
    out: set[str] = set()
    for token in re.findall(r"[\w./:-]+", text):
        token = token.strip(".:-/")
        if len(token) < 3:
            continue
        digits = re.search(r"\d", token) and re.search(r"[A-Za-z]", token)
        if digits or any(p.search(token) for p in _IDENTIFIER):
            out.add(token.lower())
            out.update(part.lower() for part in _PARTS.split(token) if len(part) >= 3)
    return out


def _cosine(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    num = sum(v * b.get(k, 0.0) for k, v in a.items())
    na, nb = math.sqrt(sum(v * v for v in a.values())), math.sqrt(sum(v * v for v in b.values()))
    return num / (na * nb) if na and nb else 0.0


class Vocabulary:
    """A project's learnings as a vocabulary: each term's idf and its positive-PMI
    neighbours (terms it shares a learning with at least twice)."""

    def __init__(self, contents: Sequence[str]) -> None:
        docs = [set(tokenize(c)) for c in contents]
        n = len(docs)
        df: Counter[str] = Counter()
        pairs: Counter[tuple[str, str]] = Counter()
        for terms in docs:
            df.update(terms)
            ordered = sorted(terms)
            for i, a in enumerate(ordered):
                for b in ordered[i + 1 :]:
                    pairs[(a, b)] += 1
        self.idf = {t: math.log(n / c) for t, c in df.items()}
        self.near: dict[str, dict[str, float]] = defaultdict(dict)
        for (a, b), c in pairs.items():
            pmi = math.log(c * n / (df[a] * df[b])) if c >= 2 else 0.0
            if pmi > 0:
                self.near[a][b] = self.near[b][a] = pmi

    def expanded_cosine(self, message: str, content: str) -> float:
        """The memory's words against what the message's words co-occur with."""
        asked = set(tokenize(message))
        expansion: Counter[str] = Counter()
        for t in asked:
            for u, pmi in self.near.get(t, {}).items():
                if u not in asked:
                    expansion[u] += pmi * self.idf.get(t, 0.0)
        memory = {t: self.idf.get(t, 0.0) for t in set(tokenize(content))}
        return _cosine(expansion, memory)


def signals(rows: list[dict[str, Any]], names: Sequence[str], embedder_name: str) -> None:
    """Each row's signals, in place (``row["signals"]``)."""
    memories: dict[tuple[str, str], Mapping[str, Any]] = {}
    for name in names:
        for project, found in load_data(name=name).projects.items():
            memories.update({(project, r["id"]): r for r in found})
    learnings: dict[str, list[str]] = defaultdict(list)
    tags: dict[str, set[str]] = defaultdict(set)
    for (project, _), r in memories.items():
        learnings[project].append(r["content"])
        tags[project].update(r.get("domains") or ())
    vocabularies = {p: Vocabulary(c) for p, c in learnings.items()}
    keys = list(memories)
    vectors = make_embedder(embedder_name).embed([memories[k]["content"] for k in keys])
    at = {k: i for i, k in enumerate(keys)}
    by_message: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_message[(r["set"], r["message"])].append(r)
    for found in by_message.values():
        anchors = [at[(r["project"], r["memory"])] for r in found
                   if r["terms"].get("calibrated_relevance", 0.0) >= 0.6]  # fmt: skip
        for r in found:
            key = (r["project"], r["memory"])
            memory, terms = memories[key], message_terms(r["text"])
            own = tuple(memory.get("domains") or ())
            named = names_a_tag(own, terms)
            mine = entities(memory["content"])
            asked = entities(r["text"]) | {w.lower() for w in words(r["text"])}
            try:
                lift = INTENT_TYPE_MULTIPLIER.get((Intent(r["intent"]), Kind(r["kind"])), 1.0)
            except ValueError:
                lift = 1.0
            near = [float(vectors[at[key]] @ vectors[a]) for a in anchors if a != at[key]]
            r["signals"] = {
                "relevance": r["terms"].get("calibrated_relevance", 0.0),
                "entity": len(mine & asked) / len(mine) if mine else 0.0,
                "tag_named": float(named),
                "tag_other": float(not named and names_a_tag(sorted(tags[r["project"]]), terms)),
                "kind_intent": float(lift > 1.0),
                "cooccur": vocabularies[r["project"]].expanded_cosine(r["text"], memory["content"]),
                "neighbour": max(near, default=0.0),
            }  # fmt: skip


CLASSES = ("miss", "hit", "leak", "excluded", "kept", "rejection")


def klass(row: Mapping[str, Any]) -> str:
    """The row's class (:data:`CLASSES`)."""
    if row["label"] == "include":
        return "hit" if row["selected"] else "miss"
    if row["label"] == "exclude":
        return "leak" if row["selected"] else "excluded"
    return "kept" if row["selected"] else "rejection"


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """P(a positive's value > a negative's), ties counting half."""
    if not positive or not negative:
        return float("nan")
    ordered = np.sort(np.asarray(negative, dtype=np.float64))
    total = 0.0
    for x in positive:
        lo, hi = np.searchsorted(ordered, x, "left"), np.searchsorted(ordered, x, "right")
        total += float(lo) + 0.5 * float(hi - lo)
    return total / (len(positive) * len(negative))


_BELOW = re.compile(r"^score ([\d.]+) below ([\d.]+)")
WEIGHTS = (0.02, 0.05, 0.1, 0.2)


def analyse(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per signal: the share of each class where it is non-zero, its mean, the AUC of
    misses against rejections, and the lift curve over the candidates under threshold."""
    by_class: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_class[klass(r)].append(r)
    below = []
    for r in rows:
        found = _BELOW.match(r["reason"] or "") if not r["selected"] else None
        if found:
            below.append((float(found.group(2)) - float(found.group(1)), r))
    out: dict[str, Any] = {"counts": {c: len(by_class[c]) for c in CLASSES}, "signals": {}}
    names = ["shift", *rows[0]["signals"]] if rows else []
    for name in names:

        def value(r: Mapping[str, Any], name: str = name) -> float:
            return 1.0 if name == "shift" else min(1.0, float(r["signals"][name]))

        curve = {}
        for w in WEIGHTS:
            lifted = [r for gap, r in below if value(r) * w >= gap]
            curve[str(w)] = {"misses": sum(r["label"] == "include" for r in lifted),
                             "excluded": sum(r["label"] == "exclude" for r in lifted),
                             "lines": len(lifted)}  # fmt: skip
        if name == "shift":
            out["signals"][name] = {"lift": curve}
            continue
        values = {c: [value(r) for r in by_class[c]] for c in CLASSES}
        out["signals"][name] = {
            "nonzero": {c: round(float(np.mean([v > 0 for v in values[c]])), 3)
                        if values[c] else None for c in CLASSES},
            "mean": {c: round(float(np.mean(values[c])), 3) if values[c] else None
                     for c in CLASSES},
            "auc_miss_rejection": round(auc(values["miss"],
                                            values["rejection"] + values["excluded"]), 3),
            "lift": curve,
        }  # fmt: skip
    return out


def table(report: Mapping[str, Any]) -> str:
    """The analysis as text."""
    lines = [" ".join(f"{c} {n}" for c, n in report["counts"].items())]
    lines.append(f"{'signal':12} " + " ".join(f"{c[:8]:>9}" for c in CLASSES)
                 + "   AUC  lift (misses/excluded/lines) at w = "
                 + ", ".join(map(str, WEIGHTS)))  # fmt: skip
    for name, s in report["signals"].items():
        lift = "  ".join(f"{v['misses']}/{v['excluded']}/{v['lines']}" for v in s["lift"].values())
        if "nonzero" not in s:
            lines.append(f"{name:12} {'':{10 * len(CLASSES)}}  --    {lift}")
            continue
        shares = " ".join(f"{s['nonzero'][c] if s['nonzero'][c] is not None else float('nan'):9.3f}"
                          for c in CLASSES)  # fmt: skip
        lines.append(f"{name:12} {shares}  {s['auc_miss_rejection']:.3f}  {lift}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dump the candidates of one split with their signals, and print the separation."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="tune", choices=("tune", "held"))
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--analyse", type=Path, help="a written dump to analyse again")
    parser.add_argument("--dump", type=Path, help="where to write every row (large)")
    parser.add_argument("--out", type=Path, help="where to write the analysis")
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.sets.split(",") if s.strip()]
    if args.analyse:
        rows = json.loads(args.analyse.read_text(encoding="utf-8"))["rows"]
    else:
        rows = dump(args.split, names, args.embedder)
        signals(rows, names, args.embedder)
        write_json(args.dump, {"benchmark": "gating-signals", "split": args.split,
                               "rows": rows})  # fmt: skip
    report = analyse(rows)
    print(table(report))
    write_json(args.out, {"benchmark": "gating-signals", "split": args.split,
                          "sets": names, **report})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
