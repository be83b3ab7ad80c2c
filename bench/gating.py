"""The project's own labelled gating evaluation: does ``context()`` inject what helps?

Two fictional projects (``bench/gating/``: a billing SaaS backend and a demand-forecasting
notebook project, ~90 typed learnings each with usage, pins, mutes, restatements and
superseded memories), and in blocks of their own ten more written blind to the gate
(``pulse``, a React Native app: ``pulse.jsonl``, ``messages-pulse.jsonl``,
``trivial-pulse.jsonl``; ``sensor``, sensor firmware: ``sensor.jsonl``,
``messages-sensor.jsonl``, ``trivial-sensor.jsonl``; ``quill``, an open-source Rust
static-site generator: ``quill.jsonl``, ``messages-quill.jsonl``, ``trivial-quill.jsonl``;
``strata``, a Kubernetes operator for PostgreSQL: ``strata.jsonl``, ``messages-strata.jsonl``,
``trivial-strata.jsonl``;
``harbor``, a data-engineering platform (Airflow, dbt on Snowflake, Looker): ``harbor.jsonl``,
``messages-harbor.jsonl``, ``trivial-harbor.jsonl``; ``brightfall``, a multiplayer game's
client, server and backend: ``brightfall.jsonl``, ``messages-brightfall.jsonl``,
``trivial-brightfall.jsonl``;
``meridian``, a hospital integration engine (HL7 v2 and FHIR R4): ``meridian.jsonl``,
``messages-meridian.jsonl``, ``trivial-meridian.jsonl``; ``kestrel``, a Nextflow genomics
pipeline: ``kestrel.jsonl``, ``messages-kestrel.jsonl``, ``trivial-kestrel.jsonl``; ``anvil``,
a C++ low-latency trading system: ``anvil.jsonl``, ``messages-anvil.jsonl``,
``trivial-anvil.jsonl``; ``wrench``, a multi-tenant field-service SaaS: ``wrench.jsonl``,
``messages-wrench.jsonl``, ``trivial-wrench.jsonl``), are loaded
through the public API (``import_records``), and every labelled message is answered with
``explain()`` (the classification) and ``context()`` (what is injected). Each message is
answered by a fresh copy of its project, so the uses one answer counts cannot change the
next; the copy is an ``export_records`` of the loaded project, vectors included, so nothing
is embedded twice.

Measured per profile (``gated``, ``composite``, ``static``) and per split (``held``,
``tune``, ``all``; the split is fixed in the data, see ``bench/gating/README.md``):

- ``trivial_empty``: trivial messages ("thanks!", "👍") that get no memory, and
  ``trivial_empty_with_budget`` the same with ``token_budget=2000``;
- ``must_include_recall``: labelled must-include memories injected, over all of them;
- ``must_exclude_rate``: messages injecting at least one memory labelled must-exclude;
- ``mean_tokens`` / ``mean_budget``: the block's tokens and the assigned budget, per
  labelled message;
- ``complexity_accuracy`` / ``intent_accuracy``: ``explain().classification`` against the
  labels;
- ``over_budget``: blocks whose tokens exceed their assigned budget;
- ``injected_labelled_share``: injected memories labelled must-include, over all injected
  (a lower bound on precision: only what a good answer needs is labelled);

and the same by labelled intent and by project, with must-include recall by the kind of
the memory.

Usage: ``python bench/gating.py --out bench/results/gating.json [--embedder minilm|hash]
[--profiles gated,composite,static] [--limit N]
[--sets main,pulse,sensor,quill,strata,harbor,brightfall,meridian,kestrel,anvil,wrench]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, machine_info, open_engine, write_json

import engrain
from engrain import Engine, Kind
from engrain.embed import Embedder, make_embedder
from engrain.recall.gate import GateOptions
from engrain.recall.results import Gated
from engrain.recall.score import Profile

DATA = Path(__file__).resolve().parent / "gating"
USER = "dev"
SPLITS = ("held", "tune", "all")
#: The evaluation's sets of labelled and trivial messages: ``main`` (``messages.jsonl`` and
#: ``trivial.jsonl``: ledgerly and forecasting), ``pulse`` (``messages-pulse.jsonl`` and
#: ``trivial-pulse.jsonl``: the third project, written blind) and ``sensor``
#: (``messages-sensor.jsonl`` and ``trivial-sensor.jsonl``: the fourth, written blind) and
#: ``quill`` (``messages-quill.jsonl`` and ``trivial-quill.jsonl``: the fifth, written blind)
#: and ``strata`` (``messages-strata.jsonl`` and ``trivial-strata.jsonl``: the sixth, written
#: blind), each reported on its own.
#: ``harbor`` (``messages-harbor.jsonl`` and ``trivial-harbor.jsonl``: a data-engineering
#: platform, written blind in session 19) and ``brightfall`` (``messages-brightfall.jsonl``
#: and ``trivial-brightfall.jsonl``: a multiplayer game, written blind at the same time).
#: ``meridian`` (``messages-meridian.jsonl`` and ``trivial-meridian.jsonl``: a hospital
#: integration engine, written blind in session 20). ``kestrel`` (``messages-kestrel.jsonl``
#: and ``trivial-kestrel.jsonl``: a Nextflow genomics pipeline, written blind in session 24).
#: ``anvil`` (``messages-anvil.jsonl`` and ``trivial-anvil.jsonl``: a C++ low-latency trading
#: system, written blind in session 25). ``wrench`` (``messages-wrench.jsonl`` and
#: ``trivial-wrench.jsonl``: a multi-tenant field-service SaaS, written blind in session 29).
SETS = ("main", "pulse", "sensor", "quill", "strata", "harbor", "brightfall", "meridian",
        "kestrel", "anvil", "wrench")  # fmt: skip
#: The budget passed with trivial messages: a caller's explicit budget must not make
#: "thanks!" fetch memory either.
TRIVIAL_BUDGET = 2000


@dataclass(frozen=True)
class Dataset:
    """The evaluation's data: each project's memory rows, labelled and trivial messages."""

    projects: dict[str, list[dict[str, Any]]]
    messages: list[dict[str, Any]]
    trivial: list[dict[str, Any]]

    def kinds(self) -> dict[str, str]:
        """Each memory id's kind."""
        return {row["id"]: row["kind"] for rows in self.projects.values() for row in rows}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_data(root: Path = DATA, name: str = "main") -> Dataset:
    """The set ``name`` under ``root`` (:data:`SETS`): ``messages.jsonl`` and
    ``trivial.jsonl`` for ``main``, ``messages-<name>.jsonl`` and ``trivial-<name>.jsonl``
    otherwise, with the projects they name (one ``<project>.jsonl`` of memories each);
    every label must name a memory of its project."""
    suffix = "" if name == "main" else f"-{name}"
    messages = _jsonl(root / f"messages{suffix}.jsonl")
    trivial = _jsonl(root / f"trivial{suffix}.jsonl")
    names = sorted({m["project"] for m in [*messages, *trivial]})
    projects = {name: _jsonl(root / f"{name}.jsonl") for name in names}
    for m in messages:
        known = {row["id"] for row in projects[m["project"]]}
        unknown = [i for i in [*m["must_include"], *m["must_exclude"]] if i not in known]
        if unknown:
            raise ValueError(f"{m['id']}: labels {unknown} are not memories of {m['project']}")
    return Dataset(projects, messages, trivial)


