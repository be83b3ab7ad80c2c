"""How much must-include can the gate's own knobs reach on the tune halves? (issue 12)

Issue 12's hardest unmet target is must-include ≥ 0.95 on the held halves with
must-exclude ≤ 0.03 and mean tokens ≤ 1,200. This bench asks what the knobs the gate already
has could reach at best, on the tune halves only (no held message is read): the thresholds
by intent, the relevance levels and floors, the shares, the budgets.

A message's selection reads only its own intent's thresholds (``select.threshold_for``
under the intent the classifier settles on; nothing else in a call reads another intent's
row). So each message is answered once per threshold shift ``d`` of a grid
(:data:`SHIFTS`: every intent's general and invariant threshold moved by ``d``, never below
0), and a table of thresholds *by intent* — a shift per intent — is scored by summing, per
set, each message's answer at its intent's shift. That makes every combination of shifts by
intent exact without answering it (``--verify`` answers one mixed combination and checks
the sum). Each row of :func:`settings` (the other knobs: the unrelated level, the full
block's relevance, the preferences' floors and share, the background, the budgets) is a
separate pass over the grid.

For every setting, three choices of thresholds (:func:`best_shared`, :func:`best_per_set`):

- ``one shift``: one shift for every intent and every set (the LOPO bench's ``thresholds``);
- ``shared``: a shift per intent, the same on every set — the most must-include pooled
  with every set within its limits (what a tuner choosing the table could reach);
- ``per set`` (the oracle, an upper bound): a shift per intent chosen for each set on
  that set's own labels.

A set's limits: messages leaking a must-exclude memory at most :data:`MAX_EXCLUDE` of its
messages and mean tokens at most :data:`MAX_TOKENS`, or no worse than the default's where
the default is already beyond (harbor's and kestrel's tune halves are over 1,200 tokens; the
LOPO bench's rule, ``gating_lopo.within_limits``); ``--strict`` drops that allowance.

Also per message and label: the labels no setting and no shift ever injects (a label the
scores cannot reach at any threshold: the memory is not a candidate, or under a rule no knob
lifts), and for each found label the highest shift that still finds it.

Usage: ``python bench/gating_frontier.py [--sets …] [--settings default,open]
[--verify] [--strict] [--out bench/results/gating-frontier-s27-h2.json]``;
``--analyse report.json`` recomputes the choices of a written report.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, machine_info, write_json
from gating import SETS, USER
from gating_lopo import Patch, _budgets, _shifted, patched, set_engines

import engrain
from engrain import Engine
from engrain.embed import make_embedder

#: Issue 12's limits on every set (tune halves here).
MAX_EXCLUDE = 0.03
MAX_TOKENS = 1200.0
#: Every intent's thresholds moved by each of these (both columns; never below 0).
SHIFTS = tuple(round(-0.20 + 0.025 * i, 3) for i in range(13))  # -0.20 … +0.10
#: Intents whose thresholds a combination chooses; any other keeps the shift 0.
INTENTS = ("debugging", "question", "analysis", "discussion", "generation", "continuation")

SEL = "engrain.recall.select"


@dataclass(frozen=True)
class Setting:
    """The knobs other than the thresholds, as constants patched."""

    name: str
    patches: tuple[Patch, ...]
    note: str


def settings() -> list[Setting]:
    """The settings measured: today's, each relevance rule loosened, all of them at once."""
    unrelated = ((SEL, "UNRELATED_RELEVANCE", 0.0),)
    full = ((SEL, "FULL_BLOCK_RELEVANCE", 0.0),)
    floors = ((SEL, "PROCEDURAL_MIN_RELEVANCE", 0.1), (SEL, "ANSWER_PROCEDURAL_MIN_RELEVANCE", 0.2))
    shares = ((SEL, "PROCEDURAL_SHARE", 0.3), (SEL, "BACKGROUND_TOKENS", 200))
    return [
        Setting("default", (), "today's knobs"),
        Setting(
            "unrelated=0.1",
            ((SEL, "UNRELATED_RELEVANCE", 0.1),),
            "a typed learning needs relevance 0.1, not 0.2",
        ),
        Setting("unrelated=0", unrelated, "no relevance needed beyond the score"),
        Setting("full_block=0", full, "no relevance asked by a filling block"),
        Setting("floors", floors, "preferences' floors 0.1 (work) / 0.2 (answers)"),
        Setting(
            "open",
            (*unrelated, *full, *floors, *shares, _budgets(1.5)),
            "every rule above loosened, shares doubled, budgets ×1.5",
        ),
    ]


