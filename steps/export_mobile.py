"""Mobile export: compress (low-rank + fine-tune, prune + fine-tune), export ONNX (fp32, int8, fp16), verify against
PyTorch, and write the sherpa-onnx bundle.

    python -m steps.export_mobile --config recipes/digits/config.yaml --model exp/lstm_ctc/final.pt \
        --data-dir data --feats-dir data/fbank --lang-dir data/lang --out-dir exp/lstm_ctc/mobile

Settings: the config's ``export`` section (rank_ratio, sparsity, finetune_epochs, finetune_lr, finetune_utts,
per_channel, fp16, bundle_model, max_wer_loss). The bundle gets the compressed int8 model unless, with
``bundle_model: auto`` (the default), it loses more than ``max_wer_loss`` %WER on the dev set against the
uncompressed int8 model (TLG search at sherpa-onnx's settings), or ``bundle_model`` says ``int8``.
Outputs in ``--out-dir``:

* ``compress/lowrank``, ``compress/prune``: fine-tuning runs (checkpoints, logs; resumable), ``pruned.pt`` (the
  compressed PyTorch model, :func:`asrlib.export.prune.save_compressed`);
* ``baseline.fp32.onnx`` / ``baseline.int8.onnx`` / ``baseline.streaming.{fp32,int8}.onnx`` (the trained model as
  is), ``pruned.fp32.onnx``,
  ``pruned.int8.onnx``, ``pruned.fp16.onnx``, ``pruned.streaming.fp32.onnx``, ``pruned.streaming.int8.onnx``;
* ``export.json``: parameter counts, sparsity, ranks, sizes, ONNX-vs-PyTorch differences, the int8 op report,
  the dev %WER of both int8 models (``dev_wer_int8``) and the bundle's choice;
* ``bundle/``: the deployable bundle (:mod:`asrlib.export.bundle`);
* ``.export.done``, written last (the step is skipped when it matches the settings and the model file).

The networks' output carries the recipe's search (``decode.acoustic_scale``, ``decode.blank_penalty``; their
metadata and ``bundle.json``'s ``decode`` say so): sherpa-onnx, whose CTC graph search has neither setting, then
searches as the decode stage does (:meth:`asrlib.export.onnx_model.ScanAcousticModel.fold_search`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import zlib
from pathlib import Path

import torch

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import load_config
from asrlib.export import prune
from asrlib.features.cmvn import check_cmvn_mode, cmvn_info, online_prior
from asrlib.export.bundle import write_bundle
from asrlib.export.onnx_model import OnnxAcousticModel, ScanAcousticModel, export_onnx, verify_onnx
from asrlib.export.quantize import convert_fp16_weights, quantize_int8
from asrlib.errors import AsrError
from asrlib.io.atomic import write_json
from asrlib.io.stage import is_done, mark_done
from asrlib.models.device import resolve_device
from asrlib.models.lstm import count_parameters

log = logging.getLogger("export_mobile")


def file_sizes(path: Path) -> dict:
    """Bytes on disk and bytes after zlib level 9 (what an app store download / APK compression sees)."""
    data = path.read_bytes()
    return {"bytes": len(data), "bytes_zip": len(zlib.compress(data, 9))}


def compress(a, cfg, out: Path) -> Path:
    """Low-rank + fine-tune, then prune + fine-tune; returns the path of ``pruned.pt`` (skipped when done)."""
    ex = cfg.export
    target = out / "pruned.pt"
    marker = out / "compress" / ".done"
    st = a.model.stat()
    fp = {
        "export": {
            k: v
            for k, v in dataclasses.asdict(ex).items()
            if k in ("rank_ratio", "sparsity", "finetune_epochs", "finetune_lr", "finetune_utts")
        },
        "model_bytes": st.st_size,
        "model_mtime_ns": st.st_mtime_ns,
    }
    if is_done(marker, fingerprint=fp) and target.is_file():
        log.info("compression done earlier (%s)", marker)
        return target
    settings = out / "compress" / "settings.json"
    fp_json = json.loads(json.dumps(fp, sort_keys=True))
    if marker.parent.exists() and (not settings.is_file() or json.loads(settings.read_text()) != fp_json):
        log.info("%s holds a run with other settings or model: starting the compression over", marker.parent)
        shutil.rmtree(marker.parent)  # an unfinished run with the same settings is resumed instead
    write_json(settings, fp_json)
    saved = prune.load_compressed(a.model)
    model = saved.model
    info = {"params_before": count_parameters(model)}
    torch.set_num_threads(cfg.train.num_threads)
    # resolved once, for both fine-tunings (none without fine-tuning: no device needed then)
    device = resolve_device(cfg.train.device) if ex.finetune_epochs > 0 else None
    ranks = prune.low_rank_factorize(model, ex.rank_ratio)
    info["ranks"] = ranks
    if any(r is not None for r in ranks):
        log.info(
            "low-rank: ranks %s; %d -> %d parameters; fine-tuning %d epoch(s)",
            ranks,
            info["params_before"],
            count_parameters(model),
            ex.finetune_epochs,
        )
        info["finetune_lowrank"] = prune.finetune(
            model,
            cfg,
            a.feats_dir,
            a.data_dir,
            a.lang_dir,
            out / "compress" / "lowrank",
            train_set=a.train_set,
            dev_set=a.dev_set,
            device=device,
        )
    info["params_after_lowrank"] = count_parameters(model)
    if ex.sparsity > 0:
        masks = prune.magnitude_prune(model, ex.sparsity)
        log.info("pruned %.0f%% of every weight matrix; fine-tuning %d epoch(s)", 100 * ex.sparsity, ex.finetune_epochs)
        info["finetune_prune"] = prune.finetune(
            model,
            cfg,
            a.feats_dir,
            a.data_dir,
            a.lang_dir,
            out / "compress" / "prune",
            masks=masks,
            train_set=a.train_set,
            dev_set=a.dev_set,
            device=device,
        )
    info["sparsity"] = prune.sparsity_of(model)
    info["nonzero_params"] = prune.count_nonzero_parameters(model)
    prune.save_compressed(
        target,
        model,
        saved.cmvn_mean,
        saved.cmvn_inv_std,
        ranks,
        info["sparsity"],
        info={**info, **cmvn_info(cfg.features)},
    )
    mark_done(marker, info, fingerprint=fp)
    return target


EXPORTABLE_CMVN = ("global", "online")
FILE_TAG = {"pruned": "pruned", "int8": "baseline"}  # export.bundle_model -> its files' prefix


def bundle_decode(decode) -> dict:
    """The recipe's ``decode`` settings a bundle carries: segmentation, and the search folded into the networks."""
    return {
        k: v
        for k, v in dataclasses.asdict(decode).items()
        if k.startswith("segment") or k in ("acoustic_scale", "blank_penalty")
    }


