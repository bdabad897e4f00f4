"""Switchboard recipe on a generated corpus in the LDC layout (2-channel SPHERE + MS98 transcripts, eval2000 audio and
references): lhotse prepare_switchboard/prepare_eval2000 underneath, conversation sides as speakers, normalised
transcripts, conversations without both transcript sides listed, then run.sh stages 1-4 with a tiny model."""

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from helpers import tiny_recipe_run

from asrlib.errors import AsrError
from asrlib.io.tables import read_table, read_table_dict
from local.switchboard import normalize_text, prepare_switchboard

ROOT = Path(__file__).resolve().parents[1]
LINES = [
    "hello there",
    "[laughter] yes i think so",
    "uh-huh [noise]",
    "th[e]- the weather is nice",
    "[laughter-yes] right",
    "[silence]",
    "okay {um} good",
    "[noise] [laughter]",
]


def _sph(path: Path, seconds: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 8000)) / 8000
    x = np.stack([0.2 * np.sin(2 * np.pi * f * t) * (1 + np.sin(2 * np.pi * 2 * t)) for f in (200, 330)], axis=1)
    x += 0.01 * rng.standard_normal(x.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), (x * 32767).astype(np.int16), 8000, format="NIST", subtype="PCM_16")


def make_switchboard(root: Path) -> Path:
    corpus = root / "swbd"
    trans = corpus / "LDC97S62" / "swb_ms98_transcriptions"
    for k, conv in enumerate(("2001", "2005", "2010", "2020")):
        _sph(corpus / "LDC97S62" / "swb1" / f"sw0{conv}.sph", 8.0, k)
        for side in ("A", "B") if conv != "2020" else ("A",):  # sw2020 lacks its B transcript
            rows, t = [], 0.0
            for i, words in enumerate(LINES):
                rows.append(f"sw{conv}{side}-ms98-a-{i:04d} {t:.6f} {t + 0.9:.6f} {words}")
                t += 0.95
            d = trans / conv[:2] / conv
            d.mkdir(parents=True, exist_ok=True)
            (d / f"sw{conv}{side}-ms98-a-trans.text").write_text("\n".join(rows) + "\n")
    for k, rec in enumerate(("en_4156", "sw_4390")):
        _sph(corpus / "LDC2002S09" / "hub5e_00" / "english" / f"{rec}.sph", 6.0, 10 + k)
        ref = corpus / "LDC2002T43" / "reference" / "english" / f"{rec}.txt"
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(
            "#Language: eng\n#File id: 4156\n\n1.00 2.00 A: HELLO THERE\n2.50 3.50 B: (( YES )) RIGHT\n"
            "4.00 5.00 A: %HESITATION OKAY GOOD\n"
        )
    return corpus


def test_normalize_text():
    assert normalize_text("[laughter] yes i think so") == "YES I THINK SO"
    assert normalize_text("th[e]- the weather [noise]") == "THE WEATHER"
    assert normalize_text("[laughter-yes] right {um}") == "YES RIGHT UM"
    assert normalize_text("(( YES )) %HESITATION <b_aside> ok") == "YES OK"
    assert normalize_text("[silence]") == ""


def test_prepare_sides_segments_and_exclusions(tmp_path):
    corpus = make_switchboard(tmp_path)
    out = tmp_path / "data"
    counts = prepare_switchboard(corpus, out, ["swb1", "eval2000"])
    assert counts == {"train": 24, "dev": 12, "test": 6, "test_swb": 3, "test_ch": 3}  # 6 worded segments/side
    utt2spk = read_table_dict(out / "train" / "utt2spk")
    assert set(utt2spk.values()) == {"sw02005-A", "sw02005-B", "sw02010-A", "sw02010-B"}  # sw02001 is dev
    assert read_table_dict(out / "train" / "text")["sw02005-B_000095-000185"] == "YES I THINK SO"
    seg = read_table_dict(out / "train" / "segments")["sw02005-B_000095-000185"].split()
    assert seg[0] == "sw02005-B" and float(seg[1]) == pytest.approx(0.95)
    wav = read_table_dict(out / "train" / "wav.scp")
    a, b = sf.read(wav["sw02005-A"])[0], sf.read(wav["sw02005-B"])[0]
    assert a.ndim == b.ndim == 1 and not np.allclose(a, b)  # one mono file per conversation side
    excl = read_table_dict(out / "train" / "excluded.txt")
    assert excl["sw02020"].startswith("missing-transcript")
    assert any(v.startswith("no-words") for v in excl.values())  # the [silence]-only segment is listed
    assert read_table_dict(out / "test" / "text")["en_4156-B_000250-000350"] == "YES RIGHT"
    with pytest.raises(AsrError, match="must contain swb1"):
        prepare_switchboard(corpus, tmp_path / "d2", ["eval2000"])


def test_tiny_training_step_through_run_sh(tmp_path):
    corpus = make_switchboard(tmp_path)
    # the recipe's speed perturbation and lang section as they are: the 3-gram is estimated from data/train_nosp/text
    sections = {
        "data": {"corpus_dir": str(corpus)},
        "model": {"num_layers": 1, "hidden_size": 32, "proj_size": 16, "bidirectional": True},
    }
    r = tiny_recipe_run("switchboard", tmp_path, sections)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(read_table(tmp_path / "data/fbank/test/feats.scp")) == 6
    assert len(read_table(tmp_path / "data/train/text")) == 3 * 24  # speed-perturbed x 3
    info = json.loads((tmp_path / "data/lang/.lm_3gram.arpa.done").read_text())
    assert info["sentences"] == 24 and info["oov_tokens"] == 0 and info["ngrams"][2] > 0  # the unperturbed text
    assert "ngram 3=" in (tmp_path / "data/lang/lm_3gram.arpa").read_text()
    assert (tmp_path / "exp/final.pt").is_file()
