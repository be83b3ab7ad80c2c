"""How deep a ``context()`` pool must be: issue 18's "a pool only as deep as the call needs".

The gate gathers ``max(options.pool, budget // 40)`` nearest and lexical matches (125 for a
5,000-token budget, and ``chunk_pool`` 125 for a transcript-led pool). A shallower pool is
safe for a call only when no memory beyond the ordinary depth (``options.pool``) could be
selected. This measures, on the latency corpus's queries (``bench/latency.py``'s timed set,
same seed), for every call:

* ``deep``: whether the call walked deeper than ``options.pool``;
* ``bound_deepens``: whether a sound bound would still deepen it. With thresholds (the
  automatic selection), a memory outside the shallow pool has a dense similarity at most the
  shallow walk's last one's and a lexical side at most the lexical list's k-th score (it
  is in neither top-k list), so its relevance is at most ``blend(cos_k, lex_k) / scale``;
  every other score term is taken at its maximum (recency 1, the domain, usage and
  co-occurrence caps, the focus bonus; a typed learning's boost is not counted because
  typed learnings are scored whatever the depth, ``LEARNINGS_MAX`` nearest). The bound
  deepens when that score reaches the lowest threshold of a kind walked from the pool.
  Without thresholds (an explicit budget, a transcript's lead budget: filled in score
  order) the bound deepens when the shallow block is not full. The relevance additions of
  the later stages (speakers, time, soft terms, chunk rank, asked turns) are NOT added: the
  bound here is optimistic, so a call it deepens a sound bound deepens too;
* ``same_block``: whether the block of the shallow pool (``options.pool``, no transcript
  deepening) is the block of the deep one (the oracle: what any depth rule could save).

Usage (copy the shared store first: the engine writes its usage counts)::

    python bench/pool_depth.py --store /tmp/h10-stores/latency-100000-s7-model.db \
        --out bench/results/pool_depth-s19-h10.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common

import engrain.recall.gate as gate_module
from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import RELEVANCE_FLOOR, blend
from engrain.recall.score import COOCCURRENCE_CAP, DOMAIN_SCALE, FOCUS_BONUS, USAGE_CAP
from engrain.recall.select import MIN_LINE_TOKENS, THRESHOLDS

USER = "bench-user"


class Probe:
    """Records, for the call in flight, the gathers and the selection's arguments."""

    def __init__(self) -> None:
        self.gathers: list[dict[str, Any]] = []
        self.selects: list[dict[str, Any]] = []
        self.shallow = False
        self._gather = gate_module.gather
        self._select = gate_module.select_gated
        self._candidates = gate_module._candidates
        self._pool_size = gate_module._pool_size

    def install(self) -> None:
        probe = self

        def gather(*args: Any, **kwargs: Any) -> Any:
            out = probe._gather(*args, **kwargs)
            probe.gathers.append(
                {
                    "pool": kwargs["pool"],
                    "dense": list(kwargs["dense"]),
                    "lexical": list(kwargs["lexical"] or ()),
                    "weight": kwargs["lexical_weight"],
                    "out": out,
                }
            )
            return out

        def select(ranked: Any, **kwargs: Any) -> Any:
            out = probe._select(ranked, **kwargs)
            probe.selects.append({**kwargs, "used": sum(s.tokens for s in out[0])})
            return out

        def candidates(*args: Any, **kwargs: Any) -> Any:
            if probe.shallow:  # options is the 6th positional argument
                args = list(args)
                args[5] = args[5].update(chunk_pool=args[5].pool)
            return probe._candidates(*args, **kwargs)

        def pool_size(options: Any, budget: Any) -> int:
            return options.pool if probe.shallow else probe._pool_size(options, budget)

        gate_module.gather = gather
        gate_module.select_gated = select
        gate_module._candidates = candidates
        gate_module._pool_size = pool_size

    def reset(self, shallow: bool) -> None:
        self.gathers, self.selects, self.shallow = [], [], shallow


