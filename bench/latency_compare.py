"""``context()`` latency of several source trees side by side, on the same corpus and queries.

    git worktree add /tmp/engrain-pre12 0649e43        # a tree to compare with
    python bench/latency_compare.py --tree pre12=/tmp/engrain-pre12 --tree now=. \
        [--size 10000] [--queries 100] [--rounds 4] [--out bench/results/latency_compare.json]

Each tree is measured with its own ``src`` (and its own ``bench/common.py``) on
``PYTHONPATH``, in a fresh subprocess per measurement, so nothing of one tree leaks into
another. The corpus, the queries and the vectors are ``bench/latency.py``'s: the notes of
``common.make_notes(size, seed)``, the queries of ``common.make_queries(…, seed + 1)``
(the first ``--warmup`` untimed, the next ``--queries`` timed), vectors from the shared
cache (``--cache-dir``, the same file for every tree). Each tree writes its own SQLite file
once (its own schema); every measurement starts from a fresh copy of it, so the uses one
run counts do not change the next run's data.

Rounds alternate the trees (the order rotates every round), so a busy machine slows them
alike; each round gives every tree's p50/p95, and the report quotes the median over rounds,
the spread (min–max) and the ratio to the first tree. Queries are also split by the
complexity the last tree's classifier gives them (``simple`` / ``complex`` / …), since a
complex message gets a larger budget and more memories. Each tree's blocks (text, tokens,
the memories' contents, hashed) are compared with one tree's (``--same-as``, default the
last) query by query: a change meant only to be faster shows none differing
(``PYTHONHASHSEED`` is fixed, so every run sums alike). Besides the ratio of the medians,
``p50_paired`` / ``p95_paired`` are the median over rounds of each round's ratio to the
first tree's run of the same round (trees run back to back, so a burst of load from
elsewhere tends to hit them alike). ``cpu_p50_ms`` / ``cpu_p95_ms`` are the calling
thread's CPU time per call (``time.thread_time``): it leaves out the time the thread waited
for a core, so it is steadier on a busy machine, and it leaves out the model's own threads
(most of the query embedding) and I/O waits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

USER = "bench-user"


# -- inside a tree's subprocess ----------------------------------------------------------------


def _build(spec: dict[str, Any]) -> dict[str, Any]:
    """Write the corpus into a new SQLite file with this tree's engine."""
    import common

    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    notes = common.make_notes(spec["size"], seed=spec["seed"])
    vectors, _, _ = common.embed_corpus(
        embedder, [n.text for n in notes], cache_dir=Path(spec["cache_dir"])
    )
    path = Path(spec["db"])
    engine = Engine(settings=Settings(url=f"sqlite:///{path}", data_dir=path.parent),
                    embedder=embedder)  # fmt: skip
    with engine:
        memories = common.make_memories(notes, vectors, USER)
        for offset in range(0, len(memories), 2000):
            engine.store.write(memories[offset : offset + 2000])
    return {"memories": len(notes)}


def _serve(spec: dict[str, Any]) -> dict[str, Any]:
    """Time one ``context()`` call per query on the file ``spec["db"]`` (warm-up first)."""
    import common

    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.embed(["warm the model up"])
    path = Path(spec["db"])
    engine = Engine(settings=Settings(url=f"sqlite:///{path}", data_dir=path.parent),
                    embedder=embedder)  # fmt: skip
    rows = []
    with engine:
        for query in spec["warmup"]:
            engine.context(query, USER, now=common.NOW)
        for query in spec["queries"]:
            start, cpu = time.perf_counter(), time.thread_time()
            context = engine.context(query, USER, now=common.NOW)
            ms = (time.perf_counter() - start) * 1000.0
            cpu_ms = (time.thread_time() - cpu) * 1000.0
            gated = getattr(context, "gated", None)
            classification = getattr(gated, "classification", None)
            complexity = getattr(classification, "complexity", None)
            # contents, not ids: every tree's file gets ids of its own
            ids = "\0".join(m.content for m in context.memories)
            rows.append({
                "ms": ms,
                "cpu_ms": cpu_ms,
                "block": hashlib.sha256(f"{context.text}\0{context.tokens}\0{ids}".encode())
                .hexdigest()[:16],
                "complexity": getattr(complexity, "value", str(complexity)),
                "memories": len(context.memories),
                "tokens": context.tokens,
                "laps": dict(getattr(gated, "timings_ms", None) or {}),
            })  # fmt: skip
    return {"rows": rows}


