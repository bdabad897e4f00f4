"""Compute log-mel filterbank features of a Kaldi data directory into Kaldi archives.

    python -m steps.compute_fbank --data-dir data/train --out-dir data/fbank/train --config recipes/digits/config.yaml
        [--nj N] [--set features.num_mel_bins=40]

Writes OUT_DIR/feats.scp (+ feats.JOB.ark/scp), utt2num_frames, excluded.txt, the lazy lhotse manifest of the
set's cuts cuts.jsonl.gz (asrlib.data.cuts) and, last, OUT_DIR/.done; a finished
directory is skipped. ``--job J`` computes job J of the ``--nj`` split alone (its feats.J.* and .job.J.json, as one
cluster job of Kaldi's JOB=1:nj); the run without ``--job`` then reuses the finished jobs and merges them. The
``features`` section of the config gives num_mel_bins, nj and dither; ``data.sample_rate`` the expected sample rate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from asrlib.cli import OUTPUT_DIR_OPTIONS, add_config_args, run_main, setup_logging
from asrlib.config import load_config
from asrlib.errors import AsrError
from asrlib.io.stage import dir_lock, is_done, mark_done


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True, help="Kaldi data directory with wav.scp (and optional segments)")
    p.add_argument("--out-dir", required=True, help="output directory for the archives")
    p.add_argument("--nj", type=int, default=None, help="parallel jobs (overrides features.nj)")
    p.add_argument("--job", type=int, default=None, help="compute only job J of the nj (no merge, no .done)")
    add_config_args(p)
    args = p.parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    out_dir = Path(args.out_dir)
    settings = {
        "num_mel_bins": cfg.features.num_mel_bins,
        "dither": cfg.features.dither,
        "sample_rate": cfg.data.sample_rate,
        "compress": cfg.features.compress,
    }
    marker = out_dir / ".done"
    if is_done(marker):
        import json

        done = json.loads(marker.read_text() or "{}")
        old = {"compress": False, **done.get("settings", settings)}  # markers before features.compress: float32
        if old != settings and {**old, "compress": settings["compress"]} == settings:
            print(f"{out_dir}: features already computed, stored with compress={old['compress']}; kept")
            return 0
        if old != settings:
            raise AsrError(
                f"{out_dir} holds features made with {old}, but the config asks for "
                f"{settings}; delete {out_dir} to recompute"
            )
        print(f"{out_dir}: features already computed ({done.get('num_utts')} utterances), skipping")
        return 0
    nj = args.nj if args.nj is not None else cfg.features.nj
    if args.job is not None:  # the jobs of one dir run side by side: each holds a lock of its own, not the dir's
        with dir_lock(out_dir / ".jobs" / str(args.job)):
            setup_logging(out_dir / "log" / f"compute_fbank.{args.job}.log")
            from asrlib.features.fbank import compute_fbank_job

            marker = compute_fbank_job(args.data_dir, out_dir, args.job, nj, **settings)
        print(f"{out_dir}: job {args.job} of {nj} done ({marker.read_text().strip()})")
        return 0
    setup_logging(out_dir / "log" / "compute_fbank.log")
    from asrlib.features.fbank import compute_fbank

    res = compute_fbank(args.data_dir, out_dir, nj=nj, **settings)
    from asrlib.data.cuts import CUTS_NAME, write_cuts

    write_cuts(args.data_dir, out_dir / CUTS_NAME, out_dir)  # the lazy manifest the trainer reads
    mark_done(
        marker,
        {
            "settings": settings,
            "data_dir": str(args.data_dir),
            "num_utts": res.num_utts,
            "num_excluded": res.num_excluded,
            "num_frames": res.num_frames,
            "seconds": round(res.seconds, 2),
            "nj": nj,
        },
    )
    print(
        f"{out_dir}: {res.num_utts} utterances, {res.num_frames} frames, {res.num_excluded} excluded "
        f"(see {out_dir / 'excluded.txt'}), {res.seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":  # --job: no lock on --out-dir (main takes the job's own)
    run_main(main, writes=() if any(a.split("=")[0] == "--job" for a in sys.argv[1:]) else OUTPUT_DIR_OPTIONS)
