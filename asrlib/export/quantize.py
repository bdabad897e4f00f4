"""Low-precision ONNX models: int8 weights with int32 accumulation and float32 gates, and fp16 weights.

**int8** (:func:`quantize_int8`) is ONNX Runtime's dynamic quantization: every MatMul/Gemm weight becomes int8
(per tensor, or per output channel), activations are quantized to uint8 on the fly per call
(``DynamicQuantizeLinear``), the product runs as ``MatMulInteger`` (8-bit × 8-bit → 32-bit accumulation, fused by
ORT into ``DynamicQuantizeMatMul`` at load time) and is rescaled to float32. ONNX ``LSTM`` nodes (the export's
``hybrid``/``lstm`` recurrences) become ORT's ``DynamicQuantizeLSTM`` (:func:`quantize_lstm_nodes`): int8 W and R,
input and recurrent state quantized per call / per step. Everything else — gate nonlinearities (Sigmoid, Tanh),
the cell state, peepholes, CMVN, log-softmax — stays float32: the "8-bit linear transforms, float32 gate
operations" mixed precision. Three measured pitfalls are handled: the quantizer's shape inference fails on the
dynamo export unless ``value_info`` is cleared (top graph and ``Scan`` bodies); without ``EnableSubgraph`` only
the MatMuls outside the recurrent loop are quantized; ORT's LSTM converter crashes on an LSTM node inside a
``Scan`` body (its weights live in the enclosing graph).

:func:`op_report` lists what really got quantized: op counts in the whole model (subgraphs included), the
int8 matrix products and any float matrix product left.

**fp16** (:func:`convert_fp16_weights`): weight matrices stored as float16 and cast to float32 inside the graph
(half the bytes, float32 arithmetic) — a third size/accuracy point.
"""

from __future__ import annotations

import collections
import logging
import tempfile
from pathlib import Path
from typing import Dict, Iterator, List

import numpy as np

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_path

log = logging.getLogger(__name__)

INT8_MATMUL_OPS = ("MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QGemm", "DynamicQuantizeLSTM")
FLOAT_MATMUL_OPS = ("MatMul", "Gemm", "LSTM")


def _graphs(graph) -> Iterator:
    """``graph`` and every subgraph (Scan/Loop/If bodies), depth first."""
    import onnx

    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def clear_value_info(model) -> None:
    """Drop the inferred intermediate shapes of every (sub)graph (the quantizer re-infers them)."""
    for g in _graphs(model.graph):
        del g.value_info[:]


