"""Loading a model or data from someone else runs none of their code: malicious pickles in every place a model file
is read are refused with a clear error and never executed; older files convert only when the user says they trust
them; wav.scp commands are refused unless allowed (tests/test_kaldi_import.py); inputs are bounded in length."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from asrlib.errors import AsrError
from tone_model import SR, tone_model


class Evil:
    """Unpickling this creates ``marker`` (a stand-in for any code an attacker would run)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def evil_torch_file(path: Path, marker: Path, template: Path = None) -> Path:
    """A model file that looks right (every key of ``template``) and carries the payload in its info."""
    st = torch.load(template, weights_only=True) if template else {"model": {}}
    st["info"] = {"note": Evil(marker)}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(st, path)  # pickles Evil
    return path


@pytest.fixture(scope="module")
def tm(tmp_path_factory):
    torch.set_num_threads(1)
    return tone_model(tmp_path_factory)


def _wav(tmp_path: Path) -> Path:
    import soundfile as sf

    p = tmp_path / "a.wav"
    sf.write(p, (0.1 * np.sin(np.arange(SR) / 5)).astype(np.float32), SR)
    return p


def test_asr_transcribe_refuses_a_malicious_model_in_every_model_dir_layout(tm, tmp_path):
    from asrlib.app.cli_asr import main as asr_main

    marker = tmp_path / "pwned"
    wav = _wav(tmp_path)
    exp = tmp_path / "exp"  # an experiment dir: final.pt + lang/
    shutil.copytree(tm.lang, exp / "lang")
    evil_torch_file(exp / "final.pt", marker, tm.exp / "final.pt")
    packaged = tmp_path / "packaged"  # asr package's layout, model.json naming the file
    asr_main(["package", str(tm.exp), str(tm.lang), str(packaged)])
    evil_torch_file(packaged / "final.pt", marker, tm.exp / "final.pt")
    meta = json.loads((packaged / "model.json").read_text())
    meta["files"]["final.pt"]["size"] = (packaged / "final.pt").stat().st_size
    (packaged / "model.json").write_text(json.dumps(meta))
    for model in (exp, packaged, exp / "final.pt"):
        with pytest.raises(AsrError, match="refuses it.*asr convert-model --trust"):
            asr_main(["transcribe", str(model), str(wav), "-q"])
        assert not marker.exists(), model


def test_every_torch_loader_refuses_the_payload(tm, tmp_path):
    from asrlib.export.prune import load_compressed
    from asrlib.models.saved import load_model
    from asrlib.train.checkpoint import load_checkpoint

    marker = tmp_path / "pwned"
    f = evil_torch_file(tmp_path / "m.pt", marker, tm.exp / "final.pt")
    for load in (load_model, load_compressed, load_checkpoint):
        with pytest.raises(AsrError, match="could run code"):
            load(f)
    assert not marker.exists()


def test_steps_refuse_the_payload_with_one_error_line(tm, tmp_path, capsys):
    from steps import compute_logprobs

    from asrlib.cli import run_main

    marker = tmp_path / "pwned"
    f = evil_torch_file(tmp_path / "m.pt", marker, tm.exp / "final.pt")
    with pytest.raises(SystemExit) as e:
        run_main(
            compute_logprobs.main,
            ["--model", str(f), "--feats", str(tm.fbank / "test" / "feats.scp"), "--out-dir", str(tmp_path / "lp")],
        )
    assert e.value.code == 2 and "ERROR" in capsys.readouterr().err and not marker.exists()


def test_gmm_model_pickle_is_refused_and_converts_only_when_trusted(tmp_path):
    import pickle

    from asrlib.app.cli_asr import main as asr_main
    from asrlib.gmm.model import load_gmm

    marker = tmp_path / "pwned"
    mdl = tmp_path / "final.mdl"
    mdl.write_bytes(pickle.dumps({"format": "asrlib-gmm-hmm", "version": 1, "x": Evil(marker)}, protocol=4))
    with pytest.raises(AsrError, match="old format, a Python pickle.*asr convert-model --trust"):
        load_gmm(mdl)
    with pytest.raises(AsrError, match="--trust"):
        asr_main(["convert-model", str(mdl)])  # not without the user's word
    with pytest.raises(
        AsrError, match=r"holds a (builtins|io)\.open, which no asrlib file ever held.*does not convert"
    ):
        asr_main(["convert-model", "--trust", str(mdl)])  # and with it, still no code runs
    assert not marker.exists()
    assert pickle.loads(mdl.read_bytes())  # the file was left as it was (the payload runs here, in the test)
    assert marker.exists()