def bundle_report(bundle, choice: str) -> dict:
    """export.json's summary of the written bundle."""
    return {"dir": str(bundle.dir), "model": choice, "bytes": sum(f["bytes"] for f in bundle.info["files"].values())}


def dev_wer(model: Path, feats_scp: Path, text: Path, lang_dir: Path) -> float:
    """%WER of an offline ONNX model on a data set's raw features, TLG search at sherpa-onnx's settings over the
    model's output as it is (the recipe's acoustic scale and blank penalty folded in)."""
    from asrlib.export.bundle import sherpa_search
    from asrlib.io.tables import read_table
    from asrlib.kaldi_io import MatrixReader
    from asrlib.score import score

    am, feats = OnnxAcousticModel(model), MatrixReader(feats_scp)
    dec = sherpa_search(lang_dir)
    refs = {u: t for u, t in read_table(text) if u in feats}
    if not refs:
        raise AsrError(f"{text} and {feats_scp} share no utterance: cannot measure the dev WER of {model}")
    return score(refs, {u: " ".join(dec.decode(am.scores(feats[u]))) for u in refs}).wer  # as sherpa-onnx sees it


def choose_bundle_model(ex, out: Path, feats_scp: Path, text: Path, lang_dir: Path):
    """The bundle's network, ``pruned`` or ``int8`` (the uncompressed model), by ``export.bundle_model``; ``auto``
    measures both int8 models on the dev set and keeps the compressed one unless it loses more than
    ``export.max_wer_loss``. Returns (name, {name: dev %WER} of what was measured)."""
    if ex.bundle_model != "auto":
        return ex.bundle_model, {}
    wers = {n: dev_wer(out / f"{FILE_TAG[n]}.int8.onnx", feats_scp, text, lang_dir) for n in ("int8", "pruned")}
    name = "pruned" if wers["pruned"] <= wers["int8"] + ex.max_wer_loss else "int8"
    log.info(
        "dev %%WER at sherpa-onnx's search: int8 %.2f, pruned int8 %.2f -> the bundle gets %s",
        wers["int8"],
        wers["pruned"],
        "the pruned model"
        if name == "pruned"
        else f"the uncompressed int8 model (pruning loses more than export.max_wer_loss {ex.max_wer_loss})",
    )
    return name, wers


