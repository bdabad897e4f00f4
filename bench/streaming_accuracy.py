"""Streaming models of a recipe: algorithmic latency, dev/test WER, and the streaming path against the offline one.

    python bench/streaming_accuracy.py --exp E1 [E2 ...] --data DATA [--set dev] [--utts 20] [--quick] [--out F.json]

For each experiment dir (a finished recipe run: ``final.pt``, ``decode_<set>_tlg/wer.json``): the model's
algorithmic latency (:mod:`asrlib.models.latency`), the TLG WER of every decoded set, and, for a latency-controlled
BLSTM, its log-probs computed chunk by chunk (:class:`asrlib.models.lc_blstm.LcStream`, 10 ms frames fed 10 at a
time, as from a microphone) and through the ONNX chunk model (:mod:`asrlib.export.lc_onnx`, ONNX Runtime, raw
fbank) against the whole-utterance forward pass over ``--utts`` utterances of ``--set``: the largest difference
(equal log-probs: equal search, so the streaming WER is the offline WER) and the real-time factor of each streaming
path on 1 thread. ``--quick`` (< 1 min): 3 utterances. Prints a table and ends with one JSON line.

``--bundles B1 [B2 ...]`` (one per ``--exp``, in order; a mobile bundle of stage 7, ``<exp>/mobile/bundle``): the
bundle's int8 networks too. On ``--utts`` utterances, its streaming recogniser's log-probs (int8 chunk model, audio fed
in ``--chunk-ms`` pieces) against the PyTorch model's whole-utterance ones (largest difference, share of frames with
the same best token); on each ``--wer-sets`` set (``--data``/<set>/wav.scp and text; ``--quick``: its first 8
utterances), the %WER of the streaming recogniser (plain, and with the bundle's endpoint rules), of sherpa-onnx's
offline recogniser on the bundle's whole-utterance model and, for an LC bundle, of sherpa-onnx's streaming one
(:mod:`asrlib.export.sherpa_online`, same audio pieces), and the streaming recogniser's real-time factor on 1 thread
(processing time of the streams over the audio's duration).
``--latency-sweep N:M ...`` (with ``--config``, the recipe's config for its TLG search, and ``--sweep-sets``): each
LC-BLSTM of ``--exp`` decoded with chunks of N output frames and M frames of right context
(:meth:`asrlib.models.lstm.StackedLstmAcousticModel.set_chunking`: the trained weights at another latency), TLG
%WER per set and its mean over the runs against the algorithmic latency; ``--offline-table`` /
``--offline-label`` (a recipe's results/*.json and a row label) add the offline model's mean as the reference
line, and ``--plot`` draws WER against latency (PNG). ``--bundle-sweep``: at each setting, each run's stage-7
bundle too (``steps.export_mobile`` on the model set to N, M; int8, no pruning), scored on each set as ``--bundles``
does (our streaming recogniser, sherpa-onnx offline and streaming), drawn as a second line per set.
``--quick``: two settings, 8 dev utterances, the first run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from asrlib.export.bundle import read_wav  # noqa: E402
from asrlib.export.lc_onnx import LcOnnxStream, export_lc_onnx  # noqa: E402
from asrlib.features.cmvn import open_features  # noqa: E402
from asrlib.io.tables import read_table  # noqa: E402
from asrlib.models.latency import latency_parts_ms  # noqa: E402
from asrlib.models.lc_blstm import LcStream  # noqa: E402
from asrlib.models.saved import load_model  # noqa: E402


def stream_check(saved, feats_scp: Path, n: int, onnx_path: Path, piece: int = 10) -> dict:
    """Torch LcStream on normalised frames and the ONNX chunk model on raw ones, against the offline pass."""
    export_lc_onnx(saved.model, saved.cmvn_mean, saved.cmvn_inv_std, onnx_path)
    reader = open_features(feats_scp, saved.cmn)
    keys = [k for k, _ in read_table(feats_scp)][:n]
    diffs, odiffs, compute, ocompute, audio = [], [], 0.0, 0.0, 0.0
    for k in keys:
        raw = reader[k]
        z = saved.normalise(raw)
        whole = saved.log_probs_of_inputs(z)
        s = LcStream(saved.model)
        t0 = time.perf_counter()
        parts = [s.accept(z[i : i + piece]) for i in range(0, len(z), piece)] + [s.finish()]
        compute += time.perf_counter() - t0
        o = LcOnnxStream(onnx_path)
        t0 = time.perf_counter()
        oparts = [o.accept(raw[i : i + piece]) for i in range(0, len(raw), piece)] + [o.finish()]
        ocompute += time.perf_counter() - t0
        audio += len(z) * 0.01
        got, ogot = torch.cat(parts).numpy(), np.concatenate(oparts)
        if got.shape != whole.shape or ogot.shape != whole.shape:
            raise SystemExit(f"{k}: streaming gave {got.shape} (onnx {ogot.shape}), offline {whole.shape}")
        diffs.append(float(np.abs(got - whole).max()))
        odiffs.append(float(np.abs(ogot - whole).max()))
    return {
        "utts": len(keys),
        "max_abs_diff": max(diffs),
        "onnx_max_abs_diff": max(odiffs),
        "stream_rtf_1thread": round(compute / audio, 4),
        "onnx_rtf_1thread": round(ocompute / audio, 4),
        "onnx_bytes": onnx_path.stat().st_size,
    }


def bundle_check(saved, bundle: Path, data: Path, set_: str, n: int, chunk_ms: int) -> dict:
    """The bundle's streamed int8 log-probs against the PyTorch model's whole-utterance ones on ``n`` utterances."""
    from asrlib.export.streaming import StreamingRecognizer, compute_fbank

    rec = StreamingRecognizer(bundle)
    rows = read_table(data / set_ / "wav.scp")[:n]
    diffs, agree, frames = [], 0, 0
    for _, path in rows:
        x = read_wav(path, rec.bundle.sample_rate)
        s = rec.new_stream()
        step = rec.bundle.sample_rate * chunk_ms // 1000
        for i in range(0, len(x), step):
            s.accept_waveform(rec.bundle.sample_rate, x[i : i + step])
        s.finish()
        got = s.all_logprobs()
        whole = saved.log_probs(compute_fbank(x, rec.bundle.sample_rate, rec.bundle.feat_dim))
        if got.shape != whole.shape:
            raise SystemExit(f"{path}: the bundle gave {got.shape} log-probs, PyTorch {whole.shape}")
        diffs.append(float(np.abs(got - whole).max()))
        agree += int((got.argmax(1) == whole.argmax(1)).sum())
        frames += len(got)
    return {"utts": len(rows), "int8_max_abs_diff": max(diffs), "int8_best_token_agreement": round(agree / frames, 4)}


def bundle_wer(bundle: Path, data: Path, set_: str, limit: int, chunk_ms: int) -> dict:
    """%WER of the bundle on ``set_`` (its first ``limit`` utterances when > 0): streaming (plain and endpointed)
    and sherpa-onnx; the plain stream's RTF on 1 thread."""
    from asrlib.export.bundle import SHERPA_ONLINE, SherpaRecognizer
    from asrlib.export.streaming import EndpointRules, StreamingRecognizer
    from asrlib.score import score

    refs = dict(read_table(data / set_ / "text"))
    rows = [(k, p) for k, p in read_table(data / set_ / "wav.scp") if k in refs]
    rows = rows[:limit] if limit > 0 else rows
    plain = StreamingRecognizer(bundle)
    recs = {
        "stream": plain,
        "stream_endpoint": StreamingRecognizer(
            bundle, endpoint=EndpointRules.of_bundle(plain.bundle, even_if_off=True)
        ),
    }
    hyps = {name: {} for name in (*recs, "sherpa")}
    sherpa, online = SherpaRecognizer(bundle), None
    if (bundle / SHERPA_ONLINE).is_file():  # an LC bundle: sherpa-onnx's streaming recogniser too
        from asrlib.export.sherpa_online import SherpaOnlineRecognizer

        online, hyps["sherpa_online"] = SherpaOnlineRecognizer(bundle), {}
    sr, audio, compute = plain.bundle.sample_rate, 0.0, 0.0
    step = sr * chunk_ms // 1000
    for k, path in rows:
        x = read_wav(path, sr)
        audio += len(x) / sr
        for name, rec in recs.items():
            t0 = time.perf_counter()
            s = rec.new_stream()
            for i in range(0, len(x), step):
                s.accept_waveform(sr, x[i : i + step])
            hyps[name][k] = " ".join(s.finish())
            if name == "stream":
                compute += time.perf_counter() - t0
        hyps["sherpa"][k] = " ".join(sherpa.recognize(x, sr))
        if online is not None:
            hyps["sherpa_online"][k] = " ".join(online.recognize(x, sr, step))
    out = {f"wer_{name}": round(score({k: refs[k] for k, _ in rows}, h).wer, 2) for name, h in hyps.items()}
    return {"utts": len(rows), **out, "stream_rtf_1thread": round(compute / audio, 4)}


