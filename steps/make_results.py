"""Collect every EXP_DIR/decode_<set>_<method>/wer.json into EXP_DIR/RESULTS.md and print it.

python -m steps.make_results --exp-dir exp/lstm_ctc
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from asrlib.cli import run_main
from asrlib.errors import AsrError
from asrlib.io.atomic import write_text


def _set_and_method(decode_dir: Path, info: Dict) -> Tuple[str, str]:
    """Set and method from wer.json, else from the directory name ``decode_<set>_<method>``."""
    name = decode_dir.name[len("decode_") :]
    set_name, method = info.get("set"), info.get("method")
    if set_name and not method and name.startswith(set_name + "_"):
        method = name[len(set_name) + 1 :]
    if not set_name or not method:
        set_name, _, method = name.partition("_")
    return set_name, method or "-"


def collect(exp_dir: Path) -> List[Dict]:
    rows = []
    for f in sorted(exp_dir.glob("decode_*/wer.json")):
        try:
            info = json.loads(f.read_text())
            set_name, method = _set_and_method(f.parent, info)
            rows.append(
                {
                    "set": set_name,
                    "method": method,
                    "dir": f.parent.name,
                    **{k: info[k] for k in ("wer", "ins", "dels", "subs", "errors", "num_words", "ser", "num_utts")},
                }
            )
            rows[-1]["missing"] = len(info.get("missing", []))
            if any((r["set"], r["method"]) == (set_name, method) for r in rows[:-1]):
                rows[-1]["method"] = f"{method} ({f.parent.name})"  # keep both, distinguishable
        except (ValueError, KeyError) as e:
            raise AsrError(f"{f}: not a wer.json written by steps.score ({e}); rerun steps.score") from None
    return rows


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
    rows = collect(exp_dir)
    if not rows:
        raise AsrError(f"no {exp_dir}/decode_*/wer.json found; run steps.score first")
    text = render(exp_dir, rows)
    write_text(exp_dir / "RESULTS.md", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    run_main(main)
