"""Low-precision ONNX models: int8 weights with int32 accumulation and float32 gates, and fp16 weights.

**int8** (:func:`quantize_int8`) is ONNX Runtime's dynamic quantization: every MatMul/Gemm weight becomes int8
(per tensor, or per output channel), activations are quantized to uint8 on the fly per call
(``DynamicQuantizeLinear``), the product runs as ``MatMulInteger`` (8-bit × 8-bit → 32-bit accumulation, fused by
ORT into ``DynamicQuantizeMatMul`` at load time) and is rescaled to float32. Everything else — gate
nonlinearities (Sigmoid, Tanh), the cell state, peepholes, CMVN, log-softmax — stays float32: the "8-bit linear
transforms, float32 gate operations" mixed precision. Two measured pitfalls are handled: the quantizer's shape
inference fails on the dynamo export unless ``value_info`` is cleared (top graph and ``Scan`` bodies), and
without ``EnableSubgraph`` only the MatMuls outside the recurrent loop are quantized.

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

from asrlib.io_utils import AsrError, PathLike, atomic_path

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
            quantize_dynamic(str(clean), str(out), weight_type=QuantType.QInt8, per_channel=per_channel,
                             extra_options={"EnableSubgraph": True})
        finally:
            logging.getLogger().disabled = was
        q = onnx.load(str(out))
        del q.metadata_props[:]
        meta["precision"] = "int8-per-channel" if per_channel else "int8"
        onnx.helper.set_model_props(q, meta)
        with atomic_path(dst) as tmp:
            onnx.save_model(q, str(tmp), save_as_external_data=False)
    report = op_report(dst)
    if report["float_matmuls"]:
        log.warning("%s: %d float matrix products were not quantized: %s", dst, len(report["float_matmuls"]),
                    report["float_matmuls"])
    return report


def op_report(path: PathLike) -> Dict:
    """``{"ops": {op: count}, "int8_matmuls": [...], "float_matmuls": [...], "int8_weights": n,
    "float_weights": n}`` for the whole model, ``Scan`` bodies included. Each matmul entry is
    ``"<graph>/<node name> (<op>)"``; weights count initializers with ≥ 2 dims by element type."""
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
            if len(init.dims) >= 2:
                if init.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8):
                    int8_w += 1
                elif init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
                    float_w += 1
    return {"ops": dict(sorted(ops.items())), "int8_matmuls": int8_mm, "float_matmuls": float_mm,
            "int8_weights": int8_w, "float_weights": float_w}


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
            casts.append(helper.make_node("Cast", [half.name], [init.name], to=onnx.TensorProto.FLOAT,
                                          name=init.name + "__cast"))
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