def memory_records(rows: Iterable[Mapping[str, Any]], project: str) -> list[dict[str, Any]]:
    """Import records (``type: memory``) for a project's rows: the row's fields as given,
    plus the user, the project and the kind's default memory type."""
    return [
        {"type": "memory", "user_id": USER, "project": project,
         "memory_type": Kind(row["kind"]).default_memory_type.value, **row}
        for row in rows
    ]  # fmt: skip


class Projects:
    """Fresh engines over each loaded project, one per message answered."""

    def __init__(self, data: Dataset, embedder: Embedder, directory: Path) -> None:
        self.embedder = embedder
        self.directory = directory
        self.snapshots: dict[str, list[dict[str, Any]]] = {}
        for name, rows in data.projects.items():
            with self._engine("load") as engine:
                engine.import_records(memory_records(rows, name), now=NOW)
                self.snapshots[name] = list(engine.export_records(USER))

    def _engine(self, name: str) -> Engine:
        return open_engine(self.directory, f"{name}.db", embedder=self.embedder)

    def fresh(self, project: str) -> Engine:
        """An engine holding ``project`` exactly as loaded (vectors included)."""
        engine = self._engine("answer")
        engine.import_records(self.snapshots[project], now=NOW)
        return engine


def answer(engine: Engine, message: Mapping[str, Any], options: GateOptions) -> dict[str, Any]:
    """One labelled message answered: predicted labels, what was injected, tokens, budget."""
    project, turn = message["project"], message.get("turn", 0)
    gated = engine.explain(message["text"], USER, project=project, turn=turn,
                           options=options, now=NOW)  # fmt: skip
    context = engine.context(message["text"], USER, project=project, turn=turn,
                             options=options, now=NOW)  # fmt: skip
    injected = [m.id for m in context.memories]
    budget = context.gated.budget.tokens if context.gated is not None else gated.budget.tokens
    return {
        "id": message["id"], "project": project, "split": message["split"],
        "intent": message["intent"], "complexity": message["complexity"],
        "predicted_intent": gated.classification.intent.value,
        "predicted_complexity": gated.classification.complexity.value,
        "injected": injected,
        "included": [i for i in message["must_include"] if i in injected],
        "missed": [i for i in message["must_include"] if i not in injected],
        "leaked": [i for i in message["must_exclude"] if i in injected],
        "tokens": context.tokens, "budget": budget,
        "why": why_not(gated, message, injected),
    }  # fmt: skip


