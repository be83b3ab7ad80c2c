"""Where could the tune halves' missing labels come from? The budget left unused, a second
hop from the best match, and the weak verbs (issue 12, session 23).

Every tune message of every set is answered once by ``explain()`` (every candidate's
decision, score, relevance and line tokens; it writes nothing) and three ideas are measured
on those decisions, without changing the gate:

- **The budget left unused.** Each missed must-include label: its rank by relevance among
  the message's candidates, its score and what stopped it, and the tokens still free in
  the block. Then the candidates under their threshold, by relevance band (how many lines,
  how many labelled must-include or must-exclude), and a fill that spends the free tokens on
  them, most relevant first, from a relevance floor up to a share of the budget: labels it
  would find, messages it would make leak, tokens a message, labels per 100 tokens.
- **A second hop.** For the candidates not selected: is one that shares a rare term (in at
  most ``df`` of the project's learnings, not written in the message) or a domain with the
  message's best matches (relevance at least 0.5) more often a labelled one? Its precision
  (labelled among those it reaches) against the base rate of all of them.
- **Weak verbs.** "need", "call", "use", "get", ...: in how many of each project's
  learnings they are (their document frequency, what a stop-like rule would read), and how
  often they are a term shared by a labelled, a must-exclude or another candidate.

No held message is read (``--split held`` exists for the check after a decision). Usage:
``python bench/gating_headroom.py [--sets …] [--out bench/results/gating-headroom.json]``;
``--rows FILE`` writes (or with ``--from-rows`` reads) the answered decisions as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, machine_info, write_json
from gating import SETS, USER
from gating_lopo import set_engines

import engrain
from engrain.embed import make_embedder
from engrain.store.lexical import tokenize

#: Relevance of a clear match (``recall.area.AREA_RELEVANCE``): the best matches a second
#: hop starts from.
CLEAR_MATCH = 0.5
#: The relevance floors of the unused-budget fill: the unrelated level, between, the full
#: block's level, the clear match's (``select``'s and ``area``'s constants).
FLOORS = (0.2, 0.3, 0.4, 0.5)
#: The shares of the budget the fill may reach.
SHARES = (0.5, 0.75, 1.0)
#: A rare term is in at most this many of the project's learnings.
RARE_DF = (2, 3, 5)
WEAK_VERBS = ("need", "call", "use", "get", "make", "add", "want", "take", "keep", "go")


# -- answering -------------------------------------------------------------------------------


def answer_rows(names: Sequence[str], split: str = "tune") -> list[dict[str, Any]]:
    """Each message of ``split`` of every set in ``names``, answered by ``explain()``: its
    classification, budget, tokens used, labels and every candidate's decision."""
    rows: list[dict[str, Any]] = []
    for name, data, engines in set_engines(names, split, make_embedder("minilm")):
        for m in data.messages:
            engine = engines[m["project"]]
            gated = engine.explain(
                m["text"], USER, project=m["project"], turn=m.get("turn", 0), now=NOW
            )
            rows.append(_row(name, m, gated))
        print(f"{name}: answered", flush=True)
    return rows


def _label(decision: Mapping[str, Any], row: Mapping[str, Any]) -> str:
    """``include``, ``exclude`` or ``other``: the label ``row``'s message gives the memory of
    ``decision``."""
    if decision["id"] in row["must_include"]:
        return "include"
    return "exclude" if decision["id"] in row["must_exclude"] else "other"


def _row(name: str, message: Mapping[str, Any], gated: Any) -> dict[str, Any]:
    decisions = []
    for d in gated.decisions:
        memory = d.item.memory
        parts = gated.components.get(memory.id, {})
        decisions.append(
            {
                "id": memory.id,
                "kind": memory.kind.value,
                "type": memory.memory_type.value,
                "domains": list(memory.domains),
                "content": memory.content,
                "score": d.item.score,
                "tokens": d.item.tokens,
                "selected": d.selected,
                "reason": d.reason,
                "relevance": parts.get("calibrated_relevance", 0.0),
            }
        )
    return {
        "set": name,
        "id": message["id"],
        "text": message["text"],
        "intent": gated.classification.intent.value,
        "budget": gated.budget.tokens,
        "tokens_used": gated.tokens_used,
        "must_include": list(message["must_include"]),
        "must_exclude": list(message["must_exclude"]),
        "decisions": decisions,
    }


# -- the budget left unused ------------------------------------------------------------------


def under_threshold(d: Mapping[str, Any]) -> bool:
    """Whether decision ``d`` left its candidate out for a score under its threshold."""
    return not d["selected"] and str(d["reason"]).startswith("score ")