def parse_settings(texts: List[str]) -> List[Tuple[int, int]]:
    """``["4:0", "4:3"]`` -> [(4, 0), (4, 3)]: (chunk frames N, right-context frames M)."""
    out = []
    for t in texts:
        try:
            n, m = (int(x) for x in t.split(":"))
        except ValueError:
            raise SystemExit(f"--latency-sweep takes N:M pairs (chunk frames : right-context frames), not {t!r}")
        out.append((n, m))
    return out


def offline_reference(table: Path, label: str, seeds: Optional[List[int]] = None) -> Dict[str, float]:
    """The mean TLG %WER per set of the rows of a recipe's results table with ``label`` (and a seed of ``seeds``)."""
    rows = [
        r
        for r in json.loads(table.read_text())["rows"]
        if r["label"] == label and (not seeds or r.get("seed") in seeds)
    ]
    if not rows:
        raise SystemExit(f"{table} has no row labelled {label!r}")
    sets = {s for r in rows for s in r["wer"]}
    return {
        s: round(statistics.mean(r["wer"][s]["tlg"] for r in rows if "tlg" in r["wer"].get(s, {})), 2) for s in sets
    }


def bundle_at(
    model_pt: Path, nm: Tuple[int, int], config: Path, data: Path, feats: Path, lang: Path, out: Path
) -> Path:
    """The stage-7 bundle (``steps.export_mobile``: chunk, whole-utterance and sherpa-onnx streaming networks, int8,
    no pruning) of the LC-BLSTM ``model_pt`` run with chunks of N output frames and M frames of right context, in
    ``out``; ``data``/``feats``/``lang``: the recipe's data dirs."""
    from asrlib.io.torchfile import load_torch, save_torch
    from steps import export_mobile

    st = load_torch(model_pt)
    st["model_config"].update(chunk_frames=nm[0], right_context=nm[1])
    out.mkdir(parents=True, exist_ok=True)
    save_torch(out / "final.pt", st)
    fixed = ("sparsity=0", "finetune_epochs=0", "rank_ratio=0", "bundle_model=int8")
    args = ["--config", str(config), "--model", str(out / "final.pt"), "--data-dir", str(data)]
    args += ["--feats-dir", str(feats), "--lang-dir", str(lang), "--out-dir", str(out / "mobile")]
    if export_mobile.main(args + [x for k in fixed for x in ("--set", f"export.{k}")]) != 0:
        raise SystemExit(f"steps.export_mobile failed for {model_pt} at N={nm[0]} M={nm[1]}")
    return out / "mobile" / "bundle"