#: The explain() terms shown for a missed or leaked memory (``--details``).
WHY_TERMS = ("calibrated_relevance", "cosine", "lexical", "semantic", "type_boost",
             "boost_scale", "domain", "usage", "area_convention", "pointed")  # fmt: skip


def why_not(gated: Gated, message: Mapping[str, Any], injected: Sequence[str]) -> dict[str, Any]:
    """For each must-include memory missed and each must-exclude memory injected, what
    ``explain()`` decided: its score, the threshold or budget that dropped it (the
    decision's reason, or "not a candidate" when it was never scored) and its terms."""
    decisions = {d.item.memory.id: d for d in gated.decisions}
    out: dict[str, Any] = {}
    wanted = [i for i in message["must_include"] if i not in injected]
    leaked = [i for i in message["must_exclude"] if i in injected]
    for mid in [*wanted, *leaked]:
        decision = decisions.get(mid)
        if decision is None:
            out[mid] = {"reason": "not a candidate"}
            continue
        terms = gated.components.get(mid, {})
        out[mid] = {
            "reason": decision.reason,
            "score": round(decision.item.score, 3),
            **{t: round(terms[t], 3) for t in WHY_TERMS if t in terms},
        }
    return out


def answer_trivial(
    engine: Engine, message: Mapping[str, Any], options: GateOptions
) -> dict[str, Any]:
    """One trivial message answered without and with an explicit ``token_budget``."""
    project, text = message["project"], message["text"]
    gated = engine.explain(text, USER, project=project, options=options, now=NOW)
    plain = engine.context(text, USER, project=project, options=options, now=NOW)
    budgeted = engine.context(text, USER, project=project, token_budget=TRIVIAL_BUDGET,
                              options=options, now=NOW)  # fmt: skip
    return {
        "id": message["id"], "project": project, "split": message["split"], "text": text,
        "predicted_complexity": gated.classification.complexity.value,
        "injected": [m.id for m in plain.memories], "tokens": plain.tokens,
        "injected_with_budget": [m.id for m in budgeted.memories],
        "tokens_with_budget": budgeted.tokens,
    }  # fmt: skip


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def measures(rows: Sequence[Mapping[str, Any]], trivial: Sequence[Mapping[str, Any]],
             kinds: Mapping[str, str]) -> dict[str, Any]:  # fmt: skip
    """The evaluation's measures over answered labelled ``rows`` and ``trivial`` rows
    (``kinds`` maps memory ids to kinds, for recall by kind)."""
    wanted = sum(len(r["included"]) + len(r["missed"]) for r in rows)
    out: dict[str, Any] = {
        "messages": len(rows),
        "trivial_messages": len(trivial),
        "trivial_empty": _rate(sum(not t["injected"] and not t["tokens"] for t in trivial),
                               len(trivial)),
        "trivial_empty_with_budget": _rate(
            sum(not t["injected_with_budget"] and not t["tokens_with_budget"] for t in trivial),
            len(trivial)),
        "trivial_classified_trivial": _rate(
            sum(t["predicted_complexity"] == "trivial" for t in trivial), len(trivial)),
        "must_include_recall": _rate(sum(len(r["included"]) for r in rows), wanted),
        "must_exclude_rate": _rate(sum(bool(r["leaked"]) for r in rows), len(rows)),
        "mean_tokens": _mean([r["tokens"] for r in rows]),
        "mean_budget": _mean([r["budget"] for r in rows]),
        "complexity_accuracy": _rate(
            sum(r["predicted_complexity"] == r["complexity"] for r in rows), len(rows)),
        "intent_accuracy": _rate(sum(r["predicted_intent"] == r["intent"] for r in rows),
                                 len(rows)),
        "over_budget": sum(r["tokens"] > r["budget"] for r in rows),
        "mean_injected": _mean([len(r["injected"]) for r in rows]),
        # a lower bound on precision: only must-include memories are labelled relevant
        "injected_labelled_share": _rate(sum(len(r["included"]) for r in rows),
                                         sum(len(r["injected"]) for r in rows)),
    }  # fmt: skip
    by_kind: dict[str, list[int]] = {}
    for r in rows:
        for ids, hit in ((r["included"], 1), (r["missed"], 0)):
            for i in ids:
                by_kind.setdefault(kinds[i], []).append(hit)
    out["must_include_recall_by_kind"] = {
        kind: {"recall": _rate(sum(hits), len(hits)), "labelled": len(hits)}
        for kind, hits in sorted(by_kind.items())
    }
    leaked: dict[str, int] = {}
    injected: dict[str, int] = {}
    for r in rows:
        for i in r["leaked"]:
            leaked[kinds[i]] = leaked.get(kinds[i], 0) + 1
        for i in r["injected"]:
            injected[kinds[i]] = injected.get(kinds[i], 0) + 1
    out["must_exclude_leaks_by_kind"] = dict(sorted(leaked.items()))
    reasons = Counter(miss_reason(r.get("why", {}).get(i, {}).get("reason", "?"))
                      for r in rows for i in r["missed"])  # fmt: skip
    out["missed_by_reason"] = dict(sorted(reasons.items()))
    # why a must-exclude memory got in: "selected" (past its threshold), "pinned",
    # "procedural", or as a conflict partner
    leaks = Counter(r.get("why", {}).get(i, {}).get("reason", "?").split(",")[0].split(" with ")[0]
                    for r in rows for i in r["leaked"])  # fmt: skip
    out["leaked_by_reason"] = dict(sorted(leaks.items()))
    out["injected_by_kind"] = dict(sorted(injected.items()))
    return out