# -- answering --------------------------------------------------------------------------


def answer(engine: Engine, message: Mapping[str, Any]) -> dict[str, Any]:
    """One message through ``explain()``: its intent as read, the labels it found, whether
    it leaked, its tokens."""
    gated = engine.explain(
        message["text"], USER, project=message["project"], turn=message.get("turn", 0), now=NOW
    )
    injected = {s.memory.id for s in gated.selected}
    return {
        "intent": gated.classification.intent.value,
        "found": [i for i in message["must_include"] if i in injected],
        "leaked": bool(set(message["must_exclude"]) & injected),
        "tokens": gated.tokens_used,
    }


def answer_grid(
    names: Sequence[str],
    chosen: Sequence[Setting],
    shifts: Sequence[float],
    embedder_name: str = "minilm",
) -> dict[str, Any]:
    """``{set: {"messages": [...], "grid": {setting: {shift: [answer per message]}}}}``."""
    out: dict[str, Any] = {}
    for name, data, engines in set_engines(names, "tune", make_embedder(embedder_name)):
        grid: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for s in chosen:
            grid[s.name] = {}
            for d in shifts:
                with patched((*s.patches, _shifted("THRESHOLDS", d))):
                    rows = [answer(engines[m["project"]], m) for m in data.messages]
                grid[s.name][str(d)] = rows
                found = sum(len(r["found"]) for r in rows)
                print(
                    f"{name:10} {s.name:14} {d:+.3f} {found} found "
                    f"{sum(r['leaked'] for r in rows)} leaking "
                    f"{sum(r['tokens'] for r in rows) / max(1, len(rows)):.0f} tokens",
                    flush=True,
                )
        out[name] = {
            "messages": [{"id": m["id"], "labels": list(m["must_include"])} for m in data.messages],
            "grid": grid,
        }
    return out


def verify(
    names: Sequence[str],
    report: Mapping[str, Any],
    setting: Setting,
    combo: Mapping[str, float],
    embedder_name: str = "minilm",
) -> dict[str, Any]:
    """Answer ``combo`` (a shift per intent) for real and compare with the grid's sum."""
    from engrain.recall import select

    table = {
        i: tuple(max(0.0, v + combo.get(i.value, 0.0)) for v in pair)
        for i, pair in select.THRESHOLDS.items()
    }
    out = {}
    for name, data, engines in set_engines(names, "tune", make_embedder(embedder_name)):
        with patched((*setting.patches, (SEL, "THRESHOLDS", table))):
            rows = [answer(engines[m["project"]], m) for m in data.messages]
        real = measures(rows)
        grid = report["cells"][name]["grid"][setting.name]
        summed = measures(
            [grid[str(combo.get(r["intent"], 0.0))][k] for k, r in enumerate(grid[str(0.0)])]
        )
        out[name] = {"answered": real, "summed": summed, "same": real == summed}
        print(f"verify {name}: answered {real}, summed {summed}", flush=True)
    return out


# -- choosing -----------------------------------------------------------------------------


