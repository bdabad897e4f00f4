"""Training cuts joined end to end (lhotse's ``Cut.append``: a ``MixedCut`` whose features are the parts' stored
features one after the other (up to float rounding: :func:`joined_features`), and whose supervisions are theirs in
order), so that a recurrent model sees, in training, what it meets in a long recording: one utterance after another,
a voice and a background that change in the middle of its state and of its online CMN's running mean
(docs/long-recordings.md has the measurement). Training on concatenations for long-form speech: Chiu et al., "A
comparison of end-to-end models for long-form speech recognition" (ASRU 2019).

``train.concat_prob`` (CTC training): each batch, with this probability, is joined whole: its cuts, in the sampler's
order, in runs of ``train.concat_max``; the batch keeps its audio, in fewer and longer cuts. A batch is joined
whole or not at all because the sampler's buckets give it cuts of similar lengths, and so do runs of them, where
joining some of its cuts would pad the others to the joined ones' length (joining each cut to the one before with
probability 0.5 made a digits epoch about 35 % slower; docs/long-recordings.md has both measured). The draws come
from an RNG seeded by (seed, epoch, batch index), like the noise mix (:mod:`asrlib.train.noise_mix`), so a resumed
run sees the same batches. Dev batches are not joined.
"""

from __future__ import annotations

from functools import lru_cache, reduce
from typing import Optional

import numpy as np
from lhotse import CutSet
from lhotse.cut import MixedCut, MonoCut
from lhotse.features.base import create_default_feature_extractor
from lhotse.features.mixer import FeatureMixer

from asrlib.errors import AsrError
from asrlib.train.batch_plan import batch_rng


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
        rng = batch_rng("concat", self.seed, epoch, index)
        parts = list(cuts)
        if rng.random() >= self.prob:
            return CutSet.from_cuts(parts)
        groups = [parts[i : i + self.max_cuts] for i in range(0, len(parts), self.max_cuts)]
        return CutSet.from_cuts(reduce(lambda a, b: a.append(b, preserve_id="left"), g) for g in groups)


@lru_cache(maxsize=None)
def _extractor(features_type: str):
    """lhotse's default feature extractor of a feature type (its ``mix`` adds two tracks in that feature domain),
    built once: lhotse's ``MixedCut.load_features`` builds a new one (torch mel filter banks) on every call."""
    return create_default_feature_extractor(features_type)


def joined_features(cut) -> Optional[np.ndarray]:
    """The features of a join (a ``MixedCut`` of ``Cut.append``; also any other mix of cuts with stored features, no
    SNR, none muted, the first one the reference), mixed as lhotse's ``load_features`` mixes them, bit for bit — its
    ``FeatureMixer`` with the same tracks, offsets and frame fitting — but with the feature extractor built once
    (:func:`_extractor`): 0.35 against 0.85-0.88 ms a join of two digits cuts (docs/data.md). The mix gives back the
    tracks' stored frames one after the other within float rounding (each track is padded with -1000 and added in
    the log domain). None for any other cut, and where the frames do not fit the cut: lhotse's own
    ``load_features`` reads those (and says what is wrong)."""
    if not isinstance(cut, MixedCut) or not cut.has_features or len(cut.tracks) < 2:
        return None
    first, rest = cut.tracks[0], cut.tracks[1:]
    for track in cut.tracks:
        if not isinstance(track.cut, MonoCut) or not track.cut.has_features or track.snr is not None or track.mute:
            return None
    if any(track.is_snr_reference for track in rest):
        return None
    mixer = FeatureMixer(
        feature_extractor=_extractor(first.cut.features_type),
        base_feats=first.cut.load_features(),
        frame_shift=first.cut.frame_shift,
    )
    for track in rest:
        mixer.add_to_mix(
            feats=track.cut.load_features(), snr=None, offset=track.offset, sampling_rate=track.cut.sampling_rate
        )
    feats = mixer.mixed_feats
    if len(feats) == cut.num_frames + 1:  # lhotse's fitting of a join to its frame count
        feats = feats[:-1]
    elif len(feats) == cut.num_frames - 1:
        feats = np.concatenate([feats, feats[-1:]])
    return feats if len(feats) == cut.num_frames else None  # else lhotse's load_features says what is wrong