def miss_reason(reason: str) -> str:
    """The kind of reason ``explain()`` gave for not injecting a memory: below its
    threshold, not relevant enough (procedural), over the budget or its share, not a
    candidate, or another."""
    for key, name in ((" below ", "below threshold"), ("do not fit", "budget"),
                      ("share full", "procedural share"), ("not a candidate", "not a candidate"),
                      ("top_k", "top_k")):  # fmt: skip
        if key in reason:
            procedural = name == "below threshold" and "relevance" in reason
            return "not relevant enough" if procedural else name
    return reason


def by_intent(rows: Sequence[Mapping[str, Any]], kinds: Mapping[str, str]) -> dict[str, Any]:
    """The labelled measures for each labelled intent."""
    intents = sorted({r["intent"] for r in rows})
    keep = ("messages", "must_include_recall", "must_exclude_rate", "mean_tokens",
            "mean_budget", "complexity_accuracy", "intent_accuracy", "over_budget",
            "injected_labelled_share")  # fmt: skip
    out = {}
    for intent in intents:
        m = measures([r for r in rows if r["intent"] == intent], [], kinds)
        out[intent] = {k: m[k] for k in keep}
    return out


def by_project(rows: Sequence[Mapping[str, Any]], trivial: Sequence[Mapping[str, Any]],
               kinds: Mapping[str, str]) -> dict[str, Any]:  # fmt: skip
    """The measures (without their breakdowns) for each project."""
    out = {}
    for project in sorted({r["project"] for r in [*rows, *trivial]}):
        m = measures([r for r in rows if r["project"] == project],
                     [t for t in trivial if t["project"] == project], kinds)  # fmt: skip
        out[project] = {k: v for k, v in m.items() if not isinstance(v, dict)}
    return out