def measures(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Labels found, messages leaking, tokens, messages."""
    return {
        "found": sum(len(r["found"]) for r in rows),
        "leaking": sum(r["leaked"] for r in rows),
        "tokens": sum(r["tokens"] for r in rows),
        "messages": len(rows),
    }


def by_intent(
    cell: Mapping[str, Any], setting: str, shifts: Sequence[float]
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[int, int, int]]:
    """A set's found / leaking / tokens as ``[intent, shift]`` arrays over :data:`INTENTS`
    (each message under its intent as read), and the same sums of the messages of any other
    intent (their thresholds kept)."""
    grid = cell["grid"][setting]
    still = grid[str(0.0)]
    arrays = tuple(np.zeros((len(INTENTS), len(shifts))) for _ in range(3))
    rest = [0, 0, 0]
    for k, r0 in enumerate(still):
        if r0["intent"] not in INTENTS:
            rest[0] += len(r0["found"])
            rest[1] += int(r0["leaked"])
            rest[2] += r0["tokens"]
            continue
        i = INTENTS.index(r0["intent"])
        for j, d in enumerate(shifts):
            r = grid[str(d)][k]
            arrays[0][i, j] += len(r["found"])
            arrays[1][i, j] += int(r["leaked"])
            arrays[2][i, j] += r["tokens"]
    return (arrays[0], arrays[1], arrays[2]), (rest[0], rest[1], rest[2])


def combos(n_intents: int, n_shifts: int) -> np.ndarray:
    """Every shift index per intent, ``[combination, intent]``."""
    grid = np.indices((n_shifts,) * n_intents, dtype=np.int8)
    return grid.reshape(n_intents, -1).T.copy()  # itertools.product's order


def limits(
    cell: Mapping[str, Any], strict: bool, max_tokens: float = MAX_TOKENS
) -> tuple[float, float]:
    """A set's most messages leaking and most tokens (sums), from its default cell."""
    rows = cell["grid"]["default"][str(0.0)]
    base = measures(rows)
    n = max(1, base["messages"])
    if strict:
        return MAX_EXCLUDE * n + 1e-9, max_tokens * n + 1e-6
    return (
        max(MAX_EXCLUDE, base["leaking"] / n) * n + 1e-9,
        max(max_tokens, base["tokens"] / n) * n + 1e-6,
    )


def _sums(
    cell: Mapping[str, Any], setting: str, shifts: Sequence[float], index: np.ndarray
) -> list[np.ndarray]:
    """Found, leaking and tokens of every combination of ``index`` on one set."""
    arrays, rest = by_intent(cell, setting, shifts)
    out = []
    for a, constant in zip(arrays, rest, strict=True):
        total = np.full(index.shape[0], float(constant))
        for n in range(index.shape[1]):
            total += a[n, index[:, n]]
        out.append(total)
    return out


def best_per_set(
    cells: Mapping[str, Any],
    setting: str,
    shifts: Sequence[float],
    index: np.ndarray,
    strict: bool,
    max_tokens: float = MAX_TOKENS,
) -> dict[str, Any]:
    """Per set the shifts by intent with the most labels found within its limits (ties:
    fewest tokens)."""
    out = {}
    for name, cell in cells.items():
        f, lk, tk = _sums(cell, setting, shifts, index)
        max_leak, most = limits(cell, strict, max_tokens)
        ok = (lk <= max_leak) & (tk <= most)
        if not ok.any():
            out[name] = None
            continue
        key = np.where(ok, f * 1e7 - tk, -np.inf)
        k = int(np.argmax(key))
        out[name] = {
            "found": int(f[k]),
            "leaking": int(lk[k]),
            "tokens": float(tk[k]),
            "shifts": {i: shifts[index[k, n]] for n, i in enumerate(INTENTS)},
        }
    return out


def best_shared(
    cells: Mapping[str, Any],
    setting: str,
    shifts: Sequence[float],
    index: np.ndarray,
    strict: bool,
    max_tokens: float = MAX_TOKENS,
) -> dict[str, Any] | None:
    """The shifts by intent, one table for every set, with the most labels found pooled and
    every set within its limits (ties: fewest tokens)."""
    total = np.zeros(index.shape[0])
    tokens_total = np.zeros(index.shape[0])
    ok = np.ones(index.shape[0], dtype=bool)
    parts = {}
    for name, cell in cells.items():
        f, lk, tk = _sums(cell, setting, shifts, index)
        max_leak, most = limits(cell, strict, max_tokens)
        ok &= (lk <= max_leak) & (tk <= most)
        total += f
        tokens_total += tk
        parts[name] = (f, lk, tk)
    if not ok.any():
        return None
    k = int(np.argmax(np.where(ok, total * 1e7 - tokens_total, -np.inf)))
    return {
        "found": int(total[k]),
        "shifts": {i: shifts[index[k, n]] for n, i in enumerate(INTENTS)},
        "per_set": {
            name: {"found": int(f[k]), "leaking": int(lk[k]), "tokens": float(tk[k])}
            for name, (f, lk, tk) in parts.items()
        },
    }


def one_shift(
    cells: Mapping[str, Any],
    setting: str,
    shifts: Sequence[float],
    strict: bool,
    max_tokens: float = MAX_TOKENS,
) -> dict[str, Any] | None:
    """One shift for every intent and set: the most labels pooled within every set's
    limits."""
    index = np.array([[j] * len(INTENTS) for j in range(len(shifts))], dtype=np.int8)
    return best_shared(cells, setting, shifts, index, strict, max_tokens)


def reach(
    cells: Mapping[str, Any], chosen: Sequence[str], shifts: Sequence[float]
) -> dict[str, Any]:
    """Per set: labels, labels some setting and shift injects, and the labels never injected
    (message, memory)."""
    out = {}
    for name, cell in cells.items():
        ever: set[tuple[str, str]] = set()
        for s in chosen:
            for d in shifts:
                for m, r in zip(cell["messages"], cell["grid"][s][str(d)], strict=True):
                    ever.update((m["id"], f) for f in r["found"])
        labels = [(m["id"], f) for m in cell["messages"] for f in m["labels"]]
        out[name] = {
            "labels": len(labels),
            "ever": len(ever),
            "never": [list(x) for x in labels if x not in ever],
        }
    return out


def analyse(
    cells: Mapping[str, Any],
    chosen: Sequence[str],
    shifts: Sequence[float],
    strict: bool,
    max_tokens: float = MAX_TOKENS,
) -> dict[str, Any]:
    """Per setting the default's, one shift's, the shared table's and the per-set oracle's
    labels found; and what any setting reaches."""
    index = combos(len(INTENTS), len(shifts))
    labels = {n: sum(len(m["labels"]) for m in c["messages"]) for n, c in cells.items()}
    total = sum(labels.values())
    out: dict[str, Any] = {
        "labels": labels,
        "strict": strict,
        "max_tokens": max_tokens,
        "settings": {},
    }
    for s in chosen:
        base = {n: measures(c["grid"][s][str(0.0)]) for n, c in cells.items()}
        per_set = best_per_set(cells, s, shifts, index, strict, max_tokens)
        shared = best_shared(cells, s, shifts, index, strict, max_tokens)
        single = one_shift(cells, s, shifts, strict, max_tokens)
        oracle = sum(v["found"] for v in per_set.values() if v) if all(per_set.values()) else None
        out["settings"][s] = {
            "at_shift_0": {"per_set": base, "found": sum(b["found"] for b in base.values())},
            "one_shift": single,
            "shared": shared,
            "per_set": per_set,
            "recall": {
                "at_shift_0": sum(b["found"] for b in base.values()) / total,
                "one_shift": single["found"] / total if single else None,
                "shared": shared["found"] / total if shared else None,
                "per_set": oracle / total if oracle is not None else None,
            },
        }
        print(
            f"{s:14} shift 0 {out['settings'][s]['recall']['at_shift_0']:.4f}  one shift "
            f"{_f(out['settings'][s]['recall']['one_shift'])}  shared "
            f"{_f(out['settings'][s]['recall']['shared'])}  per set "
            f"{_f(out['settings'][s]['recall']['per_set'])}"
        )
        print(
            "   per set oracle: "
            + ", ".join(
                f"{n} {v['found']}/{labels[n]}" if v else f"{n} -" for n, v in per_set.items()
            )
        )
    out["reach"] = reach(cells, chosen, shifts)
    ever = sum(v["ever"] for v in out["reach"].values())
    print(f"labels any setting and shift injects: {ever}/{total} = {ever / total:.4f}")
    return out


def compact(cells: Mapping[str, Any]) -> dict[str, Any]:
    """``cells`` as written: each answer ``[intent, found, leaked, tokens]`` with ``found``
    the indices of the labels found in the message's list (a fifth of the size)."""
    out: dict[str, Any] = {}
    for name, cell in cells.items():
        labels = [m["labels"] for m in cell["messages"]]
        grid = {
            s: {
                d: [
                    [
                        r["intent"],
                        [labels[k].index(f) for f in r["found"]],
                        int(r["leaked"]),
                        r["tokens"],
                    ]
                    for k, r in enumerate(rows)
                ]
                for d, rows in by_shift.items()
            }
            for s, by_shift in cell["grid"].items()
        }
        out[name] = {"messages": cell["messages"], "grid": grid}
    return out


def expand(cells: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`compact`'s inverse (a report read back by ``--analyse``)."""
    out: dict[str, Any] = {}
    for name, cell in cells.items():
        labels = [m["labels"] for m in cell["messages"]]
        grid = {
            s: {
                d: [
                    {
                        "intent": r[0],
                        "found": [labels[k][i] for i in r[1]],
                        "leaked": bool(r[2]),
                        "tokens": r[3],
                    }
                    for k, r in enumerate(rows)
                ]
                for d, rows in by_shift.items()
            }
            for s, by_shift in cell["grid"].items()
        }
        out[name] = {"messages": cell["messages"], "grid": grid}
    return out


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--settings", default="all", help="comma-separated names, or all")
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument(
        "--strict",
        action="store_true",
        help="tokens ≤ 1,200 and must-exclude ≤ 0.03 on every set, with no "
        "allowance where the default is beyond",
    )
    parser.add_argument(
        "--max-tokens",
        type=float,
        default=MAX_TOKENS,
        help="mean tokens a set may reach (inf: no limit)",
    )
    parser.add_argument(
        "--verify", action="store_true", help="answer one mixed table and check the grid's sum"
    )
    parser.add_argument("--analyse", type=Path, help="recompute a written report's choices")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    every = settings()
    wanted = None if args.settings == "all" else set(args.settings.split(","))
    chosen = [s for s in every if wanted is None or s.name in wanted or s.name == "default"]
    if args.analyse:
        report = json.loads(args.analyse.read_text())
        report["cells"] = expand(report["cells"])
        shifts = [float(x) for x in report["shifts"]]
    else:
        start = time.process_time()
        cells = answer_grid(sets, chosen, SHIFTS, args.embedder)
        report = {
            "benchmark": "gating-frontier",
            "split": "tune",
            "sets": sets,
            "shifts": list(SHIFTS),
            "intents": list(INTENTS),
            "settings": {
                s.name: {"note": s.note, "patches": [[p[0], p[1], repr(p[2])] for p in s.patches]}
                for s in chosen
            },
            "engrain_source": str(Path(engrain.__file__).resolve().parent),
            "cpu_seconds": round(time.process_time() - start, 1),
            "cells": cells,
            "machine": machine_info(),
        }
        shifts = list(SHIFTS)
    names = [s.name for s in chosen if s.name in next(iter(report["cells"].values()))["grid"]]
    report["analysis"] = analyse(report["cells"], names, shifts, args.strict, args.max_tokens)
    if not args.analyse and not args.strict:
        report["analysis_strict"] = analyse(report["cells"], names, shifts, True, args.max_tokens)
    if args.verify:
        combo = {"debugging": -0.05, "question": -0.1, "analysis": 0.025, "generation": -0.075}
        report["verify"] = verify(sets, report, chosen[0], combo, args.embedder)
    write_json(args.out, {**report, "cells": compact(report["cells"])})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
