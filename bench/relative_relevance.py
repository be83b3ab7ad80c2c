"""Does a relevance relative to the message's background over the user's learnings mean the
same on every project, where the raw cosine does not? (issue 12, session 19)

For every labelled message of one split (``tune`` by default; never tune on ``held``) of each
gating set (``bench/gating/``), ``explain()`` on the project as loaded gives every scored
typed learning's cosine with the message and its calibrated relevance (``recall.relevance``).
Each learning is labelled ``include`` (the message's must-include), ``exclude`` (its
must-exclude) or ``other``; a labelled memory the gate does not score (muted, superseded)
is in no row. Measures, each per message over the learnings it scores:

- ``cosine``: the raw MiniLM cosine;
- ``relevance``: the gate's calibrated relevance (the blend over the best blend);
- ``z``: the cosine's z-score among this message's cosines with every scored learning;
- ``quantile``: the share of this message's scored learnings with a lower cosine;
- ``excess``: the cosine minus this message's median cosine;
- ``over_best``: the cosine over this message's best cosine (the calibration without BM25);
- ``relevance_z``: the calibrated relevance's z-score among this message's learnings;
- ``spread``: the user's own learnings as a bridge (a second question of the issue: a
  memory reached through a learning the message matches, "Services" → an invariant listing
  the objects the operator owns → a decision about owned objects): the larger of the
  relevance and, over the message's ``ANCHORS`` most relevant learnings, the best
  ``cos(memory, anchor) × relevance(anchor)``.

- ``cooccurrence``: the same bridge through words: the best Jaccard, over the user's
  learnings, between a message term some learning uses and a term of the memory the
  message does not use ("clock" and "hlc" written in the same learnings) — 0 for a
  message whose terms no learning uses ("wandb").

``lifted`` counts, per label, the learnings under relevance ``LIFT_AT`` that ``spread``
raises to it or over.

Per set and measure: the AUC of ``include`` against the rest and against ``exclude``; the
value at which 95% of the set's ``include`` labels pass (the threshold a gate would need
there) and the share of ``other`` passing at it; and, leaving each set out, the threshold
that passes 95% of the other four sets' ``include`` labels applied to it (what a fixed
threshold chosen elsewhere does on a project nobody has seen): its ``include`` recall and
``other`` pass rate. A measure that means the same everywhere has thresholds that agree
between sets and left-out recalls near 0.95 on every set.

At equal cost (``matched``): leaving each set out, the threshold that lets ``share`` (0.10,
0.15, 0.20) of the other four sets' ``other`` learnings pass, applied to it: its
``include`` recall and its ``other`` and ``exclude`` pass rates. A measure that separates
better has higher recalls at the same share; one that transfers better has recalls and pass
rates that agree between sets.

Usage: ``python bench/relative_relevance.py [--split tune] [--sets main,pulse,...]
[--out bench/results/relative-relevance.json]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, write_json
from gating import SETS, USER, Projects, load_data

from engrain.embed import make_embedder
from engrain.recall.gate import GateOptions
from engrain.store.lexical import tokenize

MEASURES = ("cosine", "relevance", "z", "quantile", "excess", "over_best", "relevance_z",
            "spread", "cooccurrence")  # fmt: skip
#: ``spread``'s anchors: the message's most relevant learnings.
ANCHORS = 3
#: The relevance ``lifted`` counts the learnings ``spread`` raises over (the boost's
#: "related" level and about the lowest threshold of the gated profile).
LIFT_AT = 0.3
LABELS = ("include", "exclude", "other")
#: The must-include recall a gate's threshold is read at.
RECALL = 0.95
#: The shares of other sets' ``other`` learnings a ``matched`` threshold lets pass.
SHARES = (0.10, 0.15, 0.20)


class Postings:
    """Which of a project's learnings use each lexical term (``store.lexical.tokenize``)."""

    def __init__(self, contents: Mapping[str, str]) -> None:
        self.terms = {mid: frozenset(tokenize(text)) for mid, text in contents.items()}
        self.using: dict[str, set[str]] = {}
        for mid, terms in self.terms.items():
            for term in terms:
                self.using.setdefault(term, set()).add(mid)

    def bridge(self, query: str, memory: str) -> float:
        """The best Jaccard of the learnings using a term of ``query`` and those using a
        term of learning ``memory`` that ``query`` does not use."""
        asked = frozenset(tokenize(query))
        best = 0.0
        for q in asked & self.using.keys():
            for t in self.terms.get(memory, frozenset()) - asked:
                a, b = self.using[q], self.using[t]
                best = max(best, len(a & b) / len(a | b))
        return best


