"""Compute CMVN statistics (Kaldi format) over a feats.scp: global (key ``global``) and/or per speaker.

    python -m steps.compute_cmvn --feats data/fbank/train/feats.scp --out-dir data/fbank/train      # global
    python -m steps.compute_cmvn --feats data/fbank/train/feats.scp --utt2spk data/train/utt2spk \
        --out-dir data/fbank/train                  # features.cmvn: speaker, training set: per speaker + global
    python -m steps.compute_cmvn --feats data/fbank/test/feats.scp --utt2spk data/test/utt2spk \
        --out-dir data/fbank/test --speaker-only    # features.cmvn: speaker, any other set
    python -m steps.compute_cmvn --feats data/fbank/train/feats.scp --cmn utterance \
        --out-dir data/fbank/train                  # features.cmvn: utterance: global stats only

Per-speaker stats go beside the feats.scp (cmvn_spk.ark/scp, keyed by speaker, + the utt2spk used); the global
stats (OUT_DIR/cmvn.ark, cmvn.scp) are then computed over the speaker-mean-normalised features. With ``--cmn
utterance`` they are computed over the features minus each utterance's own mean; that mode needs no other
statistics. OUT_DIR/.cmvn.done
is written last; a finished directory is skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import List, Optional

from asrlib.cli import run_main, setup_logging
from asrlib.errors import AsrError
from asrlib.io.stage import is_done, mark_done


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--feats", required=True, help="feats.scp to accumulate over (usually the training set)")
    p.add_argument("--out-dir", required=True, help="where cmvn.ark / cmvn.scp are written")
    p.add_argument("--utt2spk", help="per-speaker statistics too (features.cmvn: speaker), speakers from this file")
    p.add_argument("--speaker-only", action="store_true", help="with --utt2spk: no global statistics (dev/test)")
    p.add_argument(
        "--cmn",
        choices=("utterance",),
        default=None,
        help="features.cmvn utterance: global stats over utterance-mean-normalised features",
    )
    args = p.parse_args(argv)
    if args.speaker_only and not args.utt2spk:
        p.error("--speaker-only needs --utt2spk")
    if args.cmn and args.utt2spk:
        p.error("--cmn and --utt2spk are two different mean normalisations; give one")
    out_dir = Path(args.out_dir)
    marker = out_dir / ".cmvn.done"  # not ".done": the directory is usually the feature directory itself
    feats = Path(args.feats)
    if not feats.is_file():
        raise AsrError(f"{feats} does not exist; run steps.compute_fbank first")
    if args.utt2spk and not Path(args.utt2spk).is_file():
        raise AsrError(f"{args.utt2spk} does not exist; per-speaker CMVN needs the data dir's utt2spk")
    mode = (
        "speaker-only"
        if args.speaker_only
        else "speaker+global"
        if args.utt2spk
        else f"{args.cmn}+global"
        if args.cmn
        else "global"
    )
    feats_sha1 = hashlib.sha1(
        feats.read_bytes() + (Path(args.utt2spk).read_bytes() if args.utt2spk else b"")
    ).hexdigest()
    from asrlib.features.cmvn import SPEAKER_STATS, Cmvn, compute_global_cmvn, compute_speaker_cmvn

    outputs = ([] if args.speaker_only else [out_dir / "cmvn.scp"]) + (
        [feats.parent / SPEAKER_STATS] if args.utt2spk else []
    )
    if is_done(marker) and all(o.is_file() for o in outputs):
        done = json.loads(marker.read_text() or "{}")
        if done.get("feats_sha1") == feats_sha1 and done.get("mode", "global") == mode:
            print(f"{out_dir}: CMVN stats already computed for {feats}, skipping")
            return 0
        print(f"{out_dir}: {feats} (or the CMVN mode) changed since the stats were computed; recomputing")
    setup_logging(out_dir / "log" / "compute_cmvn.log")

    info = {"feats": str(args.feats), "feats_sha1": feats_sha1, "mode": mode}
    if args.utt2spk:
        spk = compute_speaker_cmvn(feats, args.utt2spk)
        info["speakers"] = len(spk)
        print(f"{feats.parent / SPEAKER_STATS}: {len(spk)} speakers")
    if not args.speaker_only:
        stats = compute_global_cmvn(args.feats, out_dir, cmn="speaker" if args.utt2spk else args.cmn or "")
        cmvn, _ = Cmvn.from_stats(stats)
        info.update(num_frames=int(stats[0, -1]), dim=cmvn.dim)
        print(
            f"{out_dir / 'cmvn.scp'}: {info['num_frames']} frames, dim {cmvn.dim}, mean of means "
            f"{cmvn.mean.mean():.3f}, mean std {float((1 / cmvn.inv_std).mean()):.3f}"
        )
    mark_done(marker, info)
    return 0


if __name__ == "__main__":
    run_main(main)
