"""Train the acknowledgement model (``src/engrain/recall/ack_model.npz``) and judge it by
leaving each writer's messages out (issue 12). Deterministic: the same data gives the same
weights.

Data: the labelled messages of ``bench/gating/`` that are not a gating evaluation's held half
— ``classify-train*.jsonl`` whole, the ``tune`` halves of ``messages*.jsonl`` and of
``trivial*.jsonl``. A message is an acknowledgement when it is labelled trivial (every row of
a ``trivial*`` file, and greetings labelled trivial). Groups are writers: ``main``
(``messages.jsonl`` and ``trivial.jsonl``), ``pulse``, ``sensor``, ``quill`` and each
``classify-train`` file.

For each group left out, the model fitted on the others is asked about the group's short
messages (under 50 characters, no question mark, no number): how many acknowledgements it
finds on its own (without the rules, which already know these writers' words), and how many
real messages it would turn into nothing where it is asked (:func:`eligible`: the rules read
them as a discussion or a greeting) — at several thresholds. The shipped threshold
(``acknowledgement.THRESHOLD``, 0.8) is above the lowest at which no group loses a real
message, because few real messages are asked at all: a missed acknowledgement costs a few
hundred tokens, a real message read as one costs its answer every memory.

    .venv/bin/python bench/train_ack.py [--out bench/results/ack-model.json] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from train_classifier import fit_softmax  # noqa: E402

from engrain.embed.minilm import MiniLMEmbedder  # noqa: E402
from engrain.recall import acknowledgement as ack  # noqa: E402
from engrain.recall.classify import classify  # noqa: E402

DATA = ROOT / "bench" / "gating"
#: Writer → (labelled messages file, trivial messages file or None).
GROUPS: dict[str, tuple[str, str | None]] = {
    "main": ("messages", "trivial"),
    "pulse": ("messages-pulse", "trivial-pulse"),
    "sensor": ("messages-sensor", "trivial-sensor"),
    "quill": ("messages-quill", "trivial-quill"),
    "classify-train": ("classify-train", None),
    "classify-train-2": ("classify-train-2", None),
    "classify-train-3": ("classify-train-3", None),
}
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def _jsonl(name: str) -> list[dict[str, Any]]:
    path = DATA / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_rows() -> list[dict[str, Any]]:
    """Every message the model may learn from, with its ``group`` and ``ack`` label."""
    rows = []
    for group, (messages, trivial) in GROUPS.items():
        for row in _jsonl(messages):
            if row.get("split", "tune") == "tune":
                rows.append({**row, "group": group, "ack": row.get("complexity") == "trivial"})
        for row in _jsonl(trivial) if trivial else []:
            if row.get("split") == "tune":
                rows.append({**row, "group": group, "ack": True})
    return rows


def short(text: str) -> bool:
    """Under 50 characters, no question mark, no number: where an acknowledgement can be."""
    stripped = text.strip()
    return 0 < len(stripped) < 50 and "?" not in stripped and not any(c.isdigit() for c in stripped)


def main(argv: Sequence[str] | None = None) -> int:
    """Leave each group out, print and write the report, and (unless ``--no-write``) train
    the shipped model on every row."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ack-model.json"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)

    rows = load_rows()
    embedder = MiniLMEmbedder()
    vectors = np.asarray(embedder.embed([r["text"] for r in rows]), dtype=np.float64)
    x = np.stack([ack.features(r["text"], v) for r, v in zip(rows, vectors, strict=True)])
    y = np.array([int(r["ack"]) for r in rows])
    groups = np.array([r["group"] for r in rows])
    shorts = np.array([short(r["text"]) for r in rows])
    asked = np.array([ack.eligible(classify(r["text"], turn=r.get("turn", 0)), r["text"])
                      for r in rows])  # fmt: skip

    report: dict[str, Any] = {"rows": len(rows), "acknowledgements": int(y.sum()), "groups": {}}
    lost: dict[float, int] = dict.fromkeys(THRESHOLDS, 0)
    for group in GROUPS:
        test = groups == group
        model = fit_softmax(x[~test], y[~test], 2)
        logits = ((x[test] - model.mean) / model.scale) @ model.weights + model.bias
        p = 1.0 / (1.0 + np.exp(logits[:, 0] - logits[:, 1]))
        yt, st, at = y[test], shorts[test], asked[test]
        entry: dict[str, Any] = {
            "short acknowledgements": int((st & (yt == 1)).sum()),
            "short real messages": int((st & (yt == 0)).sum()),
            "real messages asked": int((at & (yt == 0)).sum()),
        }
        for t in THRESHOLDS:
            wrong = [str(r) for r in np.asarray([r["text"] for r in rows], dtype=object)[test][
                at & (yt == 0) & (p >= t)]]  # fmt: skip
            entry[f"at {t}"] = {
                "found alone": int((st & (yt == 1) & (p >= t)).sum()),
                "real messages made trivial": len(wrong),
                "which": wrong,
            }
            lost[t] += len(wrong)
        report["groups"][group] = entry
    report["real messages made trivial, all groups"] = {str(t): n for t, n in lost.items()}
    report["shipped threshold"] = ack.THRESHOLD

    final = fit_softmax(x, y, 2)
    weights = final.weights[:, 1] - final.weights[:, 0]
    bias = float(final.bias[1] - final.bias[0])
    if not args.no_write:
        np.savez_compressed(
            ack.MODEL_FILE, embedder=np.array(embedder.model_id),
            mean=final.mean.astype(np.float32), scale=final.scale.astype(np.float32),
            weights=weights.astype(np.float32), bias=np.array(bias, dtype=np.float32),
        )  # fmt: skip
        ack.load.cache_clear()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    _print(report)
    return 0


def _print(report: dict[str, Any]) -> None:
    print(f"rows {report['rows']}, acknowledgements {report['acknowledgements']}")
    for group, entry in report["groups"].items():
        cells = "  ".join(
            f"{t}: {entry[f'at {t}']['found alone']}/{entry['short acknowledgements']}"
            f" -{entry[f'at {t}']['real messages made trivial']}"
            for t in THRESHOLDS
        )
        print(f"{group:<17} asked {entry['real messages asked']:>3} real  {cells}")
        for t in THRESHOLDS:
            for text in entry[f"at {t}"]["which"] if t == ack.THRESHOLD else []:
                print(f"    made trivial at {t}: {text!r}")
    print(f"real messages made trivial: {report['real messages made trivial, all groups']}")


if __name__ == "__main__":
    raise SystemExit(main())
