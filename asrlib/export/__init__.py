"""Mobile export: compression (low-rank, pruning), ONNX (fp32/int8), the sherpa-onnx bundle and streaming."""
