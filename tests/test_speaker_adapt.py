"""Unsupervised speaker adaptation (asrlib.train.speaker_adapt, steps.adapt_speaker)."""

from pathlib import Path

import numpy as np
import pytest
import torch

from asrlib.config import AdaptConfig, ModelConfig
from asrlib.decode.isolated import IsolatedWordScorer
from asrlib.errors import AsrError
from asrlib.io.tables import read_table_dict
from asrlib.kaldi_io import MatrixReader, write_matrices
from asrlib.lang.lexicon import read_lexicon_ids, read_tokens
from asrlib.models.lstm import build_model
from asrlib.models.saved import SavedModel, load_model, save_model
from asrlib.train.speaker_adapt import adapt_speaker, apply_transform, best_pronunciations
from steps import adapt_speaker as adapt_step
from tests.test_isolated import TEN, make_lang
from tests.test_search import peaky, word_frames

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ten(tmp_path_factory):
    return make_lang(tmp_path_factory.mktemp("sa"), words=TEN)


class TokenReadout(torch.nn.Module):
    """An 'acoustic model' whose token log-probabilities are the log-softmax of its input frames."""

    def forward(self, x, lengths):
        return torch.log_softmax(x, -1), lengths


def test_the_transform_undoes_a_speakers_distortion(ten):
    """Frames that say a word's tokens clearly, but for a speaker whose every token shows up one dimension higher:
    all thirty words are wrong; the input transform fitted to their words makes them all right again and lowers
    the CTC loss."""
    n = len(read_tokens(ten / "tokens.txt"))
    saved = SavedModel(TokenReadout(), np.zeros(n, np.float32), np.ones(n, np.float32))
    scorer = IsolatedWordScorer(ten)
    words = TEN * 3
    clean = [np.exp(peaky(word_frames(ten, [w]), n)) * 6 for w in words]
    perm = np.arange(n)
    perm[1:] = np.roll(perm[1:], 1)
    speaker = [x[:, perm] for x in clean]

    def accuracy(inputs):
        return np.mean([scorer.decode([saved.log_probs_of_inputs(x)])[0] == [w] for x, w in zip(inputs, words)])

    assert accuracy(clean) == 1.0 and accuracy(speaker) == 0.0
    lex = read_lexicon_ids(ten)
    targets = [
        best_pronunciations(torch.from_numpy(saved.log_probs_of_inputs(x)), [w], lex) for x, w in zip(speaker, words)
    ]
    res = adapt_speaker(saved, speaker, targets, AdaptConfig(epochs=30, lr=0.05))
    assert res.transform.shape == (n, n + 1) and res.utterances == 30
    assert res.loss_after < 0.1 * res.loss_before
    assert accuracy([apply_transform(res.transform, x) for x in speaker]) == 1.0


def test_best_pronunciations_follow_the_audio(ten):
    """ZERO has two CMUdict pronunciations: the one spoken is chosen, also inside a longer hypothesis."""
    n = len(read_tokens(ten / "tokens.txt"))
    lex = read_lexicon_ids(ten)
    assert len(lex["ZERO"]) == 2
    for pron in lex["ZERO"]:
        frames = [0] + [t for t in pron for _ in range(2)] + [0] + [t for t in lex["SIX"][0] for _ in range(2)] + [0]
        logp = torch.from_numpy(peaky(frames, n))
        assert best_pronunciations(logp, ["ZERO", "SIX"], lex) == pron + lex["SIX"][0]


def _tiny_setup(tmp_path, lang):
    n = len(read_tokens(lang / "tokens.txt"))
    torch.manual_seed(0)
    model = build_model(6, n, ModelConfig(num_layers=1, hidden_size=16, proj_size=0, peephole=False, stack=1))
    save_model(tmp_path / "final.pt", model.eval(), np.zeros(6), np.ones(6))
    rng = np.random.default_rng(0)
    utts = {f"{s}-u{i}": rng.normal(size=(30, 6)).astype(np.float32) for s in ("a", "b") for i in range(3)}
    write_matrices(tmp_path / "feats.ark", utts.items())
    (tmp_path / "utt2spk").write_text("".join(f"{u} {u.split('-')[0]}\n" for u in sorted(utts)))
    hyp = {u: "TWO" for u in utts}
    hyp["b-u2"] = ""
    (tmp_path / "hyp.txt").write_text("".join(f"{u} {h}\n" for u, h in sorted(hyp.items())))
    return utts


def _run(tmp_path, lang, out, *extra):
    return adapt_step.main(
        [
            "--config",
            str(ROOT / "recipes/digits/config.yaml"),
            "--model",
            str(tmp_path / "final.pt"),
            "--feats",
            str(tmp_path / "feats.scp"),
            "--utt2spk",
            str(tmp_path / "utt2spk"),
            "--hyp",
            str(tmp_path / "hyp.txt"),
            "--lang-dir",
            str(lang),
            "--out-dir",
            str(out),
            "--num-threads",
            "1",
            *extra,
        ]
    )


def test_step_writes_transforms_adapted_logprobs_and_exclusions(tmp_path, ten):
    """One transform per speaker (Kaldi's trans.ark layout), every utterance's log-probabilities through its
    speaker's transform, the utterance with an empty first pass listed and not used; zero epochs = identity."""
    utts = _tiny_setup(tmp_path, ten)
    out = tmp_path / "sa"
    assert _run(tmp_path, ten, out) == 0
    trans = MatrixReader(out / "trans.scp")
    assert sorted(trans.keys()) == ["a", "b"] and trans["a"].shape == (6, 7)
    assert not np.allclose(trans["a"], np.hstack([np.eye(6), np.zeros((6, 1))]))
    assert read_table_dict(out / "excluded.txt") == {"b-u2": "empty first-pass hypothesis"}
    import json

    info = json.loads((out / ".done").read_text())
    assert info["speakers"]["b"]["utterances"] == 2 and info["excluded"] == 1
    assert all(s["loss_after"] < s["loss_before"] for s in info["speakers"].values())
    saved = load_model(tmp_path / "final.pt")
    lp = MatrixReader(out / "logprobs.scp")
    assert sorted(lp.keys()) == sorted(utts)
    np.testing.assert_allclose(
        lp["b-u2"], saved.log_probs_of_inputs(apply_transform(trans["b"], utts["b-u2"])), atol=1e-5
    )
    ident = tmp_path / "sa0"
    assert _run(tmp_path, ten, ident, "--set", "adapt.epochs=0") == 0
    np.testing.assert_allclose(MatrixReader(ident / "logprobs.scp")["a-u0"], saved.log_probs(utts["a-u0"]), atol=1e-5)


def test_step_refuses_a_first_pass_of_another_set(tmp_path, ten):
    _tiny_setup(tmp_path, ten)
    (tmp_path / "hyp.txt").write_text("a-u0 TWO\n")
    with pytest.raises(AsrError, match=r"hyp.txt lacks 5 utterance\(s\)"):
        _run(tmp_path, ten, tmp_path / "x")
    (tmp_path / "hyp.txt").write_text("".join(f"{s}-u{i} ELEVEN\n" for s in "ab" for i in range(3)))
    with pytest.raises(AsrError, match="words not in .*lexicon.txt: ELEVEN"):
        _run(tmp_path, ten, tmp_path / "y")
