"""Decode with the monophone GMM-HMM (Kaldi's utils/mkgraph.sh + steps/decode.sh with gmm-decode-faster).

    python -m steps.decode_gmm --config recipes/yesno/config_ce.yaml --model exp/mono/final.mdl \
        --lang-dir data/lang --feats data/fbank/test/feats.scp --graph-dir exp/mono/graph \
        --out-dir exp/lstm_ctc/decode_test_mono

Builds ``<graph-dir>/HCLG.fst`` once from the model and the recipe's grammar ``<lang-dir>/G.fst`` (word loop or
n-gram; skipped when the model and G are unchanged), then searches every utterance of ``--feats`` (beam, max
active states and acoustic scale from the config's ``gmm.decode_*``, Kaldi's defaults 13 / 7000 / 1/12) and writes
the best word sequences as a Kaldi ``text`` file ``<out-dir>/hyp.txt`` for ``steps.score``. An utterance whose search
reaches no final state gets an empty hypothesis (its words count as deletions), is listed in
``<out-dir>/no_final.txt`` and counted in the log.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from tqdm import tqdm

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import load_config
from asrlib.errors import AsrError
from asrlib.io.files import sha256_file
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table, write_table
from asrlib.features.cmvn import open_features

log = logging.getLogger("decode_gmm")


def build_graph(model, lang, lang_dir: Path, graph_dir: Path, fp: dict):
    """``graph_dir/HCLG.fst`` (made or reused when ``fp`` — model and G checksums, silence probability — is
    unchanged); returns the FST."""
    from asrlib.gmm.decode import make_hclg
    from asrlib.lang.graphs import read_fst, write_fst

    g_path = lang_dir / "G.fst"
    hclg_path, marker = graph_dir / "HCLG.fst", graph_dir / ".graph.done"
    if hclg_path.is_file() and is_done(marker, fingerprint=fp):
        return read_fst(hclg_path)
    t0 = time.perf_counter()
    hclg = make_hclg(model, lang, read_fst(g_path), fp["sil_prob"])
    write_fst(hclg, hclg_path)
    mark_done(marker, {"states": hclg.num_states, "seconds": round(time.perf_counter() - t0, 3)}, fingerprint=fp)
    return hclg


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    p.add_argument("--model", type=Path, required=True, help="final.mdl of steps.train_mono")
    p.add_argument("--lang-dir", type=Path, required=True)
    p.add_argument("--feats", type=Path, required=True, help="feats.scp (raw fbank of the feature stage)")
    p.add_argument("--graph-dir", type=Path, required=True, help="where HCLG.fst is made (e.g. exp/mono/graph)")
    p.add_argument("--out-dir", type=Path, required=True)
    a = p.parse_args(argv)
    setup_logging()
    g = load_config(a.config, a.overrides).gmm
    if not a.model.is_file():
        raise AsrError(f"GMM model {a.model} does not exist: run steps.train_mono first (train.init: ce)")
    if not (a.lang_dir / "G.fst").is_file():
        raise AsrError(f"{a.lang_dir / 'G.fst'} does not exist: run steps.prepare_lang first (stage 3)")
    done = a.out_dir / ".decode.done"
    graph_fp = {"model": sha256_file(a.model), "G": sha256_file(a.lang_dir / "G.fst"), "sil_prob": g.sil_prob}
    fp = {
        **graph_fp,
        "feats": str(a.feats),
        "beam": g.decode_beam,
        "max_active": g.decode_max_active,
        "acwt": g.decode_acwt,
    }
    if is_done(done, fingerprint=fp):
        print(f"decode_gmm: {a.out_dir} complete; skipping")
        return 0
    from asrlib.gmm.decode import GmmDecoder
    from asrlib.gmm.lang import load_gmm_lang
    from asrlib.gmm.model import load_gmm

    model = load_gmm(a.model)
    lang = load_gmm_lang(a.lang_dir, model.sil_phone)
    if lang.phones != model.phones:
        raise AsrError(
            f"{a.lang_dir} has other phones than the model {a.model} was trained with; retrain it "
            f"(steps.train_mono) with this lang dir"
        )
    hclg = build_graph(model, lang, a.lang_dir, a.graph_dir, graph_fp)
    decoder = GmmDecoder(model, hclg, beam=g.decode_beam, max_active=g.decode_max_active, acoustic_scale=g.decode_acwt)
    id2word = {i: w for w, i in lang.words.items()}
    reader = open_features(a.feats, model.cmn)
    hyps, no_final, frames, t0 = [], [], 0, time.perf_counter()
    for utt, _ in tqdm(read_table(a.feats), desc="decode gmm", unit="utt", mininterval=2.0):
        fbank = reader[utt]
        frames += fbank.shape[0]
        words = decoder.decode(fbank)
        if words is None:
            no_final.append((utt, "no final state reached within the beam"))
            words = []
        hyps.append((utt, " ".join(id2word[w] for w in words)))
    elapsed = time.perf_counter() - t0
    write_table(a.out_dir / "hyp.txt", hyps)
    write_table(a.out_dir / "no_final.txt", no_final)
    if no_final:
        log.warning(
            "%d of %d utterances reached no final state (empty hypotheses; see %s)",
            len(no_final),
            len(hyps),
            a.out_dir / "no_final.txt",
        )
    info = {
        "method": "mono",
        "utterances": len(hyps),
        "frames": frames,
        "search_seconds": round(elapsed, 3),
        "no_final": len(no_final),
        "hclg_states": hclg.num_states,
    }
    mark_done(done, info, fingerprint=fp)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    run_main(main)
