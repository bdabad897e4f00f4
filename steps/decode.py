"""Decode CTC log-posteriors (a Kaldi archive) into a Kaldi ``text`` file of hypotheses.

    python -m steps.decode --method tlg --logprobs exp/lstm_ctc/logprobs_test/logprobs.scp \
        --lang-dir data/lang --out-dir exp/lstm_ctc/decode_test_tlg --config recipes/digits/config.yaml

Methods: ``greedy`` (best token per frame, no grammar) and ``tlg`` (kaldi-decoder FasterDecoder over TLG.fst).
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import config_to_dict, load_config
from asrlib.io_utils import is_done, mark_done, read_table, write_table
from asrlib.kaldi_io import MatrixReader

log = logging.getLogger("decode")


def make_decoder(method: str, lang_dir: Path, cfg):
    from asrlib.decode.search import GreedyWordDecoder, TlgDecoder

    if method == "greedy":
        return GreedyWordDecoder(lang_dir)
    return TlgDecoder(lang_dir, beam=cfg.beam, max_active=cfg.max_active, acoustic_scale=cfg.acoustic_scale,
                      blank_penalty=cfg.blank_penalty, retry_beam=cfg.retry_beam)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    p.add_argument("--method", choices=["greedy", "tlg"], required=True)
    p.add_argument("--logprobs", type=Path, required=True, help="logprobs.scp")
    p.add_argument("--lang-dir", type=Path, required=True)
    p.add_argument("--out-dir", type=Path, required=True)
    a = p.parse_args(argv)
    setup_logging()
    cfg = load_config(a.config, a.overrides).decode
    done = a.out_dir / ".decode.done"
    fp = {"method": a.method, **config_to_dict(cfg), "lang_dir": str(a.lang_dir)}
    if is_done(done, fingerprint=fp):
        print(f"decode: {a.out_dir} complete; skipping")
        return 0
    decoder = make_decoder(a.method, a.lang_dir, cfg)
    reader = MatrixReader(a.logprobs)
    hyps, no_final, frames, t0 = [], [], 0, time.perf_counter()
    for utt, _ in tqdm(read_table(a.logprobs), desc=f"decode {a.method}", unit="utt", mininterval=2.0):
        lp = np.asarray(reader[utt], dtype=np.float32)
        frames += lp.shape[0]
        hyps.append((utt, " ".join(decoder.decode(lp))))
        if not getattr(decoder, "reached_final", True):
            no_final.append((utt, f"no final state of TLG within retry beam {cfg.retry_beam}: best partial path"))
    elapsed = time.perf_counter() - t0
    write_table(a.out_dir / "hyp.txt", hyps)
    info = {"method": a.method, "utterances": len(hyps), "frames": frames, "search_seconds": elapsed}
    if a.method == "tlg":
        write_table(a.out_dir / "no_final.txt", no_final)
        info.update(retries=decoder.retries, no_final=len(no_final))
        if no_final:
            log.warning("%d of %d utterances reached no final state of %s (partial hypotheses; see %s)",
                        len(no_final), len(hyps), a.lang_dir / "TLG.fst", a.out_dir / "no_final.txt")
    mark_done(done, info, fingerprint=fp)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    run_main(main)
