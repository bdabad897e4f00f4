"""yesno data preparation (lhotse's prepare_yesno underneath): 30/30 split, YES/NO words, Kaldi dirs that pass
validation, malformed file names listed, incomplete corpora refused — on a generated fixture and on the real data."""

import itertools
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrlib.data.validate import clean_data_dir
from asrlib.errors import AsrError
from asrlib.io.tables import read_table, read_table_dict
from local.yesno import prepare_yesno

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "yesno" / "waves_yesno"


def _fixture(d: Path, n: int = 60) -> Path:
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for bits in itertools.islice(itertools.product("01", repeat=8), n):
        x = (rng.standard_normal(4000) * 3000).astype(np.int16)
        sf.write(str(d / ("_".join(bits) + ".wav")), x, 8000, subtype="PCM_16")
    return d


def test_fixture_split_and_tables(tmp_path):
    corpus = _fixture(tmp_path / "waves_yesno")
    sf.write(str(corpus / "README.wav"), np.zeros(10, np.int16), 8000)  # not a yesno name
    out = tmp_path / "data"
    m = prepare_yesno(corpus, out)
    assert {s: len(p["supervisions"]) for s, p in m.items()} == {"train": 30, "test": 30}
    text = read_table_dict(out / "train" / "text")
    assert text["0_0_0_0_0_0_1_0"] == "NO NO NO NO NO NO YES NO"  # even positions train (lhotse)
    assert read_table(out / "dev" / "text") == read_table(out / "train" / "text")  # no dev split: train again
    assert not set(text) & set(read_table_dict(out / "test" / "text"))
    assert set(read_table_dict(out / "test" / "utt2spk").values()) == {"global"}
    assert read_table_dict(out / "excluded.txt")["README.wav"].startswith("malformed-name")
    wav = read_table_dict(out / "train" / "wav.scp")
    assert all(Path(p).parent == corpus.resolve() for p in wav.values())  # real files, not temporary links
    assert (out / "manifests" / "yesno_supervisions_test.jsonl.gz").is_file()
    rep = clean_data_dir(out / "test", {"YES", "NO"}, expected_sample_rate=8000)
    assert rep.num_kept == 30 and not rep.excluded
    prepare_yesno(corpus, out)  # done marker: a rerun is a no-op


def test_incomplete_corpus_is_refused(tmp_path):
    corpus = _fixture(tmp_path / "waves_yesno", n=59)
    with pytest.raises(AsrError, match="59 yesno recordings, expected 60"):
        prepare_yesno(corpus, tmp_path / "data")


def test_cli_without_corpus_says_what_to_set(tmp_path, capsys):
    from local.yesno import main

    with pytest.raises(SystemExit) as e:
        main(["--out-dir", str(tmp_path / "data"), "--corpus-dir", str(tmp_path / "nowhere")])
    assert e.value.code == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.skipif(not REAL.is_dir(), reason=f"real yesno data not found at {REAL} (../shared/data)")
def test_real_yesno(tmp_path):
    out = tmp_path / "data"
    prepare_yesno(REAL, out)
    for s in ("train", "test"):
        rep = clean_data_dir(out / s, {"YES", "NO"}, expected_sample_rate=8000)
        assert rep.num_kept == 30 and not rep.excluded, rep.summary()
    words = [w for _, t in read_table(out / "test" / "text") for w in t.split()]
    assert len(words) == 240 and set(words) == {"YES", "NO"}


def test_kaldi_split_is_the_sorted_halves(tmp_path):
    corpus = _fixture(tmp_path / "waves_yesno")
    names = sorted(p.stem for p in corpus.glob("*.wav"))
    out = tmp_path / "data"
    m = prepare_yesno(corpus, out, split="kaldi")
    assert sorted(s.recording_id for s in m["train"]["supervisions"]) == names[:30]
    assert sorted(read_table_dict(out / "test" / "text")) == names[30:]
    assert read_table_dict(out / "test" / "text")[names[30]] == " ".join(
        "YES" if b == "1" else "NO" for b in names[30].split("_")
    )  # each recording keeps its own words
    prepare_yesno(corpus, tmp_path / "lhotse", split="lhotse")
    lhotse_test = set(read_table_dict(tmp_path / "lhotse" / "test" / "text"))
    assert len(lhotse_test & set(names[30:])) == 15  # the two test sets share half
    with pytest.raises(AsrError, match="data.split for yesno must be one of kaldi, lhotse"):
        prepare_yesno(corpus, tmp_path / "bad", split="odd")
