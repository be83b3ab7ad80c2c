"""The gating sets' continuations with and without a turn before (issue 12).

The gating evaluation answers every labelled message alone: a continuation ("ok and the bar
for exomes?") reaches ``context()`` with no ``previous``, though a real caller passes the
user's turn before (the proxy passes the user message before the latest; the LangChain and
LlamaIndex integrations do the same; HTTP, MCP and the CLI take ``previous``; decision
rows 230 and 231). The sets hold no ``previous`` field; their writers mostly put a
continuation right after the message it follows, so the message before it in the file (same
project) is the closest stand-in. Each labelled continuation of one split is answered by
``explain()`` alone and with that message as ``previous``; reported: its must-include labels
found both ways, messages leaking a must-exclude memory, tokens, and whether ``previous``
was used (``explain()``'s signal). Where the message before is not the subject (a set that
groups its continuations), ``previous`` is an unrelated turn: the measure is a lower bound
of what a caller's real turn before gives.

Usage: ``python bench/gating_previous.py [--split tune] [--sets …] [--out …]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, write_json
from gating import SETS, USER, load_data
from gating_lopo import set_engines

from engrain import Engine
from engrain.embed import make_embedder


def before_each(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each message's predecessor in file order within its project (all splits)."""
    out: dict[str, str] = {}
    last: dict[str, str] = {}
    for m in messages:
        if m["project"] in last:
            out[m["id"]] = last[m["project"]]
        last[m["project"]] = m["text"]
    return out


def answer(engine: Engine, m: Mapping[str, Any], previous: str | None) -> dict[str, Any]:
    """One continuation through ``explain()``, with or without ``previous``."""
    g = engine.explain(
        m["text"], USER, project=m["project"], turn=m.get("turn", 0), previous=previous, now=NOW
    )
    injected = {s.memory.id for s in g.selected}
    return {
        "found": [i for i in m["must_include"] if i in injected],
        "leaked": [i for i in m["must_exclude"] if i in injected],
        "tokens": g.tokens_used,
        "used": any(s.startswith("previous turn used") for s in g.classification.signals),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="tune", choices=("tune", "held"))
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    befores = {s: before_each(load_data(name=s).messages) for s in sets}
    rows: list[dict[str, Any]] = []
    for name, data, engines in set_engines(sets, args.split, make_embedder("minilm")):
        for m in data.messages:
            if m["intent"] != "continuation":
                continue
            previous = befores[name].get(m["id"])
            engine = engines[m["project"]]
            alone, with_previous = answer(engine, m, None), answer(engine, m, previous)
            rows.append(
                {
                    "set": name,
                    "id": m["id"],
                    "text": m["text"],
                    "previous": previous,
                    "labels": len(m["must_include"]),
                    "alone": alone,
                    "with_previous": with_previous,
                }
            )
            print(
                f"{name:10} {m['id']:8} {len(alone['found'])}/{len(m['must_include'])} → "
                f"{len(with_previous['found'])} used={with_previous['used']} "
                f"{m['text'][:50]!r} after {str(previous)[:50]!r}",
                flush=True,
            )
    total = {k: sum(len(r[k]["found"]) for r in rows) for k in ("alone", "with_previous")}
    labels = sum(r["labels"] for r in rows)
    summary = {
        "messages": len(rows),
        "labels": labels,
        "found": total,
        "leaking": {k: sum(bool(r[k]["leaked"]) for r in rows) for k in ("alone", "with_previous")},
        "mean_tokens": {
            k: sum(r[k]["tokens"] for r in rows) / max(1, len(rows))
            for k in ("alone", "with_previous")
        },
        "previous_used": sum(r["with_previous"]["used"] for r in rows),
    }
    print(summary)
    write_json(
        args.out,
        {
            "benchmark": "gating-previous",
            "split": args.split,
            "sets": sets,
            "summary": summary,
            "rows": rows,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
