"""Loss curves as a PNG (train loss per logged step, dev loss per epoch)."""

from __future__ import annotations

from pathlib import Path
from typing import List

from asrlib.io.atomic import atomic_path


def plot_losses(metrics: List[dict], out_png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tr = [(m["step"], m["loss"]) for m in metrics if m["kind"] == "train"]
    dv = [(m["step"], m["loss"]) for m in metrics if m["kind"] == "dev" and m["loss"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4))
    if tr:
        ax.plot(*zip(*tr), label="train CTC loss / frame", alpha=0.7)
    if dv:
        ax.plot(*zip(*dv), "o-", label="dev CTC loss / frame")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
