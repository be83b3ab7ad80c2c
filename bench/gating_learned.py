"""A learned gate against the hand-built one, leaving one project out (issue 12, session 29).

The gate judges a candidate by adding its terms (relevance, recency, use, a kind's boost)
into a score and comparing it with its intent's threshold, with relevance rules beside it
(an unrelated learning, a context note or a correction under its bar, a preference's
floor). Here a small model of P(must-include) weighs the same terms, and the memory's place
in its message's pool, jointly, and decides instead of those tests:

1. **record**: every tune message of every set through ``explain()`` (which writes
   nothing), keeping what selection was given (``selection.select_gated``'s candidates,
   budget, intent, layout, partners) and each candidate's score components;
2. **features** (:data:`FEATURES`): named terms a reader can explain, no embedding
   dimension;
3. **fit**, leaving one project out: a logistic regression (numpy, L2, standardised
   features: :func:`fit_logistic`) or an ensemble of boosted stumps (:func:`fit_stumps`) on
   nine sets' tune rows, must-include rows positive, every other row (must-exclude and
   unlabelled) negative;
4. **select** with it by the same greedy fill (:func:`replay`): ``select_gated`` itself,
   with the kind's test (score against its intent's threshold, the relevance rules, the
   preference's floor, a pin's own test) replaced by ``p ≥ τ``; the fill order, the block's
   relevance rule, the shares, the budget and the layout are the gate's;
5. **threshold**: ``τ`` chosen on the nine sets as ``gating_lopo.choose`` chooses a knob's
   value (most labels pooled, every set within the limits), then scored on the tenth; and,
   at equal or fewer tokens, the lowest ``τ`` whose tokens on the tenth stay at or under the
   gate's (no label of the tenth read).

The replay of the gate's own test (:func:`replay` with no model) must give ``explain()``'s
selection and tokens for every message (``identical`` in the report).

Usage: ``python bench/gating_learned.py [--sets …] [--record rec.pkl] [--out …]``;
``--record`` keeps what was recorded (a pickle, rebuilt when absent) so the fits can be
run again without answering anything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import pickle
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from common import NOW, machine_info, write_json
from gating import SETS, USER
from gating_lopo import MAX_TOKENS, set_engines, within_limits
from gating_signals import auc

from engrain.embed import make_embedder
from engrain.model import Kind
from engrain.recall import select as select_module
from engrain.recall import selection as selection_module
from engrain.recall.assemble import Format, block_tokens, item_line
from engrain.recall.classify import Complexity, Intent
from engrain.recall.score import INTENT_TYPE_MULTIPLIER
from engrain.recall.select import Ranked, built_each, threshold_for
from engrain.recall.tags import message_terms, names_a_tag
from engrain.tokens import count_tokens

# -- record ----------------------------------------------------------------------------------


@dataclass
class Recorded:
    """One tune message as selection saw it: its candidates (memories built), each one's
    line's tokens and score components, the arguments of ``select_gated`` that are not
    functions, and what ``explain()`` selected."""

    set: str
    id: str
    text: str
    must_include: tuple[str, ...]
    must_exclude: tuple[str, ...]
    intent: Intent
    complexity: Complexity
    ranked: list[Ranked]
    tokens: dict[str, int]
    lines: dict[str, tuple[str, int]]
    components: dict[str, dict[str, float]]
    budget: int
    shift: float
    apply_threshold: bool
    partners: dict[str, list[Ranked]]
    trim: Any
    by_lift: bool
    top_k: int | None
    selected: tuple[str, ...]
    tokens_used: int


def record(names: Sequence[str], embedder_name: str = "minilm") -> list[Recorded]:
    """Every tune message of ``names`` through ``explain()``, with what its selection was
    given (:class:`Recorded`)."""
    out: list[Recorded] = []
    seen: list[tuple[Sequence[Ranked], dict[str, Any]]] = []
    original = selection_module.select_gated

    def keep(ranked: Sequence[Ranked], **kwargs: Any) -> Any:
        seen.append((ranked, kwargs))
        return original(ranked, **kwargs)

    selection_module.select_gated = keep  # type: ignore[assignment]
    try:
        for name, data, engines in set_engines(names, "tune", make_embedder(embedder_name)):
            for m in data.messages:
                seen.clear()
                gated = engines[m["project"]].explain(
                    m["text"], USER, project=m["project"], turn=m.get("turn", 0), now=NOW
                )
                # a trivial message makes no selection: no candidates, no tokens
                ranked, kw = seen[-1] if seen else ([], _NOTHING)
                line = kw["line_tokens"]

                def built(r: Ranked) -> Ranked:
                    return r._replace(memory=r.memory.built())

                partners = {k: [built(p) for p in v] for k, v in (kw["partners"] or {}).items()}
                kept = [built(r) for r in ranked]
                every = [*kept, *(p for v in partners.values() for p in v)]
                out.append(Recorded(
                    name, m["id"], m["text"], tuple(m["must_include"]),
                    tuple(m["must_exclude"]), gated.classification.intent,
                    gated.classification.complexity, kept,
                    {r.memory.id: line(r.memory) for r in every},
                    {r.memory.id: _line_cost(r.memory) for r in every},
                    {k: dict(v) for k, v in gated.components.items()}, kw["token_budget"],
                    kw["threshold_shift"], kw["apply_threshold"], partners, kw["trim"],
                    kw["by_lift"], kw["top_k"], tuple(s.memory.id for s in gated.selected),
                    gated.tokens_used,
                ))  # fmt: skip
            print(f"{name}: {sum(1 for r in out if r.set == name)} messages recorded", flush=True)
    finally:
        selection_module.select_gated = original
    return out


def _line_cost(memory: Any) -> tuple[str, int]:
    """A memory's line in the evaluation's block (tagged, compact, grouped) and its count,
    as ``block_tokens`` counts it."""
    text = item_line(memory, Format.TAGGED, NOW.year, True, True)
    return text, count_tokens(text)


#: ``select_gated``'s arguments for a message that makes no selection (a trivial one).
_NOTHING: dict[str, Any] = {"line_tokens": None, "partners": {}, "token_budget": 0,
                            "threshold_shift": 0.0, "apply_threshold": False, "trim": None,
                            "by_lift": False, "top_k": None}  # fmt: skip


# -- features --------------------------------------------------------------------------------

KINDS = (Kind.INVARIANT, Kind.PATTERN, Kind.DECISION, Kind.ANTIPATTERN, Kind.GOLDEN_PATH,
         Kind.PREFERENCE, Kind.FACT, Kind.CONTEXT, Kind.CORRECTION)  # fmt: skip
INTENTS = tuple(Intent)
COMPLEXITIES = (Complexity.SIMPLE, Complexity.MODERATE, Complexity.COMPLEX, Complexity.DEEP)

#: The features, each a term a reader can name: the gate's own terms, the memory, the
#: message's classification, and the memory's place in its message's pool.
FEATURES: tuple[str, ...] = (
    "relevance",  # calibrated relevance (what selection reads)
    "cosine",  # the model's cosine
    "lexical",  # BM25, normalised
    "recency",  # the decay term
    "usage",  # the use term
    "type_boost",  # the kind's boost for the intent
    "domain",  # the shared-domain term
    "score",  # the gate's score
    "margin",  # the score less its kind's threshold under the intent
    "pinned",
    "tag_named",  # the message names one of the memory's own tags
    "kind_lifted",  # the intent lifts the memory's kind
    "unrelated",  # relevance under the unrelated level (0.2)
    "log_rank",  # log of the memory's rank by relevance in the pool
    "gap_to_best",  # the pool's best relevance less the memory's
    "clear_matches",  # log(1 + candidates at relevance >= 0.5)
    "log_line_tokens",  # the line's cost
    *(f"kind:{k.value}" for k in KINDS),
    *(f"intent:{i.value}" for i in INTENTS),
    *(f"complexity:{c.value}" for c in COMPLEXITIES),
)


def features(rec: Recorded) -> tuple[list[str], np.ndarray]:
    """The ids of ``rec``'s candidates and their :data:`FEATURES` rows."""
    terms = message_terms(rec.text)
    relevances = [r.relevance for r in rec.ranked]
    best = max(relevances, default=0.0)
    order = sorted(range(len(relevances)), key=lambda i: -relevances[i])
    rank = {i: k + 1 for k, i in enumerate(order)}
    clear = math.log1p(sum(v >= 0.5 for v in relevances))
    ids, rows = [], []
    for i, r in enumerate(rec.ranked):
        memory, c = r.memory, rec.components.get(r.memory.id, {})
        limit = threshold_for(memory.kind, rec.intent, rec.shift)
        lifted = INTENT_TYPE_MULTIPLIER.get((rec.intent, memory.kind), 1.0) > 1.0
        row = [
            r.relevance, c.get("cosine", 0.0), c.get("lexical", 0.0), c.get("decay", 0.0),
            c.get("usage", 0.0), c.get("type_boost", 0.0), c.get("domain", 0.0), r.score,
            r.score - limit, float(memory.pinned),
            float(names_a_tag(tuple(memory.domains), terms)), float(lifted),
            float(r.relevance < select_module.UNRELATED_RELEVANCE), math.log(rank[i]),
            best - r.relevance, clear, math.log1p(rec.tokens[memory.id]),
            *(float(memory.kind is k) for k in KINDS),
            *(float(rec.intent is n) for n in INTENTS),
            *(float(rec.complexity is x) for x in COMPLEXITIES),
        ]  # fmt: skip
        ids.append(memory.id)
        rows.append(row)
    return ids, np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))


