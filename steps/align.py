"""Align data sets with a GMM-HMM model (Kaldi's steps/align_si.sh): frame targets for cross-entropy training.

    python -m steps.align --config recipes/digits/config.yaml --model exp/mono/final.mdl --data-dir data \
        --feats-dir data/fbank --lang-dir data/lang --out-dir exp/mono_ali --sets train dev

For every set, ``<out-dir>/<set>/`` gets
- ``ali.ark/scp``: Kaldi int32-vector archive of transition ids, one per 10 ms frame (Kaldi's ali.*.gz content);
- ``pdf.ark/scp``: the same alignments as pdf ids (``ali-to-pdf``): the cross-entropy targets;
- ``phones.ctm``: ``<utt> 1 <start s> <dur s> <phone>`` per aligned phone (Kaldi's ``ali-to-phones --ctm-output``);
- ``words.ctm``: the same for words;
- ``excluded.txt``: utterances without an alignment and why (no features, OOV word, too short for the
  transcript, or no path even with the retry beam); ``retried.txt``: those that needed the retry beam;
- ``info.json`` (number of pdfs, the pdf -> phone map, counts, log-likelihood per frame), ``alignment.png``
  (a few utterances with their phone and word boundaries) and ``.done``.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
from pathlib import Path
from typing import List, Tuple

from tqdm import tqdm

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import load_config
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_open, write_json
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import write_table
from asrlib.features.cmvn import open_features
from asrlib.kaldi_io import write_int_vectors
from asrlib.gmm.align import AlignmentConverter, GraphCompiler, min_frames, viterbi_align
from asrlib.gmm.data import select_utterances
from asrlib.gmm.lang import load_gmm_lang
from asrlib.gmm.model import GmmModel, load_gmm
from asrlib.gmm.plot import plot_alignments

log = logging.getLogger("align")
FRAME_SHIFT = 0.01


def _file_md5(path: Path) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def align_set(
    model: GmmModel,
    compiler: GraphCompiler,
    conv: AlignmentConverter,
    lang,
    text: Path,
    feats_scp: Path,
    out: Path,
    beam: float,
    retry_beam: float,
    num_plot: int = 4,
) -> dict:
    reader = open_features(feats_scp, model.cmn)
    utts, excluded = select_utterances(text, reader, lang)
    alis: List[Tuple[str, List[int]]] = []
    retried: List[Tuple[str, str]] = []
    ctm_phones, ctm_words, plots = [], [], []
    tot_like, tot_frames = 0.0, 0
    for utt, words in tqdm(utts, desc=f"align {out.name}", unit="utt", mininterval=2.0):
        fbank = reader[utt]
        x = model.features(fbank)
        graph = compiler.compile([lang.words[w] for w in words])
        res = viterbi_align(model, graph, x, utt, beam, retry_beam)
        if res.tids is None:
            need = min_frames(graph)
            if len(x) < need:
                excluded.append(
                    (utt, f"too short for its transcript: {len(x)} frames, its phones' HMMs need at least {need}")
                )
            else:
                excluded.append(
                    (
                        utt,
                        f"no alignment with beam {beam} nor retry beam {retry_beam} (transcript "
                        f"does not match the audio?)",
                    )
                )
            continue
        if res.retried:
            retried.append((utt, f"aligned only with the retry beam {retry_beam}"))
        alis.append((utt, res.tids))
        tot_like, tot_frames = tot_like + res.loglike, tot_frames + len(res.tids)
        phones = conv.to_phones(res.tids)
        wsegs = conv.to_words(phones, words, lang.lexicon) or []
        ctm_phones += [f"{utt} 1 {b * FRAME_SHIFT:.2f} {n * FRAME_SHIFT:.2f} {conv.names[p]}\n" for p, b, n in phones]
        ctm_words += [f"{utt} 1 {b * FRAME_SHIFT:.2f} {n * FRAME_SHIFT:.2f} {w}\n" for w, b, n in wsegs]
        if len(plots) < num_plot:
            plots.append((f"{utt}: {' '.join(words)}", fbank, [(conv.names[p], b, n) for p, b, n in phones], wsegs))
    out.mkdir(parents=True, exist_ok=True)
    write_int_vectors(out / "ali.ark", alis)
    write_int_vectors(out / "pdf.ark", ((u, conv.to_pdfs(t)) for u, t in alis))
    with atomic_open(out / "phones.ctm") as f:
        f.writelines(ctm_phones)
    with atomic_open(out / "words.ctm") as f:
        f.writelines(ctm_words)
    write_table(out / "excluded.txt", excluded)
    write_table(out / "retried.txt", retried)
    if plots:
        plot_alignments(plots, out / "alignment.png", FRAME_SHIFT)
    info = {
        "utterances": len(alis),
        "excluded": len(excluded),
        "retried": len(retried),
        "frames": tot_frames,
        "loglike_per_frame": tot_like / max(tot_frames, 1),
        "num_pdfs": int(model.tm.num_pdfs),
        "pdf_phones": model.pdf_phones(),
        "frame_shift": FRAME_SHIFT,
    }
    write_json(out / "info.json", info)
    if excluded:
        log.warning("%s: %d utterance(s) not aligned; see %s", out.name, len(excluded), out / "excluded.txt")
    if not alis:
        raise AsrError(f"no utterance of {text} could be aligned; see {out / 'excluded.txt'}")
    return {k: v for k, v in info.items() if k != "pdf_phones"}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    p.add_argument("--model", type=Path, required=True, help="GMM model (steps.train_mono's final.mdl)")
    p.add_argument("--data-dir", type=Path, required=True, help="holds <set>/text")
    p.add_argument("--feats-dir", type=Path, required=True, help="holds <set>/feats.scp")
    p.add_argument("--lang-dir", type=Path, required=True)
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--sets", nargs="+", default=["train", "dev"])
    p.add_argument("--num-plot", type=int, default=4, help="utterances drawn in <set>/alignment.png")
    a = p.parse_args(argv)
    cfg = load_config(a.config, a.overrides)
    g = cfg.gmm
    model = None
    for name in a.sets:
        out = a.out_dir / name
        done = out / ".done"
        if not a.model.is_file():
            raise AsrError(f"GMM model {a.model} does not exist (run steps.train_mono first)")
        fp = {
            "model_md5": _file_md5(a.model),
            "beam": g.align_beam,
            "retry_beam": g.align_retry_beam,
            "sil_prob": g.sil_prob,
            "feats": str(a.feats_dir / name / "feats.scp"),
        }
        if is_done(done, fingerprint=fp):
            print(f"align: {out} already aligned ({done}); skipping")
            continue
        setup_logging(a.out_dir / "log" / "align.log")
        if model is None:
            model = load_gmm(a.model)
            lang = load_gmm_lang(a.lang_dir, model.sil_phone)
            if lang.phones != model.phones:
                raise AsrError(
                    f"{a.lang_dir} has other phones than the model {a.model} was trained with; "
                    f"retrain it (steps.train_mono) with this lang dir"
                )
            compiler = GraphCompiler(model, lang, g.sil_prob)
            conv = AlignmentConverter(model)
        info = align_set(
            model,
            compiler,
            conv,
            lang,
            a.data_dir / name / "text",
            a.feats_dir / name / "feats.scp",
            out,
            g.align_beam,
            g.align_retry_beam,
            a.num_plot,
        )
        log.info("%s: %s", name, info)
        mark_done(done, info, fingerprint=fp)
    return 0


if __name__ == "__main__":
    run_main(main)
