"""The GPU smoke test of issue 25: one epoch (``--epochs``) of the digits recipe on CUDA in bf16 (utterances/s, peak
GPU memory, test WER after the last epoch), whether the GPU checkpoint resumes on the CPU, then 1 against 2 learners
(sync, NCCL) when the machine has two GPUs. Last line: one JSON object.

    bash bench/gpu_smoke.sh                     # on a CUDA machine: installs what it needs, then runs this
    python bench/gpu_smoke.py [--device auto|cuda|cpu] [--data recipes/digits/data] [--quick] [--seed N]

``--data``: the digits recipe's data dir after stages 1-3 (features, lang). Stage 1 synthesises the speech with
espeak-ng and flite, which a GPU node may not have: run ``recipes/digits/run.sh --stop-stage 3`` where they are (``make
run`` does) and copy ``data/`` over. Without CUDA the very same steps run on the CPU and the JSON line says
``"cuda": false`` (in fp32 unless --precision says otherwise): a check of this script, not a GPU figure. ``--quick``:
200 training and 100 test utterances.

What "resume on the CPU matched" means: the last checkpoint of the GPU run, loaded by a CPU trainer in fp32, gives the
dev CTC loss the GPU run recorded for it (bf16) within 2 % relative, its weights are the checkpoint's bit for bit,
and it trains on from there (5 steps, finite losses).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from asrlib.cli import env_with_root  # noqa: E402
from asrlib.config import load_config  # noqa: E402
from asrlib.data.subset import subset_training_tables  # noqa: E402
from asrlib.models.device import precision_name, resolve_device, resolve_precision  # noqa: E402

PY = sys.executable
RECIPE = ROOT / "recipes" / "digits"


def run(cmd, log: Path) -> float:
    """Run ``cmd`` (output to ``log``); its wall time. A failure names the log."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env_with_root(ROOT))
    if r.returncode != 0:
        raise SystemExit(f"gpu_smoke: {' '.join(map(str, cmd[:4]))} ... failed (exit {r.returncode}); see {log}")
    return time.perf_counter() - t0


def dirs(sub: Path, data: Path) -> list:
    return ["--data-dir", str(sub / "data"), "--feats-dir", str(sub / "fbank"), "--lang-dir", str(data / "lang")]


def epoch_figures(exp: Path) -> dict:
    dev = [m for m in json.loads((exp / "metrics.json").read_text()) if m["kind"] == "dev"][-1]
    return {
        "utt_per_s": dev["train_utts_per_s"],
        "epoch_seconds": dev["train_seconds"],
        "peak_gpu_mb": dev.get("peak_device_mb"),
        "dev_loss": dev["loss"],
    }


def test_wer(exp: Path, sub: Path, data: Path, device: str, out: Path) -> float:
    """TLG WER (the recipe's decode settings) of ``exp``'s final model on the test utterances of ``sub``."""
    lp, dec = exp / "logprobs_test", exp / "decode_test_tlg"
    feats = ["--feats", str(sub / "fbank" / "test" / "feats.scp"), "--out-dir", str(lp), "--device", device]
    run([PY, "-m", "steps.compute_logprobs", "--model", str(exp / "final.pt"), *feats], out / "logprobs.log")
    dec_args = ["--config", str(RECIPE / "config.yaml"), "--method", "tlg", "--logprobs", str(lp / "logprobs.scp")]
    run([PY, "-m", "steps.decode", *dec_args, "--lang-dir", str(data / "lang"), "--out-dir", str(dec)], out / "dec.log")
    ref = ["--ref", str(sub / "data" / "test" / "text"), "--hyp", str(dec / "hyp.txt"), "--out-dir", str(dec)]
    run([PY, "-m", "steps.score", *ref], out / "score.log")
    return json.loads((dec / "wer.json").read_text())["wer"]