# -- models ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Logistic:
    """A logistic regression on standardised features."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        z = np.clip(((x - self.mean) / self.scale) @ self.weights + self.bias, -50, 50)
        return 1.0 / (1.0 + np.exp(-z))


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 50) -> Logistic:
    """Newton's method on the L2-penalised log loss (``l2`` on the standardised weights,
    not the bias)."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    w[-1] = math.log(max(y.mean(), 1e-6) / max(1 - y.mean(), 1e-6))
    penalty = np.full(z.shape[1], l2)
    penalty[-1] = 0.0

    def loss(w: np.ndarray) -> float:
        margin = z @ w
        return float(np.logaddexp(0.0, margin).sum() - y @ margin + 0.5 * (penalty * w) @ w)

    current = loss(w)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) + penalty * w
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        size = 1.0  # damped: halved until the loss falls
        while size > 1e-6 and loss(w - size * step) > current:
            size /= 2
        w = w - size * step
        previous, current = current, loss(w)
        if previous - current < 1e-10 * max(1.0, abs(current)):
            break
    return Logistic(mean, scale, w[:-1], float(w[-1]))


@dataclass(frozen=True)
class Stumps:
    """Boosted stumps (log loss): each a feature, a split and the two leaves' values."""

    base: float
    stumps: tuple[tuple[int, float, float, float], ...]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        f = np.full(len(x), self.base)
        for j, split, left, right in self.stumps:
            f += np.where(x[:, j] <= split, left, right)
        f = np.clip(f, -50, 50)
        return 1.0 / (1.0 + np.exp(-f))