def quantize_int8(src: PathLike, dst: PathLike, per_channel: bool = False) -> Dict:
    """Dynamic int8 quantization of ``src`` into ``dst`` (atomic); returns :func:`op_report` of ``dst``.

    The model's metadata is kept, plus ``precision`` = ``int8`` (``int8-per-channel``)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    src, dst = Path(src), Path(dst)
    model = onnx.load(str(src))
    clear_value_info(model)
    meta = {p.key: p.value for p in model.metadata_props}
    with tempfile.TemporaryDirectory(dir=dst.parent if dst.parent.is_dir() else None) as td:
        clean = Path(td) / "clean.onnx"
        out = Path(td) / "int8.onnx"
        onnx.save_model(model, str(clean))
        logging.getLogger().disabled, was = True, logging.getLogger().disabled  # quantizer's pre-processing hint
        try:
            # LSTM nodes: quantize_lstm_nodes below
            # per channel: 7-bit weights (reduce_range), see _quantize_symmetric
            quantize_dynamic(
                str(clean),
                str(out),
                weight_type=QuantType.QInt8,
                per_channel=per_channel,
                reduce_range=per_channel,
                op_types_to_quantize=[op for op in IntegerOpsRegistry if op != "LSTM"],
                extra_options={"EnableSubgraph": True},
            )
        finally:
            logging.getLogger().disabled = was
        q = onnx.load(str(out))
        quantize_lstm_nodes(q, per_channel)
        del q.metadata_props[:]
        meta["precision"] = "int8-per-channel" if per_channel else "int8"
        onnx.helper.set_model_props(q, meta)
        with atomic_path(dst) as tmp:
            onnx.save_model(q, str(tmp), save_as_external_data=False)
    report = op_report(dst)
    if report["float_matmuls"]:
        log.warning(
            "%s: %d float matrix products were not quantized: %s",
            dst,
            len(report["float_matmuls"]),
            report["float_matmuls"],
        )
    return report


def _quantize_symmetric(w: np.ndarray, per_channel: bool):
    """int8 weights, float32 scales (per row of ``w`` or one), int8 zero points: symmetric, like ORT's.

    Per channel the weights are 7-bit (±63, ORT's ``reduce_range``): on x86 without VNNI (AVX2) ORT's u8×s8
    kernel adds pairs of products in int16, which saturates when every row uses the full ±127 — measured on this
    machine: 11 % relative error per-channel at ±127 (and the digits int8 WER 6.1-9.4 %), 1.6 % at ±63, 1.6 %
    per tensor at ±127 (few weights of a tensor are near its maximum)."""
    qmax = 63.0 if per_channel else 127.0
    amax = np.abs(w).max(axis=1) if per_channel else np.array([np.abs(w).max()])
    scale = np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / (scale[:, None] if per_channel else scale[0])), -qmax, qmax).astype(np.int8)
    return q, scale, np.zeros_like(scale, dtype=np.int8)


def quantize_lstm_nodes(model, per_channel: bool = False) -> int:
    """Replace every ONNX ``LSTM`` node (in any graph) whose W and R are initializers (of its graph or of an
    enclosing one) by ORT's ``com.microsoft.DynamicQuantizeLSTM``: int8 W and R (symmetric, per tensor or per gate
    row), the input X and the recurrent state quantized to uint8 on the fly (X per call: per frame for a node
    inside the Scan; h per time step), gates and cell state float32. ORT's own converter is not used: it looks the
    weights up in the node's graph only, so it fails on a node in a ``Scan`` body. New initializers go to the top
    graph (visible in every subgraph). Returns the number of nodes replaced."""
    from onnx import helper, numpy_helper

    top = model.graph
    inits = {i.name: i for g in _graphs(top) for i in g.initializer}
    quantized: Dict[str, tuple] = {}

    def q8(name: str) -> tuple:
        if name not in quantized:
            w = numpy_helper.to_array(inits[name])  # (1, 4H, in): one direction
            q, scale, zp = _quantize_symmetric(w[0], per_channel)
            shape = (1, w.shape[1]) if per_channel else (1,)
            names = (name + "_quantized", name + "_scale", name + "_zero_point")
            for n, arr in zip(names, (q.T[None].copy(), scale.reshape(shape), zp.reshape(shape))):
                top.initializer.append(numpy_helper.from_array(arr, n))  # DQLSTM wants W as (1, in, 4H)
            quantized[name] = names
        return quantized[name]

    done = 0
    for g in _graphs(top):
        for idx, node in enumerate(list(g.node)):
            if (
                node.op_type != "LSTM"
                or node.domain not in ("", "ai.onnx")
                or len(node.input) < 3
                or node.input[1] not in inits
                or node.input[2] not in inits
            ):
                continue
            (w, w_s, w_zp), (r, r_s, r_zp) = q8(node.input[1]), q8(node.input[2])
            ins = list(node.input) + [""] * (8 - len(node.input))
            ins[1], ins[2] = w, r
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "layout"}
            g.node.remove(node)
            g.node.insert(
                idx,
                helper.make_node(
                    "DynamicQuantizeLSTM",
                    ins + [w_s, w_zp, r_s, r_zp],
                    list(node.output),
                    (node.name or "lstm") + "_quant",
                    domain="com.microsoft",
                    **attrs,
                ),
            )
            done += 1
    if done:
        graphs = list(_graphs(top))
        used = {i for g in graphs for n in g.node for i in n.input} | {o.name for g in graphs for o in g.output}
        for g in graphs:
            for init in [i for i in g.initializer if i.name not in used]:
                g.initializer.remove(init)
        if not any(o.domain == "com.microsoft" for o in model.opset_import):
            model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return done


def op_report(path: PathLike) -> Dict:
    """``{"ops": {op: count}, "int8_matmuls": [...], "float_matmuls": [...], "int8_weights": n,
    "float_weights": n}`` for the whole model, ``Scan`` bodies included. Each matmul entry is
    ``"<graph>/<node name> (<op>)"``; weights count initializers with ≥ 2 dims larger than 1 by element type."""
    import onnx

    model = onnx.load(str(path))
    ops: Dict[str, int] = collections.Counter()
    int8_mm: List[str] = []
    float_mm: List[str] = []
    int8_w = float_w = 0
    for g in _graphs(model.graph):
        for node in g.node:
            ops[node.op_type] += 1
            where = f"{g.name or 'main'}/{node.name or node.output[0]} ({node.op_type})"
            if node.op_type in INT8_MATMUL_OPS:
                int8_mm.append(where)
            elif node.op_type in FLOAT_MATMUL_OPS:
                float_mm.append(where)
        for init in g.initializer:
            if sum(d > 1 for d in init.dims) >= 2:  # matrices; not LSTM biases/peepholes, shaped (1, n)
                if init.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8):
                    int8_w += 1
                elif init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
                    float_w += 1
    return {
        "ops": dict(sorted(ops.items())),
        "int8_matmuls": int8_mm,
        "float_matmuls": float_mm,
        "int8_weights": int8_w,
        "float_weights": float_w,
    }


def convert_fp16_weights(src: PathLike, dst: PathLike, min_elements: int = 1024) -> Path:
    """Store float32 initializers with ≥ ``min_elements`` elements (the weight matrices) as float16, each followed
    by a ``Cast`` to float32 where it is used (in any subgraph, by outer-scope name); arithmetic stays float32."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    kept, casts = [], []
    for init in g.initializer:
        arr = numpy_helper.to_array(init)
        if init.data_type == onnx.TensorProto.FLOAT and arr.size >= min_elements:
            half = numpy_helper.from_array(arr.astype(np.float16), name=init.name + "__fp16")
            kept.append(half)
            casts.append(
                helper.make_node("Cast", [half.name], [init.name], to=onnx.TensorProto.FLOAT, name=init.name + "__cast")
            )
        else:
            kept.append(init)
    if not casts:
        raise AsrError(f"{src}: no float32 weight matrix with ≥ {min_elements} elements to convert")
    del g.initializer[:]
    g.initializer.extend(kept)
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(casts + nodes)
    clear_value_info(model)
    meta = {p.key: p.value for p in model.metadata_props}
    meta["precision"] = "fp16-weights"
    del model.metadata_props[:]
    helper.set_model_props(model, meta)
    with atomic_path(dst) as tmp:
        onnx.save_model(model, str(tmp), save_as_external_data=False)
    return Path(dst)
