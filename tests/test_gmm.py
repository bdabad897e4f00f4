"""Monophone GMM-HMM training and alignment on a toy task whose true phone boundaries are known.

Also used by tests/test_ce.py (``make_gmm_toy``): the same toy data drives mono -> align -> CE -> CTC(init=ce).
"""

import json
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

from helpers import toy_dirs
from asrlib.features.cmvn import compute_global_cmvn
from asrlib.io.tables import read_table, write_table
from asrlib.kaldi_io import read_int_vectors, write_matrices
from asrlib.lang.lexicon import write_lang_files

PHONES = ["A", "B", "C", "D"]
LEXICON = {"W1": [["A"]], "W2": [["B", "C"]], "W3": [["C", "D"]], "W4": [["D", "A", "B"]]}
OOV_UTT, SHORT_UTT = "bad-oov", "bad-short"


def make_gmm_toy(
    root: Path, num_utts: Dict[str, int] = None, dim: int = 20, seed: int = 0
) -> Tuple[Path, Dict[str, List[Tuple[str, int, int]]]]:
    """Features made of noisy per-phone prototypes (+ a silence prototype), in real file formats.

    Writes ``root/{data,fbank}/<set>``, ``root/lang`` (lexicon, tokens, words). The train set also gets two bad
    utterances: one with an OOV word, one too short for its transcript. Returns (root, true phone segments
    ``utt -> [(phone or SIL, first frame, frames)]``).
    """
    num_utts = num_utts or {"train": 60, "dev": 12}
    rng = np.random.default_rng(seed)
    # one smooth "spectral envelope" over the bins per phone (as real filterbanks are)
    basis = np.cos(np.pi / dim * (np.arange(dim) + 0.5)[None, :] * np.arange(8)[:, None])
    protos = {p: rng.normal(0, 2.5, 8) @ basis for p in PHONES + ["SIL"]}
    words = sorted(LEXICON)
    truth: Dict[str, List[Tuple[str, int, int]]] = {}
    for name, n in num_utts.items():
        feats, text = [], []
        for i in range(n):
            utt = f"spk{i % 3}-{name}-{i:04d}"
            ws = [words[j] for j in rng.integers(0, len(words), size=int(rng.integers(1, 4)))]
            segs = [("SIL", int(rng.integers(5, 15)))]
            for w in ws:
                segs += [(p, int(rng.integers(5, 12))) for p in LEXICON[w][0]]
                if rng.random() < 0.5:
                    segs.append(("SIL", int(rng.integers(4, 10))))
            if segs[-1][0] != "SIL":
                segs.append(("SIL", int(rng.integers(5, 15))))
            x = np.concatenate([np.repeat(protos[p][None], k, 0) for p, k in segs])
            x = x + rng.normal(0, 1.0, x.shape)
            feats.append((utt, x.astype(np.float32)))
            text.append((utt, " ".join(ws)))
            starts = np.cumsum([0] + [k for _, k in segs])
            truth[utt] = [(p, int(b), k) for (p, k), b in zip(segs, starts)]
        if name == "train":
            feats.append((OOV_UTT, rng.normal(0, 1, (40, dim)).astype(np.float32)))
            text.append((OOV_UTT, "W1 W9"))
            feats.append((SHORT_UTT, rng.normal(0, 1, (5, dim)).astype(np.float32)))
            text.append((SHORT_UTT, "W4 W4 W2"))
        feats.sort(key=lambda kv: kv[0])
        write_matrices(root / "fbank" / name / "feats.ark", feats)
        write_table(root / "fbank" / name / "utt2num_frames", [(u, str(len(x))) for u, x in feats])
        write_table(root / "data" / name / "text", text)
    compute_global_cmvn(root / "fbank" / "train" / "feats.scp", root / "fbank" / "train", show_progress=False)
    write_lang_files(root / "lang", LEXICON)
    return root, truth