def fit_stumps(x: np.ndarray, y: np.ndarray, rounds: int = 150, rate: float = 0.1,
               bins: int = 32, min_leaf: int = 20) -> Stumps:  # fmt: skip
    """Gradient boosting of depth-one trees on the log loss (Newton leaves, splits at
    ``bins`` quantiles of each feature, each round's best split over every feature)."""
    base = math.log(max(y.mean(), 1e-6) / max(1 - y.mean(), 1e-6))
    f = np.full(len(x), base)
    cuts = [np.unique(np.quantile(x[:, j], np.linspace(0, 1, bins + 1)[1:-1]))
            for j in range(x.shape[1])]  # fmt: skip
    # each row's bin per feature: bin b holds the values in (cut[b-1], cut[b]]
    where = [np.searchsorted(c, x[:, j], side="left") for j, c in enumerate(cuts)]
    counts = [np.bincount(w, minlength=len(c) + 1) for w, c in zip(where, cuts, strict=True)]
    out: list[tuple[int, float, float, float]] = []
    for _ in range(rounds):
        p = 1.0 / (1.0 + np.exp(-f))
        g, h = p - y, np.maximum(p * (1 - p), 1e-12)
        g_all, h_all = float(g.sum()), float(h.sum())
        best: tuple[float, int, float, float, float] | None = None
        for j, c in enumerate(cuts):
            if not len(c):
                continue
            gl = np.cumsum(np.bincount(where[j], weights=g, minlength=len(c) + 1))[:-1]
            hl = np.cumsum(np.bincount(where[j], weights=h, minlength=len(c) + 1))[:-1]
            nl = np.cumsum(counts[j])[:-1]
            ok = (nl >= min_leaf) & (len(x) - nl >= min_leaf)
            if not ok.any():
                continue
            gr, hr = g_all - gl, h_all - hl
            gain = np.where(ok, gl * gl / (hl + 1.0) + gr * gr / (hr + 1.0), -np.inf)
            b = int(np.argmax(gain))
            if best is None or gain[b] > best[0]:
                best = (float(gain[b]), j, float(c[b]), float(-gl[b] / (hl[b] + 1.0)),
                        float(-gr[b] / (hr[b] + 1.0)))  # fmt: skip
        if best is None:
            break
        _, j, s, vl, vr = best
        out.append((j, s, rate * vl, rate * vr))
        f += np.where(x[:, j] <= s, rate * vl, rate * vr)
    return Stumps(base, tuple(out))


