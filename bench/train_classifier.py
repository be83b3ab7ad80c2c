"""Train the intent model (``src/engrain/recall/intent_model.npz``) and cross-validate it
against the rules (issue 12). Deterministic: the same data gives the same weights.

Data: every labelled message of ``bench/gating/`` except the gating evaluation's held halves —
``classify-train.jsonl`` (180), ``classify-train-2.jsonl`` (200), ``classify-train-3.jsonl``
(165, written and labelled blind to the classifier; it joined after its first look was
measured), the ``tune`` split of ``messages.jsonl`` and the ``tune`` split of
``messages-pulse.jsonl`` (the third project, written blind; it joined after its first look
was measured). No held half is read here.

Approaches compared, each by 5-fold cross-validation (one seeded shuffle) and by leaving
one file out (trained on the other two files, tested on the left-out one — the closest to
messages by another writer):

- ``rules``: :func:`engrain.recall.classify.classify` alone (nothing to fit; on
  ``classify-train`` and the tune half it is in-sample, the rules were tuned there);
- ``embedding``: logistic regression on the MiniLM query vector alone;
- ``stacked``: logistic regression on the vector, the rules' verdict and signals and the
  message's shape (:func:`engrain.recall.intent_model.features`), the complexity then the
  rules' for the predicted intent — what ships;
- ``learned complexity``: ``stacked``'s intent, and the complexity from a second logistic
  regression over the same features plus that intent (fitted on the training rows with
  the intents the model gives them) — compared, not shipped: it does not beat the rules'
  complexity on the file it was not fitted to.

    .venv/bin/python bench/train_classifier.py [--out bench/results/classifier.json]
        [--no-write]   # cross-validate only, leave the shipped model as it is
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from engrain.embed.minilm import MiniLMEmbedder  # noqa: E402
from engrain.recall import intent_model as im  # noqa: E402
from engrain.recall.classify import Classification, Complexity, Intent, classify  # noqa: E402

DATA = ROOT / "bench" / "gating"
FILES = ("classify-train", "classify-train-2", "classify-train-3", "messages", "messages-pulse")
#: The files whose held half is left out (the gating evaluation's messages).
HALVED = ("messages", "messages-pulse")
FOLDS = 5
SEED = 0
L2 = 10.0  # the ridge penalty (in units of one example's loss); 1-30 all cross-validate alike
STEPS = 400
RATE = 0.05

Fit = Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]]


def load_rows() -> list[dict[str, Any]]:
    """The labelled messages, the held half left out, each with its ``file``."""
    rows = []
    for name in FILES:
        for line in (DATA / f"{name}.jsonl").read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if name in HALVED and row.get("split") != "tune":
                continue
            rows.append({**row, "file": name})
    return rows


def fit_softmax(x: np.ndarray, y: np.ndarray, classes: int) -> im.Model:
    """Multinomial logistic regression with an L2 penalty, by full-batch Adam from zero:
    deterministic."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0) + 1e-6
    z = (x - mean) / scale
    n, d = z.shape
    target = np.eye(classes)[y]
    params = [np.zeros((d, classes)), np.zeros(classes)]
    first = [np.zeros_like(p) for p in params]
    second = [np.zeros_like(p) for p in params]
    for step in range(1, STEPS + 1):
        logits = z @ params[0] + params[1]
        logits -= logits.max(axis=1, keepdims=True)
        prob = np.exp(logits)
        prob /= prob.sum(axis=1, keepdims=True)
        grads = [z.T @ (prob - target) / n + L2 * params[0] / n, (prob - target).mean(axis=0)]
        for p, g, m, v in zip(params, grads, first, second, strict=True):
            m *= 0.9
            m += 0.1 * g
            v *= 0.999
            v += 0.001 * g * g
            p -= RATE * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
    return im.Model("", mean, scale, params[0], params[1])


