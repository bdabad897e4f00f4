"""A recipe's training and dev sets opened as ``steps.train`` trains on them: the training set with the ``train``
section's lazy speed perturbation, noise mix, cut joins and boundary jitter; any other set plain. One place, so that
the throughput bench (bench/train_throughput.py) reads the data exactly as training does."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from asrlib.data.corpus import check_speed_factors
from asrlib.errors import PathLike
from asrlib.features.cmvn import check_cmvn_mode, online_prior
from asrlib.train.concat import ConcatCuts
from asrlib.train.jitter import BoundaryJitter
from asrlib.train.loader import CutData, open_set
from asrlib.train.noise_mix import NoiseMix


def open_recipe_set(
    cfg,
    feats_dir: PathLike,
    data_dir: PathLike,
    targets,
    cmvn_scp: PathLike,
    training: bool,
    excluded_path: Optional[PathLike] = None,
) -> CutData:
    """``feats_dir`` / ``data_dir``: one set's feature and data dirs, normalised by ``cmvn_scp`` and
    ``features.cmvn``; ``training``: the set trained on (gets the ``train`` section's augmentations), else a set
    only evaluated (dev)."""
    t = cfg.train
    perturb = training and bool(t.speed_perturb)
    noise = training and bool(t.noise_cuts)
    return open_set(
        Path(feats_dir),
        targets,
        cmvn_scp,
        check_cmvn_mode(cfg.features.cmvn),  # the mean normalisation beside the global one
        online_prior(cfg.features),
        t.loader,
        excluded_path=excluded_path,
        data_dir=Path(data_dir),
        speed_perturb=check_speed_factors(t.speed_perturb) if perturb else (),
        fbank=(cfg.features.num_mel_bins, cfg.data.sample_rate) if perturb or noise else None,
        seed=t.seed,
        noise_mix=NoiseMix(
            t.noise_cuts, cfg.data.sample_rate, t.noise_cuts_prob, t.noise_snr_min, t.noise_snr_max, t.seed
        )
        if noise
        else None,
        concat=ConcatCuts(t.concat_prob, t.concat_max, t.seed) if training and t.concat_prob else None,
        jitter=BoundaryJitter(t.boundary_jitter, t.seed, t.boundary_jitter_mode)
        if training and t.boundary_jitter
        else None,
    )
