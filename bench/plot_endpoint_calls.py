"""The offline endpointer's call sizes at a glance: for each way of calling the network (first / segment / waiting
seconds, :class:`asrlib.decode.endpoint.CallSizes`), the network's frames per frame of audio against the time of the
60 s recordings side by side with their utterances each as one stream, with issue 31's goal (1.0x) and the chosen
``OFFLINE_CALLS``, from a committed results file of `bench/long_form.py --calls ...` (its ``offline_paired``).

    PYTHONPATH=. .venv/bin/python bench/plot_endpoint_calls.py [--quick]
        [--results bench/results/long_form_digits_makerun_calls.json] [--out bench/results/long_form_calls.png]

The recording as one stream (no segments, not a way to decode it: its WER is the problem issue 31 is about) is drawn
as the control. Nothing is measured here: ``--quick`` is accepted for the bench convention and changes nothing.
Prints one JSON line: the points, the fastest segmenting one and the chosen one's time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
GOAL = 1.0  # issue 31: RTF no worse than per-utterance decoding


def points(paired: Dict, method: str) -> List[Tuple[str, float, float, List[float]]]:
    """``(label, network frames, median time ratio, quartiles)`` of each timed way in an ``offline_paired`` entry;
    ``method`` (the recogniser's own calls, OFFLINE_CALLS) is labelled as the chosen one."""
    out = []
    for name, v in paired.items():
        if not isinstance(v, dict) or "network_frames" not in v:
            continue
        label = "OFFLINE_CALLS (chosen)" if name == method else name.removeprefix("calls ").replace("_", " ")
        out.append((label, float(v["network_frames"]), float(v["median"]), [float(q) for q in v["quartiles"]]))
    return out


def plot(pts: List[Tuple[str, float, float, List[float]]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from asrlib.io.atomic import atomic_path

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (label, frames, t, (lo, hi)) in enumerate(sorted(pts, key=lambda q: q[1])):
        chosen = label.endswith("(chosen)")
        ax.errorbar(
            frames,
            t,
            yerr=[[t - lo], [hi - t]],
            fmt="s" if chosen else "o",
            color="royalblue" if chosen else "0.3",
            ms=7 if chosen else 5,
            capsize=3,
        )
        up = i % 2 == 0  # neighbours' labels above and below, not on top of each other
        where = (-30, -28) if chosen else (4, 8 if up else -14)  # the chosen one's below the rest, in blue
        ax.annotate(
            label,
            (frames, t),
            textcoords="offset points",
            xytext=where,
            fontsize=7,
            color="royalblue" if chosen else "k",
        )
    ax.axhline(GOAL, color="red", ls="--", lw=1, label=f"goal: {GOAL:g}x the utterances' time")
    ax.set_xlabel("fbank frames the network ran, per frame of audio")
    ax.set_ylabel("time, x its utterances as one stream each (median, quartiles)")
    ax.set_yscale("log")
    ticks = [0.6, 0.8, 1.0, 1.2, 1.4, 2.0, 3.0]
    ax.set_yticks(ticks, [f"{v:g}x" for v in ticks])
    ax.minorticks_off()
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=RESULTS / "long_form_digits_makerun_calls.json")
    p.add_argument("--out", type=Path, default=RESULTS / "long_form_calls.png")
    p.add_argument("--quick", action="store_true", help="the same (nothing is measured here)")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    figures = json.loads(a.results.read_text())
    paired = figures.get("offline_paired")
    if not paired:
        raise SystemExit(f"{a.results}: no offline_paired figures (bench/long_form.py --calls ... writes them)")
    pts = points(paired, paired.get("method", "auto"))
    title = (
        f"asr transcribe's endpointer, {paired['length']} s recordings of {figures.get('utterances', '?')} "
        f"utterances, {paired['pairs']} pairs ({figures.get('date', '?')})"
    )
    plot(pts, title, a.out)
    fastest = min((q for q in pts if q[0] != "one stream"), key=lambda q: q[2])  # one stream: the control
    chosen = next((q for q in pts if q[0].endswith("(chosen)")), None)
    shown = a.out.resolve().relative_to(ROOT) if a.out.resolve().is_relative_to(ROOT) else a.out
    print(
        json.dumps(
            {
                "plot": str(shown),
                "goal": GOAL,
                "points": {q[0]: {"network_frames": q[1], "time": q[2]} for q in pts},
                "fastest": fastest[0],
                "chosen": chosen[2] if chosen else None,
            }
        )
    )


if __name__ == "__main__":
    main()
