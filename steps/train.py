"""Train the LSTM acoustic model with CTC (resumable: rerun continues exactly from the last checkpoint).

    python -m steps.train --config recipes/digits/config.yaml --feats-dir data/fbank --data-dir data \
        --lang-dir data/lang --exp-dir exp/lstm_ctc

With ``train.init: ce`` the LSTM layers start from a cross-entropy model (``--init-model``, steps.train_ce's
final.pt; same ``model`` settings) and only the output layer over tokens + blank is new. With
``train.distill.teacher`` (a trained model's final.pt) the loss adds the KL divergence from the teacher's frame
posteriors (asrlib/train/distill.py).

Several learners (train.dist.algo != local): ``python -m steps.train_dist --num-learners N -- <these arguments>``;
rank 0 writes the checkpoints, final.pt and the done marker, every learner its own log and log/dist.rank<R>.json.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from asrlib.cli import run_main, setup_logging, step_parser
from asrlib.config import load_config
from asrlib.features.cmvn import cmvn_info
from asrlib.errors import AsrError
from asrlib.io.atomic import write_json
from asrlib.io.stage import mark_done
from asrlib.models.device import resolve_device
from asrlib.models.latency import algorithmic_latency_ms
from asrlib.models.lstm import build_model, count_parameters
from asrlib.models.saved import save_model
from asrlib.parallel import make_algo
from asrlib.results.records import RunRecord
from asrlib.train.ce import init_from_ce
from asrlib.train.checkpoint import seed_everything
from asrlib.train.distill import make_criterion
from asrlib.train.loader import CtcTargets, CutData
from asrlib.train.recipe_sets import open_recipe_set
from asrlib.train.trainer import Trainer, is_trained, train_fingerprint

log = logging.getLogger("train")


def main(argv=None):
    p = step_parser(__doc__, ["data-dir", "feats-dir", "lang-dir", "exp-dir"])
    p.add_argument(
        "--init-model",
        type=Path,
        default=None,
        help="with train.init=ce: the cross-entropy model to start from (steps.train_ce's final.pt)",
    )
    a = p.parse_args(argv)
    cfg = load_config(a.config, a.overrides)
    done = a.exp_dir / ".train.done"
    fp = train_fingerprint(cfg)
    if cfg.train.init not in ("random", "ce"):
        raise AsrError(f"train.init must be 'random' or 'ce', not '{cfg.train.init}'")
    if cfg.train.init == "ce":
        if a.init_model is None:
            raise AsrError("train.init is 'ce': pass --init-model (the final.pt of steps.train_ce)")
        fp["init_model"] = str(a.init_model)
    if is_trained(done, fp):
        print(f"train: {a.exp_dir} already trained ({done}); skipping")
        return 0
    if done.is_file():
        raise AsrError(
            f"{a.exp_dir} holds a model trained with other model/train settings; "
            f"use another --exp-dir, or delete {a.exp_dir} to retrain"
        )
    a.exp_dir.mkdir(parents=True, exist_ok=True)
    record = RunRecord("train", "steps.train", argv, cfg, a.config)  # what made this run: EXP_DIR/run.json
    rank = int(os.environ.get("RANK", "0"))  # set by torchrun for distributed training (steps.train_dist)
    setup_logging(a.exp_dir / "log" / ("train.log" if rank == 0 else f"train.rank{rank}.log"))
    torch.set_num_threads(cfg.train.num_threads)
    seed_everything(cfg.train.seed)
    cmvn = a.feats_dir / a.train_set / "cmvn.scp"
    stack = cfg.model.stack

    targets = CtcTargets(a.lang_dir, stack)

    def dataset(name: str) -> CutData:
        excluded = a.exp_dir / f"excluded_{name}.txt" if rank == 0 else None
        return open_recipe_set(cfg, a.feats_dir / name, a.data_dir / name, targets, cmvn, name == a.train_set, excluded)

    train_ds, dev_ds = dataset(a.train_set), dataset(a.dev_set)
    vocab = len(targets.tokens)
    model = build_model(train_ds.feature_dim(), vocab, cfg.model)
    init_info = init_from_ce(model, a.init_model) if cfg.train.init == "ce" else {}
    latency = algorithmic_latency_ms(cfg.model)
    log.info("model: %d parameters, algorithmic latency %s ms", count_parameters(model), latency)
    device = resolve_device(cfg.train.device)  # once, here: the algorithm (NCCL for CUDA learners) and the trainer
    algo = make_algo(cfg.train.dist, device)
    cmvn_stats = train_ds.normalise.cmvn
    criterion = make_criterion(
        cfg.train.distill, cfg.features.cmvn, train_ds.feature_dim(), vocab, stack, cmvn_stats.mean, cmvn_stats.inv_std
    )
    trainer = Trainer(cfg, model, train_ds, dev_ds, a.exp_dir, algo=algo, criterion=criterion, device=device)
    summary = trainer.fit()
    if hasattr(algo, "summary"):  # distributed: per-learner communication volume, time and waiting
        write_json(a.exp_dir / "log" / f"dist.rank{algo.rank}.json", algo.summary())
    if not algo.is_main:
        return 0
    save_model(
        a.exp_dir / "final.pt",
        model,
        train_ds.normalise.cmvn.mean,
        train_ds.normalise.cmvn.inv_std,
        info={
            "lang_dir": str(a.lang_dir),
            "lang_dir_abs": str(Path(a.lang_dir).resolve()),
            **cmvn_info(cfg.features),
            **init_info,
            "algorithmic_latency_ms": latency,
            **summary,
        },
    )
    record.write(a.exp_dir, summary=summary)
    mark_done(done, summary, fingerprint=fp)
    log.info("training done: %s", summary)
    return 0


if __name__ == "__main__":
    run_main(main)
