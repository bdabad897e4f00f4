"""Mobile export report for a recipe: size, 1-thread speed, accuracy, memory, streaming latency, bad-input errors.

    python bench/mobile.py [--quick] [--recipe recipes/digits] [--exp exp/lstm_ctc] [--set test] [--rounds 3] \
        [--max-utts N] [--no-scaling] [--mobile DIR] [--out exp/lstm_ctc/mobile/bench.md]

Needs the recipe's stage 7 (``steps.export_mobile``: ``<exp>/mobile``, or ``--mobile DIR``). Everything runs on ONE
thread (ONNX Runtime intra-op threads = 1, torch threads = 1, sherpa-onnx num_threads = 1); speed ratios are
measured in the same run: the networks interleaved per utterance (order rotated per round), the median round and
the median per-round ratio reported (the machine may be shared: the load average is printed beside the timings);
the end-to-end engines interleaved round by round, best round.

* **Size**: bytes of each ONNX file (and zlib-compressed bytes: pruned zeros compress), ratio to fp32.
* **Speed**: network RTF = network seconds / audio seconds on the set's recipe features (whole utterances);
  end-to-end RTF = audio in → words out (fbank + network + TLG search) for asrlib's streaming recogniser and for
  sherpa-onnx on the same bundle and the same WAV files.
* **Accuracy**: WER of each model's log-probs on the recipe features with the TLG search that sherpa-onnx runs on
  the bundle (its fixed beam 16 and max_active 3000, over the log-probs with the search the exported networks carry
  applied: the recipe's acoustic scale and blank penalty, so every row uses one search), and of both engines on the
  WAVs.
* **Memory**: peak RSS of a separate process recognising the set with each engine (``steps.recognize_mobile``).
* **Streaming**: per chunk size, processing time per chunk (mean, p95), RTF, and latency = chunk + p95 + 15 ms
  front-end look-ahead (+ up to 20 ms waiting for a full 3-frame stack).
* **Bad input**: the one-line errors for a bundle with a missing file, a model/front-end dimension mismatch and
  8 kHz audio.
* **Scaling** (unless ``--no-scaling``): fp32 vs int8 network RTF of a random-weight 3×1024/256 LSTMP, to show how
  the int8 speed-up grows when matrix products dominate (they do not in the small digits model).

Prints a Markdown report (also written to ``--out``) and, last, one JSON line with every number.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Dict, List, Tuple  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from asrlib.cli import env_with_root  # noqa: E402
from asrlib.io.atomic import atomic_open  # noqa: E402
from asrlib.io.tables import read_table  # noqa: E402

FRAME_S = 0.01


def load_set(
    recipe: Path, name: str, max_utts: int
) -> Tuple[List[str], Dict[str, np.ndarray], Dict[str, str], Dict[str, str]]:
    from asrlib.kaldi_io import MatrixReader

    feats_scp = recipe / "data" / "fbank" / name / "feats.scp"
    reader = MatrixReader(feats_scp)
    texts = dict(read_table(recipe / "data" / name / "text"))
    wavs = dict(read_table(recipe / "data" / name / "wav.scp"))
    keys = [k for k, _ in read_table(feats_scp) if k in texts and k in wavs][: max_utts or None]
    return keys, {k: np.asarray(reader[k], np.float32) for k in keys}, {k: texts[k] for k in keys}, wavs


def wer(refs: Dict[str, str], hyps: Dict[str, List[str]]) -> float:
    from asrlib.score import score

    return score(refs, {k: " ".join(v) for k, v in hyps.items()}).wer


def network_speed(
    models: Dict[str, object], keys: List[str], feats: Dict[str, np.ndarray], rounds: int
) -> Tuple[Dict[str, float], Dict[str, Dict[str, np.ndarray]], Dict[str, List[float]]]:
    """Median-round network seconds per model, each model's log-probs, and every round's seconds. The models are
    interleaved per utterance (each utterance runs on every model before the next; the order rotates per round),
    so load changes on a shared machine hit all models alike; 3 untimed warm-up utterances first."""
    names = list(models)
    for k in keys[:3]:  # warm-up (first-run allocations), untimed
        for name in names:
            models[name](feats[k])
    secs: Dict[str, List[float]] = {n: [] for n in names}
    logprobs: Dict[str, Dict[str, np.ndarray]] = {n: {} for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        tot = {n: 0.0 for n in names}
        for k in keys:
            for name in order:
                t0 = time.perf_counter()
                lp = models[name](feats[k])
                tot[name] += time.perf_counter() - t0
                if r == 0:
                    logprobs[name][k] = lp
        for n in names:
            secs[n].append(tot[n])
    return {n: float(np.median(v)) for n, v in secs.items()}, logprobs, secs


def speedup(secs: Dict[str, List[float]], slow: str, fast: str) -> float:
    """Median over rounds of the per-round time ratio ``slow`` / ``fast`` (both measured in the same round)."""
    return float(np.median([a / b for a, b in zip(secs[slow], secs[fast])]))


def peak_rss(engine: str, bundle: Path, wav_scp: Path) -> Tuple[float, float]:
    """(peak RSS MB, RTF) of a separate recogniser process over ``wav_scp``."""
    cmd = [
        sys.executable,
        "-m",
        "steps.recognize_mobile",
        "--bundle",
        str(bundle),
        "--engine",
        engine,
        "--wav-scp",
        str(wav_scp),
        "-o",
        os.devnull,
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env_with_root(ROOT))
    m = re.search(r"RTF ([0-9.]+), peak RSS ([0-9]+) MB", r.stderr)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"{engine} recogniser failed: {r.stderr[-2000:]}")
    return float(m.group(2)), float(m.group(1))


def bad_input_errors(bundle: Path, tmp: Path) -> Dict[str, str]:
    import soundfile as sf

    out = {}
    wav = tmp / "ok.wav"
    sf.write(str(wav), np.zeros(16000, np.float32), 16000)

    def run(b: Path, w: Path) -> str:
        r = subprocess.run(
            [sys.executable, "-m", "steps.recognize_mobile", "--bundle", str(b), str(w)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env_with_root(ROOT),
        )
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ERROR")]
        return f"exit {r.returncode}: " + (lines[-1] if lines else r.stderr.strip()[-300:])

    b1 = tmp / "missing"
    shutil.copytree(bundle, b1)
    (b1 / "TLG.fst").unlink()
    out["bundle with a missing file (TLG.fst)"] = run(b1, wav)
    b2 = tmp / "dim"
    shutil.copytree(bundle, b2)
    info = json.loads((b2 / "bundle.json").read_text())
    info["feat_dim"] = 40
    (b2 / "bundle.json").write_text(json.dumps(info))
    out["model input dim ≠ front end (bundle.json feat_dim 40)"] = run(b2, wav)
    w8 = tmp / "8k.wav"
    sf.write(str(w8), np.zeros(8000, np.float32), 8000)
    out["audio at 8 kHz"] = run(bundle, w8)
    return out


def scaling(tmp: Path, rounds: int) -> Dict[str, float]:
    """fp32 vs int8 network seconds for 30 s of input on a random 3x1024/256 LSTMP (80-dim, stack 3)."""
    import torch

    from asrlib.config import ModelConfig
    from asrlib.export.onnx_model import OnnxAcousticModel, ScanAcousticModel, export_onnx
    from asrlib.export.quantize import quantize_int8
    from asrlib.models.lstm import build_model

    torch.manual_seed(0)
    m = build_model(80, 40, ModelConfig(num_layers=3, hidden_size=1024, proj_size=256, peephole=False)).eval()
    core = ScanAcousticModel.from_model(m, np.zeros(80, np.float32), np.ones(80, np.float32))
    export_onnx(core, tmp / "big.onnx")
    quantize_int8(tmp / "big.onnx", tmp / "big.int8.onnx")
    x = np.random.default_rng(0).normal(0, 1, (3000, 80)).astype(np.float32)
    models = {
        "fp32": OnnxAcousticModel(tmp / "big.onnx").log_probs,
        "int8": OnnxAcousticModel(tmp / "big.int8.onnx").log_probs,
    }
    best, _, secs = network_speed(models, ["x"], {"x": x}, rounds)
    return {
        "fp32_rtf": best["fp32"] / 30.0,
        "int8_rtf": best["int8"] / 30.0,
        "speedup": speedup(secs, "fp32", "int8"),
        "params": sum(p.numel() for p in m.parameters()),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "digits")
    p.add_argument("--exp", default="exp/lstm_ctc")
    p.add_argument("--set", default="test")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-utts", type=int, default=0)
    p.add_argument("--chunks-ms", default="80,160,320,640")
    p.add_argument("--no-scaling", action="store_true")
    p.add_argument(
        "--mobile",
        type=Path,
        help="the export directory (default: <recipe>/<exp>/mobile); e.g. a "
        "steps.export_mobile --out-dir made elsewhere for an experiment",
    )
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run under a minute: 40 utterances, 1 round, chunks 160/320 ms, no scaling model",
    )
    a = p.parse_args(argv)
    if a.quick:
        a.max_utts, a.rounds, a.chunks_ms, a.no_scaling = a.max_utts or 40, 1, "160,320", True
    import torch

    torch.set_num_threads(1)
    from asrlib.decode.search_scores import apply_search
    from asrlib.export.bundle import SherpaRecognizer, read_wav, sherpa_search
    from asrlib.export.prune import load_compressed
    from asrlib.export.runtime import OnnxAcousticModel
    from asrlib.export.streaming import StreamingRecognizer

    recipe = a.recipe.resolve()
    mobile = a.mobile.resolve() if a.mobile else recipe / a.exp / "mobile"
    bundle = mobile / "bundle"
    if not (mobile / ".export.done").is_file():
        print(f"{mobile} is not exported: run {recipe}/run.sh --stage 7 first", file=sys.stderr)
        return 2
    out = a.out.resolve() if a.out else None  # relative to the caller's directory, not the recipe's
    os.chdir(recipe)  # the recipe's scp files hold paths relative to it
    load0 = os.getloadavg()
    t_start = time.time()
    keys, feats, refs, wavs = load_set(recipe, a.set, a.max_utts)
    audio_s = sum(len(f) for f in feats.values()) * FRAME_S
    R: dict = {"set": a.set, "utts": len(keys), "audio_s": round(audio_s, 1)}

    # ---- size
    export = json.loads((mobile / "export.json").read_text())
    sizes = export["files"]
    fp32_b = sizes["baseline.fp32.onnx"]["bytes"]
    R["size"] = {n: {**v, "ratio": round(v["bytes"] / fp32_b, 3)} for n, v in sizes.items()}
    R["params"], R["sparsity"] = export["params"], export["sparsity"]
    R["bundle_model"] = export.get("bundle", {}).get("model", "pruned")  # steps.export_mobile's choice
    R["dev_wer_int8"] = export.get("dev_wer_int8", {})
    q = export["int8_ops_pruned"]
    R["int8_ops"] = {"int8_matmuls": len(q["int8_matmuls"]), "float_matmuls": len(q["float_matmuls"]), "ops": q["ops"]}

    # ---- network speed + WER on recipe features
    onnx_models = {
        "fp32": "baseline.fp32.onnx",
        "int8": "baseline.int8.onnx",
        "pruned fp32": "pruned.fp32.onnx",
        "pruned int8": "pruned.int8.onnx",
    }
    if (mobile / "pruned.fp16.onnx").is_file():
        onnx_models["pruned fp16"] = "pruned.fp16.onnx"
    onnx_runners = {n: OnnxAcousticModel(mobile / f) for n, f in onnx_models.items()}
    runners_meta = {n: m.meta.get("recurrence", "ops") for n, m in onnx_runners.items()}
    runners = {n: m.log_probs for n, m in onnx_runners.items()}
    for n, pt in (("torch fp32", recipe / a.exp / "final.pt"), ("torch pruned", mobile / "pruned.pt")):
        saved = load_compressed(pt)
        runners[n] = saved.log_probs
    best, logprobs, secs = network_speed(runners, keys, feats, a.rounds)
    R["network_rtf"] = {n: best[n] / audio_s for n in runners}
    R["network_rtf_rounds"] = {n: [t / audio_s for t in v] for n, v in secs.items()}
    R["int8_speedup"] = speedup(secs, "fp32", "int8")
    R["pruned_int8_speedup"] = speedup(secs, "fp32", "pruned int8")
    R["pruned_fp32_to_int8_speedup"] = speedup(secs, "pruned fp32", "pruned int8")
    R["recurrence"] = {n: runners_meta.get(n, "") for n in onnx_models}
    dec = sherpa_search(bundle)
    scale, penalty = onnx_runners["int8"].search  # what the exported networks' output carries (sherpa-onnx searches it)
    R["search"] = {"acoustic_scale": scale, "blank_penalty": penalty}
    R["wer"] = {
        n: wer(refs, {k: dec.decode(apply_search(logprobs[n][k], scale, penalty)) for k in keys}) for n in runners
    }

    # ---- end to end on WAVs: ours (streaming, 320 ms chunks) vs sherpa-onnx, interleaved
    audio = {k: read_wav(Path(wavs[k]).resolve(), 16000) for k in keys}
    wav_s = sum(len(x) for x in audio.values()) / 16000
    ours = StreamingRecognizer(bundle, num_threads=1)
    sherpa = SherpaRecognizer(bundle, num_threads=1)
    e2e = {
        "ours streaming int8": lambda x: ours.recognize(x, 16000, chunk_samples=5120),
        "ours whole-utterance int8": lambda x: ours.recognize(x, 16000),
        "sherpa-onnx int8": lambda x: sherpa.recognize(x, 16000),
    }
    best_e2e = {n: float("inf") for n in e2e}
    hyps: Dict[str, Dict[str, List[str]]] = {n: {} for n in e2e}
    for r in range(a.rounds):
        for n, run in e2e.items():
            t0 = time.perf_counter()
            for k in keys:
                h = run(audio[k])
                if r == 0:
                    hyps[n][k] = h
            best_e2e[n] = min(best_e2e[n], time.perf_counter() - t0)
    R["e2e_rtf"] = {n: best_e2e[n] / wav_s for n in e2e}
    for n in e2e:
        R["wer"][n + " (wav)"] = wer(refs, hyps[n])
    R["sherpa_vs_ours_differences"] = sum(hyps["sherpa-onnx int8"][k] != hyps["ours streaming int8"][k] for k in keys)

    # ---- streaming latency per chunk size
    R["streaming"] = {}
    for ms in [int(c) for c in a.chunks_ms.split(",")]:
        n = int(16000 * ms / 1000)
        per_chunk, total = [], 0.0
        for k in keys:
            s = ours.new_stream()
            x = audio[k]
            for i in range(0, len(x), n):
                s.accept_waveform(16000, x[i : i + n])
            s.finish()
            per_chunk += [t.seconds for t in s.timings[:-1]]
            total += sum(t.seconds for t in s.timings)
        p95 = float(np.percentile(per_chunk, 95))
        R["streaming"][ms] = {
            "mean_ms": 1000 * float(np.mean(per_chunk)),
            "p95_ms": 1000 * p95,
            "rtf": total / wav_s,
            "latency_ms": ms + 1000 * p95 + 15,
        }

    # ---- memory (separate processes) and bad input
    with tempfile.TemporaryDirectory() as td:
        scp = Path(td) / "wav.scp"
        scp.write_text("".join(f"{k} {Path(wavs[k]).resolve()}\n" for k in keys))
        R["peak_rss_mb"] = {e: peak_rss(e, bundle, scp)[0] for e in ("streaming", "sherpa")}
        R["bad_input"] = bad_input_errors(bundle, Path(td))
        if not a.no_scaling:
            R["scaling_3x1024_256"] = scaling(Path(td), a.rounds)
    R["loadavg_before"], R["loadavg_after"] = load0, os.getloadavg()
    R["bench_seconds"] = round(time.time() - t_start, 1)
    md = report(R, a)
    print(md)
    if out:
        with atomic_open(out) as f:
            f.write(md)
    print(json.dumps({"bench": "mobile", **R}, default=float))
    return 0


def _kb(b: int) -> str:
    return f"{b / 1000:.0f} kB"


def report(R: dict, a) -> str:
    s, w, n = R["size"], R["wer"], R["network_rtf"]
    L = [
        f"## Mobile export: {a.recipe.name} ({R['set']}: {R['utts']} utterances, {R['audio_s']:.0f} s)",
        "",
        f"`python bench/mobile.py --recipe {a.recipe} --set {R['set']}"
        f"{f' --mobile {a.mobile}' if a.mobile else ''}` — one thread; load average "
        f"{R['loadavg_before'][0]:.1f} before, {R['loadavg_after'][0]:.1f} after (2-core machine, shared); "
        f"network times: median of {a.rounds} rounds, the models interleaved per utterance; speed-ups: median of "
        f"the per-round ratios. WER with the TLG search that sherpa-onnx runs on the bundle (beam 16; acoustic scale "
        f"{R['search']['acoustic_scale']:g}, blank penalty {R['search']['blank_penalty']:g}).",
        "",
        "| model | bytes (zipped) | × fp32 | network RTF | test WER % |",
        "|---|---:|---:|---:|---:|",
    ]
    mark = lambda label, key: f"**{label} (the bundle's model)**" if key == R["bundle_model"] else label  # noqa: E731
    rows = [
        ("fp32 (trained model, ONNX)", "baseline.fp32.onnx", "fp32"),
        (mark("int8, no pruning", "int8"), "baseline.int8.onnx", "int8"),
        (f"pruned fp32 (low rank + {100 * R['sparsity']:.0f}% sparse, fine-tuned)", "pruned.fp32.onnx", "pruned fp32"),
        ("pruned fp16 weights", "pruned.fp16.onnx", "pruned fp16"),
        (mark("pruned int8", "pruned"), "pruned.int8.onnx", "pruned int8"),
    ]
    for label, f, key in rows:
        if f in s and key in n:
            L.append(
                f"| {label} | {_kb(s[f]['bytes'])} ({_kb(s[f]['bytes_zip'])}) | {s[f]['ratio']:.3f} | "
                f"{n[key]:.4f} | {w[key]:.2f} |"
            )
    L.append(
        f"| PyTorch eager fp32 / pruned (reference) | | | {n['torch fp32']:.4f} / {n['torch pruned']:.4f} | "
        f"{w['torch fp32']:.2f} / {w['torch pruned']:.2f} |"
    )
    ops = R["int8_ops"]["ops"]
    int8_kinds = ", ".join(
        f"{ops[op]} {op}" for op in ("DynamicQuantizeLSTM", "MatMulInteger", "DynamicQuantizeMatMul") if op in ops
    )
    L += [
        "",
        f"int8 network speed-up over fp32 (1 thread): {R['int8_speedup']:.2f}× (int8 alone), "
        f"{R['pruned_int8_speedup']:.2f}× (pruned int8; {R['pruned_fp32_to_int8_speedup']:.2f}× over pruned "
        f"fp32). Recurrence: {R['recurrence'].get('pruned int8', '?')} (asrlib.export.onnx_model). int8 ops: "
        f"{R['int8_ops']['int8_matmuls']} matrix products in int8 ({int8_kinds}; inside the Scan too), "
        f"{R['int8_ops']['float_matmuls']} left in float; Sigmoid/Tanh/cell state in float32.",
        "",
        f"The bundle's model: {R['bundle_model']} (steps.export_mobile, export.bundle_model; dev %WER at "
        f"sherpa-onnx's search: "
        + (", ".join(f"{k} {v:.2f}" for k, v in R["dev_wer_int8"].items()) or "not measured: chosen by the config")
        + ").",
        "",
        "| engine (bundle, audio in → words out) | end-to-end RTF | test WER % | peak RSS |",
        "|---|---:|---:|---:|",
        f"| asrlib streaming recogniser, 320 ms chunks | {R['e2e_rtf']['ours streaming int8']:.4f} | "
        f"{w['ours streaming int8 (wav)']:.2f} | {R['peak_rss_mb']['streaming']:.0f} MB |",
        f"| asrlib, whole utterance | {R['e2e_rtf']['ours whole-utterance int8']:.4f} | "
        f"{w['ours whole-utterance int8 (wav)']:.2f} | |",
        f"| sherpa-onnx 2.0.1 (CTC FST decoder) | {R['e2e_rtf']['sherpa-onnx int8']:.4f} | "
        f"{w['sherpa-onnx int8 (wav)']:.2f} | {R['peak_rss_mb']['sherpa']:.0f} MB |",
        "",
        f"sherpa-onnx and asrlib differ on {R['sherpa_vs_ours_differences']} of {R['utts']} utterances.",
        "",
        "| chunk | processing per chunk (mean / p95) | RTF | latency (chunk + p95 + 15 ms look-ahead) |",
        "|---:|---:|---:|---:|",
    ]
    for ms, v in R["streaming"].items():
        L.append(f"| {ms} ms | {v['mean_ms']:.2f} / {v['p95_ms']:.2f} ms | {v['rtf']:.4f} | {v['latency_ms']:.0f} ms |")
    if "scaling_3x1024_256" in R:
        sc = R["scaling_3x1024_256"]
        L += [
            "",
            f"Scaling (random 3×1024/256 LSTMP, {sc['params'] / 1e6:.1f} M params, 30 s input): fp32 RTF "
            f"{sc['fp32_rtf']:.4f}, int8 RTF {sc['int8_rtf']:.4f}, int8 speed-up {sc['speedup']:.2f}×.",
        ]
    L += ["", "Bad input (`python -m steps.recognize_mobile`):", ""]
    for what, msg in R["bad_input"].items():
        L.append(f"- {what}: `{msg}`")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    sys.exit(main())
