"""Decode CTC log-posteriors (a Kaldi archive) into a Kaldi ``text`` file of hypotheses.

    python -m steps.decode --method tlg --logprobs exp/lstm_ctc/logprobs_test/logprobs.scp \
        --lang-dir data/lang --out-dir exp/lstm_ctc/decode_test_tlg --config recipes/digits/config.yaml
    python -m steps.decode --method isolated --logprobs exp/a/logprobs_test/logprobs.scp \
        exp/b/logprobs_test/logprobs.scp --lang-dir data/lang_test --out-dir exp/ab/decode_test_isolated

Methods: ``greedy`` (best token per frame, no grammar), ``tlg`` (kaldi-decoder FasterDecoder over TLG.fst) and
``isolated`` (a one-word lang dir: every candidate word scored by its total CTC probability, several models' scores
added; asrlib.decode.isolated), which also writes ``posteriors.txt`` (each utterance's three likeliest words and
their posteriors). An utterance none of whose words fits its frames gets an empty hypothesis, listed in
``no_final.txt``.
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
from asrlib.errors import AsrError
from asrlib.io.files import file_identity
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table, write_table
from asrlib.kaldi_io import MatrixReader, open_matching_readers
from asrlib.results.records import RunRecord

log = logging.getLogger("decode")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    p.add_argument("--method", choices=["greedy", "tlg", "isolated"], required=True)
    p.add_argument(
        "--logprobs",
        type=Path,
        nargs="+",
        required=True,
        help="logprobs.scp; with --method isolated one per model to combine (same utterances)",
    )
    p.add_argument("--lang-dir", type=Path, required=True)
    p.add_argument("--out-dir", type=Path, required=True)
    a = p.parse_args(argv)
    setup_logging()
    recipe_cfg = load_config(a.config, a.overrides)
    cfg = recipe_cfg.decode
    if len(a.logprobs) > 1 and a.method != "isolated":
        raise AsrError(
            f"--method {a.method} decodes one model's log-probabilities; several (model combination) "
            f"need --method isolated, or steps.combine_logprobs first"
        )
    done = a.out_dir / ".decode.done"
    # the log-posteriors as files: new ones (a retrained or adapted model) make the search run again
    fp = {
        "method": a.method,
        **config_to_dict(cfg),
        "lang_dir": str(a.lang_dir),
        "logprobs": [file_identity(x) for x in a.logprobs],
    }
    if is_done(done, fingerprint=fp):
        print(f"decode: {a.out_dir} complete; skipping")
        return 0
    record = RunRecord("decode", "steps.decode", argv, recipe_cfg, a.config)  # OUT_DIR/run.json
    if a.method == "isolated":
        return decode_isolated(a, fp, record)
    from asrlib.decode.search import make_decoder

    decoder = make_decoder(a.method, a.lang_dir, cfg)
    reader = MatrixReader(a.logprobs[0])
    hyps, no_final, frames, t0 = [], [], 0, time.perf_counter()
    for utt, _ in tqdm(read_table(a.logprobs[0]), desc=f"decode {a.method}", unit="utt", mininterval=2.0):
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
            log.warning(
                "%d of %d utterances reached no final state of %s (partial hypotheses; see %s)",
                len(no_final),
                len(hyps),
                a.lang_dir / "TLG.fst",
                a.out_dir / "no_final.txt",
            )
    record.write(a.out_dir, summary=info)
    mark_done(done, info, fingerprint=fp)
    print(json.dumps(info))
    return 0


def decode_isolated(a, fp: dict, record: RunRecord) -> int:
    """--method isolated: each candidate word's total CTC probability, summed over the models in --logprobs."""
    from asrlib.decode.isolated import IsolatedWordScorer

    scorer = IsolatedWordScorer(a.lang_dir)
    readers, utts = open_matching_readers(a.logprobs)
    hyps, posts, empty, t0 = [], [], [], time.perf_counter()
    for utt in tqdm(utts, desc="decode isolated", unit="utt", mininterval=2.0):
        words, post = scorer.decode([np.asarray(r[utt], dtype=np.float32) for r in readers])
        hyps.append((utt, " ".join(words)))
        top = np.argsort(-post)[:3]
        posts.append((utt, " ".join(f"{scorer.words[i]} {np.exp(post[i]):.4f}" for i in top if np.isfinite(post[i]))))
        if not words:
            empty.append((utt, "no candidate word fits its frames"))
    write_table(a.out_dir / "hyp.txt", hyps)
    write_table(a.out_dir / "posteriors.txt", posts)
    write_table(a.out_dir / "no_final.txt", empty)
    if empty:
        log.warning(
            "%d of %d utterances are too short for every candidate word (empty hypotheses; see %s)",
            len(empty),
            len(hyps),
            a.out_dir / "no_final.txt",
        )
    info = {
        "method": "isolated",
        "models": len(readers),
        "utterances": len(hyps),
        "candidates": len(scorer.words),
        "no_final": len(empty),
        "search_seconds": time.perf_counter() - t0,
    }
    record.write(a.out_dir, summary=info)
    mark_done(a.out_dir / ".decode.done", info, fingerprint=fp)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    run_main(main)