def gmm_toy_config(path: Path, **sections) -> Path:
    import yaml

    # fbank: the toy's piecewise-constant "speech" has no dynamics, and its jumps make delta features misleading
    cfg = {
        "gmm": {"num_iters": 8, "max_iter_inc": 6, "total_gauss": 40, "feature_type": "fbank"},
        "model": {"num_layers": 1, "hidden_size": 24, "proj_size": 12, "peephole": True, "stack": 3, "dropout": 0.0},
        "train": {
            "epochs": 3,
            "batch_seconds": 3.0,
            "lr": 0.01,
            "warmup_steps": 2,
            "checkpoint_every": 50,
            "log_every": 5,
            "num_threads": 1,
            "spec_augment": False,
        },
        "ce": {"epochs": 3, "lr": 0.01},
    }
    for k, v in sections.items():
        cfg.setdefault(k, {}).update(v)
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_mono_and_align(root: Path, cfg: Path, sets=("train", "dev")) -> Tuple[Path, Path]:
    from steps import align, train_mono

    common = [
        "--config",
        str(cfg),
        *toy_dirs(root),
    ]
    assert train_mono.main(common + ["--exp-dir", str(root / "exp" / "mono")]) == 0
    assert (
        align.main(
            common
            + [
                "--model",
                str(root / "exp" / "mono" / "final.mdl"),
                "--out-dir",
                str(root / "exp" / "ali"),
                "--sets",
                *sets,
                "--num-plot",
                "2",
            ]
        )
        == 0
    )
    return root / "exp" / "mono", root / "exp" / "ali"


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root, truth = make_gmm_toy(tmp_path_factory.mktemp("gmm"))
    mono, ali = run_mono_and_align(root, gmm_toy_config(root / "c.yaml"))
    return root, truth, mono, ali


def test_training_raises_likelihood_and_writes_model_files(toy):
    root, _, mono, _ = toy
    passes = json.loads((mono / "log" / "passes.json").read_text())
    ll = [p["loglike_per_frame"] for p in passes]
    assert len(ll) == 8 and ll[-1] > ll[0] + 5 and ll[-1] >= max(ll[:-1]) - 0.5
    assert passes[-1]["num_gauss"] > passes[0]["num_gauss"]
    # the tree in Kaldi's binary format ("\0B" header, then <ContextDependency>), text topology, phones with SIL
    tree = (mono / "tree").read_bytes()
    assert tree.startswith(b"\0B") and b"ContextDependency" in tree
    assert (mono / "topo").read_text().startswith("<Topology>")
    assert dict(read_table(mono / "phones.txt"))["SIL"] == "5"


def test_model_round_trips_and_features_match(toy):
    from asrlib.gmm.model import load_gmm, save_gmm
    from asrlib.kaldi_io import MatrixReader

    root, _, mono, ali = toy
    m = load_gmm(mono / "final.mdl")
    from asrlib.features.cmvn import load_cmvn

    raw = MatrixReader(root / "fbank" / "dev" / "feats.scp")["spk0-dev-0000"]
    x = m.features(raw)
    assert np.allclose(x, load_cmvn(root / "fbank" / "train" / "cmvn.scp").apply(raw))  # the training features
    save_gmm(m, root / "copy")
    m2 = load_gmm(root / "copy" / "final.mdl")
    for pdf in range(int(m.tm.num_pdfs)):
        assert m.am.log_likelihood(pdf, x[3]) == m2.am.log_likelihood(pdf, x[3])
    assert (root / "copy" / "tree").read_bytes() == (mono / "tree").read_bytes()
    # the copy (written, then read back from the .npz format) aligns bit-identically
    from steps import align

    from asrlib.kaldi_io import read_int_vectors

    args = ["--config", str(root / "c.yaml"), *toy_dirs(root), "--sets", "dev", "--num-plot", "0"]
    assert align.main(args + ["--model", str(root / "copy" / "final.mdl"), "--out-dir", str(root / "ali_copy")]) == 0
    a, b = (read_int_vectors(d / "dev" / "ali.scp") for d in (ali, root / "ali_copy"))
    assert a and a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_mfcc_from_fbank_and_deltas():
    from asrlib.gmm.feats import GmmFeatureMaker, dct_matrix, deltas

    m = dct_matrix(20, 20, lifter=0)
    assert np.allclose(m.T @ m, np.eye(20), atol=1e-5)  # orthonormal DCT-II (Kaldi's, before liftering)
    ramp = np.arange(30, dtype=np.float32)[:, None] * np.array([[2.0, -1.0]], dtype=np.float32)
    d = deltas(ramp)
    assert np.allclose(d[2:-2], [[2.0, -1.0]]) and np.allclose(deltas(d)[4:-4], 0)
    x = np.random.default_rng(0).normal(size=(50, 23)).astype(np.float32)
    y = GmmFeatureMaker("mfcc_deltas", 13)(x)
    assert y.shape == (50, 39) and np.allclose(y[:, :13], x @ dct_matrix(13, 23))