def message_rows(
    gated_components: Mapping[str, Mapping[str, float]],
    message: Mapping[str, Any],
    vectors: Mapping[str, np.ndarray],
    postings: Postings | None = None,
) -> list[dict[str, Any]]:
    """One row per scored typed learning of one message: its label and every measure
    (``vectors``: each learning's embedding; ``postings``: the project's terms, for
    ``cooccurrence``, 0 without them)."""
    ids = list(gated_components)
    cos = np.array([gated_components[i]["cosine"] for i in ids])
    rel = np.array([gated_components[i]["calibrated_relevance"] for i in ids])
    sd = float(cos.std()) or 1.0
    rsd = float(rel.std()) or 1.0
    best = max(float(cos.max()), 1e-6)
    between = np.stack([vectors[i] for i in ids]) @ np.stack([vectors[i] for i in ids]).T
    np.fill_diagonal(between, 0.0)
    anchors = np.argsort(-rel, kind="stable")[:ANCHORS]
    spread = np.maximum(rel, (between[:, anchors] * rel[anchors][None, :]).max(axis=1))
    mean, median = float(cos.mean()), float(np.median(cos))
    order = cos.argsort(kind="stable")
    ranks = np.empty(len(ids))
    ranks[order] = np.arange(len(ids))
    include, exclude = set(message["must_include"]), set(message["must_exclude"])
    return [
        {"message": message["id"], "memory": mid,
         "label": "include" if mid in include else "exclude" if mid in exclude else "other",
         "cosine": float(cos[k]), "relevance": float(rel[k]), "z": float((cos[k] - mean) / sd),
         "quantile": float(ranks[k] / max(1, len(ids) - 1)), "excess": float(cos[k] - median),
         "over_best": float(cos[k] / best), "relevance_z": float((rel[k] - rel.mean()) / rsd),
         "spread": float(spread[k]),
         "cooccurrence": postings.bridge(message["text"], mid) if postings else 0.0,
         "background": mean, "background_sd": float(cos.std())}
        for k, mid in enumerate(ids)
    ]  # fmt: skip


