"""`asr transcribe` and the Recognizer API on a mobile bundle (int8 ONNX, the same files sherpa-onnx runs): the
same words as the bundle's own streaming recogniser (steps.recognize_mobile), word times inside the audio, any
sample rate and channel count, and clear errors for a bundle that cannot be used."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile as sf

from asrlib.app.cli_asr import main
from asrlib.errors import AsrError
from asrlib.app.model_dir import open_model_dir
from asrlib.app.recognizer import Recognizer
from helpers import count_network_calls, longest_endpointer_call
from mobile_bundle import tone_bundle
from tone_model import SR, read_texts, synth_utterance


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return tone_bundle(tmp_path_factory)


def _texts(text: str) -> dict:
    return {k: v.strip() for k, _, v in (line.partition(" ") for line in text.splitlines())}


def test_transcribe_bundle_equals_the_bundles_streaming_recogniser(bundle, capsys, tmp_path):
    from steps import recognize_mobile

    tm, out = bundle
    scp = tm.data / "test" / "wav.scp"
    assert (
        recognize_mobile.main(
            ["--bundle", str(out / "bundle"), "--wav-scp", str(scp), "-o", str(tmp_path / "mobile.txt")]
        )
        == 0
    )
    capsys.readouterr()
    rc = main(["transcribe", str(out / "bundle"), str(scp), "-q", "-o", str(tmp_path / "asr.txt")])
    assert rc == 0
    ours, mobile = _texts((tmp_path / "asr.txt").read_text()), _texts((tmp_path / "mobile.txt").read_text())
    assert ours == mobile
    refs = read_texts(tm.data / "test" / "text")
    assert sum(ours[u] == refs[u] for u in refs) >= len(refs) // 2  # a real model, not an empty comparison

    rc = main(["transcribe", str(out / "bundle"), str(scp), "-q", "--format", "jsonl"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0 and {r["key"]: r["text"] for r in rows} == ours
    for r in rows:
        times = [t for w in r["words"] for t in (w["start"], w["end"])]
        assert times == sorted(times) and all(0 <= t <= r["duration"] for t in times)
        assert all(0 < w["confidence"] <= 1 for w in r["words"])


def test_bundle_takes_any_rate_and_channels_and_info_describes_it(bundle, capsys, tmp_path):
    _, out = bundle
    rec = Recognizer.from_dir(out / "bundle")
    assert rec.model_dir.type == "onnx-bundle"
    x, _ = synth_utterance(["W2", "W4", "W3"], np.random.default_rng(8))
    mono = rec.transcribe(x, SR).text
    assert mono == "W2 W4 W3"
    from lhotse.augmentation.resample import Resample
    import torch

    y = Resample(SR, 44100)(torch.from_numpy(x)).numpy()
    sf.write(str(tmp_path / "st.wav"), np.stack([y, y], axis=1), 44100)
    assert sf.info(str(tmp_path / "st.wav")).channels == 2
    assert rec.transcribe_file(tmp_path / "st.wav").text == mono  # band-limited upsampling keeps the content

    assert main(["info", str(out / "bundle"), "--json", "--verify"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["type"] == "onnx-bundle" and info["verified"] == "ok" and info["num_mel_bins"] == 24
    assert info["network"]["bundle_bytes"] > 0


def test_unusable_bundles_are_clear_errors(bundle, tmp_path):
    _, out = bundle
    b = tmp_path / "b"
    shutil.copytree(out / "bundle", b)
    (b / "lexicon.txt").unlink()
    with pytest.raises(AsrError, match="no lexicon.txt"):
        open_model_dir(b)
    shutil.copy(out / "bundle" / "lexicon.txt", b / "lexicon.txt")
    with open(b / "TLG.fst", "ab") as f:
        f.write(b"\0")
    with pytest.raises(AsrError, match="TLG.fst differs"):
        Recognizer.from_dir(b)
    (b / "TLG.fst").unlink()
    with pytest.raises(AsrError, match="incomplete: missing TLG.fst"):
        open_model_dir(b)
    info = json.loads((out / "bundle" / "bundle.json").read_text())
    shutil.copy(out / "bundle" / "TLG.fst", b / "TLG.fst")
    (b / "bundle.json").write_text(json.dumps({**info, "version": 99}))
    with pytest.raises(AsrError, match="version 99"):
        open_model_dir(b)


def test_a_bundles_long_recording_is_endpointed_in_the_cheap_engines_calls(bundle):
    """Offline, a bundle's network (ONNX Runtime, whose call costs little) is called in OFFLINE_CHEAP_CALLS's
    shorter calls, where torch's is called in OFFLINE_CALLS's (bench/long_form.py --calls measured both): every call
    within those sizes (or a segment's rerun from its pause), and the same words and segments as in the other's."""
    from asrlib.decode import endpoint

    _, out = bundle
    rng = np.random.default_rng(5)
    pieces = []
    for _ in range(12):
        x, _ = synth_utterance([f"W{int(i)}" for i in rng.integers(1, 5, size=3)], rng)
        pieces += [x, np.zeros(int(rng.uniform(0.8, 2.5) * SR), np.float32)]
    audio = np.concatenate(pieces)
    rec = Recognizer.from_dir(out / "bundle")
    assert rec.segment_method == "endpoint" and rec.endpoint_calls == endpoint.OFFLINE_CHEAP_CALLS
    sizes = count_network_calls(rec)
    cheap = rec.transcribe(audio, SR)
    assert max(sizes) * rec.frame_shift <= longest_endpointer_call(rec)
    n_cheap = len(sizes)
    sizes.clear()
    rec.endpoint_calls = endpoint.OFFLINE_CALLS
    dear = rec.transcribe(audio, SR)
    assert n_cheap > len(sizes)  # more, shorter calls
    assert cheap.text == dear.text and len(cheap.segments) >= 6
    assert [(s.start, s.end) for s in cheap.segments] == [(s.start, s.end) for s in dear.segments]