# -- replay ----------------------------------------------------------------------------------

Tested = Callable[[Ranked], bool]


@contextlib.contextmanager
def learned_test(passes: Tested, either: bool = False) -> Iterator[None]:
    """``select_gated`` with the kind's test replaced by ``passes``: a candidate walked
    with thresholds on is rejected unless ``passes`` it, and then meets no score threshold,
    relevance rule or preference floor; a pin leads (``trim.pin_threshold``) only if it
    ``passes``. With ``either`` a candidate the gate's own test passes is judged as before
    and ``passes`` only adds to it (the model recovering what the gate leaves out).
    Everything else (the fill order, the block's relevance rule, the shares, the unrelated
    invariants' place, the budget, the layout) is the gate's."""
    names = ("_consider", "_passes", "unrelated_learning", "present_below", "correction_below")
    originals = {n: getattr(select_module, n) for n in names}
    consider, gate_passes = originals["_consider"], originals["_passes"]
    bypass = [False]  # while a candidate the model passed is considered: no relevance rule

    def ruled(name: str) -> Callable[..., bool]:
        rule = originals[name]
        return lambda *args: False if bypass[0] else bool(rule(*args))

    def learned(rules: Any, fill: Any, r: Ranked, leading: bool) -> int | None:
        if leading or not rules.thresholds or (either and gate_passes(rules, r)):
            return consider(rules, fill, r, leading)  # type: ignore[no-any-return]
        if not passes(r):
            return None
        bypass[0] = True
        try:
            return consider(  # type: ignore[no-any-return]
                rules._replace(procedural_floor=-math.inf),
                fill,
                r._replace(score=math.inf),
                leading,
            )
        finally:
            bypass[0] = False

    select_module._consider = learned  # type: ignore[assignment]
    select_module._passes = (  # type: ignore[assignment]
        lambda rules, r: (either and gate_passes(rules, r)) or passes(r)
    )
    for name in names[2:]:
        setattr(select_module, name, ruled(name))
    try:
        yield
    finally:
        for n, v in originals.items():
            setattr(select_module, n, v)


def replay(rec: Recorded) -> tuple[list[str], int]:
    """``rec``'s selection again (``select_gated`` under whatever test is patched in): the
    ids selected and the rendered block's tokens (``block_tokens``, as ``explain()``
    counts them; selection's own count is an upper bound)."""
    if not rec.ranked:
        return [], 0
    tokens, lines = rec.tokens, rec.lines
    selected, _, _ = select_module.select_gated(
        rec.ranked, line_tokens=lambda m: tokens[m.id], token_budget=rec.budget,
        intent=rec.intent, threshold_shift=rec.shift, apply_threshold=rec.apply_threshold,
        explain=False, top_k=rec.top_k, layout=selection_module._layout(Format.TAGGED, True, True),
        partners=rec.partners, build=built_each, trim=rec.trim, by_lift=rec.by_lift,
    )  # fmt: skip
    used = block_tokens([s.memory for s in selected], Format.TAGGED, year=NOW.year,
                        compact=True, grouped=True, line=lambda m: lines[m.id])  # fmt: skip
    return [s.memory.id for s in selected], used


def measure(recs: Sequence[Recorded], picks: Sequence[tuple[list[str], int]]) -> dict[str, Any]:
    """A set's cell as ``gating_lopo.cell`` counts it: labels found, messages leaking a
    must-exclude memory, tokens."""
    found = leaking = tokens = labels = 0
    for rec, (ids, used) in zip(recs, picks, strict=True):
        chosen = set(ids)
        found += sum(i in chosen for i in rec.must_include)
        labels += len(rec.must_include)
        leaking += any(i in chosen for i in rec.must_exclude)
        tokens += used
    return {"found": found, "labels": labels, "leaking": leaking, "messages": len(recs),
            "tokens": tokens}  # fmt: skip


