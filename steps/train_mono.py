"""Train a monophone GMM-HMM system with kaldi-hmm-gmm (Kaldi's steps/train_mono.sh), for frame alignments.

    python -m steps.train_mono --config recipes/digits/config.yaml --data-dir data --feats-dir data/fbank \
        --lang-dir data/lang --exp-dir exp/mono

Reads ``<data-dir>/<train-set>/text``, ``<feats-dir>/<train-set>/{feats,cmvn}.scp`` and the lang dir; writes
``final.mdl`` (see asrlib/gmm/model.py), ``tree`` (Kaldi binary), ``topo``, ``phones.txt``, ``excluded.txt``
(utterances not used, with the reason), ``log/passes.json`` (log-likelihood per frame, Gaussians, alignment
failures per pass) and the ``.done`` marker. Settings: the ``gmm`` section of the config.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from asrlib.cli import run_main, setup_logging, step_parser
from asrlib.config import config_to_dict, load_config
from asrlib.features.cmvn import check_cmvn_mode, cmvn_fingerprint, load_cmvn, open_features
from asrlib.errors import AsrError
from asrlib.io.atomic import write_json
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import write_table
from asrlib.gmm.align import GraphCompiler
from asrlib.gmm.data import load_data, random_subset, select_utterances
from asrlib.gmm.feats import GmmFeatureMaker
from asrlib.gmm.lang import load_gmm_lang, topology_text
from asrlib.gmm.model import init_mono, save_gmm
from asrlib.gmm.train import KALDI_REALIGN_ITERS, MonoSchedule, flat_start, global_stats, summary, train_mono

log = logging.getLogger("train_mono")


def main(argv=None):
    p = step_parser(__doc__, ["data-dir", "feats-dir", "lang-dir", "exp-dir"], sets=["train"])
    a = p.parse_args(argv)
    cfg = load_config(a.config, a.overrides)
    g = cfg.gmm
    done = a.exp_dir / ".done"
    fp = {"gmm": config_to_dict(g), "train_set": a.train_set}
    fp.update(cmvn_fingerprint(cfg.features))
    if cfg.features.cmvn == "online":
        raise AsrError(
            "features.cmvn online is for the neural models: the GMM-HMM has no online CMN; train it "
            "with global, speaker or utterance"
        )
    if is_done(done, fingerprint=fp):
        print(f"train_mono: {a.exp_dir} already trained ({done}); skipping")
        return 0
    setup_logging(a.exp_dir / "log" / "train_mono.log")
    t0 = time.time()
    lang = load_gmm_lang(a.lang_dir, g.sil_phone)
    feats_dir = a.feats_dir / a.train_set
    reader = open_features(feats_dir / "feats.scp", check_cmvn_mode(cfg.features.cmvn))
    cmvn = load_cmvn(feats_dir / "cmvn.scp")
    utts, excluded = select_utterances(a.data_dir / a.train_set / "text", reader, lang)
    chosen = random_subset(utts, g.num_utts, g.seed)
    log.info("%d usable utterances (%d excluded), training on %d", len(utts), len(excluded), len(chosen))
    if not chosen:
        raise AsrError(f"no usable utterance in {a.data_dir / a.train_set}; see {a.exp_dir / 'excluded.txt'}")
    maker = GmmFeatureMaker(g.feature_type, g.num_ceps)
    featurize = lambda fbank: maker(cmvn.apply(fbank))  # noqa: E731  (== GmmModel.features)
    # the global mean/variance for the flat start come from the training features themselves
    first = [featurize(reader[u]) for u, _ in chosen]
    mean, var = global_stats(first)
    model = init_mono(
        lang,
        topology_text(lang.nonsil_ids, [lang.sil_id]),
        mean,
        var,
        g.feature_type,
        g.num_ceps,
        cmvn.mean,
        cmvn.inv_std,
    )
    del first
    compiler = GraphCompiler(model, lang, g.sil_prob)
    data = load_data(chosen, reader, featurize, compiler, lang)
    no_path = flat_start(data, g.seed)
    excluded += no_path
    data = [u for u in data if u.tids is not None]
    if not data:
        raise AsrError(f"no utterance of {a.train_set} could be flat-start aligned; see {a.exp_dir}/excluded.txt")
    sched = MonoSchedule(
        num_iters=g.num_iters,
        max_iter_inc=min(g.max_iter_inc, max(1, g.num_iters - 1)),
        total_gauss=g.total_gauss,
        realign_iters=[i for i in KALDI_REALIGN_ITERS if i < g.num_iters],
        seed=g.seed,
    )
    history = train_mono(model, data, sched)
    summ = {
        **summary(history),
        "utterances": len(data),
        "excluded": len(excluded),
        "num_pdfs": int(model.tm.num_pdfs),
        "feature_dim": int(data[0].feats.shape[1]),
        "wall_seconds": round(time.time() - t0, 1),
    }
    model.info = {**summ, "cmvn": cfg.features.cmvn}  # steps.align / decode_gmm apply the same normalisation
    write_table(a.exp_dir / "excluded.txt", excluded)
    if excluded:
        log.warning("%d utterance(s) not used for training; see %s", len(excluded), a.exp_dir / "excluded.txt")
    write_json(a.exp_dir / "log" / "passes.json", [dataclasses.asdict(h) for h in history])
    save_gmm(model, a.exp_dir)
    mark_done(done, summ, fingerprint=fp)
    log.info("monophone system done: %s", summ)
    return 0


if __name__ == "__main__":
    run_main(main)
