"""A picture of a few alignments: the filterbank with the aligned phone boundaries and labels."""

from __future__ import annotations

from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np

from asrlib.io.atomic import atomic_path

Segment = Tuple[str, int, int]  # (label, first frame, frames)


def plot_alignments(
    items: Sequence[Tuple[str, np.ndarray, List[Segment], List[Segment]]], path: Path, frame_shift: float = 0.01
) -> None:
    """``items``: (title, fbank (T, D), phone segments, word segments). One panel per utterance, PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(items), 1, figsize=(12, 2.6 * len(items)), squeeze=False)
    for ax, (title, fbank, phones, words) in zip(axes[:, 0], items):
        t = len(fbank) * frame_shift
        ax.imshow(fbank.T, origin="lower", aspect="auto", cmap="viridis", extent=(0, t, 0, fbank.shape[1]))
        d = fbank.shape[1]
        for label, b, n in phones:
            ax.axvline(b * frame_shift, color="white", lw=0.8)
            ax.text(
                (b + n / 2) * frame_shift, d * 0.88, label, color="white", ha="center", fontsize=8, fontweight="bold"
            )
        for label, b, n in words:
            ax.axvline(b * frame_shift, color="red", lw=1.6)
            ax.text((b + n / 2) * frame_shift, d * 0.05, label, color="red", ha="center", fontsize=9, fontweight="bold")
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("mel bin")
    axes[-1, 0].set_xlabel("time (s)")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