def scores(model: im.Model, x: np.ndarray) -> np.ndarray:
    """The predicted class index of each row of ``x``."""
    logits: np.ndarray = ((x - model.mean) / model.scale) @ model.weights + model.bias
    return np.asarray(logits.argmax(axis=1))


def stacked_labels(
    rows: Sequence[dict[str, Any]], rules: Sequence[Classification], intents: np.ndarray
) -> tuple[list[str], list[str]]:
    """The intents the model predicted and the complexities the rules give them."""
    intent_out, complexity_out = [], []
    for row, rule, index in zip(rows, rules, intents, strict=True):
        read = im.with_intent(rule, row["text"], im.INTENTS[int(index)])
        intent_out.append(read.intent.value)
        complexity_out.append(read.complexity.value)
    return intent_out, complexity_out


def accuracy(rows: Sequence[dict[str, Any]], intents: Sequence[str],
             complexities: Sequence[str], mask: np.ndarray) -> dict[str, float]:  # fmt: skip
    """Intent and complexity accuracy over the rows ``mask`` selects."""
    idx = [int(i) for i in np.flatnonzero(mask)]
    return {
        "n": len(idx),
        "intent": round(float(np.mean([intents[i] == rows[i]["intent"] for i in idx])), 3),
        "complexity": round(
            float(np.mean([complexities[i] == rows[i]["complexity"] for i in idx])), 3
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Cross-validate, print and write the report, and (unless ``--no-write``) train the
    shipped model on every row."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "classifier.json"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)

    rows = load_rows()
    embedder = MiniLMEmbedder()
    vectors = np.asarray(embedder.embed([r["text"] for r in rows]), dtype=np.float64)
    rules = [classify(r["text"], turn=r.get("turn", 0)) for r in rows]
    x_stacked = np.stack([im.features(c, r["text"], v) for r, c, v in
                          zip(rows, rules, vectors, strict=True)])  # fmt: skip
    y = np.array([im.INTENTS.index(Intent(r["intent"])) for r in rows])
    y_complexity = np.array([im.COMPLEXITIES.index(Complexity(r["complexity"])) for r in rows])
    trivial = np.array([c.complexity is Complexity.TRIVIAL for c in rules])
    files = np.array([r["file"] for r in rows])
    order = np.random.default_rng(SEED).permutation(len(rows))
    fold = np.empty(len(rows), dtype=int)
    fold[order] = np.arange(len(rows)) % FOLDS

    splits: dict[str, list[np.ndarray]] = {
        f"{FOLDS}-fold": [fold == k for k in range(FOLDS)],
        **{f"without {name}": [files == name] for name in FILES},
    }
    everything = np.ones(len(rows), dtype=bool)
    report: dict[str, Any] = {"rows": {n: int((files == n).sum()) for n in FILES}}
    rule_i = [c.intent.value for c in rules]
    rule_c = [c.complexity.value for c in rules]
    for scheme, tests in splits.items():
        tested = np.zeros(len(rows), dtype=bool)
        predicted = {"embedding": np.zeros(len(rows), int), "stacked": np.zeros(len(rows), int)}
        learned = np.zeros(len(rows), int)
        for test in tests:
            tested |= test
            for name, x in (("embedding", vectors), ("stacked", x_stacked)):
                model = fit_softmax(x[~test], y[~test], len(im.INTENTS))
                predicted[name][test] = scores(model, x[test])
            learned[test] = _learned_complexity(x_stacked, y, y_complexity, test)
        entry: dict[str, Any] = {"rules": {}, "embedding": {}, "stacked": {},
                                 "learned complexity": {}}  # fmt: skip
        emb_i, emb_c = stacked_labels(rows, rules, predicted["embedding"])
        st_i, st_c = stacked_labels(rows, rules, predicted["stacked"])
        lc_c = [c if t else im.COMPLEXITIES[int(k)].value
                for c, t, k in zip(st_c, trivial, learned, strict=True)]  # fmt: skip
        for part in ("all", *FILES):
            mask = tested & (everything if part == "all" else files == part)
            if not mask.any():
                continue
            entry["rules"][part] = accuracy(rows, rule_i, rule_c, mask)
            entry["embedding"][part] = accuracy(rows, emb_i, emb_c, mask)
            entry["stacked"][part] = accuracy(rows, st_i, st_c, mask)
            entry["learned complexity"][part] = accuracy(rows, st_i, lc_c, mask)
        report[scheme] = entry
        if scheme == f"{FOLDS}-fold":
            report["errors"] = [
                f"{r['file']}: {r['intent']}/{r['complexity']} read {i}/{c}: {r['text'][:90]!r}"
                for r, i, c in zip(rows, st_i, st_c, strict=True)
                if (i, c) != (r["intent"], r["complexity"])
            ]

    model = fit_softmax(x_stacked, y, len(im.INTENTS))._replace(embedder=embedder.model_id)
    if not args.no_write:
        np.savez_compressed(
            im.MODEL_FILE, embedder=np.array(embedder.model_id),
            mean=model.mean.astype(np.float32), scale=model.scale.astype(np.float32),
            weights=model.weights.astype(np.float32), bias=model.bias.astype(np.float32),
        )  # fmt: skip
        im.load.cache_clear()
    report["per_message_ms"] = _timing(rows, vectors, embedder.model_id)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    _print(report)
    return 0


def _learned_complexity(
    x: np.ndarray, intents: np.ndarray, complexities: np.ndarray, test: np.ndarray
) -> np.ndarray:
    """The complexity index a logistic regression predicts for the ``test`` rows, fitted on
    the others over the stacked features plus the intent (one-hot) the intent model, fitted
    on the same rows, gives each row."""
    model = fit_softmax(x[~test], intents[~test], len(im.INTENTS))
    eye = np.eye(len(im.INTENTS))
    train_x = np.hstack([x[~test], eye[scores(model, x[~test])]])
    test_x = np.hstack([x[test], eye[scores(model, x[test])]])
    return scores(fit_softmax(train_x, complexities[~test], len(im.COMPLEXITIES)), test_x)


def _timing(rows: Sequence[dict[str, Any]], vectors: np.ndarray, embedder: str) -> dict[str,
            float]:  # fmt: skip
    """Median and p95 per message of the rules alone and of rules + model (the vector
    given: the gate computes it anyway), over every row, three passes, in the thread's CPU
    time (``time.thread_time``: a busy machine's waits for a core left out)."""
    out: dict[str, list[float]] = {"rules": [], "rules+model": []}
    im.load()  # loaded once per process, not per message
    for _ in range(3):
        for row, vector in zip(rows, vectors, strict=True):
            start = time.thread_time()
            rule = classify(row["text"], turn=row.get("turn", 0))
            middle = time.thread_time()
            im.refine(rule, row["text"], vector, embedder)
            end = time.thread_time()
            out["rules"].append((middle - start) * 1000)
            out["rules+model"].append((end - start) * 1000)
    return {f"{k} {q}": round(float(np.percentile(v, p)), 3)
            for k, v in out.items() for q, p in (("median", 50), ("p95", 95))}  # fmt: skip


def _print(report: dict[str, Any]) -> None:
    print(f"rows: {report['rows']}")
    for scheme in [k for k in report if k.endswith("fold") or k.startswith("without")]:
        print(f"\n{scheme}: intent / complexity (n)")
        for approach, parts in report[scheme].items():
            cells = "  ".join(f"{p} {m['intent']:.3f}/{m['complexity']:.3f} ({m['n']})"
                              for p, m in parts.items())  # fmt: skip
            print(f"  {approach:<10} {cells}")
    print(f"\nper message (ms): {report['per_message_ms']}")


if __name__ == "__main__":
    raise SystemExit(main())