def split_rows(rows: Sequence[Mapping[str, Any]], split: str) -> list[Mapping[str, Any]]:
    """The rows of ``split`` (``all``: every row)."""
    return [r for r in rows if split == "all" or r["split"] == split]


def evaluate(projects: Projects, data: Dataset, profile: Profile) -> dict[str, Any]:
    """Every message answered with ``profile``, and the measures per split."""
    rows, trivial = [], []
    for message in data.messages:
        with projects.fresh(message["project"]) as engine:
            rows.append(answer(engine, message, engine.options.update(profile=profile)))
    for message in data.trivial:
        with projects.fresh(message["project"]) as engine:
            trivial.append(answer_trivial(engine, message, engine.options.update(profile=profile)))
    kinds = data.kinds()
    splits = {}
    for split in SPLITS:
        r, t = split_rows(rows, split), split_rows(trivial, split)
        splits[split] = {**measures(r, t, kinds), "by_intent": by_intent(r, kinds),
                         "by_project": by_project(r, t, kinds)}  # fmt: skip
    return {"splits": splits, "messages": rows, "trivial": trivial}


def run(
    embedder_name: str = "minilm",
    profiles: Sequence[str] = ("gated", "composite", "static"),
    limit: int | None = None,
    data: Dataset | None = None,
    note: str | None = None,
    extra_sets: Sequence[str] = (),
    only: str | None = None,
) -> dict[str, Any]:
    """The full report: measures per profile and split, every answer, the data's shape and
    the machine, for ``data`` (default the ``main`` set) and under ``sets`` for each of
    ``extra_sets`` (:data:`SETS`). ``limit`` keeps the first ``limit`` labelled and trivial
    messages of each; ``only`` (``tune`` or ``held``) keeps that split's messages."""
    data = _limited(data or load_data(), limit, only)
    embedder = make_embedder(embedder_name)
    start = time.perf_counter()
    results = _profiles(data, embedder, profiles)
    extra = {}
    for name in extra_sets:
        extra_data = _limited(load_data(name=name), limit, only)
        extra[name] = {"data": _shape(extra_data),
                       "profiles": _profiles(extra_data, embedder, profiles)}  # fmt: skip
    return {
        "benchmark": "gating",
        "embedder": embedder.model_id,
        "engrain_source": str(Path(engrain.__file__).resolve().parent),
        "note": note,
        "only": only,
        "now": NOW.isoformat(),
        "data": _shape(data),
        "trivial_budget": TRIVIAL_BUDGET,
        "seconds": round(time.perf_counter() - start, 1),
        "profiles": results,
        "sets": extra,
        "machine": machine_info(),
    }


