"""Score hypotheses against reference transcripts (WER), Kaldi style.

    python -m steps.score --ref data/test/text --hyp exp/lstm_ctc/decode_test_greedy/hyp.txt \
        --out-dir exp/lstm_ctc/decode_test_greedy

Writes OUT_DIR/wer.txt (``%WER 1.23 [ 4 / 325, 1 ins, 2 del, 1 sub ]`` and ``%SER``), wer.json (totals, the
reference set name, missing utterances) and per_utt (per-utterance alignments), and prints the %WER line.
A reference utterance missing from the hypotheses counts as all deletions and is reported.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import List, Optional

from asrlib.cli import run_main, setup_logging
from asrlib.errors import AsrError
from asrlib.io.atomic import write_json, write_text
from asrlib.io.tables import read_table_dict
from asrlib.score import format_per_utt, score

log = logging.getLogger("steps.score")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", required=True, help="reference Kaldi text file (utt word word ...)")
    p.add_argument("--hyp", required=True, help="hypothesis text file in the same format")
    p.add_argument("--out-dir", required=True, help="where wer.txt, wer.json and per_utt are written")
    p.add_argument("--set-name", default=None, help="data set name for RESULTS.md (default: the ref's directory)")
    p.add_argument(
        "--method",
        default=None,
        help="decoding method for RESULTS.md (default: from OUT_DIR named decode_<set>_<method>)",
    )
    args = p.parse_args(argv)
    setup_logging()
    for f in (args.ref, args.hyp):
        if not Path(f).is_file():
            raise AsrError(f"{f} does not exist")
    out_dir = Path(args.out_dir)
    res = score(read_table_dict(args.ref), read_table_dict(args.hyp))
    set_name = args.set_name or Path(args.ref).resolve().parent.name
    method = args.method
    prefix = f"decode_{set_name}_"
    if method is None and out_dir.resolve().name.startswith(prefix):
        method = out_dir.resolve().name[len(prefix) :]
    summary = res.summary()
    summary.update({"ref": str(args.ref), "hyp": str(args.hyp), "set": set_name, "method": method})
    write_text(out_dir / "per_utt", format_per_utt(res))
    lines = [
        res.kaldi_wer_line(),
        res.kaldi_ser_line(),
        f"Scored {res.num_utts} sentences, {len(res.missing)} not present in hyp.",
    ]
    write_text(out_dir / "wer.txt", "\n".join(lines) + "\n")
    write_json(out_dir / "wer.json", summary)
    if res.missing:
        log.warning(
            "%d reference utterances have no hypothesis (counted as deletions), e.g. %s",
            len(res.missing),
            ", ".join(res.missing[:5]),
        )
    print(res.kaldi_wer_line())
    return 0


if __name__ == "__main__":
    run_main(main)