def _answers(spec: dict[str, Any]) -> dict[str, Any]:
    """Every answer a speed-only change must leave as it was, hashed one by one: on the
    gating evaluation's two projects (``bench/gating``), each labelled and trivial message
    in both formats, with the gated and the composite profile, with the automatic budget
    and with 600 tokens, ``explain()`` (everything but its timings) then ``context()``
    (text, tokens, memories); and on a copy of the latency file, ``spec["queries"]`` in both
    formats with ``context()`` and the first 15 with ``explain()``."""
    import common
    import gating

    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder
    from engrain.recall.assemble import Format
    from engrain.recall.gate import GateOptions
    from engrain.recall.score import Profile

    embedder = MiniLMEmbedder()
    digests: list[str] = []

    def record(context: Any = None, gated: Any = None) -> None:
        parts: dict[str, Any] = {}
        if context is not None:
            parts.update(text=context.text, tokens=context.tokens,
                         memories=[m.content for m in context.memories])  # fmt: skip
        if gated is not None:
            explained = gated.to_dict()
            explained.pop("timings_ms", None)
            for candidate in explained["candidates"]:
                candidate.pop("id")  # ids are the file's own
            parts["explain"] = explained
        digests.append(hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest())

    data = gating.load_data()
    with tempfile.TemporaryDirectory(prefix="engrain-answers-") as tmp:
        projects = gating.Projects(data, embedder, Path(tmp))
        for fmt in Format:
            for profile in (Profile.GATED, Profile.COMPOSITE):
                options = GateOptions(profile=profile, format=fmt)
                engines: dict[str, Any] = {}
                for message in [*data.messages, *data.trivial]:
                    project = message["project"]
                    engine = engines.get(project) or engines.setdefault(
                        project, projects.fresh(project)
                    )
                    for budget in (None, 600):
                        ask = {
                            "project": project,
                            "turn": message.get("turn", 0),
                            "options": options,
                            "token_budget": budget,
                            "now": gating.NOW,
                        }
                        record(gated=engine.explain(message["text"], gating.USER, **ask))
                        record(engine.context(message["text"], gating.USER, **ask))
                for engine in engines.values():
                    engine.close()
        path = Path(spec["db"])
        engine = Engine(settings=Settings(url=f"sqlite:///{path}", data_dir=path.parent),
                        embedder=embedder)  # fmt: skip
        with engine:
            for fmt in Format:
                options = GateOptions(format=fmt)
                for query in spec["queries"]:
                    record(engine.context(query, USER, now=common.NOW, options=options))
                for query in spec["queries"][:15]:
                    record(gated=engine.explain(query, USER, now=common.NOW, options=options))
    return {"digests": digests}


# -- the parent ----------------------------------------------------------------------------------


def _run(tree: Path, mode: str, spec: dict[str, Any]) -> dict[str, Any]:
    """``mode`` (``build`` or ``serve``) in a fresh interpreter on ``tree``'s sources, set
    orders (BM25 sums) alike in every run: same blocks."""
    import common

    return common.run_child(__file__, mode, spec, [tree / "src", tree / "bench"],
                            same_hashes=True)  # fmt: skip


def _percentile(values: Sequence[float], q: float) -> float:
    import common

    return common.percentile(values, q)


def _queries(size_seed: int, warmup: int, count: int) -> tuple[list[str], list[str]]:
    """``bench/latency.py``'s warm-up and timed queries."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import common

    warm, timed, _ = common.latency_pool(warmup, count, size_seed)
    return warm, timed


def summarize(labels: Sequence[str], runs: dict[str, list[list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per tree and per query group (all, and each complexity of the last tree's
    classifier): p50/p95 of every round, their median and spread, and the ratio of the
    medians to the first tree's."""
    reference = runs[labels[-1]][0]
    groups: dict[str, list[int]] = {"all": list(range(len(reference)))}
    for i, row in enumerate(reference):
        groups.setdefault(str(row["complexity"]), []).append(i)
    out: dict[str, Any] = {}
    for group, indexes in groups.items():
        table: dict[str, Any] = {}
        rounds: dict[str, list[tuple[float, float]]] = {}
        for label in labels:
            per_round = [
                (_percentile([rows[i]["ms"] for i in indexes], 50),
                 _percentile([rows[i]["ms"] for i in indexes], 95))
                for rows in runs[label]
            ]  # fmt: skip
            rounds[label] = per_round
            p50s = [p for p, _ in per_round]
            p95s = [p for _, p in per_round]
            cpu = [[rows[i]["cpu_ms"] for i in indexes] for rows in runs[label]]
            first = runs[label][0]
            table[label] = {
                "p50_ms": round(statistics.median(p50s), 2),
                "p95_ms": round(statistics.median(p95s), 2),
                "p50_range": [round(min(p50s), 2), round(max(p50s), 2)],
                "p95_range": [round(min(p95s), 2), round(max(p95s), 2)],
                "cpu_p50_ms": round(statistics.median(_percentile(c, 50) for c in cpu), 2),
                "cpu_p95_ms": round(statistics.median(_percentile(c, 95) for c in cpu), 2),
                "memories_mean": round(statistics.fmean(first[i]["memories"] for i in indexes), 1),
                "tokens_mean": round(statistics.fmean(first[i]["tokens"] for i in indexes), 1),
            }
        base = table[labels[0]]
        for label in labels:
            row = table[label]
            row["p50_ratio"] = round(row["p50_ms"] / base["p50_ms"], 3)
            row["p95_ratio"] = round(row["p95_ms"] / base["p95_ms"], 3)
            for n, name in ((0, "p50_paired"), (1, "p95_paired")):
                row[name] = round(statistics.median(
                    mine[n] / theirs[n]
                    for mine, theirs in zip(rounds[label], rounds[labels[0]], strict=True)
                ), 3)  # fmt: skip
        out[group] = {"queries": len(indexes), "trees": table}
    return out


