"""Issue 24: the training data path at corpus scale, without a model.

Synthetic corpora of 10, 30 and 100 hours (``--quick``: 0.5, 1.5 and 5) are written as lazy lhotse cut manifests
whose cuts point at real audio where it lies (AN4's FLAC files in ../shared/data/an4, else the digits recipe's WAVs)
with a random offset, length (1-6 s) and speed factor (0.9 / 1.0 / 1.1, lhotse's lazy ``perturb_speed``): no audio
is written. For each corpus and worker count (0 and 2), a child process opens the manifest lazily and runs the
trainer's data path (asrlib/train/loader.py: lhotse's DynamicBucketingSampler, a DataLoader whose workers read the
audio and compute fbank on the fly, pad the batch): time to the first batch (fastest of 3 starts: the sampler
reads a fixed number of cuts first, its bucket-bins estimate and its buffer), batches/s over the next batches, and
peak RSS of the training process (the workers' peak apart), and the trainer's census (asrlib/train/census.py: the
pass over the metadata that gives the learning-rate schedule its length, ``trainer_census_s``, which runs beside the
training; ``trainer_census_start_s``: what starting it costs before the first step). Feature bytes per hour: float32
vs Kaldi compressed archives (features.compress) of the same fbank.

    python bench/data_scale.py [--quick] [--hours 10 30 100] [--batches 40] [--out bench/results/data_scale.json]

Goals (issue 24): RSS at 100 h <= 1.2 x RSS at 10 h; time to first batch <= 1.2 x; feature bytes <= 0.35 x float32.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def audio_files() -> list:
    an4 = ROOT.parent / "shared" / "data" / "an4" / "wav"
    files = sorted(an4.glob("*/*/*.flac")) if an4.is_dir() else []
    return files or sorted((ROOT / "recipes/digits/data/wav").glob("*/*.wav"))


def write_corpus(path: Path, hours: float, sources: list, seed: int = 0) -> dict:
    """A lazy manifest of random cuts of ``sources`` adding up to ``hours`` (streamed: nothing held)."""
    from lhotse import CutSet, Recording, SupervisionSegment

    rng = random.Random(seed)
    recs = [Recording.from_file(p) for p in sources[:400]]  # headers of a sample; cuts draw from these
    recs = [r for r in recs if r.duration > 1.2]
    total, n = 0.0, 0
    with CutSet.open_writer(path) as w:
        while total < hours * 3600:
            rec = rng.choice(recs)
            dur = min(rng.uniform(1.0, 6.0), rec.duration - 0.1)
            start = rng.uniform(0, rec.duration - dur)
            cut = rec.to_cut().truncate(offset=start, duration=dur)
            cut.id = f"syn{n:07d}"
            cut.supervisions = [SupervisionSegment(cut.id, rec.id, 0.0, dur, text="A")]
            factor = rng.choice([0.9, 1.0, 1.1])
            if factor != 1.0:
                cut = cut.perturb_speed(factor)
            w.write(cut)
            total, n = total + cut.duration, n + 1
    return {"cuts": n, "hours": round(total / 3600, 2), "manifest_mb": round(path.stat().st_size / 2**20, 2)}


class NoTargets:
    """Features only: the data path's cost without a transcript lookup."""

    def check(self, cut):
        return None

    def targets(self, cut):
        return []

    def collate(self, feats, targets):
        from asrlib.train.loader import pad_features

        x, lens = pad_features(feats)
        return {"feats": x, "feat_lens": lens}