def score_bound(relevance: float, weights: dict[str, float], focus: bool) -> float:
    """The most a pool memory of relevance at most ``relevance`` can score (gated profile,
    no type boost: see the module's docstring)."""
    return (
        weights["semantic"] * relevance
        + weights["recency"]
        + weights["domain"] * DOMAIN_SCALE
        + min(USAGE_CAP, weights["usage"])
        + COOCCURRENCE_CAP
        + (FOCUS_BONUS if focus else 0.0)
    )


def bound_of(gathered: dict[str, Any], shallow: int) -> float:
    """The relevance bound of a memory outside the ``shallow`` pool of ``gathered``."""
    dense, lexical = gathered["dense"], gathered["lexical"]
    cos_k = dense[shallow - 1][1] if len(dense) >= shallow else 0.0
    best = max((s for _, s in lexical), default=0.0)
    lex_k = lexical[shallow - 1][1] / best if len(lexical) >= shallow and best > 0 else 0.0
    weight = gathered["weight"] if best > 0 else 0.0
    blends = [blend(c.similarity, c.lexical, weight) for c in gathered["out"]]
    scale = max(max(blends, default=0.0), RELEVANCE_FLOOR)
    return min(1.0, blend(cos_k, lex_k, weight) / scale)


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / p99 (nearest rank) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return {}
    at = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
    return {name: ordered[min(len(ordered) - 1, int(q * len(ordered)))] for name, q in at.items()}


