"""Run the acoustic model over a feature archive and write CTC log-posteriors as a Kaldi archive.

    python -m steps.compute_logprobs --model exp/lstm_ctc/final.pt --feats data/fbank/test/feats.scp \
        --out-dir exp/lstm_ctc/logprobs_test [--device auto]

The network runs on ``--device`` (the recipe passes ``train.device``), in fp32.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tqdm import tqdm

from asrlib.cli import run_main
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table
from asrlib.features.cmvn import open_features
from asrlib.kaldi_io import write_matrices
from asrlib.models.device import resolve_device
from asrlib.models.saved import load_model


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--feats", type=Path, required=True, help="feats.scp")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--num-threads", type=int, default=2)
    p.add_argument("--device", default="auto", help="auto (CUDA if there is one) | cpu | cuda | cuda:N (train.device)")
    a = p.parse_args(argv)
    done = a.out_dir / ".done"
    st = a.model.stat() if a.model.is_file() else None
    fp = {"model": str(a.model), "model_bytes": st and st.st_size, "model_mtime_ns": st and st.st_mtime_ns}
    if is_done(done, fingerprint=fp):
        print(f"compute_logprobs: {a.out_dir} complete; skipping")
        return 0
    torch.set_num_threads(a.num_threads)
    model = load_model(a.model).to(resolve_device(a.device, "--device"))
    reader = open_features(a.feats, model.cmn)  # the mean normalisation the model was trained with, if any
    keys = [k for k, _ in read_table(a.feats)]

    def items():
        for k in tqdm(keys, desc=f"log-probs {a.feats.parent.name}", unit="utt", mininterval=2.0):
            yield k, model.log_probs(reader[k])

    write_matrices(a.out_dir / "logprobs.ark", items())
    mark_done(done, {"utterances": len(keys)}, fingerprint=fp)
    return 0


if __name__ == "__main__":
    run_main(main)
