"""Unsupervised speaker adaptation of a trained CTC model: a per-speaker affine transform of its input, estimated on
the speaker's own recordings against a first decoding pass (two-pass decoding, like Kaldi's decode_fmllr.sh).

Kaldi adapts a GMM system to a test speaker by decoding once, estimating a feature-space transform (fMLLR) that
makes the speaker's features fit the first-pass transcripts better, and decoding again. The neural counterpart
here is a linear input network (LIN): ``x' = A x + b`` on the network's normalised input frames, ``A`` starting at
the identity and ``b`` at zero, the network frozen, trained for ``adapt.epochs`` passes over the speaker's
utterances with Adam at ``adapt.lr`` to lower the CTC loss of the first-pass words (each word's pronunciation the
one the model scores best). No reference transcript is used: only the speaker's audio and the first pass, as with
per-speaker CMN. ``A | b`` is a D x (D+1) matrix per speaker, the layout of Kaldi's fMLLR transforms (trans.ark).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from asrlib.config import AdaptConfig
from asrlib.models.saved import SavedModel


class InputTransform(torch.nn.Module):
    """``x -> x A^T + b`` over the last dimension; identity at the start."""

    def __init__(self, dim: int):
        super().__init__()
        self.A = torch.nn.Parameter(torch.eye(dim))
        self.b = torch.nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.A.T + self.b

    def matrix(self) -> np.ndarray:
        """``[A | b]``, D x (D+1), as Kaldi stores an affine feature transform."""
        return torch.cat([self.A, self.b[:, None]], 1).detach().cpu().numpy().astype(np.float32)


def _ctc_nll(logp: torch.Tensor, targets: Sequence[int]) -> float:
    dev = logp.device
    t = torch.tensor(list(targets), dtype=torch.long, device=dev)
    n, m = torch.tensor([logp.shape[0]], device=dev), torch.tensor([len(t)], device=dev)
    return float(torch.nn.functional.ctc_loss(logp, t, n, m, reduction="sum"))


def best_pronunciations(logp: torch.Tensor, words: Sequence[str], lexicon: Dict[str, List[List[int]]]) -> List[int]:
    """The token sequence of ``words`` whose CTC score under ``logp`` [T, V] is best, choosing each word's
    pronunciation in turn with the others fixed (one coordinate pass; exact for one-word utterances)."""
    choice = [0] * len(words)

    def seq(ch):
        return [t for w, c in zip(words, ch) for t in lexicon[w][c]]

    for i, w in enumerate(words):
        if len(lexicon[w]) > 1:
            choice[i] = min(
                range(len(lexicon[w])), key=lambda c: _ctc_nll(logp, seq(choice[:i] + [c] + choice[i + 1 :]))
            )
    return seq(choice)


def pack_by_length(lengths: Sequence[int], max_padded_frames: int, seed: int = 0) -> List[List[int]]:
    """Indices of in-memory utterances packed into batches by length under a padded-frame budget (longest x count),
    in a seeded random order: a speaker's few utterances, not a corpus (that is asrlib.train.loader's sampler)."""
    batches: List[List[int]] = []
    cur: List[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        if cur and lengths[i] * (len(cur) + 1) > max_padded_frames:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    random.Random(seed).shuffle(batches)
    return batches


@dataclass
class SpeakerResult:
    transform: np.ndarray  # D x (D+1)
    loss_before: float  # CTC loss per frame of the first-pass targets, before and after
    loss_after: float
    utterances: int


def adapt_speaker(
    saved: SavedModel, inputs: Sequence[np.ndarray], targets: Sequence[Sequence[int]], cfg: AdaptConfig
) -> SpeakerResult:
    """Estimate one speaker's input transform: ``inputs`` the network-input frames of the speaker's utterances
    (``saved.normalise`` applied), ``targets`` their first-pass token sequences. Runs on the model's device."""
    model, dev = saved.model, saved.device
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    lin = InputTransform(inputs[0].shape[1]).to(dev)
    opt = torch.optim.Adam(lin.parameters(), lr=cfg.lr)
    batches = pack_by_length([len(x) for x in inputs], cfg.batch_frames)

    def batch_loss(idx: List[int]) -> Tuple[torch.Tensor, int]:
        xs = [torch.from_numpy(np.asarray(inputs[i], np.float32)) for i in idx]
        x = torch.nn.utils.rnn.pad_sequence(xs, batch_first=True).to(dev)
        logp, out_len = model(lin(x), torch.tensor([len(v) for v in xs], device=dev))
        tg = torch.tensor([t for i in idx for t in targets[i]], dtype=torch.long, device=dev)
        tl = torch.tensor([len(targets[i]) for i in idx], device=dev)
        nll = torch.nn.functional.ctc_loss(logp.transpose(0, 1), tg, out_len, tl, reduction="sum", zero_infinity=True)
        return nll, int(out_len.sum())

    def total() -> float:
        with torch.no_grad():
            parts = [batch_loss(b) for b in batches]
        return sum(float(n) for n, _ in parts) / max(1, sum(f for _, f in parts))

    before = total()
    for _ in range(cfg.epochs):
        for b in batches:
            opt.zero_grad()
            nll, frames = batch_loss(b)
            (nll / max(1, frames)).backward()
            opt.step()
    return SpeakerResult(lin.matrix(), before, total(), len(inputs))


def apply_transform(matrix: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    """Network-input frames [T, D] through a D x (D+1) ``[A | b]``."""
    return (inputs @ matrix[:, :-1].T + matrix[:, -1]).astype(np.float32)
