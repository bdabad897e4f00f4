"""digits+FSDD mixing: lhotse CutSet.mux with weights gives the expected synthetic share, repeats get their own ids,
dev/test stay FSDD-only; the rotation report gets the synthetic-voices column."""
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrlib.data.corpus import write_tables
from asrlib.io_utils import AsrError, read_table_dict
from local.digits_fsdd import mix_train


def _dir(root: Path, name: str, spk: str, n: int, word: str) -> Path:
    (root / "wav").mkdir(parents=True, exist_ok=True)
    wav, text, u2s = {}, {}, {}
    for i in range(n):
        p = root / "wav" / f"{name}{i}.wav"
        sf.write(str(p), (np.random.default_rng(i).standard_normal(800) * 1000).astype(np.int16), 8000)
        utt = f"{spk}-{i:03d}"
        wav[utt], text[utt], u2s[utt] = str(p), word, spk
    write_tables(root / name, wav, text, u2s)
    return root / name


@pytest.mark.parametrize("weights,share", [([0.75, 0.25], 0.25), ([0.5, 0.5], 0.5), ([1.0, 0.0], 0.0)])
def test_mix_weights_set_the_synthetic_share(tmp_path, weights, share):
    fsdd = _dir(tmp_path, "fsdd", "alice", 300, "SEVEN")
    synth = _dir(tmp_path, "synth", "espeak_en_m1", 40, "OH ONE")
    counts = mix_train(fsdd, synth, tmp_path / "mix", weights, 8000, seed=3)
    assert counts["fsdd"] == 300                                      # every FSDD utterance, once
    total = counts["fsdd"] + counts["synthetic"]
    assert counts["synthetic"] / total == pytest.approx(share, abs=0.06)
    text = read_table_dict(tmp_path / "mix" / "text")
    assert len(text) == total
    if share >= 0.5:   # 300 synthetic draws from 40 utterances: repeats, each with its own id and the same audio
        wav = read_table_dict(tmp_path / "mix" / "wav.scp")
        assert wav["espeak_en_m1-000_repeat1"] == wav["espeak_en_m1-000"]
        assert read_table_dict(tmp_path / "mix" / "utt2spk")["espeak_en_m1-000_repeat1"] == "espeak_en_m1"


def test_bad_weights(tmp_path):
    fsdd = _dir(tmp_path, "fsdd", "alice", 3, "SEVEN")
    with pytest.raises(AsrError, match="mix_weights"):
        mix_train(fsdd, fsdd, tmp_path / "m", [0.0, 1.0], 8000)
