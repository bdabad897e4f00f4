"""The unidirectional LSTM with a look-ahead convolution (model.lookahead = K): its output for a frame hears exactly
K output frames of the future, a stream that waits K frames gets the whole utterance's log-probs, padding changes
nothing, its latency is K frames more than the plain LSTM's, and the exports that cannot run it say so."""

import pytest
import torch

from asrlib.config import ModelConfig
from asrlib.errors import AsrError
from asrlib.models.latency import algorithmic_latency_ms, latency_parts_ms
from asrlib.models.lstm import LookAhead, build_model

K, S, D = 3, 4, 10


def _model(lookahead=K, proj=0, peephole=False):
    torch.manual_seed(0)
    cfg = ModelConfig(
        num_layers=2, hidden_size=12, proj_size=proj, peephole=peephole, stack=S, lookahead=lookahead, dropout=0.0
    )
    model = build_model(D, 7, cfg).eval()
    if model.lookahead is not None:
        with torch.no_grad():  # trained weights: every offset matters (it starts as the identity)
            model.lookahead.weight.normal_()
    return model


@pytest.mark.parametrize("proj,peephole", [(0, False), (5, True)])
def test_an_output_frame_hears_exactly_k_frames_ahead(proj, peephole):
    model = _model(proj=proj, peephole=peephole)
    x = torch.randn(1, 30 * S, D)
    f = 17 * S + 2  # the 10 ms frame changed: in output frame 17
    y = x.clone()
    y[0, f] += 5.0
    with torch.no_grad():
        a, _ = model(x, torch.tensor([x.shape[1]]))
        b, _ = model(y, torch.tensor([x.shape[1]]))
    moved = (a - b)[0].abs().amax(-1) > 1e-6
    first = int(moved.nonzero()[0])
    assert first == f // S - K  # frame j hears the 10 ms frames up to (j + 1 + K) S - 1
    assert bool(moved[first:].all())


def test_a_stream_that_waits_k_frames_gets_the_whole_utterances_log_probs():
    model = _model()
    x = torch.randn(1, 41 * S + 3, D)
    with torch.no_grad():
        whole, _ = model(x, torch.tensor([x.shape[1]]))
        for p in (K + 1, 9, 20, 33):  # what has arrived: p output frames; out: the frames with K after them
            part, _ = model(x[:, : p * S], torch.tensor([p * S]))
            assert torch.allclose(part[0, : p - K], whole[0, : p - K], atol=1e-5), p


def test_padding_in_a_batch_changes_nothing():
    model = _model()
    xs = [torch.randn(t, D) for t in (40, 97, 61, 16)]
    lens = torch.tensor([len(x) for x in xs])
    with torch.no_grad():
        y, out_lens = model(torch.nn.utils.rnn.pad_sequence(xs, batch_first=True, padding_value=7.0), lens)
        for i, x in enumerate(xs):
            one, _ = model(x[None], lens[i : i + 1])
            assert torch.allclose(y[i, : out_lens[i]], one[0], atol=1e-5)


def test_it_starts_as_the_identity_and_learns_the_future():
    la = LookAhead(4, 2)
    x = torch.randn(2, 9, 4)
    assert torch.equal(la(x, torch.tensor([9, 9])), x)
    la(x, torch.tensor([9, 9])).sum().backward()
    assert bool((la.weight.grad[1:] != 0).all())  # the future offsets get gradient from the start


def test_latency_is_k_frames_more_than_the_plain_lstm():
    plain = ModelConfig(bidirectional=False, stack=4)
    ahead = ModelConfig(bidirectional=False, stack=4, lookahead=6)
    assert algorithmic_latency_ms(plain) == 47.5
    assert latency_parts_ms(ahead)["right_context"] == 240.0
    assert algorithmic_latency_ms(ahead) == 287.5  # as the LC-BLSTM with N = 4, M = 3


def test_a_bidirectional_or_negative_look_ahead_is_refused():
    for cfg in (ModelConfig(bidirectional=True, lookahead=2), ModelConfig(lookahead=-1)):
        with pytest.raises(ValueError, match="model.lookahead"):
            build_model(D, 7, cfg)


def test_the_streaming_export_refuses_it():
    import numpy as np

    from asrlib.export.onnx_model import ScanAcousticModel

    with pytest.raises(AsrError, match="look-ahead"):
        ScanAcousticModel.from_model(_model(), np.zeros(D, np.float32), np.ones(D, np.float32))