def auc(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    """P(a positive's value > a negative's), ties half."""
    if not pos or not neg:
        return None
    p, n = np.asarray(pos)[:, None], np.asarray(neg)[None, :]
    return float(((p > n).sum() + 0.5 * (p == n).sum()) / (p.size * n.size))


def threshold(values: Sequence[float]) -> float:
    """The value at which ``RECALL`` of ``values`` pass (``>=``)."""
    return float(np.quantile(np.asarray(values), 1.0 - RECALL, method="lower"))


def _pass(values: Sequence[float], at: float | None) -> float | None:
    """The share of ``values`` at ``at`` or over (None without values or threshold)."""
    if at is None or not len(values):
        return None
    return float(np.mean(np.asarray(values) >= at))


def summarise(rows_by_set: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per set and measure: AUCs, own threshold, left-out threshold's recall and pass rate."""
    out: dict[str, Any] = {}
    for name, rows in rows_by_set.items():
        cell: dict[str, Any] = {"labels": {lab: sum(r["label"] == lab for r in rows)
                                           for lab in LABELS},
                                "messages": len({r["message"] for r in rows})}  # fmt: skip
        per_message = {}
        for m in ("cosine", "relevance"):
            aucs = []
            for mid in {r["message"] for r in rows}:
                mine = [r for r in rows if r["message"] == mid]
                a = auc(
                    [r[m] for r in mine if r["label"] == "include"],
                    [r[m] for r in mine if r["label"] != "include"],
                )
                if a is not None:
                    aucs.append(a)
            per_message[m] = float(np.mean(aucs))
        cell["within_message_auc"] = per_message
        backgrounds = {r["message"]: (r["background"], r["background_sd"]) for r in rows}
        cell["background"] = {
            "mean_of_means": float(np.mean([b for b, _ in backgrounds.values()])),
            "sd_of_means": float(np.std([b for b, _ in backgrounds.values()])),
            "mean_sd": float(np.mean([s for _, s in backgrounds.values()])),
        }
        cell["lifted"] = {
            lab: sum(
                1
                for r in rows
                if r["label"] == lab and r["relevance"] < LIFT_AT and r["spread"] >= LIFT_AT
            )
            for lab in LABELS
        }
        cell["under_lift"] = {
            lab: sum(1 for r in rows if r["label"] == lab and r["relevance"] < LIFT_AT)
            for lab in LABELS
        }
        include = [r["cosine"] for r in rows if r["label"] == "include"]
        cell["include_cosine_quantiles"] = {
            str(q): float(np.quantile(include, q)) for q in (0.05, 0.1, 0.25, 0.5)
        }
        cell["include_cosine_under_0_1"] = float(np.mean(np.asarray(include) < 0.1))
        for m in MEASURES:
            by = {lab: [r[m] for r in rows if r["label"] == lab] for lab in LABELS}
            own = threshold(by["include"]) if by["include"] else None
            rest = [r[m] for others, rs in rows_by_set.items() if others != name for r in rs
                    if r["label"] == "include"]  # fmt: skip
            left = threshold(rest) if rest else None  # one set alone has no other
            cell[m] = {
                "mean": {lab: float(np.mean(v)) if v else None for lab, v in by.items()},
                "auc_include_vs_rest": auc(by["include"], by["exclude"] + by["other"]),
                "auc_include_vs_exclude": auc(by["include"], by["exclude"]),
                "own_threshold": own, "other_passing_at_own": _pass(by["other"], own),
                "left_out_threshold": left,
                "left_out_include_recall": _pass(by["include"], left),
                "left_out_other_passing": _pass(by["other"], left),
            }  # fmt: skip
        out[name] = cell
    return out


def matched(rows_by_set: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per share, measure and set: the ``include`` recall and the ``other`` and ``exclude``
    pass rates at the threshold that lets ``share`` of the other sets' ``other`` learnings
    pass (None for a set alone)."""
    out: dict[str, Any] = {}
    for share in SHARES:
        cells: dict[str, Any] = {}
        for m in MEASURES:
            for name, rows in rows_by_set.items():
                rest = [r[m] for other, rs in rows_by_set.items() if other != name
                        for r in rs if r["label"] == "other"]  # fmt: skip
                at = float(np.quantile(rest, 1.0 - share)) if rest else None
                by = {lab: [r[m] for r in rows if r["label"] == lab] for lab in LABELS}
                cells.setdefault(m, {})[name] = {lab: _pass(by[lab], at) for lab in LABELS}
        out[str(share)] = cells
    return out


#: The share of each message's learnings under ``LIFT_AT`` a bridge would let in.
REACH_SHARE = 0.05


def reach(rows_by_set: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per bridge (``spread``, ``cooccurrence``) and set, among each message's learnings
    under relevance ``LIFT_AT``: the AUC of ``include`` against the rest, and what letting
    in the ``REACH_SHARE`` best of them by the bridge (at least one) would bring: labelled
    ``include`` and ``exclude`` learnings, and ``other`` ones per message."""
    out: dict[str, Any] = {}
    for bridge in ("spread", "cooccurrence"):
        for name, rows in rows_by_set.items():
            low = [r for r in rows if r["relevance"] < LIFT_AT]
            brought = dict.fromkeys(LABELS, 0)
            messages = sorted({r["message"] for r in rows})
            for message in messages:
                mine = [r for r in low if r["message"] == message]
                best = sorted(mine, key=lambda r: r[bridge], reverse=True)
                for r in best[: max(1, round(REACH_SHARE * len(mine)))] if mine else []:
                    brought[r["label"]] += 1
            out.setdefault(bridge, {})[name] = {
                "auc_under_lift": auc([r[bridge] for r in low if r["label"] == "include"],
                                      [r[bridge] for r in low if r["label"] != "include"]),
                "include": brought["include"], "exclude": brought["exclude"],
                "other_per_message": brought["other"] / len(messages) if messages else None,
            }  # fmt: skip
    return out


def across_sets(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Per measure, across sets: each set's own threshold, and the range (min, max) of the
    AUCs, of the left-out thresholds' ``include`` recalls and of their ``other`` pass rates
    (None where no set has the value)."""

    def span(key: str, m: str) -> tuple[float | None, float | None]:
        values = [c[m][key] for c in summary.values() if c[m][key] is not None]
        return min(values, default=None), max(values, default=None)

    out: dict[str, Any] = {}
    for m in MEASURES:
        auc_min, auc_max = span("auc_include_vs_rest", m)
        recall_min, recall_max = span("left_out_include_recall", m)
        passing_min, passing_max = span("left_out_other_passing", m)
        out[m] = {"own_thresholds": [c[m]["own_threshold"] for c in summary.values()],
                  "auc_min": auc_min, "auc_max": auc_max,
                  "left_out_recall_min": recall_min, "left_out_recall_max": recall_max,
                  "left_out_other_passing_min": passing_min,
                  "left_out_other_passing_max": passing_max}  # fmt: skip
    return out


def collect(sets: Sequence[str], split: str, embedder_name: str) -> dict[str, list[dict[str, Any]]]:
    """Every scored learning of every labelled ``split`` message of each set, as rows."""
    embedder = make_embedder(embedder_name)
    options = GateOptions()
    out: dict[str, list[dict[str, Any]]] = {}
    for name in sets:
        data = load_data(name=name)
        rows: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory(prefix="h4-rel-") as tmp:
            projects = Projects(data, embedder, Path(tmp))
            engines = {p: projects.fresh(p) for p in data.projects}
            vectors = {r["id"]: np.asarray(r["embedding"], dtype=np.float32)
                       for snapshot in projects.snapshots.values() for r in snapshot
                       if r.get("embedding") is not None}  # fmt: skip
            postings = {p: Postings({r["id"]: r["content"] for r in rows_})
                        for p, rows_ in data.projects.items()}  # fmt: skip
            for message in data.messages:
                if message["split"] != split or not message["must_include"]:
                    continue
                gated = engines[message["project"]].explain(
                    message["text"], USER, project=message["project"],
                    turn=message.get("turn", 0), options=options, now=NOW)  # fmt: skip
                rows.extend(message_rows(gated.components, message, vectors,
                                         postings[message["project"]]))  # fmt: skip
            for engine in engines.values():
                engine.close()
        out[name] = rows
    return out


def table(summary: Mapping[str, Any]) -> str:
    lines = [
        "set     measure    AUC(inc|rest) AUC(inc|exc) own-thr other@own  left-thr "
        "left-recall other@left"
    ]
    for name, cell in summary.items():
        for m in MEASURES:
            c = cell[m]

            def f(v: Any, w: int = 9) -> str:
                return f"{v:{w}.3f}" if isinstance(v, float) else f"{'-':>{w}}"

            lines.append(
                f"{name:7} {m:10} {f(c['auc_include_vs_rest'], 13)} "
                f"{f(c['auc_include_vs_exclude'], 12)} {f(c['own_threshold'], 7)} "
                f"{f(c['other_passing_at_own'])} {f(c['left_out_threshold'])} "
                f"{f(c['left_out_include_recall'], 11)} {f(c['left_out_other_passing'], 10)}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="tune", choices=("tune", "held"))
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = collect(args.sets.split(","), args.split, args.embedder)
    summary = summarise(rows)
    print(table(summary))
    report = {"split": args.split, "summary": summary, "spread": across_sets(summary),
              "matched": matched(rows), "reach": reach(rows)}  # fmt: skip
    for bridge, per_set in report["reach"].items():
        print(
            f"{bridge}: among learnings under relevance {LIFT_AT}, AUC, and the best "
            f"{REACH_SHARE:.0%} of each message's let in"
        )
        for name, cell in per_set.items():
            print(f"  {name:7}", {k: (round(v, 3) if isinstance(v, float) else v)
                                  for k, v in cell.items()})  # fmt: skip
    for share, cells in report["matched"].items():
        print(
            f"at equal cost: {share} of the other sets' other learnings pass; "
            "include recall / exclude / other passing"
        )
        for m, per_set in cells.items():
            print(f"  {m:12}", "  ".join(
                f"{name} " + "/".join("-" if v is None else f"{v:.3f}" for v in cell.values())
                for name, cell in per_set.items()))  # fmt: skip
    for name, cell in summary.items():
        print(
            name,
            "within-message AUC",
            {k: round(v, 3) for k, v in cell["within_message_auc"].items()},
            "background",
            {k: round(v, 3) for k, v in cell["background"].items()},
            "lifted",
            cell["lifted"],
            "of",
            cell["under_lift"],
            "include cosine < 0.1",
            round(cell["include_cosine_under_0_1"], 3),
        )
    for m, s in report["spread"].items():
        print(
            m,
            {
                k: (round(v, 3) if isinstance(v, float) else v)
                for k, v in s.items()
                if k != "own_thresholds"
            },
            "own thresholds",
            [None if t is None else round(t, 3) for t in s["own_thresholds"]],
        )
    if args.out:
        write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