def latency_sweep(
    exps, data: Path, sets, settings, decode_cfg, limit: int, bundles: Optional[dict] = None
) -> List[dict]:
    """One row per (N, M): its latency, each run's TLG %WER per set and their mean; ``trained`` marks the setting the
    runs were trained with (whose WER must be what the recipe's decode stage recorded). ``bundles``
    (``{"config": recipe config, "chunk_ms": audio per call}``): each run's bundle at each setting too
    (:func:`bundle_at`), its %WER per set in ``row["bundle"][set][key]`` (:func:`bundle_wer`'s keys, one value per
    run)."""
    from asrlib.score import score
    from asrlib.decode.search import make_decoder

    decoder = make_decoder("tlg", data / "lang", decode_cfg)
    refs = {s: dict(read_table(data / s / "text")) for s in sets}
    keys = {s: [k for k, _ in read_table(data / "fbank" / s / "feats.scp") if k in refs[s]] for s in sets}
    keys = {s: ks[:limit] if limit > 0 else ks for s, ks in keys.items()}
    rows = {nm: {"chunk_frames": nm[0], "right_context": nm[1], "wer": {s: [] for s in sets}} for nm in settings}
    for e in exps:
        saved = load_model(e / "final.pt")
        trained = (saved.model.cfg.chunk_frames, saved.model.cfg.right_context)
        readers = {s: open_features(data / "fbank" / s / "feats.scp", saved.cmn) for s in sets}
        for nm in settings:
            saved.model.set_chunking(*nm)
            row = rows[nm]
            row["latency_ms"] = latency_parts_ms(saved.model.cfg)["total"]
            row.setdefault("trained", []).append(nm == trained)
            for s in sets:
                hyps = {k: " ".join(decoder.decode(saved.log_probs(readers[s][k]))) for k in keys[s]}
                row["wer"][s].append(round(score({k: refs[s][k] for k in keys[s]}, hyps).wer, 2))
            print(f"{e}: N={nm[0]} M={nm[1]} {row['latency_ms']} ms: {row['wer']}", file=sys.stderr)
            if bundles is not None:
                with tempfile.TemporaryDirectory() as tmp:
                    b = bundle_at(e / "final.pt", nm, bundles["config"], data, data / "fbank", data / "lang", Path(tmp))
                    for s in sets:
                        got = bundle_wer(b, data, s, limit, bundles["chunk_ms"])
                        for key, v in got.items():
                            row.setdefault("bundle", {}).setdefault(s, {}).setdefault(key, []).append(v)
                print(f"{e}: N={nm[0]} M={nm[1]} bundle: {row['bundle']}", file=sys.stderr)
    out = []
    for row in rows.values():
        row["trained"] = all(row["trained"])
        row["mean"] = {s: round(statistics.mean(v), 2) for s, v in row["wer"].items()}
        for s, got in row.get("bundle", {}).items():
            row.setdefault("bundle_mean", {})[s] = {
                k: round(statistics.mean(v), 4 if "rtf" in k else 2) for k, v in got.items() if k != "utts"
            }
        out.append(row)
    return sorted(out, key=lambda r: r["latency_ms"])