def test_alignment_boundaries_match_the_truth(toy):
    root, truth, _, ali = toy
    got: Dict[str, List[Tuple[str, float]]] = {}
    for line in (ali / "dev" / "phones.ctm").read_text().splitlines():
        utt, _, start, _, phone = line.split()
        got.setdefault(utt, []).append((phone, round(float(start) * 100)))
    errors = []
    for utt, segs in got.items():
        ref = [(p, b) for p, b, _ in truth[utt]]
        # the aligner may merge adjacent SIL segments or skip optional ones: compare the non-silence phones
        hyp_ns = [(p, b) for p, b in segs if p != "SIL"]
        ref_ns = [(p, b) for p, b in ref if p != "SIL"]
        assert [p for p, _ in hyp_ns] == [p for p, _ in ref_ns], utt
        errors += [abs(h - r) for (_, h), (_, r) in zip(hyp_ns, ref_ns)]
    assert len(got) == 12
    # a toy phone's three HMM states see identical frames, so its last states may take a frame or two of the
    # next phone: boundaries within 20 ms, not exact
    errors = np.asarray(errors)
    # the 90 % and mean bounds are the quality check; the maximum only catches a lost phone: training in one
    # process with other tests is not bit-reproducible (a 7-frame outlier once failed CI with max <= 4)
    assert np.mean(errors <= 2) >= 0.9 and errors.max() <= 10 and errors.mean() <= 1.5, errors


def test_archives_and_bad_input_are_reported(toy):
    root, truth, mono, ali = toy
    reasons = dict(read_table(mono / "excluded.txt"))
    assert "OOV word(s) W9" in reasons["bad-oov"] and "too short" in reasons["bad-short"]
    reasons = dict(read_table(ali / "train" / "excluded.txt"))
    assert "OOV" in reasons["bad-oov"] and "too short for its transcript: 5 frames" in reasons["bad-short"]
    tids, pdfs = read_int_vectors(ali / "train" / "ali.scp"), read_int_vectors(ali / "train" / "pdf.scp")
    assert set(tids) == set(pdfs) == {u for u in truth if "-train-" in u}
    nframes = dict(read_table(root / "fbank" / "train" / "utt2num_frames"))
    info = json.loads((ali / "train" / "info.json").read_text())
    assert all(len(tids[u]) == len(pdfs[u]) == int(nframes[u]) for u in tids)
    assert all(0 <= int(p.min()) and int(p.max()) < info["num_pdfs"] for p in pdfs.values())
    assert info["excluded"] == 2 and info["utterances"] == 60 and len(info["pdf_phones"]) == info["num_pdfs"]
    assert (ali / "dev" / "alignment.png").stat().st_size > 10_000


def test_finished_stages_are_skipped(toy, capsys):
    root, _, _, _ = toy
    run_mono_and_align(root, root / "c.yaml")
    out = capsys.readouterr().out
    assert "train_mono:" in out and out.count("already aligned") == 2


def test_missing_model_is_a_clear_error(tmp_path):
    from asrlib.gmm.model import load_gmm
    from asrlib.errors import AsrError

    with pytest.raises(AsrError, match="steps.train_mono"):
        load_gmm(tmp_path / "final.mdl")
    (tmp_path / "final.mdl").write_bytes(b"not a model")
    with pytest.raises(AsrError, match="not a readable GMM model"):
        load_gmm(tmp_path / "final.mdl")


def _decode_gmm(root: Path, mono: Path, out: str) -> Dict[str, str]:
    from steps import decode_gmm

    assert (
        decode_gmm.main(
            [
                "--config",
                str(root / "c.yaml"),
                "--model",
                str(mono / "final.mdl"),
                "--lang-dir",
                str(root / "lang"),
                "--feats",
                str(root / "fbank" / "dev" / "feats.scp"),
                "--graph-dir",
                str(root / "exp" / out / "graph"),
                "--out-dir",
                str(root / "exp" / out / "decode"),
            ]
        )
        == 0
    )
    return dict(read_table(root / "exp" / out / "decode" / "hyp.txt"))


