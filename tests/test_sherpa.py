"""The bundle runs in sherpa-onnx (the on-device engine) with its CTC FST decoder and gives the same words as our
decoder; a broken bundle, a model of the wrong input dimension and audio at the wrong rate give clear errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from asrlib.export.bundle import SherpaRecognizer, check_bundle, read_wav, read_wav_blocks
from asrlib.export.streaming import recognize_whole
from asrlib.errors import AsrError
from asrlib.io.tables import read_table
from mobile_bundle import tone_bundle
from tone_model import SR, read_texts, utterance_audio

DIGITS = Path(__file__).resolve().parents[1] / "recipes" / "digits"
DIGITS_BUNDLE = DIGITS / "exp" / "lstm_ctc" / "mobile" / "bundle"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return tone_bundle(tmp_path_factory)


def test_sherpa_onnx_gives_our_hypotheses_on_the_tone_bundle(bundle):
    tm, out = bundle
    sh = SherpaRecognizer(out / "bundle")
    refs = read_texts(tm.data / "test" / "text")
    utts = utterance_audio(tm, "test")
    ours = [recognize_whole(out / "bundle", x, SR)[0] for _, x in utts]
    theirs = [sh.recognize(x, SR) for _, x in utts]
    assert theirs == ours
    assert sum(h == refs[u].split() for (u, _), h in zip(utts, theirs)) >= len(utts) // 2


@pytest.mark.skipif(
    not (DIGITS_BUNDLE / "bundle.json").is_file(),
    reason="digits recipe not exported here (run recipes/digits/run.sh --stage 7)",
)
def test_sherpa_onnx_gives_our_hypotheses_on_the_digits_bundle():
    sh = SherpaRecognizer(DIGITS_BUNDLE)
    wavs = read_table(DIGITS / "data" / "test" / "wav.scp")[:40]
    diffs = []
    for utt, path in wavs:
        x = read_wav(path, 16000)
        ours, theirs = recognize_whole(DIGITS_BUNDLE, x, 16000)[0], sh.recognize(x, 16000)
        if ours != theirs:
            diffs.append((utt, ours, theirs))
    assert diffs == []


def test_the_recipes_search_is_folded_into_the_bundle(tmp_path_factory):
    """A recipe's decode.acoustic_scale / blank_penalty (2 / 1 here) go into the bundle: bundle.json and the networks'
    metadata say so, the output carries them, so sherpa-onnx, which searches the output as it is, gives the words of
    our search at 2 / 1 over the log-probs, which asrlib's runtime gives back (rows summing to 1); the streaming
    recogniser searches so by default."""
    from asrlib.decode.search import TlgDecoder
    from asrlib.export.onnx_model import OnnxAcousticModel
    from asrlib.export.streaming import StreamingRecognizer, compute_fbank

    tm, out = tone_bundle(tmp_path_factory, search=(2.0, 1.0))
    b = check_bundle(out / "bundle")
    assert (b.info["decode"]["acoustic_scale"], b.info["decode"]["blank_penalty"]) == (2.0, 1.0)
    assert "x 2" in (out / "bundle" / "README.md").read_text()
    am = OnnxAcousticModel(b.path("model.int8.onnx"))
    assert am.search == (2.0, 1.0)
    search = TlgDecoder(out / "bundle", beam=16.0, max_active=3000, acoustic_scale=2.0, blank_penalty=1.0)
    sh, stream = SherpaRecognizer(out / "bundle"), StreamingRecognizer(out / "bundle")
    assert (stream.acoustic_scale, stream.blank_penalty) == (2.0, 1.0)
    for _, x in utterance_audio(tm, "test"):
        logp = am.log_probs(compute_fbank(x, SR, b.feat_dim))
        assert np.abs(np.exp(logp).sum(axis=1) - 1).max() < 1e-3
        assert sh.recognize(x, SR) == search.decode(logp) == recognize_whole(out / "bundle", x, SR)[0]


def _copy(out: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "bundle"
    shutil.copytree(out / "bundle", dst)
    return dst


def test_bad_input_gives_clear_errors(bundle, tmp_path):
    _, out = bundle
    b = _copy(out, tmp_path)
    (b / "TLG.fst").unlink()
    with pytest.raises(AsrError, match="incomplete: missing TLG.fst"):
        SherpaRecognizer(b)  # checked before sherpa-onnx, which would exit the process
    shutil.rmtree(b)
    b = _copy(out, tmp_path)
    info = json.loads((b / "bundle.json").read_text())
    info["feat_dim"] = 80  # a front end that does not fit the model
    (b / "bundle.json").write_text(json.dumps(info))
    with pytest.raises(AsrError, match="expects 24-dim input features.*80-dim"):
        check_bundle(b)
    shutil.rmtree(b)
    b = _copy(out, tmp_path)
    with open(b / "model.int8.onnx", "ab") as f:
        f.write(b"\0")
    with pytest.raises(AsrError, match="model.int8.onnx differs"):
        check_bundle(b)
    sh = SherpaRecognizer(out / "bundle")
    with pytest.raises(AsrError, match="sample rate 8000 Hz"):
        sh.recognize(np.zeros(8000, np.float32), 8000)
    import soundfile as sf

    sf.write(str(tmp_path / "a8k.wav"), np.zeros(8000, np.float32), 8000)
    with pytest.raises(AsrError, match="a8k.wav: sample rate 8000 Hz"):
        read_wav(tmp_path / "a8k.wav", 16000)
    with pytest.raises(AsrError, match="does not exist"):
        read_wav(tmp_path / "none.wav", 16000)
    for bad, match in (("a8k.wav", "a8k.wav: sample rate 8000 Hz"), ("none.wav", "does not exist")):
        with pytest.raises(AsrError, match=match):
            read_wav_blocks(tmp_path / bad, 16000, 1000)  # raised when opened, not when the first block is read
    sf.write(str(tmp_path / "st.wav"), np.zeros((1600, 2), np.float32), 16000)
    with pytest.raises(AsrError, match="2 channels"):
        read_wav(tmp_path / "st.wav", 16000)
    x = np.random.default_rng(0).uniform(-0.5, 0.5, 16000 * 3 + 77).astype(np.float32)
    sf.write(str(tmp_path / "x.wav"), x, 16000)
    blocks = list(read_wav_blocks(tmp_path / "x.wav", 16000, 5120))
    assert [len(b) for b in blocks] == [5120] * 9 + [len(x) - 9 * 5120]
    assert np.array_equal(np.concatenate(blocks), read_wav(tmp_path / "x.wav", 16000))


def test_recognize_mobile_cli_both_engines_agree(bundle, tmp_path):
    from steps import recognize_mobile

    tm, out = bundle
    outs = {}
    for engine in ("streaming", "sherpa"):
        outs[engine] = tmp_path / f"{engine}.txt"
        assert (
            recognize_mobile.main(
                [
                    "--bundle",
                    str(out / "bundle"),
                    "--engine",
                    engine,
                    "--wav-scp",
                    str(tm.data / "test" / "wav.scp"),
                    "-o",
                    str(outs[engine]),
                ]
            )
            == 0
        )
    text = outs["streaming"].read_text()
    assert text == outs["sherpa"].read_text() and len(text.splitlines()) == len(utterance_audio(tm, "test"))
    import soundfile as sf

    sf.write(str(tmp_path / "x8k.wav"), np.zeros(4000, np.float32), 8000)
    with pytest.raises(AsrError, match="x8k.wav: sample rate 8000 Hz"):
        recognize_mobile.main(["--bundle", str(out / "bundle"), str(tmp_path / "x8k.wav")])