def misses(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every must-include label not injected: its rank by relevance among the message's
    candidates, relevance, score, what stopped it and the tokens left free."""
    out = []
    for r in rows:
        ranked = sorted(r["decisions"], key=lambda d: -d["relevance"])
        rank = {d["id"]: i + 1 for i, d in enumerate(ranked)}
        for d in r["decisions"]:
            if d["id"] in r["must_include"] and not d["selected"]:
                out.append(
                    {
                        "set": r["set"],
                        "message": r["id"],
                        "memory": d["id"],
                        "kind": d["kind"],
                        "intent": r["intent"],
                        "rank": rank[d["id"]],
                        "candidates": len(ranked),
                        "relevance": round(d["relevance"], 3),
                        "score": round(d["score"], 3),
                        "reason": d["reason"],
                        "free": r["budget"] - r["tokens_used"],
                        "budget": r["budget"],
                    }
                )
    return out


def bands(rows: Iterable[Mapping[str, Any]], width: float = 0.1) -> list[dict[str, Any]]:
    """The candidates under their threshold by relevance band: lines, labelled must-include
    and must-exclude among them, their tokens."""
    count: dict[int, Counter[str]] = {}
    for r in rows:
        for d in r["decisions"]:
            if not under_threshold(d):
                continue
            band = min(int(d["relevance"] / width + 1e-9), int(1 / width) - 1)
            c = count.setdefault(band, Counter())
            c["lines"] += 1
            c["include"] += d["id"] in r["must_include"]
            c["exclude"] += d["id"] in r["must_exclude"]
            c["tokens"] += d["tokens"]
    return [
        {"from": round(b * width, 2), "to": round((b + 1) * width, 2), **count[b]}
        for b in sorted(count)
    ]


def unused_fill(rows: Sequence[Mapping[str, Any]], floor: float, share: float) -> dict[str, Any]:
    """Spend each block's free tokens on its candidates under their threshold at least
    ``floor`` relevant, most relevant first, while the block stays within ``share`` of its
    budget (a line costs its tokens and a newline): the labels found, lines added, messages
    that did not leak and would, tokens a message, labels per 100 tokens, per set."""
    total: Counter[str] = Counter()
    per_set: dict[str, Counter[str]] = {}
    for r in rows:
        used = r["tokens_used"]
        chosen = sorted(
            (d for d in r["decisions"] if under_threshold(d) and d["relevance"] >= floor),
            key=lambda d: -d["relevance"],
        )
        added: set[str] = set()
        for d in chosen:
            if used + d["tokens"] + 1 <= share * r["budget"]:
                used += d["tokens"] + 1
                added.add(d["id"])
        selected = {d["id"] for d in r["decisions"] if d["selected"]}
        leaked_before = bool(selected & set(r["must_exclude"]))
        c = per_set.setdefault(r["set"], Counter())
        for counter in (total, c):
            counter["found"] += len(added & set(r["must_include"]))
            counter["lines"] += len(added)
            counter["tokens"] += used - r["tokens_used"]
            counter["new_leaks"] += (not leaked_before) and bool(added & set(r["must_exclude"]))
            counter["messages"] += 1
    return {
        "floor": floor,
        "share": share,
        **_rates(total),
        "sets": {name: _rates(c) for name, c in per_set.items()},
    }


def _rates(c: Counter[str]) -> dict[str, Any]:
    tokens = c["tokens"]
    return {
        "found": c["found"],
        "lines": c["lines"],
        "new_leaks": c["new_leaks"],
        "tokens_a_message": round(tokens / max(1, c["messages"]), 1),
        "found_per_100_tokens": round(100 * c["found"] / tokens, 3) if tokens else 0.0,
    }


# -- a second hop ----------------------------------------------------------------------------


def document_frequency(rows: Iterable[Mapping[str, Any]]) -> dict[str, Counter[str]]:
    """Per set, each term's number of learnings containing it (every candidate a message
    of the set was answered with: a project's typed learnings are all candidates)."""
    texts: dict[str, dict[str, set[str]]] = {}
    for r in rows:
        for d in r["decisions"]:
            texts.setdefault(r["set"], {})[d["id"]] = set(tokenize(d["content"]))
    return {
        name: Counter(t for terms in docs.values() for t in terms) for name, docs in texts.items()
    }


def second_hop(
    rows: Sequence[Mapping[str, Any]], *, top: int, rare_df: int | None, floor: float = 0.0
) -> dict[str, Any]:
    """Of the candidates not selected (preferences aside) at least ``floor`` relevant,
    those a hop reaches from the message's ``top`` best matches at least
    :data:`CLEAR_MATCH` relevant: sharing a term in at most ``rare_df`` of the project's
    learnings that the message does not write (``rare_df`` ``None``: sharing a domain).
    Counts of labelled must-include, must-exclude and other candidates, reached or not."""
    df = document_frequency(rows)
    c: Counter[str] = Counter()
    for r in rows:
        ranked = sorted(r["decisions"], key=lambda d: -d["relevance"])
        best = [d for d in ranked[:top] if d["relevance"] >= CLEAR_MATCH]
        asked = set(tokenize(r["text"]))
        best_terms = set().union(*(set(tokenize(d["content"])) for d in best)) if best else set()
        best_domains = {x for d in best for x in d["domains"]}
        for d in r["decisions"]:
            if d["selected"] or d["type"] == "procedural" or d in best or d["relevance"] < floor:
                continue
            if rare_df is None:
                reached = bool(best_domains & set(d["domains"]))
            else:
                shared = (set(tokenize(d["content"])) & best_terms) - asked
                reached = any(df[r["set"]][t] <= rare_df for t in shared)
            label = _label(d, r)
            c[f"{label}_{'reached' if reached else 'not'}"] += 1
    reached = c["include_reached"] + c["exclude_reached"] + c["other_reached"]
    everyone = reached + c["include_not"] + c["exclude_not"] + c["other_not"]
    labelled = c["include_reached"] + c["include_not"]
    return {
        "top": top,
        "rare_df": rare_df,
        "floor": floor,
        **dict(sorted(c.items())),
        "precision": round(c["include_reached"] / reached, 4) if reached else 0.0,
        "base_rate": round(labelled / everyone, 4) if everyone else 0.0,
    }


# -- weak verbs ------------------------------------------------------------------------------


def weak_verbs(
    rows: Sequence[Mapping[str, Any]], words: Sequence[str] = WEAK_VERBS
) -> list[dict[str, Any]]:
    """Each word's share of each project's learnings (its document frequency over their
    number) and how often it is a term a candidate with a lexical match shares with the
    message: labelled must-include, must-exclude or other, selected or not."""
    df = document_frequency(rows)
    sizes = {
        name: len({d["id"] for r in rows if r["set"] == name for d in r["decisions"]})
        for name in df
    }
    out = []
    for word in words:
        (term,) = tokenize(word) or ("",)
        c: Counter[str] = Counter()
        for r in rows:
            if term not in set(tokenize(r["text"])):
                continue
            for d in r["decisions"]:
                if term in set(tokenize(d["content"])):
                    label = _label(d, r)
                    c[f"{label}_{'selected' if d['selected'] else 'not'}"] += 1
        out.append(
            {
                "word": word,
                "term": term,
                "share": {n: round(df[n][term] / sizes[n], 3) for n in sorted(df)},
                **dict(sorted(c.items())),
            }
        )
    return out


def analyse(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The three ideas measured on ``rows``."""
    return {
        "labels": sum(len(r["must_include"]) for r in rows),
        "misses": misses(rows),
        "under_threshold_bands": bands(rows),
        "unused_fill": [unused_fill(rows, f, s) for f in FLOORS for s in SHARES],
        "second_hop": [
            second_hop(rows, top=t, rare_df=df) for df in (*RARE_DF, None) for t in (1, 2)
        ]
        + [second_hop(rows, top=2, rare_df=None, floor=f) for f in (0.2, 0.3)],
        "weak_verbs": weak_verbs(rows),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--split", default="tune", choices=("tune", "held"))
    parser.add_argument("--rows", type=Path, help="write the answered decisions here")
    parser.add_argument("--from-rows", type=Path, help="analyse decisions written before")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    start = time.process_time()
    if args.from_rows:
        rows = [json.loads(line) for line in args.from_rows.read_text().splitlines() if line]
    else:
        rows = answer_rows([s for s in args.sets.split(",") if s], args.split)
        if args.rows:
            args.rows.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = analyse(rows)
    print(f"{len(result['misses'])} of {result['labels']} must-include labels missed")
    for m in result["misses"]:
        print(
            f"  {m['set']:10} {m['message']:7} {m['memory']:11} rank {m['rank']:3} relevance "
            f"{m['relevance']:.3f} score {m['score']:.3f} free {m['free']}/{m['budget']}: "
            f"{m['reason'][:60]}"
        )
    print("under their threshold, by relevance: from lines include exclude tokens")
    for b in result["under_threshold_bands"]:
        print(f"  {b['from']:.1f} {b['lines']:5} {b['include']:3} {b['exclude']:3} {b['tokens']:7}")
    print("unused budget fill: floor share found lines new_leaks tokens/msg found/100 tokens")
    for u in result["unused_fill"]:
        print(
            f"  {u['floor']:.1f} {u['share']:.2f} {u['found']:3} {u['lines']:5} "
            f"{u['new_leaks']:3} {u['tokens_a_message']:7} {u['found_per_100_tokens']}"
        )
    print(
        "second hop: top rare_df floor include reached/all exclude reached other reached "
        "precision base rate"
    )
    for h in result["second_hop"]:
        inc = h.get("include_reached", 0)
        print(
            f"  {h['top']} {h['rare_df']} {h['floor']} {inc}/{inc + h.get('include_not', 0)} "
            f"{h.get('exclude_reached', 0)} {h.get('other_reached', 0)} {h['precision']} "
            f"{h['base_rate']}"
        )
    print("weak verbs: word, share of each set's learnings, shared by")
    for w in result["weak_verbs"]:
        counts = {k: v for k, v in w.items() if k not in ("word", "term", "share")}
        print(f"  {w['word']:6} max share {max(w['share'].values()):.3f} {counts}")
    write_json(
        args.out,
        {
            "benchmark": "gating-headroom",
            "split": args.split,
            "engrain_source": str(Path(engrain.__file__).resolve().parent),
            "cpu_seconds": round(time.process_time() - start, 1),
            **result,
            "machine": machine_info(),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
