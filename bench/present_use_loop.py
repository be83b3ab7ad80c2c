"""Does judging a context note by its last use keep a note current because the gate itself
injected it? (issue 12, session 21)

``context()`` counts a use of every memory it injects (``Engine._count_uses``), so with
``GateOptions.present_use`` the evidence that a note about the present still holds is partly
the gate's own earlier choices. Here each set's tune messages are replayed through
``context()`` (which counts the uses) in file order, twice (a project's topics recur), a
quarter of a day apart from the fixed now onward, on a fresh copy of each project, once with
the option and once without. Per set, mode and pass: must-include labels found, messages
injecting a memory labelled must-exclude for them (leaks), context notes injected, and the
memories leaked and the notes injected by name. A loop shows as leaks or context notes that
grow from the first pass to the second with the option and not without it. No held message
is read. ``--modes`` adds ``span`` (``GateOptions.stated_span``: a note current until the end
its own text states, session 23) and ``both`` (the two options together): a note whose
stated end has passed is not kept current by the gate's own injections.

Usage: ``python bench/present_use_loop.py [--sets main,…] [--step-hours 6]
[--modes off,on,span,both] [--out bench/results/present-use-loop.json]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, open_engine, write_json
from gating import SETS, USER, Projects, load_data
from gating_lopo import one_split

from engrain import Engine, Kind
from engrain.embed import make_embedder

PASSES = 2
#: The replay's modes: the options each passes to ``context()``.
MODES: Mapping[str, Mapping[str, bool]] = {
    "off": {"present_use": False},
    "on": {"present_use": True},
    "span": {"stated_span": True},
    "both": {"present_use": True, "stated_span": True},
}


def replay(engines: Mapping[str, Engine], messages: Sequence[Mapping[str, Any]],
           mode: Mapping[str, bool], step: timedelta) -> list[dict[str, Any]]:  # fmt: skip
    """Every message of ``messages``, ``PASSES`` times in order, through ``context()`` of its
    project's engine (uses counted) with the options ``mode``, ``step`` apart from
    :data:`NOW`: per pass, the labels
    found, the leaks and the context notes injected."""
    out = []
    at = NOW
    for number in range(PASSES):
        found = labels = leaking = 0
        leaked: Counter[str] = Counter()
        noted: Counter[str] = Counter()
        for m in messages:
            engine = engines[m["project"]]
            options = engine.options.update(**mode)
            got = engine.context(m["text"], USER, project=m["project"], turn=m.get("turn", 0),
                                 options=options, now=at)  # fmt: skip
            at += step
            injected = {x.id: x for x in got.memories}
            found += sum(i in injected for i in m["must_include"])
            labels += len(m["must_include"])
            bad = [i for i in m["must_exclude"] if i in injected]
            leaking += bool(bad)
            leaked.update(bad)
            noted.update(i for i, x in injected.items() if x.kind is Kind.CONTEXT)
        out.append({"pass": number + 1, "found": found, "labels": labels, "leaking": leaking,
                    "messages": len(messages), "context_notes": noted.total(),
                    "leaked": dict(leaked), "notes": dict(noted)})  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--step-hours", type=float, default=6.0,
                        help="time between two messages of the replay")  # fmt: skip
    parser.add_argument("--modes", default="off,on", help=f"of {', '.join(MODES)}")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; known: {', '.join(MODES)}")
    embedder = make_embedder(args.embedder)
    step = timedelta(hours=args.step_hours)
    report: dict[str, Any] = {"benchmark": "present-use-loop", "split": "tune",
                              "step_hours": args.step_hours, "sets": {}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="h5-loop-") as tmp:
        for name in [s for s in args.sets.split(",") if s]:
            data = one_split(load_data(name=name))
            directory = Path(tmp) / name
            directory.mkdir()
            projects = Projects(data, embedder, directory)
            report["sets"][name] = {}
            for mode in modes:
                engines = {}
                for p in data.projects:
                    engines[p] = open_engine(directory, f"{mode}-{p}.db", embedder=embedder)
                    engines[p].import_records(projects.snapshots[p], now=NOW)
                try:
                    passes = replay(engines, data.messages, MODES[mode], step)
                finally:
                    for engine in engines.values():
                        engine.close()
                report["sets"][name][mode] = passes
                for r in passes:
                    print(f"{name:10} {mode:3} pass {r['pass']}: {r['found']}/{r['labels']} "
                          f"leaking {r['leaking']}/{r['messages']} context notes "
                          f"{r['context_notes']} {r['notes']} leaked {r['leaked']}",
                          flush=True)  # fmt: skip
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
