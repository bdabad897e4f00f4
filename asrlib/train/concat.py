"""Training cuts joined end to end (lhotse's ``Cut.append``: a ``MixedCut`` whose features are the parts' stored
features one after the other, exactly (:func:`joined_features`), and whose supervisions are theirs in order), so that
a recurrent model sees, in training, what it meets in a long recording: one utterance after another, a voice and a
background that change in the middle of its state and of its online CMN's running mean (docs/long-recordings.md has
the measurement). Training on concatenations for long-form speech: Chiu et al., "A comparison of end-to-end models
for long-form speech recognition" (ASRU 2019).

``train.concat_prob`` (CTC training): each batch, with this probability, is joined whole: its cuts, in the sampler's
order, in runs of ``train.concat_max``; the batch keeps its audio, in fewer and longer cuts. A batch is joined
whole or not at all because the sampler's buckets give it cuts of similar lengths, and so do runs of them, where
joining some of its cuts would pad the others to the joined ones' length (joining each cut to the one before with
probability 0.5 made a digits epoch about 35 % slower; docs/long-recordings.md has both measured). The draws come
from an RNG seeded by (seed, epoch, batch index), like the noise mix (:mod:`asrlib.train.noise_mix`), so a resumed
run sees the same batches. Dev batches are not joined.
"""

from __future__ import annotations

import random
from functools import reduce
from typing import Optional

import numpy as np
from lhotse import CutSet
from lhotse.cut import MixedCut, MonoCut
from lhotse.utils import compute_num_frames

from asrlib.errors import AsrError


class ConcatCuts:
    def __init__(self, prob: float, max_cuts: int, seed: int) -> None:
        if not 0.0 <= prob <= 1.0 or max_cuts < 2:
            raise AsrError(
                f"cut concatenation needs 0 <= train.concat_prob <= 1 and train.concat_max >= 2 "
                f"(got {prob}, {max_cuts})"
            )
        self.prob, self.max_cuts, self.seed = prob, max_cuts, seed

    def __call__(self, cuts: CutSet, epoch: int, index: int) -> CutSet:
        """Batch ``index`` of ``epoch``, joined whole with probability ``prob`` (each joined cut keeps its first
        part's id)."""
        rng = random.Random(f"concat/{self.seed}/{epoch}/{index}")
        parts = list(cuts)
        if rng.random() >= self.prob:
            return CutSet.from_cuts(parts)
        groups = [parts[i : i + self.max_cuts] for i in range(0, len(parts), self.max_cuts)]
        return CutSet.from_cuts(reduce(lambda a, b: a.append(b, preserve_id="left"), g) for g in groups)


def joined_features(cut) -> Optional[np.ndarray]:
    """The features of a join (a ``MixedCut`` of ``Cut.append``: tracks with stored features, no SNR, none muted,
    each starting in the frame where the one before ends): its tracks' stored features one after the other, exactly,
    fitted to the join's frame count as lhotse fits it (a frame cut off or repeated). None for any other cut, whose
    features lhotse's ``load_features`` mixes. lhotse gives a join nearly the same frames through its feature-domain
    mixer (each track padded with -1000 and added to the others in the log domain: on the digits features within
    1e-3 of the stored values, the most at the log floor), building a feature extractor for every call: 0.99 ms a
    digits join against 0.25 ms here (docs/data.md)."""
    if not isinstance(cut, MixedCut) or not cut.has_features:
        return None
    parts, at = [], 0
    for track in cut.tracks:
        c = track.cut
        if not isinstance(c, MonoCut) or not c.has_features or track.snr is not None or track.mute:
            return None
        if compute_num_frames(track.offset, c.frame_shift, c.sampling_rate) != at:
            return None  # overlapping or apart: a real mix
        parts.append(np.asarray(c.load_features(), dtype=np.float32))
        if parts[-1].ndim != 2:
            return None
        at += len(parts[-1])
    feats = np.concatenate(parts)
    if len(feats) == cut.num_frames + 1:
        return feats[:-1]
    if len(feats) == cut.num_frames - 1:
        return np.concatenate([feats, feats[-1:]])
    return feats if len(feats) == cut.num_frames else None
