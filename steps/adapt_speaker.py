"""Unsupervised speaker adaptation (two-pass decoding): per speaker, an affine transform of the model's input fitted
to a first pass's hypotheses, then the set's CTC log-posteriors again through it.

    python -m steps.adapt_speaker --config recipes/fsdd/config.yaml --model exp/loso_x/final.pt \
        --feats data/loso_x/fbank/test/feats.scp --utt2spk data/loso_x/test/utt2spk \
        --hyp exp/loso_x/decode_test_isolated/hyp.txt --lang-dir data/loso_x/lang_test --out-dir exp/loso_x/sa_test

The first pass can be any decoding of the set (one model's, or several models' combined). Outputs in --out-dir:
``trans.ark/.scp`` (speaker -> D x (D+1) ``[A | b]``, the layout of Kaldi's fMLLR transforms), ``logprobs.ark/.scp``
(every utterance through its speaker's transform: decode them with steps.decode), ``excluded.txt`` (utterances
with an empty first-pass hypothesis, not used to estimate the transform but still in logprobs), ``log/`` and
``.done`` with each speaker's CTC loss per frame before and after. Settings: ``adapt`` of the config
(asrlib/train/speaker_adapt.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import config_to_dict, load_config
from asrlib.features.cmvn import open_features
from asrlib.errors import AsrError
from asrlib.io.files import file_identity
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table, read_table_dict, write_table
from asrlib.kaldi_io import write_matrices
from asrlib.lang.lexicon import read_lexicon_ids
from asrlib.models.device import resolve_device
from asrlib.models.saved import load_model
from asrlib.train.speaker_adapt import adapt_speaker, apply_transform, best_pronunciations

log = logging.getLogger("adapt_speaker")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--feats", type=Path, required=True, help="the set's feats.scp")
    p.add_argument("--utt2spk", type=Path, required=True)
    p.add_argument("--hyp", type=Path, required=True, help="first-pass hypotheses (Kaldi text)")
    p.add_argument("--lang-dir", type=Path, required=True, help="lexicon.txt and tokens.txt of the model")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--num-threads", type=int, default=2)
    a = p.parse_args(argv)
    full = load_config(a.config, a.overrides)
    cfg = full.adapt
    done = a.out_dir / ".done"
    fp = {
        **config_to_dict(cfg),
        "model": file_identity(a.model),
        "hyp": file_identity(a.hyp),
        "feats": file_identity(a.feats),
        "lang_dir": str(a.lang_dir),
    }
    if is_done(done, fingerprint=fp):
        print(f"adapt_speaker: {a.out_dir} complete; skipping")
        return 0
    setup_logging(a.out_dir / "log" / "adapt_speaker.log")
    torch.set_num_threads(a.num_threads)
    saved = load_model(a.model).to(resolve_device(full.train.device))
    lexicon = read_lexicon_ids(a.lang_dir)
    reader = open_features(a.feats, saved.cmn)
    utts = [u for u, _ in read_table(a.feats)]
    utt2spk = read_table_dict(a.utt2spk)
    hyp = {u: t.split() for u, t in read_table(a.hyp)}
    for what, missing in [
        (a.utt2spk, [u for u in utts if u not in utt2spk]),
        (a.hyp, [u for u in utts if u not in hyp]),
    ]:
        if missing:
            raise AsrError(
                f"{what} lacks {len(missing)} utterance(s) of {a.feats} (e.g. {missing[0]}); the first "
                f"pass and the data dir must be of the same set"
            )
    oov = sorted({w for u in utts for w in hyp[u] if w not in lexicon})
    if oov:
        raise AsrError(f"{a.hyp}: words not in {a.lang_dir / 'lexicon.txt'}: {' '.join(oov[:10])}")

    inputs = {u: saved.normalise(reader[u]) for u in tqdm(utts, desc="features", unit="utt", mininterval=2.0)}
    by_spk, excluded = defaultdict(list), []
    for u in utts:
        if hyp[u]:
            by_spk[utt2spk[u]].append(u)
        else:
            excluded.append((u, "empty first-pass hypothesis"))
    transforms, report, t0 = {}, {}, time.perf_counter()
    dim = next(iter(inputs.values())).shape[1]
    for spk in tqdm(sorted(set(utt2spk[u] for u in utts)), desc="speakers", unit="spk"):
        used = by_spk.get(spk, [])
        if not used:  # nothing to adapt to: the identity
            transforms[spk] = np.hstack([np.eye(dim), np.zeros((dim, 1))]).astype(np.float32)
            report[spk] = {"utterances": 0}
            log.warning("speaker %s: no utterance with a first-pass hypothesis; identity transform", spk)
            continue
        with torch.no_grad():
            targets = [
                best_pronunciations(torch.from_numpy(saved.log_probs_of_inputs(inputs[u])), hyp[u], lexicon)
                for u in used
            ]
        res = adapt_speaker(saved, [inputs[u] for u in used], targets, cfg)
        transforms[spk] = res.transform
        report[spk] = {
            "utterances": res.utterances,
            "loss_before": round(res.loss_before, 4),
            "loss_after": round(res.loss_after, 4),
        }
        log.info(
            "speaker %s: %d utterances, CTC loss per frame %.4f -> %.4f",
            spk,
            res.utterances,
            res.loss_before,
            res.loss_after,
        )
    write_matrices(a.out_dir / "trans.ark", sorted(transforms.items()))
    write_matrices(
        a.out_dir / "logprobs.ark",
        ((u, saved.log_probs_of_inputs(apply_transform(transforms[utt2spk[u]], inputs[u]))) for u in utts),
    )
    write_table(a.out_dir / "excluded.txt", excluded)
    if excluded:
        log.warning(
            "%d of %d utterances have an empty first-pass hypothesis: not used to adapt (see %s)",
            len(excluded),
            len(utts),
            a.out_dir / "excluded.txt",
        )
    info = {
        "utterances": len(utts),
        "excluded": len(excluded),
        "speakers": report,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    mark_done(done, info, fingerprint=fp)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    run_main(main, writes=("--out-dir",))
