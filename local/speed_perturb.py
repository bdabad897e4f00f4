"""Speed-perturb a Kaldi data dir (Kaldi's perturb_data_dir_speed_3way.sh); see asrlib/data/speed_perturb.py.

    python -m local.speed_perturb --src data/train_nosp --dst data/train --wav-dir data/wav_sp \
        [--factors 0.9 1.0 1.1] [--nj 2]

Recipes normally get it from the config (``data.speed_perturb: [0.9, 1.0, 1.1]``, applied by their local.<corpus>
stage 1); this command does it for any data dir, e.g. one brought in with local.kaldi_import.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Optional

from asrlib.cli import run_main, setup_logging
from asrlib.data.speed_perturb import speed_perturb_data_dir


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", type=Path, required=True, help="Kaldi data dir with plain wav.scp paths")
    p.add_argument("--dst", type=Path, required=True, help="the perturbed data dir (all factors together)")
    p.add_argument("--wav-dir", type=Path, required=True, help="where the perturbed wavs go (sp<f>/<rec>.wav)")
    p.add_argument("--factors", type=float, nargs="+", default=[0.9, 1.0, 1.1])
    p.add_argument("--nj", type=int, default=1)
    a = p.parse_args(argv)
    setup_logging()
    n = speed_perturb_data_dir(a.src, a.dst, a.factors, a.wav_dir, a.nj)
    print(f"{a.dst}: {n} utterances (factors {a.factors})")
    return 0


if __name__ == "__main__":
    run_main(main, writes=("--dst", "--wav-dir"))
