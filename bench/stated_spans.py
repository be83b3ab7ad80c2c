"""The context notes of the gating evaluation that state their own end, and what the gate does
with them (issue 12, session 23: ``GateOptions.stated_span``, ``recall/spans.py``).

For every context note of every set: the end its text states (``spans.stated_end``, resolved
against the time it was written), whether that end is ahead of or behind the evaluation's
fixed now, its present scale without and with the option, its labels on the split's messages
(must-include, must-exclude), and for each message of the split whether ``explain()`` injects
it with the default gate and with ``stated_span=True``. Per set, the messages whose injected
notes differ and the mean tokens either way. Only the split asked is read (``--split tune``
while tuning; ``held`` once, after the choice).

Usage: ``python bench/stated_spans.py [--split tune] [--sets main,…]
[--out bench/results/stated-spans-tune.json]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, machine_info, write_json
from gating import SETS, USER, Projects, load_data
from gating_lopo import _engine, one_split

from engrain import Kind
from engrain.embed import make_embedder
from engrain.model import Memory
from engrain.recall.score import PRESENT_HALF_LIFE_DAYS, age_days, present_scale
from engrain.recall.spans import stated_end


def note_rows(name: str, split: str) -> list[dict[str, Any]]:
    """Each context note of set ``name``: its stated end and scales, and its labels on the
    ``split`` half."""
    data = one_split(load_data(name=name), split)
    out = []
    for rows in data.projects.values():
        for row in rows:
            if row["kind"] != Kind.CONTEXT.value:
                continue
            memory = Memory.from_dict({"user_id": USER, "memory_type": "semantic", **row})
            span = stated_end(memory.content, memory.when)
            age = age_days(memory.when, NOW)
            out.append({
                "id": row["id"], "set": name, "written": memory.when.date().isoformat(),
                "muted": bool(row.get("muted")), "content": memory.content,
                "phrase": span.phrase if span else None,
                "end": span.end.date().isoformat() if span else None,
                "ahead": None if span is None else span.end > NOW,
                "scale_default": round(0.5 ** ((age or 0.0) / PRESENT_HALF_LIFE_DAYS), 4),
                "scale_stated": round(present_scale(memory.kind, age, None, span, NOW), 4),
                "include": [m["id"] for m in data.messages if row["id"] in m["must_include"]],
                "exclude": [m["id"] for m in data.messages if row["id"] in m["must_exclude"]],
            })  # fmt: skip
    return out


def injections(name: str, split: str, embedder_name: str) -> dict[str, Any]:
    """For each message of the ``split`` half of set ``name``: the context notes ``explain()``
    injects with the default gate and with ``stated_span``, and its tokens either way."""
    embedder = make_embedder(embedder_name)
    data = one_split(load_data(name=name), split)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="h7-spans-") as tmp:
        directory = Path(tmp)
        projects = Projects(data, embedder, directory)
        engines = {p: _engine(projects, p, directory) for p in data.projects}
        try:
            for m in data.messages:
                engine = engines[m["project"]]
                answers = {}
                for label, on in (("default", False), ("stated_span", True)):
                    options = engine.options.update(stated_span=on)
                    turn = m.get("turn", 0)
                    gated = engine.explain(m["text"], USER, project=m["project"], turn=turn,
                                           options=options, now=NOW)  # fmt: skip
                    notes = sorted(s.memory.id for s in gated.selected
                                   if s.memory.kind is Kind.CONTEXT)  # fmt: skip
                    answers[label] = {"notes": notes, "tokens": gated.tokens_used}
                out[m["id"]] = answers
        finally:
            for engine in engines.values():
                engine.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="tune", choices=("tune", "held"))
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"benchmark": "stated-spans", "split": args.split, "sets": {}}
    for name in [s for s in args.sets.split(",") if s]:
        notes = note_rows(name, args.split)
        answered = injections(name, args.split, args.embedder)
        for note in notes:
            for label in ("default", "stated_span"):
                note[f"injected_{label}"] = sorted(
                    mid for mid, a in answered.items() if note["id"] in a[label]["notes"]
                )
        changed = {mid: a for mid, a in answered.items()
                   if a["default"]["notes"] != a["stated_span"]["notes"]}  # fmt: skip
        n = max(1, len(answered))
        tokens = {label: sum(a[label]["tokens"] for a in answered.values()) / n
                  for label in ("default", "stated_span")}  # fmt: skip
        report["sets"][name] = {"notes": notes, "changed": changed, "mean_tokens": tokens}
        print(
            f"== {name} ({args.split}): {len(changed)} of {len(answered)} messages inject "
            f"other notes; mean tokens {tokens['default']:.1f} -> {tokens['stated_span']:.1f}"
        )
        for note in notes:
            scale = f"{note['scale_default']:.2f}->{note['scale_stated']:.2f}"
            span = (f"{'ahead' if note['ahead'] else 'past '} {note['end']} «{note['phrase']}»"
                    if note["end"] else "no end stated")  # fmt: skip
            print(f"  {note['id']:10} {scale:11} {span}")
            before, after = set(note["injected_default"]), set(note["injected_stated_span"])
            print(
                f"      +{note['include']} -{note['exclude']} injected "
                f"{len(before)} -> {len(after)}  new {sorted(after - before)}"
                f"  gone {sorted(before - after)}"
            )
    report["machine"] = machine_info()
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