def _limited(data: Dataset, limit: int | None, only: str | None = None) -> Dataset:
    """``data`` with its first ``limit`` labelled and trivial messages (all: ``None``), of
    the split ``only`` when given (both: ``None``)."""
    messages = [m for m in data.messages if only is None or m["split"] == only]
    trivial = [t for t in data.trivial if only is None or t["split"] == only]
    if limit is not None:
        messages, trivial = messages[:limit], trivial[:limit]
    return Dataset(data.projects, messages, trivial)


def _profiles(data: Dataset, embedder: Embedder, profiles: Sequence[str]) -> dict[str, Any]:
    """:func:`evaluate` of ``data`` for each profile, over one loading of its projects."""
    with tempfile.TemporaryDirectory(prefix="engrain-gating-") as tmp:
        projects = Projects(data, embedder, Path(tmp))
        return {name: evaluate(projects, data, Profile(name)) for name in profiles}


def _shape(data: Dataset) -> dict[str, Any]:
    """The data's size: memories and kinds per project, messages, labels."""
    kinds = data.kinds()
    return {
            "projects": {name: {"memories": len(rows),
                                "kinds": {k: sum(r["kind"] == k for r in rows)
                                          for k in sorted({r["kind"] for r in rows})}}
                         for name, rows in data.projects.items()},
            "messages": len(data.messages), "trivial": len(data.trivial),
            "labelled_must_include": sum(len(m["must_include"]) for m in data.messages),
            "labelled_must_exclude": sum(len(m["must_exclude"]) for m in data.messages),
            "memory_kinds": len(set(kinds.values())),
    }  # fmt: skip


COLUMNS = (
    ("trivial_empty", "triv∅", "{:.2f}"), ("trivial_empty_with_budget", "triv∅+b", "{:.2f}"),
    ("must_include_recall", "incl", "{:.3f}"), ("must_exclude_rate", "excl", "{:.2f}"),
    ("mean_tokens", "tokens", "{:.0f}"), ("mean_budget", "budget", "{:.0f}"),
    ("complexity_accuracy", "cplx", "{:.2f}"), ("intent_accuracy", "intent", "{:.2f}"),
    ("over_budget", "over", "{}"), ("injected_labelled_share", "labelled", "{:.2f}"),
)  # fmt: skip


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def table(report: Mapping[str, Any], split: str = "held") -> str:
    """A compact text table: each split, each profile a row; then the default profile's
    ``split`` by intent, by project and its must-include recall by kind; then the same for
    each further set (``report["sets"]``)."""
    lines = [_block(report, split)]
    for name, result in report.get("sets", {}).items():
        lines.append(f"\n== set {name} ==")
        lines.append(_block(result, split))
    return "\n".join(lines)


def _block(report: Mapping[str, Any], split: str) -> str:
    """:func:`table` of one set (``report["profiles"]``)."""
    head = f"{'split':<5} {'profile':<9} " + " ".join(f"{c[1]:>7}" for c in COLUMNS)
    lines = [head]
    for name_split in SPLITS:
        for name, result in report["profiles"].items():
            m = result["splits"][name_split]
            cells = " ".join(f"{_cell(m[key], fmt):>7}" for key, _, fmt in COLUMNS)
            lines.append(f"{name_split:<5} {name:<9} {cells}")
    first = next(iter(report["profiles"]))
    lines.append(f"\n{split} split by intent ({first}):")
    for intent, m in report["profiles"][first]["splits"][split]["by_intent"].items():
        cells = " ".join(f"{_cell(m.get(key), fmt):>7}" for key, _, fmt in COLUMNS)
        lines.append(f"{intent:<15} {cells}")
    lines.append(f"\n{split} split by project ({first}):")
    for project, m in report["profiles"][first]["splits"][split]["by_project"].items():
        cells = " ".join(f"{_cell(m.get(key), fmt):>7}" for key, _, fmt in COLUMNS)
        lines.append(f"{project:<15} {cells}")
    lines.append(f"\n{split} split must-include recall by kind ({first}):")
    for kind, m in report["profiles"][first]["splits"][split][
        "must_include_recall_by_kind"
    ].items():
        lines.append(f"  {kind:<12} {_cell(m['recall'], '{:.3f}')} of {m['labelled']}")
    reasons = report["profiles"][first]["splits"][split]["missed_by_reason"]
    lines.append(f"{split} split must-include misses by reason ({first}): "
                 + ", ".join(f"{reason} {n}" for reason, n in reasons.items()))  # fmt: skip
    return "\n".join(lines)


