"""LibriSpeech recipe on a generated corpus in the real layout (flac + trans.txt per chapter): data preparation
(lhotse prepare_librispeech underneath) with bad chapters listed, then run.sh stages 1-4 with a tiny model — one
short training run over the same generic stages the full recipe uses, with an ARPA grammar."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from helpers import tiny_recipe_run

from asrlib.errors import AsrError
from asrlib.io.tables import read_table_dict
from local.librispeech import check_subset, prepare_librispeech

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ["HELLO WORLD", "ONE TWO THREE", "THE CAT SAT", "GOOD MORNING", "YES OR NO", "OPEN THE DOOR"]
LAYOUT = {
    "train-clean-100": {"19": ["198"], "26": ["495"]},
    "dev-clean": {"84": ["121123"]},
    "test-clean": {"121": ["121726"]},
    "test-other": {"1688": ["142285"]},
}


def make_librispeech(root: Path, utts_per_chapter: int = 4) -> Path:
    """A LibriSpeech tree with 16 kHz flac files and one trans.txt per chapter."""
    rng = np.random.default_rng(1)
    corpus = root / "LibriSpeech"
    for subset, speakers in LAYOUT.items():
        for spk, chapters in speakers.items():
            for chap in chapters:
                d = corpus / subset / spk / chap
                d.mkdir(parents=True)
                lines = []
                for i in range(utts_per_chapter):
                    utt = f"{spk}-{chap}-{i:04d}"
                    n = int(16000 * rng.uniform(1.0, 1.6))
                    t = np.arange(n) / 16000
                    x = 0.2 * np.sin(2 * np.pi * (150 + 40 * i) * t) * (1 + np.sin(2 * np.pi * 3 * t))
                    x += 0.01 * rng.standard_normal(n)
                    sf.write(str(d / f"{utt}.flac"), (x * 32767).astype(np.int16), 16000, format="FLAC")
                    lines.append(f"{utt} {SENTENCES[(i + int(spk)) % len(SENTENCES)]}")
                (d / f"{spk}-{chap}.trans.txt").write_text("\n".join(lines) + "\n")
    return corpus


def test_bad_chapters_are_listed(tmp_path):
    corpus = make_librispeech(tmp_path)
    trans = corpus / "train-clean-100/19/198/19-198.trans.txt"
    trans.write_text(
        "".join(ln + "\n" for ln in trans.read_text().splitlines() if "0002" not in ln)
        + "19-198-0009 A LINE WITHOUT AUDIO\n"
    )
    (corpus / "train-clean-100/26/495/26-495.trans.txt").unlink()
    probs = dict(check_subset(corpus / "train-clean-100"))
    assert probs["19-198-0002"].startswith("missing-transcript:")
    assert probs["19-198-0009"].startswith("missing-audio:")
    assert all(probs[f"26-495-{i:04d}"].startswith("missing-transcript-file") for i in range(4))
    out = tmp_path / "data"
    counts = prepare_librispeech(corpus, out, ["train-clean-100", "dev-clean", "test-clean"])
    assert counts == {"train": 3, "dev": 4, "test": 4}
    excl = read_table_dict(out / "train" / "excluded.txt")
    assert len(excl) == 6 and "19-198-0002" in excl
    wav = read_table_dict(out / "train" / "wav.scp")
    assert sorted(wav) == ["19-198-0000", "19-198-0001", "19-198-0003"]
    assert sf.info(wav["19-198-0000"]).format == "FLAC" and wav["19-198-0000"].endswith(".flac")  # read in place
    assert not (out / "wav").exists()  # no converted copy of the corpus
    assert read_table_dict(out / "train" / "utt2spk")["19-198-0001"] == "19"
    with pytest.raises(AsrError, match="unknown LibriSpeech subset"):
        prepare_librispeech(corpus, tmp_path / "d2", ["train-clean-100", "dev-clean", "test-cleaned"])


def _unigram_arpa(path: Path, words):
    words = sorted(set(words)) + ["</s>", "<s>"]
    p = np.log10(1.0 / (len(words) - 1))
    lines = ["\\data\\", f"ngram 1={len(words)}", "", "\\1-grams:"]
    lines += [f"{-99 if w == '<s>' else p:.4f}\t{w}" for w in words]
    path.write_text("\n".join(lines + ["", "\\end\\", ""]))


def test_tiny_training_step_through_run_sh(tmp_path):
    corpus = make_librispeech(tmp_path)
    arpa = tmp_path / "lm.arpa"
    _unigram_arpa(arpa, " ".join(SENTENCES).split())
    sections = {
        "data": {"corpus_dir": str(corpus), "speed_perturb": [], "min_duration": 0.3},
        "lang": {"arpa": str(arpa)},
        "model": {"num_layers": 1, "hidden_size": 32, "proj_size": 16, "peephole": True},
    }
    r = tiny_recipe_run("librispeech", tmp_path, sections)
    assert r.returncode == 0, r.stderr[-3000:]
    for s in ("train", "dev", "test", "test_other"):
        assert (tmp_path / "data/fbank" / s / "feats.scp").is_file()
    assert (tmp_path / "data/lang/G.fst").is_file() and (tmp_path / "exp/final.pt").is_file()
    assert (tmp_path / "data/manifests/librispeech_supervisions_train-clean-100.jsonl.gz").is_file()
