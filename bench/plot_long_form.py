"""Long recordings at a glance: long-form WER minus per-utterance WER of the same words against the recording's
length, one line per trained model, with issue 31's bound (+0.3), from the committed results of `bench/long_form.py`.

    PYTHONPATH=. .venv/bin/python bench/plot_long_form.py [--out bench/results/long_form_gaps.png] [--quick]

Panels: the digits recipe through `asr transcribe` (the seven seeds trained with the recipe's settings,
``long_form_digits_jitter003.json``), and through the mobile bundle's streaming recogniser with endpointing at the
recipe's search, the same seeds' uncompressed int8 networks (what the recipe's bundle carries) and their compressed ones
(``long_form_digits_streaming_folded_seeds.json``, ``long_form_digits_streaming_networks.json``); each with this
checkout's `make run` model in black, with its 95 % intervals (``gap_ci95``) where its results file has them
(``long_form_digits_makerun_ci.json``), and in dashed red the same model on a test set 20 times larger
(``long_form_digits_makerun_bigtest.json``); in blue, the same model through `asr transcribe`'s endpointer (the default
since 2026-12-01: ``long_form_digits_makerun_endpoint.json``, ``..._bigtest_endpoint.json``). Per utterance = the same
recogniser on each utterance of the recording alone (``wer_pieces``: the 60 s and 10 min recordings hold a part of the
test set, in id order, whose WER differs from the whole set's). Nothing is measured here: ``--quick`` is accepted for
the bench convention and changes nothing. Prints one JSON line: per panel, the cells within the bound and the largest
gap at each length.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
GOAL = 0.3  # issue 31: long-form WER <= per-utterance WER + 0.3
LENGTHS = ("60", "600", "3600")

MAKERUN_300 = ("make run model", "long_form_digits_makerun_ci.json")
MAKERUN_6000 = ("make run model, 6000 test utterances", "long_form_digits_makerun_bigtest.json")
ENDPOINT_300 = ("make run model, endpointer (auto)", "long_form_digits_makerun_endpoint.json", "auto")
ENDPOINT_6000 = ("the same, 6000 test utterances", "long_form_digits_makerun_bigtest_endpoint.json", "auto")
# (title, [(results file, run-name pattern, method)], the make-run model's runs: [(label, file, method)])
PANELS = (
    (
        "digits, asr transcribe: 7 seeds of the recipe's training (blank planner)",
        [("long_form_digits_jitter003.json", r"^runs/seed(\d+)$", "blank")],
        [MAKERUN_300 + ("blank",), MAKERUN_6000 + ("blank",), ENDPOINT_300, ENDPOINT_6000],
    ),
    (
        "streaming, endpointing, the recipe's search: uncompressed int8",
        [
            ("long_form_digits_streaming_folded_seeds.json", r"^seeds/(42|7|1|2|3|4)$", "streaming_endpoint"),
            ("long_form_digits_streaming_networks.json", r"^int8/(\d+)$", "streaming_endpoint"),
        ],
        [MAKERUN_300 + ("streaming_endpoint",), MAKERUN_6000 + ("streaming_endpoint",)],
    ),
    (
        "the same, compressed (low rank + pruning, fine-tuned)",
        [
            ("long_form_digits_streaming_networks.json", r"^pruned/(\d+)$", "streaming_endpoint"),
            ("long_form_digits_streaming_folded_seeds.json", r"^seeds/(13)$", "streaming_endpoint"),
        ],
        [("make run model", "long_form_digits_streaming_folded.json", "streaming_endpoint")],
    ),
)


def runs_in(tree, path: Tuple[str, ...] = ()) -> Iterator[Tuple[str, Dict]]:
    """Every run of bench/long_form.py in a results file (a dict with ``per_utt``), with its key path."""
    if isinstance(tree, dict):
        if "per_utt" in tree:
            yield "/".join(path), tree
            return
        for k, v in tree.items():
            yield from runs_in(v, path + (k,))


def gaps(run: Dict, method: str) -> List[float]:
    """Long minus its utterances decoded one by one (``wer_pieces``), %WER, at each of LENGTHS."""
    return [round(run[method][n]["wer"] - run[method][n]["wer_pieces"], 2) for n in LENGTHS]


def intervals(run: Dict, method: str) -> Optional[List[List[float]]]:
    """The 95 % intervals of those gaps (``gap_ci95``), or None where the run has none (results before 2026-11-29)."""
    cells = [run[method][n] for n in LENGTHS]
    return [c["gap_ci95"] for c in cells] if all("gap_ci95" in c for c in cells) else None


Line = Tuple[str, List[float], Optional[List[List[float]]]]  # label, gaps, their intervals (or None)


def panel_series(files, makerun) -> Tuple[Dict[str, List[float]], List[Line]]:
    """The seeds' gaps by label, and the make-run model's lines (each results file holds one run)."""
    series = {}
    for name, pattern, method in files:
        for key, run in runs_in(json.loads((RESULTS / name).read_text())):
            m = re.search(pattern, key)
            if m and method in run:
                series[f"seed {m.group(1)}"] = gaps(run, method)
    lines = []
    for label, name, method in makerun:
        ((_, run),) = runs_in(json.loads((RESULTS / name).read_text()))
        lines.append((label, gaps(run, method), intervals(run, method)))
    return series, lines


def plot(panels, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from asrlib.io.atomic import atomic_path

    x = [int(n) for n in LENGTHS]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), sharey=True)
    labels = list(dict.fromkeys(label for _, series, _ in panels for label in series))  # a model's colour everywhere
    for ax, (title, series, lines) in zip(axes, panels):
        for label, ys in series.items():
            colour = plt.get_cmap("tab10")(labels.index(label) % 10)
            ax.plot(x, ys, "o-", color=colour, alpha=0.6, lw=1, ms=4, label=label)
        for i, (label, ys, ci) in enumerate(lines):
            style = dict(color=("black", "darkred", "royalblue", "navy")[i % 4], lw=2, ls="-" if i % 2 == 0 else "--")
            xs = [v * (1.06**i) for v in x]  # side by side, not on top of each other
            if ci is None:
                ax.plot(xs, ys, marker="s", label=label, **style)
            else:  # 95 % intervals (utterances resampled)
                err = [[g - lo for g, (lo, _) in zip(ys, ci)], [hi - g for g, (_, hi) in zip(ys, ci)]]
                ax.errorbar(xs, ys, yerr=err, marker="s", capsize=4, label=f"{label}, 95 %", **style)
        ax.axhline(GOAL, color="red", ls="--", lw=1, label=f"goal: +{GOAL}")
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_xscale("log")
        ax.set_xticks(x, ["60 s", "10 min", "1 h"])
        ax.minorticks_off()
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.set_ylim(-1.2, 1.2)
        ax.legend(fontsize=7, ncol=3, loc="lower center")
    axes[0].set_ylabel("long-form minus per-utterance %WER, same words (test)")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=RESULTS / "long_form_gaps.png")
    p.add_argument("--quick", action="store_true", help="the same (nothing is measured here)")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    panels, summary = [], {}
    for title, files, makerun in PANELS:
        series, lines = panel_series(files, makerun)
        panels.append((title, series, lines))
        cells = [g for ys in series.values() for g in ys]
        summary[title] = {
            "models": len(series),
            "within_goal": f"{sum(g <= GOAL + 1e-9 for g in cells)} of {len(cells)}",
            "worst": dict(zip(LENGTHS, (max(ys[i] for ys in series.values()) for i in range(len(LENGTHS))))),
            "make_run": {
                label: {n: {"gap": g, "ci95": ci[i] if ci else None} for i, (n, g) in enumerate(zip(LENGTHS, ys))}
                for label, ys, ci in lines
            },
        }
    plot(panels, a.out)
    shown = a.out.resolve().relative_to(ROOT) if a.out.resolve().is_relative_to(ROOT) else a.out
    print(json.dumps({"plot": str(shown), "goal": GOAL, "panels": summary}))


if __name__ == "__main__":
    main()