def details(report: Mapping[str, Any], data: Dataset, split: str = "tune") -> str:
    """Each message of ``split`` (default profile) that misses a must-include memory or
    injects a must-exclude one: its text, labelled and predicted intent, and for each such
    memory its kind, content and what ``explain()`` decided (:func:`why_not`)."""
    texts = {m["id"]: m["text"] for m in data.messages}
    memories = {row["id"]: row for rows in data.projects.values() for row in rows}
    first = next(iter(report["profiles"]))
    lines = [f"\n{split} split, misses (-) and leaks (+) ({first}):"]
    for r in split_rows(report["profiles"][first]["messages"], split):
        if not r["missed"] and not r["leaked"]:
            continue
        lines.append(f"{r['id']} [{r['intent']}/{r['predicted_intent']}, "
                     f"{r['complexity']}/{r['predicted_complexity']}, {r['tokens']}/"
                     f"{r['budget']} tokens, {len(r['injected'])} injected] "
                     f"{texts[r['id']]}")  # fmt: skip
        for sign, ids in (("-", r["missed"]), ("+", r["leaked"])):
            for mid in ids:
                row = memories[mid]
                flags = [f for f in ("pinned", "muted") if row.get(f)]
                if row.get("superseded_by"):
                    flags.append(f"superseded by {row['superseded_by']}")
                why = dict(r.get("why", {}).get(mid, {}))
                reason = why.pop("reason", "?")
                terms = " ".join(f"{k}={v}" for k, v in why.items())
                lines.append(f"  {sign} {mid} ({row['kind']}{', ' if flags else ''}"
                             f"{', '.join(flags)}): {reason}; {terms}")  # fmt: skip
                lines.append(f"      {row['content'][:150]}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the evaluation, print the table and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where to write the JSON report")
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--profiles", default="gated,composite,static",
                        help="comma-separated scoring profiles")  # fmt: skip
    parser.add_argument("--limit", type=int, help="only the first N labelled and trivial messages")
    parser.add_argument(
        "--split",
        default="held",
        choices=SPLITS,
        help="the split shown by intent and by kind (and by --details)",
    )
    parser.add_argument(
        "--details",
        action="store_true",
        help="print each message of --split with its misses and leaks and "
        "why explain() dropped or kept them (tune on the tune split only)",
    )
    parser.add_argument(
        "--sets",
        default=",".join(SETS),
        help="comma-separated sets of messages (main always runs first)",
    )
    parser.add_argument(
        "--only",
        choices=("held", "tune"),
        help="answer only this split's messages (tuning without reading the "
        "held half: --only tune)",
    )
    parser.add_argument("--note", help="what was measured, stored in the report (e.g. the "
                        "source when engrain is imported from elsewhere)")  # fmt: skip
    args = parser.parse_args(argv)
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    for p in profiles:
        Profile(p)
    sets = [s.strip() for s in args.sets.split(",") if s.strip() and s.strip() != "main"]
    unknown = set(sets) - set(SETS)
    if unknown:
        parser.error(f"unknown sets {sorted(unknown)}; known: {', '.join(SETS)}")
    report = run(
        args.embedder, profiles, args.limit, note=args.note, extra_sets=sets, only=args.only
    )
    print(table(report, args.split))
    if args.details:
        print(details(report, data=load_data(), split=args.split))
        for name in sets:
            print(f"\n== set {name} ==")
            print(details(report["sets"][name], data=load_data(name=name), split=args.split))
    print(f"({report['seconds']} s, embedder {report['embedder']})")
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