def resume_on_cpu(exp: Path, sub: Path, data: Path, overrides: list, out: Path) -> dict:
    """The GPU run's last checkpoint, resumed by a CPU trainer in fp32 (see the module docstring)."""
    from asrlib.features.cmvn import check_cmvn_mode, online_prior
    from asrlib.models.lstm import build_model
    from asrlib.train.checkpoint import load_checkpoint
    from asrlib.train.loader import CtcTargets, open_set
    from asrlib.train.trainer import Trainer

    cpu_exp = out / "exp_cpu_resume"
    shutil.rmtree(cpu_exp, ignore_errors=True)
    shutil.copytree(exp / "checkpoints", cpu_exp / "checkpoints")
    cfg = load_config(RECIPE / "config.yaml", [*overrides, "train.device=cpu", "train.precision=fp32"])
    cfg.train.loader.num_workers = 0
    targets = CtcTargets(data / "lang", cfg.model.stack)
    cmvn = sub / "fbank" / "train" / "cmvn.scp"

    norm = (check_cmvn_mode(cfg.features.cmvn), online_prior(cfg.features))  # as steps.train normalises

    def ds(name):
        return open_set(sub / "fbank" / name, targets, cmvn, *norm, cfg.train.loader, data_dir=sub / "data" / name)

    train = ds("train")
    model = build_model(train.feature_dim(), len(targets.tokens), cfg.model)
    t = Trainer(cfg, model, train, ds("dev"), cpu_exp, device=torch.device("cpu"))
    assert t.try_resume(), "no checkpoint to resume"
    ck = load_checkpoint(cpu_exp / "checkpoints" / "latest.pt")
    same_weights = all(torch.equal(v, ck["model"][k]) for k, v in t.model.state_dict().items())
    gpu_dev = [m["loss"] for m in ck["metrics"] if m["kind"] == "dev"][-1]
    cpu_dev = t.dev_loss()
    losses = []
    for i, batch in enumerate(train.batches(t.epoch_cuts(t.epoch, t.batch_in_epoch))):
        total, frames, _ = t.train_step(batch)
        losses.append(total / max(frames, 1))
        if i == 4:
            break
    rel = abs(cpu_dev - gpu_dev) / gpu_dev
    return {
        "matched": bool(same_weights and rel < 0.02 and all(torch.isfinite(torch.tensor(losses)))),
        "dev_loss_recorded": round(gpu_dev, 5),
        "dev_loss_cpu_fp32": round(cpu_dev, 5),
        "relative_difference": round(rel, 5),
        "weights_equal": same_weights,
        "losses_after_resume": [round(x, 4) for x in losses],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", help="auto (CUDA when there is one) | cuda | cuda:N | cpu")
    p.add_argument("--precision", default="auto", help="auto (bf16 on CUDA, fp32 on the CPU) | fp32 | bf16 | fp16")
    p.add_argument("--data", type=Path, default=RECIPE / "data", help="the digits recipe's data dir (stages 1-3)")
    p.add_argument("--out", type=Path, default=RECIPE / "exp" / "gpu_smoke")
    p.add_argument("--quick", action="store_true", help="200 training and 100 test utterances")
    p.add_argument("--threads", type=int, default=2, help="torch threads (CPU side)")
    p.add_argument("--epochs", type=int, default=1, help="epochs to train (the figures are the last epoch's)")
    p.add_argument("--seed", type=int, default=None, help="train.seed (default: the recipe's)")
    a = p.parse_args(argv)
    dev = resolve_device(a.device, "--device")
    data = a.data.resolve()
    if not (data / "fbank" / "train" / "feats.scp").is_file() or not (data / "lang" / "TLG.fst").is_file():
        raise SystemExit(f"gpu_smoke: {data} lacks features or lang: run recipes/digits/run.sh --stop-stage 3 first")
    out = a.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    full = {s: len((data / s / "text").read_text().splitlines()) for s in ("train", "dev", "test")}
    counts = {"train": 200, "dev": 100, "test": 100} if a.quick else full
    sub = subset_training_tables(data, data / "fbank", out / "subset", counts)
    base = [f"train.epochs={a.epochs}", f"train.num_threads={a.threads}", f"train.precision={a.precision}"]
    base += [f"train.seed={a.seed}"] if a.seed is not None else []
    sets = [x for o in [*base, f"train.device={dev}"] for x in ("--set", o)]
    cfg = ["--config", str(RECIPE / "config.yaml")]

    exp1 = out / "exp_1learner"
    wall = run([PY, "-m", "steps.train", *cfg, *dirs(sub, data), "--exp-dir", str(exp1), *sets], out / "train1.log")
    one = {"wall_seconds": round(wall, 1), **epoch_figures(exp1)}
    one["test_wer_tlg"] = test_wer(exp1, sub, data, str(dev), out)
    resume = resume_on_cpu(exp1, sub, data, base, out)

    two = None
    if dev.type == "cuda" and torch.cuda.device_count() >= 2:
        exp2 = out / "exp_2learners"
        launch = [PY, "-m", "steps.train_dist", "--num-learners", "2", "--"]
        sets2 = [x for o in [*base, "train.device=auto", "train.dist.algo=sync"] for x in ("--set", o)]
        wall2 = run([*launch, *cfg, *dirs(sub, data), "--exp-dir", str(exp2), *sets2], out / "train2.log")
        two = {"wall_seconds": round(wall2, 1), **epoch_figures(exp2)}
        two["utt_per_s_total"] = round(2 * two["utt_per_s"], 1)  # each learner trains on its own half
    summary = {
        "bench": "gpu_smoke",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cuda": dev.type == "cuda",
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "torch": torch.__version__,
        "precision": precision_name(resolve_precision(a.precision, dev, "--precision")),
        "utterances": counts,
        "epochs": a.epochs,
        "seed": load_config(RECIPE / "config.yaml", base).train.seed,
        "one_learner": one,
        "resume_on_cpu": resume,
        "two_learners": two if two is not None else "not run: fewer than two CUDA devices",
    }
    (out / "gpu_smoke.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