def _jaccard(a: Sequence[Any], b: Sequence[Any]) -> float:
    """The share of the memories of two blocks that both hold."""
    one, two = {m.id for m in a}, {m.id for m in b}
    return round(len(one & two) / len(one | two), 4) if one | two else 1.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a copy of a latency store")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/h10-data"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    pool = common.make_queries(args.warmup + 2 * args.queries, seed=args.seed + 1)
    queries = pool[args.warmup : args.warmup + args.queries]  # latency.py's timed set
    probe = Probe()
    probe.install()
    engine = Engine(
        settings=Settings(url=f"sqlite:///{args.store}", data_dir=args.data_dir),
        embedder=MiniLMEmbedder(),
    )
    rows: list[dict[str, Any]] = []
    first = GateOptions.from_settings(engine.settings).update(pool_first=True)
    with engine:
        engine.context(pool[0], USER, now=common.NOW)
        wait = getattr(engine.store, "wait_for_index", None)
        if wait is not None:
            wait(USER)
        for query in queries:
            passes: dict[str, Any] = {}
            order = ["deep", "shallow", "pool_first"]
            shift = len(rows) % len(order)  # each pass first as often: the caches it warms
            for name in order[shift:] + order[:shift]:
                probe.reset(shallow=name == "shallow")
                cpu = time.thread_time()
                served = engine.context(
                    query, USER, now=common.NOW, options=first if name == "pool_first" else None
                )
                used_ms = (time.thread_time() - cpu) * 1000.0
                passes[name] = (served, used_ms, probe.gathers, probe.selects)
            deep, deep_cpu, gathers, selects = passes["deep"]
            shallow, shallow_cpu, _, shallow_selects = passes["shallow"]
            tried, tried_cpu, tried_gathers, _ = passes["pool_first"]
            shallow_select = shallow_selects[-1] if shallow_selects else None
            if not gathers or not selects:
                rows.append({"query": query, "gathered": False})
                continue
            final, chosen = gathers[-1], selects[-1]
            options_pool = 50
            within = {m.id for m, _ in final["dense"][:options_pool]}
            within |= {m.id for m, _ in final["lexical"][:options_pool]}
            within |= (
                {c.id for c in final["out"]}
                - {m.id for m, _ in final["dense"]}
                - {m.id for m, _ in final["lexical"]}
            )  # the learnings and pins: any depth
            beyond = [m for m in deep.memories if m.id not in within]
            relevance = bound_of(final, options_pool)
            intent = chosen["intent"]
            shift = chosen["threshold_shift"]
            lowest = max(0.0, THRESHOLDS[intent][0] + shift)
            assert deep.gated is not None
            weights = dict(deep.gated.weights)
            bound = score_bound(relevance, weights, focus=False)
            thresholds = chosen["apply_threshold"]
            full = (
                shallow_select is not None
                and chosen["token_budget"] - shallow_select["used"] < MIN_LINE_TOKENS
            )
            rows.append(
                {
                    "query": query,
                    "gathered": True,
                    "depth": final["pool"],
                    "deep": final["pool"] > options_pool,
                    "budget": chosen["token_budget"],
                    "thresholds": thresholds,
                    "intent": intent.value,
                    "lowest_threshold": lowest,
                    "relevance_bound": round(relevance, 4),
                    "score_bound": round(bound, 4),
                    "bound_deepens": (bound >= lowest) if thresholds else not full,
                    "used": chosen["used"],
                    "used_shallow": shallow_select["used"] if shallow_select else None,
                    "selected": len(deep.memories),
                    "selected_beyond": len(beyond),
                    "tokens_beyond": sum(len(m.content) // 4 for m in beyond),
                    "same_block": deep.text == shallow.text,
                    "thread_cpu_ms": round(deep_cpu, 2),
                    "thread_cpu_shallow_ms": round(shallow_cpu, 2),
                    "pool_first_deepened": len(tried_gathers) > 1
                    and tried_gathers[-1]["pool"] > 50,
                    "pool_first_same_block": tried.text == deep.text,
                    "thread_cpu_pool_first_ms": round(tried_cpu, 2),
                    "jaccard_pool_first": _jaccard(deep.memories, tried.memories),
                }
            )
    gathered = [r for r in rows if r["gathered"]]
    deep_rows = [r for r in gathered if r["deep"]]
    summary = {
        "queries": len(rows),
        "gathered": len(gathered),
        "deep": len(deep_rows),
        "deep_by_depth": dict(Counter(r["depth"] for r in deep_rows)),
        "deep_with_thresholds": sum(r["thresholds"] for r in deep_rows),
        "bound_deepens_of_deep": sum(r["bound_deepens"] for r in deep_rows),
        "bound_deepens_with_thresholds": sum(
            r["bound_deepens"] for r in deep_rows if r["thresholds"]
        ),
        "same_block_of_deep": sum(r["same_block"] for r in deep_rows),
        "same_block_all": sum(r["same_block"] for r in gathered),
        "deep_selecting_beyond": sum(r["selected_beyond"] > 0 for r in deep_rows),
        "selected_beyond_per_deep": [r["selected_beyond"] for r in deep_rows],
        "selected_per_deep": [r["selected"] for r in deep_rows],
        "used_deep_vs_shallow": [(r["used"], r["used_shallow"], r["budget"]) for r in deep_rows],
        "relevance_bound_median_deep": sorted(r["relevance_bound"] for r in deep_rows)[
            len(deep_rows) // 2
        ]
        if deep_rows
        else None,
        "thread_cpu_ms_deep_calls": _quantiles([r["thread_cpu_ms"] for r in deep_rows]),
        "thread_cpu_ms_same_calls_shallow": _quantiles(
            [r["thread_cpu_shallow_ms"] for r in deep_rows]
        ),
        "thread_cpu_ms_all": _quantiles([r["thread_cpu_ms"] for r in gathered]),
        "thread_cpu_ms_all_shallow": _quantiles([r["thread_cpu_shallow_ms"] for r in gathered]),
        "thread_cpu_ms_all_pool_first": _quantiles(
            [r["thread_cpu_pool_first_ms"] for r in gathered]
        ),
        "thread_cpu_ms_deep_calls_pool_first": _quantiles(
            [r["thread_cpu_pool_first_ms"] for r in deep_rows]
        ),
        "pool_first_deepened_of_deep": sum(r["pool_first_deepened"] for r in deep_rows),
        "pool_first_same_block_of_deep": sum(r["pool_first_same_block"] for r in deep_rows),
        "pool_first_same_block_all": sum(r["pool_first_same_block"] for r in gathered),
        "pool_first_jaccard_deep_median": _quantiles(
            [r["jaccard_pool_first"] for r in deep_rows]
        ).get("p50"),
        "load_1m": os.getloadavg()[0],
        "time": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