def _refuse_local_cmn(why: str) -> None:
    raise AsrError(
        f"{why}: an on-device model folds the global CMVN and, with online, the causal running mean into "
        f"its graph, and nothing else (per-speaker CMN needs all of a speaker's audio, utterance CMN "
        f"all of the recording: a streaming model has neither); export a model trained with "
        f"features.cmvn: {' or '.join(EXPORTABLE_CMVN)}"
    )


def export_lc_bundle(a, cfg, saved, out: Path, sr: int, search) -> None:
    """The bundle of an LC-BLSTM or of a unidirectional LSTM with a look-ahead (:mod:`asrlib.export.lc_onnx`, whose
    chunk model has ``export.chunk_frames`` output frames): the chunk model (streaming) and the whole-utterance model
    (sherpa-onnx's offline contract) of the trained model and of its pruned copy (magnitude pruning and fine-tuning
    as for any model; no low rank: the chunk export reads plain LSTM layers), fp32 verified against PyTorch, then
    int8; the bundle's network chosen on dev as ``export.bundle_model`` says (:func:`choose_bundle_model` on the
    whole-utterance int8 models)."""
    from asrlib.export.lc_onnx import LcExport, export_lc, verify_lc, verify_sherpa_online
    from asrlib.models.latency import latency_parts_ms

    if cfg.export.rank_ratio > 0:
        log.info("chunk model: no low-rank step (export.rank_ratio %s is ignored)", cfg.export.rank_ratio)
    ex = dataclasses.replace(cfg.export, rank_ratio=0.0)
    pruned = prune.load_compressed(compress(a, dataclasses.replace(cfg, export=ex), out))

    def exportable(s) -> LcExport:  # a saved model as the chunk export sees it, the recipe's search folded in
        return LcExport(s.model, s.cmvn_mean, s.cmvn_inv_std, ex.chunk_frames).fold_search(*search)

    torch.set_num_threads(1)
    report: dict = {
        "params": {
            "baseline": count_parameters(saved.model),
            "pruned": count_parameters(pruned.model),
            "pruned_nonzero": prune.count_nonzero_parameters(pruned.model),
        },
        "sparsity": prune.sparsity_of(pruned.model),
        "files": {},
        "max_abs_diff_vs_torch": {},
    }
    for name, s in (("baseline", saved), ("pruned", pruned)):
        core = exportable(s)
        paths = {sig: export_lc(core, out / f"{tag}.fp32.onnx", sig, sample_rate=sr) for sig, tag in _lc_tags(name)}
        report["max_abs_diff_vs_torch"][name] = verify_lc(
            paths["chunk"], paths["whole"], s.model, s.cmvn_mean, s.cmvn_inv_std
        )
        for sig, tag in _lc_tags(name):
            q = quantize_int8(paths[sig], out / f"{tag}.int8.onnx", per_channel=cfg.export.per_channel)
            report[f"int8_ops_{name}" + ("_chunk" if sig == "chunk" else "")] = q
            for prec in ("fp32", "int8"):
                report["files"][f"{tag}.{prec}.onnx"] = file_sizes(out / f"{tag}.{prec}.onnx")
    choice, report["dev_wer_int8"] = choose_bundle_model(
        ex, out, a.feats_dir / a.dev_set / "feats.scp", a.data_dir / a.dev_set / "text", a.lang_dir
    )
    tag = FILE_TAG[choice]
    chosen = saved if choice == "int8" else pruned  # sherpa-onnx's streaming form of the bundle's network
    core = exportable(chosen)
    online = export_lc(core, out / f"{tag}.sherpa_online.fp32.onnx", "sherpa_online", sample_rate=sr)
    report["max_abs_diff_sherpa_online_vs_chunk"] = verify_sherpa_online(online, out / f"{tag}.streaming.fp32.onnx")
    quantize_int8(online, out / f"{tag}.sherpa_online.int8.onnx", per_channel=cfg.export.per_channel)
    mc = saved.model.cfg
    bundle = write_bundle(
        out / "bundle",
        out / f"{tag}.int8.onnx",
        out / f"{tag}.streaming.int8.onnx",
        a.lang_dir,
        feat_dim=saved.model.feat_dim,
        subsampling=saved.model.stack,
        sample_rate=sr,
        decode=bundle_decode(cfg.decode),
        extra={
            "model": choice,
            "compression": {"rank_ratio": 0.0, "sparsity": report["sparsity"] if choice == "pruned" else 0.0},
            "streaming": {
                "chunk_ms": cfg.export.chunk_ms,
                "lc_blstm": {  # the chunk model's N and M (a look-ahead model: export.chunk_frames and its K)
                    "chunk_frames": core.n,
                    "right_context": core.m,
                    "latency_ms": latency_parts_ms(mc, run_chunk=core.n),
                    "backward": core.bidirectional,
                },
            },
        },
        sherpa_online_int8=out / f"{tag}.sherpa_online.int8.onnx",
    )
    report["bundle"] = bundle_report(bundle, choice)
    write_json(out / "export.json", report)


