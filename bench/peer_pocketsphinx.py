"""The peer a user would pick instead: CMU PocketSphinx 5 (PyPI, its bundled US-English acoustic model) beside our
recipe's model, on the same test audio with the same scoring.

    python bench/peer_pocketsphinx.py --data-dir DATA/test [--lang-dir DATA/lang] [--exp EXP] [--every 10]
        [--name speechocean762] [--out bench/results/peer_pocketsphinx_speechocean762.json] [--quick]

Every ``--every``-th utterance of the Kaldi data dir (``wav.scp``, ``text``; sorted by utterance id) is decoded

- by PocketSphinx with its general LM (``en-us.lm.bin``, 3-gram, 70k words) and its dictionary (``general``);
- with ``--lang-dir``: by PocketSphinx with our recipe's ARPA LM (``<lang>/lm_<N>gram.arpa``: the one our TLG is
  built from) and our lexicon (``<lang>/lexicon.txt``: CMUdict's phones without stress, PocketSphinx's phone set)
  as its dictionary (``recipe_lm``);
- with ``--exp``: by our model (``asrlib.app.recognizer.Recognizer.from_dir(EXP)``: fbank, network and TLG search
  on one thread, as ``asr transcribe``).

Each is scored with ``asrlib.score`` (kaldialign, words upper-cased) and timed: RTF = decoding seconds / audio
seconds, on one thread (PocketSphinx is single-threaded; torch is set to one thread). ``--quick``: the first 8
utterances of the speechocean762 excerpt's test set (``../shared/data/speechocean762_mini``, unless ``--data-dir``
is given), general LM only unless the other options are given: under a minute. The last line printed is one JSON
object; ``--out`` also writes it to a file.
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
from typing import Callable, Dict, List, Optional, Tuple  # noqa: E402

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from asrlib.errors import AsrError  # noqa: E402
from asrlib.io.atomic import write_json  # noqa: E402
from asrlib.io.tables import read_table_dict  # noqa: E402
from asrlib.score import score  # noqa: E402

MINI = ROOT.parent / "shared" / "data" / "speechocean762_mini"


def utterances(data_dir: Path, every: int, limit: int = 0) -> List[Tuple[str, Path, str]]:
    """``(utt, audio, words)`` of every ``every``-th utterance of a Kaldi data dir (``wav.scp`` paths are taken
    relative to the data dir's parent when not absolute, as in the excerpt's own tables)."""
    wav, text = read_table_dict(data_dir / "wav.scp"), read_table_dict(data_dir / "text")
    out = []
    for i, utt in enumerate(sorted(text)):
        if i % every:
            continue
        p = Path(wav[utt])
        out.append((utt, p if p.is_absolute() else data_dir.parent / p, text[utt]))
        if limit and len(out) == limit:
            break
    if not out:
        raise AsrError(f"{data_dir}: no utterance to decode")
    return out


def read_int16(path: Path) -> Tuple[bytes, float]:
    audio, sr = sf.read(str(path), dtype="int16")
    if sr != 16000 or audio.ndim != 1:
        raise AsrError(f"{path}: PocketSphinx's model needs 16 kHz mono, got {sr} Hz, shape {audio.shape}")
    return audio.tobytes(), len(audio) / sr


def sphinx_dict(lexicon: Path, out: Path) -> int:
    """Our ``lexicon.txt`` as a PocketSphinx dictionary (variants as ``WORD(2)``); returns the number of words."""
    seen: Dict[str, int] = {}
    with open(out, "w") as f:
        for line in lexicon.read_text().splitlines():
            w, *phones = line.split()
            seen[w] = seen.get(w, 0) + 1
            f.write(f"{w if seen[w] == 1 else f'{w}({seen[w]})'} {' '.join(phones)}\n")
    return len(seen)


def pocketsphinx_decoder(lm: Optional[Path] = None, dic: Optional[Path] = None):
    from pocketsphinx import Config, Decoder

    cfg = Config()
    cfg["loglevel"] = "FATAL"
    if lm is not None:
        cfg["lm"] = str(lm)
        cfg["dict"] = str(dic)
    dec = Decoder(cfg)

    def run(path: Path) -> str:
        raw, _ = read_int16(path)
        dec.start_utt()
        dec.process_raw(raw, full_utt=True)
        dec.end_utt()
        hyp = dec.hyp()
        return hyp.hypstr.upper() if hyp is not None else ""

    return run


def our_decoder(exp: Path) -> Callable[[Path], str]:
    import torch

    from asrlib.app.recognizer import Recognizer

    torch.set_num_threads(1)
    rec = Recognizer.from_dir(exp, device="cpu")
    return lambda path: rec.transcribe_file(path).text


def measure(name: str, run: Callable[[Path], str], utts: List[Tuple[str, Path, str]]) -> Dict[str, object]:
    hyp: Dict[str, str] = {}
    seconds = audio = 0.0
    for utt, path, _ in utts:
        audio += sf.info(str(path)).duration
        t0 = time.perf_counter()
        hyp[utt] = run(path)
        seconds += time.perf_counter() - t0
    w = score({u: t for u, _, t in utts}, hyp)
    out = {
        "wer": round(w.wer, 2),
        "ins": w.ins,
        "del": w.dels,
        "sub": w.subs,
        "words": w.num_words,
        "rtf": round(seconds / audio, 4),
        "seconds": round(seconds, 1),
    }
    print(f"{name}: {json.dumps(out)}", file=sys.stderr)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, help="Kaldi data dir (wav.scp, text) of the test set")
    p.add_argument("--lang-dir", type=Path, help="our lang dir: its ARPA LM and lexicon for PocketSphinx too")
    p.add_argument("--exp", type=Path, help="our experiment (or packaged model) dir, decoded on the same audio")
    p.add_argument("--every", type=int, default=1, help="decode every N-th utterance (sorted by id)")
    p.add_argument("--name", default="", help="the corpus's name, for the JSON line")
    p.add_argument("--out", type=Path, help="also write the JSON line here")
    p.add_argument("--quick", action="store_true", help="8 utterances (the speechocean762 excerpt by default)")
    a = p.parse_args(argv)
    data_dir = a.data_dir or (MINI / "test" if a.quick else None)
    if data_dir is None:
        p.error("--data-dir is needed (or --quick, which takes the speechocean762 excerpt)")
    if not (data_dir / "wav.scp").is_file():
        print(f"ERROR: {data_dir / 'wav.scp'} does not exist", file=sys.stderr)
        return 2
    utts = utterances(data_dir, a.every, 8 if a.quick else 0)
    res: Dict[str, object] = {
        "bench": "peer_pocketsphinx",
        "corpus": a.name or data_dir.parent.name,
        "set": data_dir.name,
        "every": a.every,
        "utterances": len(utts),
        "load": [round(x, 2) for x in os.getloadavg()],
    }
    res["general"] = measure("pocketsphinx general LM", pocketsphinx_decoder(), utts)
    if a.lang_dir is not None:
        arpas = sorted(a.lang_dir.glob("lm_*gram.arpa"))
        arpas = [q for q in arpas if not q.stem.endswith("_text")] or arpas
        if not arpas:
            print(f"ERROR: {a.lang_dir} holds no lm_<N>gram.arpa", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory() as tmp:
            dic = Path(tmp) / "recipe.dict"
            res["recipe_lm_words"] = sphinx_dict(a.lang_dir / "lexicon.txt", dic)
            res["recipe_lm_file"] = arpas[0].name
            res["recipe_lm"] = measure("pocketsphinx recipe LM", pocketsphinx_decoder(arpas[0], dic), utts)
    if a.exp is not None:
        res["ours"] = measure("ours", our_decoder(a.exp), utts)
        best = min(float(res[k]["wer"]) for k in ("general", "recipe_lm") if k in res)
        res["ours_over_best_pocketsphinx"] = round(float(res["ours"]["wer"]) / best, 3) if best else None
    line = json.dumps(res)
    if a.out is not None:
        write_json(a.out, res)
    print(line)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    try:
        sys.exit(main())
    except AsrError as e:
        print(f"ERROR: {e}", file=sys.stderr)
        sys.exit(2)