def same_blocks(
    labels: Sequence[str], runs: dict[str, list[list[dict[str, Any]]]], base_label: str
) -> dict[str, Any]:
    """Per tree, how many queries got a block (text, tokens and memories) other than
    ``base_label``'s, and whether its rounds agreed with each other: a change meant only to
    be faster must show 0 and true against the tree it speeds up."""
    base = [row["block"] for row in runs[base_label][0]]
    out: dict[str, Any] = {}
    for label in labels:
        rounds = [[row["block"] for row in rows] for rows in runs[label]]
        out[label] = {
            "differing": sum(a != b for a, b in zip(rounds[0], base,
                                                                      strict=True)),
            "rounds_agree": all(r == rounds[0] for r in rounds),
        }  # fmt: skip
    return out


def _laps(labels: Sequence[str], runs: dict[str, list[list[dict[str, Any]]]]) -> dict[str, Any]:
    """Mean milliseconds of each engine stage lap, per tree, over every round."""
    out: dict[str, Any] = {}
    for label in labels:
        sums: dict[str, list[float]] = {}
        for rows in runs[label]:
            for row in rows:
                for name, ms in row["laps"].items():
                    sums.setdefault(name, []).append(ms)
        out[label] = {name: round(statistics.fmean(v), 3) for name, v in sums.items()}
    return out


def _check_answers(
    trees: dict[str, Path],
    built: dict[str, Path],
    queries: Sequence[str],
    base: str,
    workdir: Path,
) -> dict[str, Any]:
    """Each tree's answers (``_answers``) against ``base``'s: how many differ, of how many."""
    digests = {}
    for label, tree in trees.items():
        run_dir = Path(tempfile.mkdtemp(prefix=f"answers-{label}-", dir=workdir))
        try:
            shutil.copyfile(built[label], run_dir / "engrain.db")
            spec = {"db": str(run_dir / "engrain.db"), "queries": list(queries)}
            digests[label] = _run(tree, "answers", spec)["digests"]
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        print(f"{label}: {len(digests[label])} answers", file=sys.stderr)
    return {
        label: {"answers": len(d), "differing": sum(a != b for a, b in zip(d, digests[base],
                                                                           strict=True))}
        for label, d in digests.items()
    }  # fmt: skip


