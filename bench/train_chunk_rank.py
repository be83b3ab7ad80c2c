"""Capture LoCoMo conversation pools, and fit / evaluate the chunk re-ranking on them.

``capture``: every development conversation is ingested once (SQLite files kept in
``--work``), each question asked at 5,000 tokens, and the pool the scorer sees (after
speakers and time, before the re-ranking) saved with the query and the evidence.
``tune``: the shipped rule, ``relevance + w × session`` (a chunk lifted by the best other
chunk of its session), ``w`` chosen on one half by R@10 of the final ranking (the gated
totals), every ``w`` reported on both halves; ``--write`` stores it in
``src/engrain/recall/chunk_rank.json``. ``fit``: every feature's weight fitted on one half
(a listwise softmax loss, or logistic regression on "this chunk holds an evidence turn"),
both halves reported before and after: the learned alternative (not shipped: it did worse
out of sample than the rule), and ``--drop`` ablations.

Usage::

    python bench/train_chunk_rank.py capture --work /tmp/h5-cap
    python bench/train_chunk_rank.py tune --work /tmp/h5-cap --train A [--write]
    python bench/train_chunk_rank.py fit --work /tmp/h5-cap --train A [--drop F,...]
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baselines as bl
import locomo

from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder
from engrain.recall import chunk_rank, rank
from engrain.recall.relevance import Candidate
from engrain.recall.score import Query
from engrain.recall.score_batch import gated_totals
from engrain.store.sqlite import SQLiteStore

KS = (5, 10, 20)


@dataclass
class Asked:
    """One question's captured pool."""

    conversation: str
    category: int
    question: str
    evidence: tuple[str, ...]
    pool: list[Candidate]
    query: Query


def capture(work: Path, data: Path, limit: int | None) -> None:
    """Ingest (once) and capture every question's pool, one pickle per half."""
    conversations = bl.load_locomo(data)
    split = locomo.halves([c.conversation_id for c in conversations])
    embedder = MiniLMEmbedder()
    seen: list[tuple[list[Candidate], Query]] = []
    original = rank._score

    def spy(pool: Any, options: Any, query: Query, *args: Any, **kwargs: Any) -> Any:
        seen.append((list(pool), query))
        return original(pool, options, query, *args, **kwargs)

    rank._score = spy  # type: ignore[assignment]
    for half, ids in split.items():
        asked: list[Asked] = []
        for conv in conversations:
            if conv.conversation_id not in ids:
                continue
            path = work / f"{conv.conversation_id}.db"
            fresh = not path.exists()
            engine = Engine(settings=Settings(data_dir=work), store=SQLiteStore(path),
                            embedder=embedder)  # fmt: skip
            if fresh:
                locomo.ingest(engine, conv)
            now = locomo.parse_session_time(conv.sessions[-1].date_time)
            options = engine.options.update(chunk_rank=False)
            for q in conv.questions[:limit]:
                seen.clear()
                engine.explain(q.question, conv.conversation_id, token_budget=5000,
                               options=options, now=now)  # fmt: skip
                pool, query = seen[-1]
                pool = [replace(c, memory=replace(c.memory, embedding=None)) for c in pool]
                asked.append(Asked(conv.conversation_id, q.category, q.question,
                                   tuple(q.evidence), pool, query))  # fmt: skip
            engine.close()
            print(f"{half} {conv.conversation_id}: {len(asked)} questions", flush=True)
        with (work / f"pools-{half}.pkl").open("wb") as fh:
            pickle.dump(asked, fh)


def load(work: Path, half: str) -> list[Asked]:
    """The captured questions of ``half``."""
    with (work / f"pools-{half}.pkl").open("rb") as fh:
        return pickle.load(fh)  # type: ignore[no-any-return]


def ranking(a: Asked, weights: chunk_rank.Weights | None) -> list[Candidate]:
    """The final order of ``a``'s pool: re-ranked by ``weights`` (None: as captured)."""
    pool = a.pool if weights is None else chunk_rank.with_chunk_rank(a.pool, a.question, weights)
    totals = gated_totals([(c.memory, c.relevance, 0.0) for c in pool], a.query)
    order = sorted(range(len(pool)), key=lambda i: totals[i], reverse=True)
    return [pool[i] for i in order]


def recall_at(asked: list[Asked], weights: chunk_rank.Weights | None) -> dict[str, Any]:
    """Mean R@k over ``asked``, overall and per category."""
    rows: list[tuple[int, dict[int, float]]] = []
    for a in asked:
        ranked = ranking(a, weights)
        row = {}
        for k in KS:
            held = {t for c in ranked[:k] for t in c.memory.provenance.turn_ids}
            row[k] = sum(e in held for e in a.evidence) / len(a.evidence)
        rows.append((a.category, row))
    out: dict[str, Any] = {f"R@{k}": float(np.mean([r[k] for _, r in rows])) for k in KS}
    for cat in sorted({c for c, _ in rows}):
        out[f"cat{cat} R@10"] = float(np.mean([r[10] for c, r in rows if c == cat]))
    return out


