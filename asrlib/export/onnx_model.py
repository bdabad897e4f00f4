"""ONNX export of the LSTM(P) acoustic model as an ONNX ``Scan`` that ONNX Runtime runs fast, for any length.

Why not export ``StackedLstmAcousticModel`` directly: torch's legacy exporter refuses ``nn.LSTM(proj_size=...)``,
and a Python time loop (the peephole cell) is silently unrolled to the traced length by tracing, or specialised to
it by ``dynamo=True`` — both give wrong results on other lengths without an error. Here the recurrence is written
with ``torch._higher_order_ops.scan`` and exported with ``dynamo=True``, which gives one ONNX ``Scan`` whose time
axis is dynamic (checked on two lengths by :func:`verify_onnx`).

The exported network (:class:`ScanAcousticModel`), from raw 80-dim fbank to CTC log-probabilities:

* global CMVN as two graph ops, ``(x - mean) * inv_std`` (no runtime CMVN needed: sherpa-onnx applies none);
  for a model trained with ``features.cmvn: online`` then the causal running-mean normalisation
  (:func:`asrlib.features.cmvn.online_cmn`: a ``CumSum`` over time, its prior weight a constant);
* frame stacking ×``stack`` (also the subsampling), trailing frames that do not fill a stack dropped, as in
  training;
* the LSTM layers, in one of three forms (``recurrence``, below; each in :mod:`asrlib.export.onnx_recurrence`);
* the output layer and log-softmax; with :meth:`ScanAcousticModel.fold_search`, then the recipe's search: minus
  the blank penalty at the blank, times the acoustic scale (sherpa-onnx's CTC graph search has neither setting;
  the metadata says so, and :mod:`asrlib.export.runtime` takes it out again for log-probs).

**Frame-local int8.** ONNX Runtime's dynamic quantization scales activations per *tensor*, so a product over all
frames at once would give every frame a scale that depends on the whole utterance (or on the chunk, when
streaming) — measured: chunked and whole-utterance int8 hypotheses then differ. Every form below therefore gives
each frame's activations a scale that depends on that frame only (or a constant one), so streaming equals
whole-utterance decoding, bit for bit, in int8 too (for one utterance per call: in a batch the per-frame scale
covers the batch's frames of that time step).

``recurrence`` (keyword of :meth:`ScanAcousticModel.from_model`; metadata ``recurrence``):

* ``hybrid`` (the default where possible: no recurrent projection): layer 0 runs per frame inside a ``Scan``
  as one ONNX ``LSTM`` node (one time step; its input is unbounded CMVN'd fbank, quantized per frame). Layers
  1.. run as ONE ``LSTM`` node each over all frames, and so does the output layer (a MatMul): their input is the
  previous layer's output h, |h| ≤ 1, with two constant columns ±b appended (zero weights; b = 1 + 2^-10, as
  ORT's Tanh/Sigmoid approximations overshoot 1 by up to 2e-7, measured): the per-tensor int8 range is then
  exactly [-b, b] for any frames, i.e. a fixed activation scale (2b/255); their recurrent state is quantized
  per time step inside the node. A low-rank bottleneck of layers 1.. (its output
  is not bounded) is folded into W_ih (W_ih·W_in: larger; on the pruned digits model +0.2 MB int8). int8: ORT's
  ``DynamicQuantizeLSTM`` (:func:`asrlib.export.quantize.quantize_lstm_nodes`).
* ``lstm``: every layer per frame inside the Scan, one ``LSTM`` node each (bottlenecks kept as MatMuls).
* ``ops``: the cell as elementwise ops inside the Scan (every matrix product per frame; with ``frame_local=False``
  layer 0's input transform and the output layer are hoisted out of the loop, float-only use). The only form
  for LSTMP (recurrent projection: ONNX's LSTM node has none), chosen automatically there. Without peepholes
  the gate rows are reordered to (i, f, o, g) so one Sigmoid covers three gates; with peepholes the cell is
  Kaldi's LSTMP as in :class:`asrlib.models.lstm.LstmpLayer`.

Why (digits model, 3×256 LSTM; 1 thread on a shared 2-core AMD EPYC, AVX2 without VNNI; fp32 and int8 of the
same export interleaved per utterance over the 300 test utterances, median of 5-7 rounds, several runs): per
frame, ``ops`` runs ~34 ONNX nodes (7 products + 27 elementwise/split ops); in int8 the fixed cost of a node
(dispatch, on-the-fly activation quantization) weighs as much as the int8 products, so int8 is only 2.0-2.1×
faster than fp32. An ``LSTM`` node does a layer's step in one kernel call: ``lstm`` 2.3-2.4×; ``hybrid``, where
only layer 0 pays per-frame calls and the upper layers' input products are one GEMM over all frames, 2.5-2.7×
(and in absolute terms fp32 1.5×, int8 1.9× faster than ``ops``; same int8 WER). Also measured, not kept: one
product [x; h]·[W_ih | W_hh] per layer with elementwise gates (2.2-2.3×).

Two signatures:

* **offline** (sherpa-onnx's ``zipformer2_ctc`` contract): inputs ``x`` (N, T, F) float32 and ``x_lens`` (N,)
  int64; outputs ``log_probs`` (N, T // stack, V) and ``log_probs_len`` = ``x_lens // stack`` (int64). Padding
  after an utterance's end never changes its valid frames (unidirectional recurrence).
* **streaming**: inputs ``x`` (N, T, F) plus the carried state ``h`` (L, N, P) and ``c`` (L, N, H); outputs
  ``log_probs``, ``h_out``, ``c_out``. With online CMN the state also holds ``cmn_sum`` (N, F: the sum of the
  globally normalised frames so far) and ``cmn_count`` (N, 1: their number), outputs ``cmn_sum_out``,
  ``cmn_count_out``; all zeros at the start. Feeding chunks whose lengths are multiples of ``stack`` and passing
  the state on gives exactly the offline result (:mod:`asrlib.export.streaming`).

Model metadata (``metadata_props``): ``model_type`` = ``asrlib_lstm_ctc``, ``version``, ``feat_dim``,
``sample_rate``, ``frame_shift_ms``, ``subsampling``, ``vocab_size``, ``num_layers``, ``hidden_size``,
``state_size`` (P), ``peephole``, ``cmvn`` = ``folded`` (or ``folded+online`` with ``online_prior_frames``),
``streaming`` (0/1), ``frame_local`` (0/1), ``recurrence``, ``fbank`` (the front-end settings).
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from asrlib.export.onnx_recurrence import make_recurrence, pick_recurrence
from asrlib.export.onnx_weights import LayerWeights, layer_weights
from asrlib.export.runtime import (
    ONLINE_CMN_STATE,
    OnnxAcousticModel,  # noqa: F401 - re-exported: steps.export_mobile and bench/mobile.py import it from here
    check_features,  # noqa: F401
    folded_search,
    model_metadata,
    ort_session,
)
from asrlib.decode.search_scores import undo_search
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_path

log = logging.getLogger(__name__)

MODEL_TYPE = "asrlib_lstm_ctc"
EXPORT_VERSION = 1
OPSET = 18
FBANK_SETTINGS = (
    "kaldi-native-fbank / lhotse Fbank: povey window 25 ms, shift 10 ms, dither 0, snip_edges false, "
    "low_freq 20, high_freq -400, preemph 0.97, remove_dc_offset, log power mel, no CMVN"
)


class ScanAcousticModel(nn.Module):
    """The exportable network (see the module docstring); built from a trained model with :meth:`from_model`."""

    def __init__(
        self,
        layers: Sequence[LayerWeights],
        out_weight: torch.Tensor,
        out_bias: torch.Tensor,
        cmvn_mean: np.ndarray,
        cmvn_inv_std: np.ndarray,
        stack: int,
        frame_local: bool = True,
        recurrence: str = "auto",
        online_prior: Optional[float] = None,
    ):
        super().__init__()
        self.frame_local = frame_local
        self.online_prior = None if online_prior is None else float(online_prior)  # features.cmvn: online
        self._exporting = False  # True while export_onnx traces: LSTM nodes are emitted instead of torch ops
        self.search_scale, self.search_penalty = 1.0, 0.0  # fold_search: the search the output carries
        if not layers:
            raise AsrError("the model has no LSTM layers")
        self.num_layers, self.stack = len(layers), int(stack)
        self.hidden = [lw.hidden for lw in layers]
        self.states = [lw.state for lw in layers]
        if len(set(self.hidden)) != 1 or len(set(self.states)) != 1:
            raise AsrError("export needs all layers to have the same hidden and projection sizes")
        self.H, self.P = self.hidden[0], self.states[0]
        self.peephole = layers[0].peep is not None
        if any((lw.peep is not None) != self.peephole for lw in layers):
            raise AsrError("export needs peepholes on all layers or on none")
        self.feat_dim = int(np.asarray(cmvn_mean).shape[-1])
        self.vocab_size = int(out_weight.shape[0])
        self.register_buffer("cmvn_mean", torch.as_tensor(np.asarray(cmvn_mean, np.float32)).reshape(-1))
        self.register_buffer("cmvn_inv_std", torch.as_tensor(np.asarray(cmvn_inv_std, np.float32)).reshape(-1))
        self.recurrence = pick_recurrence(recurrence, frame_local, [lw.w_hr is not None for lw in layers])
        self.form = make_recurrence(self.recurrence, layers, frame_local)  # lays out the weights, runs the layers
        for name, tensor in self.form.buffers(layers, out_weight, out_bias).items():
            self.register_buffer(name, tensor)

    @classmethod
    def from_model(
        cls,
        model: nn.Module,
        cmvn_mean: np.ndarray,
        cmvn_inv_std: np.ndarray,
        frame_local: bool = True,
        recurrence: str = "auto",
        online_prior: Optional[float] = None,
    ) -> "ScanAcousticModel":
        """From a :class:`~asrlib.models.lstm.StackedLstmAcousticModel` (possibly compressed by
        :mod:`asrlib.export.prune`) and its CMVN (``online_prior``: the prior weight of its online CMN, None
        without); ``frame_local``: every matrix product inside the loop (for ``recurrence`` ``ops``);
        ``recurrence``: see the module docstring."""
        if getattr(model, "lookahead", None) is not None:
            raise AsrError(
                "a model with a look-ahead convolution (model.lookahead) exports as a chunk model "
                "(asrlib.export.lc_onnx, as stage 7 does), not as this frame-by-frame one"
            )
        layers = [layer_weights(layer) for layer in model.layers]
        out = model.output
        return cls(
            layers,
            out.weight.detach().clone(),
            out.bias.detach().clone(),
            cmvn_mean,
            cmvn_inv_std,
            model.stack,
            frame_local,
            recurrence,
            online_prior,
        )

    # ------------------------------------------------------------------ the network
    def _normalise(
        self, x: torch.Tensor, cmn_sum: Optional[torch.Tensor] = None, cmn_count: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, ...]:
        """Raw fbank x (N, T, F) → (the network's input, ) and, with online CMN, the running sum (N, F) and frame
        count (N, 1) after x, continued from those before x (None: the utterance's start)."""
        z = (x - self.cmvn_mean) * self.cmvn_inv_std
        if self.online_prior is None:
            return (z,)
        if cmn_sum is None:
            cmn_sum, cmn_count = x.new_zeros(x.shape[0], self.feat_dim), x.new_zeros(x.shape[0], 1)
        # the running sum continued from cmn_sum, in the same order as over the whole utterance (0 + z0 + z1 ...):
        # chunked and whole give the same float32 sums, bit for bit
        sums = torch.cumsum(torch.cat([cmn_sum.unsqueeze(1), z], dim=1), dim=1)[:, 1:]
        counts = torch.cumsum(torch.ones_like(z[:, :, :1]), dim=1) + cmn_count.unsqueeze(1)
        return z - sums / (counts + self.online_prior), sums[:, -1], counts[:, -1]

    def _run(self, x: torch.Tensor, h0: List[torch.Tensor], c0: List[torch.Tensor]):
        """x: (N, T, F) normalised fbank (:meth:`_normalise`) → log-probs (N, T // stack, V), final (h, c) per
        layer: frames stacked ×``stack`` (trailing frames that do not fill a stack dropped), then the layers in
        their form (:mod:`asrlib.export.onnx_recurrence`)."""
        n, t, d = x.shape
        t_out = t // self.stack
        x = x[:, : t_out * self.stack].reshape(n, t_out, d * self.stack)
        return self.form.run(x, h0, c0, dict(self.named_buffers()), self._exporting)

    def fold_search(self, acoustic_scale: float, blank_penalty: float) -> "ScanAcousticModel":
        """Make the output carry a search's settings: ``(log_softmax - blank_penalty at the blank) *
        acoustic_scale``, so that a runtime that searches the output as it is (sherpa-onnx) searches as the recipe's
        decode stage does. (1.0, 0.0): plain log-probs."""
        if not acoustic_scale > 0:
            raise AsrError(f"the acoustic scale to fold into the model must be > 0, got {acoustic_scale}")
        self.search_scale, self.search_penalty = float(acoustic_scale), float(blank_penalty)
        return self

    def _fold(self, logp: torch.Tensor) -> torch.Tensor:
        if (self.search_scale, self.search_penalty) == (1.0, 0.0):
            return logp
        shift = torch.zeros(self.vocab_size, dtype=logp.dtype)
        shift[0] = self.search_penalty
        return (logp - shift) * self.search_scale

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Offline: x (N, T, F), x_lens (N,) → log_probs (N, T // stack, V), log_probs_len (N,)."""
        n = x.shape[0]
        h0 = [x.new_zeros(n, self.P) for _ in range(self.num_layers)]
        c0 = [x.new_zeros(n, self.H) for _ in range(self.num_layers)]
        logp, _, _ = self._run(self._normalise(x)[0], h0, c0)
        return self._fold(logp), torch.div(x_lens, self.stack, rounding_mode="floor")

    def step(
        self,
        x: torch.Tensor,
        h: torch.Tensor,
        c: torch.Tensor,
        cmn_sum: Optional[torch.Tensor] = None,
        cmn_count: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, ...]:
        """Streaming: x (N, T, F), h (L, N, P), c (L, N, H) [, cmn_sum (N, F), cmn_count (N, 1): online CMN]
        → log_probs, h_out, c_out [, cmn_sum_out, cmn_count_out]."""
        z, *cmn_state = self._normalise(x, cmn_sum, cmn_count)  # cmn_state: [] without online CMN
        logp, hs, cs = self._run(z, [s.clone() for s in h.unbind(0)], [c_.clone() for c_ in c.unbind(0)])
        return (self._fold(logp), torch.stack(hs, 0), torch.stack(cs, 0), *cmn_state)

    def zero_state(self, batch: int = 1) -> Tuple[np.ndarray, ...]:
        """The streaming signature's state inputs at an utterance's start (h, c [, cmn_sum, cmn_count])."""
        hc = (
            np.zeros((self.num_layers, batch, self.P), np.float32),
            np.zeros((self.num_layers, batch, self.H), np.float32),
        )
        if self.online_prior is None:
            return hc
        return hc + (np.zeros((batch, self.feat_dim), np.float32), np.zeros((batch, 1), np.float32))

    def metadata(self, sample_rate: int = 16000, streaming: bool = False) -> Dict[str, str]:
        return {
            "model_type": MODEL_TYPE,
            "version": str(EXPORT_VERSION),
            "feat_dim": str(self.feat_dim),
            "sample_rate": str(sample_rate),
            "frame_shift_ms": "10",
            "subsampling": str(self.stack),
            "vocab_size": str(self.vocab_size),
            "num_layers": str(self.num_layers),
            "hidden_size": str(self.H),
            "state_size": str(self.P),
            "peephole": str(int(self.peephole)),
            "cmvn": "folded" if self.online_prior is None else "folded+online",
            **({} if self.online_prior is None else {"online_prior_frames": str(self.online_prior)}),
            "streaming": str(int(streaming)),
            "frame_local": str(int(self.frame_local)),
            "recurrence": self.recurrence,
            "fbank": FBANK_SETTINGS,
            **(
                {}
                if (self.search_scale, self.search_penalty) == (1.0, 0.0)
                else {
                    "search_acoustic_scale": repr(self.search_scale),
                    "search_blank_penalty": repr(self.search_penalty),
                }
            ),
        }


# ---------------------------------------------------------------------------------------------- export
def dynamo_onnx(module: nn.Module, args: tuple, names_in: List[str], names_out: List[str], dyn: dict):
    """``module`` exported by torch's dynamo exporter at :data:`OPSET` with its chatter silenced (loggers, warnings,
    stdout), then without debug metadata and unread LSTM outputs: the ONNX ModelProto."""
    quiet = [logging.getLogger(n) for n in ("torch.onnx", "onnx_ir", "onnxscript")]
    levels = [lg.level for lg in quiet]
    for lg in quiet:
        lg.setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            prog = torch.onnx.export(
                module,
                args,
                None,
                dynamo=True,
                input_names=names_in,
                output_names=names_out,
                dynamic_shapes=dyn,
                opset_version=OPSET,
                verbose=False,
            )
        finally:
            for lg, lv in zip(quiet, levels):
                lg.setLevel(lv)
    proto = prog.model_proto
    strip_debug_info(proto)
    drop_unused_lstm_outputs(proto)
    return proto


def save_onnx(proto, path: PathLike) -> Path:
    """``proto`` written to ``path`` atomically, weights inside the file."""
    import onnx

    path = Path(path)
    with atomic_path(path) as tmp:
        onnx.save_model(proto, str(tmp), save_as_external_data=False)
    return path


def strip_debug_info(model) -> None:
    """Remove the exporter's per-node debug metadata (Python stack traces with local paths, FX node text): about
    as many bytes as a small model's weights, and nothing a runtime uses."""
    from asrlib.export.quantize import _graphs

    for g in _graphs(model.graph):
        for node in g.node:
            del node.metadata_props[:]
            node.doc_string = ""


def drop_unused_lstm_outputs(model) -> None:
    """Name LSTM nodes after their W (``lstm_W0``...) and unname their outputs that nothing reads (the per-frame
    node's Y, final states of the offline signature): ORT then does not write them."""
    from asrlib.export.quantize import _graphs

    graphs = list(_graphs(model.graph))
    used = {i for g in graphs for n in g.node for i in n.input} | {o.name for g in graphs for o in g.output}
    for g in graphs:
        for node in g.node:
            if node.op_type == "LSTM":
                node.name = f"lstm_{node.input[1]}"
                for j, name in enumerate(node.output):
                    if name and name not in used:
                        node.output[j] = ""


class _Streaming(nn.Module):
    """The streaming signature of a :class:`ScanAcousticModel` (its ``step``) as a module for export."""

    def __init__(self, core: ScanAcousticModel):
        super().__init__()
        self.core = core

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        return self.core.step(x, h, c)


class _StreamingOnline(_Streaming):
    """The same with the online CMN's state (``cmn_sum``, ``cmn_count``) carried too."""

    def forward(
        self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, cmn_sum: torch.Tensor, cmn_count: torch.Tensor
    ):
        return self.core.step(x, h, c, cmn_sum, cmn_count)


def export_onnx(m: ScanAcousticModel, path: PathLike, streaming: bool = False, sample_rate: int = 16000) -> Path:
    """Export ``m`` (offline or streaming signature) to one self-contained ONNX file (no external data:
    sherpa-onnx loads the model from memory)."""
    import onnx

    m = m.eval()
    batch = torch.export.Dim("N", min=1, max=1024)
    time_ = torch.export.Dim("T", min=1, max=10_000_000)
    # example batch 2 and an unremarkable length, so neither dimension is specialised by torch.export
    t = 17 * m.stack
    x = torch.randn(2, t, m.feat_dim)
    if streaming:
        module = _Streaming(m) if m.online_prior is None else _StreamingOnline(m)
        args = (x, *(torch.from_numpy(a) for a in m.zero_state(2)))  # h, c [, cmn_sum, cmn_count]
        names_in, names_out = ["x", "h", "c"], ["log_probs", "h_out", "c_out"]
        dyn = {"x": {0: batch, 1: time_}, "h": {1: batch}, "c": {1: batch}}
        if m.online_prior is not None:
            names_in += ONLINE_CMN_STATE
            names_out += [f"{n}_out" for n in ONLINE_CMN_STATE]
            dyn.update({n: {0: batch} for n in ONLINE_CMN_STATE})
    else:
        module = m
        args = (x, torch.tensor([t, t - 4], dtype=torch.int64))
        names_in, names_out = ["x", "x_lens"], ["log_probs", "log_probs_len"]
        dyn = {"x": {0: batch, 1: time_}, "x_lens": {0: batch}}
    m._exporting = True
    try:
        proto = dynamo_onnx(module, args, names_in, names_out, dyn)
    finally:
        m._exporting = False
    onnx.helper.set_model_props(proto, m.metadata(sample_rate, streaming))
    return save_onnx(proto, path)


# ---------------------------------------------------------------------------------------------- checks
def torch_reference(
    model: nn.Module,
    cmvn_mean: np.ndarray,
    cmvn_inv_std: np.ndarray,
    feats: np.ndarray,
    lens: np.ndarray,
    online_prior: Optional[float] = None,
) -> np.ndarray:
    """The PyTorch model's log-probs for raw fbank ``feats`` (N, T, F) with lengths ``lens``, normalised as in
    training (asrlib.features.cmvn.Cmvn; ``online_prior``: with online CMN)."""
    from asrlib.features.cmvn import Cmvn

    cmvn = Cmvn(np.asarray(cmvn_mean, np.float32), np.asarray(cmvn_inv_std, np.float32), online_prior)
    x = torch.from_numpy(np.stack([cmvn.apply(np.asarray(f, np.float32)) for f in feats]))
    with torch.no_grad():
        logp, _ = model.eval()(x, torch.from_numpy(np.asarray(lens, np.int64)))
    return logp.numpy()


def verify_onnx(
    path: PathLike,
    model: nn.Module,
    cmvn_mean: np.ndarray,
    cmvn_inv_std: np.ndarray,
    lengths: Sequence[int] = (123, 457),
    tol: float = 1e-4,
    seed: int = 0,
    online_prior: Optional[float] = None,
) -> float:
    """Max |ONNX − PyTorch| over valid log-prob frames for a batch of 2 at each of ``lengths`` (≥ 2 lengths:
    a graph specialised to one length fails here); AsrError above ``tol``. Inputs are random fbank-like frames
    around the CMVN mean."""
    if len(set(lengths)) < 2:
        raise ValueError("verify on at least two different lengths")
    sess = ort_session(path)
    search = folded_search(model_metadata(sess))  # compared as log-probs
    names = [i.name for i in sess.get_inputs()]
    rng = np.random.default_rng(seed)
    std = 1.0 / np.asarray(cmvn_inv_std, np.float32)
    stack = model.stack
    worst = 0.0
    for t in lengths:
        x = (np.asarray(cmvn_mean, np.float32) + rng.normal(0, 1, (2, t, len(std))) * std).astype(np.float32)
        lens = np.array([t, max(stack, t - 2 * stack - 1)], np.int64)
        ref = torch_reference(model, cmvn_mean, cmvn_inv_std, x, lens, online_prior)
        if names[1] == "x_lens":
            got, got_lens = sess.run(None, {"x": x, "x_lens": lens})
            if not np.array_equal(got_lens, lens // stack):
                raise AsrError(f"{path}: log_probs_len {got_lens} != x_lens // {stack} = {lens // stack}")
        else:  # streaming signature, zero initial state (the batch axis of h and c is 1, of the CMN state 0)
            feeds = {"x": x}
            for i in sess.get_inputs()[1:]:
                shape = [2 if isinstance(d, str) else d for d in i.shape]
                feeds[i.name] = np.zeros(shape, np.float32)
            got = sess.run(None, feeds)[0]
        got = undo_search(got, *search)
        if got.shape[1] != ref.shape[1]:
            raise AsrError(f"{path}: {got.shape[1]} output frames for {t} input frames, PyTorch gives {ref.shape[1]}")
        for b in range(2):
            n = int(lens[b]) // stack
            worst = max(worst, float(np.abs(got[b, :n] - ref[b, :n]).max()) if n else 0.0)
    if worst > tol:
        raise AsrError(f"{path}: ONNX output differs from PyTorch by {worst:.2e} (> {tol:.0e}); the export is wrong")
    return worst
