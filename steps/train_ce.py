"""Train the LSTM acoustic model with frame-level cross-entropy on GMM alignments (resumable, same loop as CTC).

    python -m steps.train_ce --config recipes/digits/config.yaml --feats-dir data/fbank --ali-dir exp/mono_ali \
        --exp-dir exp/ce

Targets: ``<ali-dir>/<set>/pdf.scp`` from steps.align (one pdf id per 10 ms frame, subsampled to the network's
frame rate: the middle frame of each stack, see asrlib/train/ce.py). The model is the ``model`` section's LSTM
with an output layer over the GMM's pdfs; the ``train`` section's optimiser, batching and augmentation are used
with ``ce.epochs`` and ``ce.lr``. Dev loss and dev frame accuracy are logged every epoch (log/train.log,
metrics.json, TensorBoard). ``final.pt`` initialises CTC training with ``train.init: ce``.
"""

from __future__ import annotations

import dataclasses
import json
import logging

import torch

from asrlib.cli import run_main, setup_logging, step_parser
from asrlib.config import load_config
from asrlib.features.cmvn import check_cmvn_mode
from asrlib.errors import AsrError
from asrlib.io.stage import mark_done
from asrlib.models.device import resolve_device
from asrlib.models.lstm import build_model, count_parameters
from asrlib.models.saved import save_model
from asrlib.train.ce import CeCriterion, FrameTargets
from asrlib.results.records import RunRecord
from asrlib.train.loader import CutData, open_set
from asrlib.train.checkpoint import seed_everything
from asrlib.train.trainer import Trainer, is_trained, train_fingerprint

log = logging.getLogger("train_ce")


def main(argv=None):
    p = step_parser(__doc__, ["feats-dir", "ali-dir", "exp-dir"])
    a = p.parse_args(argv)
    cfg = load_config(a.config, a.overrides)
    cfg = dataclasses.replace(
        cfg, train=dataclasses.replace(cfg.train, epochs=cfg.ce.epochs, lr=cfg.ce.lr, init="random")
    )
    info_path = a.ali_dir / a.train_set / "info.json"
    if not info_path.is_file():
        raise AsrError(f"{info_path} does not exist; run steps.align first")
    ali_info = json.loads(info_path.read_text())
    done = a.exp_dir / ".train.done"
    fp = {
        **train_fingerprint(cfg),
        "alignments": {k: ali_info[k] for k in ("utterances", "frames", "loglike_per_frame", "num_pdfs")},
    }
    if is_trained(done, fp):
        print(f"train_ce: {a.exp_dir} already trained ({done}); skipping")
        return 0
    if done.is_file():
        raise AsrError(
            f"{a.exp_dir} holds a model trained with other settings or alignments; use another "
            f"--exp-dir, or delete {a.exp_dir} to retrain"
        )
    a.exp_dir.mkdir(parents=True, exist_ok=True)
    record = RunRecord("train_ce", "steps.train_ce", argv, cfg, a.config)  # what made this run: EXP_DIR/run.json
    setup_logging(a.exp_dir / "log" / "train.log")
    torch.set_num_threads(cfg.train.num_threads)
    seed_everything(cfg.train.seed)
    num_pdfs = int(ali_info["num_pdfs"])
    if cfg.train.noise_cuts or cfg.train.speed_perturb:  # their cuts' frames would not match the alignments
        log.warning("train.noise_cuts and train.speed_perturb apply to CTC training (steps.train), not to this one")
    cmvn = a.feats_dir / a.train_set / "cmvn.scp"
    cmn = check_cmvn_mode(cfg.features.cmvn)
    stack = cfg.model.stack

    def dataset(name: str) -> CutData:
        targets = FrameTargets(a.ali_dir / name, num_pdfs, stack=stack)
        return open_set(
            a.feats_dir / name, targets, cmvn, cmn, None, cfg.train.loader, a.exp_dir / f"excluded_{name}.txt"
        )

    train_ds, dev_ds = dataset(a.train_set), dataset(a.dev_set)
    model = build_model(train_ds.feature_dim(), num_pdfs, cfg.model)
    log.info("CE model: %d parameters, %d pdf targets", count_parameters(model), num_pdfs)
    device = resolve_device(cfg.train.device)
    trainer = Trainer(cfg, model, train_ds, dev_ds, a.exp_dir, criterion=CeCriterion(stack), device=device)
    summary = trainer.fit()
    dev = [m for m in trainer.metrics if m["kind"] == "dev"]
    summary["final_dev_frame_acc"] = dev[-1].get("frame_acc") if dev else None
    save_model(
        a.exp_dir / "final.pt",
        model,
        train_ds.normalise.cmvn.mean,
        train_ds.normalise.cmvn.inv_std,
        info={
            "criterion": "ce",
            "cmvn": cfg.features.cmvn,
            "ali_dir": str(a.ali_dir),
            "num_pdfs": num_pdfs,
            "pdf_phones": ali_info.get("pdf_phones"),
            **summary,
        },
    )
    record.write(a.exp_dir, summary=summary)
    mark_done(done, summary, fingerprint=fp)
    log.info("cross-entropy training done: %s", summary)
    return 0


if __name__ == "__main__":
    run_main(main)