def replay_all(recs: Sequence[Recorded], p: Mapping[tuple[str, str, str], float] | None,
               tau: float = 0.0, either: bool = False) -> list[tuple[list[str], int]]:  # fmt: skip
    """Every message's selection, by the gate's test (``p`` None) or by ``p ≥ tau``
    (``either``: or the gate's test)."""
    if p is None:
        return [replay(rec) for rec in recs]
    out = []
    for rec in recs:
        key = (rec.set, rec.id)

        def passes(r: Ranked, key: tuple[str, str] = key) -> bool:
            return p.get((*key, r.memory.id), 0.0) >= tau

        with learned_test(passes, either):
            out.append(replay(rec))
    return out


# -- leave one project out -------------------------------------------------------------------

#: The thresholds tried on P(must-include): geometric from 0.0001 to 0.8 (the labels are
#: 2 % of the candidates, so a model's probabilities sit low).
TAUS = tuple(float(f"{t:.3g}") for t in np.geomspace(1e-4, 0.8, 50))
Cells = dict[float, dict[str, dict[str, Any]]]


def table_of(recs: Sequence[Recorded]) -> tuple[list[tuple[str, str, str]], np.ndarray, np.ndarray]:
    """Every candidate's key ``(set, message, memory)``, features and label."""
    keys, xs, ys = [], [], []
    for rec in recs:
        ids, x = features(rec)
        include = set(rec.must_include)
        keys += [(rec.set, rec.id, i) for i in ids]
        xs.append(x)
        ys += [float(i in include) for i in ids]
    return keys, np.vstack(xs), np.asarray(ys)


def choose_tau(cells: Cells, default: Mapping[str, Mapping[str, Any]], on: Sequence[str],
               max_tokens: float = MAX_TOKENS) -> float | None:  # fmt: skip
    """The ``τ`` with the most labels pooled over ``on`` among those keeping every set of
    ``on`` within the limits (``gating_lopo.within_limits`` against the gate's cell); ties
    to the higher ``τ`` (fewer lines). ``None`` if no ``τ`` is within them."""
    best: tuple[int, float] | None = None
    for tau, by_set in cells.items():
        if not all(within_limits(by_set[s], default[s], max_tokens) for s in on):
            continue
        found = sum(by_set[s]["found"] for s in on)
        if best is None or (found, tau) > best:
            best = (found, tau)
    return None if best is None else best[1]


def tau_at_tokens(cells: Cells, default: Mapping[str, Any], name: str) -> float | None:
    """The lowest ``τ`` whose tokens on set ``name`` stay at or under the gate's (no label
    read)."""
    fits = [t for t, by_set in cells.items() if by_set[name]["tokens"] <= default["tokens"]]
    return min(fits) if fits else None


def lopo(
    recs: Sequence[Recorded],
    names: Sequence[str],
    model: str,
    default: Mapping[str, Mapping[str, Any]],
    either: bool = False,
) -> dict[str, Any]:
    """Fit on nine sets, choose ``τ`` on them, score the tenth; and the fit and choice on
    every set at once (in sample). ``either``: the model adds to the gate's test."""
    keys, x, y = table_of(recs)
    sets = np.asarray([k[0] for k in keys])
    fitter = fit_logistic if model == "logistic" else fit_stumps
    label = f"{model}+either" if either else model
    per_set: dict[str, Any] = {}
    for held in [*names, None]:
        train = sets != held
        fitted = fitter(x[train], y[train])
        p = dict(zip(keys, fitted(x).tolist(), strict=True))
        cells: Cells = {}
        for tau in TAUS:
            cells[tau] = {}
            for name in names:
                mine = [r for r in recs if r.set == name]
                cells[tau][name] = measure(mine, replay_all(mine, p, tau, either))
        on = [s for s in names if s != held]
        tau = choose_tau(cells, default, on)
        if held is None:
            per_set["in_sample"] = {"tau": tau, "cells": {s: cells[tau][s] for s in names}
                                    if tau is not None else None}  # fmt: skip
            per_set["in_sample"]["weights"] = describe(fitted)
            continue
        matched = tau_at_tokens(cells, default[held], held)
        mine = sets == held
        per_set[held] = {
            "auc": {"model": _auc(fitted(x[mine]), y[mine]),
                    "gate_margin": _auc(x[mine, FEATURES.index("margin")], y[mine]),
                    "relevance": _auc(x[mine, FEATURES.index("relevance")], y[mine])},
            "tau": tau, "chosen": cells[tau][held] if tau is not None else None,
            "tau_at_tokens": matched,
            "at_tokens": cells[matched][held] if matched is not None else None,
            "curve": {str(t): cells[t][held] for t in TAUS},
        }  # fmt: skip
        print(f"{label:15} {held:10} tau {tau} {_line(per_set[held]['chosen'])} | at tokens "
              f"tau {matched} {_line(per_set[held]['at_tokens'])} | gate "
              f"{_line(default[held])}", flush=True)  # fmt: skip
    return per_set