def test_an_old_gmm_model_pickle_converts_when_trusted_and_then_loads_safely(tmp_path):
    """asrlib before VERSION 2 pickled the model's state: kaldi-hmm-gmm objects and numpy arrays."""
    import pickle

    from asrlib.app.cli_asr import main as asr_main
    from asrlib.gmm.model import FORMAT, STATE_KEYS, load_gmm
    from test_fuzz_readers import _seed_gmm

    m = load_gmm(_seed_gmm(tmp_path / "new"))
    st = {"format": FORMAT, "version": 1, "topo_text": m.topo_text, "tree": m.tree, "transition_model": m.tm}
    st.update(am=m.am, phones=m.phones, sil_phone=m.sil_phone, feature_type=m.feature_type, num_ceps=m.num_ceps)
    st.update(cmvn_mean=np.zeros(3, np.float32), cmvn_inv_std=np.ones(3, np.float32), info={"ll": np.float64(-47.3)})
    assert set(STATE_KEYS) <= set(st)
    old = tmp_path / "old" / "final.mdl"
    old.parent.mkdir()
    old.write_bytes(pickle.dumps(st, protocol=4))
    with pytest.raises(AsrError, match="old format"):
        load_gmm(old)
    assert asr_main(["convert-model", "--trust", str(old)]) == 0
    c = load_gmm(old)
    assert c.topo_text == m.topo_text and c.phones == m.phones and c.info == {"ll": -47.3}
    assert np.array_equal(c.cmvn_inv_std, np.ones(3, np.float32))
    assert c.tm.num_pdfs == m.tm.num_pdfs and c.am.num_pdfs == m.am.num_pdfs
    assert np.array_equal(c.am.get_pdf(0).means, m.am.get_pdf(0).means)
    assert asr_main(["convert-model", "--trust", str(old)]) == 0  # a second time: nothing to do


def test_an_older_model_file_converts_when_trusted_and_then_loads_safely(tm, tmp_path):
    """asrlib before this format stored numpy arrays (CMVN) in final.pt: refused, then converted on request."""
    from asrlib.app.cli_asr import main as asr_main
    from asrlib.models.saved import load_model

    st = torch.load(tm.exp / "final.pt", weights_only=True)
    st["cmvn_mean"] = np.asarray(st["cmvn_mean"])  # as the old writer did
    old = tmp_path / "old" / "final.pt"
    old.parent.mkdir()
    torch.save(st, old)
    with pytest.raises(AsrError, match="older asrlib"):
        load_model(old)
    assert asr_main(["convert-model", "--trust", str(old.parent)]) == 0
    a, b = load_model(old), load_model(tm.exp / "final.pt")
    assert np.array_equal(a.cmvn_mean, b.cmvn_mean)
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    assert asr_main(["convert-model", "--trust", str(old)]) == 0  # a second time: nothing to do


def test_a_trusted_torch_file_still_runs_no_code(tm, tmp_path):
    """--trust converts data (tensors, containers, numpy arrays); a payload in the file is refused all the same."""
    from asrlib.app.cli_asr import main as asr_main

    marker = tmp_path / "pwned"
    f = evil_torch_file(tmp_path / "evil" / "final.pt", marker, tm.exp / "final.pt")
    with pytest.raises(AsrError, match="does not convert this one"):
        asr_main(["convert-model", "--trust", str(f)])
    assert not marker.exists()


def test_inputs_longer_than_max_duration_are_refused(tm, tmp_path, capsys):
    from asrlib.app.cli_asr import main as asr_main

    wav = _wav(tmp_path)  # 1 s
    assert asr_main(["transcribe", str(tm.exp), str(wav), "-q", "--max-duration", "0.5"]) == 1
    assert "longer than the 0.5 s allowed" in capsys.readouterr().err
    assert asr_main(["transcribe", str(tm.exp), str(wav), "-q", "--max-duration", "0"]) == 0
    # a file's header gives its length: refused before any of it is decoded
    from asrlib.app.recognizer import Recognizer

    heard = []
    with pytest.raises(AsrError, match="longer than the 0.5 s allowed"):
        Recognizer.from_dir(tm.exp, max_duration=0.5, chunk_seconds=0.2).transcribe_file(wav, progress=heard.append)
    assert heard == []
    # audio of no known length (in memory, given in blocks) is counted as it comes
    with pytest.raises(AsrError, match="longer than the 0.5 s allowed"):
        Recognizer.from_dir(tm.exp, max_duration=0.5, chunk_seconds=0.2).transcribe(np.zeros(SR, np.float32), SR)