def groups(asked: list[Asked]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per question with an evidence chunk in its pool: its chunks' features and labels."""
    out = []
    for a in asked:
        chunks = [c for c in a.pool if c.memory.provenance.turn_ids]
        evidence = set(a.evidence)
        labels = np.array([float(bool(evidence & set(c.memory.provenance.turn_ids)))
                           for c in chunks])  # fmt: skip
        if len(chunks) > 1 and labels.any():
            out.append((chunk_rank.features(chunks, a.question), labels))
    return out


def fit_listwise(
    data: list[tuple[np.ndarray, np.ndarray]], l2: float = 0.01, steps: int = 1500
) -> np.ndarray:
    """Weights maximising each question's softmax probability of its evidence chunks
    (a listwise ranking loss; Adam, L2 ``l2``)."""
    w = np.zeros(data[0][0].shape[1])
    m, v = np.zeros_like(w), np.zeros_like(w)
    rate, b1, b2 = 0.05, 0.9, 0.999
    for step in range(1, steps + 1):
        grad = l2 * w
        for x, y in data:
            z = x @ w
            p = np.exp(z - z.max())
            p /= p.sum()
            q = y / y.sum()
            grad += x.T @ (p - q) / len(data)
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad**2
        w -= rate * (m / (1 - b1**step)) / (np.sqrt(v / (1 - b2**step)) + 1e-8)
    return w


def design(asked: list[Asked]) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of every conversation chunk of every captured pool."""
    xs, ys = [], []
    for a in asked:
        chunks = [c for c in a.pool if c.memory.provenance.turn_ids]
        if not chunks:
            continue
        feats = chunk_rank.features(chunks, a.question)
        evidence = set(a.evidence)
        xs.append(feats)
        ys.append([float(bool(evidence & set(c.memory.provenance.turn_ids))) for c in chunks])
    return np.vstack(xs), np.concatenate(ys)


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 300) -> np.ndarray:
    """Weights (last: intercept) of an L2-regularised logistic regression, Newton steps."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    reg = l2 * np.eye(xb.shape[1])
    reg[-1, -1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(xb @ w)))
        grad = xb.T @ (p - y) + reg @ w
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + reg
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def fit(
    work: Path, train: str, write: bool, drop: list[str], method: str = "listwise"
) -> dict[str, Any]:
    """Fit on ``train``, report both halves before / after; (``write``) store the weights."""
    halves = {h: load(work, h) for h in ("A", "B")}
    names = list(chunk_rank.FEATURES)
    keep = [i for i, n in enumerate(names) if n not in drop]
    coef = np.zeros(len(names))
    if method == "logistic":
        x, y = design(halves[train])
        w = fit_logistic(x[:, keep], y)
        coef[keep], intercept = w[:-1], float(w[-1])
    else:
        data = [(x[:, keep], y) for x, y in groups(halves[train])]
        coef[keep], intercept = fit_listwise(data), 0.0
    weights = chunk_rank.Weights(dict(zip(names, coef.tolist(), strict=True)), intercept)
    report: dict[str, Any] = {
        "train": train,
        "method": method,
        "dropped": drop,
        "weights": weights.to_dict(),
    }
    for h, asked in halves.items():
        report[h] = {"before": recall_at(asked, None), "after": recall_at(asked, weights)}
    if write:
        payload = {**weights.to_dict(), "trained_on": f"LoCoMo development half {train}",
                   "written": time.strftime("%Y-%m-%d")}  # fmt: skip
        chunk_rank.WEIGHTS_FILE.write_text(json.dumps(payload, indent=2) + "\n")
    return report


#: The session weights ``tune`` tries (the rule ``relevance + w × session``).
SESSION_GRID = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


def tune(work: Path, train: str, write: bool) -> dict[str, Any]:
    """The rule ``relevance + w × session``: ``w`` chosen on ``train`` by R@10 among
    :data:`SESSION_GRID`, every ``w``'s R@k on both halves; (``write``) the best stored."""
    halves = {h: load(work, h) for h in ("A", "B")}
    rows = {}
    for w in SESSION_GRID:
        weights = chunk_rank.Weights({"relevance": 1.0, "session": w})
        rows[str(w)] = {h: recall_at(asked, weights) for h, asked in halves.items()}
        print(w, {h: round(r["R@10"], 3) for h, r in rows[str(w)].items()}, flush=True)
    best = max(SESSION_GRID, key=lambda w: rows[str(w)][train]["R@10"])
    if write:
        payload = {"coefficients": {"relevance": 1.0, "session": best}, "intercept": 0.0,
                   "rule": "relevance + w x session, w tuned by R@10 among "
                           f"{list(SESSION_GRID)}",
                   "trained_on": f"LoCoMo development half {train}",
                   "written": time.strftime("%Y-%m-%d")}  # fmt: skip
        chunk_rank.WEIGHTS_FILE.write_text(json.dumps(payload, indent=2) + "\n")
    return {"train": train, "best": best, "grid": rows}


def main(argv: list[str] | None = None) -> int:
    """Run ``capture`` or ``fit``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("command", choices=["capture", "fit", "tune"])
    parser.add_argument("--work", type=Path, default=Path("/tmp/engrain-chunk-rank"))
    parser.add_argument("--data", type=Path, default=bl.DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--train", default="A", choices=["A", "B"])
    parser.add_argument("--drop", default="", help="comma-separated features left out")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--method", default="listwise", choices=["listwise", "logistic"])
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.command == "capture":
        capture(args.work, args.data, args.limit)
        return 0
    if args.command == "tune":
        print(json.dumps(tune(args.work, args.train, args.write), indent=2))
        return 0
    drop = [d for d in args.drop.split(",") if d]
    print(json.dumps(fit(args.work, args.train, args.write, drop, args.method), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
