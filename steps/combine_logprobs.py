"""Score fusion: combine the CTC log-posteriors of several models of the same token set into one archive, which
``steps.decode`` then searches like any other (Kaldi's ``steps/nnet3/decode_score_fusion.sh``, for CTC).

    python -m steps.combine_logprobs --logprobs exp/a/logprobs_test/logprobs.scp exp/b/logprobs_test/logprobs.scp \
        --out-dir exp/fusion/logprobs_test [--rule prob|logprob] [--weights 0.5 0.5]

``--rule prob`` (default) averages the posteriors, log(sum_i w_i p_i); ``logprob`` averages the log-posteriors,
sum_i w_i log p_i, renormalised per frame (a product of experts). Weights default to equal and are normalised to
sum 1. Every input must hold the same utterances with the same number of frames and tokens (models with the same
``model.stack`` and tokens.txt); a mismatch stops with the utterance and the files named. A finished output folder
is skipped (``.done`` records the inputs, their sizes and times, the rule and the weights).

Separately trained CTC models put their label spikes on different frames, and a frame-level average of
posteriors then favours blank: on FSDD (3 seeds of the digits_fsdd BLSTM per fold, recipes/fsdd/README.md) the
fused posteriors searched with the word-loop grammar deleted up to 149 of 500 words, while through the
``one_word`` grammar (every utterance one word, as FSDD is) the same fusion gained 1.5 points of word accuracy over
the average single model. Use it where the grammar fixes the word count, or on models with aligned spikes.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Sequence

import numpy as np

from asrlib.cli import run_main
from asrlib.errors import AsrError
from asrlib.io.files import file_identity
from asrlib.io.stage import is_done, mark_done
from asrlib.kaldi_io import open_matching_readers, write_matrices

RULES = ("prob", "logprob")


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    return np.squeeze(np.log(np.exp(x - top).sum(axis=axis, keepdims=True)) + top, axis=axis)


def fuse(mats: Sequence[np.ndarray], weights: Sequence[float], rule: str = "prob") -> np.ndarray:
    """Combine per-frame log-posteriors ``mats`` (frames x tokens each) with ``weights`` (summing to 1)."""
    stack = np.stack([np.asarray(m, dtype=np.float64) for m in mats])
    w = np.asarray(weights, dtype=np.float64).reshape(-1, 1, 1)
    if rule == "prob":
        with np.errstate(divide="ignore"):  # a weight of 0: log 0 = -inf, no term
            out = _logsumexp(stack + np.log(w), axis=0)  # log sum_i w_i p_i
    elif rule == "logprob":
        x = (stack * w).sum(axis=0)  # sum_i w_i log p_i, then renormalised per frame
        out = x - _logsumexp(x, axis=1)[:, None]
    else:
        raise AsrError(f"--rule must be one of {', '.join(RULES)}, not {rule!r}")
    return out.astype(np.float32)


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--logprobs", type=Path, nargs="+", required=True, help="logprobs.scp of each model")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--rule", choices=RULES, default="prob")
    p.add_argument("--weights", type=float, nargs="+", help="one per input (default: equal)")
    a = p.parse_args(argv)
    if len(a.logprobs) < 2:
        raise AsrError("give at least two --logprobs archives to combine")
    weights = a.weights or [1.0] * len(a.logprobs)
    if len(weights) != len(a.logprobs) or min(weights) < 0 or sum(weights) <= 0:
        raise AsrError(f"--weights needs {len(a.logprobs)} non-negative values (one per --logprobs), not {weights}")
    weights = [w / sum(weights) for w in weights]
    for f in a.logprobs:
        if not f.is_file():
            raise AsrError(f"{f} does not exist (run steps.compute_logprobs for that model first)")
    done = a.out_dir / ".done"
    fp = {"inputs": [file_identity(f) for f in a.logprobs], "rule": a.rule, "weights": weights}
    if is_done(done, fingerprint=fp):
        print(f"combine_logprobs: {a.out_dir} complete; skipping")
        return 0
    readers, keys = open_matching_readers(a.logprobs)  # a corrupt entry is an AsrError naming file and key

    def items():
        for k in keys:
            mats = [r[k] for r in readers]
            shapes = {m.shape for m in mats}
            if len(shapes) != 1:
                raise AsrError(
                    f"utterance {k}: the models' log-posteriors have different shapes "
                    f"{[m.shape for m in mats]} in {[str(f) for f in a.logprobs]} (same model.stack and "
                    "tokens.txt needed)"
                )
            yield k, fuse(mats, weights, a.rule)

    n = write_matrices(a.out_dir / "logprobs.ark", items())
    mark_done(done, {"utterances": n, "models": len(a.logprobs)}, fingerprint=fp)
    print(f"combine_logprobs: {n} utterances from {len(a.logprobs)} models ({a.rule}) -> {a.out_dir}")
    return 0


if __name__ == "__main__":
    run_main(main)
