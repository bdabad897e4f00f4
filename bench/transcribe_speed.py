"""Speed of `asr transcribe` (the Recognizer) on one thread and one core: files per second and real-time factor.

    python bench/transcribe_speed.py [--quick] [--model recipes/digits/exp/lstm_ctc] [--wav-scp WAV_SCP]
                                     [--method tlg|greedy] [--files N]

Transcribes the first N files of the digits test set (``--quick``: 30, else all) one after the other, end to end
(read, resample if needed, fbank, network, search, word times): RTF = wall seconds / audio seconds. Also times the
search alone (part of that wall time) and one >= 60 s recording made by concatenating the files. Without a trained
digits model (``make run`` not done yet) an *untrained* model of the recipe's size with the digits lang and
synthetic audio is used instead — the network cost is the same, the search's is not representative; ``"source"``
says which. The last line printed is one JSON object ``{"bench": "transcribe_speed", "files_per_s": ...,
"rtf": ..., ...}``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import List, Tuple  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from asrlib.errors import AsrError  # noqa: E402
from asrlib.io.tables import read_table  # noqa: E402

DIGITS = ROOT / "recipes" / "digits"


def _untrained_digits_model(tmp: Path, n_files: int) -> Tuple[Path, List[Path]]:
    """A recipe-sized model with random weights + the digits lang, and synthetic 16 kHz files."""
    import soundfile as sf
    import torch

    from asrlib.config import load_config
    from asrlib.lang.graphs import build_tlg
    from asrlib.lang.lexicon import build_lexicon, read_tokens, write_lang_files
    from asrlib.models.lstm import build_model
    from asrlib.models.saved import save_model

    exp = tmp / "exp"
    lang = exp / "lang"
    write_lang_files(lang, build_lexicon("ZERO ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE OH".split()))
    build_tlg(lang)
    torch.manual_seed(0)
    cfg = load_config(DIGITS / "config.yaml").model
    model = build_model(80, len(read_tokens(lang / "tokens.txt")), cfg).eval()
    save_model(exp / "final.pt", model, np.full(80, -8.0), np.full(80, 0.3))
    rng = np.random.default_rng(0)
    files = []
    for i in range(n_files):
        n = int(rng.uniform(1.5, 3.5) * 16000)
        t = np.arange(n) / 16000
        x = 0.1 * np.sin(2 * np.pi * rng.uniform(200, 3000) * t) * (np.sin(2 * np.pi * 3 * t) > 0)
        path = tmp / f"syn{i:04d}.wav"
        sf.write(str(path), (x + rng.normal(0, 0.01, n)).astype(np.float32), 16000)
        files.append(path)
    return exp, files


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="30 files (seconds)")
    p.add_argument("--model", type=Path, default=DIGITS / "exp" / "lstm_ctc")
    p.add_argument("--wav-scp", type=Path, default=DIGITS / "data" / "test" / "wav.scp")
    p.add_argument("--method", choices=["tlg", "greedy"], default="tlg")
    p.add_argument("--files", type=int, help="number of files (default 30 with --quick, else all)")
    a = p.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    import soundfile as sf
    import torch

    from asrlib.app.recognizer import Recognizer

    torch.set_num_threads(1)
    n_files = a.files or (30 if a.quick else None)
    with tempfile.TemporaryDirectory(prefix="transcribe_speed_") as tmp:
        trained = (a.model / "final.pt").is_file() or (a.model / "model.json").is_file()
        if trained:
            if not a.wav_scp.is_file():
                raise AsrError(f"{a.wav_scp} does not exist (give --wav-scp)")
            files = [Path(v) for _, v in read_table(a.wav_scp)][:n_files]
            model, source = a.model, f"{a.model} on {a.wav_scp}"
        else:
            model, files = _untrained_digits_model(Path(tmp), n_files or 300)
            source = "untrained recipe-sized model, synthetic audio (digits recipe not trained yet)"
        t0 = time.perf_counter()
        rec = Recognizer.from_dir(model, method=a.method)
        load_s = time.perf_counter() - t0
        rec.transcribe_file(files[0])  # warm-up (first-call allocations), not timed
        search0 = getattr(rec.decoder, "search_seconds", 0.0)
        audio_s = 0.0
        t0 = time.perf_counter()
        for f in files:
            audio_s += rec.transcribe_file(f).duration
        wall = time.perf_counter() - t0
        search_s = getattr(rec.decoder, "search_seconds", 0.0) - search0

        pieces, total = [], 0.0
        for f in files * (1 + int(60 // max(audio_s, 1e-9))):
            x, sr = sf.read(str(f), dtype="float32")
            pieces.append(x)
            total += len(x) / sr
            if total >= 60:
                break
        long = np.concatenate(pieces)
        t0 = time.perf_counter()
        res = rec.transcribe(long, sr)
        long_wall = time.perf_counter() - t0

    result = {
        "bench": "transcribe_speed",
        "files_per_s": round(len(files) / wall, 2),
        "rtf": round(wall / audio_s, 4),
        "search_rtf": round(search_s / audio_s, 4) if search_s else None,
        "long_recording_rtf": round(long_wall / res.duration, 4),
        "long_recording_seconds": round(res.duration, 1),
        "files": len(files),
        "audio_seconds": round(audio_s, 1),
        "wall_seconds": round(wall, 3),
        "load_seconds": round(load_s, 3),
        "method": a.method,
        "threads": 1,
        "source": source,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    from asrlib.cli import run_main

    run_main(main)