def _lc_tags(name: str):
    """(signature, file prefix) of an LC-BLSTM's two ONNX models."""
    return (("chunk", f"{name}.streaming"), ("whole", name))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    p.add_argument("--model", type=Path, required=True, help="trained model (final.pt)")
    p.add_argument("--data-dir", type=Path, required=True, help="holds the train/dev Kaldi data dirs (fine-tuning)")
    p.add_argument("--feats-dir", type=Path, required=True, help="holds train/ and dev/ feats.scp; train/cmvn.scp")
    p.add_argument("--lang-dir", type=Path, required=True, help="tokens.txt, words.txt, TLG.fst")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--train-set", default="train")
    p.add_argument("--dev-set", default="dev")
    p.add_argument("--sample-rate", type=int, default=None, help="default: the config's data.sample_rate")
    a = p.parse_args(argv)
    cfg = load_config(a.config, a.overrides)
    if not a.model.is_file():
        raise AsrError(f"model file {a.model} does not exist (has the train stage finished?)")
    if cfg.features.cmvn not in EXPORTABLE_CMVN:
        _refuse_local_cmn(f"features.cmvn is {cfg.features.cmvn!r}")
    out = a.out_dir
    done = out / ".export.done"
    st = a.model.stat()
    sr = a.sample_rate or cfg.data.sample_rate
    search = [cfg.decode.acoustic_scale, cfg.decode.blank_penalty]  # folded into the networks' output
    fp = {
        "export": dataclasses.asdict(cfg.export),
        "model_bytes": st.st_size,
        "model_mtime_ns": st.st_mtime_ns,
        "sample_rate": sr,
        "lang_dir": str(a.lang_dir),
        "search": search,
    }  # the bundle carries that dir's TLG, the models the search
    if is_done(done, fingerprint=fp):
        print(f"export_mobile: {out} complete; skipping")
        return 0
    baseline = prune.load_compressed(a.model)  # after the skip check: a finished export costs no model load
    if baseline.cmn not in ("", "online"):
        _refuse_local_cmn(f"{a.model} was trained with features.cmvn: {baseline.cmn}")
    if (baseline.cmn, baseline.online_prior) != (check_cmvn_mode(cfg.features.cmvn), online_prior(cfg.features)):
        raise AsrError(
            f"{a.model} was trained with features.cmvn {baseline.cmn or 'global'} (online prior "
            f"{baseline.online_prior}), {a.config} says {cfg.features.cmvn} (online prior "
            f"{online_prior(cfg.features)}): fine-tuning needs the model's own; export with its config"
        )
    for f in ("tokens.txt", "words.txt", "TLG.fst"):
        if not (a.lang_dir / f).is_file():
            raise AsrError(f"{a.lang_dir / f} does not exist; run the lang stage (steps.prepare_lang) first")
    out.mkdir(parents=True, exist_ok=True)
    setup_logging(out / "log" / "export_mobile.log")
    torch.manual_seed(0)
    if baseline.model.cfg.chunk_frames > 0 or baseline.model.cfg.lookahead > 0:
        export_lc_bundle(a, cfg, baseline, out, sr, search)
        mark_done(done, {"bundle": str(out / "bundle")}, fingerprint=fp)
        return 0

    pruned_pt = compress(a, cfg, out)
    pruned = prune.load_compressed(pruned_pt)
    report: dict = {
        "params": {
            "baseline": count_parameters(baseline.model),
            "pruned": count_parameters(pruned.model),
            "pruned_nonzero": prune.count_nonzero_parameters(pruned.model),
        },
        "sparsity": prune.sparsity_of(pruned.model),
        "files": {},
        "max_abs_diff_vs_torch": {},
    }
    torch.set_num_threads(1)
    files = {}
    for name, saved in (("baseline", baseline), ("pruned", pruned)):
        core = ScanAcousticModel.from_model(
            saved.model, saved.cmvn_mean, saved.cmvn_inv_std, online_prior=saved.online_prior
        ).fold_search(*search)
        for streaming in (False, True):
            tag = f"{name}.streaming" if streaming else name
            path = export_onnx(core, out / f"{tag}.fp32.onnx", streaming=streaming, sample_rate=sr)
            diff = verify_onnx(
                path,
                saved.model,
                saved.cmvn_mean,
                saved.cmvn_inv_std,
                lengths=(61, 250),
                online_prior=saved.online_prior,
            )
            report["max_abs_diff_vs_torch"][tag] = diff
            log.info("%s: exported and verified against PyTorch (max |diff| %.2e on two lengths)", path, diff)
            q = quantize_int8(path, out / f"{tag}.int8.onnx", per_channel=cfg.export.per_channel)
            files[f"{tag}.fp32.onnx"] = path
            files[f"{tag}.int8.onnx"] = out / f"{tag}.int8.onnx"
            if not streaming:
                report[f"int8_ops_{name}"] = q
            if name == "pruned" and not streaming and cfg.export.fp16:
                files["pruned.fp16.onnx"] = convert_fp16_weights(path, out / "pruned.fp16.onnx")
    for fname, path in files.items():
        report["files"][fname] = file_sizes(path)
    q = report["int8_ops_pruned"]
    log.info(
        "int8: %d matrix products quantized (%s), %d left in float",
        len(q["int8_matmuls"]),
        ", ".join(sorted({m.rsplit('(', 1)[1].rstrip(')') for m in q["int8_matmuls"]})),
        len(q["float_matmuls"]),
    )
    choice, report["dev_wer_int8"] = choose_bundle_model(
        cfg.export, out, a.feats_dir / a.dev_set / "feats.scp", a.data_dir / a.dev_set / "text", a.lang_dir
    )
    compression = (
        {"rank_ratio": cfg.export.rank_ratio, "sparsity": report["sparsity"]}
        if choice == "pruned"
        else {"rank_ratio": 0.0, "sparsity": 0.0}
    )
    tag = FILE_TAG[choice]
    bundle = write_bundle(
        out / "bundle",
        out / f"{tag}.int8.onnx",
        out / f"{tag}.streaming.int8.onnx",
        a.lang_dir,
        feat_dim=pruned.model.feat_dim,
        subsampling=pruned.model.stack,
        sample_rate=sr,
        decode=bundle_decode(cfg.decode),
        extra={"model": choice, "compression": compression, "streaming": {"chunk_ms": cfg.export.chunk_ms}},
    )
    report["bundle"] = bundle_report(bundle, choice)
    write_json(out / "export.json", report)
    mark_done(done, {"bundle": str(bundle.dir)}, fingerprint=fp)
    sizes = report["files"]
    log.info(
        "sizes: fp32 %d B, pruned fp32 %d B, pruned int8 %d B (%.3f x fp32); bundle in %s",
        sizes["baseline.fp32.onnx"]["bytes"],
        sizes["pruned.fp32.onnx"]["bytes"],
        sizes["pruned.int8.onnx"]["bytes"],
        sizes["pruned.int8.onnx"]["bytes"] / sizes["baseline.fp32.onnx"]["bytes"],
        bundle.dir,
    )
    return 0


if __name__ == "__main__":
    run_main(main)