def _auc(values: np.ndarray, labels: np.ndarray) -> float:
    """P(a must-include row's value > another row's), ties counting half."""
    return round(auc(values[labels == 1].tolist(), values[labels == 0].tolist()), 4)


def _line(c: Mapping[str, Any] | None) -> str:
    if c is None:
        return "-"
    return (f"{c['found']}/{c['labels']} leaking {c['leaking']} "
            f"tokens {c['tokens'] / max(1, c['messages']):.0f}")  # fmt: skip


def describe(fitted: Logistic | Stumps) -> dict[str, Any]:
    """The fitted model as a reader reads it: standardised weights by size, or each
    feature's stumps."""
    if isinstance(fitted, Logistic):
        order = np.argsort(-np.abs(fitted.weights))
        return {FEATURES[i]: round(float(fitted.weights[i]), 3) for i in order}
    used: dict[str, int] = {}
    for j, *_ in fitted.stumps:
        used[FEATURES[j]] = used.get(FEATURES[j], 0) + 1
    return dict(sorted(used.items(), key=lambda kv: -kv[1]))


def pooled(per_set: Mapping[str, Any], names: Sequence[str], key: str) -> dict[str, Any]:
    """The LOPO cells of ``key`` (``chosen`` or ``at_tokens``) pooled over ``names``."""
    cells = [per_set[s][key] for s in names if per_set[s][key] is not None]
    found, labels = sum(c["found"] for c in cells), sum(c["labels"] for c in cells)
    messages = sum(c["messages"] for c in cells)
    return {"sets": len(cells), "found": found, "labels": labels,
            "must_include": round(found / max(1, labels), 4),
            "leaking": sum(c["leaking"] for c in cells),
            "tokens": round(sum(c["tokens"] for c in cells) / max(1, messages), 1)}  # fmt: skip


#: The gate's own curve: every threshold of ``select.THRESHOLDS`` (both columns) moved by
#: one shift, as ``gating_frontier.py``'s "one shift" (never below 0).
SHIFTS = tuple(round(-0.2 + 0.025 * i, 3) for i in range(13))