def child(manifest: str, workers: int, batches: int) -> None:
    """One measurement in a fresh process: time to the first batch, batches/s, peak RSS."""
    import numpy as np
    import torch

    from asrlib.config import LoaderConfig
    from asrlib.features.cmvn import Cmvn
    from asrlib.train.loader import CutData, Normaliser, OnTheFlyFbank, SamplerSettings, epoch_cut_batches

    torch.set_num_threads(1)
    cmvn = Cmvn(np.zeros(80, np.float32), np.ones(80, np.float32))
    firsts = []
    for _ in range(3):  # the fastest of 3 starts: the machine's load varies, the work does not
        t0 = time.perf_counter()
        data = CutData(
            manifest,
            NoTargets(),
            Normaliser(cmvn),
            LoaderConfig(num_workers=workers, persistent_workers=False),
            on_the_fly=OnTheFlyFbank(80, 16000),
        )
        it = data.batches(epoch_cut_batches(data, SamplerSettings(max_duration=60.0, seed=0), 0, 0))
        first = next(it)
        firsts.append(time.perf_counter() - t0)
    t_first = min(firsts)
    t1, frames, n = time.perf_counter(), 0, 0
    for b in it:
        frames, n = frames + int(b["feat_lens"].sum()), n + 1
        if n == batches:
            break
    dt = time.perf_counter() - t1
    del it
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # the Trainer's census (asrlib/train/census.py): the pass over the metadata that gives the schedule's length, in
    # a forked process; what the trainer spends on it before its first step is the fork (census_start_s)
    from asrlib.train.census import Census

    t2 = time.perf_counter()
    census = Census(data, SamplerSettings(max_duration=60.0, seed=0))
    t_start = time.perf_counter() - t2
    census.get()
    t_census = time.perf_counter() - t2
    print(
        json.dumps(
            {
                "first_batch_s": round(t_first, 2),
                "trainer_census_s": round(t_census, 2),
                "trainer_census_start_s": round(t_start, 4),
                "first_batch_cuts": len(first["ids"]),
                "batches_per_s": round(n / dt, 2),
                "audio_s_per_s": round(frames / 100 / dt, 1),
                "rss_mb": round(self_kb / 1024, 1),
                "worker_rss_mb": round(kids_kb / 1024, 1) if workers else None,
            }
        )
    )


def feature_bytes(sources: list, n: int = 60) -> dict:
    """Bytes per hour of fbank stored float32 vs compressed (the same matrices)."""
    import soundfile as sf

    from asrlib.features.fbank import FbankExtractor, FbankOptions
    from asrlib.kaldi_io import write_compressed_matrices, write_matrices

    ex = FbankExtractor(FbankOptions(num_mel_bins=80))
    items, seconds = [], 0.0
    for i, p in enumerate(sources[:n]):
        x, sr = sf.read(str(p), dtype="float32")
        if sr != 16000:
            continue
        items.append((f"u{i}", ex.features(x)))
        seconds += len(x) / sr
    with tempfile.TemporaryDirectory() as d:
        write_matrices(Path(d) / "f.ark", items)
        write_compressed_matrices(Path(d) / "c.ark", items)
        f32, cm = (Path(d) / "f.ark").stat().st_size, (Path(d) / "c.ark").stat().st_size
    per_h = 3600 / seconds
    return {
        "float32_mb_per_hour": round(f32 * per_h / 2**20, 1),
        "compressed_mb_per_hour": round(cm * per_h / 2**20, 1),
        "compressed_ratio": round(cm / f32, 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="0.5 / 1.5 / 5 h, 10 batches (under a minute)")
    p.add_argument("--hours", type=float, nargs="+", default=[10, 30, 100])
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--batches", type=int, default=40, help="batches timed after the first")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a.child[0], int(a.child[1]), int(a.child[2]))
    hours, batches = ([0.5, 1.5, 5], 10) if a.quick else (a.hours, a.batches)
    sources = audio_files()
    out = {"bench": "data_scale", "source_files": len(sources), "corpora": {}}
    with tempfile.TemporaryDirectory(prefix="data_scale_") as tmp:
        for h in hours:
            path = Path(tmp) / f"cuts_{h:g}h.jsonl.gz"
            t0 = time.perf_counter()
            info = write_corpus(path, h, sources)
            info["write_s"] = round(time.perf_counter() - t0, 1)
            for w in a.workers:
                r = subprocess.run(
                    [sys.executable, __file__, "--child", str(path), str(w), str(batches)],
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                )
                if r.returncode:
                    raise SystemExit(r.stderr[-3000:])
                info[f"workers{w}"] = json.loads(r.stdout.strip().splitlines()[-1])
            out["corpora"][f"{h:g}h"] = info
            print(f"{h:g} h: {info}", file=sys.stderr)
    lo, hi = out["corpora"][f"{hours[0]:g}h"], out["corpora"][f"{hours[-1]:g}h"]
    w = a.workers[-1]
    out["rss_ratio"] = round(hi[f"workers{w}"]["rss_mb"] / lo[f"workers{w}"]["rss_mb"], 3)
    out["first_batch_ratio"] = round(hi[f"workers{w}"]["first_batch_s"] / lo[f"workers{w}"]["first_batch_s"], 3)
    out["trainer_census_ratio"] = round(
        hi[f"workers{w}"]["trainer_census_s"] / lo[f"workers{w}"]["trainer_census_s"], 3
    )
    out["features"] = feature_bytes(sources)
    out["date"] = time.strftime("%Y-%m-%d")
    if a.out:
        a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
