"""Compare finished training runs (experiment dirs) on the same data: parameters, steps and training time to reach a
fixed dev CTC loss, final dev loss, and the %WER of every scored decode dir.

    python bench/compare_runs.py recipes/digits/exp/lstm_ctc recipes/digits/exp/lstm_ctc_ceinit --target-loss 0.06

Reads each dir's ``metrics.json`` (dev loss per epoch, written by the trainer), ``log/train.log`` (time stamps),
``final.pt`` (parameters) and ``decode_*/wer.json`` (steps.score). Nothing is trained here: ``--quick`` is accepted
for the bench convention and changes nothing; without experiment dirs it summarises the digits
recipe's. Prints a Markdown table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import timedelta
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TIME_RE = re.compile(r"^(\d\d):(\d\d):(\d\d) ")


def log_span_seconds(log: Path) -> Optional[float]:
    """Seconds from the first to the last time-stamped line of a train.log (midnight wrap-around handled)."""
    stamps = []
    for line in log.read_text(errors="replace").splitlines():
        m = TIME_RE.match(line)
        if m:
            stamps.append(timedelta(hours=int(m[1]), minutes=int(m[2]), seconds=int(m[3])))
    if len(stamps) < 2:
        return None
    total, prev = 0.0, stamps[0]
    for t in stamps[1:]:
        total += (t - prev).total_seconds() % 86400
        prev = t
    return total


def summarise(exp: Path, target: float) -> Dict:
    from asrlib.models.lstm import count_parameters
    from asrlib.models.saved import load_model

    dev = [r for r in json.loads((exp / "metrics.json").read_text()) if r["kind"] == "dev"]
    hit = next((r for r in dev if r["loss"] <= target), None)
    wers = {}
    for w in sorted(exp.glob("decode_*/wer.json")):
        wers[w.parent.name.removeprefix("decode_")] = round(json.loads(w.read_text())["wer"], 2)
    model = load_model(exp / "final.pt").model
    cfg = model.cfg
    return {
        "exp": str(exp),
        "parameters": count_parameters(model),
        "model": f"{cfg.num_layers}x{cfg.hidden_size}"
        + (f"/p{cfg.proj_size}" if cfg.proj_size else "")
        + (" peephole" if cfg.peephole else ""),
        "epochs": len(dev),
        "steps": dev[-1]["step"] if dev else 0,
        "steps_to_target": hit["step"] if hit else None,
        "epoch_to_target": hit["epoch"] if hit else None,
        "final_dev_loss": round(dev[-1]["loss"], 4) if dev else None,
        "dev_loss_by_epoch": [round(r["loss"], 4) for r in dev],
        "train_seconds": log_span_seconds(exp / "log" / "train.log"),
        "wer": wers,
    }


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("exps", nargs="*", type=Path, help="experiment dirs (default: the digits recipe's, from make run)")
    p.add_argument("--target-loss", type=float, default=0.06, help="dev CTC loss per frame to reach")
    p.add_argument("--quick", action="store_true", help="(no effect: nothing is trained)")
    a = p.parse_args(argv)
    exps = a.exps or [Path(__file__).resolve().parents[1] / "recipes/digits/exp/lstm_ctc"]
    missing = [str(e) for e in exps if not (e / "final.pt").is_file()]
    if missing:
        raise SystemExit(f"no finished training in {' '.join(missing)} (run `make run` first)")
    rows = [summarise(e, a.target_loss) for e in exps]
    sets = sorted({k for r in rows for k in r["wer"]})
    print(
        f"| run | model | parameters | epochs | steps to dev loss {a.target_loss} | final dev loss | train s | "
        + " | ".join(f"%WER {s}" for s in sets)
        + " |"
    )
    print("|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(sets))
    for r in rows:
        to = f"{r['steps_to_target']} (epoch {r['epoch_to_target']})" if r["steps_to_target"] else "not reached"
        secs = f"{r['train_seconds']:.0f}" if r["train_seconds"] is not None else "?"
        print(
            f"| {r['exp']} | {r['model']} | {r['parameters']} | {r['epochs']} | {to} | {r['final_dev_loss']} | "
            f"{secs} | " + " | ".join(str(r["wer"].get(s, "")) for s in sets) + " |"
        )
    print(json.dumps({"bench": "compare_runs", "target_loss": a.target_loss, "runs": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
