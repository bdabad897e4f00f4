"""What one call of the recogniser's network costs, by engine: torch (the model dir's ``final.pt``, oneDNN's LSTM on the
CPU) and ONNX Runtime (its mobile bundle's int8 streaming network, when ``MODEL/mobile/bundle`` exists), one thread.

    python bench/network_calls.py [--quick] [--model recipes/digits/exp/lstm_ctc] [--frames 1 10 33 100 300]

Times ``stream.accept`` (what the offline endpointer calls, :mod:`asrlib.decode.endpoint`) on random fbank input of
each number of *output* frames (a stack of fbank frames each), the state carried from call to call, as the median of
``--reps`` calls after three untimed ones; fits time = per call + per frame x frames (least squares over the sizes).
The offline endpointer's call sizes (``OFFLINE_CALLS`` for torch, ``OFFLINE_CHEAP_CALLS`` for ONNX Runtime) follow
from the ratio: the dearer a call against a frame, the fewer and longer the calls (docs/long-recordings.md). Ends
with one JSON line: per engine, the microseconds per call size, ``per_call_us``, ``per_frame_us`` and their ratio
``call_in_frames``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def time_calls(backend, frames: List[int], reps: int) -> Dict[str, float]:
    """Median microseconds of one ``accept`` of each number of output frames, and the linear fit."""
    rng = np.random.default_rng(0)
    stream = backend.stream()
    med = {}
    for n in frames:
        x = rng.normal(-5.0, 2.0, (n * backend.subsampling, backend.num_mel_bins)).astype(np.float32)
        for _ in range(3):
            stream.accept(x)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            stream.accept(x)
            times.append(time.perf_counter() - t0)
        med[n] = statistics.median(times) * 1e6
    slope, intercept = np.polyfit(np.asarray(frames, float), np.asarray([med[n] for n in frames]), 1)
    return {
        "us": {str(n): round(t, 1) for n, t in med.items()},
        "per_call_us": round(float(intercept), 1),
        "per_frame_us": round(float(slope), 2),
        "call_in_frames": round(float(intercept / slope), 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "recipes" / "digits" / "exp" / "lstm_ctc")
    p.add_argument("--frames", type=int, nargs="+", default=[1, 10, 33, 100, 300])
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.reps = 10
    import torch

    from asrlib.app.model_dir import open_model_dir

    torch.set_num_threads(1)
    if not (a.model / "final.pt").is_file() and not (a.model / "model.json").is_file():
        raise SystemExit(f"{a.model}: no trained model (run `make run` first)")
    figures: Dict = {"bench": "network_calls", "model": str(a.model), "date": time.strftime("%Y-%m-%d %H:%M")}
    dirs = {"torch": a.model, "onnxruntime": a.model / "mobile" / "bundle"}
    for engine, d in dirs.items():
        if not d.is_dir():
            print(f"{engine}: no {d}, left out", file=sys.stderr)
            continue
        backend = open_model_dir(d).load_backend("cpu")
        f = time_calls(backend, a.frames, a.reps)
        figures[engine] = f
        print(
            f"{engine:12s} "
            + " ".join(f"{n}: {t:.0f} us" for n, t in f["us"].items())
            + f"; per call {f['per_call_us']:.0f} us, per frame {f['per_frame_us']:.1f} us"
            + f" (a call = {f['call_in_frames']:.0f} frames)",
            file=sys.stderr,
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
