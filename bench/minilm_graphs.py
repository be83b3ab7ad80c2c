"""MiniLM graphs side by side: their vectors against a reference graph and their CPU, on
LoCoMo dev's conversation chunks (chunked as ``ingest_conversation`` chunks them), the gating
evaluation's learnings and the tiers' three near-duplicate pairs (issue 18, session 13).

    python scripts/build_minilm_graph.py --out /tmp/f.onnx --out-int8 /tmp/v.onnx --per-tensor ffn2
    python bench/minilm_graphs.py src/engrain/embed/minilm/graph.onnx \\
        src/engrain/embed/minilm/graph-int8.onnx /tmp/v.onnx --out bench/results/x.json

The first graph is the reference (the float graph), the second the baseline the others'
CPU is divided by. Every graph runs single-threaded, one text a run (as the int8 graph runs
in an ingest), the graphs alternating in blocks of 25 texts in one process, so they share
the machine's load. Per graph: the cosine of each text's vector to the reference's; over
the pairs the reference puts above 0.6, the change of their similarity (mean, and the 95th
percentile of its size: what moves a pair across a threshold); the tiers' pairs' changes;
whether the last hidden state is bit-identical to the baseline's; and the same agreement
against the baseline (``to_baseline``: how far a store's vectors would move if the graph
replaced the shipped one, session 16).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

BLOCK = 25  # texts a graph embeds before the next graph takes its turn
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
CLOSE = 0.6  # pairs whose similarity is compared (the tests' bound, tests/test_embed_int8.py)


def corpus(chunks: int) -> tuple[list[str], int, list[tuple[int, int]]]:
    """``chunks`` LoCoMo dev chunks (evenly spaced), then the gating learnings, then the tiers'
    near-duplicate pairs: the texts, how many are chunks, and the pairs' indexes."""
    import baselines as bl

    from engrain.ingest.chunk import chunk_turns
    from engrain.ingest.clean import clean_text

    every = []
    for conversation in bl.load_locomo(LOCOMO):
        for session in conversation.sessions:
            lines = [clean_text(bl.memory_text(t)) for t in session.turns]
            every += [p.text for p in chunk_turns(lines)]
    texts = every[:: max(1, len(every) // chunks)][:chunks]
    count = len(texts)
    for name in ("ledgerly", "forecasting"):
        path = ROOT / "bench" / "gating" / f"{name}.jsonl"
        texts += [json.loads(line)["content"] for line in path.read_text().splitlines()]
    rows = ROOT / "tests" / "data" / "project_memory.jsonl"
    project = {r["id"]: r["content"] for r in map(json.loads, rows.read_text().splitlines())}
    pairs = []
    for key in project:
        if key.endswith("-dup"):
            texts += [project[key.removesuffix("-dup")], project[key]]
            pairs.append((len(texts) - 2, len(texts) - 1))
    return texts, count, pairs


def agreement(
    vectors: np.ndarray, reference: np.ndarray, pairs: Sequence[tuple[int, int]]
) -> dict[str, Any]:
    """How far unit ``vectors`` are from the ``reference`` ones (same rows): cosine per text,
    the similarity change over the reference's pairs above :data:`CLOSE`, and ``pairs``'
    changes."""
    cosines = (vectors * reference).sum(axis=1)
    before, after = reference @ reference.T, vectors @ vectors.T
    close = np.triu(before, 1) > CLOSE
    shifts = (after - before)[close]
    return {
        "cosine_median": round(float(np.median(cosines)), 6),
        "cosine_p5": round(float(np.percentile(cosines, 5)), 6),
        "cosine_min": round(float(cosines.min()), 6),
        "pairs_close": int(close.sum()),
        "shift_mean": round(float(shifts.mean()), 5) if shifts.size else 0.0,
        "shift_abs_p95": round(float(np.percentile(np.abs(shifts), 95)), 5) if shifts.size else 0.0,
        "near_duplicates": [round(float(after[i, j] - before[i, j]), 4) for i, j in pairs],
    }


def pooled(hidden: np.ndarray) -> np.ndarray:
    """The model's sentence vector from one text's last hidden state (every token a real
    one: mean, then unit length)."""
    mean: np.ndarray = hidden.mean(axis=0)
    unit: np.ndarray = mean / max(float(np.linalg.norm(mean)), 1e-12)
    return unit


def session(path: Path) -> Any:
    """A single-threaded onnxruntime session of the graph at ``path``, its external weights
    read from the package's folder."""
    import onnxruntime as ort

    from engrain.embed import minilm

    _, weights = minilm.model_source(True, True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if weights is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(weights)
        )
    return ort.InferenceSession(path.read_bytes(), options, providers=["CPUExecutionProvider"])


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the graphs given; print a table and write ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("graphs", type=Path, nargs="+", help="reference, baseline, others")
    parser.add_argument("--chunks", type=int, default=250, help="LoCoMo chunks embedded")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if len(args.graphs) < 2:
        parser.error("give the reference graph and at least one more")
    from tokenizers import Tokenizer

    texts, chunks, pairs = corpus(args.chunks)
    tokenizer = Tokenizer.from_file(str(ROOT / "src/engrain/embed/minilm/tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(256)
    encodings = tokenizer.encode_batch(texts)
    names = [str(g) for g in args.graphs]
    sessions = {n: session(g) for n, g in zip(names, args.graphs, strict=True)}
    hidden: dict[str, list[np.ndarray]] = {n: [] for n in names}
    cpu = dict.fromkeys(names, 0.0)
    for start in range(0, len(encodings), BLOCK):
        for name in names:
            began = time.thread_time()
            for encoding in encodings[start : start + BLOCK]:
                ids = np.array([encoding.ids], dtype=np.int64)
                feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                         "token_type_ids": np.zeros_like(ids)}  # fmt: skip
                hidden[name].append(sessions[name].run(None, feeds)[0][0])
            if start < chunks:  # CPU over the conversation chunks only (what an ingest embeds)
                cpu[name] += time.thread_time() - began
    vectors = {n: np.array([pooled(h) for h in hidden[n]]) for n in names}
    reference, baseline = names[0], names[1]
    report: dict[str, Any] = {"texts": len(texts), "chunks": chunks, "graphs": {}}
    for name in names[1:]:
        row = agreement(vectors[name], vectors[reference], pairs)
        # the same against the baseline (today's graph): what a store's vectors would move by
        row["to_baseline"] = agreement(vectors[name], vectors[baseline], pairs)
        row["cpu_s"] = round(cpu[name], 3)
        row["cpu_ratio"] = round(cpu[name] / cpu[baseline], 3)
        row["identical_to_baseline"] = sum(
            np.array_equal(a, b) for a, b in zip(hidden[name], hidden[baseline], strict=True)
        )
        report["graphs"][name] = row
        print(f"{Path(name).name:28s} cos {row['cosine_median']:.5f} / {row['cosine_p5']:.5f} / "
              f"{row['cosine_min']:.5f}  shift {row['shift_mean']:+.4f}, |p95| "
              f"{row['shift_abs_p95']:.4f}  dups {row['near_duplicates']}  CPU x{row['cpu_ratio']}"
              f"  identical {row['identical_to_baseline']}/{len(texts)}")  # fmt: skip
        to = row["to_baseline"]
        print(f"{'':28s} to the baseline: cos {to['cosine_median']:.5f} / {to['cosine_p5']:.5f} / "
              f"{to['cosine_min']:.5f}  shift {to['shift_mean']:+.4f}, |p95| "
              f"{to['shift_abs_p95']:.4f}  dups {to['near_duplicates']}")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
