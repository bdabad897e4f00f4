"""local.an4 on a miniature corpus laid out like AN4 (FLAC files, transcriptions with <s> </s> markers, the corpus
dictionary): manifests, Kaldi dirs, held-out dev speakers, exclusions listed with reasons, the lexicon and LM text;
and on the real corpus when ../shared/data/an4 is there (counts of the published split)."""

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrlib.errors import AsrError
from local.an4 import default_dev_speakers, is_an4_dir, prepare_an4, read_dictionary, read_transcription

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "an4"
SR = 16000


def _table(path: Path) -> dict:
    return dict(ln.split(" ", 1) for ln in path.read_text().splitlines())


def make_corpus(root: Path, train_speakers=("fabc", "fdef", "mghi", "mjkl", "mmno", "mpqr", "mstu")) -> Path:
    """A small AN4-like folder: two utterances per training speaker, two test speakers; one transcript line without
    audio, one FLAC without a transcript line, one malformed line."""
    rng = np.random.default_rng(0)
    etc = root / "etc"
    etc.mkdir(parents=True)

    def flac(part: str, spk: str, utt: str) -> None:
        d = root / "wav" / part / spk
        d.mkdir(parents=True, exist_ok=True)
        sf.write(str(d / f"{utt}.flac"), (rng.standard_normal(SR // 2) * 3000).astype(np.int16), SR, format="FLAC")

    train = []
    for spk in train_speakers:
        for i, words in enumerate(["YES", "ENTER SIX TWO"]):
            utt = f"an{i}-{spk}-b"
            flac("an4_clstk", spk, utt)
            train.append(f"<s> {words} </s> ({utt})")
    train.append("<s> GO </s> (an9-fabc-b)")  # no audio
    train.append("a line without an id")
    flac("an4_clstk", "fabc", "an8-fabc-b")  # no transcript
    (etc / "an4_train.transcription").write_text("\n".join(train) + "\n")
    test = []
    for spk in ("fzzz", "mzzz"):
        flac("an4test_clstk", spk, f"an5-{spk}-b")
        test.append(f"RUBOUT G M E F THREE NINE (an5-{spk}-b)")
    (etc / "an4_test.transcription").write_text("\n".join(test) + "\n")
    (etc / "an4.dic").write_text("YES  Y EH S\nGO G OW\nENTER EH N T ER\nENTER(2) EH N ER\nSIX S IH K S\nTWO T UW\n")
    return root


def test_prepare_an4_miniature(tmp_path):
    corpus = make_corpus(tmp_path / "an4")
    assert is_an4_dir(corpus) and not is_an4_dir(tmp_path)
    out = tmp_path / "data"
    m = prepare_an4(corpus, out, dev_speakers=["mghi", "fdef"])
    assert {s: len(m[s]["supervisions"]) for s in m} == {"train": 10, "dev": 4, "test": 2}
    spk = {s: set(_table(out / s / "utt2spk").values()) for s in ("train", "dev", "test")}
    assert spk["dev"] == {"mghi", "fdef"} and not spk["dev"] & spk["train"]
    text = _table(out / "train" / "text")
    assert text["fabc-an1-fabc-b"] == "ENTER SIX TWO"  # markers dropped, id = speaker-utt
    assert all(u.startswith(s + "-") for u, s in _table(out / "train" / "utt2spk").items())
    wav = _table(out / "test" / "wav.scp")
    assert wav["fzzz-an5-fzzz-b"] == str((corpus / "wav/an4test_clstk/fzzz/an5-fzzz-b.flac").resolve())  # in place
    excluded = _table(out / "excluded.txt")
    assert excluded["an9-fabc-b"].startswith("missing-audio")
    assert excluded["fabc/an8-fabc-b.flac"].startswith("no-transcript")
    assert excluded["an4_train.transcription:16"].startswith("malformed-line")
    assert len(excluded) == 3
    lex = (out / "local/dict/lexicon.txt").read_text().splitlines()
    assert "ENTER EH N T ER" in lex and "ENTER EH N ER" in lex  # WORD(2) is a variant of WORD
    assert sorted((out / "local/lm/train_text.txt").read_text().splitlines()) == sorted(text.values())
    assert m["train"]["supervisions"][0].gender in ("F", "M")
    # finished: a second call skips; other settings redo
    assert json.loads((out / ".an4.done").read_text())["utterances"] == {"train": 10, "dev": 4, "test": 2}
    m2 = prepare_an4(corpus, out, dev_speakers=["mghi", "fdef"], max_speakers=1)
    assert {s: len({x.speaker for x in m2[s]["supervisions"]}) for s in m2} == {"train": 1, "dev": 1, "test": 1}


def test_prepare_an4_speed_perturbation_and_bad_settings(tmp_path):
    corpus = make_corpus(tmp_path / "an4")
    out = tmp_path / "data"
    prepare_an4(corpus, out, speed_perturb=[0.9, 1.0, 1.1])
    nosp, sp = _table(out / "train_nosp" / "utt2spk"), _table(out / "train" / "utt2spk")
    assert len(sp) == 3 * len(nosp) and any(u.startswith("sp0.9-") for u in sp)
    assert len((out / "local/lm/train_text.txt").read_text().splitlines()) == len(nosp)  # LM text: once each
    with pytest.raises(AsrError, match="not AN4 training speakers"):
        prepare_an4(corpus, tmp_path / "d2", dev_speakers=["nobody"])


def test_transcription_dictionary_and_dev_rule(tmp_path):
    p = tmp_path / "t.transcription"
    p.write_text("<s> go </s> (a-x-b)\n<s> </s> (b-x-b)\nGO (a-x-b)\n")
    texts, bad = read_transcription(p)
    assert texts == {"a-x-b": "GO"}
    assert [b[1].split(":")[0] for b in bad] == ["empty-transcript", "duplicate"]
    d = tmp_path / "x.dic"
    d.write_text("A AH\nA(2) EY\nB\n")
    with pytest.raises(AsrError, match="x.dic:3"):
        read_dictionary(d)
    spk = [f"f{i:02d}" for i in range(20)] + [f"m{i:02d}" for i in range(50)]
    dev = default_dev_speakers(spk)
    assert len(dev) == 5 and {s[0] for s in dev} == {"f", "m"} and dev == default_dev_speakers(reversed(spk))


@pytest.mark.skipif(not (REAL / "etc").is_dir(), reason=f"AN4 corpus not found at {REAL} (../shared/data/an4)")
def test_prepare_an4_real_corpus_counts(tmp_path):
    m = prepare_an4(REAL, tmp_path / "data")
    n = {s: len(m[s]["supervisions"]) for s in m}
    assert n["train"] + n["dev"] == 948 and n["test"] == 130
    assert len({s.speaker for s in m["dev"]["supervisions"]}) == 5
    assert not (tmp_path / "data" / "excluded.txt").read_text().strip()  # the corpus is complete
    assert len(read_dictionary(REAL / "etc" / "an4.dic")) == 101
