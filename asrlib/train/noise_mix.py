"""Noise from a corpus mixed into the training cuts by lhotse (``CutSet.mix``, the transform behind its ``CutMix``):
a lazy cut transform, nothing written. Each batch's mix is drawn from its own RNG, seeded by (seed, epoch, batch
index), so it depends neither on the loader workers nor on where a run was resumed. The mixed cuts' features are
computed from the mixed audio in the loader workers (:class:`asrlib.train.loader.OnTheFlyFbank`); the SNR is that
of lhotse: the cut's energy over the noise's, drawn uniformly from ``[snr_min, snr_max]`` dB."""

from __future__ import annotations

from lhotse import CutSet
from lhotse.cut import MixedCut

from asrlib.data.noise_corpus import open_noise_corpus
from asrlib.errors import AsrError, PathLike
from asrlib.train.batch_plan import batch_rng


class NoiseMix:
    def __init__(self, path: PathLike, sample_rate: int, prob: float, snr_min: float, snr_max: float, seed: int):
        if not 0.0 <= prob <= 1.0 or snr_min > snr_max:
            raise AsrError(
                "noise mixing needs 0 <= train.noise_cuts_prob <= 1 and train.noise_snr_min <= train.noise_snr_max "
                f"(got {prob}, {snr_min}, {snr_max})"
            )
        self.noise = open_noise_corpus(path, sample_rate)
        self.prob, self.snr, self.seed = prob, (snr_min, snr_max), seed

    def __call__(self, cuts: CutSet, epoch: int, index: int) -> CutSet:
        """Batch ``index`` of ``epoch`` with noise mixed into a ``prob`` share of its cuts (ids kept)."""
        rng = batch_rng("noise-mix", self.seed, epoch, index)
        mixed = cuts.mix(
            self.noise,
            snr=self.snr,
            mix_prob=self.prob,
            preserve_id="left",
            seed=rng,
            random_mix_offset=True,
        )
        # a mixed cut's features come from its mixed audio (lhotse would mix stored features, which the noise lacks)
        return CutSet.from_cuts(c.drop_features() if isinstance(c, MixedCut) else c for c in mixed)