def _check_hyps(root: Path, hyps: Dict[str, str]) -> None:
    """Every dev utterance is decoded exactly unless two adjacent words meet on the same phone: the toy's frames of
    one phone are all alike, so "A" + "A" (W1 W1) or "...B" + "B..." without silence between is one long phone and
    cannot be told from a single word."""
    ref = dict(read_table(root / "data" / "dev" / "text"))
    assert set(hyps) == set(ref)
    clear = [
        u
        for u, r in ref.items()
        if all(LEXICON[a][0][-1] != LEXICON[b][0][0] for a, b in zip(r.split(), r.split()[1:]))
    ]
    assert len(clear) >= 8
    assert {u: hyps[u] for u in clear} == {u: ref[u] for u in clear}


def test_gmm_decoding_with_a_word_loop_and_an_ngram(toy, capsys):
    """steps.decode_gmm: HCLG from the model and data/lang/G.fst (mkgraph.sh), gmm-decode-faster; the toy's
    distinct phone prototypes make the words easy, so with either grammar every unambiguous dev utterance must come
    out exactly."""
    from asrlib.lang.graphs import make_arpa_fst, make_word_loop, write_fst
    from asrlib.lang.lexicon import read_words
    from asrlib.lang.ngram import build_arpa

    root, _, mono, _ = toy
    words = {w: i for i, w in read_words(root / "lang" / "words.txt").items()}
    write_fst(make_word_loop(words), root / "lang" / "G.fst")
    _check_hyps(root, _decode_gmm(root, mono, "loop"))
    assert (root / "exp" / "loop" / "graph" / "HCLG.fst").is_file()
    assert (root / "exp" / "loop" / "decode" / "no_final.txt").read_text() == ""
    capsys.readouterr()
    _decode_gmm(root, mono, "loop")  # finished: skipped
    assert "complete; skipping" in capsys.readouterr().out
    # a bigram G has back-off arcs reading #0: L needs its #0:#0 loop, else H∘C∘L∘G loses every backed-off path
    build_arpa(
        [root / "data" / "train" / "text"],
        root / "lang" / "lm.arpa",
        2,
        words=root / "lang" / "words.txt",
        has_utt_ids=True,
    )
    G = make_arpa_fst(root / "lang" / "lm.arpa", root / "lang" / "words.txt", 2)
    assert any(arc.ilabel == words["#0"] for s in range(G.num_states) for arc in _arcs(G, s))
    write_fst(G, root / "lang" / "G.fst")
    _check_hyps(root, _decode_gmm(root, mono, "bigram"))


def _arcs(fst, state):
    from asrlib.kaldi_imports import kaldifst

    return list(kaldifst.ArcIterator(fst, state))


def test_speaker_cmn_through_gmm_training_alignment_and_decoding(tmp_path):
    """features.cmvn: speaker through train_mono, align and decode_gmm: each toy speaker's features are shifted by
    its own constant (a channel), per-speaker CMN removes it, and the dev words still come out."""
    from asrlib.features.cmvn import compute_global_cmvn, compute_speaker_cmvn
    from asrlib.gmm.model import load_gmm
    from asrlib.kaldi_io import MatrixReader, write_matrices
    from asrlib.lang.graphs import make_word_loop, write_fst
    from asrlib.lang.lexicon import read_words

    root, _ = make_gmm_toy(tmp_path, {"train": 45, "dev": 12}, seed=1)
    shift = {f"spk{i}": np.random.default_rng(i).normal(0, 4, 20).astype(np.float32) for i in range(3)}
    for s in ("train", "dev"):
        fb = root / "fbank" / s
        feats = [
            (u, m + shift[u.split("-")[0]] if u.startswith("spk") else m) for u, m in MatrixReader(fb / "feats.scp")
        ]
        write_matrices(fb / "feats.ark", feats)
        write_table(root / "data" / s / "utt2spk", [(u, u.split("-")[0]) for u, _ in feats])
        compute_speaker_cmvn(fb / "feats.scp", root / "data" / s / "utt2spk", show_progress=False)
    compute_global_cmvn(root / "fbank" / "train" / "feats.scp", root / "fbank" / "train", False, cmn="speaker")
    mono, ali = run_mono_and_align(root, gmm_toy_config(root / "c.yaml", features={"cmvn": "speaker"}))
    assert load_gmm(mono / "final.mdl").info["cmvn"] == "speaker"
    assert json.loads((ali / "dev" / "info.json").read_text())["utterances"] == 12
    words = {w: i for i, w in read_words(root / "lang" / "words.txt").items()}
    write_fst(make_word_loop(words), root / "lang" / "G.fst")
    _check_hyps(root, _decode_gmm(root, mono, "spk"))
