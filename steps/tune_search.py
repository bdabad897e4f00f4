"""Choose the TLG search's acoustic scale and blank penalty on a dev set (as Kaldi's score.sh sweeps LM weights).

    python -m steps.tune_search --config recipes/an4/config.yaml --logprobs EXP/logprobs_dev/logprobs.scp \
        --lang-dir DATA/lang --ref DATA/dev/text --scales 1 1.5 2 3 --penalties 0 1 2 --out-dir EXP/tune_dev

Decodes the log-probs at every (scale, penalty) of the grid, scores each against ``--ref`` and writes
``OUT_DIR/grid.json``: the %WER of every point, the config's own point (decoded too when it is off the grid) and the
best: the lowest %WER, ties going to the config's own values, then to the smaller scale and penalty. Prints one JSON
line. Decode the test set once with the best (``--set decode.acoustic_scale=S --set decode.blank_penalty=P``); the
choice never looks at test. Skipped when ``grid.json`` holds the same grid, log-probs and lang dir.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
from tqdm import tqdm

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import load_config
from asrlib.errors import AsrError
from asrlib.io.atomic import write_json
from asrlib.io.files import file_identity
from asrlib.io.tables import read_table
from asrlib.kaldi_io import MatrixReader
from asrlib.score import score

log = logging.getLogger("tune_search")

Point = Tuple[float, float]


def best_point(wers: Dict[Point, float], own: Point) -> Point:
    """The point of lowest %WER; ties to ``own``, then to the smaller scale, then the smaller penalty."""
    low = min(wers.values())
    tied = [p for p, w in wers.items() if w == low]
    return own if own in tied else min(tied)


def sweep(
    logprobs: Dict[str, np.ndarray], refs: Dict[str, str], points: Sequence[Point], decoder_at: Callable
) -> Dict[Point, float]:
    """%WER at each point; ``decoder_at(scale, penalty)`` gives an object whose ``decode(log_probs)`` returns words."""
    out = {}
    for s, b in tqdm(points, desc="search grid", unit="point"):
        dec = decoder_at(s, b)
        hyps = {u: " ".join(dec.decode(lp)) for u, lp in logprobs.items()}
        out[(s, b)] = round(score({u: refs[u] for u in logprobs}, hyps).wer, 2)
        log.info("acoustic scale %g, blank penalty %g: %.2f %%WER", s, b, out[(s, b)])
    return out


def main(argv=None):
    p = parser()
    a = p.parse_args(argv)
    setup_logging()
    cfg = load_config(a.config, a.overrides).decode
    own = (cfg.acoustic_scale, cfg.blank_penalty)
    points: List[Point] = [(s, b) for s in a.scales for b in a.penalties]
    points += [own] if own not in points else []
    fp = {"points": points, "logprobs": file_identity(a.logprobs), "lang_dir": str(a.lang_dir), "ref": str(a.ref)}
    out = a.out_dir / "grid.json"
    if out.is_file() and json.loads(out.read_text()).get("fingerprint") == json.loads(json.dumps(fp)):
        print(f"tune_search: {out} complete; skipping")
        return 0
    refs = dict(read_table(a.ref))
    reader = MatrixReader(a.logprobs)
    logprobs = {u: np.asarray(reader[u], np.float32) for u, _ in read_table(a.logprobs)}
    missing = [u for u in logprobs if u not in refs]
    if missing:
        raise AsrError(f"{a.ref} has no reference for {len(missing)} utterances of {a.logprobs} (e.g. {missing[0]})")
    from asrlib.decode.search import make_decoder

    def decoder_at(s: float, b: float):
        return make_decoder("tlg", a.lang_dir, dataclasses.replace(cfg, acoustic_scale=s, blank_penalty=b))

    wers = sweep(logprobs, refs, points, decoder_at)
    best = best_point(wers, own)
    result = {
        "utterances": len(logprobs),
        "grid": [{"acoustic_scale": s, "blank_penalty": b, "wer": w} for (s, b), w in wers.items()],
        "own": {"acoustic_scale": own[0], "blank_penalty": own[1], "wer": wers[own]},
        "best": {"acoustic_scale": best[0], "blank_penalty": best[1], "wer": wers[best]},
        "fingerprint": fp,
    }
    write_json(out, result)
    print(json.dumps({k: result[k] for k in ("utterances", "own", "best")}))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    p.add_argument("--logprobs", type=Path, required=True, help="the dev set's logprobs.scp (steps.compute_logprobs)")
    p.add_argument("--lang-dir", type=Path, required=True, help="holds TLG.fst, words.txt")
    p.add_argument("--ref", type=Path, required=True, help="the dev set's Kaldi text file")
    p.add_argument("--scales", type=float, nargs="+", default=[1.0, 1.5, 2.0, 2.5, 3.0])
    p.add_argument("--penalties", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0])
    p.add_argument("--out-dir", type=Path, required=True)
    return p


if __name__ == "__main__":
    run_main(main)