def print_report(report: dict[str, Any]) -> None:
    """The side-by-side table on stdout."""
    labels = report["labels"]
    print(f"{report['size']:,} memories, {report['rounds']} rounds of {report['queries']} "
          f"queries (median over rounds, [min–max], ratio to {labels[0]})")  # fmt: skip
    for group, data in report["groups"].items():
        print(f"\n{group} ({data['queries']} queries)")
        print(f"{'tree':>10} {'p50 ms':>8} {'range':>13} {'ratio':>6} {'paired':>6} "
              f"{'p95 ms':>8} {'range':>13} {'ratio':>6} {'paired':>6} {'cpu50':>6} "
              f"{'cpu95':>6} {'mem':>6} {'tokens':>7}")  # fmt: skip
        for label in labels:
            r = data["trees"][label]
            print(f"{label:>10} {r['p50_ms']:>8.2f} {r['p50_range'][0]:>6.2f}–"
                  f"{r['p50_range'][1]:<6.2f} {r['p50_ratio']:>6.3f} {r['p50_paired']:>6.3f} "
                  f"{r['p95_ms']:>8.2f} {r['p95_range'][0]:>6.2f}–{r['p95_range'][1]:<6.2f} "
                  f"{r['p95_ratio']:>6.3f} {r['p95_paired']:>6.3f} "
                  f"{r['cpu_p50_ms']:>6.2f} {r['cpu_p95_ms']:>6.2f} "
                  f"{r['memories_mean']:>6.1f} {r['tokens_mean']:>7.1f}")  # fmt: skip
    print(f"\nblocks (text, tokens, memories) other than {report['same_blocks_base']}'s, of "
          f"{report['queries']} queries")  # fmt: skip
    for label in labels:
        same = report["same_blocks"][label]
        print(f"{label:>10} {same['differing']:>4}  rounds agree: "
              f"{same['rounds_agree']}")  # fmt: skip
    if report.get("answers"):
        print(f"\nanswers (explain and context, see --check-answers) other than "
              f"{report['same_blocks_base']}'s")  # fmt: skip
        for label, row in report["answers"].items():
            print(f"{label:>10} {row['differing']:>5} of {row['answers']}")
    print("\nengine stage laps, mean ms")
    for label in labels:
        laps = report["laps"][label]
        print(f"{label:>10} " + " ".join(f"{k}={v:.2f}" for k, v in laps.items()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tree",
        action="append",
        metavar="LABEL=PATH",
        help="a source tree to measure (repeatable; the first is the base)",
    )
    parser.add_argument("--size", type=int, default=10_000, help="memories of the one user")
    parser.add_argument("--queries", type=int, default=100, help="timed queries per round")
    parser.add_argument("--warmup", type=int, default=10, help="untimed queries per run")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="corpus vectors (default $TMPDIR/engrain-bench, latency.py's)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="keep each tree's built SQLite file here between invocations",
    )
    parser.add_argument(
        "--same-as",
        metavar="LABEL",
        help="the tree whose blocks the others are compared with (default: the last)",
    )
    parser.add_argument("--out", type=Path, help="write the report here as JSON")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--answers", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--check-answers",
        action="store_true",
        help="also compare every tree's answers (see _answers) with --same-as's",
    )
    args = parser.parse_args(argv)
    for mode, worker in (("build", _build), ("serve", _serve), ("answers", _answers)):
        path = getattr(args, mode)
        if path is not None:
            print(json.dumps(worker(json.loads(path.read_text(encoding="utf-8")))))
            return 0
    if not args.tree or args.size < 1 or args.queries < 1 or args.rounds < 1:
        parser.error("give at least one --tree; size, queries and rounds must be positive")
    trees = {}
    for item in args.tree:
        label, _, path = item.partition("=")
        if not path or not (Path(path) / "src" / "engrain").is_dir():
            parser.error(f"--tree {item!r}: LABEL=PATH to a checkout with src/engrain")
        trees[label] = Path(path).resolve()
    labels = list(trees)
    cache_dir = args.cache_dir or Path(tempfile.gettempdir()) / "engrain-bench"
    warmup, queries = _queries(args.seed, args.warmup, args.queries)

    keep = args.workdir is not None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="engrain-compare-"))
    workdir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[list[dict[str, Any]]]] = {label: [] for label in labels}
    try:
        built = {}
        for label, tree in trees.items():
            db = workdir / f"{label}-{args.size}.db"
            if not db.is_file():
                print(f"{label}: writing {args.size:,} memories", file=sys.stderr)
                _run(tree, "build", {"size": args.size, "seed": args.seed,
                                     "cache_dir": str(cache_dir), "db": str(db)})  # fmt: skip
            built[label] = db
        for r in range(args.rounds):
            shift = r % len(labels)
            for label in labels[shift:] + labels[:shift]:
                run_dir = Path(tempfile.mkdtemp(prefix=f"run-{label}-", dir=workdir))
                try:
                    db = run_dir / "engrain.db"
                    shutil.copyfile(built[label], db)
                    served = _run(
                        trees[label], "serve", {"db": str(db), "warmup": warmup, "queries": queries}
                    )
                finally:
                    shutil.rmtree(run_dir, ignore_errors=True)
                runs[label].append(served["rows"])
                ms = [row["ms"] for row in served["rows"]]
                print(f"round {r + 1}: {label} p50 {_percentile(ms, 50):.2f} "
                      f"p95 {_percentile(ms, 95):.2f} ms", file=sys.stderr)  # fmt: skip
        answers = (
            _check_answers(trees, built, queries, args.same_as or labels[-1], workdir)
            if args.check_answers
            else None
        )
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "size": args.size, "queries": args.queries, "rounds": args.rounds, "labels": labels,
        "trees": {label: str(tree) for label, tree in trees.items()},
        "groups": summarize(labels, runs), "laps": _laps(labels, runs),
        "same_blocks": same_blocks(labels, runs, args.same_as or labels[-1]),
        "same_blocks_base": args.same_as or labels[-1],
        "answers": answers,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
