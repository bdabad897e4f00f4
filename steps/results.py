"""A recipe's results: rows collected from exp dirs into its tables, and RESULTS.md built from them.

    python -m steps.results collect --exp recipes/digits/exp/lstm_ctc --recipe recipes/digits \
        --table 01_default --label "LSTM-CTC, TLG" [--title "..."] [--config C] [--set K=V ...] [--seed S]
    python -m steps.results build recipes/digits [--check]
    python -m steps.results recipes/digits            (the same as build)

``collect`` reads EXP's run.json and decode_*/wer.json and adds the row (label, seed) to
``recipes/<corpus>/results/<table>.json``, replacing the row of the same label and seed; ``build`` writes
``recipes/<corpus>/RESULTS.md`` from ``results/intro.md`` and the tables; ``--check`` writes nothing and exits 1
when RESULTS.md is not what the records give. Format and rules: docs/results.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from asrlib.cli import run_main
from asrlib.results.records import row_from_exp
from asrlib.results.table import add_row, build, table_path


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] not in ("collect", "build", "-h", "--help"):
        args = ["build", *args]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="add or replace the row of one exp dir in a recipe's table")
    c.add_argument("--exp", type=Path, required=True, help="the experiment dir (decode_*/wer.json, run.json)")
    c.add_argument("--recipe", type=Path, required=True, help="recipes/<corpus>")
    c.add_argument("--table", required=True, help="NN_slug: results/NN_slug.json")
    c.add_argument("--label", required=True, help="the configuration's name in the table")
    c.add_argument("--title", default=None, help="the table's heading (needed to start a new table)")
    c.add_argument("--config", default=None, help="run.sh --config (default: run.json's, else config.yaml)")
    c.add_argument("--set", dest="overrides", action="append", default=None, metavar="K=V",
                   help="run.sh --set values of the run (default: run.json's, less seed and threads)")  # fmt: skip
    c.add_argument("--seed", type=int, default=None, help="train.seed, for a run with neither run.json nor .train.done")
    c.add_argument("--test-tuned", action="store_true",
                   help="the test set informed a choice of this configuration (marked in the table)")  # fmt: skip
    b = sub.add_parser("build", help="write recipes/<corpus>/RESULTS.md from results/")
    b.add_argument("recipe", type=Path, help="recipes/<corpus>")
    b.add_argument("--check", action="store_true", help="write nothing; exit 1 if RESULTS.md is not up to date")
    a = p.parse_args(args)
    if a.cmd == "collect":
        row = row_from_exp(a.exp, a.recipe, a.label, a.config, a.overrides, a.seed, test_decoded_once=not a.test_tuned)
        path = table_path(a.recipe, a.table)
        add_row(path, row, a.title)
        print(f"{path}: {a.label!r} seed {row['seed']}: {row['wer']}")
        return 0
    same = build(a.recipe, check=a.check)
    out = a.recipe / "RESULTS.md"
    if a.check and not same:
        print(f"{out} is not what {a.recipe}/results/ gives: run python -m steps.results build {a.recipe}",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"{out}: {'up to date' if same else 'written'}")
    return 0


if __name__ == "__main__":
    run_main(main, writes=())