def plot_sweep(rows: List[dict], offline: Dict[str, float], runs: int, path: Path) -> None:
    """WER against algorithmic latency, a line per set (mean over the runs, bars from the lowest to the highest)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, s in enumerate(rows[0]["mean"]):
        x = [r["latency_ms"] for r in rows]
        y = [r["mean"][s] for r in rows]
        lo = [r["mean"][s] - min(r["wer"][s]) for r in rows]
        hi = [max(r["wer"][s]) - r["mean"][s] for r in rows]
        c = f"C{i}"
        ax.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, color=c, label=f"{s}: LC-BLSTM, mean of {runs}")
        if all(s in r.get("bundle_mean", {}) for r in rows):  # the int8 bundles through sherpa-onnx streaming
            key = "wer_sherpa_online" if "wer_sherpa_online" in rows[0]["bundle_mean"][s] else "wer_stream"
            yb = [r["bundle_mean"][s][key] for r in rows]
            ax.plot(x, yb, marker="s", linestyle=":", color=c, label=f"{s}: its int8 bundle, sherpa-onnx streaming")
        for r in rows:
            if r["trained"]:
                ax.plot(r["latency_ms"], r["mean"][s], marker="*", markersize=14, color=c, linestyle="none")
        if s in offline:
            ax.axhline(offline[s], color=c, linestyle="--", linewidth=1, label=f"{s}: offline BLSTM")
    ax.set_xlabel("algorithmic latency (ms)")
    ax.set_ylabel("TLG %WER")
    ax.set_title("Decoded at chunk N / right context M (★: as trained)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exp", nargs="+", required=True, type=Path)
    p.add_argument("--data", required=True, type=Path, help="the runs' data dir (fbank/<set>/feats.scp)")
    p.add_argument("--set", default="dev")
    p.add_argument("--utts", type=int, default=20)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path)
    p.add_argument("--bundles", nargs="+", type=Path, help="a mobile bundle per --exp (module docstring)")
    p.add_argument("--wer-sets", nargs="+", default=None, help="sets the bundles are scored on (default: --set)")
    p.add_argument("--chunk-ms", type=int, default=320, help="audio per call of the streaming recogniser")
    p.add_argument("--latency-sweep", nargs="+", metavar="N:M", help="decode each LC-BLSTM at these chunkings")
    p.add_argument("--config", type=Path, help="the recipe config whose decode section the sweep searches with")
    p.add_argument("--sweep-sets", nargs="+", default=["dev", "test"])
    p.add_argument("--offline-table", type=Path, help="a recipe's results/*.json holding the offline model's rows")
    p.add_argument("--offline-label", help="the label of those rows")
    p.add_argument("--offline-seeds", nargs="+", type=int, help="only those rows of these seeds")
    p.add_argument("--plot", type=Path, help="WER-against-latency PNG of the sweep")
    p.add_argument(
        "--bundle-sweep", action="store_true", help="the sweep also exports each setting's bundle and scores it"
    )
    a = p.parse_args(argv)
    if a.bundles and len(a.bundles) != len(a.exp):
        p.error("--bundles needs one bundle per --exp")
    torch.set_num_threads(1)
    if a.latency_sweep:
        return sweep_main(a)
    rows = []
    for j, e in enumerate(a.exp):
        saved = load_model(e / "final.pt")
        cfg = saved.model.cfg
        row = {
            "exp": str(e),
            "chunk_frames": cfg.chunk_frames,
            "right_context": cfg.right_context,
            "stack": cfg.stack,
            "latency_ms": latency_parts_ms(cfg),
        }
        for w in sorted(e.glob("decode_*_tlg/wer.json")):
            r = json.loads(w.read_text())
            row[f"wer_{r['set']}_tlg"] = r["wer"]
        if cfg.chunk_frames > 0:
            with tempfile.TemporaryDirectory() as tmp:
                n = 3 if a.quick else a.utts
                row["stream"] = stream_check(saved, a.data / "fbank" / a.set / "feats.scp", n, Path(tmp) / "lc.onnx")
        if a.bundles:
            n = 3 if a.quick else a.utts
            row["bundle"] = {"dir": str(a.bundles[j])}
            row["bundle"].update(bundle_check(saved, a.bundles[j], a.data, a.set, n, a.chunk_ms))
            for ws in a.wer_sets or [a.set]:
                row["bundle"][ws] = bundle_wer(a.bundles[j], a.data, ws, 8 if a.quick else 0, a.chunk_ms)
            print(f"{e}: bundle {json.dumps(row['bundle'])}", file=sys.stderr)
        rows.append(row)
        lat = row["latency_ms"]["total"] if row["latency_ms"] else None
        st = row.get("stream", {})
        print(
            f"{e}: latency {lat} ms, dev {row.get('wer_dev_tlg')} test {row.get('wer_test_tlg')}, "
            f"stream max |diff| {st.get('max_abs_diff')} (onnx {st.get('onnx_max_abs_diff')}), RTF torch "
            f"{st.get('stream_rtf_1thread')} onnx {st.get('onnx_rtf_1thread')}",
            file=sys.stderr,
        )
    devs = [r["wer_dev_tlg"] for r in rows if "wer_dev_tlg" in r]
    tests = [r["wer_test_tlg"] for r in rows if "wer_test_tlg" in r]
    summary = {
        "bench": "streaming_accuracy",
        "quick": a.quick,
        "runs": rows,
        "dev_tlg_mean": round(statistics.mean(devs), 2) if devs else None,
        "test_tlg_mean": round(statistics.mean(tests), 2) if tests else None,
    }
    for ws in (a.wer_sets or [a.set]) if a.bundles else []:
        for key in ("wer_stream", "wer_stream_endpoint", "wer_sherpa", "wer_sherpa_online", "stream_rtf_1thread"):
            vals = [r["bundle"][ws][key] for r in rows if key in r["bundle"][ws]]
            if not vals:
                continue
            summary[f"bundle_{ws}_{key}_mean"] = round(statistics.mean(vals), 4 if "rtf" in key else 2)
    if a.out:
        a.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


def sweep_main(a) -> int:
    from asrlib.config import load_config

    if a.config is None:
        raise SystemExit("--latency-sweep needs --config (the recipe config whose decode section it searches with)")
    settings = parse_settings(a.latency_sweep)
    exps, sets = a.exp, a.sweep_sets
    if a.quick:
        settings, exps, sets = settings[:2], exps[:1], ["dev"]
    offline = offline_reference(a.offline_table, a.offline_label, a.offline_seeds) if a.offline_table else {}
    bundles = {"config": a.config, "chunk_ms": a.chunk_ms} if a.bundle_sweep else None
    rows = latency_sweep(exps, a.data, sets, settings, load_config(a.config).decode, 8 if a.quick else 0, bundles)
    for r in rows:
        print(
            f"N={r['chunk_frames']} M={r['right_context']} {r['latency_ms']:7.1f} ms  "
            + "  ".join(f"{s} {r['mean'][s]:6.2f}" for s in sets)
            + "".join(
                f"  bundle {s}: streaming {b['wer_stream']:6.2f} sherpa-streaming {b.get('wer_sherpa_online', '-')}"
                for s, b in r.get("bundle_mean", {}).items()
            )
            + ("  (as trained)" if r["trained"] else ""),
            file=sys.stderr,
        )
    if a.plot:
        plot_sweep(rows, offline, len(exps), a.plot)
    summary = {
        "bench": "streaming_accuracy",
        "mode": "latency_sweep",
        "quick": a.quick,
        "runs": [str(e) for e in exps],
        "sets": sets,
        "offline": offline,
        "settings": rows,
    }
    if a.out:
        a.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
