"""Collect every EXP_DIR/decode_<set>_<method>/wer.json into EXP_DIR/RESULTS.md and print it (one run's figures;
a recipe's RESULTS.md tables over configurations and seeds are ``python -m steps.results``'s).

python -m steps.make_results --exp-dir exp/lstm_ctc
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Optional

from asrlib.cli import run_main
from asrlib.errors import AsrError
from asrlib.io.atomic import write_text
from asrlib.results.records import read_scores


def render(exp_dir: Path, rows: List[Dict]) -> str:
    sets = sorted({r["set"] for r in rows})
    methods = sorted({r["method"] for r in rows})
    by = {(r["set"], r["method"]): r for r in rows}
    out = [
        f"# Results: {exp_dir}",
        "",
        "%WER by data set (rows) and decoding method (columns):",
        "",
        "| set | " + " | ".join(methods) + " |",
        "|---|" + "---:|" * len(methods),
    ]
    for s in sets:
        cells = [f"{by[(s, m)]['wer']:.2f}" if (s, m) in by else "-" for m in methods]
        out.append(f"| {s} | " + " | ".join(cells) + " |")
    out += [
        "",
        "Details:",
        "",
        "| set | method | %WER | errors | ins | del | sub | #words | %SER | #utts | no hyp | dir |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in sets:
        for m in methods:
            r = by.get((s, m))
            if r:
                out.append(
                    f"| {s} | {m} | {r['wer']:.2f} | {r['errors']} | {r['ins']} | {r['dels']} | "
                    f"{r['subs']} | {r['num_words']} | {r['ser']:.2f} | {r['num_utts']} | "
                    f"{r['missing']} | {r['dir']} |"
                )
    return "\n".join(out) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exp-dir", required=True, help="experiment directory holding decode_<set>_<method>/ dirs")
    args = p.parse_args(argv)
    exp_dir = Path(args.exp_dir)
    rows = read_scores(exp_dir)
    if not rows:
        raise AsrError(f"no {exp_dir}/decode_*/wer.json found; run steps.score first")
    text = render(exp_dir, rows)
    write_text(exp_dir / "RESULTS.md", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    run_main(main)