def gate_curve(recs: Sequence[Recorded], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{shift: {set: cell}}``: the gate's selection with every threshold moved."""
    original = select_module.THRESHOLDS
    out: dict[str, dict[str, Any]] = {}
    try:
        for shift in SHIFTS:
            select_module.THRESHOLDS = {  # type: ignore[misc]
                i: (max(0.0, g + shift), max(0.0, v + shift)) for i, (g, v) in original.items()
            }
            out[str(shift)] = {
                name: measure(mine, replay_all(mine, None))
                for name in names
                if (mine := [r for r in recs if r.set == name])
            }
    finally:
        select_module.THRESHOLDS = original  # type: ignore[misc]
    return out


def frontier(report: Mapping[str, Any]) -> dict[str, Any]:
    """Each learned variant's pooled curve (every set scored by the model fitted without
    it, one ``τ`` for all), and at each of its points the gate's best shift within the same
    pooled tokens and leaking messages: labels against labels at equal or fewer tokens."""
    names = report["sets"]

    def pool(cells: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        got = [cells[s] for s in names]
        messages = sum(c["messages"] for c in got)
        return {"found": sum(c["found"] for c in got),
                "leaking": sum(c["leaking"] for c in got),
                "tokens": round(sum(c["tokens"] for c in got) / max(1, messages), 1)}  # fmt: skip

    gate = {shift: pool(cells) for shift, cells in report["gate_shifts"].items()}
    out: dict[str, Any] = {"gate": gate, "models": {}}
    for label, model in report["models"].items():
        points = []
        for tau in report["taus"]:
            mine = pool({s: model["per_set"][s]["curve"][str(tau)] for s in names})
            fits = [(g["found"], shift) for shift, g in gate.items()
                    if g["tokens"] <= mine["tokens"]
                    and g["leaking"] <= mine["leaking"]]  # fmt: skip
            best = max(fits, default=None)
            points.append({"tau": tau, **mine,
                           "gate_found": best[0] if best else None,
                           "gate_shift": best[1] if best else None})  # fmt: skip
        out["models"][label] = points
    return out


def frontier_table(analysis: Mapping[str, Any]) -> str:
    """The curves as text: the gate's shifts, then each model's points against the gate."""
    lines = ["gate: shift found leaking tokens"]
    lines += [f"  {s:>7} {g['found']:4} {g['leaking']:3} {g['tokens']:7.1f}"
              for s, g in analysis["gate"].items()]  # fmt: skip
    for label, points in analysis["models"].items():
        lines.append(f"{label}: tau found leaking tokens | gate's best within them")
        lines += [f"  {p['tau']:>9} {p['found']:4} {p['leaking']:3} {p['tokens']:7.1f} | "
                  f"{p['gate_found']} (shift {p['gate_shift']})" for p in points]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Record the tune halves, check the replay, fit and score leaving one project out."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--models", default="logistic,stumps")
    parser.add_argument("--combine", default="replace,either",
                        help="replace: the model's test instead of the gate's; either: "
                        "the gate's test or the model's")  # fmt: skip
    parser.add_argument("--record", type=Path, help="a pickle of the recording (made if absent)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--analyse", type=Path, help="a written report: add the gate's shift "
                        "curve (from --record) and the frontier, print them")  # fmt: skip
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.sets.split(",") if s.strip()]
    started = time.process_time()
    if args.record and args.record.exists():
        recs = pickle.loads(args.record.read_bytes())
    else:
        recs = record(names, args.embedder)
        if args.record:
            args.record.write_bytes(pickle.dumps(recs))
    recs = [r for r in recs if r.set in names]
    if args.analyse:
        report = json.loads(args.analyse.read_text(encoding="utf-8"))
        report["gate_shifts"] = gate_curve(recs, report["sets"])
        report["frontier"] = frontier(report)
        print(frontier_table(report["frontier"]))
        write_json(args.out or args.analyse, report)
        return 0
    default: dict[str, dict[str, Any]] = {}
    identical = 0
    for name in names:
        mine = [r for r in recs if r.set == name]
        picks = replay_all(mine, None)
        identical += sum(set(ids) == set(r.selected) and used == r.tokens_used
                         for r, (ids, used) in zip(mine, picks, strict=True))  # fmt: skip
        default[name] = measure(mine, picks)
    print(f"the gate replayed: {identical} of {len(recs)} messages as explain() selected them")
    report: dict[str, Any] = {
        "benchmark": "gating-learned", "split": "tune", "sets": names, "features": FEATURES,
        "taus": TAUS, "identical": identical, "messages": len(recs), "gate": default,
        "gate_pooled": pooled({s: {"chosen": default[s]} for s in names}, names, "chosen"),
        "models": {},
    }  # fmt: skip
    combines = [c.strip() for c in args.combine.split(",") if c.strip()]
    for model in [m.strip() for m in args.models.split(",") if m.strip()]:
        for combine in combines:
            label = f"{model}+either" if combine == "either" else model
            per_set = lopo(recs, names, model, default, either=combine == "either")
            report["models"][label] = {
                "per_set": per_set, "lopo": pooled(per_set, names, "chosen"),
                "lopo_at_tokens": pooled(per_set, names, "at_tokens"),
            }  # fmt: skip
            print(
                f"{label}: LOPO {report['models'][label]['lopo']}; at the gate's tokens "
                f"{report['models'][label]['lopo_at_tokens']}; gate {report['gate_pooled']}"
            )
            write_json(args.out, report)  # each variant as it is done
    report["cpu_seconds"] = round(time.process_time() - started, 1)
    report["machine"] = machine_info()
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
