"""Real-time factor of the TLG search alone (no network), on one thread.

    python bench/decode_rtf.py [--quick] [--lang-dir DIR] [--logprobs-ark ARK|SCP] [--beam 12] [--max-active 3000]

RTF = search seconds / audio seconds, with audio seconds = frames × 0.03 (the model's 30 ms output frames).
Without ``--logprobs-ark`` the digits lang is built in a temporary directory (unless ``--lang-dir`` is given) and
realistic peaky CTC log-probabilities are synthesised for random digit strings: a short spike per phone, blanks
in between and around, Gaussian noise on the logits, log-softmax. The last line printed is one JSON object,
``{"bench": "decode_rtf", "rtf": ..., "frames_per_s": ..., "beam": ...}``.
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
from typing import Iterator, List, Optional, Tuple  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from asrlib.decode.search import TlgDecoder  # noqa: E402
from asrlib.errors import AsrError  # noqa: E402
from asrlib.lang.graphs import build_tlg  # noqa: E402
from asrlib.lang.lexicon import build_lexicon, read_lexicon, read_tokens, write_lang_files  # noqa: E402

FRAME_SECONDS = 0.03
DIGITS = "ZERO ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE OH".split()


def synthesize(lang_dir: Path, n_utts: int, seed: int, noise: float = 2.0) -> Iterator[Tuple[List[str], np.ndarray]]:
    """Random word strings of the lang's lexicon and peaky CTC log-probs that say them (with noise)."""
    rng = np.random.default_rng(seed)
    tokens, lex = read_tokens(lang_dir / "tokens.txt"), read_lexicon(lang_dir / "lexicon.txt")
    vocab = sorted(lex)
    for _ in range(n_utts):
        words = [vocab[i] for i in rng.integers(0, len(vocab), rng.integers(1, 8))]
        frames = [0] * int(rng.integers(3, 12))
        for w in words:
            pron = lex[w][int(rng.integers(0, len(lex[w])))]
            for ph in pron:
                frames += [tokens[ph]] * int(rng.integers(1, 3)) + [0] * int(rng.integers(1, 4))
        frames += [0] * int(rng.integers(3, 12))
        logits = rng.normal(0.0, noise, (len(frames), len(tokens)))
        logits[np.arange(len(frames)), frames] += 9.0
        logits -= logits.max(axis=1, keepdims=True)
        lp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        yield words, lp.astype(np.float32)


def read_logprobs(path: Path) -> Iterator[Tuple[Optional[List[str]], np.ndarray]]:
    """Matrices of a Kaldi archive (``.ark``) or of the archives a ``.scp`` points to."""
    import kaldi_native_io

    if not path.is_file():
        raise AsrError(f"{path} does not exist")
    spec = f"scp:{path}" if path.suffix == ".scp" else f"ark:{path}"
    for _, m in kaldi_native_io.SequentialFloatMatrixReader(spec):
        yield None, np.array(m, dtype=np.float32, copy=True)  # the reader reuses its buffer


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a few hundred synthetic utterances (seconds)")
    p.add_argument("--lang-dir", type=Path, help="a built lang directory (default: build the digits lang)")
    p.add_argument("--logprobs-ark", type=Path, help="real log-probs (.ark or .scp) instead of synthetic ones")
    p.add_argument("--utts", type=int, help="synthetic utterances (default 300 with --quick, else 3000)")
    p.add_argument("--beam", type=float, default=12.0)
    p.add_argument("--max-active", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise", type=float, default=2.0, help="std of the Gaussian noise on synthetic logits")
    a = p.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    n_utts = a.utts or (300 if a.quick else 3000)

    with tempfile.TemporaryDirectory(prefix="decode_rtf_") as tmp:
        lang_dir = a.lang_dir
        if lang_dir is None:
            if a.logprobs_ark is not None:
                raise AsrError("--logprobs-ark needs the --lang-dir its model was trained with")
            lang_dir = Path(tmp) / "lang"
            write_lang_files(lang_dir, build_lexicon(DIGITS))
            build_tlg(lang_dir)
        items = read_logprobs(a.logprobs_ark) if a.logprobs_ark else synthesize(lang_dir, n_utts, a.seed, a.noise)
        data = list(items)  # generated/read before timing starts
        dec = TlgDecoder(lang_dir, beam=a.beam, max_active=a.max_active)
        correct = scored = 0
        t0 = time.perf_counter()
        for ref, lp in data:
            hyp = dec.decode(lp)
            if ref is not None:
                scored += 1
                correct += hyp == ref
        wall = time.perf_counter() - t0

    frames = dec.frames_searched
    result = {
        "bench": "decode_rtf",
        "rtf": dec.search_seconds / (frames * FRAME_SECONDS),
        "frames_per_s": frames / dec.search_seconds,
        "beam": a.beam,
        "max_active": a.max_active,
        "utterances": len(data),
        "frames": frames,
        "search_seconds": round(dec.search_seconds, 4),
        "loop_seconds": round(wall, 4),
        "graph_states": dec.graph.num_states,
        "source": str(a.logprobs_ark) if a.logprobs_ark else "synthetic digits",
    }
    if scored:
        result["sentence_accuracy"] = round(correct / scored, 4)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    from asrlib.cli import run_main

    run_main(main)
