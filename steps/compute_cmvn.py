"""Compute global CMVN statistics (Kaldi format, key ``global``) over a feats.scp.

    python -m steps.compute_cmvn --feats data/fbank/train/feats.scp --out-dir data/fbank/train

Writes OUT_DIR/cmvn.ark, cmvn.scp and, last, OUT_DIR/.cmvn.done; a finished directory is skipped.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import List, Optional

from asrlib.cli import run_main, setup_logging
from asrlib.io_utils import AsrError, is_done, mark_done


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--feats", required=True, help="feats.scp to accumulate over (usually the training set)")
    p.add_argument("--out-dir", required=True, help="where cmvn.ark / cmvn.scp are written")
    args = p.parse_args(argv)
    out_dir = Path(args.out_dir)
    marker = out_dir / ".cmvn.done"  # not ".done": the directory is usually the feature directory itself
    feats = Path(args.feats)
    if not feats.is_file():
        raise AsrError(f"{feats} does not exist; run steps.compute_fbank first")
    feats_sha1 = hashlib.sha1(feats.read_bytes()).hexdigest()
    if is_done(marker) and (out_dir / "cmvn.scp").is_file():
        if json.loads(marker.read_text() or "{}").get("feats_sha1") == feats_sha1:
            print(f"{out_dir}: CMVN stats already computed for {feats}, skipping")
            return 0
        print(f"{out_dir}: {feats} changed since CMVN stats were computed; recomputing")
    setup_logging(out_dir / "log" / "compute_cmvn.log")
    from asrlib.features.cmvn import Cmvn, compute_global_cmvn

    stats = compute_global_cmvn(args.feats, out_dir)
    cmvn, _ = Cmvn.from_stats(stats)
    frames = int(stats[0, -1])
    mark_done(marker, {"feats": str(args.feats), "feats_sha1": feats_sha1, "num_frames": frames, "dim": cmvn.dim})
    print(f"{out_dir / 'cmvn.scp'}: {frames} frames, dim {cmvn.dim}, mean of means {cmvn.mean.mean():.3f}, "
          f"mean std {float((1 / cmvn.inv_std).mean()):.3f}")
    return 0


if __name__ == "__main__":
    run_main(main)
